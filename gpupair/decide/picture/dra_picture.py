"""A node's GPU picture from DRA: its ResourceSlices and the allocated ResourceClaims. Pure.

On a node whose GPUs are devices of a DRA driver, kube-scheduler's allocator writes every
grant into a claim's ``status.allocation``, so what is taken is exact and already in the API:
no reporter ledger, no TTL. This module turns a node's slices and the claims allocated from
its pools into the same ``NodeReport`` the reporter's annotations decode to, so placement,
decisions, reservations, the verbs and ``status`` work on it unchanged.

- **Devices.** Only devices of the configured driver, published for this node (``nodeName``),
  that are GPUs (the NVIDIA driver's ``type`` attribute is ``gpu``; MIG and other types are left
  out). A pool counts at its newest generation only, and only when all of its
  ``resourceSliceCount`` slices at that generation are in (the allocator, too, waits for a
  complete pool); a device name twice in one pool makes the pool invalid.
- **Links.** Where the node's reporter published ``gpupair.io/topology``, its measured links
  are used, each DRA device matched by uuid or PCI id. Otherwise they are inferred from the
  standard attributes: same ``pcieRoot`` is ``PHB`` (at most a host bridge apart: the inference
  cannot tell ``PIX``/``PXB`` from ``PHB``, nor see NVLink), same ``numaNode`` is ``NODE``,
  else ``SYS``. A device without ``numaNode`` (the driver omits it where sysfs says -1) and no
  reporter topology leaves the node without a usable picture, with the reason: guessing its
  socket is exactly the mistake gpupair exists to prevent.
- **Taken.** Every device named in an allocation result of this driver and pool, whether or
  not the claim is reserved for a pod yet (an allocated claim's devices are the allocator's,
  whatever happens next). The ledger lists, per pod in ``reservedFor``, the devices of its
  claims. A device with a ``NoSchedule``/``NoExecute`` taint is unhealthy, never free.
  A result naming a device no slice shows (gone with a driver restart) takes nothing.
- **Shared.** A device with ``allowMultipleAllocations`` (consumable capacity, KEP-5075) is
  taken by its results' ``consumedCapacity``, in thousandths (dra_capacity.py): partly consumed,
  it is not free and its share left is in the report's ``shares``; nothing consumed, it is free.
- **Partitioned.** A device consuming a GPU's counter set (partitionable devices, KEP-4815:
  NVIDIA's MIG devices) is a partition of that GPU, not a GPU of its own: an allocated one
  takes its share of the GPU by the counters it consumes (dra_counters.py), in ``shares`` as
  above (the larger where capacity is consumed too), and its pods are in the ledger on the GPU.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from gpupair.kubewire import dra
from gpupair.decide.claims.claim_intent import numa_constrained
from gpupair.decide.picture.dra_capacity import (
    Asked, CapacityError, capacity_asked, share_taken, shared_capacity,
)
from gpupair.decide.picture.dra_counters import CounterError, partitions_of, read_counters, taken_by_partitions
from gpupair.decide.score.gpu_products import ANY, Accepted, selector_accepts
from gpupair.kubewire.defaults import DRA_DRIVER
from gpupair.topology.layout import NO_NUMA, Device, NodeLayout, NodeState, normalize_pci
from gpupair.topology.nics import Nic, NicLayout
from gpupair.topology.report import Ledger, NodeReport, encode_topology, fingerprint
from gpupair.topology.shares import MILLI, GpuShares, SharedCapacity

SAME_ROOT, SAME_NUMA, CROSS_NUMA = "PHB", "NODE", "SYS"
GPU_TYPES = ("gpu",)  # the NVIDIA driver's ``type`` attribute; devices without one count as GPUs
SOURCE = "dra"
PRODUCT_ATTRIBUTE = "productName"  # NVIDIA's driver: the GPU's NVML name, in its own domain (gpu.nvidia.com/productName)


class PictureError(ValueError):
    """The node's DRA objects give no usable picture; the message says why."""


@dataclass(frozen=True)
class DraDevice:
    """One published GPU: where it is (pool, name) and what it is."""

    pool: str
    name: str
    index: int | None
    uuid: str
    pci_bus_id: str  # canonical (layout.normalize_pci), or "" when unknown
    numa_node: int  # NO_NUMA when unknown
    pcie_root: str
    tainted: bool = False
    product: str = ""  # productName (NVIDIA's driver publishes NVML's name); "" when not published
    capacity: tuple[SharedCapacity, ...] | None = None  # shared by allocations (dra_capacity.py); None: taken whole


