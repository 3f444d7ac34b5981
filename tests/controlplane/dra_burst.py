"""The chaos matrix's cluster on DRA nodes: the same burst as burst.py, its pods asking
``nvidia.com/gpu`` as before, served from DRA devices through the DeviceClass's
extendedResourceName (kube-scheduler makes each pod's claim and allocates it in PreBind, before
the extender's bind). Each node publishes one ResourceSlice as NVIDIA's driver does, no device
plugin runs, and the resourceclaim controller removes a deleted pod's claim.

What a pod holds is its claim's allocation, so the checks read the claims: no device allocated
to two claims, and the grants' links from the seed layout.
"""

from __future__ import annotations

from typing import Any

from tests.controlplane.burst import BurstCluster
from tests.controlplane.dra import (
    RESOURCE, allocated_devices, device_class, pod_claims, publish_slices, seed_topology_file,
)
from tests.controlplane.kubelet import Grant, SimNode
from tests.controlplane.processes import Process


def _pool_devices(claim: dict[str, Any]) -> list[tuple[str, int]]:
    """(pool, device index) of each GPU a claim was allocated (a pool is a node here)."""
    results = (((claim.get("status") or {}).get("allocation") or {}).get("devices") or {}).get("results") or []
    return [(r["pool"], int(r["device"].rsplit("-", 1)[1])) for r in results if r["device"].startswith("gpu-")]


class DraBurstCluster(BurstCluster):
    controller_manager: Process | None = None

    def start(self) -> None:
        self.device_class = device_class(self.api)
        self.controller_manager = self.plane.controller_manager("resourceclaim-controller",
                                                                name="kube-controller-manager-chaos")
        super().start()

    def add_node(self, name: str) -> SimNode:
        assert self.sim is not None
        node = self.sim.add_node(name, seed_topology_file(self.sim.directory, name), gpus=None)
        publish_slices(self.api, [name])
        return node

    def close(self) -> None:
        try:
            super().close()
        finally:
            if self.controller_manager is not None:
                self.controller_manager.stop()
            self.api.delete(self.api.path_of({**self.device_class, "apiVersion": RESOURCE, "kind": "DeviceClass"}))

    def grants(self, placed: list[str]) -> list[Grant]:
        assert self.sim is not None
        found = []
        for name in placed:
            pod = self.api.get("v1", "Pod", name, self.namespace)
            node = pod["spec"]["nodeName"]
            devices = tuple(sorted(d for claim in pod_claims(self.api, pod) for d in allocated_devices(claim)))
            link = self.sim.nodes[node].layout.worst_link(devices) if len(devices) > 1 else None
            found.append(Grant(self.namespace, name, node, devices, link))
        return found

    def holdings(self, timeout: float = 60.0) -> dict[str, dict[tuple[str, str], list[int]]]:
        """Every allocated claim's devices, by node (pool) and claim."""
        found: dict[str, dict[tuple[str, str], list[int]]] = {}
        for claim in self.api.list(RESOURCE, "ResourceClaim", self.namespace):
            for pool, index in _pool_devices(claim):
                found.setdefault(pool, {}).setdefault((self.namespace, claim["metadata"]["name"]), []).append(index)
        return found

    def wait_empty(self, timeout: float = 90.0) -> None:
        self.api.wait_for(lambda: not self.holdings(), timeout, "every claim of the namespace deallocated or gone",
                          interval=0.3)
        self.wait_no_holds(timeout)

    def republish_slices(self) -> list[int]:
        """Every node's GPUs published again as a driver does after a restart: a new slice of the
        pool's next generation, then the old one deleted (between the two, the pool has both);
        the new generations."""
        assert self.sim is not None
        generations = []
        for name in self.sim.nodes:
            [current] = self.api.list(RESOURCE, "ResourceSlice", field_selector=f"spec.nodeName={name}")
            generation = int(current["spec"]["pool"]["generation"]) + 1
            publish_slices(self.api, [name], generation=generation, name=f"{name}-gpu-g{generation}")
            generations.append(generation)
        for name in self.sim.nodes:
            for old in self.api.list(RESOURCE, "ResourceSlice", field_selector=f"spec.nodeName={name}"):
                if int(old["spec"]["pool"]["generation"]) < max(generations):
                    self.api.delete(self.api.path(RESOURCE, "ResourceSlice", old["metadata"]["name"]))
        return generations
