"""What each node owes to pods bound there but not yet in its report, reconciled by the ledger.

Between a Binding and the reporter's next report the node still shows the pod's GPUs free;
without a hold the next pod would be promised them too. Two kinds of hold:

- **Plans**: the set the extender's own bind expects the device plugin to pick, reserved with
  no ``await`` between the decision and the reservation, so two pods bound back to back cannot
  both be promised the last same-NUMA pair.
- **Counts**: pods bound by anyone else (pinned by ``spec.nodeName``, another scheduler, another
  replica, a Binding whose answer was lost). Their devices are unknown until the report, so the
  node owes their GPU count without inventing which GPUs: ``placement.worst_case_take`` decides
  as if they took the worst ones (and, beside them, its plans too: ``NodeView.available``).

A node's report carries its allocation ledger (``gpupair.io/allocations``). A hold ends the
moment a report lists its pod, whatever devices the pod really got: a plan the plugin followed
counts as *confirmed*, one it did not as *deviated*, never as a hold on devices that are really
free. A plan whose devices a report shows taken by someone else no longer names free devices;
its pod keeps a count hold instead. The error window is one report. The TTL remains only for a
pod that never shows up (*expired*); a pod deleted or finished first is *released*.

A third kind stands apart: **held sets**, devices kept for a pod that is not bound yet (a defrag
plan in flight holds the set it frees for the waiting pod, and each move's new place for the moved
pod's replacement: extender/cache/defrag_holds.py). Their keys are not pod UIDs, no report or pod
event ends them, and they never become count holds: only their deadline or their owner ends them.

A node whose reporter writes no ledger (older than it, during a rolling upgrade) keeps the
accounting before the ledger: a plan ends when the report shows its devices all taken; pods
bound by others are not held there (the report shows their devices within a scan).

Every method is synchronous: on the single-threaded event loop a check-and-set done without an
``await`` in between is atomic, so no lock exists that could stall another pod's request.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Set
from dataclasses import dataclass

from cachetools import TTLCache

from gpupair.topology.report import Ledger

log = logging.getLogger("gpupair.reservations")

DEFAULT_TTL = 120.0
OUTCOMES = ("confirmed", "deviated", "expired", "released")


@dataclass(frozen=True)
class Hold:
    """What one node owes: planned devices, plus GPUs of pods whose devices are unknown."""

    devices: frozenset[int] = frozenset()
    count: int = 0
    # Of ``devices``, those a defrag plan keeps for another pod (held sets): free to the device
    # plugin and the DRA allocator, which pick among every free GPU, so a node is no place for a
    # pod whose pick there would take one.
    kept: frozenset[int] = frozenset()

    def __bool__(self) -> bool:
        return bool(self.devices) or self.count > 0

    @property
    def gpus(self) -> int:
        return len(self.devices) + self.count


NO_HOLD = Hold()


@dataclass(frozen=True)
class Reservation:
    """A plan: the set the extender's bind expects the device plugin to give the pod."""

    uid: str
    node: str
    devices: frozenset[int]
    namespace: str = ""
    name: str = ""


@dataclass(frozen=True)
class HeldSet:
    """Devices kept for a pod not bound yet, under a key that is no pod UID, until ``until``
    (the timer's clock)."""

    key: str
    node: str
    devices: frozenset[int]
    until: float


@dataclass(frozen=True)
class BoundPod:
    """A GPU pod bound to a node and not yet in that node's ledger."""

    uid: str
    node: str
    namespace: str
    name: str
    gpus: int
    since: float  # the timer's clock


