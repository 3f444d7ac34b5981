"""What the fragmentation score needs beyond the node reports (``--score fragmentation``):
each node's CPU, allocatable and requested, and the shapes of the pods in the cluster.

Fed by the watches the extender runs anyway: the node cache hands it each Node's allocatable
CPU, the pod watch every pod (GPU or not). A pod counts against its node's CPU once bound and
until it finishes or is deleted; its shape (CPU, GPUs) counts in the workload from the moment it
is seen, bound or not, since pods still waiting are the ones the free capacity must serve.
"""

from __future__ import annotations

import logging
from typing import Any

from gpupair.decide.fragmentation import MILLI, Workload
from gpupair.decide.pod_request import PodRequestError, cpu_request, parse_milli

log = logging.getLogger("gpupair.extender.usage")

TERMINAL = ("Succeeded", "Failed")


class ClusterUsage:
    def __init__(self, gpus_of) -> None:
        """``gpus_of``: a pod's GPU count as the extender reads it (PodRequests.of)."""
        self._gpus_of = gpus_of
        self.allocatable: dict[str, int] = {}  # node -> CPU millicores
        self.requested: dict[str, int] = {}  # node -> CPU millicores of its pods
        self._pods: dict[str, tuple[str, int, tuple]] = {}  # uid -> (node, CPU, shape)
        self.workload = Workload()

    # ---- nodes (the node cache)

    def node_seen(self, name: str, node: dict[str, Any]) -> None:
        allocatable = ((node.get("status") or {}).get("allocatable") or {}).get("cpu")
        try:
            self.allocatable[name] = parse_milli(allocatable, f"node {name} status.allocatable.cpu")
        except PodRequestError as error:
            self.allocatable.pop(name, None)
            if allocatable is not None:
                log.warning("node CPU unreadable", extra={"node": name, "error": str(error)})

    def node_gone(self, name: str) -> None:
        self.allocatable.pop(name, None)

    def cpu_left(self, name: str) -> int | None:
        """Allocatable less the requests of the pods bound there; None when unknown."""
        allocatable = self.allocatable.get(name)
        return None if allocatable is None else allocatable - self.requested.get(name, 0)

    # ---- pods (the pod watch)

    def replace_pods(self, items: list[dict[str, Any]]) -> None:
        for uid in list(self._pods):
            self.pod_gone(uid)
        for pod in items:
            self.pod_seen(pod)

    def pod_seen(self, pod: dict[str, Any]) -> None:
        meta, spec = pod.get("metadata") or {}, pod.get("spec") or {}
        uid = str(meta.get("uid") or "")
        if not uid:
            return
        if str((pod.get("status") or {}).get("phase") or "") in TERMINAL:
            self.pod_gone(uid)
            return
        try:
            cpu, gpus = cpu_request(pod), self._gpus_of(pod)
        except PodRequestError:
            return  # the verbs say why when the pod reaches them
        node = str(spec.get("nodeName") or "")
        known = self._pods.get(uid)
        if known is not None and known[0] == node:
            return
        self.pod_gone(uid)
        shape = (cpu, MILLI if gpus else 0, gpus, ())
        self._pods[uid] = (node, cpu, shape)
        self.workload.add(shape)
        if node:
            self.requested[node] = self.requested.get(node, 0) + cpu

    def pod_gone(self, uid: str) -> None:
        known = self._pods.pop(uid, None)
        if known is None:
            return
        node, cpu, shape = known
        self.workload.remove(shape)
        if node:
            left = self.requested.get(node, 0) - cpu
            if left > 0:
                self.requested[node] = left
            else:
                self.requested.pop(node, None)
