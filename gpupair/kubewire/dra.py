"""resource.k8s.io/v1 on the wire (Kubernetes v1.36): the parts of ResourceSlice and ResourceClaim
that gpupair reads (the webhook reads claims and templates being created with models of its
own: webhook.claims).

Field names are Go's JSON names (k8s.io/api/resource/v1/types.go). Decoding is lenient about
unknown fields, as Go's decoder is and as a newer apiserver needs, and strict about the types
of the fields read: an object that does not fit is rejected whole with ``DRAWireError`` saying
where, and the caller leaves it out of the node picture (and logs why) rather than guess.

A device attribute is a one-of (``int``, ``bool``, ``string``, ``version``, or, with the
DRAListTypeAttributes gate of KEP-5491, the lists ``ints``, ``bools``, ``strings``,
``versions``), and its name is either qualified (``resource.kubernetes.io/numaNode``) or short,
the short form meaning the driver's own domain (``index`` in a slice of ``gpu.nvidia.com`` is
``gpu.nvidia.com/index``). gpupair reads an attribute as one value: a list of one is that
value, and an empty or longer list has none (see ``DeviceAttribute.value``).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import Field, ValidationError

from gpupair.kubewire.wire import KubeWire, explain

API_VERSION = "resource.k8s.io/v1"
NUMA_ATTRIBUTE = "resource.kubernetes.io/numaNode"  # KEP-6072's standard name
PCIE_ROOT_ATTRIBUTE = "resource.kubernetes.io/pcieRoot"
PCI_BUS_ID_ATTRIBUTE = "resource.kubernetes.io/pciBusID"
EXTENDED_RESOURCE_CLAIM_KEY = "resource.kubernetes.io/extended-resource-claim"  # set by kube-scheduler
# Taint effects that keep the allocator off a device for requests that do not tolerate them.
BLOCKING_TAINT_EFFECTS = ("NoSchedule", "NoExecute")
MAX_DEVICES_PER_SLICE = 128  # the apiserver's ResourceSliceMaxDevices


class DRAWireError(ValueError):
    """A resource.k8s.io object that does not fit its type; the message says where."""


class OwnerReference(KubeWire):
    kind: str = ""
    name: str = ""
    uid: str = ""


class ObjectMeta(KubeWire):
    name: str = ""
    namespace: str = ""
    uid: str = ""
    generateName: str = ""
    creationTimestamp: datetime | None = Field(default=None, strict=False)
    annotations: dict[str, str] = Field(default_factory=dict)
    labels: dict[str, str] = Field(default_factory=dict)
    deletionTimestamp: datetime | None = Field(default=None, strict=False)
    ownerReferences: list[OwnerReference] = Field(default_factory=list)


class DeviceAttribute(KubeWire):
    int_: int | None = Field(default=None, alias="int")
    bool_: bool | None = Field(default=None, alias="bool")
    string: str | None = None
    version: str | None = None
    # KEP-5491 (DRAListTypeAttributes, alpha in 1.36): Go's IntValues etc., JSON ``ints`` etc.
    # NVIDIA's driver publishes numaNode as ``ints: [n]`` with the gate on.
    ints: list[int] | None = None
    bools: list[bool] | None = None
    strings: list[str] | None = None
    versions: list[str] | None = None

    def value(self) -> Any:
        """The attribute's one value, None if it has none. A list of one value is that value.
        KEP-5491 makes a list a set (``matchAttribute`` becomes a non-empty intersection), so a
        device whose ``numaNode`` lists 0 and 1 is on both NUMA nodes, and on no one of them: it
        matches a NUMA0 device and a NUMA1 device alike. Every value gpupair reads (numaNode,
        pcieRoot, pciBusID, index, uuid, type) places a device in one spot, so an empty or longer
        list reads as unknown (a numaNode unknown leaves the device's socket unknown), never as
        its first member."""
        for value in (self.int_, self.bool_, self.string, self.version):
            if value is not None:
                return value
        for values in (self.ints, self.bools, self.strings, self.versions):
            if values is not None:
                return values[0] if len(values) == 1 else None
        return None


class DeviceTaint(KubeWire):
    key: str
    value: str = ""
    effect: str


class CapacityRequestPolicyRange(KubeWire):
    min: str | None = None
    max: str | None = None
    step: str | None = None


class CapacityRequestPolicy(KubeWire):
    """How the allocator rounds what a request asks of a capacity (KEP-5075)."""

    default: str | None = None
    validValues: list[str] = Field(default_factory=list)
    validRange: CapacityRequestPolicyRange | None = None


class DeviceCapacity(KubeWire):
    value: str  # a quantity ("80Gi"), as the apiserver writes every resource.Quantity
    requestPolicy: CapacityRequestPolicy | None = None


class Counter(KubeWire):
    value: str  # a quantity, as the apiserver writes every resource.Quantity


class CounterSet(KubeWire):
    """A named set of counters a pool's devices consume from (KEP-4815, DRAPartitionableDevices,
    beta and on by default in 1.36): NVIDIA's driver publishes one per GPU. Since 1.35 a slice
    lists either ``sharedCounters`` or ``devices``, so the sets come in a slice of their own."""

    name: str
    counters: dict[str, Counter] = Field(default_factory=dict)


class DeviceCounterConsumption(KubeWire):
    counterSet: str
    counters: dict[str, Counter] = Field(default_factory=dict)


class SliceDevice(KubeWire):
    name: str
    attributes: dict[str, DeviceAttribute] = Field(default_factory=dict)
    taints: list[DeviceTaint] = Field(default_factory=list)
    # KEP-5075 (DRAConsumableCapacity, beta and on by default in 1.36): a device several
    # allocations share, each consuming part of its capacities.
    capacity: dict[str, DeviceCapacity] = Field(default_factory=dict)
    allowMultipleAllocations: bool | None = None
    # KEP-4815: what allocating the device takes of its pool's counter sets (at most two).
    consumesCounters: list[DeviceCounterConsumption] = Field(default_factory=list)

    def attribute(self, name: str, driver: str) -> Any:
        """The attribute's value by its qualified or short name (short: the driver's domain)."""
        domain, _, short = name.rpartition("/")
        found = self.attributes.get(name)
        if found is None and not domain:
            found = self.attributes.get(f"{driver}/{name}")
        elif found is None and domain == driver:
            found = self.attributes.get(short)
        return None if found is None else found.value()

    def blocking_taints(self) -> list[DeviceTaint]:
        return [t for t in self.taints if t.effect in BLOCKING_TAINT_EFFECTS]


class ResourcePool(KubeWire):
    name: str
    generation: int = 0
    resourceSliceCount: int = 0


class ResourceSliceSpec(KubeWire):
    driver: str
    pool: ResourcePool
    nodeName: str = ""
    allNodes: bool = False
    devices: list[SliceDevice] = Field(default_factory=list, max_length=MAX_DEVICES_PER_SLICE)
    sharedCounters: list[CounterSet] = Field(default_factory=list)


class ResourceSlice(KubeWire):
    metadata: ObjectMeta = Field(default_factory=ObjectMeta)
    spec: ResourceSliceSpec


class DeviceSelector(KubeWire):
    cel: dict[str, Any] | None = None


class CapacityRequirements(KubeWire):
    requests: dict[str, str] = Field(default_factory=dict)  # capacity name -> quantity (KEP-5075)


class ExactDeviceRequest(KubeWire):
    deviceClassName: str
    allocationMode: str = "ExactCount"
    count: int = 1
    selectors: list[DeviceSelector] = Field(default_factory=list)
    capacity: CapacityRequirements | None = None


class DeviceSubRequest(KubeWire):
    name: str
    deviceClassName: str
    allocationMode: str = "ExactCount"
    count: int = 1
    capacity: CapacityRequirements | None = None


class DeviceRequest(KubeWire):
    name: str
    exactly: ExactDeviceRequest | None = None
    firstAvailable: list[DeviceSubRequest] | None = None


class DeviceConstraint(KubeWire):
    requests: list[str] = Field(default_factory=list)
    matchAttribute: str | None = None


class DeviceClaim(KubeWire):
    requests: list[DeviceRequest] = Field(default_factory=list)
    constraints: list[DeviceConstraint] = Field(default_factory=list)


class ResourceClaimSpec(KubeWire):
    devices: DeviceClaim = Field(default_factory=DeviceClaim)


class DeviceRequestAllocationResult(KubeWire):
    request: str
    driver: str
    pool: str
    device: str
    # KEP-5075: set on a result for a device that allows multiple allocations. consumedCapacity
    # names every capacity of the device (zero included), with or without the driver's domain.
    shareID: str | None = None
    consumedCapacity: dict[str, str] = Field(default_factory=dict)


class DeviceAllocationResult(KubeWire):
    results: list[DeviceRequestAllocationResult] = Field(default_factory=list)


class AllocationResult(KubeWire):
    devices: DeviceAllocationResult = Field(default_factory=DeviceAllocationResult)
    allocationTimestamp: datetime | None = Field(default=None, strict=False)


class ResourceClaimConsumerReference(KubeWire):
    apiGroup: str = ""
    resource: str
    name: str
    uid: str = ""


class ResourceClaimStatus(KubeWire):
    allocation: AllocationResult | None = None
    reservedFor: list[ResourceClaimConsumerReference] = Field(default_factory=list)


class ResourceClaim(KubeWire):
    metadata: ObjectMeta = Field(default_factory=ObjectMeta)
    spec: ResourceClaimSpec = Field(default_factory=ResourceClaimSpec)
    status: ResourceClaimStatus = Field(default_factory=ResourceClaimStatus)

    def pods(self) -> list[ResourceClaimConsumerReference]:
        """The pods the claim is reserved for (``reservedFor`` may name other consumers)."""
        return [r for r in self.status.reservedFor if r.resource == "pods" and not r.apiGroup]

    def owner_pods(self) -> list[str]:
        """UIDs of the pods that own the claim: kube-scheduler's extended-resource claim, and a
        template's claims made by the resourceclaim controller, are owned by their pod."""
        return [r.uid for r in self.metadata.ownerReferences if r.kind == "Pod" and r.uid]


def _parse(model: type[KubeWire], obj: Any) -> Any:
    if not isinstance(obj, dict):
        raise DRAWireError(f"{model.__name__} must be a JSON object, got {type(obj).__name__}")
    try:
        return model.model_validate(obj)
    except ValidationError as exc:
        name = (obj.get("metadata") or {}).get("name") if isinstance(obj.get("metadata"), dict) else None
        raise DRAWireError(f"{model.__name__} {name or '?'}: {explain(exc)}") from None


def parse_slice(obj: Any) -> ResourceSlice:
    return _parse(ResourceSlice, obj)


def parse_claim(obj: Any) -> ResourceClaim:
    return _parse(ResourceClaim, obj)
