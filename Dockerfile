# syntax=docker/dockerfile:1
# One image for every gpupair subcommand (deploy/ runs it as `gpupair extender`, `gpupair reporter`,
# `gpupair webhook`, `gpupair certs`; the webhook injects it as `gpupair verify`).
#   docker build -t ghcr.io/gpupair/gpupair:0.2.0 .
# Both stages use the same base, so the venv's python symlink resolves in the final image.
ARG PYTHON_IMAGE=python:3.11-slim

# ---- builder: gpupair's dependencies, then its wheel, installed into a venv without pip
FROM ${PYTHON_IMAGE} AS builder
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_ROOT_USER_ACTION=ignore
WORKDIR /src
# The dependencies first, from pyproject.toml alone: this layer is rebuilt when pyproject.toml
# changes, not on every source change. Their versions are pinned by constraints.txt (refreshed
# with scripts/refresh-constraints.sh), so two builds of one commit install the same packages.
# The venv gets no pip, setuptools or wheel of its own (image scanners flag them; nothing
# installs at run time): the builder's pip installs into it through --python. Every dependency
# ships manylinux wheels, so no compiler is needed.
COPY pyproject.toml constraints.txt ./
RUN python -m venv --without-pip /opt/gpupair \
 && python -c "import tomllib; print(*tomllib.load(open('pyproject.toml', 'rb'))['project']['dependencies'], sep='\n')" \
      > /tmp/requirements.txt \
 && python -m pip --python /opt/gpupair/bin/python install --requirement /tmp/requirements.txt \
      --constraint constraints.txt
COPY README.md ./
COPY gpupair/ gpupair/
COPY extender/ extender/
COPY reporter/ reporter/
COPY webhook/ webhook/
COPY verifier/ verifier/
COPY simulator/ simulator/
COPY audit/ audit/
COPY status/ status/
COPY snapshot/ snapshot/
COPY defrag/ defrag/
RUN python -m pip wheel --no-deps --wheel-dir /wheels . \
 && python -m pip --python /opt/gpupair/bin/python install --no-deps /wheels/*.whl

# ---- final: the base image, the venv, a working directory the user can write, nothing else
FROM ${PYTHON_IMAGE}
LABEL org.opencontainers.image.title="gpupair" \
      org.opencontainers.image.description="Keep multi-GPU Kubernetes pods on one NUMA node and show which GPUs each pod got" \
      org.opencontainers.image.licenses="Apache-2.0"
# The base image's own installer is not needed either (the variable keeps pip from warning
# about running as root on its way out). `gpupair simulate` writes its TSV files to the working
# directory, so the user owns one; HOME stays /tmp, the directory the manifests mount writable
# under readOnlyRootFilesystem.
RUN PIP_ROOT_USER_ACTION=ignore PIP_DISABLE_PIP_VERSION_CHECK=1 python -m pip uninstall --yes --quiet pip setuptools wheel \
 && install -d -o 65532 -g 65532 -m 0755 /home/gpupair
WORKDIR /home/gpupair
COPY --from=builder /opt/gpupair /opt/gpupair
ENV PATH=/opt/gpupair/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    HOME=/tmp
# Numeric, so Kubernetes' runAsNonRoot can check it; the reporter alone overrides it (see
# deploy/base/reporter/daemonset.yaml).
USER 65532:65532
ENTRYPOINT ["gpupair"]
CMD ["--help"]
