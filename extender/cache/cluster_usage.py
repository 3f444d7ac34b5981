"""What the fragmentation score needs beyond the node reports (``--score fragmentation``):
each node's CPU and memory, allocatable and requested, its GFD product label, and the shapes of
the pods in the cluster (CPU, GPUs, memory), each with the GPU products it accepts
(gpupair/decide/score/gpu_products.py). A pod asking GPU shares (``shared``: time-slicing's
``nvidia.com/gpu.shared``) counts as a shape of that many shares, each as large as a share of the
GPUs scored (the reporters' ``gpupair.io/shares``: a GPU of four replicas, 250 milli); a share
is known by what it asks, not by the node it lands on. A pod whose DRA claims ask shares by
consumable capacity (``capacity.requests``, KEP-5075) counts as a shape of that many shares,
each sized on the GPUs scored (the most common capacities among them: 8Gi of a 32Gi GPU, 250
milli), as the allocator would size it (dra_capacity.share_milli). A pod asking MIG profiles
(``nvidia.com/mig-3g.20gb``, mig.strategy mixed) counts as a shape of one share of its compute
slices, sized on the most common share count of the GPUs scored (a MIG GPU's slices: 3 of 7,
428 milli; gpupair/decide/pod/mig_ask.py).

Fed by the watches the extender runs anyway: the node cache hands it each Node's allocatable
CPU and memory and its labels, the pod watch every pod (GPU or not). A pod counts against its
node's CPU and memory once bound and until it finishes or is deleted; its shape counts in the
workload from the moment it is seen, bound or not, since pods still waiting are the ones the free
capacity must serve. Memory is counted in MiB, as kube-scheduler counts a pod's request
(pod_request: pod-level resources and overhead included).
"""

from __future__ import annotations

import logging
from typing import Any

from collections.abc import Callable, Sequence

from gpupair.decide.picture.dra_capacity import Asked
from gpupair.decide.pod.mig_ask import mig_slices_asked, slices_milli
from gpupair.decide.score.fragmentation import MAX_SHAPES, MILLI, Fragmentation, Workload
from gpupair.decide.score.gpu_products import ANY, RULE, Accepted, label_product, node_product, pod_accepts
from gpupair.decide.pod.pod_request import (PodRequestError, cpu_request, gpu_request, parse_bytes, parse_milli,
                                             pod_request)
from gpupair.kubewire.defaults import RESOURCE_NAME, SHARED_RESOURCE_NAMES
from gpupair.topology.mig_slices import COMMON_GPU_SLICES

log = logging.getLogger("gpupair.extender.usage")

TERMINAL = ("Succeeded", "Failed")
SHARE = -1  # a learned shape's milli per GPU where it asks shares: resolved when measured
# Below: a shape asking shares by DRA consumable capacity or by MIG slices, SHARE less the ask's
# number (ClusterUsage._asks)

CapacityShares = tuple[int, Asked]  # shares a pod's DRA claims ask by capacity, and what each asks
MIB = 1 << 20


