"""Pods, as they concern the node holds in ``Reservations``.

- A GPU pod bound to a node, by whoever (the extender's bind, a pod created with
  ``spec.nodeName``, another scheduler or replica), is handed to ``Reservations.pod_bound``:
  the node owes its GPU count until a report's ledger lists the pod. The first list does the
  same for every bound pod, so a restarted extender or a second replica rebuilds the holds from
  the pods plus the ledgers; pods the ledgers already list cost nothing.
- A pod deleted, or finished (Succeeded/Failed: its devices are free again), ends its hold.
- Unbound GPU pods' requests go to ``PodRequests``: bind's body names a pod, not its request.
- Every pod, GPU or not, goes first to the listeners subscribed (``ClusterUsage`` under
  ``--score fragmentation``: each pod's CPU and shape).
- ``progress`` says how far the watch has read, so that filter can wait until it has read the
  pod being scheduled (gpupair/kubeclient/watch_progress.py).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, Protocol

from gpupair.extender.cache.pod_request_cache import PodRequests
from gpupair.kubeclient.watch_progress import WatchProgress
from gpupair.decide.judge.reservations import Reservations
from gpupair.decide.pod.pod_request import PodRequestError

if TYPE_CHECKING:
    from gpupair.extender.unallocatable import UnallocatableClaims

log = logging.getLogger("gpupair.extender.pods")

TERMINAL = ("Succeeded", "Failed")


class PodListener(Protocol):
    """What learns of every pod, GPU or not (ClusterUsage: each pod's CPU and shape), before the
    watch's own holds and requests."""

    def replace_pods(self, items: list[dict[str, Any]]) -> None: ...

    def pod_seen(self, pod: dict[str, Any]) -> None: ...

    def pod_gone(self, uid: str) -> None: ...


class PodWatch:
    def __init__(self, reservations: Reservations, requests: PodRequests,
                 unallocatable: UnallocatableClaims | None = None):
        """``unallocatable``: DRA only, told of each unbound pod, to explain the claim pods no
        node can allocate."""
        self.reservations = reservations
        self.requests = requests
        self._listeners: list[PodListener] = []
        self.listed = False
        self.progress = WatchProgress()  # advanced by the ListWatch that feeds this handler
        self.unallocatable = unallocatable

    def subscribe(self, listener: PodListener) -> None:
        self._listeners.append(listener)

    # ---- WatchHandler

    def replace(self, items: list[dict[str, Any]]) -> None:
        for listener in self._listeners:
            listener.replace_pods(items)
        present = set()
        unbound: dict[str, int] = {}
        for pod in items:
            uid, node, phase, gpus = self._facts(pod)
            if not uid:
                continue
            present.add(uid)
            if phase in TERMINAL:
                self.reservations.pod_gone(uid, "finished")
            elif gpus > 0 and not node:
                unbound[uid] = gpus
            elif gpus > 0:
                self._bound(uid, pod, node, gpus)
        # Holds of pods deleted while the watch was down.
        for uid in self.reservations.known_uids() - present:
            self.reservations.pod_gone(uid, "deleted")
        self.requests.replace_unbound(unbound)
        if not self.listed:
            log.info("pod watch ready", extra={"holds": len(self.reservations)})
        self.listed = True

    def apply(self, event_type: str, pod: dict[str, Any]) -> None:
        for listener in self._listeners:
            if event_type == "DELETED":
                listener.pod_gone(str((pod.get("metadata") or {}).get("uid") or ""))
            else:
                listener.pod_seen(pod)
        uid, node, phase, gpus = self._facts(pod)
        if not uid:
            return
        if event_type == "DELETED" or phase in TERMINAL:
            self.requests.bound_or_gone(uid)
            self.reservations.pod_gone(uid, "deleted" if event_type == "DELETED" else "finished")
            return
        if self.unallocatable is not None and not node:
            self.unallocatable.observe(pod)
        if gpus <= 0:
            return
        if not node:
            self.requests.unbound(uid, gpus)
        else:
            self.requests.bound_or_gone(uid)
            self._bound(uid, pod, node, gpus)

    # ---- internals

    def _facts(self, pod: dict[str, Any]) -> tuple[str, str, str, int]:
        meta = pod.get("metadata") or {}
        spec = pod.get("spec") or {}
        status = pod.get("status") or {}
        uid = str(meta.get("uid") or "")
        # Read afresh each time: a pod's claims (kube-scheduler's own, for an extended resource)
        # appear as it is scheduled.
        try:
            gpus = self.requests.of(pod)
        except PodRequestError:
            gpus = 0
        return (uid, str(spec.get("nodeName") or ""), str(status.get("phase") or ""), gpus)

    def _bound(self, uid: str, pod: dict[str, Any], node: str, gpus: int) -> None:
        meta = pod.get("metadata") or {}
        self.reservations.pod_bound(uid, node, str(meta.get("namespace") or ""), str(meta.get("name") or ""), gpus)
