"""Pods, as they concern reservations.

- A pod deleted, or finished (Succeeded/Failed: its devices are free again), releases its
  reservation.
- A GPU pod seen unbound and then bound, or created already bound while the watch runs, and
  holding no reservation, gets one for the set the plugin is expected to pick: this covers
  schedulers that bind without the extender's bind verb, and Bindings whose answer was lost.
Pods already bound at the first list are left alone: their devices may already be in reports.
"""

from __future__ import annotations

import logging
from typing import Any

from extender.evaluation import Evaluator
from extender.reservations import Reservation, Reservations
from gpupair.pod_request import PodRequestError, gpu_request

log = logging.getLogger("gpupair.extender.pods")

TERMINAL = ("Succeeded", "Failed")


class PodWatch:
    def __init__(self, evaluator: Evaluator, reservations: Reservations, resource: str):
        self.evaluator = evaluator
        self.reservations = reservations
        self.resource = resource
        self._unbound: dict[str, int] = {}  # GPU pods seen without a node -> GPUs asked
        self._listed = False

    def gpus_of(self, uid: str) -> int | None:
        """GPUs asked by a pod seen unbound (bind's body names the pod but not its request)."""
        return self._unbound.get(uid)

    # ---- WatchHandler

    def replace(self, items: list[dict[str, Any]]) -> None:
        present = set()
        unbound: dict[str, int] = {}
        for pod in items:
            uid, node, phase, gpus = self._facts(pod)
            if not uid:
                continue
            present.add(uid)
            if phase in TERMINAL:
                self._release(uid, "finished")
            elif gpus > 0 and not node:
                unbound[uid] = gpus
            elif gpus > 0 and node and uid in self._unbound:
                self._bound(uid, pod, node, gpus)  # bound while the watch was down
        # Reservations of pods deleted while the watch was down.
        for uid in self.reservations.uids():
            if uid not in present:
                self._release(uid, "deleted")
        self._unbound = unbound
        self._listed = True

    def apply(self, event_type: str, pod: dict[str, Any]) -> None:
        uid, node, phase, gpus = self._facts(pod)
        if not uid:
            return
        if event_type == "DELETED" or phase in TERMINAL:
            self._unbound.pop(uid, None)
            self._release(uid, "deleted" if event_type == "DELETED" else "finished")
            return
        if gpus <= 0:
            return
        if not node:
            self._unbound[uid] = gpus
        elif uid in self._unbound or event_type == "ADDED":
            self._unbound.pop(uid, None)
            self._bound(uid, pod, node, gpus)

    # ---- internals

    def _facts(self, pod: dict[str, Any]) -> tuple[str, str, str, int]:
        meta = pod.get("metadata") or {}
        spec = pod.get("spec") or {}
        status = pod.get("status") or {}
        try:
            gpus = gpu_request(pod, self.resource)
        except PodRequestError:
            gpus = 0
        return (str(meta.get("uid") or ""), str(spec.get("nodeName") or ""), str(status.get("phase") or ""), gpus)

    def _bound(self, uid: str, pod: dict[str, Any], node: str, gpus: int) -> None:
        held = self.reservations.get(uid)
        if held is not None and held.node == node:
            return  # the extender's own bind reserved it
        decision = self.evaluator.decide_one(gpus, node, exclude_uid=uid)
        if not decision.plan:
            return
        meta = pod.get("metadata") or {}
        self.reservations.reserve(Reservation(uid, node, frozenset(decision.plan),
                                              meta.get("namespace", ""), meta.get("name", "")))
        log.info("reserved for a pod bound elsewhere", extra={
            "pod": f"{meta.get('namespace')}/{meta.get('name')}", "node": node, "devices": sorted(decision.plan)})

    def _release(self, uid: str, why: str) -> None:
        released = self.reservations.release(uid)
        if released is not None:
            log.info("reservation released", extra={"pod": f"{released.namespace}/{released.name}",
                                                    "node": released.node, "why": why})