@dataclass(frozen=True)
class DraPicture:
    """A node's DRA report, and how its devices map to layout indices."""

    report: NodeReport
    devices: dict[tuple[str, str], int]  # (pool, device name) -> layout index
    inferred: bool  # links inferred from attributes (no reporter topology matched)
    note: str = ""  # why the reporter's topology was not used, when it was there


@dataclass
class Allocation:
    """What one allocated claim takes on one node: its devices, and the pods it is reserved for."""

    namespace: str
    name: str
    devices: tuple[tuple[str, str], ...]  # (pool, device name) of this node's driver
    pods: tuple[tuple[str, str], ...] = ()  # (pod name, pod uid)
    allocated_at: datetime | None = None
    owners: tuple[str, ...] = ()  # UIDs of the pods owning the claim
    # Results with consumedCapacity (a device several allocations share): (pool, device), what it consumes
    consumed: tuple[tuple[tuple[str, str], dict[str, str]], ...] = ()


def allocation_of(claim: dra.ResourceClaim, driver: str) -> Allocation | None:
    """The claim's devices of ``driver``; None when it is not allocated or takes none of them."""
    allocation = claim.status.allocation
    if allocation is None:
        return None
    results = [r for r in allocation.devices.results if r.driver == driver]
    if not results:
        return None
    pods = tuple((p.name, p.uid) for p in claim.pods())
    return Allocation(claim.metadata.namespace, claim.metadata.name, tuple((r.pool, r.device) for r in results),
                      pods, allocation.allocationTimestamp, tuple(claim.owner_pods()),
                      tuple(((r.pool, r.device), r.consumedCapacity) for r in results if r.consumedCapacity))


def current_pools(slices: Iterable[dra.ResourceSlice], driver: str) -> dict[str, list[dra.ResourceSlice]]:
    """The driver's complete pools at their newest generation, by name, each pool's slices by
    name. The allocator takes pools from a Go map and slices as its lister lists them, neither
    in a set order; gpupair assumes pool name, then slice name (one pool of one slice per node,
    as NVIDIA's driver publishes without partitions, has one order only)."""
    by_pool: dict[str, list[dra.ResourceSlice]] = defaultdict(list)
    for item in slices:
        if item.spec.driver == driver:
            by_pool[item.spec.pool.name].append(item)
    pools: dict[str, list[dra.ResourceSlice]] = {}
    for pool in sorted(by_pool):
        newest = max(s.spec.pool.generation for s in by_pool[pool])
        current = sorted((s for s in by_pool[pool] if s.spec.pool.generation == newest),
                         key=lambda s: s.metadata.name)
        wanted = max(s.spec.pool.resourceSliceCount for s in current)
        if len(current) < wanted:
            raise PictureError(f"DRA pool {pool} is incomplete: {len(current)} of {wanted} "
                               f"ResourceSlices at generation {newest}")
        pools[pool] = current
    return pools


def current_devices(pools: dict[str, list[dra.ResourceSlice]], driver: str) -> list[DraDevice]:
    """The GPUs of the pools (current_pools), in the order the allocator walks them: pool by
    pool, slice by slice, each slice's devices in order."""
    found: list[DraDevice] = []
    for pool, current in pools.items():
        names: set[str] = set()
        for item in current:
            for device in item.spec.devices:
                if device.name in names:
                    raise PictureError(f"DRA pool {pool} lists device {device.name} twice")
                names.add(device.name)
                gpu = _gpu(pool, device, driver)
                if gpu is not None:
                    found.append(gpu)
    return found


