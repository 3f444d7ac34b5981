"""`gpupair defrag --act`: each round, carry on the plans in flight (defrag/progress.py), then
plan for the pods still waiting and start those plans, within the move rate.

Order, so that nothing is lost if the process dies at any point:
1. a new plan is written into the plans ConfigMap (gpupair/kubewire/defrag_plans.py) before its
   first eviction; from then on every extender replica holds the freed set and each move's
   target for their claimants;
2. each eviction goes through the Eviction API (PodDisruptionBudgets hold) with the pod's UID as
   a precondition, and is marked done in the ConfigMap afterwards; a successor finds the plan,
   checks it again and evicts only what is still there (a pod already gone is a move done);
3. the plan's key is removed when it ends, placed or dropped, and the holds end with it.

One actor at a time: the chart runs one replica with the Recreate strategy.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from typing import Any

from kubernetes_asyncio import client as k8s
from kubernetes_asyncio.client.exceptions import ApiException

from gpupair.decide.defrag.fleet import DefragPlan, NoDefragPlan
from gpupair.decide.defrag.planner import Planner, SearchBound
from gpupair.defrag.live_fleet import LiveFleet, live_fleet
from gpupair.defrag.metrics import DefragMetrics
from gpupair.defrag.progress import REFUSED, End, Evict, Nudge, Wait, next_step
from gpupair.kubeclient.kube import create_event, describe_error
from gpupair.kubewire.defrag_plans import PLANS_CONFIGMAP, PlanInFlight, PlannedMove, PlanUnreadable, read_plan
from gpupair.status.build import Options
from gpupair.status.objects import meta

log = logging.getLogger("gpupair.defrag")
COMPONENT = "gpupair-defrag"
FREED_KEY = "gpupair.io/defrag-freed"  # on the waiting pod: the set freed for it, and when
NUDGE_EVERY = 10.0  # seconds between two updates of one waiting pod


@dataclass(frozen=True)
class ActOptions:
    plans_namespace: str
    hold_seconds: float = 120.0
    moves_per_minute: float = 4.0
    max_moves: int = 4
    status: Options = Options()
    shared: tuple[str, ...] = ()


@dataclass
class MoveRate:
    """A token bucket: ``per_minute`` evictions, at most a minute's worth at once."""

    per_minute: float
    clock: Callable[[], float] = time.monotonic
    tokens: float = field(init=False)
    at: float = field(init=False)

    def __post_init__(self) -> None:
        self.tokens, self.at = self.per_minute, self.clock()

    def available(self) -> int:
        now = self.clock()
        self.tokens = min(self.per_minute, self.tokens + (now - self.at) * self.per_minute / 60.0)
        self.at = now
        return int(self.tokens)

    def take(self) -> None:
        self.tokens -= 1


