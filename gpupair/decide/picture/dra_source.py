"""The DRA source of the node picture: one driver's ResourceSlices and allocated ResourceClaims,
kept by node from two list+watches, turned into report entries on demand.

A node has a DRA picture when a slice of the configured driver names it (``spec.nodeName``);
then its entry comes from here (gpupair/decide/picture/dra_picture.py), with the links of the node's reporter
topology where one is published, and the reporter's own ``free`` annotation, which cannot see
DRA grants, is not used. Entries are built once per change of the node's slices, claims or
topology, and carry no staleness: the allocator writes every grant into the API before the pod
is bound, so the picture is as current as the watch.

Claims are found by pool: an allocation result names (driver, pool, device), and a pool belongs
to the node whose slices publish it. A claim allocated before its node's slices are seen (the
watches run side by side) is kept and counted as soon as they are.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace
from datetime import datetime, timezone
from typing import Any, Protocol

from gpupair.decide.picture.node_entries import ReportDecoder, ReportEntry
from gpupair.decide.devices.pickers import ALLOCATOR
from gpupair.kubewire import dra
from gpupair.decide.claims.claim_intent import ClaimIntent, claim_intent, gpu_requests
from gpupair.decide.claims.claim_explain import FreeDevice, why_unallocatable
from gpupair.kubewire.defaults import GPU_DEVICE_CLASSES
from gpupair.decide.picture.dra_capacity import CapacityError
from gpupair.decide.picture.dra_picture import (
    Allocation, Demand, PictureError, allocation_of, build, claim_demand, claim_names, held_share, most_asked,
    nics_from_slices,
)
from gpupair.topology.nics import NICS_KEY
from gpupair.decide.score.gpu_products import ANY
from gpupair.decide.pod.pod_request import PodRequestError
from gpupair.topology.report import TOPOLOGY_KEY, decode_node_nics

log = logging.getLogger("gpupair.extender.dra")

ChangeListener = Callable[[set[str]], None]


class ClaimNotSeen(PodRequestError):
    """A claim the pod names that the claim watch has not delivered (yet)."""

    def __init__(self, namespace: str, name: str):
        super().__init__(f"ResourceClaim {namespace}/{name} not seen by the extender yet")
        self.namespace, self.name = namespace, name


class WatchFeed(Protocol):
    """What a list+watch of one kind feeds (a WatchHandler, gpupair/kubeclient/list_watch.py),
    and whether its first list is in."""

    listed: bool

    def replace(self, items: list[dict[str, Any]]) -> None: ...

    def apply(self, event_type: str, obj: dict[str, Any]) -> None: ...


class DraFeed(Protocol):
    """What the DRA source needs from whoever lists and watches the API for it."""

    driver: str  # the ResourceSlices of this driver
    nic_drivers: frozenset[str]  # and of these RDMA drivers
    slices: WatchFeed
    claims: WatchFeed  # every ResourceClaim

    def mark_unserved(self) -> None:
        """The API serves no resource.k8s.io/v1: no node has a DRA picture, and none will."""
        ...


class DraNodes:
    def __init__(self, driver: str, decoder: ReportDecoder, clock: Callable[[], float],
                 gpu_classes: frozenset[str] = GPU_DEVICE_CLASSES, nic_drivers: frozenset[str] = frozenset(),
                 logger: logging.Logger | None = None):
        self.driver = driver
        self.log = logger or log  # what it leaves out, and why; a reader that shows it all may silence it
        self.nic_drivers = nic_drivers  # RDMA DRA drivers whose devices are the node's NICs
        self.gpu_classes = gpu_classes
        self._decoder = decoder
        self._clock = clock
        self._listeners: list[ChangeListener] = []
        self._slices: dict[str, dra.ResourceSlice] = {}  # slice name -> slice (this driver, one node)
        self._nic_slices: dict[str, dict[str, dra.ResourceSlice]] = defaultdict(dict)  # node -> name -> slice
        self._by_node: dict[str, dict[str, dra.ResourceSlice]] = defaultdict(dict)
        self._pool_node: dict[str, str] = {}  # pool -> the node whose slices publish it
        self._claims: dict[tuple[str, str], Allocation] = {}  # (namespace, name) -> its devices here
        self._by_pool: dict[str, set[tuple[str, str]]] = defaultdict(set)
        self._demands: dict[tuple[str, str], Demand] = {}  # every claim asking GPUs, allocated or not
        self._intents: dict[tuple[str, str], ClaimIntent] = {}  # of those, each that says its placement
        self._known: set[tuple[str, str]] = set()  # every claim seen
        self._versions: dict[str, int] = defaultdict(int)  # bumped per change of a node's inputs
        self._entries: dict[str, tuple[tuple, ReportEntry]] = {}
        self._mappings: dict[str, dict[tuple[str, str], int]] = {}  # node -> (pool, device) -> index, as built
        self._by_uid: dict[str, set[tuple[str, str]]] = defaultdict(set)  # pod uid -> allocated claims it holds
        self.slices = _Handler(self._replace_slices, self._apply_slice)
        self.claims = _Handler(self._replace_claims, self._apply_claim)
        self.rejected = 0  # objects that did not fit their type, for tests and logs

    @property
    def listed(self) -> bool:
        return self.slices.listed and self.claims.listed

    def mark_unserved(self) -> None:
        """The API serves no resource.k8s.io/v1: no node has a DRA picture, and none will."""
        self.slices.listed = self.claims.listed = True

    def subscribe(self, listener: ChangeListener) -> None:
        self._listeners.append(listener)

    # ---- readers

    def describes(self, node: str) -> bool:
        """Whether a slice of the driver names the node."""
        return bool(self._by_node.get(node))

    def nodes(self) -> set[str]:
        return {name for name, slices in self._by_node.items() if slices}

    def entry(self, node: str, topology: str | None, nics: str | None = None) -> ReportEntry | None:
        """The node's entry from DRA (``topology``, ``nics``: its reporter's annotations, for the
        links and the NICs), or None when no slice of the driver names the node."""
        if not self.describes(node):
            return None
        key = (self._versions[node], topology if isinstance(topology, str) else None,
               nics if isinstance(nics, str) else None)
        cached = self._entries.get(node)
        if cached is not None and cached[0] == key:
            return cached[1]
        entry = self._build(node, key[1], key[2])
        self._entries[node] = (key, entry)
        return entry

    def entry_of(self, node: str, annotations: Mapping[str, Any] | None) -> ReportEntry | None:
        """``entry`` as a source of the node picture (gpupair/decide/picture/node_picture.py): the links
        and NICs from the Node's reporter annotations, where it has them."""
        notes = annotations if isinstance(annotations, Mapping) else {}
        return self.entry(node, notes.get(TOPOLOGY_KEY), notes.get(NICS_KEY))

    def alive(self, node: str) -> float | None:
        return None  # the picture is as current as the watch: no heartbeat to judge it by

    def pod_demand(self, pod: Any, known_only: bool = False) -> Demand | None:
        """The GPUs a pod's own claims ask (kube-scheduler's extended-resource claim aside: the
        pod's nvidia.com/gpu request counts those) and the allocator's policy for them; None for
        a pod without GPU claims. PodRequestError when a claim is not in the watch yet, unless
        ``known_only``: then what the claims known ask."""
        names = claim_names(pod, extended=False)  # that one is made at binding, from the request
        if not names:
            return None
        namespace = ((pod.get("metadata") or {}).get("namespace") or "") if isinstance(pod, dict) else ""
        demands = []
        for name in names:
            demand = self._demands.get((namespace, name))
            if demand is None:
                if (namespace, name) not in self._known and not known_only:
                    raise ClaimNotSeen(namespace, name)
                continue
            demands.append(demand)
        if not demands:
            return None
        policies, accepts = {d.policy for d in demands}, ANY
        for demand in demands:
            accepts = accepts.both(demand.accepts)
        return Demand(sum(d.gpus for d in demands), policies.pop() if len(policies) == 1 else "dra-first-fit",
                      tuple(dict.fromkeys(a for d in demands for a in d.match_attributes)), accepts,
                      shares=sum(d.shares for d in demands), asked=most_asked(d.asked for d in demands))

    def why_unallocatable(self, pod: Any) -> str:
        """gpupair's reason no DRA node can allocate the pod's GPU claims (claim_explain), from
        the slices and the allocations watched; "" where some node could, or nothing is known."""
        demand = self.pod_demand(pod, known_only=True)
        if demand is None or demand.gpus <= 0:
            return ""
        return why_unallocatable(demand.gpus, demand.match_attributes,
                                 {node: self._free_gpus(node, demand.match_attributes) for node in self.nodes()})

    def _free_gpus(self, node: str, attributes: tuple[str, ...]) -> list[FreeDevice]:
        """The node's GPUs no allocation holds and no NoSchedule/NoExecute taint blocks, in
        slice order (each pool at its newest generation), with their values of ``attributes``."""
        slices = sorted(self._by_node.get(node, {}).values(), key=lambda s: (s.spec.pool.name, s.metadata.name))
        newest = {}
        for item in slices:
            newest[item.spec.pool.name] = max(newest.get(item.spec.pool.name, 0), item.spec.pool.generation)
        taken = {device for pool in newest for key in self._by_pool.get(pool, ())
                 for device in self._claims[key].devices}
        free = []
        for item in slices:
            pool = item.spec.pool.name
            if item.spec.pool.generation != newest[pool]:
                continue
            for device in item.spec.devices:
                kind = device.attribute("type", self.driver)
                if (pool, device.name) in taken or device.blocking_taints() or kind not in (None, "gpu"):
                    continue
                index = device.attribute("index", self.driver)
                free.append((f"GPU{index}" if index is not None else device.name,
                             {a: device.attribute(a, self.driver) for a in attributes}))
        return free

    def pod_claim_intents(self, pod: Any) -> list[ClaimIntent]:
        """What the pod's own GPU claims say of its placement (gpupair/decide/claims/claim_intent.py: their
        ``gpupair.io/placement``, else the webhook's constraint shape); empty where none says
        anything, or none is in the watch yet. kube-scheduler's extended-resource claim asks
        nothing, so it is not read: such a pod's intent is its own annotation."""
        names = claim_names(pod, extended=False)
        if not names:
            return []
        namespace = ((pod.get("metadata") or {}).get("namespace") or "") if isinstance(pod, dict) else ""
        return [said for name in names if (said := self._intents.get((namespace, name))) is not None]

    def held_claim_intents(self, uid: str) -> list[ClaimIntent]:
        """What the allocated GPU claims reserved for or owned by pod ``uid`` say of its
        placement: for bind, which knows the pod by name and UID only (filtered by another
        replica, or before a restart)."""
        return [said for key in sorted(self._by_uid.get(uid, ())) if (said := self._intents.get(key)) is not None]

    def owned(self, uid: str, namespace: str = "", names: Iterable[str] = ()) -> dict[str, frozenset[int]]:
        """The devices a pod's own allocated claims hold, by node, as layout indices of that
        node's picture: the claims reserved for the pod or owned by it (``uid``), and the claims
        it names (``names``, in ``namespace``). kube-scheduler allocates a pod's claims in
        PreBind, before any extender's bind, and a retried pod may find its claims still
        allocated: those devices are the pod's own, not another pod's."""
        keys = set(self._by_uid.get(uid, ())) if uid else set()
        keys.update((namespace, name) for name in names)
        found: dict[str, set[int]] = defaultdict(set)
        for key in keys:
            allocation = self._claims.get(key)
            if allocation is None:
                continue
            for pool, device in allocation.devices:
                node = self._pool_node.get(pool)
                index = self._mappings.get(node, {}).get((pool, device)) if node is not None else None
                if index is not None:
                    found[node].add(index)  # type: ignore[index]
        return {node: frozenset(indices) for node, indices in found.items()}

    def held_shares(self, pod: Any) -> dict[str, dict[int, int]]:
        """What the pod's own allocated claims take of each GPU, by node and layout index of the
        node's picture as last drawn, in thousandths (dra_picture.held_share: a GPU shared by
        consumable capacity what they consume of it, one held whole MILLI); a node whose
        picture is not drawn, or not usable, is left out."""
        names = claim_names(pod, extended=False)
        namespace = ((pod.get("metadata") or {}).get("namespace") or "") if isinstance(pod, dict) else ""
        by_node: dict[str, list[Allocation]] = defaultdict(list)
        for name in names:
            allocation = self._claims.get((namespace, name))
            if allocation is None:
                continue
            for node in {self._pool_node.get(pool) for pool, _ in allocation.devices} - {None}:
                by_node[node].append(allocation)  # type: ignore[index]
        found: dict[str, dict[int, int]] = {}
        for node, allocations in by_node.items():
            drawn, mapping = self._entries.get(node), self._mappings.get(node)
            if drawn is None or drawn[0][0] != self._versions[node] or drawn[1].report is None or mapping is None:
                continue
            try:
                held = held_share(drawn[1].report, mapping, allocations, self.driver)
            except CapacityError:
                continue  # the node's picture is unusable for the same reason
            if held:
                found[node] = held
        return found

    def learn_claim(self, obj: dict[str, Any]) -> None:
        """A claim read from the API rather than delivered by the watch (see ClaimNotSeen); the
        watch's own event for it replaces it later."""
        self._apply_claim("ADDED", obj)

    def allocations(self, node: str) -> list[Allocation]:
        pools = {s.spec.pool.name for s in self._by_node.get(node, {}).values()}
        return [self._claims[key] for pool in sorted(pools) for key in sorted(self._by_pool.get(pool, ()))]

    # ---- internals

    def _build(self, node: str, topology: str | None, nics: str | None = None) -> ReportEntry:
        layout = self._decoder.layout_of(topology) if topology is not None else None
        at = datetime.fromtimestamp(self._clock(), timezone.utc)
        try:
            picture = build(node, list(self._by_node[node].values()), self.allocations(node), self.driver, at,
                            layout)
        except PictureError as exc:
            self.log.info("node DRA picture unusable", extra={"node": node, "why": str(exc)})
            self._mappings.pop(node, None)
            return ReportEntry(None, f"unusable DRA picture: {exc}", "invalid")
        self._mappings[node] = picture.devices
        if picture.note:
            self.log.info("node DRA picture with inferred links", extra={"node": node, "why": picture.note})
        report = picture.report
        if nics is not None and not picture.inferred:  # the reporter's NICs index its own layout
            found, problem = decode_node_nics({NICS_KEY: nics}, report.fingerprint, report.layout.size)
            report = replace(report, nics=found, nics_problem=problem)
        if report.nics is None and self._nic_slices.get(node):  # measured links first, then inferred ones
            report = replace(report, nics=nics_from_slices(self._nic_slices[node].values(), self.nic_drivers,
                                                           report.layout))
        return ReportEntry(report, shared=self._decoder.shared, picker=ALLOCATOR)

    def _changed(self, nodes: set[str]) -> None:
        nodes.discard("")
        for node in nodes:
            self._versions[node] += 1
            if not self._by_node.get(node):
                self._by_node.pop(node, None)
                self._entries.pop(node, None)
                self._mappings.pop(node, None)
        if nodes:
            for listener in self._listeners:
                listener(nodes)

    def _pool_nodes(self, pools: set[str]) -> set[str]:
        return {self._pool_node[pool] for pool in pools if pool in self._pool_node}

    # slices

    def _replace_slices(self, items: list[dict[str, Any]]) -> None:
        touched = set(self._by_node) | set(self._nic_slices)
        self._slices.clear()
        self._by_node.clear()
        self._pool_node.clear()
        self._nic_slices.clear()
        for obj in items:
            self._put_slice(obj)
        self._changed(touched | set(self._by_node))

    def _apply_slice(self, event: str, obj: dict[str, Any]) -> None:
        name = _name(obj)
        old = self._slices.pop(name, None)
        touched = {node for node, slices in self._nic_slices.items() if slices.pop(name, None) is not None}
        if old is not None:
            node, pool = old.spec.nodeName, old.spec.pool.name
            touched.add(node)
            self._by_node[node].pop(name, None)
            if not any(s.spec.pool.name == pool for s in self._by_node[node].values()):
                self._pool_node.pop(pool, None)
        if event != "DELETED":
            touched.add(self._put_slice(obj))
        self._changed(touched)

    def _put_slice(self, obj: dict[str, Any]) -> str:
        try:
            item = dra.parse_slice(obj)
        except dra.DRAWireError as exc:
            self.rejected += 1
            self.log.warning("ResourceSlice left out of the node picture", extra={"why": str(exc)})
            return ""
        if item.spec.nodeName and item.spec.driver in self.nic_drivers:
            self._nic_slices[item.spec.nodeName][item.metadata.name] = item
            return item.spec.nodeName
        if item.spec.driver != self.driver or not item.spec.nodeName:
            return ""  # another driver's, or not one node's (allNodes, node selectors)
        self._slices[item.metadata.name] = item
        self._by_node[item.spec.nodeName][item.metadata.name] = item
        self._pool_node[item.spec.pool.name] = item.spec.nodeName
        return item.spec.nodeName

    # claims

    def _replace_claims(self, items: list[dict[str, Any]]) -> None:
        pools = set(self._by_pool)
        self._claims.clear()
        self._by_pool.clear()
        self._by_uid.clear()
        self._demands.clear()
        self._intents.clear()
        self._known.clear()
        for obj in items:
            pools |= self._put_claim(obj)
        self._changed(self._pool_nodes(pools))

    def _apply_claim(self, event: str, obj: dict[str, Any]) -> None:
        meta = obj.get("metadata") if isinstance(obj, dict) else None
        meta = meta if isinstance(meta, dict) else {}
        key = (str(meta.get("namespace") or ""), str(meta.get("name") or ""))
        pools = self._drop_claim(key)
        if event != "DELETED":
            pools |= self._put_claim(obj)
        self._changed(self._pool_nodes(pools))

    def _drop_claim(self, key: tuple[str, str]) -> set[str]:
        self._demands.pop(key, None)
        self._intents.pop(key, None)
        self._known.discard(key)
        old = self._claims.pop(key, None)
        if old is None:
            return set()
        for uid in _holders(old):
            held = self._by_uid.get(uid)
            if held is not None:
                held.discard(key)
                if not held:
                    del self._by_uid[uid]
        pools = {pool for pool, _ in old.devices}
        for pool in pools:
            self._by_pool[pool].discard(key)
            if not self._by_pool[pool]:
                del self._by_pool[pool]
        return pools

    def _put_claim(self, obj: dict[str, Any]) -> set[str]:
        try:
            claim = dra.parse_claim(obj)
        except dra.DRAWireError as exc:
            self.rejected += 1
            self.log.warning("ResourceClaim left out of the node picture", extra={"why": str(exc)})
            return set()
        key = (claim.metadata.namespace, claim.metadata.name)
        self._known.add(key)
        if claim.metadata.annotations.get(dra.EXTENDED_RESOURCE_CLAIM_KEY) != "true":
            demand = claim_demand(claim, self.gpu_classes, self.driver)
            if demand.gpus or demand.shares:
                self._demands[key] = demand
                if demand.note:
                    self.log.info("claim's product selector read as any product",
                                  extra={"claim": f"{key[0]}/{key[1]}", "why": demand.note})
                said = claim_intent(claim, gpu_requests(claim, self.gpu_classes))
                if said is not None:
                    self._intents[key] = said
        allocation = allocation_of(claim, self.driver)
        if allocation is None:
            return set()
        self._claims[key] = allocation
        for uid in _holders(allocation):
            self._by_uid[uid].add(key)
        pools = {pool for pool, _ in allocation.devices}
        for pool in pools:
            self._by_pool[pool].add(key)
        return pools


class _Handler:
    """A WatchHandler (gpupair/kubeclient/list_watch.py) over one kind."""

    def __init__(self, replace: Callable[[list[dict[str, Any]]], None],
                 apply: Callable[[str, dict[str, Any]], None]):
        self._replace = replace
        self.apply = apply
        self.listed = False

    def replace(self, items: list[dict[str, Any]]) -> None:
        self._replace(items)
        self.listed = True


def _holders(allocation: Allocation) -> set[str]:
    """UIDs of the pods whose own the claim is: those it is reserved for, and its owners."""
    return {uid for _, uid in allocation.pods if uid} | set(allocation.owners)


def _name(obj: Any) -> str:
    meta = obj.get("metadata") if isinstance(obj, dict) else None
    name = meta.get("name") if isinstance(meta, dict) else None
    return name if isinstance(name, str) else ""