def _gpu(pool: str, device: dra.SliceDevice, driver: str) -> DraDevice | None:
    kind = device.attribute("type", driver)
    if kind is not None and kind not in GPU_TYPES:
        return None
    index = device.attribute("index", driver)
    numa = device.attribute(dra.NUMA_ATTRIBUTE, driver)
    pci = device.attribute(dra.PCI_BUS_ID_ATTRIBUTE, driver)
    try:
        pci = normalize_pci(pci) if isinstance(pci, str) and pci else ""
    except ValueError:
        pci = ""
    root = device.attribute(dra.PCIE_ROOT_ATTRIBUTE, driver)
    uuid = device.attribute("uuid", driver)
    product = device.attribute(PRODUCT_ATTRIBUTE, driver)
    try:
        capacity = shared_capacity(device, driver)
    except CapacityError as exc:
        raise PictureError(f"DRA pool {pool}: {exc}") from None
    return DraDevice(
        pool=pool, name=device.name,
        index=index if isinstance(index, int) and not isinstance(index, bool) else None,
        uuid=uuid if isinstance(uuid, str) else "",
        pci_bus_id=pci,
        numa_node=numa if isinstance(numa, int) and not isinstance(numa, bool) and numa >= 0 else NO_NUMA,
        pcie_root=root if isinstance(root, str) else "",
        tainted=bool(device.blocking_taints()),
        product=product if isinstance(product, str) else "",
        capacity=capacity,
    )


def _matched(devices: list[DraDevice], topology: NodeLayout) -> dict[tuple[str, str], int] | str:
    """Each device's index in the reporter's topology, or why they do not all match."""
    by_uuid, by_pci = topology.by_uuid(), topology.by_pci()
    mapping: dict[tuple[str, str], int] = {}
    for device in devices:
        index = by_uuid.get(device.uuid) if device.uuid else None
        if index is None and device.pci_bus_id:
            index = by_pci.get(device.pci_bus_id)
        if index is None:
            return f"DRA device {device.pool}/{device.name} matches no GPU of the reporter's topology"
        if index in mapping.values():
            return f"two DRA devices match GPU{index} of the reporter's topology"
        mapping[(device.pool, device.name)] = index
    return mapping


def inferred_layout(devices: list[DraDevice]) -> tuple[NodeLayout, dict[tuple[str, str], int]]:
    """A layout from the attributes alone. Devices are numbered by their ``index`` attribute
    where every device has a distinct one, else by PCI id, else in slice order."""
    missing = [d for d in devices if d.numa_node == NO_NUMA]
    if missing:
        raise PictureError(
            f"DRA device {missing[0].pool}/{missing[0].name} has no {dra.NUMA_ATTRIBUTE} attribute and no "
            "gpupair reporter topology matches it: its socket is unknown")
    indices = [d.index for d in devices]
    if None not in indices and sorted(indices) == list(range(len(devices))):
        ordered = sorted(devices, key=lambda d: d.index)
    elif all(d.pci_bus_id for d in devices):
        ordered = sorted(devices, key=lambda d: d.pci_bus_id)
    else:
        ordered = list(devices)
    n = len(ordered)

    def label(a: DraDevice, b: DraDevice) -> str:
        if a is b:
            return "X"
        if a.numa_node != b.numa_node:
            return CROSS_NUMA
        return SAME_ROOT if a.pcie_root and a.pcie_root == b.pcie_root else SAME_NUMA

    layout = NodeLayout(
        devices=tuple(Device(index=i, uuid=d.uuid, pci_bus_id=d.pci_bus_id, numa_node=d.numa_node,
                             pcie_root=d.pcie_root) for i, d in enumerate(ordered)),
        links=tuple(tuple(label(ordered[i], ordered[j]) for j in range(n)) for i in range(n)),
    )
    return layout, {(d.pool, d.name): i for i, d in enumerate(ordered)}