def memory_mib(pod: dict[str, Any]) -> int:
    """The pod's memory request as kube-scheduler counts it, in MiB rounded up (PodRequestError
    where it cannot be read)."""
    return -(-pod_request(pod, "memory") // MIB)


def claims_accept(picture: Any) -> Callable[[Any], Accepted]:
    """The products a pod's DRA claims accept, from the node picture's claim watch (any for a
    claim not seen yet: the pod watch sees the pod again when it is bound)."""
    def accepts(pod: Any) -> Accepted:
        demand = picture.pod_demand(pod, known_only=True)
        return demand.accepts if demand is not None else ANY
    return accepts


def claims_share(picture: Any) -> Callable[[Any], CapacityShares | None]:
    """The shares a pod's DRA claims ask by consumable capacity, from the claim watch (none for
    a claim not seen yet)."""
    def shares(pod: Any) -> CapacityShares | None:
        demand = picture.pod_demand(pod, known_only=True)
        return (demand.shares, demand.asked) if demand is not None and demand.shares else None
    return shares


class ClusterUsage:
    def __init__(self, gpus_of, claims_accept: Callable[[Any], Accepted] | None = None,
                 shared: Sequence[str] = SHARED_RESOURCE_NAMES,
                 claims_share: Callable[[Any], CapacityShares | None] | None = None,
                 resource: str = RESOURCE_NAME) -> None:
        """``gpus_of``: a pod's GPU count as the extender reads it (PodRequests.of);
        ``claims_accept``: the products its DRA claims' selectors accept; ``shared``: the
        extended resources of GPU shares; ``claims_share``: the shares its DRA claims ask by
        consumable capacity; ``resource``: the whole-GPU resource (never read as a MIG profile)."""
        self._gpus_of = gpus_of
        self._shared = tuple(shared)
        self._not_mig = frozenset((resource, *shared))
        self._claims_accept = claims_accept
        self._claims_share = claims_share
        # each capacity ask, or MIG slices asked (an int), seen -> its number in a shape (below SHARE)
        self._asks: dict[Asked | int, int] = {}
        self.allocatable: dict[str, int] = {}  # node -> CPU millicores
        self.memory_allocatable: dict[str, int] = {}  # node -> memory MiB
        self.labels: dict[str, str] = {}  # node -> its GFD product label, normalised
        self._rules: dict[tuple[str, ...], Accepted] = {}  # shape models key -> the rule, where it needs the nodes'
        self.requested: dict[str, int] = {}  # node -> CPU millicores of its pods
        self.memory_requested: dict[str, int] = {}  # node -> memory MiB of its pods
        self._pods: dict[str, tuple[str, int, int, tuple]] = {}  # uid -> (node, CPU, memory, shape)
        self.workload = Workload()
        self._measured: tuple | None = None  # (key, shapes resolved, their columns): ``measure``
        self._listeners: list[Callable[[str], None]] = []  # told of each node whose CPU or label changes

    def subscribe(self, listener: Callable[[str], None]) -> None:
        self._listeners.append(listener)

    def _touched(self, name: str) -> None:
        for listener in self._listeners:
            listener(name)

    # ---- nodes (the node cache)

    def node_seen(self, name: str, node: dict[str, Any]) -> None:
        self._touched(name)
        label = label_product(node)
        if label:
            self.labels[name] = label
        else:
            self.labels.pop(name, None)
        allocatable = (node.get("status") or {}).get("allocatable") or {}
        for resource, table, parse in (("cpu", self.allocatable, parse_milli),
                                       ("memory", self.memory_allocatable, _parse_mib)):
            value = allocatable.get(resource) if isinstance(allocatable, dict) else None
            try:
                table[name] = parse(value, f"node {name} status.allocatable.{resource}")
            except PodRequestError as error:
                table.pop(name, None)
                if value is not None:
                    log.warning(f"node {resource} unreadable", extra={"node": name, "error": str(error)})

    def node_gone(self, name: str) -> None:
        self._touched(name)
        self.allocatable.pop(name, None)
        self.memory_allocatable.pop(name, None)
        self.labels.pop(name, None)

    def product(self, name: str, reported: str) -> str:
        """The node's GPU product: its report's (``reported``), else its label's."""
        return node_product(reported, self.labels.get(name, ""))

    def measure(self, models: Sequence[str], shares_per_gpu: int = 0,
                size: Callable[[Asked], int] | None = None) -> Fragmentation:
        """The workload's measure over nodes of ``models`` whose GPUs split into
        ``shares_per_gpu`` shares (0: none shared; a MIG GPU's compute slices, else the common
        7), a capacity ask's share sized by ``size`` (None: no GPU scored is shared by capacity,
        and it counts as a GPU, as the allocator takes one there), each shape's accepted products
        resolved against them where its rule needs them (a NotIn without an In)."""
        learned = self.workload.learned()
        # A call per pod asks this of a workload whose counts moved and whose shapes mostly did
        # not: the shapes resolved and their columns are kept while the set, the models and the
        # shares hold (not for shapes sized by ``size``, which each call makes anew)
        key = (self.workload.version, tuple(models), shares_per_gpu, len(self._asks))
        kept = self._measured
        memo = size is None and len(self.workload.shapes) <= MAX_SHAPES  # else the order moves with the counts
        if memo and kept is not None and kept[0] == key:
            return Fragmentation(list(zip(kept[1], (share for _, share in learned))), models, kept[2])
        asks = {number: asked for asked, number in self._asks.items()}
        share_milli = MILLI // shares_per_gpu if shares_per_gpu else MILLI

        def resolved(shape: tuple) -> tuple:
            cpu, milli, gpus, accepted, memory = shape
            if accepted[:1] == (RULE,):
                accepted = self._rules[accepted].among(models)
            if milli < SHARE:
                ask = asks[milli]
                if isinstance(ask, int):
                    milli = slices_milli(ask, shares_per_gpu or COMMON_GPU_SLICES)
                else:
                    milli = min(size(ask), MILLI) if size is not None else MILLI
            return (cpu, share_milli if milli == SHARE else milli, gpus, accepted, memory)

        shapes = [resolved(shape) for shape, _ in learned]
        measure = Fragmentation(list(zip(shapes, (share for _, share in learned))), models)
        if memo:
            self._measured = (key, shapes, measure.columns)
        return measure

    def shares_asked(self, pod: dict[str, Any]) -> int:
        """The GPU shares ``pod`` asks (``--shared-resources``); 0 for one that cannot be read."""
        try:
            return sum(gpu_request(pod, name) for name in self._shared)
        except PodRequestError:
            return 0

    def mig_asked(self, pod: dict[str, Any]) -> int:
        """The MIG compute slices ``pod`` asks (mig_ask.py); 0 for one that cannot be read."""
        try:
            return mig_slices_asked(pod, self._not_mig)
        except PodRequestError:
            return 0

    def capacity_asked(self, pod: dict[str, Any]) -> CapacityShares | None:
        """The shares ``pod``'s DRA claims ask by consumable capacity, and what each asks."""
        return self._claims_share(pod) if self._claims_share is not None else None

    def cpu_left(self, name: str) -> int | None:
        """Allocatable less the requests of the pods bound there; None when unknown."""
        allocatable = self.allocatable.get(name)
        return None if allocatable is None else allocatable - self.requested.get(name, 0)

    def memory_left(self, name: str) -> int | None:
        """Allocatable memory (MiB) less the requests of the pods bound there; None when unknown."""
        allocatable = self.memory_allocatable.get(name)
        return None if allocatable is None else allocatable - self.memory_requested.get(name, 0)

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
            cpu, memory, gpus = cpu_request(pod), memory_mib(pod), self._gpus_of(pod)
            shares = 0 if gpus else sum(gpu_request(pod, name) for name in self._shared)
            slices = 0 if gpus or shares else mig_slices_asked(pod, self._not_mig)
        except PodRequestError:
            return  # the verbs say why when the pod reaches them
        share = SHARE
        asked = None if gpus or shares or slices else self.capacity_asked(pod)
        if slices:
            shares, share = 1, self._asks.setdefault(slices, SHARE - 1 - len(self._asks))
        elif asked is not None:
            shares, share = asked[0], self._asks.setdefault(asked[1], SHARE - 1 - len(self._asks))
        node = str(spec.get("nodeName") or "")
        known = self._pods.get(uid)
        if known is not None and known[0] == node:
            return
        self.pod_gone(uid)
        accepted = self._accepted(pod) if gpus or shares else ANY
        shape = (cpu, MILLI if gpus else share if shares else 0, gpus or shares, accepted.key(), memory)
        if shape[3][:1] == (RULE,):
            self._rules.setdefault(shape[3], accepted)
        self._pods[uid] = (node, cpu, memory, shape)
        self.workload.add(shape)
        if node:
            self.requested[node] = self.requested.get(node, 0) + cpu
            self.memory_requested[node] = self.memory_requested.get(node, 0) + memory
            self._touched(node)

    def _accepted(self, pod: dict[str, Any]) -> Accepted:
        """The products the pod accepts; a spec that cannot be read accepts any (the API server
        validated it, so this is a double's or a future field's doing)."""
        try:
            accepted = pod_accepts(pod)
        except PodRequestError as error:
            log.warning("pod's GPU products unreadable: counted as any", extra={"error": str(error)})
            accepted = ANY
        return accepted.both(self._claims_accept(pod)) if self._claims_accept is not None else accepted

    def pod_gone(self, uid: str) -> None:
        known = self._pods.pop(uid, None)
        if known is None:
            return
        node, cpu, memory, shape = known
        self.workload.remove(shape)
        if node:
            self._touched(node)
            for table, amount in ((self.requested, cpu), (self.memory_requested, memory)):
                left = table.get(node, 0) - amount
                if left > 0:
                    table[node] = left
                else:
                    table.pop(node, None)


def _parse_mib(value: Any, where: str) -> int:
    """A node's allocatable memory in whole MiB (what is left of a MiB cannot hold a pod's)."""
    if value is None:
        raise PodRequestError(f"{where}: missing")
    return parse_bytes(value, where) // MIB
