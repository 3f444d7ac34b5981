"""Render deploy/ with `kubectl kustomize` and walk the result (helpers for the deploy tests)."""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parent.parent
DEPLOY = REPO / "deploy"
OVERLAYS = sorted(p.name for p in (DEPLOY / "overlays").iterdir() if (p / "kustomization.yaml").exists())
KUBECTL = shutil.which("kubectl") or ("/usr/bin/kubectl" if os.path.exists("/usr/bin/kubectl") else None)

needs_kubectl = pytest.mark.skipif(
    KUBECTL is None,
    reason="kubectl not found on PATH or at /usr/bin/kubectl: the kustomize renders of deploy/ are not tested here",
)

WORKLOAD_KINDS = {"Deployment", "DaemonSet", "StatefulSet", "Job", "CronJob", "ReplicaSet", "Pod"}


def kustomize(directory: Path) -> list[dict[str, Any]]:
    """`kubectl kustomize DIR` as a list of objects; a failed build fails the test with kustomize's
    own message."""
    result = subprocess.run([KUBECTL, "kustomize", str(directory)], capture_output=True, text=True, timeout=120)
    if result.returncode != 0:
        pytest.fail(f"kubectl kustomize {directory} failed:\n{result.stderr}")
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]


@functools.lru_cache(maxsize=None)
def _render_cached(overlay: str) -> tuple[str, ...]:
    return tuple(yaml.safe_dump(d) for d in kustomize(DEPLOY / "overlays" / overlay))


def render(overlay: str) -> list[dict[str, Any]]:
    """A fresh (mutable) copy of the rendered overlay; the kustomize run itself is cached."""
    return [yaml.safe_load(text) for text in _render_cached(overlay)]


def render_consumer(tmp_path: Path, kustomization: dict[str, Any], files: dict[str, Any] | None = None
                    ) -> list[dict[str, Any]]:
    """Render a kustomization an operator would write in their own repository, referring to
    deploy/ by relative path (kustomize refuses absolute ones). ``kustomization`` values may use
    "{deploy}" for that path."""
    rel = os.path.relpath(DEPLOY, tmp_path)
    text = yaml.safe_dump(kustomization).replace("{deploy}", rel)
    (tmp_path / "kustomization.yaml").write_text(text)
    for name, obj in (files or {}).items():
        (tmp_path / name).write_text(yaml.safe_dump(obj))
    return kustomize(tmp_path)


def find(objs: list[dict], kind: str, name: str, namespace: str | None = None) -> dict:
    matches = [o for o in objs if o["kind"] == kind and o["metadata"]["name"] == name
               and (namespace is None or o["metadata"].get("namespace") == namespace)]
    assert len(matches) == 1, f"expected one {kind} {name}, found {len(matches)}"
    return matches[0]


def of_kind(objs: list[dict], kind: str) -> list[dict]:
    return [o for o in objs if o["kind"] == kind]


def pod_spec(workload: dict) -> dict:
    if workload["kind"] == "Pod":
        return workload["spec"]
    if workload["kind"] == "CronJob":
        return workload["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    return workload["spec"]["template"]["spec"]


def workloads(objs: list[dict]) -> list[dict]:
    return [o for o in objs if o["kind"] in WORKLOAD_KINDS]


def containers(spec: dict) -> Iterator[tuple[str, dict]]:
    """(list name, container) for every container, init container and ephemeral container."""
    for field in ("initContainers", "containers", "ephemeralContainers"):
        for c in spec.get(field) or []:
            yield field, c


def env_of(container: dict) -> dict[str, Any]:
    """name -> value (or the valueFrom mapping)."""
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container.get("env") or []}


def container(objs: list[dict], kind: str, name: str, container_name: str) -> dict:
    spec = pod_spec(find(objs, kind, name))
    return next(c for _, c in containers(spec) if c["name"] == container_name)


# --------------------------------------------------------------------------- the Helm chart

CHART = REPO / "charts" / "gpupair"
# The cluster version `helm template` renders for: the control plane tests/controlplane runs, whose
# kube-scheduler image deploy/ pins (the chart's default follows the cluster's version).
KUBE_VERSION = "v1.36.2"
# Labels only Helm adds; everything else must be what deploy/ renders.
HELM_LABELS = frozenset({"app.kubernetes.io/managed-by", "app.kubernetes.io/instance", "app.kubernetes.io/version",
                         "helm.sh/chart"})


def helm(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    """The real helm 4 (tests/k8s_tools.py finds it; skips, or fails with CI=true, without one)."""
    from tests.k8s_tools import helm_path, require

    result = subprocess.run([require("helm", helm_path()), *args], capture_output=True, text=True, timeout=120)
    if check and result.returncode != 0:
        pytest.fail(f"helm {' '.join(args)} failed:\n{result.stderr}")
    return result


@functools.lru_cache(maxsize=None)
def _helm_template_cached(values_json: str, release: str, namespace: str) -> tuple[str, ...]:
    import tempfile

    with tempfile.NamedTemporaryFile("w", suffix=".json") as values:
        values.write(values_json)
        values.flush()
        out = helm("template", release, str(CHART), "--namespace", namespace, "--values", values.name,
                   "--kube-version", KUBE_VERSION).stdout
    return tuple(yaml.safe_dump(d) for d in yaml.safe_load_all(out) if d)


def helm_template(values: dict[str, Any] | None = None, *, release: str = "gpupair",
                  namespace: str = "gpupair-system") -> list[dict[str, Any]]:
    """`helm template` of charts/gpupair under ``values`` into ``namespace`` (the release's, as
    `helm install -n`), as a fresh list of objects (cached)."""
    import json

    return [yaml.safe_load(text) for text in
            _helm_template_cached(json.dumps(values or {}, sort_keys=True), release, namespace)]