def build(node: str, slices: Iterable[dra.ResourceSlice], allocations: Iterable[Allocation], driver: str,
          at: datetime, topology: NodeLayout | None = None) -> DraPicture:
    """The node's report from DRA; raises PictureError saying why there is none."""
    slices = [s for s in slices if s.spec.driver == driver]
    pools = current_pools(slices, driver)
    devices = current_devices(pools, driver)
    if not devices:
        raise PictureError(f"no GPU devices of DRA driver {driver} on node {node}")
    note = ""
    mapping: dict[tuple[str, str], int] | str = "no gpupair reporter topology on the node"
    if topology is not None:
        mapping = _matched(devices, topology)
        if isinstance(mapping, str):
            note = mapping
    if isinstance(mapping, str):
        layout, mapping = inferred_layout(devices)
        inferred = True
    else:
        layout, inferred = topology, False
    assert layout is not None
    walk = [mapping[(d.pool, d.name)] for d in devices]  # slice order, as the allocator walks
    walk += [i for i in range(layout.size) if i not in set(walk)]  # GPUs no slice offers: never free
    if walk != list(range(layout.size)):
        layout = replace(layout, walk=tuple(walk))
    tainted = frozenset(mapping[(d.pool, d.name)] for d in devices if d.tainted)
    capacities = {(d.pool, d.name): d.capacity for d in devices if d.capacity is not None}
    allocations = list(allocations)
    try:
        counters = read_counters(pools)
        partitions = partitions_of(counters, mapping)  # partition -> its GPU
        parted = {mapping[gpu]: part for gpu, part in taken_by_partitions(
            counters, partitions, [key for a in allocations for key in a.devices]).items()}
    except CounterError as exc:
        raise PictureError(str(exc)) from None
    taken: set[int] = set()
    uses: dict[tuple[str, str], list[dict[str, str]]] = defaultdict(list)
    pods: dict[tuple[str, str], set[int]] = defaultdict(set)
    uids: dict[tuple[str, str], str] = {}
    for allocation in allocations:
        shared = {key for key, _ in allocation.consumed if key in capacities}
        for key, used in allocation.consumed:
            if key in shared:
                uses[key].append(used)
        held = {mapping[key] for key in allocation.devices if key in mapping}
        held |= {mapping[partitions[key]] for key in allocation.devices if key in partitions}
        taken |= {mapping[key] for key in allocation.devices if key in mapping and key not in shared}
        for pod, uid in allocation.pods:
            if held:
                pods[(allocation.namespace, pod)] |= held
                if uid:
                    uids[(allocation.namespace, pod)] = uid
    shares = _shares(node, layout.size, mapping, capacities, uses, taken, driver, parted) \
        if capacities or parted else None
    if shares is not None:
        taken |= {i for i, part in enumerate(shares.taken) if part}
    free = frozenset(mapping.values()) - taken - tainted
    topology_json = encode_topology(layout)
    generation = max(s.spec.pool.generation for s in slices)
    report = NodeReport(
        state=NodeState(layout, free),
        unhealthy=tainted,
        generation=generation,
        reported_at=at,
        fingerprint=fingerprint(topology_json),
        ledger=Ledger({key: frozenset(v) for key, v in pods.items()}, uids),
        source=SOURCE,
        product=products.pop() if len(products := {d.product for d in devices}) == 1 else "",
        shares=shares,
    )
    return DraPicture(report, dict(mapping), inferred, note)



def _shares(node: str, size: int, mapping: dict[tuple[str, str], int],
            capacities: dict[tuple[str, str], tuple[SharedCapacity, ...]],
            uses: dict[tuple[str, str], list[dict[str, str]]], whole: set[int], driver: str,
            parted: dict[int, int]) -> GpuShares:
    """Each GPU's shares: a shared GPU (``capacities``) or a partitioned one (``parted``: what its
    partitions take) as MILLI, those its results consume (``uses``; all of them where a result took
    it ``whole``), the larger of the two; any other GPU as one share. A shared GPU's capacities
    travel with its shares, for sizing a claim that asks part of one."""
    try:
        part = {mapping[key]: share_taken(capacities[key], used, driver, f"{key[0]}/{key[1]}")
                for key, used in uses.items()}
    except CapacityError as exc:
        raise PictureError(f"DRA claim on node {node}: {exc}") from None
    part = {i: max(part.get(i, 0), parted.get(i, 0)) for i in set(part) | set(parted)}
    # A shared GPU counts MILLI shares, one a thousandth of it: the report's one share model
    # (of, taken) then carries consumable capacity exactly, since milli_left is in thousandths.
    measured = {mapping[key]: capacity for key, capacity in capacities.items()}
    measured.update({i: None for i in parted if i not in measured})
    return GpuShares(tuple(MILLI if i in measured else 1 for i in range(size)),
                     tuple((MILLI if i in whole else part.get(i, 0)) if i in measured else int(i in whole)
                           for i in range(size)),
                     capacity=tuple(measured.get(i) for i in range(size)))