class DefragActor:
    def __init__(self, api: k8s.ApiClient, options: ActOptions, metrics: DefragMetrics,
                 lister: Callable[[], Any], clock: Callable[[], float] = time.time):
        """``lister``: the round's list calls (defrag/main.py), answering (listing, movable
        namespaces, budgets, what could not be seen)."""
        self.api, self.options, self.metrics, self.lister, self.clock = api, options, metrics, lister, clock
        self.core = k8s.CoreV1Api(api)
        self.rate = MoveRate(options.moves_per_minute)
        self.rounds = 0
        self._told: dict[str, str] = {}  # waiting pod uid -> the no-plan reason last told in an Event
        self._nudged: dict[str, float] = {}  # waiting pod uid -> when it was last updated

    # ---- one round

    async def round(self) -> None:
        listing, namespaces, budgets, unseen = await self.lister()
        for why in unseen:
            log.warning(why)
        plans = await self._read_plans()
        now = self.clock()
        fleet = live_fleet(listing, datetime.fromtimestamp(now, timezone.utc), self.options.status, namespaces, budgets,
                           self.options.shared)
        pods = {str(meta(p).get("uid") or ""): p for p in listing.pods or ()}
        for plan in list(plans.values()):
            if not await self._carry_on(plan, pods, fleet):
                del plans[plan.uid]
        await self._start_new(fleet, plans, pods)
        self.metrics.in_flight.set(len(plans))
        self.rounds += 1

    async def _carry_on(self, plan: PlanInFlight, pods: Mapping[str, Any], fleet: LiveFleet) -> bool:
        """Take the plan's next steps; False once it ended."""
        while True:
            step = next_step(plan, pods, fleet.reports, self.clock())
            if isinstance(step, Wait):
                log.debug("plan waits", extra={"pod": f"{plan.namespace}/{plan.name}", "why": step.why})
                return True
            if isinstance(step, Nudge):
                await self._nudge(plan)
                return True
            if isinstance(step, End):
                await self._end(plan, step, pods)
                return False
            assert isinstance(step, Evict)
            if self.rate.available() < 1:
                return True
            refused = await self._evict(plan, step.move, pods)
            if refused:
                await self._end(plan, End(f"{REFUSED}: {refused}"), pods)
                return False

    async def _start_new(self, fleet: LiveFleet, plans: dict[str, PlanInFlight], pods: Mapping[str, Any]) -> None:
        waiting = [w for w in fleet.waiting if w.uid not in plans]
        if not waiting:
            return
        planner = Planner(fleet.rooms, _held_back(fleet, plans.values()), SearchBound(moves=self.options.max_moves))
        for answer in planner.plan_all(waiting):
            name = fleet.names[answer.waiting.uid]
            if isinstance(answer, NoDefragPlan):
                await self._tell_no_plan(answer, pods)
                continue
            if not answer.moves:
                continue  # free now: the scheduler's next try places it
            if self.rate.available() < len(answer.moves):
                log.info("plan deferred: move rate", extra={"pod": str(name), "moves": len(answer.moves)})
                continue
            plan = self._in_flight(answer, fleet, pods)
            await self._write_plan(plan)
            plans[plan.uid] = plan
            self.metrics.plans.inc()
            moves = "; ".join(f"{m.pod} {m.fromNode} GPU{','.join(map(str, m.fromDevices))} -> {m.toNode}"
                              for m in plan.moves)
            log.info("plan started", extra={"pod": str(name), "node": plan.node, "devices": plan.devices, "moves": moves})
            await self._event(pods.get(plan.uid), "DefragPlanned",
                              f"gpupair defrag frees {plan.node} GPU{','.join(map(str, plan.devices))} for this pod by "
                              f"moving {len(plan.moves)} pod(s): {moves}")
            if not await self._carry_on(plan, pods, fleet):
                del plans[plan.uid]

    # ---- steps

    async def _evict(self, plan: PlanInFlight, move: PlannedMove, pods: Mapping[str, Any]) -> str:
        """Evict the move's pod and mark it done; the refusal's words where it was refused."""
        namespace, name = move.pod.split("/", 1)
        await self._event(pods.get(move.uid), "DefragEvicting",
                          f"gpupair defrag moves this pod to free {plan.node} GPU{','.join(map(str, plan.devices))} for "
                          f"{plan.namespace}/{plan.name}; its new place {move.toNode} "
                          f"GPU{','.join(map(str, move.toDevices))} is held for its replacement")
        body = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": name, "namespace": namespace},
                "deleteOptions": {"preconditions": {"uid": move.uid}}}
        try:
            await self.core.create_namespaced_pod_eviction(name, namespace, body)
        except ApiException as error:
            if error.status in (404, 409):  # gone, or another pod by that name now: ours is gone
                pass
            elif error.status == 429:
                return describe_error(error)
            else:
                raise
        self.rate.take()
        self.metrics.moves.inc()
        log.info("evicted", extra={"pod": move.pod, "plan": f"{plan.namespace}/{plan.name}"})
        done = plan.moves.index(move)
        plan.moves[done] = move.model_copy(update={"evicted": True})
        await self._write_plan(plan)
        return ""

    async def _nudge(self, plan: PlanInFlight) -> None:
        """Say on the waiting pod which set was freed for it: the update is an event that has
        kube-scheduler try the pod again."""
        now = self.clock()
        if now - self._nudged.get(plan.uid, 0.0) < NUDGE_EVERY:
            return
        self._nudged[plan.uid] = now
        at = datetime.fromtimestamp(now, timezone.utc).isoformat(timespec="seconds").replace("+00:00", "Z")
        note = f"{plan.node} GPU{','.join(map(str, plan.devices))} at {at}"
        try:
            await self.core.patch_namespaced_pod(plan.name, plan.namespace,
                                                 {"metadata": {"annotations": {FREED_KEY: note}}})
        except ApiException as error:
            if error.status != 404:
                raise

    async def _end(self, plan: PlanInFlight, step: End, pods: Mapping[str, Any]) -> None:
        self._nudged.pop(plan.uid, None)
        await self._remove_plan(plan.uid)
        who = f"{plan.namespace}/{plan.name}"
        if step.placed:
            self.metrics.placed.inc()
            self.metrics.gpus_freed.inc(len(plan.devices))
            log.info("plan done: pod placed", extra={"pod": who, "node": plan.node})
            await self._event(pods.get(plan.uid), "DefragPlaced",
                              f"placed on {plan.node}, on the set gpupair defrag freed")
        else:
            label = step.reason.split(":", 1)[0]
            self.metrics.dropped.labels(label).inc()
            log.info("plan dropped", extra={"pod": who, "why": step.reason})
            await self._event(pods.get(plan.uid), "DefragDropped", f"gpupair defrag dropped its plan: {step.reason}",
                              warning=True)

    async def _tell_no_plan(self, answer: NoDefragPlan, pods: Mapping[str, Any]) -> None:
        uid = answer.waiting.uid
        if self._told.get(uid) == answer.reason:
            return
        self._told[uid] = answer.reason
        await self._event(pods.get(uid), "DefragNoPlan", answer.reason)

    def _in_flight(self, plan: DefragPlan, fleet: LiveFleet, pods: Mapping[str, Any]) -> PlanInFlight:
        name = fleet.names[plan.waiting.uid]
        now = self.clock()
        moves = [PlannedMove(pod=str(fleet.names[m.pod.uid]), uid=m.pod.uid, owner=_controller(pods[m.pod.uid]),
                             fromNode=m.pod.node, fromDevices=list(m.pod.devices), toNode=m.node,
                             toDevices=list(m.devices)) for m in plan.moves]
        return PlanInFlight(namespace=name.namespace, name=name.name, uid=plan.waiting.uid, node=plan.node,
                            devices=list(plan.devices), moves=moves, startedAt=now,
                            heldUntil=now + self.options.hold_seconds)

    # ---- the ConfigMap and Events

    async def _read_plans(self) -> dict[str, PlanInFlight]:
        try:
            found = await self.core.read_namespaced_config_map(PLANS_CONFIGMAP, self.options.plans_namespace)
        except ApiException as error:
            if error.status == 404:
                return {}
            raise
        plans = {}
        for uid, text in (found.data or {}).items():
            try:
                plans[uid] = read_plan(uid, text)
            except PlanUnreadable as error:
                log.warning("plan unreadable: removed", extra={"error": str(error)})
                await self._remove_plan(uid)
        return plans

    async def _write_plan(self, plan: PlanInFlight) -> None:
        data = {plan.uid: plan.model_dump_json()}
        try:
            await self.core.patch_namespaced_config_map(PLANS_CONFIGMAP, self.options.plans_namespace, {"data": data})
        except ApiException as error:
            if error.status != 404:
                raise
            body = {"apiVersion": "v1", "kind": "ConfigMap", "data": data,
                    "metadata": {"name": PLANS_CONFIGMAP, "namespace": self.options.plans_namespace,
                                 "labels": {"app.kubernetes.io/name": "gpupair", "app.kubernetes.io/component": "defrag"}}}
            await self.core.create_namespaced_config_map(self.options.plans_namespace, body)

    async def _remove_plan(self, uid: str) -> None:
        try:
            await self.core.patch_namespaced_config_map(PLANS_CONFIGMAP, self.options.plans_namespace,
                                                        {"data": {uid: None}})
        except ApiException as error:
            if error.status != 404:
                raise

    async def _event(self, pod: Any, reason: str, message: str, warning: bool = False) -> None:
        if pod is None:
            return
        try:
            await create_event(self.api, {**pod, "apiVersion": "v1", "kind": "Pod"}, reason, message, type="Warning" if warning else "Normal",
                               component=COMPONENT)
        except Exception as error:  # an Event is worth a try, never a round
            log.warning("event not written", extra={"reason": reason, "error": describe_error(error)})


