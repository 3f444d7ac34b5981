"""A claim pod that DynamicResources refused on every node waits with gpupair's reason.

kube-scheduler asks the extender only about nodes its own filters passed, so where the
allocator fits no node (a ``matchAttribute`` constraint no node meets, too few free GPUs) the
pod's only reason is the scheduler's "cannot allocate all claims". The extender watches the
pods: when one with claims is marked Unschedulable, it works out from the slices and the
allocations it watches whether any DRA node could hold the claims' GPUs
(gpupair/decide/claims/claim_explain.py) and, where none could, records a Warning Event
``FailedScheduling`` with which constraint, which nodes and the free sets there. Once per pod
and reason (the scheduler retries the pod; the same words again say nothing new).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from cachetools import TTLCache

from gpupair.kubeclient import kube

log = logging.getLogger("gpupair.extender.unallocatable")

REASON = "FailedScheduling"  # what kube-scheduler's own Event for the same wait is called
COMPONENT = "gpupair-extender"


def refused_by_scheduler(pod: Any) -> bool:
    """An unbound pod with claims whose PodScheduled condition says Unschedulable."""
    if not isinstance(pod, dict):
        return False
    spec, status = pod.get("spec") or {}, pod.get("status") or {}
    if spec.get("nodeName") or not spec.get("resourceClaims"):
        return False
    return any(c.get("type") == "PodScheduled" and c.get("status") == "False" and c.get("reason") == "Unschedulable"
               for c in status.get("conditions") or [] if isinstance(c, dict))


class UnallocatableClaims:
    def __init__(self, api: Any, why: Callable[[Any], str], timeout: float):
        self.api = api
        self.why = why  # NodePicture.why_unallocatable
        self.timeout = timeout
        self._said: TTLCache = TTLCache(maxsize=100_000, ttl=600.0)  # pod uid -> the reason recorded
        self._background: set[asyncio.Task] = set()

    def observe(self, pod: Any) -> None:
        if not refused_by_scheduler(pod):
            return
        uid = str((pod.get("metadata") or {}).get("uid") or "")
        why = self.why(pod)
        if not uid or not why or self._said.get(uid) == why:
            return
        self._said[uid] = why
        task = asyncio.get_running_loop().create_task(self._send(pod, why))
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def _send(self, pod: dict[str, Any], why: str) -> None:
        try:
            await asyncio.wait_for(kube.create_event(self.api, pod, REASON, why, type="Warning", component=COMPONENT,
                                                     action="Scheduling"), self.timeout)
        except Exception as exc:  # noqa: BLE001 - an Event is best effort
            log.warning("could not record event", extra={"pod": (pod.get("metadata") or {}).get("name", ""),
                                                         "error": kube.describe_error(exc)})
