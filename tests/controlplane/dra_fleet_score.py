"""The simulator's fragmentation score (simulator/trace/models/gpupair_score.py) over DRA nodes
whose GPUs claims share by memory (KEP-5075), from what the real control plane shows: each GPU's
milli left from the allocated claims' results (what each result's ``consumedCapacity`` takes of
the device's memory, in thousandths rounded up; a result without one: the whole GPU), each
node's CPU left, and every pod not finished
as a shape of the workload, read from its claims (a request asking memory: shares of that
size; one asking none: whole GPUs). The DRA counterpart of tests/controlplane/fleet_score.py,
computed here from the API objects, not by gpupair's picture.
"""

from __future__ import annotations

import numpy as np

from gpupair.decide.pod.pod_request import cpu_request, parse_bytes, parse_milli
from gpupair.extender.cache.cluster_usage import MIB, memory_mib
from gpupair.decide.score.fragmentation import MILLI
from gpupair.simulator.trace.files import TraceNode, TracePod
from gpupair.simulator.trace.node_arrays import TraceCluster
from gpupair.simulator.trace.numa import DEFAULT_SPLITS, NumaSplits
from tests.controlplane.api import Api
from tests.controlplane.fleet_score import grades_on
from tests.controlplane.dra import RESOURCE
from tests.controlplane.kubelet import Kubelets

MODEL = "seed"


def _thousandths(memory: str, capacity: int) -> int:
    return -(-MILLI * parse_bytes(memory, "memory") // capacity)


def claim_shape(claim: dict, capacity: int) -> tuple[int, int]:
    """(devices, milli each) a claim asks: a request asking memory, shares of it; else whole GPUs."""
    count, milli = 0, MILLI
    for request in claim["spec"]["devices"]["requests"]:
        exactly = request.get("exactly") or {}
        count += int(exactly.get("count", 1))
        memory = ((exactly.get("capacity") or {}).get("requests") or {}).get("memory")
        if memory:
            milli = _thousandths(memory, capacity)
    return count, milli


def trace_pod(pod: dict, claims: dict[tuple[str, str], dict], capacity: int) -> TracePod:
    meta = pod["metadata"]
    shapes = [claim_shape(claims[(meta["namespace"], entry["resourceClaimName"])], capacity)
              for entry in pod["spec"].get("resourceClaims") or ()
              if (meta["namespace"], entry.get("resourceClaimName")) in claims]
    count, milli = (sum(c for c, _ in shapes), min(m for _, m in shapes)) if shapes else (0, 0)
    return TracePod(meta["name"], cpu_request(pod), memory_mib(pod), count, milli if count else 0)


def simulated_grades(api: Api, sim: Kubelets, pod: dict, claim: dict, capacity: int) -> dict[str, int]:
    """The simulator's grade of ``pod`` (asking ``claim``, neither created yet) on each node with
    room for it, on DRA nodes whose GPUs each have ``capacity`` bytes of memory."""
    names = list(sim.nodes)
    layout = sim.nodes[names[0]].layout  # the nodes' differ in their GPUs' names only
    assert all(sim.nodes[name].layout.links == layout.links for name in names), "one layout across the fleet"
    objects = {name: api.get("v1", "Node", name) for name in names}
    nodes = [TraceNode(name, parse_milli(objects[name]["status"]["allocatable"]["cpu"], name),
                       parse_bytes(objects[name]["status"]["allocatable"]["memory"], name) // MIB,
                       sim.nodes[name].layout.size, MODEL) for name in names]
    cluster = TraceCluster(nodes, NumaSplits.parse(DEFAULT_SPLITS), np.arange(len(nodes)))
    cluster.layouts[:] = [layout]
    claims = {(c["metadata"]["namespace"], c["metadata"]["name"]): c for c in api.list(RESOURCE, "ResourceClaim")}
    for row, name in enumerate(names):
        cluster.left[row, :nodes[row].gpus] = MILLI
    for found in claims.values():
        for result in (((found.get("status") or {}).get("allocation") or {}).get("devices") or {}).get("results", ()):
            if result["pool"] in names:
                used = (result.get("consumedCapacity") or {}).get("memory")
                taken = _thousandths(used, capacity) if used else MILLI
                cluster.left[names.index(result["pool"]), int(result["device"].removeprefix("gpu-"))] -= taken
    for row in range(len(names)):
        cluster.free_mask[row] = int((cluster.left[row] == MILLI).astype(np.int64) @ cluster.bits)
    count, milli = claim_shape(claim, capacity)
    asked = TracePod(pod["metadata"]["name"], cpu_request(pod), memory_mib(pod), count, milli)
    return grades_on(api, cluster, names, asked, lambda other: trace_pod(other, claims, capacity),
                     np.ones(len(names), dtype=bool))