def held_share(report: NodeReport, mapping: dict[tuple[str, str], int], allocations: Iterable[Allocation],
               driver: str) -> dict[int, int]:
    """What ``allocations`` (one pod's claims) take of each GPU of a node's DRA picture
    (``report``, ``mapping``: as ``build`` made them), by layout index, in thousandths: of a GPU
    shared by consumable capacity what their results consume, measured as ``build`` measures
    every claim's together (dra_capacity.share_taken); MILLI of a GPU they hold whole.
    CapacityError where a consumed amount is not a quantity."""
    capacity = report.shares.capacity if report.shares is not None else ()
    uses: dict[int, list[dict[str, str]]] = defaultdict(list)
    whole: set[int] = set()
    for allocation in allocations:
        shared = set()
        for key, used in allocation.consumed:
            index = mapping.get(key)
            if index is not None and index < len(capacity) and capacity[index] is not None:
                uses[index].append(used)
                shared.add(key)
        whole |= {mapping[key] for key in allocation.devices if key in mapping and key not in shared}
    held = {index: share_taken(capacity[index], used, driver, f"GPU{index}")  # type: ignore[arg-type]
            for index, used in uses.items()}
    held.update({index: MILLI for index in whole})
    return held


def claim_names(pod: Any, extended: bool = True) -> list[str]:
    """The ResourceClaims a pod uses: from its claim statuses (templates, resolved by the
    resourceclaim controller), its direct claims and, with ``extended``, the claim kube-scheduler
    makes for its extended-resource request. Tolerant of any shape: the pod may come from a
    request body."""
    if not isinstance(pod, dict):
        return []
    spec, status = pod.get("spec"), pod.get("status")
    spec, status = spec if isinstance(spec, dict) else {}, status if isinstance(status, dict) else {}
    entries = [*_dicts(status.get("resourceClaimStatuses")), *_dicts(spec.get("resourceClaims"))]
    if extended:
        entries += _dicts([status.get("extendedResourceClaimStatus")])
    names = {entry.get("resourceClaimName") for entry in entries}
    return sorted(n for n in names if isinstance(n, str) and n)


def _dicts(value: Any) -> list[dict]:
    return [item for item in value if isinstance(item, dict)] if isinstance(value, list) else []


NVLINK_SUBREQUEST_PREFIX = "nvlink-"  # the webhook's subrequests naming one bridged pair each


@dataclass(frozen=True)
class Demand:
    """What a claim asks of GPU DeviceClasses, and how the allocator will pick for it."""

    gpus: int
    policy: str  # a gpupair.decide.devices.policies name: dra-first-fit, dra-first-fit-numa, dra-first-available, dra-nvlink-*
    match_attributes: tuple[str, ...] = ()  # matchAttribute constraints over its GPU requests
    accepts: Accepted = ANY  # the GPU products its requests' CEL selectors accept (gpupair/decide/score/gpu_products.py)
    note: str = ""  # a selector on productName not read, counted as any product
    shares: int = 0  # devices asked with capacity.requests (KEP-5075): shares, not whole GPUs
    asked: Asked = ()  # what each share asks of its device's capacities (several asks: the most of each)


