"""The devices a defrag plan in flight keeps free, and for whom (gpupair/kubewire/defrag_plans.py).

Fed by a list+watch of the one plans ConfigMap in gpupair's namespace, it keeps in
``Reservations`` (as held sets, whose keys are no pod UID) for each plan:

- the freed set (``node``, ``devices``) for the waiting pod (``uid``) only;
- each move's target (``toNode``, ``toDevices``) for the moved pod's replacement: the first pod
  seen whose controller is the move's ``owner`` and that is not the moved pod itself.

Every other pod's filter, prioritize and bind sees those devices taken; the claimant, asked
about through ``keys_for`` (a pod) or ``keys_of`` (a UID, for bind), excludes its own. A hold
ends at ``heldUntil``, when its plan leaves the ConfigMap, or when the pod watch shows its
claimant bound (``pod_seen``), whichever comes first. A replacement deleted before it is bound
gives its move back, for the controller's next pod.

With no plan in flight every entry point returns after one test, so ordinary pods pay nothing.
A value that is not a plan is one warning line (once per value) and is ignored.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from gpupair.decide.judge.reservations import Reservations
from gpupair.kubewire.defrag_plans import PLANS_CONFIGMAP, PlanInFlight, PlanUnreadable, read_plan

log = logging.getLogger("gpupair.extender.defrag_holds")

PREFIX = "defrag:"  # a held set's key; pod UIDs and bind's namespace/name keys have no colon
NO_KEYS: frozenset[str] = frozenset()


@dataclass(frozen=True)
class Wanted:
    """One hold a plan asks for, and who may claim it: a pod UID, or a controller's UID."""

    node: str
    devices: frozenset[int]
    until: float  # epoch seconds
    pod: str = ""  # the waiting pod's UID
    owner: str = ""  # a replacement's controller UID
    moved: str = ""  # the moved pod's UID, never its own replacement


