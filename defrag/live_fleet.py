"""The planner's picture of a live cluster (gpupair/decide/defrag/fleet.py) from one round of list
calls. Pure: the listed objects and the time in, rooms, placed and waiting pods out.

- **Rooms.** Every node with a fresh gpupair report (the node picture the extender and `gpupair
  status` read, DRA nodes included): each GPU's share left, and CPU and memory allocatable less
  what every live pod bound there requests. A node whose report does not list every GPU pod bound
  to it yet is settling and left out: which GPUs those pods hold is not known.
- **Placed pods.** The GPU pods the report's ledger lists, with their GPUs; a pod sharing one GPU
  (time-slicing replicas, or DRA consumable capacity: what its claims consume of it, as the node
  picture measures it) asks its part of one GPU again. A pod may move only
  when all of these hold, and the first that does not is its reason:
  it opted in (annotation ``gpupair.io/movable: "true"``, or its namespace is labelled so; the
  annotation ``"false"`` opts a pod out of its namespace's choice), a controller that recreates it
  owns it (``RECREATING``), it is not terminating, its DRA claims come from templates (a claim
  of its own would keep its devices for the replacement), and no PodDisruptionBudget that selects
  it allows zero disruptions.
- **Waiting pods.** Pods kube-scheduler found unschedulable (PodScheduled False, reason
  Unschedulable) that ask for whole GPUs, or whose DRA claims ask shares by consumable capacity
  (one GPU at the shares sized on the fleet's most common GPU shared by capacity; with none, a
  whole GPU a share), largest first then oldest; a pod being preempted for
  (``nominatedNodeName``) is left to preemption.
- **Where a pod may go.** The nodes kube-scheduler's node filters would let it onto
  (defrag/node_fit.py).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from gpupair.decide.defrag.fleet import Ask, NodeRoom, PlacedPod, WaitingPod
from gpupair.decide.picture.dra_capacity import most_common_capacity, pending_share
from gpupair.decide.pod.pod_request import PodRequestError, gpu_request, parse_bytes, parse_milli, pod_request
from gpupair.decide.score.fragmentation import MILLI
from gpupair.defrag.node_fit import may_run_on
from gpupair.kubewire.defaults import SHARED_RESOURCE_NAMES
from gpupair.status.build import Listing, Options, listed_picture
from gpupair.status.objects import annotations, is_terminal, meta, parse_time
from gpupair.topology.report import NodeReport

MOVABLE_KEY = "gpupair.io/movable"  # a pod's annotation, or its namespace's label
RECREATING = ("ReplicaSet", "StatefulSet", "Job", "ReplicationController")

# Why a placed pod may not move, as the plan's table counts them.
NOT_OPTED_IN = "not opted in"
NO_CONTROLLER = "no controller that recreates it"
TERMINATING = "terminating"
OWN_CLAIM = "holds a ResourceClaim of its own"
BUDGET = "its PodDisruptionBudget allows no disruption"


@dataclass(frozen=True)
class PodName:
    namespace: str
    name: str

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass
class LiveFleet:
    rooms: list[NodeRoom] = field(default_factory=list)
    placed: list[PlacedPod] = field(default_factory=list)
    waiting: list[WaitingPod] = field(default_factory=list)
    names: dict[str, PodName] = field(default_factory=dict)  # pod uid -> its name
    left_out: dict[str, str] = field(default_factory=dict)  # node -> why it is not planned on
    reports: dict[str, NodeReport] = field(default_factory=dict)  # the rooms' reports
    pinned: Counter[str] = field(default_factory=Counter)  # why placed pods may not move, counted
    why_pinned: dict[str, str] = field(default_factory=dict)  # pod uid -> why it may not move


def live_fleet(listing: Listing, now: datetime, options: Options = Options(),
               movable_namespaces: Iterable[str] = (), budgets: Sequence[Mapping[str, Any]] = (),
               shared: Sequence[str] = SHARED_RESOURCE_NAMES) -> LiveFleet:
    fleet = LiveFleet()
    picture = listed_picture(listing, now, options)
    pods = [p for p in listing.pods or () if isinstance(p, Mapping) and not is_terminal(p)]
    on_node: dict[str, list[Mapping[str, Any]]] = {}
    for pod in pods:
        node = (pod.get("spec") or {}).get("nodeName")
        if node:
            on_node.setdefault(node, []).append(pod)
    nodes = {str(meta(n).get("name") or ""): n for n in listing.nodes if isinstance(n, Mapping)}
    for name in sorted(nodes):
        node = nodes[name]
        entry = picture.entry_of(name, annotations(node))
        if entry is None or entry.report is None:
            continue  # no GPUs gpupair knows of
        if entry.is_stale(now.timestamp(), picture.alive(name)):
            fleet.left_out[name] = "its report is stale"
            continue
        report = entry.report
        unlisted = [p for p in on_node.get(name, ()) if _gpus(p, options.resource, shared) > 0 and
                    (report.ledger is None or not report.ledger.lists(*_key(p), str(meta(p).get("uid") or "")))]
        if report.ledger is not None and unlisted:
            fleet.left_out[name] = f"settling: {len(unlisted)} GPU pod(s) bound that its report does not list yet"
            continue
        cpu, memory = _room(node, on_node.get(name, ()))
        if cpu is None:
            fleet.left_out[name] = "its allocatable CPU or memory is unreadable"
            continue
        fleet.rooms.append(NodeRoom(name, report.layout, tuple(report.milli_left(i) for i in range(report.layout.size)),
                                    cpu, memory))
        fleet.reports[name] = report
    movable_ns = frozenset(movable_namespaces)
    places = _Places(nodes, [room.name for room in fleet.rooms])
    for name, report in fleet.reports.items():
        if report.ledger is None:
            continue  # which pod holds which GPU is not known: none of them moves
        for pod in on_node.get(name, ()):
            namespace, pod_name = _key(pod)
            devices = report.ledger.devices_of(namespace, pod_name)
            uid = str(meta(pod).get("uid") or "")
            if not devices or not uid:
                continue
            ask = _placed_ask(pod, sorted(devices), report, options.resource, shared, places,
                              picture.held_shares(pod).get(name, {}))
            why = _pinned(pod, movable_ns, budgets)
            if why:
                fleet.pinned[why] += 1
                fleet.why_pinned[uid] = why
            fleet.names[uid] = PodName(namespace, pod_name)
            fleet.placed.append(PlacedPod(uid, name, tuple(sorted(devices)), ask, movable=not why))
    waiting = []
    common = most_common_capacity(c for report in fleet.reports.values() if report.shares is not None
                                  for c in report.shares.capacity)
    for pod in pods:
        gpus, milli = _waiting_gpus(pod, options.resource, picture, common)
        if gpus <= 0:
            continue
        uid = str(meta(pod).get("uid") or "")
        try:
            ask = Ask(gpus, milli, pod_request(pod, "cpu"), pod_request(pod, "memory"), places.allowed(pod))
        except PodRequestError:
            continue
        fleet.names[uid] = PodName(*_key(pod))
        created = parse_time(meta(pod).get("creationTimestamp"))
        waiting.append((-gpus, created.timestamp() if created else 0.0, str(fleet.names[uid]), WaitingPod(uid, ask)))
    fleet.waiting = [w for *_, w in sorted(waiting, key=lambda item: item[:3])]
    return fleet


class _Places:
    """The nodes a pod may go to, memoised by what decides it (a fleet's pods share a few specs)."""

    def __init__(self, nodes: Mapping[str, Mapping[str, Any]], planned: Sequence[str]):
        self.nodes, self.planned = nodes, planned
        self._memo: dict[str, frozenset[str]] = {}

    def allowed(self, pod: Mapping[str, Any]) -> frozenset[str]:
        spec = pod.get("spec") if isinstance(pod.get("spec"), Mapping) else {}
        key = repr((spec.get("nodeSelector"), spec.get("affinity"), spec.get("tolerations")))
        if key not in self._memo:
            probe = {"spec": {k: spec.get(k) for k in ("nodeSelector", "affinity", "tolerations")}}
            self._memo[key] = frozenset(n for n in self.planned if may_run_on(probe, self.nodes[n]))
        return self._memo[key]


def _key(pod: Mapping[str, Any]) -> tuple[str, str]:
    m = meta(pod)
    return str(m.get("namespace") or ""), str(m.get("name") or "")


def _gpus(pod: Mapping[str, Any], resource: str, shared: Sequence[str]) -> int:
    try:
        # Device-plugin GPUs only: on a DRA node the ledger is the claims' allocations, which exist
        # before the pod is bound, and a pod's other claims (a NIC, storage) are never in it.
        return gpu_request(pod, resource) + sum(gpu_request(pod, s) for s in shared)
    except PodRequestError:
        return 0


def _room(node: Mapping[str, Any], pods: Iterable[Mapping[str, Any]]) -> tuple[int | None, int | None]:
    """Allocatable CPU (milli) and memory (bytes) less what the pods bound there request."""
    allocatable = (node.get("status") or {}).get("allocatable") or {}
    try:
        cpu = parse_milli(allocatable.get("cpu", 0), "status.allocatable.cpu")
        memory = parse_bytes(allocatable.get("memory", 0), "status.allocatable.memory")
    except (PodRequestError, AttributeError):
        return None, None
    for pod in pods:
        try:
            cpu -= pod_request(pod, "cpu")
            memory -= pod_request(pod, "memory")
        except PodRequestError:
            pass  # the apiserver validated it; what it asks is not ours to guess
    return cpu, memory


def _placed_ask(pod: Mapping[str, Any], devices: list[int], report, resource: str, shared: Sequence[str],
                places: _Places, held: Mapping[int, int]) -> Ask:
    """What the pod's replacement will ask: its GPUs (a share pod: its part of the one GPU it is
    on; ``held``: what its DRA claims take of each GPU, in thousandths), CPU and memory, on the
    nodes it may go to."""
    try:
        cpu, memory = pod_request(pod, "cpu"), pod_request(pod, "memory")
        share_count = sum(gpu_request(pod, s) for s in shared)
        if report.shares is not None and report.shares.replicated:
            share_count += gpu_request(pod, resource)
    except PodRequestError:
        cpu = memory = share_count = 0
    if share_count and len(devices) == 1 and report.shares is not None:
        milli = min(MILLI, share_count * report.shares.share_milli(devices[0]))
        return Ask(1, milli, cpu, memory, places.allowed(pod))
    if len(devices) == 1 and held.get(devices[0], MILLI) < MILLI:
        return Ask(1, held[devices[0]], cpu, memory, places.allowed(pod))
    return Ask(len(devices), MILLI, cpu, memory, places.allowed(pod))


def _pinned(pod: Mapping[str, Any], movable_namespaces: frozenset[str], budgets: Sequence[Mapping[str, Any]]) -> str:
    """Why the pod may not move ('' where it may)."""
    namespace, _ = _key(pod)
    said = annotations(pod).get(MOVABLE_KEY)
    if said != "true" and not (said is None and namespace in movable_namespaces):
        return NOT_OPTED_IN
    owners = meta(pod).get("ownerReferences")
    if not isinstance(owners, list) or not any(
            isinstance(o, Mapping) and o.get("controller") is True and o.get("kind") in RECREATING for o in owners):
        return NO_CONTROLLER
    if meta(pod).get("deletionTimestamp"):
        return TERMINATING
    if any(isinstance(c, Mapping) and c.get("resourceClaimName") for c in (pod.get("spec") or {}).get("resourceClaims") or []):
        return OWN_CLAIM
    labels = meta(pod).get("labels") if isinstance(meta(pod).get("labels"), Mapping) else {}
    for budget in budgets:
        if not isinstance(budget, Mapping) or meta(budget).get("namespace") != namespace:
            continue
        if _selects((budget.get("spec") or {}).get("selector"), labels) and \
                int((budget.get("status") or {}).get("disruptionsAllowed") or 0) < 1:
            return BUDGET
    return ""


def _selects(selector: Any, labels: Mapping[str, Any]) -> bool:
    """A metav1.LabelSelector; a PodDisruptionBudget's empty selector selects every pod in its
    namespace (policy/v1), a missing one none."""
    if not isinstance(selector, Mapping):
        return False
    match = selector.get("matchLabels") or {}
    if not isinstance(match, Mapping) or any(labels.get(k) != v for k, v in match.items()):
        return False
    for expression in selector.get("matchExpressions") or []:
        if not isinstance(expression, Mapping):
            return False
        key, operator, values = expression.get("key"), expression.get("operator"), expression.get("values") or []
        if operator == "In" and labels.get(key) not in values or operator == "NotIn" and labels.get(key) in values \
                or operator == "Exists" and key not in labels or operator == "DoesNotExist" and key in labels:
            return False
    return True


def _waiting_gpus(pod: Mapping[str, Any], resource: str, picture, common) -> tuple[int, int]:
    """The GPUs an unschedulable pod waits for and the milli of each (a pod whose claims ask only
    shares by consumable capacity: one GPU at their size on ``common``, the fleet's most common
    GPU shared by capacity); 0 GPUs for any other pod, and for shares ``common`` cannot serve."""
    spec, status = pod.get("spec") or {}, pod.get("status") or {}
    if spec.get("nodeName") or status.get("phase") != "Pending" or status.get("nominatedNodeName"):
        return 0, MILLI
    if not any(isinstance(c, Mapping) and c.get("type") == "PodScheduled" and c.get("status") == "False"
               and c.get("reason") == "Unschedulable" for c in status.get("conditions") or []):
        return 0, MILLI
    try:
        gpus = gpu_request(pod, resource)
    except PodRequestError:
        return 0, MILLI
    demand = picture.pod_demand(pod, known_only=True)
    if demand is None:
        return gpus, MILLI
    if gpus or demand.gpus or not demand.shares:
        return gpus + demand.gpus + demand.shares, MILLI  # with whole GPUs: its shares as GPUs
    return pending_share(demand.shares, demand.asked, common) or (0, MILLI)
