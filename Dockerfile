# syntax=docker/dockerfile:1
# One image for every gpupair subcommand (deploy/ runs it as `gpupair extender`, `gpupair reporter`,
# `gpupair webhook`, `gpupair certs`; the webhook injects it as `gpupair verify`).
#   docker build -t ghcr.io/gpupair/gpupair:0.1.0 .
# Both stages use the same base, so the venv's python symlink resolves in the final image.
ARG PYTHON_IMAGE=python:3.11-slim

# ---- builder: build gpupair's wheel and install it, with its dependencies, into a venv
FROM ${PYTHON_IMAGE} AS builder
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_ROOT_USER_ACTION=ignore
WORKDIR /src
COPY pyproject.toml README.md ./
COPY gpupair/ gpupair/
COPY extender/ extender/
COPY reporter/ reporter/
COPY webhook/ webhook/
COPY verifier/ verifier/
COPY simulator/ simulator/
COPY audit/ audit/
COPY status/ status/
# Every dependency ships manylinux wheels, so no compiler is needed even here. pip is removed
# from the venv afterwards: nothing installs at run time.
RUN python -m pip wheel --no-deps --wheel-dir /wheels . \
 && python -m venv /opt/gpupair \
 && /opt/gpupair/bin/pip install /wheels/*.whl \
 && /opt/gpupair/bin/pip uninstall --yes pip

# ---- final: the base image, the venv, nothing else
FROM ${PYTHON_IMAGE}
LABEL org.opencontainers.image.title="gpupair" \
      org.opencontainers.image.description="Keep multi-GPU Kubernetes pods on one NUMA node and show which GPUs each pod got" \
      org.opencontainers.image.licenses="Apache-2.0"
# The base image's own installer is not needed either.
RUN python -m pip uninstall --yes pip setuptools wheel
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