class DefragHolds:
    def __init__(self, reservations: Reservations, clock: Callable[[], float] = time.time):
        self.reservations = reservations
        self.clock = clock
        self.listed = False
        self._wanted: dict[str, Wanted] = {}  # key -> the hold, as the ConfigMap asks it
        self._held: dict[str, Wanted] = {}  # key -> what Reservations holds for it now
        self._ended: set[str] = set()  # keys whose claimant was seen bound: never held again
        self._claims: dict[str, set[str]] = {}  # pod UID -> keys held for it
        self._claimant: dict[str, str] = {}  # replacement key -> the pod UID that claimed it
        self._rejected: dict[str, str] = {}  # data key -> the value already warned about
        self._moved: frozenset[str] = frozenset()  # UIDs of the pods the plans move: never a replacement
        self._due = float("inf")  # the earliest heldUntil held

    @property
    def active(self) -> bool:
        """Whether any plan holds devices now (ending those out of time first)."""
        if self._held and self.clock() >= self._due:
            self._sync()
        return bool(self._held)

    # ---- the ConfigMap watch (WatchHandler)

    def replace(self, items: list[dict[str, Any]]) -> None:
        found = [item for item in items if _name(item) == PLANS_CONFIGMAP]
        self._read(found[0] if found else None)
        if not self.listed:
            log.info("defrag plans listed", extra={"holds": len(self._held)})
        self.listed = True

    def apply(self, event_type: str, obj: dict[str, Any]) -> None:
        if _name(obj) != PLANS_CONFIGMAP:
            return
        self._read(None if event_type == "DELETED" else obj)

    # ---- the pod watch (PodListener)

    def replace_pods(self, items: list[dict[str, Any]]) -> None:
        if self.active:
            for pod in items:
                self.pod_seen(pod)

    def pod_seen(self, pod: dict[str, Any]) -> None:
        if not self.active:
            return
        meta = pod.get("metadata") or {}
        uid = str(meta.get("uid") or "")
        if not uid:
            return
        if (pod.get("spec") or {}).get("nodeName"):
            self._bound(uid)
        else:
            self.keys_for(pod)

    def pod_gone(self, uid: str) -> None:
        """A replacement deleted unbound gives its move back; a waiting pod's hold stays until its
        plan ends (the defrag service removes it)."""
        if not self._held or uid not in self._claims:
            return
        for key in list(self._claims[uid]):
            if self._claimant.get(key) == uid:
                del self._claimant[key]
                self._claims[uid].discard(key)
        if not self._claims[uid]:
            del self._claims[uid]

    # ---- readers

    def keys_for(self, pod: Any) -> frozenset[str]:
        """The keys of the holds kept for ``pod`` (a request's pod or a watched one), claiming a
        move's hold for it where it is the first replacement seen."""
        if not self.active:
            return NO_KEYS
        meta = pod.get("metadata") if isinstance(pod, dict) else None
        meta = meta if isinstance(meta, dict) else {}
        uid = meta.get("uid")
        if not isinstance(uid, str) or not uid:
            return NO_KEYS
        owner = _controller_uid(meta)
        if owner and uid not in self._moved and not self._claims.get(uid):
            for key, wanted in self._held.items():
                if wanted.owner == owner and key not in self._claimant:
                    self._claimant[key] = uid
                    self._claims[uid] = {key}
                    log.info("replacement claims its hold", extra={
                        "pod": f"{meta.get('namespace', '')}/{meta.get('name', '')}", "key": key,
                        "node": wanted.node, "devices": sorted(wanted.devices)})
                    break
        return self.keys_of(uid)

    def keys_of(self, uid: str) -> frozenset[str]:
        """The keys of the holds kept for pod ``uid`` (claimed already), and the UID itself."""
        if not self._held or uid not in self._claims:
            return NO_KEYS
        return frozenset(key for key in self._claims[uid] if key in self._held) | {uid}

    def nodes_of(self, keys: frozenset[str]) -> set[str]:
        return {self._held[key].node for key in keys if key in self._held}

    # ---- internals

    def _read(self, configmap: dict[str, Any] | None) -> None:
        data = (configmap or {}).get("data") or {}
        wanted: dict[str, Wanted] = {}
        rejected: dict[str, str] = {}
        for name, text in (data.items() if isinstance(data, dict) else ()):
            try:
                plan = read_plan(name, text)
            except PlanUnreadable as error:
                rejected[name] = str(text)
                if self._rejected.get(name) != str(text):
                    log.warning("defrag plan unreadable: ignored", extra={
                        "configmap": PLANS_CONFIGMAP, "key": name, "error": str(error)})
                continue
            wanted.update(_holds(plan))
        self._rejected = rejected
        self._wanted = wanted
        self._moved = frozenset(w.moved for w in wanted.values() if w.moved)
        self._ended &= wanted.keys()
        self._sync()

    def _sync(self) -> None:
        """Make Reservations hold what the plans want, less holds ended or out of time."""
        now = self.clock()
        for key in list(self._held):
            wanted = self._wanted.get(key)
            if wanted is None or key in self._ended or wanted.until <= now:
                self._end(key)
        for key, wanted in self._wanted.items():
            if key in self._ended or wanted.until <= now or self._held.get(key) == wanted:
                continue
            self.reservations.hold_set(key, wanted.node, wanted.devices, wanted.until - now)
            self._held[key] = wanted
            if wanted.pod:
                self._claims.setdefault(wanted.pod, set()).add(key)
        self._due = min((wanted.until for wanted in self._held.values()), default=float("inf"))

    def _bound(self, uid: str) -> None:
        for key in list(self._claims.get(uid, ())):
            self._ended.add(key)
            self._end(key)
            log.info("defrag hold ended", extra={"key": key, "why": "its pod is bound"})

    def _end(self, key: str) -> None:
        self.reservations.drop_set(key)
        self._held.pop(key, None)
        claimant = self._claimant.pop(key, None)
        for uid in {claimant, key_pod(key)} - {None}:
            keys = self._claims.get(uid)
            if keys is not None:
                keys.discard(key)
                if not keys:
                    del self._claims[uid]


def key_pod(key: str) -> str:
    """The waiting pod's UID in a freed set's key (``defrag:<uid>``); "" for a move's."""
    rest = key[len(PREFIX):]
    return "" if ":" in rest else rest


def _holds(plan: PlanInFlight) -> dict[str, Wanted]:
    holds = {f"{PREFIX}{plan.uid}": Wanted(plan.node, frozenset(plan.devices), plan.heldUntil, pod=plan.uid)}
    for move in plan.moves:
        holds[f"{PREFIX}{plan.uid}:{move.uid}"] = Wanted(move.toNode, frozenset(move.toDevices), plan.heldUntil,
                                                         owner=move.owner, moved=move.uid)
    return holds


def _controller_uid(meta: Mapping[str, Any]) -> str:
    for owner in meta.get("ownerReferences") or ():
        if isinstance(owner, Mapping) and owner.get("controller") is True:
            return str(owner.get("uid") or "")
    return ""


def _name(obj: Any) -> str:
    meta = obj.get("metadata") if isinstance(obj, dict) else None
    return str(meta.get("name") or "") if isinstance(meta, dict) else ""


def list_plans(api: Any, namespace: str) -> Callable[..., Awaitable[Any]]:
    """The list call for ListWatch: the plans ConfigMap alone, in gpupair's namespace (absent
    while no plan is in flight: an empty list)."""
    from kubernetes_asyncio import client as k8s

    return functools.partial(k8s.CoreV1Api(api).list_namespaced_config_map, namespace,
                             field_selector=f"metadata.name={PLANS_CONFIGMAP}")
