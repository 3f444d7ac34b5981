"""Pods and waits the control-plane tests share."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from gpupair.topology.report import FREE_KEY
from tests.controlplane.api import Api
from tests.controlplane.kubelet import DEVICES_HINT, GPU

PAUSE_IMAGE = "registry.k8s.io/pause:3.10"  # never pulled: no kubelet runs it
SEED_TOPO = Path(__file__).resolve().parent.parent / "fixtures" / "topo" / "seed-5090d.txt"  # the field report's node
# 8x RTX A6000 with NVLink bridges on 0+1, 2+3, 4+5, 6+7 (tests/fixtures/topo/SOURCES.md)
A6000_TOPO = SEED_TOPO.parent / "unige-3741-8x-a6000-nvlink.txt"


def gpu_pod(namespace: str, name: str, gpus: int, *, node: str = "", devices: tuple[int, ...] = (),
            annotations: dict[str, str] | None = None, resource: str = GPU) -> dict[str, Any]:
    """A one-container pod asking ``gpus`` (as a limit, which the apiserver copies to requests);
    ``node``: pinned with spec.nodeName (no scheduler); ``devices``: the harness kubelet hands it
    exactly those (other tenants' pods holding known GPUs)."""
    meta: dict[str, Any] = {"name": name, "namespace": namespace, "annotations": dict(annotations or {})}
    if devices:
        meta["annotations"][DEVICES_HINT] = ",".join(map(str, devices))
    spec: dict[str, Any] = {
        "containers": [{"name": "main", "image": PAUSE_IMAGE,
                        "resources": {"limits": {resource: str(gpus)}} if gpus else {}}],
        "terminationGracePeriodSeconds": 0,
    }
    if node:
        spec["nodeName"] = node
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}


def with_cpu(pod: dict[str, Any], cpu: str) -> dict[str, Any]:
    """``pod`` with its first container requesting ``cpu``."""
    resources = pod["spec"]["containers"][0].setdefault("resources", {})
    resources.setdefault("requests", {})["cpu"] = cpu
    return pod


def reported_free(api: Api, node: str) -> list[int] | None:
    """The free GPUs the node's reporter last published (None before its first report)."""
    annotations = api.get("v1", "Node", node)["metadata"].get("annotations") or {}
    raw = annotations.get(FREE_KEY)
    return sorted(json.loads(raw)["free"]) if raw else None


def wait_reported(api: Api, expected: dict[str, set[int]], timeout: float = 30.0) -> None:
    """Until every node's report shows exactly the expected free GPUs."""
    api.wait_for(lambda: all(reported_free(api, n) == sorted(free) for n, free in expected.items()) or None,
                 timeout, f"reports showing free GPUs {({n: sorted(f) for n, f in expected.items()})}: "
                 f"{ {n: reported_free(api, n) for n in expected} }")


def wait_gone(api: Api, namespace: str, names: list[str], timeout: float = 30.0) -> None:
    api.wait_for(lambda: not any(api.find("v1", "Pod", n, namespace) for n in names), timeout,
                 f"pods {names} deleted")


def scheduling_failures(api: Api, namespace: str, pod: str) -> list[str]:
    """The messages of the pod's FailedScheduling events, oldest first."""
    events = api.list("v1", "Event", namespace, field_selector=f"involvedObject.name={pod}")
    events += api.list("events.k8s.io/v1", "Event", namespace, field_selector=f"regarding.name={pod}")
    messages = [e.get("message") or e.get("note") or "" for e in events if e.get("reason") == "FailedScheduling"]
    return messages


def pending_for(api: Api, namespace: str, names: list[str], seconds: float) -> list[str]:
    """Of ``names``, those still unbound after ``seconds`` more."""
    time.sleep(seconds)
    return [n for n in names if not (api.get("v1", "Pod", n, namespace)["spec"].get("nodeName"))]


VERDICT_KEYS = ("gpupair.io/granted", "gpupair.io/numa", "gpupair.io/link", "gpupair.io/verdict")


def wait_verdict(api: Api, namespace: str, pod: str, timeout: float = 10.0) -> dict[str, str]:
    """The pod's annotations once its verdict is written (the reporter writes them all in one patch)."""
    def annotations() -> dict[str, str] | None:
        found = api.get("v1", "Pod", pod, namespace)["metadata"].get("annotations") or {}
        return found if all(k in found for k in VERDICT_KEYS) else None

    return api.wait_for(annotations, timeout, f"the verdict on {namespace}/{pod}")
