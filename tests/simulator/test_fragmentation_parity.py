"""One fragmentation score, two callers: the simulator's trace score (simulator/trace/models/gpupair_score.py,
from the trace's arrays) and the extender's prioritize under ``--score fragmentation``
(extender/fragmentation_score.py, from node reports, Node objects and pod objects) give the same
grades, node for node, on recorded fleet states; the extender both ways it reads them, a
request's Nodes node by node and a request's names against the rows it keeps
(extender/cache/score_rows.py).

The fleet: nodes of every shape of Alibaba's trace (tests/fixtures/trace: G2, G3, T4, P100, V100,
A10; 1, 2, 4 and 8 GPUs, NUMA-split; some with 8 cores for 2 GPUs, so CPU runs out first), filled
with the trace's own pods (bench/openb gpuspec33: GPU shares, pods pinned to GPU models, CPU-only
pods). Two kinds of state: whole GPUs, where the simulator runs as ``whole-gpus`` (``whole_only``) (a GPU
with a share taken looks taken), as the extender sees a node that publishes no shares; and
time-sliced, every GPU split into four replicas, each share pod asking one, the reporters
publishing each GPU's shares (gpupair.io/shares), where both see each GPU's share and foresee
where a share pod lands (gpupair/decide/score/share_pick.py); and DRA consumable capacity, every GPU
a device of 40Gi of memory several claims share (KEP-5075), each pod's GPUs a claim allocated as
kube-scheduler's allocator writes it (a share's ``consumedCapacity``), a share pod's claim asking
memory (``capacity.requests``), which the extender sizes on the node's GPUs as the allocator does
(gpupair/decide/picture/dra_capacity.py) and the simulator is handed as the pod's milli; and MIG
(the device plugin's mixed strategy), every GPU 7 compute slices, some with a slice no device has
(``whole``), each share pod asking the MIG profile of its slices (``nvidia.com/mig-3g.20gb``), the
reporters publishing each GPU's slices taken, which the extender sizes as the simulator is handed
them (gpupair/decide/pod/mig_ask.py: 3 of 7 slices, 428 milli).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from gpupair.decide.score.fragmentation import MILLI, tie_order
from gpupair.decide.score.fragmentation_grades import NodeRows, fragmentation_grades
from gpupair.decide.pod.mig_ask import slices_milli
from gpupair.decide.score.gpu_products import PRODUCT_LABEL
from gpupair.extender.protocol import ExtenderArgs
from gpupair.simulator.trace.node_arrays import TraceCluster
from gpupair.simulator.trace.models.devices import Tables, gpupair_decider, picker
from gpupair.simulator.trace.files import TracePod, read_nodes, read_pods
from gpupair.simulator.trace.models.gpupair_score import FragmentationScore
from gpupair.simulator.trace.numa import DEFAULT_SPLITS, NumaSplits
from gpupair.topology import report
from gpupair.topology.report import encode_annotations
from gpupair.topology.shares import SHARES_KEY, GpuShares, encode_shares
from tests.dra_support import DRIVER
from tests.extender_support import NOW, args_body, host_scores, make_extender

ROOT = Path(__file__).resolve().parents[2]
NODES = ROOT / "tests/fixtures/trace/openb_node_list_gpu_node.csv"
PODS = ROOT / "bench/openb/openb_pod_list_gpuspec33.csv"
PATH = "device-plugin"


def fleet_nodes():
    """Three nodes of each (model, GPUs, CPU) the trace has (fewer where it has fewer): 42 nodes,
    every shape."""
    kept, seen = [], {}
    for node in read_nodes(NODES):
        key = (node.model, node.gpus, node.milli_cpu)
        if seen.get(key, 0) < 3:
            seen[key] = seen.get(key, 0) + 1
            kept.append(node)
    return kept


class Fleet:
    """A fleet state held twice: as the simulator's arrays and as the Kubernetes objects the
    extender reads."""

    def __init__(self, placed: int, pending: int, seed: int, replicas: int = 0, dra: bool = False, mig: bool = False):
        """``replicas``: every GPU time-sliced into that many, each share pod asking one (a
        quarter GPU at 4), and the reporters publishing each GPU's shares; 0: whole GPUs only.
        ``dra``: every GPU a DRA device shared by consumable capacity (``dra_slice``), each pod's
        GPUs a claim (``dra_claim``). ``mig``: every GPU in MIG mode (``MIG_SLICES``), each share
        pod asking the profile of its slices, the reporters publishing each GPU's slices taken."""
        nodes = fleet_nodes()
        self.replicas = replicas
        self.dra = dra
        self.mig = mig
        self.cluster = TraceCluster(nodes, NumaSplits.parse(DEFAULT_SPLITS), np.arange(len(nodes)))
        self.tables = Tables(self.cluster.layouts, picker(PATH, "aligned", True), gpupair_decider(PATH, "aligned"))
        self.score = FragmentationScore(self.cluster, self.tables, whole_only=not (replicas or dra or mig))
        self.pod_objects: list[dict] = []
        rng = np.random.default_rng(seed)
        pods = [self.as_asked(pod) for pod in read_pods(PODS)]
        for number, pod in enumerate(pods[:placed]):
            self.score.seen(pod)
            fits = np.flatnonzero(self.cluster.fits(pod))
            row = int(fits[int(rng.integers(len(fits)))]) if len(fits) else None
            devices = self._devices(pod, row) if row is not None else ()
            if row is not None:
                self.cluster.place(row, pod, devices)
            self.pod_objects.append(pod_object(pod, f"p{number}", self.cluster.names[row] if row is not None else "", devices,
                                               dra=dra, mig=mig))
        for number, pod in enumerate(pods[placed:placed + pending], start=placed):
            self.score.seen(pod)
            self.pod_objects.append(pod_object(pod, f"p{number}", "", (), dra=dra, mig=mig))
        self.mig_shares = self._mig_shares() if mig else {}

    def _mig_shares(self) -> dict[int, GpuShares]:
        """Each node's MIG GPUs as its reporter counts them: the slices its pods took (a whole-GPU
        pod all of them); every third GPU with at most 6 taken offered as 6 of its 7 slices (two
        3g devices, say), ``whole`` 7. What is left of a GPU partly taken is then the reporter's
        (GpuShares.milli_left, floored to a thousandth), and the simulator is handed that."""
        c, counted = self.cluster, {}
        for row in range(len(c)):
            size = int(c.gpus[row])
            taken = [-(-(MILLI - int(left)) * MIG_SLICES // MILLI) for left in c.left[row][:size]]
            of = [MIG_SLICES - 1 if (row + gpu) % 3 == 0 and taken[gpu] < MIG_SLICES else MIG_SLICES
                  for gpu in range(size)]
            whole = tuple(MIG_SLICES if each < MIG_SLICES else 0 for each in of)
            shares = GpuShares(tuple(of), tuple(min(t, o) for t, o in zip(taken, of)), whole=whole if any(whole) else None)
            for gpu in range(size):
                if shares.taken[gpu]:
                    c.left[row, gpu] = shares.milli_left(gpu) if shares.partly_taken(gpu) else 0
            counted[row] = shares
        return counted

    def as_asked(self, pod: TracePod) -> TracePod:
        """The pod as a time-sliced fleet serves it: a share is one replica; on DRA, its memory
        in whole Gi (the devices' step), the milli the allocator then consumes."""
        if not (self.replicas or self.dra or self.mig) or not pod.gpus or pod.milli_per_gpu == MILLI:
            return pod
        if self.mig:
            milli = slices_milli(mig_slices(pod.milli_per_gpu), MIG_SLICES)
        else:
            milli = MILLI // self.replicas if self.replicas else MILLI_PER_GI * gibibytes(pod.milli_per_gpu)
        return TracePod(pod.name, pod.milli_cpu, pod.memory_mib, pod.gpus, milli, pod.models)

    def _devices(self, pod: TracePod, row: int) -> tuple[int, ...]:
        if not pod.gpus:
            return ()
        left = self.cluster.left[row]
        if pod.milli_per_gpu < MILLI:  # the sharing layer packs a share onto the fullest GPU that holds it
            return (int(np.argmin(np.where(left >= pod.milli_per_gpu, left, MILLI + 1))),)
        return self.tables.pick(int(self.cluster.layout_id[row]), int(self.cluster.free_mask[row]), pod.gpus)

    def node_objects(self, rows) -> list[dict]:
        """Each node as the API serves it: allocatable CPU and memory, GFD's product label and its reporter's
        annotations (whole GPUs: a GPU with any share taken is not free)."""
        c, objects = self.cluster, []
        for row in rows:
            name = c.names[row]
            holders = {}
            for pod in self.pod_objects:
                if pod["spec"].get("nodeName") == name and pod["metadata"]["annotations"]["devices"] != "[]":
                    holders[pod["metadata"]["name"]] = set(json.loads(pod["metadata"]["annotations"]["devices"]))
            layout = c.layouts[int(c.layout_id[row])]
            annotations = {} if self.dra else encode_annotations(layout, c.free_devices(row), 1, NOW)
            if self.replicas:  # each GPU's replicas, those taken by what is left of it
                of = [self.replicas] * layout.size
                taken = [(MILLI - int(left)) * self.replicas // MILLI for left in c.left[row][:layout.size]]
                fingerprint = report.fingerprint(annotations[report.TOPOLOGY_KEY])
                annotations[SHARES_KEY] = encode_shares(GpuShares(tuple(of), tuple(taken)), fingerprint, 1)
            if self.mig:
                fingerprint = report.fingerprint(annotations[report.TOPOLOGY_KEY])
                annotations[SHARES_KEY] = encode_shares(self.mig_shares[row], fingerprint, 1)
            objects.append({"apiVersion": "v1", "kind": "Node",
                            "metadata": {"name": name, "labels": {PRODUCT_LABEL: c.models[int(c.model[row])]},
                                         "annotations": annotations},
                            "status": {"allocatable": {"cpu": f"{int(c.cpu_capacity[row])}m",
                                                       "memory": f"{int(c.memory_capacity[row])}Mi", **(
                                {} if self.dra else {"nvidia.com/gpu": str(int(c.gpus[row]))})}}})
        return objects

    def dra_objects(self) -> tuple[list[dict], list[dict]]:
        """Every node's ResourceSlice and every GPU pod's claim (allocated where it was placed)."""
        c = self.cluster
        slices = [dra_slice(c.names[row], c.layouts[int(c.layout_id[row])]) for row in range(len(c))]
        claims = [dra_claim(pod) for pod in self.pod_objects if pod["metadata"]["annotations"].get("asks")]
        return slices, claims

    def extender_grades(self, pod: TracePod, rows, node_cache: bool) -> list[int]:
        """The extender's prioritize: the Nodes sent in the request, or (``node_cache``) their
        names, the Nodes coming from its node cache, as gpupair ships it."""
        extender = make_extender(fragmentation=True, node_cache=node_cache, **({"dra_driver": DRIVER} if self.dra else {}))
        usage = extender.score.usage
        nodes = self.node_objects(range(len(self.cluster)))
        scored = pod_object(pod, "scored", "", (), dra=self.dra, mig=self.mig)
        if self.dra:
            slices, claims = self.dra_objects()
            extender.dra.slices.replace(slices)
            extender.dra.claims.replace([*claims, *([dra_claim(scored)] if scored["metadata"]["annotations"]["asks"] else [])])
        if node_cache:
            extender.node_cache.replace(nodes)
        else:
            for node in nodes:
                usage.node_seen(node["metadata"]["name"], node)
        for pod_object_ in self.pod_objects:
            usage.pod_seen(pod_object_)
        usage.pod_seen(scored)
        offered = [nodes[row] for row in rows]
        body = args_body(scored, names=[node["metadata"]["name"] for node in offered]) if node_cache else \
            args_body(scored, nodes=offered)
        whole = pod.gpus if pod.milli_per_gpu == MILLI else 0
        answer = json.loads(extender.score.answer(ExtenderArgs.model_validate(body), whole))
        names = [node["metadata"]["name"] for node in offered]
        return list(host_scores(answer, names).values())

    def simulator_grades(self, pod: TracePod, rows) -> list[int]:
        self.score.seen(pod)
        try:
            return self.score.scores(pod, rows).tolist()
        finally:
            self.score.gone(pod)

    def rows_for(self, pod: TracePod) -> np.ndarray:
        """The nodes kube-scheduler would offer after its filters and gpupair's."""
        rows = np.flatnonzero(self.cluster.fits(pod))
        if pod.gpus and pod.milli_per_gpu == MILLI:
            rows = rows[self.tables.lookup("passes", self.cluster.layout_id[rows], self.cluster.free_mask[rows], pod.gpus)]
        return rows


def pod_object(pod: TracePod, name: str, node: str, devices, dra: bool = False, mig: bool = False) -> dict:
    """The trace pod as the API serves it: its CPU and memory requests, its GPUs (a share asks one of
    time-slicing's renamed resource, as docs/simulate.md models it; with ``dra``, a claim
    ``dra_claim`` makes of what the ``asks`` annotation says; with ``mig``, the MIG profile of its
    slices), its models as a nodeSelector (one) or required node affinity (several)."""
    resources: dict = {"requests": {"cpu": f"{pod.milli_cpu}m", "memory": f"{pod.memory_mib}Mi"}}
    spec: dict = {"containers": [{"name": "main", "image": "job:1", "resources": resources}]}
    asks = ""
    if pod.gpus and dra:
        asks = json.dumps([pod.gpus, gibibytes(pod.milli_per_gpu) if pod.milli_per_gpu < MILLI else 0])
        spec["resourceClaims"] = [{"name": "gpus", "resourceClaimName": f"{name}-gpus"}]
        resources["claims"] = [{"name": "gpus"}]
    elif pod.gpus and mig and pod.milli_per_gpu < MILLI:
        slices = mig_slices(pod.milli_per_gpu)
        resources["limits"] = {f"nvidia.com/mig-{slices}g.{5 * slices}gb": str(pod.gpus)}
    elif pod.gpus:
        shared = pod.milli_per_gpu < MILLI
        resources["limits"] = {"nvidia.com/gpu.shared" if shared else "nvidia.com/gpu": str(pod.gpus)}
    if len(pod.models) == 1:
        spec["nodeSelector"] = {PRODUCT_LABEL: pod.models[0]}
    elif pod.models:
        spec["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": PRODUCT_LABEL, "operator": "In", "values": list(pod.models)}]}]}}}
    if node:
        spec["nodeName"] = node
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "trace", "uid": f"uid-{name}",
                         "annotations": {"devices": json.dumps(list(devices)), "asks": asks}},
            "spec": spec, "status": {"phase": "Running" if node else "Pending"}}


