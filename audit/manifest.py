"""The audit's test pod: the seed's minimal pod, labelled so a run can find and remove its pods.

Same command and resources as the seed (``restartPolicy: Never``, one ``cuda`` container running
the two nvidia-smi commands, requests = limits = N GPUs, ``nodeName`` only when a node is named).
Added: labels, a GPU-taint toleration for scheduler-placed pods, no service-account token, and a
restricted security context (nvidia-smi needs no root: the runtime hook sets up the device nodes).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gpupair.topology.report import PREFIX

RUN_LABEL = PREFIX + "audit-run"
ROUND_LABEL = PREFIX + "audit-round"
COMPONENT_LABELS = {
    "app.kubernetes.io/name": "gpupair-audit",
    "app.kubernetes.io/managed-by": "gpupair",
}
CONTAINER = "cuda"
# The seed's pod script, verbatim.
SCRIPT = "nvidia-smi --query-gpu=index,uuid,pci.bus_id --format=csv\nnvidia-smi topo -m\n"
NOBODY = 65534


@dataclass(frozen=True)
class PodTemplate:
    namespace: str
    image: str
    gpus: int
    resource: str = "nvidia.com/gpu"
    node: str | None = None
    scheduler_name: str | None = None
    prefix: str = "gpupair-audit"


def pod_name(template: PodTemplate, run_id: str, round_label: str, number: int) -> str:
    """``<prefix>-<run>-<round>-<n>``: the seed's ``test-01-1`` with the run id in it."""
    return f"{template.prefix}-{run_id}-{round_label}-{number}"


def run_selector(run_id: str) -> str:
    return f"{RUN_LABEL}={run_id}"


def round_selector(run_id: str, round_label: str) -> str:
    return f"{RUN_LABEL}={run_id},{ROUND_LABEL}={round_label}"


def pod_manifest(template: PodTemplate, run_id: str, round_label: str, number: int) -> dict[str, Any]:
    count = str(template.gpus)
    spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "terminationGracePeriodSeconds": 5,
        "securityContext": {
            "runAsNonRoot": True,
            "runAsUser": NOBODY,
            "runAsGroup": NOBODY,
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        # GPU nodes are often tainted with the resource name; clusters without the
        # ExtendedResourceToleration admission plugin do not add this toleration themselves.
        "tolerations": [{"key": template.resource, "operator": "Exists", "effect": "NoSchedule"}],
        "containers": [
            {
                "name": CONTAINER,
                "image": template.image,
                "imagePullPolicy": "IfNotPresent",
                "command": ["/bin/bash", "-lc"],
                "args": [SCRIPT],
                "resources": {
                    "requests": {template.resource: count},
                    "limits": {template.resource: count},
                },
                "securityContext": {
                    "allowPrivilegeEscalation": False,
                    "readOnlyRootFilesystem": True,
                    "capabilities": {"drop": ["ALL"]},
                },
            }
        ],
    }
    if template.node:
        spec["nodeName"] = template.node
    if template.scheduler_name:
        spec["schedulerName"] = template.scheduler_name
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": pod_name(template, run_id, round_label, number),
            "namespace": template.namespace,
            "labels": {**COMPONENT_LABELS, RUN_LABEL: run_id, ROUND_LABEL: round_label},
        },
        "spec": spec,
    }