def claim_demand(claim: dra.ResourceClaim, gpu_classes: frozenset[str], driver: str = DRA_DRIVER) -> Demand:
    """The claim's GPUs (ExactCount requests of a GPU class; a firstAvailable request counts its
    first subrequest, the one the allocator tries first) and the allocator's pick for them. The
    webhook's ``preferred`` rewrite (a constrained first subrequest, an unconstrained second) is
    dra-first-available; its ``nvlink`` rewrite (subrequests ``nvlink-<n>``, then perhaps ``any``)
    dra-nvlink-pairs(-or-first-fit). A request asking ``capacity.requests`` asks shares of
    devices several claims share, sized on each device (dra_capacity.share_milli): counted in
    ``shares``, not ``gpus``."""
    gpus, policies, matched = 0, set(), []
    accepts, notes = ANY, []
    shares, asks = 0, []
    for request in claim.spec.devices.requests:
        first = request.exactly or (request.firstAvailable[0] if request.firstAvailable else None)
        if first is not None and first.capacity is not None and first.capacity.requests \
                and first.deviceClassName in gpu_classes and first.allocationMode == "ExactCount":
            shares += first.count
            asks.append(capacity_asked(first.capacity.requests, f"request {request.name}"))
            for selector in request.exactly.selectors if request.exactly is not None else ():
                found, why = selector_accepts((selector.cel or {}).get("expression"), driver)
                accepts, notes = accepts.both(found), [*notes, why] if why else notes
            continue
        if request.exactly is not None:
            asked = request.exactly
            if asked.deviceClassName not in gpu_classes or asked.allocationMode != "ExactCount":
                continue
            gpus += asked.count
            for selector in asked.selectors:
                found, why = selector_accepts((selector.cel or {}).get("expression"), driver)
                accepts, notes = accepts.both(found), [*notes, why] if why else notes
            matched += [c.matchAttribute for c in claim.spec.devices.constraints
                        if c.matchAttribute and (not c.requests or request.name in c.requests)]
            policies.add("dra-first-fit-numa" if numa_constrained(claim, request.name) else "dra-first-fit")
        elif request.firstAvailable:
            first = request.firstAvailable[0]
            if first.deviceClassName not in gpu_classes or first.allocationMode != "ExactCount":
                continue
            gpus += first.count
            if first.name.startswith(NVLINK_SUBREQUEST_PREFIX):
                policies.add("dra-nvlink-pairs-or-first-fit" if request.firstAvailable[-1].name == "any"
                             else "dra-nvlink-pairs")
            elif not numa_constrained(claim, request.name, first.name):
                policies.add("dra-first-fit")
            elif len(request.firstAvailable) > 1 and not numa_constrained(claim, request.name,
                                                                         request.firstAvailable[1].name):
                policies.add("dra-first-available")
            else:
                policies.add("dra-first-fit-numa")
    attributes, note, asked = tuple(dict.fromkeys(matched)), "; ".join(notes), most_asked(asks)
    if len(policies) == 1:
        return Demand(gpus, policies.pop(), attributes, accepts, note, shares, asked)
    # several GPU requests: the unconstrained walk bounds them
    return Demand(gpus, "dra-first-fit", attributes, accepts, note, shares, asked)


def most_asked(asks: Iterable[Asked]) -> Asked:
    """Several share requests' asks as one: the most any asks of each capacity."""
    most: dict[str, int] = {}
    for asked in asks:
        for name, amount in asked:
            most[name] = max(most.get(name, 0), amount)
    return tuple(sorted(most.items()))


def nics_from_slices(slices: Iterable[dra.ResourceSlice], drivers: frozenset[str], layout: NodeLayout) -> NicLayout | None:
    """The NICs an RDMA DRA driver publishes for the node, with each GPU's link inferred from the
    standard attributes as GPU links are: same ``pcieRoot`` PHB (the inference cannot see a
    shared PCIe switch, so it never says PIX or PXB), same ``numaNode`` NODE, else SYS. None
    without such slices. Devices in the driver's pools' newest generation; a NIC device is named
    by its device name."""
    by_pool: dict[tuple[str, str], list[dra.ResourceSlice]] = defaultdict(list)
    for item in slices:
        if item.spec.driver in drivers:
            by_pool[(item.spec.driver, item.spec.pool.name)].append(item)
    if not by_pool:
        return None
    found: list[Nic] = []
    for key in sorted(by_pool):
        newest = max(s.spec.pool.generation for s in by_pool[key])
        for item in sorted((s for s in by_pool[key] if s.spec.pool.generation == newest), key=lambda s: s.metadata.name):
            for device in item.spec.devices:
                numa = device.attribute(dra.NUMA_ATTRIBUTE, key[0])
                root = device.attribute(dra.PCIE_ROOT_ATTRIBUTE, key[0])
                pci = device.attribute(dra.PCI_BUS_ID_ATTRIBUTE, key[0])
                try:
                    pci = normalize_pci(pci) if isinstance(pci, str) and pci else ""
                except ValueError:
                    pci = ""
                found.append(Nic(name=device.name, pci_bus_id=pci,
                                 numa_node=numa if isinstance(numa, int) and not isinstance(numa, bool) and numa >= 0
                                 else NO_NUMA,
                                 pcie_root=root if isinstance(root, str) else ""))

    def link(gpu: Device, nic: Nic) -> str:
        if gpu.pcie_root and gpu.pcie_root == nic.pcie_root:
            return "PHB"
        if gpu.numa_node >= 0 and gpu.numa_node == nic.numa_node:
            return "NODE"
        return "SYS"

    return NicLayout(nics=tuple(found), links=tuple(tuple(link(gpu, nic) for nic in found) for gpu in layout.devices))