MIG_SLICES = 7  # an A100's compute slices


def mig_slices(milli: int) -> int:
    """A trace share as the MIG profile that holds it: its slices of 7, rounded up."""
    return -(-milli * MIG_SLICES // MILLI)


GPU_MEMORY_GI = 40  # each DRA GPU's memory capacity: a Gi is 25 milli, so shares add up exactly
MILLI_PER_GI = MILLI // GPU_MEMORY_GI


def gibibytes(milli: int) -> int:
    """A trace share as the memory a DRA claim asks for it: whole Gi, rounded up."""
    return -(-milli // MILLI_PER_GI)


def dra_slice(node: str, layout) -> dict:
    """The node's GPUs as a DRA driver sharing them by memory publishes them: each with its
    index and NUMA node (no PCIe root: the links inferred are the simulator's NODE and SYS),
    ``allowMultipleAllocations`` and 40Gi of memory in 1Gi steps (its default all of it: a claim not
    asking memory takes the whole GPU)."""
    devices = [{"name": f"gpu-{d.index}", "allowMultipleAllocations": True,
                "attributes": {"index": {"int": d.index}, "type": {"string": "gpu"},
                               "resource.kubernetes.io/numaNode": {"int": d.numa_node}},
                "capacity": {"memory": {"value": f"{GPU_MEMORY_GI}Gi",
                                        "requestPolicy": {
                                            "default": f"{GPU_MEMORY_GI}Gi", "validRange": {"min": "1Gi", "step": "1Gi"}}}}}
               for d in layout.devices]
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice", "metadata": {"name": f"{node}-gpu"},
            "spec": {"driver": DRIVER, "nodeName": node, "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
                     "devices": devices}}


def dra_claim(pod: dict) -> dict:
    """The pod's claim: its GPUs of the driver's class, a share asking its memory; allocated on
    the pod's devices where it was placed, each share's consumedCapacity its memory (a whole
    GPU's all of it), as the allocator writes it."""
    name, node = pod["metadata"]["name"], pod["spec"].get("nodeName")
    count, gibs = json.loads(pod["metadata"]["annotations"]["asks"])
    request: dict = {"deviceClassName": DRIVER, "allocationMode": "ExactCount", "count": count}
    if gibs:
        request["capacity"] = {"requests": {"memory": f"{gibs}Gi"}}
    claim = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
             "metadata": {"name": f"{name}-gpus", "namespace": "trace"},
             "spec": {"devices": {"requests": [{"name": "gpus", "exactly": request}]}}, "status": {}}
    if node:
        used = {"memory": f"{gibs or GPU_MEMORY_GI}Gi"}
        results = [{"request": "gpus", "driver": DRIVER, "pool": node, "device": f"gpu-{device}",
                    "shareID": f"{name}-{device}", "consumedCapacity": used}
                   for device in json.loads(pod["metadata"]["annotations"]["devices"])]
        claim["status"] = {"allocation": {"devices": {"results": results}},
                           "reservedFor": [{"resource": "pods", "name": name, "uid": pod["metadata"]["uid"]}]}
    return claim


