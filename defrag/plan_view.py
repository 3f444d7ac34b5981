"""What `gpupair defrag --plan` prints: each waiting pod's plan (or why there is none), the pods
that may move and the nodes left out, as text or as JSON (``-o json``, this model)."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, ConfigDict, Field

from gpupair.decide.defrag.fleet import DefragPlan, NoDefragPlan
from gpupair.decide.score.fragmentation import MILLI
from gpupair.defrag.live_fleet import LiveFleet


class _PlanOutput(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class MoveView(_PlanOutput):
    pod: str = Field(description="namespace/name of the pod evicted; its controller recreates it")
    gpus: float = Field(description="GPUs it holds (a share pod: its part of one GPU)")
    fromNode: str
    fromDevices: list[int]
    toNode: str = Field(description="where its replacement has a close set now (held for it)")
    toDevices: list[int]


class PlanView(_PlanOutput):
    pod: str = Field(description="namespace/name of the waiting pod")
    gpus: int
    node: str = Field(description="the node whose close set the moves free (held for the pod)")
    devices: list[int]
    moves: list[MoveView] = Field(description="empty: the set is free now and the scheduler has not taken it yet")
    gpusMoved: float


class NoPlanView(_PlanOutput):
    pod: str
    gpus: int
    reason: str


class LeftOut(_PlanOutput):
    node: str
    reason: str


class DefragView(_PlanOutput):
    generatedAt: datetime
    plans: list[PlanView]
    noPlan: list[NoPlanView]
    movablePods: int = Field(description="GPU pods that may move (opted in, recreated by a controller, ...)")
    pinnedPods: dict[str, int] = Field(description="GPU pods that may not move, by why")
    nodesLeftOut: list[LeftOut]


def defrag_view(fleet: LiveFleet, answers: list[DefragPlan | NoDefragPlan], now: datetime) -> DefragView:
    asked = {w.uid: w.ask.gpus for w in fleet.waiting}
    plans, none = [], []
    for answer in answers:
        name = str(fleet.names[answer.waiting.uid])
        if isinstance(answer, NoDefragPlan):
            none.append(NoPlanView(pod=name, gpus=asked[answer.waiting.uid], reason=answer.reason))
            continue
        moves = [MoveView(pod=str(fleet.names[m.pod.uid]), gpus=_gpus(m.pod.ask.gpus, m.pod.ask.milli),
                          fromNode=m.pod.node, fromDevices=list(m.pod.devices), toNode=m.node, toDevices=list(m.devices))
                 for m in answer.moves]
        plans.append(PlanView(pod=name, gpus=asked[answer.waiting.uid], node=answer.node, devices=list(answer.devices),
                              moves=moves, gpusMoved=sum(m.gpus for m in moves)))
    return DefragView(generatedAt=now, plans=plans, noPlan=none,
                      movablePods=sum(1 for p in fleet.placed if p.movable), pinnedPods=dict(fleet.pinned.most_common()),
                      nodesLeftOut=[LeftOut(node=n, reason=r) for n, r in sorted(fleet.left_out.items())])


def _gpus(gpus: int, milli: int) -> float:
    return gpus * milli / MILLI


def render_text(view: DefragView) -> str:
    lines = []
    if not view.plans and not view.noPlan:
        lines.append("no pod waits for GPUs: nothing to plan")
    for plan in view.plans:
        if not plan.moves:
            lines.append(f"{plan.pod} ({plan.gpus} GPUs): {plan.node} {_set(plan.devices)} is free now; no move needed")
            continue
        lines.append(f"{plan.pod} ({plan.gpus} GPUs): {plan.node} {_set(plan.devices)} after "
                     f"{len(plan.moves)} move{'s' if len(plan.moves) != 1 else ''} ({_number(plan.gpusMoved)} GPUs moved)")
        for move in plan.moves:
            lines.append(f"  move {move.pod} ({_number(move.gpus)} GPU): {move.fromNode} {_set(move.fromDevices)}"
                         f" -> {move.toNode} {_set(move.toDevices)}")
    for none in view.noPlan:
        lines.append(f"{none.pod} ({none.gpus} GPUs): {none.reason}")
    pinned = ", ".join(f"{why} {count}" for why, count in view.pinnedPods.items())
    lines.append(f"movable GPU pods: {view.movablePods}" + (f"; may not move: {pinned}" if pinned else ""))
    for left in view.nodesLeftOut:
        lines.append(f"node {left.node} left out: {left.reason}")
    return "\n".join(lines) + "\n"


def _set(devices: list[int]) -> str:
    return "GPU" + ",".join(map(str, devices))


def _number(value: float) -> str:
    return f"{value:g}"
