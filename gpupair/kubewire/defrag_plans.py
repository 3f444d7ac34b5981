"""The defrag plans in flight, as `gpupair defrag --act` writes them and the extender reads them:
one ConfigMap in gpupair's namespace (``PLANS_CONFIGMAP``), a data key per waiting pod's UID, its
value a ``PlanInFlight`` as JSON.

A ConfigMap in gpupair's own namespace, not an annotation on the waiting pod: only the defrag
service may write it (RBAC), so no pod can have GPUs held for itself. It is written before the
first eviction and removed when the plan ends, so a process that dies mid-way leaves the plan
where its successor, and every extender replica, finds it.

What the extender holds while a plan is in flight (until ``heldUntil``):
- the freed set (``node``, ``devices``) for the waiting pod only;
- each move's target (``toNode``, ``toDevices``) for the first pod of the moved pod's controller
  (``owner``, its UID) that is not the moved pod itself: its replacement.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from gpupair.kubewire.wire import annotation_model

PLANS_CONFIGMAP = "gpupair-defrag-plans"
PLAN_LIMIT = 16 * 1024  # bytes of one plan's JSON; a plan of 16 moves is under 4 KiB


class _Plan(BaseModel):
    model_config = ConfigDict(extra="ignore", strict=True)


class PlannedMove(_Plan):
    pod: str = Field(description="namespace/name of the pod to evict")
    uid: str
    owner: str = Field(description="UID of its controller, which recreates it")
    fromNode: str
    fromDevices: list[int]
    toNode: str
    toDevices: list[int]
    evicted: bool = False


class PlanInFlight(_Plan):
    namespace: str
    name: str
    uid: str
    node: str
    devices: list[int]
    moves: list[PlannedMove]
    startedAt: float = Field(description="epoch seconds")
    heldUntil: float = Field(description="epoch seconds; the holds end then, placed or not")


class PlanUnreadable(ValueError):
    """A value of the plans ConfigMap that is not a plan; the message says why in one line."""


def read_plan(key: str, text: object) -> PlanInFlight:
    """The plan under ``key``, or PlanUnreadable: not a plan, under another pod's UID, or
    without the UIDs a hold is keyed by."""
    plan = annotation_model(key, text, PlanInFlight, PLAN_LIMIT, PlanUnreadable)
    if plan.uid != key:
        raise PlanUnreadable(f"{key} holds the plan of pod UID {plan.uid}: a plan's key is its waiting pod's UID")
    if not plan.uid or any(not (move.uid and move.owner) for move in plan.moves):
        raise PlanUnreadable(f"{key}: a plan names its waiting pod, and each move its pod and controller, by UID")
    return plan
