"""From listed objects to the status view. Pure: no I/O, the time passed in."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, NamedTuple

from gpupair.topology import links
from gpupair.topology.layout import NodeState
from gpupair.topology import report as codec
from gpupair.decide.claims.claim_intent import ClaimIntent, asked_pod_intent
from gpupair.kubewire.defaults import GPU_DEVICE_CLASSES, STALE_AFTER, VERIFIER_CONTAINER
from gpupair.decide.picture.dra_capacity import most_common_capacity, share_milli
from gpupair.decide.picture.node_entries import ReportDecoder, ReportEntry
from gpupair.decide.picture.node_picture import NodePicture, NodeSource, node_picture
from gpupair.decide.devices import placement
from gpupair.decide.judge import decisions
from gpupair.decide.devices.placement import numa_label
from gpupair.decide.pod.pod_request import DEFAULT_RESOURCE, PodRequestError, gpu_request, parse_count
from gpupair.decide.judge.verdict import FAIL, GRANTED_KEY, LINK_KEY, NUMA_KEY, VERDICT_KEY
from gpupair.topology.shares import MILLI, SharedCapacity
from gpupair.status.objects import (
    annotations,
    event_for,
    event_text,
    event_time,
    latest_events,
    meta,
    parse_time,
    pod_key,
)
from gpupair.status.reserved import ReservedGpus, bound_gpu_pods, reservation
from gpupair.status.view import (
    CloseSet,
    DeviceView,
    FailVerdict,
    FragmentationRow,
    HeartbeatSource,
    NotVerified,
    NodeCounts,
    NodeStatus,
    NumaView,
    PendingPod,
    Reserved,
    StatusView,
    Summary,
    Unseen,
)

FRAGMENTATION_SIZES = (1, 2, 4, 8)
SCHEDULING_FAILED = "FailedScheduling"  # kube-scheduler's reason; its message carries the extender's
PLACEMENT_FAILED = "GPUPlacementFailed"  # the reporter's Event for a FAIL verdict


@dataclass
class Listing:
    """What one round of list calls returned; None for a kind the caller could not list."""

    nodes: Sequence[Mapping[str, Any]]
    pods: Sequence[Mapping[str, Any]] | None
    events: Sequence[Mapping[str, Any]] | None
    unseen: list[Unseen] = field(default_factory=list)
    leases: Mapping[str, datetime] = field(default_factory=dict)  # node -> its reporter Lease's renewTime
    slices: Sequence[Mapping[str, Any]] = ()  # ResourceSlices of the DRA driver
    claims: Sequence[Mapping[str, Any]] = ()  # every ResourceClaim
    dra_driver: str = ""


@dataclass(frozen=True)
class Options:
    stale_after: float = STALE_AFTER  # 0: never stale, as the extender's --stale-after
    resource: str = DEFAULT_RESOURCE
    fails: int = 5  # FAIL verdicts listed, newest first
    gpu_classes: frozenset[str] = GPU_DEVICE_CLASSES  # DRA DeviceClasses whose devices are GPUs


class LayoutCache:
    """The reports decoded by earlier redraws, by annotation text (the extender's ReportDecoder,
    gpupair/decide/picture/node_entries.py): a layout changes only with the hardware, a free list with a
    grant, so a watch redraw decodes only what changed."""

    def __init__(self, stale_after: float = STALE_AFTER) -> None:
        # Freshness is judged by the report's entry, as in the extender (0: never stale).
        self.decoder = ReportDecoder(stale_after or None)


def build(listing: Listing, now: datetime, options: Options = Options(),
          layouts: LayoutCache | None = None) -> StatusView:
    layouts = layouts or LayoutCache(options.stale_after)
    if layouts.decoder.stale_after != (options.stale_after or None):
        raise ValueError("the LayoutCache judges staleness after another time than the options say")
    bound = bound_gpu_pods(listing.pods or (), options.resource)
    picture = listed_picture(listing, now, options, layouts.decoder)
    nodes, available = [], []
    capacities: list[tuple[SharedCapacity, ...] | None] = []  # each GPU's, where DRA shares it by capacity
    for node in sorted(listing.nodes, key=lambda n: str(meta(n).get("name") or "")):
        name = str(meta(node).get("name") or "")
        if not _is_gpu_node(node, options.resource) and not picture.describes(name):
            continue
        entry = picture.entry_of(name, annotations(node))
        assert entry is not None  # the annotations' source describes every listed Node
        if entry.report is not None and entry.report.shares is not None:
            capacities += entry.report.shares.capacity
        view, left = node_view(node, bound.get(name, ()), now, options, entry, picture.alive(name))
        nodes.append(view)
        if left is not None:
            available.append(left)
    return StatusView(
        generatedAt=now, staleAfterSeconds=options.stale_after, nodes=nodes,
        summary=Summary(
            nodes=_counts(nodes),
            fragmentation=fragmentation(available),
            pending=pending_pods(listing.pods or (), listing.events or (), options.resource,
                                 claim_asks(picture, most_common_capacity(capacities))),
            failVerdicts=fail_verdicts(listing.pods or (), listing.events or (), options.fails),
            notVerified=not_verified(listing.pods or (), options.resource),
        ),
        unseen=list(listing.unseen),
    )


# What the extender logs of a node's picture, status shows in the node's row instead.
_SHOWN = logging.getLogger("gpupair.status.picture")
_SHOWN.addHandler(logging.NullHandler())
_SHOWN.propagate = False


def listed_picture(listing: Listing, now: datetime, options: Options,
                   decoder: ReportDecoder | None = None) -> NodePicture:
    """The node picture as the extender reads it (gpupair/decide/picture/node_picture.py), from the same
    source objects fed by one list each rather than a watch: the listed ResourceSlices and claims
    (their pictures built at ``now``; none without a driver), then the Nodes' annotations with
    their Leases."""
    decoder = decoder or ReportDecoder(options.stale_after or None)
    leases = {name: at.timestamp() for name, at in listing.leases.items()}
    picture, dra = node_picture(decoder, now.timestamp, dra_driver=listing.dra_driver, gpu_classes=options.gpu_classes,
                                alive=leases.get, logger=_SHOWN)
    if dra is not None:
        dra.slices.replace(list(listing.slices))
        dra.claims.replace(list(listing.claims))
    return picture


def claim_asks(picture: NodeSource, common: tuple[SharedCapacity, ...] | None = None) -> ClaimAsk:
    """What a pod's own claims ask, by the claims listed (``ClaimAsk``). Shares asked by
    consumable capacity are sized on ``common``, the cluster's most common GPU shared by capacity
    (dra_capacity.share_milli); with none, each share takes a whole GPU, as the allocator gives."""
    def ask(pod: Mapping[str, Any]) -> ClaimAsked:
        demand = picture.pod_demand(pod, known_only=True)
        said = list(picture.pod_claim_intents(pod))
        if demand is None:
            return ClaimAsked(0, None, said)
        if not demand.shares or common is None:
            return ClaimAsked(demand.gpus + demand.shares, None, said)
        return ClaimAsked(demand.gpus, share_text(demand.shares, share_milli(common, demand.asked)), said)
    return ask


def share_text(count: int, milli: int | None) -> str:
    """``count`` shares of ``milli`` thousandths each, as a GPU's shares are shown: '250/1000',
    '2 x 250/1000'; '?/1000' where their size is not known."""
    size = f"{milli}/{MILLI}" if milli is not None else f"?/{MILLI}"
    return size if count == 1 else f"{count} x {size}"


def _is_gpu_node(node: Mapping[str, Any], resource: str) -> bool:
    notes = annotations(node)
    if codec.TOPOLOGY_KEY in notes or codec.FREE_KEY in notes:
        return True
    return _allocatable(node, resource) > 0


def _allocatable(node: Mapping[str, Any], resource: str) -> int:
    value = ((node.get("status") or {}).get("allocatable") or {}).get(resource)
    try:
        return parse_count(value, resource) if value is not None else 0
    except PodRequestError:
        return 0


def node_view(node: Mapping[str, Any], bound: Iterable[tuple[Mapping[str, Any], int]], now: datetime,
              options: Options, entry: ReportEntry, alive: float | None = None) -> tuple[NodeStatus, NodeState | None]:
    """The node's row, and, where its report is fresh, the devices the extender would decide a
    pod on (``decisions.NodeView.available``: the free ones less those reserved, and the worst
    case of the GPUs held on devices nobody named). ``entry``: the node's from the node picture
    (its report, or why there is none), which judges freshness as the extender does. ``alive``:
    the node's reporter Lease renewTime (epoch seconds), a second heartbeat next to a reporter's
    reportedAt (a DRA picture is as current as the listing: its own time is the listing's, and
    it has no Lease)."""
    name = str(meta(node).get("name") or "")
    empty = Reserved(basis=None, pods=[], devices=[], unplaced=0)
    decoded = entry.report
    if decoded is None:
        return NodeStatus(name=name, state="missing" if entry.kind == "missing" else "invalid", reason=entry.cause,
                          heartbeatSource=None, heartbeatAt=None, ageSeconds=None, generation=None,
                          gpus=_allocatable(node, options.resource) or None, numa=[], largestFree=None,
                          reserved=empty, ledgerProblem=""), None
    source: HeartbeatSource = "dra" if decoded.source == "dra" else "report"
    heartbeat = decoded.reported_at
    if alive is not None and source == "report" and alive > heartbeat.timestamp():
        source, heartbeat = "lease", datetime.fromtimestamp(alive, timezone.utc)
    stale = entry.is_stale(now.timestamp(), alive)
    held = reservation(bound, decoded)
    numa = _numa_views(decoded, held)
    left = None if stale else decisions.NodeView(name, decoded.state, reserved=frozenset(held.devices),
                                                 held=held.unplaced).available()
    return NodeStatus(
        name=name, state="stale" if stale else "fresh", reason=entry.problem_when_stale(alive) if stale else "",
        heartbeatSource=source, heartbeatAt=heartbeat, ageSeconds=round((now - heartbeat).total_seconds(), 3),
        generation=decoded.generation,
        gpus=decoded.layout.size, numa=numa, largestFree=_largest(numa),
        reserved=Reserved(basis=held.basis, pods=held.pods, devices=sorted(held.devices), unplaced=held.unplaced),
        ledgerProblem=decoded.ledger_problem,
    ), left


def _numa_views(decoded: codec.NodeReport, held: ReservedGpus) -> list[NumaView]:
    def state(index: int) -> str:
        if index in decoded.unhealthy:
            return "unhealthy"
        if index in held.devices:
            return "reserved"
        if index in decoded.state.free:
            return "free"
        return "shared" if shares is not None and shares.partly_taken(index) else "taken"

    def shared(index: int) -> str | None:
        if shares is None or shares.size(index) <= 1:
            return None
        # MIG devices that do not fill the GPU: "3/6 of 7" slices
        whole = f" of {shares.size(index)}" if shares.size(index) > shares.of[index] else ""
        return f"{shares.taken[index]}/{shares.of[index]}{whole}"

    shares = decoded.shares
    nics = nics_by_numa(decoded)
    return [NumaView(numa=numa_label(numa),
                     devices=[DeviceView(index=i, state=state(i), shares=shared(i)) for i in members],
                     nics=None if nics is None else nics.get(numa, []))
            for numa, members in decoded.layout.numa_nodes.items()]


def nics_by_numa(decoded: codec.NodeReport) -> dict[int, list[str]] | None:
    """NUMA node -> the names of its RDMA NICs: a NIC's own numaNode, else the NUMA node of the
    GPU it is closest to, unless that is SYS away (then it is on no GPU's NUMA node)."""
    if decoded.nics is None:
        return None
    layout, out = decoded.layout, {}
    for column, nic in enumerate(decoded.nics.nics):
        numa = nic.numa_node if nic.numa_node >= 0 else None
        if numa is None:
            row = min(range(layout.size), key=lambda g: links.distance(decoded.nics.links[g][column]), default=None)
            if row is not None and decoded.nics.links[row][column] != "SYS":
                numa = layout.numa_of(row)
        if numa is not None:
            out.setdefault(numa, []).append(nic.name)
    return out


def _largest(numa: list[NumaView]) -> CloseSet:
    best = max(numa, key=lambda n: sum(d.state == "free" for d in n.devices), default=None)
    count = 0 if best is None else sum(d.state == "free" for d in best.devices)
    return CloseSet(gpus=count, numa=best.numa if count else None)


def fragmentation(available: Iterable[NodeState], sizes: Iterable[int] = FRAGMENTATION_SIZES) -> list[FragmentationRow]:
    """Nodes with a fresh report that the extender would let a k-GPU pod onto now
    (``placement.fit`` on what each has available): k free on one NUMA node, or, for a k larger
    than a NUMA node, within the fewest NUMA nodes the hardware allows."""
    states = list(available)
    return [FragmentationRow(gpus=k, nodes=sum(1 for state in states if placement.fit(state, k).feasible))
            for k in sizes]


def _counts(nodes: list[NodeStatus]) -> NodeCounts:
    def count(state: str) -> int:
        return sum(1 for n in nodes if n.state == state)

    return NodeCounts(total=len(nodes), fresh=count("fresh"), stale=count("stale"),
                      missing=count("missing"), invalid=count("invalid"))


class ClaimAsked(NamedTuple):
    """What a pod's own DRA claims ask: whole GPUs, shares by consumable capacity (as shown, None
    for none), and what each of those claims says of placement."""

    gpus: int
    shares: str | None
    said: list[ClaimIntent | None]


ClaimAsk = Callable[[Mapping[str, Any]], ClaimAsked]


def no_claims(pod: Mapping[str, Any]) -> ClaimAsked:
    return ClaimAsked(0, None, [])


def pending_pods(pods: Iterable[Mapping[str, Any]], events: Sequence[Mapping[str, Any]],
                 resource: str = DEFAULT_RESOURCE, claims: ClaimAsk = no_claims) -> list[PendingPod]:
    """GPU pods not bound to a node yet (by their request, or by what their DRA claims ask:
    whole GPUs, or shares by consumable capacity), with the placement they ask and the
    scheduler's last word on each."""
    reasons = latest_events(list(events), SCHEDULING_FAILED)
    result = []
    for pod in pods:
        if (pod.get("spec") or {}).get("nodeName") or (pod.get("status") or {}).get("phase") != "Pending":
            continue
        try:
            gpus = gpu_request(pod, resource)
        except PodRequestError:
            continue
        asked = claims(pod)
        gpus += asked.gpus
        if gpus <= 0 and asked.shares is None:
            continue
        placement, _ = asked_pod_intent(pod, asked.said)  # a bad value reads as required, as the extender reads it
        namespace, name = pod_key(pod)
        event = event_for(pod, reasons)
        result.append(PendingPod(namespace=namespace, name=name, gpus=gpus, shares=asked.shares,
                                 placement=placement.value if placement is not None else None,
                                 createdAt=parse_time(meta(pod).get("creationTimestamp")),
                                 reason=event_text(event) if event else None,
                                 reasonAt=event_time(event) if event else None))
    return sorted(result, key=lambda p: (p.namespace, p.name))


def fail_verdicts(pods: Iterable[Mapping[str, Any]], events: Sequence[Mapping[str, Any]],
                  limit: int) -> list[FailVerdict]:
    """Newest FAIL verdicts: from pods' verdict annotations, and from the reporter's Events for
    pods no longer listed."""
    failed = latest_events(list(events), PLACEMENT_FAILED)
    result: list[FailVerdict] = []
    seen: set[tuple[str, str]] = set()
    for pod in pods:
        notes = annotations(pod)
        if notes.get(VERDICT_KEY) != FAIL:
            continue
        namespace, name = pod_key(pod)
        seen.add((namespace, name))
        event = event_for(pod, failed)
        result.append(FailVerdict(
            namespace=namespace, name=name, node=(pod.get("spec") or {}).get("nodeName"),
            granted=notes.get(GRANTED_KEY), numa=notes.get(NUMA_KEY), link=notes.get(LINK_KEY),
            at=event_time(event) if event else None, source="pod",
            message=event_text(event) if event else ""))
    for key, event in failed.items():
        if key[0] == "uid" or key in seen:
            continue
        result.append(FailVerdict(
            namespace=key[0], name=key[1], node=None, granted=None, numa=None, link=None,
            at=event_time(event), source="event", message=event_text(event)))
    result.sort(key=lambda f: (f.namespace, f.name))
    result.sort(key=lambda f: f.at.timestamp() if f.at else float("-inf"), reverse=True)  # stable
    return result[:limit]


NO_SIDECAR = (f"no {VERIFIER_CONTAINER} sidecar: the webhook did not inject one (it was down when the pod was "
              "created, failurePolicy Ignore, or the namespace is not opted in); recreate the pod to verify it")


def not_verified(pods: Iterable[Mapping[str, Any]], resource: str = DEFAULT_RESOURCE) -> list[NotVerified]:
    """Bound multi-GPU pods that will never get a verdict: no verdict yet and no verifier sidecar
    to ask for one. DRA pods are left out: their verdicts come from their claims, with no sidecar."""
    result = []
    for pod in pods:
        spec, status = pod.get("spec") or {}, pod.get("status") or {}
        node = spec.get("nodeName")
        if not node or status.get("phase") in ("Succeeded", "Failed") or VERDICT_KEY in annotations(pod):
            continue
        if spec.get("resourceClaims") or status.get("extendedResourceClaimStatus"):
            continue
        try:
            gpus = gpu_request(pod, resource)
        except PodRequestError:
            continue
        containers = (spec.get("initContainers") or []) + (spec.get("containers") or [])
        if gpus < 2 or any(c.get("name") == VERIFIER_CONTAINER for c in containers):
            continue
        namespace, name = pod_key(pod)
        result.append(NotVerified(namespace=namespace, name=name, node=node, gpus=gpus, reason=NO_SIDECAR))
    return sorted(result, key=lambda p: (p.namespace, p.name))