class Reservations:
    def __init__(self, ttl: float = DEFAULT_TTL, maxsize: int = 100_000,
                 timer: Callable[[], float] = time.monotonic,
                 on_outcome: Callable[[str], None] = lambda outcome: None):
        self.ttl = ttl
        self._timer = timer
        self._on_outcome = on_outcome
        self._plans: TTLCache = TTLCache(maxsize=maxsize, ttl=ttl, timer=timer)
        # node -> its plans by UID; may hold expired or evicted ones, which readers drop lazily.
        self._plans_by_node: dict[str, dict[str, Reservation]] = {}
        # Pods bound and not yet listed, oldest first (insertion order is ``since`` order).
        self._pods: dict[str, BoundPod] = {}
        self._bound: dict[str, set[str]] = {}  # node -> UIDs in _pods
        # node -> its latest report's ledger; a node absent here has not reported, None: no ledger.
        self._ledgers: dict[str, Ledger | None] = {}
        # by_node() is asked on every filter and prioritize. After a change only the nodes it
        # touched are asked afresh: a bind changes one node, and rebuilding every node that owes
        # something cost more than the filter it preceded (bench/request_path.py).
        self._dirty: set[str] = set()
        self._by_node: dict[str, Hold] = {}
        self._listeners: list[Callable[[str], None]] = []
        self._sets: dict[str, HeldSet] = {}  # key -> held set
        self._sets_by_node: dict[str, dict[str, HeldSet]] = {}
        self._sets_due = float("inf")  # the earliest held set's deadline

    def subscribe(self, listener: Callable[[str], None]) -> None:
        """Call ``listener(node)`` whenever what ``node`` owes may have changed (expiries
        included, found when any reader looks). It is called mid-change: it must only take note
        and read the holds later (``by_node``)."""
        self._listeners.append(listener)

    # ---- the extender's own binds

    def reserve(self, reservation: Reservation) -> bool:
        """Hold the plan until a report lists its pod; False, holding nothing, where the node's
        latest ledger lists the pod already (a DRA node's claim watch can show the allocation
        before the bind that plans it: a hold then would wait for a report that never comes)."""
        # TTLCache's own store drops expired plans unannounced: end them here first, so each
        # gets its outcome and its node's hold is asked afresh.
        self._expire()
        ledger = self._ledgers.get(reservation.node)
        if ledger is not None and ledger.lists(reservation.namespace, reservation.name, reservation.uid):
            got = ledger.devices_of(reservation.namespace, reservation.name) or frozenset()
            self._outcome("confirmed" if got == reservation.devices else "deviated", reservation.namespace,
                          reservation.name, reservation.node, plan=reservation, got=got)
            return False
        previous = self._plans.get(reservation.uid)
        if previous is not None and previous.node != reservation.node:
            self._unindex(previous.uid, previous.node)
            self._changed(previous.node)
        if previous is None and len(self._plans) >= self._plans.maxsize:
            # Full: TTLCache's store would evict one plan unannounced; evict it here, in the open.
            uid, evicted = self._plans.popitem()
            self._unindex(uid, evicted.node)
            self._changed(evicted.node)
        self._plans[reservation.uid] = reservation
        self._changed(reservation.node)
        self._plans_by_node.setdefault(reservation.node, {})[reservation.uid] = reservation
        return True

    def release(self, uid: str) -> Reservation | None:
        """Drop a plan without an outcome (its Binding failed: nothing was bound)."""
        reservation = self._plans.pop(uid, None)
        if reservation is not None:
            self._unindex(uid, reservation.node)
            self._changed(reservation.node)
        return reservation

    def get(self, uid: str) -> Reservation | None:
        return self._plans.get(uid)

    # ---- the pod watch

    def pod_bound(self, uid: str, node: str, namespace: str, name: str, gpus: int) -> None:
        """A GPU pod is bound to ``node`` (seen by the pod watch, whoever bound it)."""
        if gpus <= 0 or not uid:
            return
        if node in self._ledgers:
            ledger = self._ledgers[node]
            if ledger is None:
                return  # no ledger to end a count hold: the report will show the devices
            if ledger.lists(namespace, name, uid):
                return  # its devices are already in the report
        current = self._pods.get(uid)
        if current is not None and current.node == node:
            return
        self._bind(BoundPod(uid, node, namespace, name, gpus, self._timer()))

    def pod_gone(self, uid: str, why: str) -> bool:
        """The pod was deleted or finished: whatever it held is free again."""
        plan = self.release(uid)
        pod = self._unbind(uid)
        who = plan or pod
        if who is None:
            return False
        self._outcome("released", who.namespace, who.name, who.node, plan=plan, why=why)
        return True

    def known_uids(self) -> set[str]:
        return set(self._plans.keys()) | set(self._pods)

    # ---- held sets (a defrag plan's)

    def hold_set(self, key: str, node: str, devices: frozenset[int], seconds: float) -> None:
        """Keep ``devices`` on ``node`` from every pod but those that exclude ``key``, for
        ``seconds`` or until ``drop_set``; the same key again replaces it."""
        self.drop_set(key)
        if seconds <= 0 or not devices:
            return
        held = HeldSet(key, node, frozenset(devices), self._timer() + seconds)
        self._sets[key] = held
        self._sets_by_node.setdefault(node, {})[key] = held
        self._sets_due = min(self._sets_due, held.until)
        self._changed(node)

    def drop_set(self, key: str) -> HeldSet | None:
        held = self._sets.pop(key, None)
        if held is not None:
            on_node = self._sets_by_node[held.node]
            del on_node[key]
            if not on_node:
                del self._sets_by_node[held.node]
            self._changed(held.node)
        return held

    def held_sets(self) -> list[HeldSet]:
        self._expire()
        return list(self._sets.values())

    # ---- reports

    def observe_report(self, node: str, free: frozenset[int], ledger: Ledger | None = None) -> None:
        """A new report for ``node`` (its free devices and ledger): end every hold whose pod it
        lists. Without a ledger, the accounting from before it."""
        self._ledgers[node] = ledger
        if ledger is None:
            for plan in self._live_plans(node):
                if not plan.devices & free:  # before the ledger: the plan shows taken
                    self.release(plan.uid)
                    self._outcome("confirmed", plan.namespace, plan.name, node, plan=plan)
            for uid in list(self._bound.get(node, ())):
                self._unbind(uid)
            return
        for plan in self._live_plans(node):
            if ledger.lists(plan.namespace, plan.name, plan.uid):
                got = ledger.devices_of(plan.namespace, plan.name) or frozenset()
                self.release(plan.uid)
                self._unbind(plan.uid)
                self._outcome("confirmed" if got == plan.devices else "deviated",
                              plan.namespace, plan.name, node, plan=plan, got=got)
            elif not plan.devices <= free:
                # Another pod got some of the planned devices; this pod will get others.
                self.release(plan.uid)
                if plan.uid not in self._pods:  # the pod watch has not seen it bound yet
                    self._bind(BoundPod(plan.uid, node, plan.namespace, plan.name, len(plan.devices),
                                        self._timer()))
                log.info("plan overtaken: held by count until the pod is reported", extra={
                    "pod": f"{plan.namespace}/{plan.name}", "node": node, "plan": sorted(plan.devices),
                    "taken": sorted(plan.devices - free)})
        for uid in list(self._bound.get(node, ())):
            pod = self._pods[uid]
            if ledger.lists(pod.namespace, pod.name, pod.uid):
                self._unbind(uid)

    def node_gone(self, node: str) -> None:
        for plan in self._live_plans(node):
            self.release(plan.uid)
        for uid in list(self._bound.get(node, ())):
            self._unbind(uid)
        self._ledgers.pop(node, None)

    # ---- readers

    def hold(self, node: str, exclude: str | Set[str] | None = None) -> Hold:
        """What ``node`` owes now to every pod but ``exclude``: a pod's UID, or the keys of a
        pod's own holds (its UID and the held sets kept for it)."""
        self._expire()
        return self._hold(node, frozenset((exclude,)) if isinstance(exclude, str) else frozenset(exclude or ()))

    def _hold(self, node: str, exclude: Set[str] = frozenset()) -> Hold:
        devices: set[int] = set()
        kept: set[int] = set()
        planned: set[str] = set()
        for plan in self._live_plans(node):
            planned.add(plan.uid)
            if plan.uid not in exclude:
                devices |= plan.devices
        for key, held in self._sets_by_node.get(node, {}).items():
            if key not in exclude:
                kept |= held.devices
        count = sum(self._pods[uid].gpus for uid in self._bound.get(node, ())
                    if uid not in exclude and uid not in planned)
        devices |= kept
        return Hold(frozenset(devices), count, frozenset(kept)) if devices or count else NO_HOLD

    def by_node(self) -> dict[str, Hold]:
        """Every node that owes something now, and what (do not modify: it is shared until the
        next change)."""
        self._expire()
        if self._dirty:
            holds = dict(self._by_node)
            for node in self._dirty:
                hold = self._hold(node)
                if hold:
                    holds[node] = hold
                else:
                    holds.pop(node, None)
            self._dirty.clear()
            self._by_node = holds
        return self._by_node

    def on_node(self, node: str, exclude: str | None = None) -> frozenset[int]:
        """Devices planned on ``node`` (less those of pod ``exclude``)."""
        return self.hold(node, exclude).devices

    def uids(self) -> list[str]:
        return list(self._plans.keys())

    def plans(self) -> list[Reservation]:
        """Live plans, every node."""
        self._expire()
        return list(self._plans.values())

    def counted(self) -> list[BoundPod]:
        """Pods held by count (bound, not yet listed, no live plan), every node."""
        self._expire()
        return [pod for uid, pod in self._pods.items() if uid not in self._plans]

    def __len__(self) -> int:
        self._expire()
        return len(self._plans) + sum(1 for uid in self._pods if uid not in self._plans)

    # ---- internals

    def _expire(self) -> None:
        if self._sets and self._timer() >= self._sets_due:
            self._expire_sets()
        for uid, plan in self._plans.expire():
            self._unindex(uid, plan.node)
            self._changed(plan.node)
            self._outcome("expired", plan.namespace, plan.name, plan.node, plan=plan)
        if not self._pods:
            return
        deadline = self._timer() - self.ttl
        while self._pods:
            pod = next(iter(self._pods.values()))
            if pod.since >= deadline:
                break
            self._unbind(pod.uid)
            self._outcome("expired", pod.namespace, pod.name, pod.node)

    def _expire_sets(self) -> None:
        now = self._timer()
        for held in [held for held in self._sets.values() if held.until <= now]:
            self.drop_set(held.key)
            log.info("held set ended", extra={"key": held.key, "node": held.node, "devices": sorted(held.devices),
                                              "why": "its time ran out"})
        self._sets_due = min((held.until for held in self._sets.values()), default=float("inf"))

    def _live_plans(self, node: str) -> list[Reservation]:
        plans = self._plans_by_node.get(node)
        if not plans:
            return []
        live = []
        for uid, plan in list(plans.items()):
            # TTLCache's ``in`` is false once the TTL ran out (or the plan was evicted); it costs
            # a quarter of its ``get``, and _hold asks it for every plan on the node.
            if uid in self._plans:
                live.append(plan)
            else:
                del plans[uid]
        if not plans:
            del self._plans_by_node[node]
        return live

    def _unindex(self, uid: str, node: str) -> None:
        plans = self._plans_by_node.get(node)
        if plans is not None:
            plans.pop(uid, None)
            if not plans:
                del self._plans_by_node[node]

    def _changed(self, node: str) -> None:
        self._dirty.add(node)
        for listener in self._listeners:
            listener(node)

    def _bind(self, pod: BoundPod) -> None:
        self._unbind(pod.uid)
        self._pods[pod.uid] = pod
        self._bound.setdefault(pod.node, set()).add(pod.uid)
        if not (pod.uid in self._plans_by_node.get(pod.node, ()) and pod.uid in self._plans):
            self._changed(pod.node)
        # else the pod's own plan there holds its GPUs already (the watch seeing the extender's
        # own bind): what the node owes is unchanged, and nobody needs to decide it again.

    def _unbind(self, uid: str) -> BoundPod | None:
        pod = self._pods.pop(uid, None)
        if pod is not None:
            self._changed(pod.node)
            uids = self._bound[pod.node]
            uids.discard(uid)
            if not uids:
                del self._bound[pod.node]
        return pod

    def _outcome(self, outcome: str, namespace: str, name: str, node: str | None,
                 plan: Reservation | None = None, got: Iterable[int] | None = None, why: str = "") -> None:
        self._on_outcome(outcome)
        extra = {"outcome": outcome, "pod": f"{namespace}/{name}", "node": node}
        if plan is not None:
            extra["plan"] = sorted(plan.devices)
        if got is not None:
            extra["got"] = sorted(got)
        if why:
            extra["why"] = why
        log.info("reservation ended", extra=extra)
