"""One scan: the node's layout and the kubelet's allocations -> free and unhealthy devices.

``compute`` is pure. The allocation sources are the two ways the reporter learns what is
taken: the kubelet's PodResources API, or a fixed ``--allocated`` list (no kubelet: tests and
previews).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

from gpupair.kubewire.defaults import MIG_RESOURCE_PREFIX
from gpupair.topology import report
from gpupair.topology.nics import NICS_KEY, NicLayout, encode_nics
from gpupair.topology.layout import NodeLayout, NodeState
from gpupair.topology.mig_slices import MigDevices
from gpupair.topology.shares import SHARES_KEY, GpuShares, encode_shares
from gpupair.reporter.allocations import (
    PodDevices, PodResourcesClient, flatten_device_ids, free_devices, is_replica, map_device_ids, share_counts,
)


@dataclass(frozen=True)
class Allocations:
    """Device-plugin ids as the kubelet reports them.

    ``allocatable`` None means "every device in the layout" (no kubelet to ask).
    """

    allocated: tuple[str, ...] = ()
    allocatable: tuple[str, ...] | None = None
    # Per pod, (namespace, name, device ids): the ledger's source. None: no kubelet to ask,
    # so no ledger is published (a fixed --allocated list names no pods).
    pods: tuple[tuple[str, str, tuple[str, ...]], ...] | None = None
    # Shares offered under the whole-GPU resource name (time-slicing without renameByDefault).
    replicated: bool = False


@dataclass(frozen=True)
class ScanResult:
    layout: NodeLayout
    free: frozenset[int]
    unhealthy: frozenset[int]
    allocated: frozenset[int]
    unknown_ids: tuple[str, ...] = ()
    holders: tuple[report.PodHolding, ...] | None = None  # the allocation ledger
    nics: NicLayout | None = None  # the RDMA NICs and their GPU links; None: not known here
    product: str = ""  # the GPUs' product name (NVML's); "" when not known
    shares: GpuShares | None = None  # each GPU's shares, where the node shares GPUs

    def state(self) -> NodeState:
        return NodeState(self.layout, self.free)

    def free_by_numa(self) -> dict[int, tuple[int, ...]]:
        return self.state().free_by_numa()

    def annotations(self, generation: int, reported_at: datetime) -> dict[str, str | None]:
        annotations: dict[str, str | None] = {**report.encode_annotations(
            self.layout, self.free, generation, reported_at, self.unhealthy, holders=self.holders)}
        topology = annotations[report.TOPOLOGY_KEY]
        assert topology is not None
        if self.shares is not None:  # with every report where GPUs are shared (the publisher removes it)
            annotations[SHARES_KEY] = encode_shares(self.shares, report.fingerprint(topology), generation)
        return {**annotations, **self.hardware_annotations(topology)}

    def hardware_annotations(self, topology_json: str) -> dict[str, str]:
        """What the scan knows of the hardware beside the topology: ``gpupair.io/nics`` tied to
        the topology annotation, and ``gpupair.io/product``; each only where known."""
        found = {} if self.nics is None else {NICS_KEY: encode_nics(self.nics, report.fingerprint(topology_json))}
        if self.product:
            found[report.PRODUCT_KEY] = self.product
        return found


def compute(layout: NodeLayout, allocations: Allocations, lost: Iterable[int] = (),
            nics: NicLayout | None = None, product: str = "", mig: MigDevices | None = None) -> ScanResult:
    """Free = allocatable - allocated - unhealthy.

    Unhealthy: devices in the layout the kubelet does not offer (it drops unhealthy ones from
    allocatable) and devices NVML could not open (``lost``). ``mig``: NVML's MIG devices, which
    place ``MIG-<uuid>`` ids and size MIG shares.
    """
    allocatable = (
        allocations.allocatable
        if allocations.allocatable is not None
        else tuple(str(device.index) for device in layout.devices)
    )
    found = free_devices(layout, allocatable, allocations.allocated, mig)
    lost = frozenset(lost)
    return ScanResult(
        layout=layout,
        free=found.free - lost,
        unhealthy=found.unavailable | lost,
        allocated=found.allocated,
        unknown_ids=found.unknown_ids,
        holders=holdings(layout, allocations.pods, mig) if allocations.pods is not None else None,
        nics=nics,
        product=product,
        shares=share_counts(layout, allocatable, allocations.allocated, allocations.replicated, mig),
    )


def holdings(
    layout: NodeLayout, pods: Iterable[tuple[str, str, tuple[str, ...]]], mig: MigDevices | None = None
) -> tuple[report.PodHolding, ...]:
    """Each pod's device ids as layout indices, one entry per pod holding any known device."""
    out = []
    for namespace, name, ids in pods:
        indices, _ = map_device_ids(ids, layout, mig)
        if indices:
            out.append(report.PodHolding(namespace, name, frozenset(indices)))
    return tuple(sorted(out, key=lambda h: (h.namespace, h.name)))