PROBES = [
    TracePod("one-gpu", 8000, 30720, 1, MILLI),
    TracePod("two-gpus", 16000, 65536, 2, MILLI),
    TracePod("four-gpus", 4000, 16384, 4, MILLI),
    TracePod("eight-gpus", 4000, 8192, 8, MILLI),
    TracePod("cpu-only", 12000, 98304, 0, 0),
    TracePod("pinned-t4", 6000, 24576, 1, MILLI, ("T4",)),
    TracePod("pinned-v100", 8000, 0, 2, MILLI, ("V100M16", "V100M32")),
    # most of a 256Gi node's memory: GPUs left beside too little memory for the workload's shapes
    TracePod("memory-heavy", 8000, 245760, 0, 0),
]


STATES = {"filling": (50, 40, 1), "busy": (100, 60, 8)}  # pods placed, pods waiting, seed
SHARED_STATES = {"time-sliced": (100, 60, 8, 4), "time-sliced-filling": (50, 40, 1, 4)}  # and replicas a GPU
DRA_STATES = {"dra-capacity": (100, 60, 8, 0, True), "dra-capacity-filling": (50, 40, 1, 0, True)}
SHARE_PROBES = [TracePod("one-replica", 2000, 12288, 1, MILLI // 4), TracePod("two-replicas", 4000, 0, 2, MILLI // 4),
                TracePod("pinned-replica", 2000, 0, 1, MILLI // 4, ("T4",))]
# On DRA the probes ask shares of one GPU's memory (and a CPU-only pod): a whole-GPU claim is placed by
# the allocator's first fit there, which the simulator's device-plugin tables do not model.
CAPACITY_PROBES = [TracePod("quarter-memory", 2000, 16384, 1, 10 * MILLI_PER_GI),
                   TracePod("most-memory", 4000, 0, 1, 30 * MILLI_PER_GI),
                   TracePod("pinned-memory", 2000, 0, 1, 8 * MILLI_PER_GI, ("T4",)), PROBES[4]]
# MIG probes ask a profile of 1, 3 and 4 slices of 7 (one pinned), or whole GPUs and none.
MIG_STATES = {"mig": (100, 60, 8, 0, False, True), "mig-filling": (50, 40, 1, 0, False, True)}
MIG_PROBES = [TracePod(f"mig-{g}g", 1000 * g, 8192 * g, 1, slices_milli(g, MIG_SLICES)) for g in (1, 3, 4)] + \
    [TracePod("pinned-mig-2g", 2000, 0, 1, slices_milli(2, MIG_SLICES), ("T4",))]
_built: dict[str, Fleet] = {}


def state(name: str) -> Fleet:
    if name not in _built:
        _built[name] = Fleet(*{**STATES, **SHARED_STATES, **DRA_STATES, **MIG_STATES}[name])
    return _built[name]


# A busy fleet has no two 8-GPU nodes free: the 8-GPU probe is graded on the filling one only.
# The time-sliced states (every GPU four replicas, share pods on replicas) add the share probes:
# there the extender reads each GPU's shares from gpupair.io/shares and foresees where a share
# pod lands, as the simulator's share-aware score does.
CASES = [(name, pod) for name in STATES for pod in PROBES + SHARE_PROBES[:1] if not (name == "busy" and pod.gpus == 8)] + \
    [(name, pod) for name in SHARED_STATES for pod in PROBES + SHARE_PROBES if pod.gpus < 8] + \
    [(name, pod) for name in DRA_STATES for pod in CAPACITY_PROBES] + \
    [(name, pod) for name in MIG_STATES for pod in MIG_PROBES + PROBES[:2] + PROBES[4:5]]


@pytest.mark.parametrize("name, pod", CASES, ids=[f"{name}-{pod.name}" for name, pod in CASES])
def test_the_extender_and_the_simulator_grade_every_node_alike(name, pod):
    fleet = state(name)
    rows = fleet.rows_for(pod)
    assert len(rows) >= 2
    simulator = fleet.simulator_grades(pod, rows)
    assert fleet.extender_grades(pod, rows, node_cache=True) == simulator
    assert fleet.extender_grades(pod, rows, node_cache=False) == simulator


def test_the_shared_states_tell_apart_a_score_blind_to_shares():
    """The shared states matter: on the same time-sliced fleet, grades that see whole GPUs only
    (a GPU with a replica taken looks taken) differ from those told the shares for some probe,
    so an extender that dropped gpupair.io/shares fails the test above."""
    fleet = state("time-sliced")
    blind = FragmentationScore(fleet.cluster, fleet.tables, whole_only=True)
    blind.workload.shapes.update(fleet.score.workload.shapes)  # the same pods seen
    differs = []
    for pod in SHARE_PROBES + PROBES[:2]:
        rows = fleet.rows_for(pod)
        told = fleet.simulator_grades(pod, rows)
        blind.seen(pod)
        differs.append(blind.scores(pod, rows).tolist() != told)
        blind.gone(pod)
    assert any(differs)


@pytest.mark.parametrize("name", STATES)
def test_the_fleet_tells_apart_a_score_that_ignores_cpu_memory_models_or_the_node_order(name):
    """Parity holds only because both callers count each node's CPU, memory and products, and
    order the nodes alike: on these states, grades that drop any of them differ, so a caller
    changed alone fails the test above."""
    fleet = state(name)
    c = fleet.cluster
    ignoring_cpu, ignoring_memory, ignoring_models, ignoring_order = [], [], [], []
    for pod in PROBES:
        rows = fleet.rows_for(pod)
        fleet.score.seen(pod)
        measure = fleet.score.workload.measure(c.models)
        fleet.score.gone(pod)
        ids = c.layout_id[rows]
        before = np.where(c.left[rows] == MILLI, MILLI, 0)
        after = before.copy()
        if pod.gpus:
            taken = fleet.tables.lookup("pick_mask", ids, c.free_mask[rows], pod.gpus)
            after[(taken[:, None] & c.bits) != 0] = 0
        masks = {False: c.free_mask[rows], True: (after == MILLI).astype(np.int64) @ c.bits}

        def graded(cpu_left, model, memory_left=c.memory_left[rows], order=tie_order([c.names[row] for row in rows])):
            fits = lambda k, placed: fleet.tables.lookup("fits", ids, masks[placed], k)  # noqa: E731
            rows_ = NodeRows(cpu_left, before, after, model, c.gpus[rows] * MILLI, fits, memory_left, order)
            return fragmentation_grades(measure, rows_, pod.milli_cpu, pod.memory_mib).tolist()

        counted = graded(c.cpu_left[rows], c.model[rows])
        assert counted == fleet.simulator_grades(pod, rows)
        ignoring_cpu.append(graded(np.full(len(rows), 10**9), c.model[rows]) != counted)
        ignoring_memory.append(graded(c.cpu_left[rows], c.model[rows], None) != counted)
        ignoring_models.append(graded(c.cpu_left[rows], np.zeros(len(rows), dtype=np.int64)) != counted)
        ignoring_order.append(graded(c.cpu_left[rows], c.model[rows], order=None) != counted)
    assert any(ignoring_cpu) and any(ignoring_memory) and any(ignoring_models) and any(ignoring_order)