def _controller(pod: Mapping[str, Any]) -> str:
    for owner in meta(pod).get("ownerReferences") or []:
        if isinstance(owner, Mapping) and owner.get("controller") is True:
            return str(owner.get("uid") or "")
    return ""


def _held_back(fleet: LiveFleet, plans) -> list:
    """The placed pods, with the plans in flight taken out of the new plans' reach: their freed
    sets and targets as if taken, their pods not moving again. Returns the pods; the rooms are
    changed in place."""
    held: dict[str, set[int]] = {}
    moving = set()
    for plan in plans:
        held.setdefault(plan.node, set()).update(plan.devices)
        for move in plan.moves:
            held.setdefault(move.toNode, set()).update(move.toDevices)
            moving.add(move.uid)
    for i, room in enumerate(fleet.rooms):
        if room.name in held:
            left = [0 if d in held[room.name] else value for d, value in enumerate(room.left)]
            fleet.rooms[i] = room.changed(left, 0, 0)
    return [replace(p, movable=False) if p.uid in moving else p for p in fleet.placed]


async def run_rounds(actor: DefragActor, interval: float, stop: asyncio.Event) -> None:
    while not stop.is_set():
        try:
            await actor.round()
        except Exception as error:  # an unreachable apiserver, a refused write: try again next round
            actor.metrics.round_errors.inc()
            log.warning("round failed", extra={"error": describe_error(error)})
        try:
            await asyncio.wait_for(stop.wait(), interval)
        except asyncio.TimeoutError:
            pass
