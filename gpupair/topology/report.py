"""The node report: a layout and its free devices as versioned JSON node annotations.

Two annotations, so the changing part stays small and the static part is written rarely:

- ``gpupair.io/topology``: devices and pairwise links (and P2P where probed). Changes only
  when the hardware does. Carries no time; its fingerprint ties free reports to it.
- ``gpupair.io/free``: free and unhealthy device indices, the topology fingerprint they refer
  to, a generation that only grows, and the time of the scan, so a reader can tell a stale or
  out-of-order report from a live one.
- ``gpupair.io/allocations``: the allocation ledger, which pod holds which devices, written in
  the same patch as ``free`` and tied to it by the generation. A reader uses it to end a
  reservation the moment its pod shows up, whatever devices the pod got. It is a separate
  annotation so that extenders older than it, whose ``free`` decoder forbids unknown fields,
  keep working beside reporters that write it; a missing, corrupt or mismatched ledger leaves
  the report usable, without a ledger.
- ``gpupair.io/product``: the GPUs' product name as NVML gives it (``NVIDIA H200``), plain text,
  for the fragmentation score's GPU models. Its own annotation for the same reason; a report
  without it (an older reporter, a node of mixed products) or with one that is not a short line
  of printable text has no product, and the extender reads GFD's label instead.
- ``gpupair.io/shares``: each GPU's shares (time-slicing or MPS replicas, MIG slices) and how
  many pods hold, where the node shares GPUs (gpupair/topology/shares.py); tied to ``free`` by the
  generation, as the ledger is.

Device field names follow Kubernetes DRA's standard attributes (``pciBusID``, ``pcieRoot``) and
the NUMA attribute drivers publish (``numaNode``). Decoding is strict and says why it rejects.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from gpupair.topology import limits, links
from gpupair.topology.layout import Device, NodeLayout, NodeState
from gpupair.topology.nics import NICS_KEY, NicLayout, NicsError, decode_nics
from gpupair.topology.shares import SHARES_KEY, GpuShares, SharesError, decode_shares
from gpupair.kubewire.wire import annotation_model

PREFIX = "gpupair.io/"
TOPOLOGY_KEY = PREFIX + "topology"
FREE_KEY = PREFIX + "free"
ALLOCATIONS_KEY = PREFIX + "allocations"
PRODUCT_KEY = PREFIX + "product"
# The annotations a report may have beside topology and free, each optional.
EXTRA_KEYS = (ALLOCATIONS_KEY, NICS_KEY, PRODUCT_KEY, SHARES_KEY)
MAX_PRODUCT_CHARS = 96  # NVML_DEVICE_NAME_V2_BUFFER_SIZE
FORMAT_VERSION = 1
MAX_DEVICES = limits.MAX_GPUS  # a larger node's report is refused, with the reason
MAX_ANNOTATION_BYTES = 64 * 1024  # the API server allows 256 KiB for all annotations together


class ReportError(ValueError):
    """A node's report is missing, malformed, inconsistent or stale; the message says which."""

    def __init__(self, reason: str, kind: Literal["missing", "invalid", "stale"] = "invalid"):
        super().__init__(reason)
        self.reason = reason
        self.kind = kind


