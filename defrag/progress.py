"""What to do next with each plan in flight, from the cluster as listed. Pure.

A plan goes, in one round: its evictions not done yet are carried out while everything it counts
on still holds; once they are done it waits for the pods to be placed; it ends when they are (or
at ``heldUntil``). It is dropped, with the reason, as soon as:

- the waiting pod is gone or was placed elsewhere;
- a GPU of the freed set is held by a pod the plan does not move;
- a move's target GPU is taken (by anything) before its pod was evicted;
- a pod to move is no longer the pod planned (gone before its eviction is fine: its GPUs are free).

Only a pod not yet evicted is ever evicted, and only while its plan holds: a plan resumed by a new
process after a crash is checked the same way before anything more is done.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gpupair.kubewire.defrag_plans import PlanInFlight, PlannedMove
from gpupair.status.objects import meta, parse_time
from gpupair.topology.report import NodeReport

# Why a plan ended or was dropped, as Events and the metric's label say it.
PLACED = "placed"
EXPIRED = "expired before the pod was placed"
WAITING_GONE = "the waiting pod is gone"
PLACED_ELSEWHERE = "the waiting pod was placed elsewhere"
SET_TAKEN = "a GPU of the freed set was taken by a pod the plan does not move"
TARGET_TAKEN = "a moved pod's new place was taken"
NOT_THE_POD = "a pod to move is not the one planned"
REFUSED = "an eviction was refused"  # a PodDisruptionBudget (429) or a webhook


@dataclass(frozen=True)
class Evict:
    move: PlannedMove


@dataclass(frozen=True)
class End:
    reason: str  # PLACED, or why the plan was dropped

    @property
    def placed(self) -> bool:
        return self.reason == PLACED


@dataclass(frozen=True)
class Wait:
    why: str


@dataclass(frozen=True)
class Nudge:
    """The freed set shows free and the waiting pod is still unbound: kube-scheduler retries a pod
    the extender turned down on the next cluster event, and may have tried it once before the
    report showed the set free; an update of the pod is such an event."""


Step = Evict | End | Wait | Nudge


def next_step(plan: PlanInFlight, pods: Mapping[str, Mapping[str, Any]], reports: Mapping[str, NodeReport],
              now: float) -> Step:
    """``pods``: every live pod by UID; ``reports``: the fresh reports of nodes planned on (a node
    missing there is not read now: the plan waits, and evicts nothing)."""
    waiting = pods.get(plan.uid)
    if waiting is None:
        return End(WAITING_GONE)
    bound = (waiting.get("spec") or {}).get("nodeName")
    if bound and bound != plan.node:
        return End(PLACED_ELSEWHERE)
    pending = [m for m in plan.moves if not m.evicted]
    if bound and all(_replaced(m, pods, plan.startedAt) for m in plan.moves) and not pending:
        return End(PLACED)
    if now >= plan.heldUntil:
        return End(PLACED if bound and not pending else EXPIRED)
    for move in pending:
        pod = pods.get(move.uid)
        if pod is None:
            continue  # gone already: its GPUs are free, nothing to evict
        if (pod.get("spec") or {}).get("nodeName") != move.fromNode:
            return End(NOT_THE_POD)
    if pending:
        for node in {plan.node, *(m.toNode for m in pending)}:
            if node not in reports:
                return Wait(f"node {node} is not read now (stale or settling)")
        problem = _still_holds(plan, pending, reports[plan.node], reports)
        if problem:
            return End(problem)
        for move in pending:
            if move.uid in pods:
                return Evict(move)
    if not bound and plan.node in reports and set(plan.devices) <= reports[plan.node].state.free:
        return Nudge()
    return Wait("the pods are not all placed yet")


def _still_holds(plan: PlanInFlight, pending: list[PlannedMove], source: NodeReport,
                 reports: Mapping[str, NodeReport]) -> str:
    moving = {tuple(m.pod.split("/", 1)): m.uid for m in plan.moves}
    for device in plan.devices:
        if device in source.state.free:
            continue
        holder = _holder(source, device)
        if holder is None or holder not in moving:
            return SET_TAKEN
        known = source.ledger.uids.get(holder) if source.ledger is not None else None
        if known and known != moving[holder]:
            return SET_TAKEN  # a pod of that name, not the one planned
    for move in pending:
        target = reports[move.toNode]
        if any(device not in target.state.free for device in move.toDevices):
            return TARGET_TAKEN
    return ""


def _holder(report: NodeReport, device: int) -> tuple[str, str] | None:
    """(namespace, name) of the pod the ledger shows on ``device`` (None: unknown or nobody)."""
    if report.ledger is None:
        return None
    for key, devices in report.ledger.pods.items():
        if device in devices:
            return key
    return None


def _replaced(move: PlannedMove, pods: Mapping[str, Mapping[str, Any]], since: float) -> bool:
    """A pod of the moved pod's controller, other than it, created since the plan began, is bound."""
    for uid, pod in pods.items():
        if uid == move.uid or not (pod.get("spec") or {}).get("nodeName"):
            continue
        owners = meta(pod).get("ownerReferences") or []
        if not any(isinstance(o, Mapping) and o.get("controller") is True and o.get("uid") == move.owner
                   for o in owners):
            continue
        created = parse_time(meta(pod).get("creationTimestamp"))
        if created is not None and created.timestamp() >= since - 1:  # creationTimestamp has whole seconds
            return True
    return False