class UnknownDevicesError(ValueError):
    """--allocated names devices the layout does not have."""


class AllocationSource(Protocol):
    description: str

    async def read(self) -> Allocations: ...


class StaticAllocations:
    """A fixed list of allocated device ids (indices or UUIDs), standing in for the kubelet."""

    def __init__(self, ids: Iterable[str]) -> None:
        self.ids = tuple(ids)
        self.description = f"--allocated {','.join(self.ids) or '(none)'}"

    def check(self, layout: NodeLayout) -> None:
        """Raise UnknownDevicesError naming ids that match no device of ``layout``."""
        _, unknown = map_device_ids(self.ids, layout)
        if unknown:
            hint = "" if layout.by_uuid() else " (this layout has no UUIDs: use device indices)"
            raise UnknownDevicesError(f"--allocated names devices this node does not have: {', '.join(unknown)}{hint}")

    async def read(self) -> Allocations:
        return Allocations(allocated=self.ids)


class PodResourcesAllocations:
    """What the kubelet offers and what its containers hold, for the GPU resource, the resources
    of GPU shares (``shared_names``: time-slicing's ``nvidia.com/gpu.shared``) and every MIG
    profile's resource (``nvidia.com/mig-3g.20gb``, mig.strategy mixed), whose ids name the same
    GPUs. One GetAllocatableResources and one List a read, whatever the number of names."""

    def __init__(self, client: PodResourcesClient, resource_name: str, shared_names: Iterable[str] = ()) -> None:
        self.client = client
        self.resource_name = resource_name
        self.shared_names = tuple(name for name in shared_names if name != resource_name)
        names = ", ".join((resource_name, *self.shared_names, f"{MIG_RESOURCE_PREFIX}*"))
        self.description = f"kubelet PodResources at {client.socket_path} ({names})"

    def reads(self, resource_name: str) -> bool:
        return (resource_name == self.resource_name or resource_name in self.shared_names
                or resource_name.startswith(MIG_RESOURCE_PREFIX))

    async def read(self) -> Allocations:
        offered = await self.client.allocatable_resources()
        replicated = any(map(is_replica, offered.get(self.resource_name, ())))
        # The GPU resource first, then the others by name: the same ids in the same order each read.
        names = sorted(filter(self.reads, offered), key=lambda name: (name != self.resource_name, name))
        allocatable = tuple(device_id for name in names for device_id in offered[name])
        held = await self.client.allocated_matching(self.reads)
        return Allocations(allocated=tuple(flatten_device_ids(held)), allocatable=allocatable,
                           pods=pods_of(held), replicated=replicated)


def pods_of(held: Iterable[PodDevices]) -> tuple[tuple[str, str, tuple[str, ...]], ...]:
    """Containers' devices gathered per pod (a pod's init and app containers may share devices)."""
    per_pod: dict[tuple[str, str], list[str]] = {}
    for entry in held:
        ids = per_pod.setdefault((entry.namespace, entry.pod), [])
        ids.extend(i for i in entry.device_ids if i not in ids)
    return tuple((ns, name, tuple(ids)) for (ns, name), ids in per_pod.items())


def parse_id_list(text: str) -> tuple[str, ...]:
    """``"0,4"`` or ``"GPU-a..., GPU-b..."`` -> ids; empty items are dropped."""
    return tuple(item.strip() for item in text.split(",") if item.strip())