class _ReportModel(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


class DeviceEntry(_ReportModel):
    index: int = Field(ge=0, lt=MAX_DEVICES)
    uuid: str = Field(default="", max_length=96)
    pciBusID: str = Field(default="", max_length=32)
    numaNode: int = Field(default=-1, ge=-1, le=1024)
    pcieRoot: str = Field(default="", max_length=64)


class TopologyReport(_ReportModel):
    v: Literal[1] = FORMAT_VERSION
    devices: list[DeviceEntry] = Field(max_length=MAX_DEVICES)
    links: list[list[str]] = Field(max_length=MAX_DEVICES)
    p2p: list[list[bool | None]] | None = None

    @field_validator("links")
    @classmethod
    def _known_labels(cls, rows: list[list[str]]) -> list[list[str]]:
        for row in rows:
            for label in row:
                if not links.is_known(label):
                    raise ValueError(f"unknown link label {label!r}")
        return rows


class FreeReport(_ReportModel):
    v: Literal[1] = FORMAT_VERSION
    topology: str = Field(min_length=1, max_length=64)  # fingerprint of the topology annotation
    free: list[int] = Field(max_length=MAX_DEVICES)
    unhealthy: list[int] = Field(default_factory=list, max_length=MAX_DEVICES)
    generation: int = Field(ge=0)
    reportedAt: datetime = Field(strict=False)

    @field_validator("reportedAt")
    @classmethod
    def _aware(cls, value: datetime) -> datetime:
        if value.tzinfo is None:
            raise ValueError("reportedAt needs a time zone (RFC 3339, e.g. ...Z)")
        return value


class PodAllocation(_ReportModel):
    """One pod's devices, as the kubelet's PodResources API lists them."""

    namespace: str = Field(min_length=1, max_length=63)
    name: str = Field(min_length=1, max_length=253)
    uid: str = Field(default="", max_length=64)  # empty: the reporter could not map it
    devices: list[int] = Field(min_length=1, max_length=MAX_DEVICES)


class AllocationsReport(_ReportModel):
    v: Literal[1] = FORMAT_VERSION
    topology: str = Field(min_length=1, max_length=64)
    generation: int = Field(ge=0)  # equal to the free report's, or the ledger is not used
    pods: list[PodAllocation] = Field(max_length=MAX_DEVICES)  # each holds >= 1 device


@dataclass(frozen=True)
class Ledger:
    """Which pod holds which devices on one node, at the free report's generation."""

    pods: Mapping[tuple[str, str], frozenset[int]]  # (namespace, name) -> device indices
    uids: Mapping[tuple[str, str], str]  # (namespace, name) -> pod UID, where the reporter knew it

    def lists(self, namespace: str, name: str, uid: str = "") -> bool:
        """Whether the ledger shows this pod holding devices. Where both sides know the UID it
        must match: a pod re-created under the same name is not its predecessor."""
        key = (namespace, name)
        if key not in self.pods:
            return False
        known = self.uids.get(key)
        return not (uid and known and known != uid)

    def devices_of(self, namespace: str, name: str) -> frozenset[int] | None:
        return self.pods.get((namespace, name))


@dataclass(frozen=True)
class NodeReport:
    """A decoded, consistent report."""

    state: NodeState
    unhealthy: frozenset[int]
    generation: int
    reported_at: datetime
    fingerprint: str
    ledger: Ledger | None = None  # None: the reporter wrote none (older), or it was unusable
    ledger_problem: str = ""  # why a ledger that was there is not used
    source: str = "reporter"  # reporter: the node's annotations; dra: its ResourceSlices and claims
    nics: NicLayout | None = None  # gpupair.io/nics; None: a reporter older than it, or unusable
    nics_problem: str = ""  # why a gpupair.io/nics that was there is not used
    product: str = ""  # the GPUs' product name (gpupair.io/product, or DRA's productName); "" if unknown
    shares: GpuShares | None = None  # gpupair.io/shares; None: every GPU whole, or the annotation unusable
    shares_problem: str = ""  # why a gpupair.io/shares that was there is not used

    def milli_left(self, index: int) -> int:
        """What is left of GPU ``index`` for pods, in thousandths of a GPU: a whole one where
        free, a share count's part where partly taken, else none."""
        if index in self.state.free:
            return 1000
        return self.shares.milli_left(index) if self.shares is not None else 0

    @property
    def layout(self) -> NodeLayout:
        return self.state.layout

    def age(self, now: datetime) -> float:
        return (now - self.reported_at).total_seconds()


def _compact(model: BaseModel) -> str:
    return json.dumps(model.model_dump(mode="json", exclude_defaults=False), separators=(",", ":"))


def fingerprint(topology_json: str) -> str:
    return hashlib.sha256(topology_json.encode()).hexdigest()[:16]


def topology_report(layout: NodeLayout) -> TopologyReport:
    return TopologyReport(
        devices=[
            DeviceEntry(
                index=d.index,
                uuid=d.uuid,
                pciBusID=d.pci_bus_id,
                numaNode=d.numa_node,
                pcieRoot=d.pcie_root,
            )
            for d in layout.devices
        ],
        links=[list(row) for row in layout.links],
        p2p=[list(row) for row in layout.p2p] if layout.p2p is not None else None,
    )


def encode_topology(layout: NodeLayout) -> str:
    return _compact(topology_report(layout))


def encode_free(
    topology_json: str,
    free: frozenset[int] | set[int],
    generation: int,
    reported_at: datetime,
    unhealthy: frozenset[int] | set[int] = frozenset(),
) -> str:
    report = FreeReport(
        topology=fingerprint(topology_json),
        free=sorted(free),
        unhealthy=sorted(unhealthy),
        generation=generation,
        reportedAt=reported_at.astimezone(timezone.utc).replace(microsecond=0),
    )
    return json.dumps(
        {**report.model_dump(mode="json"), "reportedAt": _rfc3339(report.reportedAt)},
        separators=(",", ":"),
    )


@dataclass(frozen=True)
class PodHolding:
    """What a reporter knows of one pod's devices (all its containers together)."""

    namespace: str
    name: str
    devices: frozenset[int]
    uid: str = ""


def encode_allocations(
    topology_json: str, holders: Iterable[PodHolding], generation: int
) -> str:
    report = AllocationsReport(
        topology=fingerprint(topology_json),
        generation=generation,
        pods=[
            PodAllocation(namespace=h.namespace, name=h.name, uid=h.uid, devices=sorted(h.devices))
            for h in sorted(holders, key=lambda h: (h.namespace, h.name))
        ],
    )
    return _compact(report)


def encode_annotations(
    layout: NodeLayout,
    free: frozenset[int] | set[int],
    generation: int,
    reported_at: datetime,
    unhealthy: frozenset[int] | set[int] = frozenset(),
    holders: Iterable[PodHolding] | None = None,
) -> dict[str, str]:
    """The report's annotations; with ``holders`` (even empty) the ledger too."""
    topology_json = encode_topology(layout)
    annotations = {
        TOPOLOGY_KEY: topology_json,
        FREE_KEY: encode_free(topology_json, free, generation, reported_at, unhealthy),
    }
    if holders is not None:
        annotations[ALLOCATIONS_KEY] = encode_allocations(topology_json, holders, generation)
    return annotations


def _rfc3339(moment: datetime) -> str:
    return moment.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _load(key: str, raw: str, model: type[BaseModel]) -> BaseModel:
    return annotation_model(key, raw, model, MAX_ANNOTATION_BYTES, ReportError)


def decode_layout(topology_json: str) -> NodeLayout:
    report = _load(TOPOLOGY_KEY, topology_json, TopologyReport)
    assert isinstance(report, TopologyReport)
    try:
        return NodeLayout(
            devices=tuple(
                Device(
                    index=d.index,
                    uuid=d.uuid,
                    pci_bus_id=d.pciBusID,
                    numa_node=d.numaNode,
                    pcie_root=d.pcieRoot,
                )
                for d in report.devices
            ),
            links=tuple(tuple(links.normalize(label) for label in row) for row in report.links),
            p2p=tuple(tuple(row) for row in report.p2p) if report.p2p is not None else None,
        )
    except ValueError as exc:
        raise ReportError(f"{TOPOLOGY_KEY} rejected: {exc}") from None


def decode_ledger(
    ledger_json: object, layout: NodeLayout, topology: str, generation: int, free: frozenset[int],
    shared: frozenset[int] = frozenset(),
) -> Ledger:
    """Decode ``gpupair.io/allocations`` against the free report it came with; ``shared``: the
    GPUs the node shares, which several pods may hold."""
    if not isinstance(ledger_json, str):
        raise ReportError(f"{ALLOCATIONS_KEY} must be a string")
    report = _load(ALLOCATIONS_KEY, ledger_json, AllocationsReport)
    assert isinstance(report, AllocationsReport)
    if report.topology != topology:
        raise ReportError(f"{ALLOCATIONS_KEY} refers to topology {report.topology}, the node shows {topology}")
    if report.generation != generation:
        # Written apart from the free report (a partial or racing write): not the same snapshot.
        raise ReportError(f"{ALLOCATIONS_KEY} is of generation {report.generation}, {FREE_KEY} of {generation}")
    pods: dict[tuple[str, str], frozenset[int]] = {}
    uids: dict[tuple[str, str], str] = {}
    held: set[int] = set()
    for pod in report.pods:
        key = (pod.namespace, pod.name)
        devices = frozenset(pod.devices)
        bad = sorted(i for i in devices if not 0 <= i < layout.size)
        if bad:
            raise ReportError(f"{ALLOCATIONS_KEY} {pod.namespace}/{pod.name} devices out of range: {bad}")
        if key in pods or len(devices) != len(pod.devices):
            raise ReportError(f"{ALLOCATIONS_KEY} lists {pod.namespace}/{pod.name} or one of its devices twice")
        if (devices & held) - shared:
            raise ReportError(f"{ALLOCATIONS_KEY} gives devices {sorted(devices & held)} to two pods")
        if devices & free:
            raise ReportError(f"{ALLOCATIONS_KEY} lists devices {sorted(devices & free)} as held that {FREE_KEY} shows free")
        held |= devices
        pods[key] = devices
        if pod.uid:
            uids[key] = pod.uid
    return Ledger(pods, uids)


def decode_node_nics(annotations: Mapping[str, str], topology_fingerprint: str,
                     gpus: int) -> tuple[NicLayout | None, str]:
    """The node's NICs from ``gpupair.io/nics``, or None and why (empty: none written)."""
    text = annotations.get(NICS_KEY)
    if text is None:
        return None, ""
    try:
        return decode_nics(text, topology_fingerprint, gpus), ""
    except NicsError as exc:
        return None, str(exc)


def decode_product(annotations: Mapping[str, object]) -> str:
    """The ``gpupair.io/product`` name, or "" where there is none usable."""
    text = annotations.get(PRODUCT_KEY)
    if not isinstance(text, str) or len(text) > MAX_PRODUCT_CHARS or not text.isprintable():
        return ""
    return text.strip()


def decode_annotations(
    annotations: Mapping[str, str] | None,
    now: datetime | None = None,
    stale_after: float | None = None,
    layout: NodeLayout | None = None,
) -> NodeReport:
    """Decode a node's report; raise ReportError saying why it cannot be used.

    ``layout`` may pass an already decoded topology (caches decode it once per change).
    """
    annotations = annotations or {}
    topology_json = annotations.get(TOPOLOGY_KEY)
    free_json = annotations.get(FREE_KEY)
    if topology_json is None or free_json is None:
        missing = TOPOLOGY_KEY if topology_json is None else FREE_KEY
        raise ReportError(f"no gpupair report ({missing} missing)", kind="missing")
    if layout is None:
        layout = decode_layout(topology_json)
    free = _load(FREE_KEY, free_json, FreeReport)
    assert isinstance(free, FreeReport)
    expected = fingerprint(topology_json)
    if free.topology != expected:
        raise ReportError(
            f"{FREE_KEY} refers to topology {free.topology}, the node shows {expected}"
        )
    for name, members in (("free", free.free), ("unhealthy", free.unhealthy)):
        bad = sorted(i for i in members if not 0 <= i < layout.size)
        if bad:
            raise ReportError(f"{FREE_KEY} {name} devices out of range 0..{layout.size - 1}: {bad}")
        if len(set(members)) != len(members):
            raise ReportError(f"{FREE_KEY} {name} lists a device twice")
    both = set(free.free) & set(free.unhealthy)
    if both:
        raise ReportError(f"{FREE_KEY} lists devices both free and unhealthy: {sorted(both)}")
    shares, shares_problem = None, ""
    if annotations.get(SHARES_KEY) is not None:
        try:
            shares = decode_shares(annotations[SHARES_KEY], layout.size, expected, free.generation,
                                   frozenset(free.free))
        except SharesError as exc:
            shares_problem = str(exc)
    shared = frozenset(i for i, of in enumerate(shares.of) if of > 1) if shares is not None else frozenset()
    ledger, ledger_problem = None, ""
    ledger_json = annotations.get(ALLOCATIONS_KEY)
    if ledger_json is not None:
        try:
            ledger = decode_ledger(ledger_json, layout, expected, free.generation, frozenset(free.free), shared)
        except ReportError as exc:
            ledger_problem = exc.reason
    nics, nics_problem = decode_node_nics(annotations, expected, layout.size)
    report = NodeReport(
        state=NodeState(layout, frozenset(free.free)),
        unhealthy=frozenset(free.unhealthy),
        generation=free.generation,
        reported_at=free.reportedAt,
        fingerprint=expected,
        ledger=ledger,
        ledger_problem=ledger_problem,
        nics=nics,
        nics_problem=nics_problem,
        product=decode_product(annotations),
        shares=shares,
        shares_problem=shares_problem,
    )
    if stale_after is not None:
        age = report.age(now or datetime.now(timezone.utc))
        if age > stale_after:
            raise ReportError(
                f"report is {age:.0f}s old (stale after {stale_after:.0f}s): is the reporter running?",
                kind="stale",
            )
    return report
