"""How many GPUs each pod asked for: the one place in the extender that knows.

Bind's body names a pod (namespace, name, UID) but not its request, so the count comes from
wherever the extender saw the pod first:

- the pod in a filter or prioritize body (short-lived: a pod is bound within seconds);
- the pod watch, for GPU pods seen unbound (filtered before a restart, or by another replica);
- failing both, a GET of the pod from the API server.

The count itself is always ``gpupair.decide.pod.pod_request.gpu_request`` of the Pod object.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from cachetools import TTLCache

from collections.abc import Callable

from gpupair.decide.picture.dra_picture import Demand
from gpupair.decide.pod.intent import Intent
from gpupair.decide.pod.pod_request import PodRequestError, gpu_request


class PodRequests:
    def __init__(self, resource: str, ttl: float = 600.0, maxsize: int = 100_000,
                 claims: Callable[[Any], Demand | None] | None = None):
        self.resource = resource
        self.claims = claims  # the GPUs a pod's own DRA claims ask (gpupair/decide/picture/dra_source.py)
        # uid -> (GPUs, placement intent), from request bodies
        self._filtered: TTLCache = TTLCache(maxsize=maxsize, ttl=ttl)
        self._unbound: dict[str, int] = {}  # uid -> GPUs, GPU pods the pod watch sees unbound

    def of(self, pod: Any) -> int:
        """GPUs ``pod`` asks for (its effective request, and its claims' GPUs on a DRA
        cluster); PodRequestError if it cannot tell."""
        gpus = gpu_request(pod, self.resource)
        demand = self.claims(pod) if self.claims is not None else None
        return gpus + demand.gpus if demand is not None else gpus

    def remember(self, pod: Any, gpus: int, intent: Intent | None = None) -> None:
        """A pod seen in a filter or prioritize body (and the intent it was decided under)."""
        meta = pod.get("metadata") if isinstance(pod, dict) else None
        uid = meta.get("uid") if isinstance(meta, dict) else None
        if isinstance(uid, str) and uid:
            seen = (gpus, intent)
            # Filter remembered it already for the same pod's prioritize: a TTLCache write costs
            # more than the check, and a pod is bound within seconds of its filter.
            if self._seen(uid) != seen:
                self._filtered[uid] = seen

    # ---- the pod watch

    def unbound(self, uid: str, gpus: int) -> None:
        self._unbound[uid] = gpus

    def bound_or_gone(self, uid: str) -> None:
        self._unbound.pop(uid, None)

    def replace_unbound(self, unbound: dict[str, int]) -> None:
        """A relist: exactly these GPU pods are unbound now."""
        self._unbound = dict(unbound)

    # ---- bind

    def asked(self, uid: str) -> tuple[int | None, Intent | None]:
        """The pod's GPUs and the placement intent its filter was decided under (None
        if not filtered here: bind then uses the claims' or the cluster default), from one read."""
        if not uid:
            return None, None
        seen = self._seen(uid)
        return seen if seen is not None else (self._unbound.get(uid), None)

    def _seen(self, uid: str) -> tuple[int, Intent | None] | None:
        # TTLCache's own get asks ``in`` and then reads the key, each checking the TTL: twice
        # the cost, four times a request.
        try:
            return self._filtered[uid]
        except KeyError:
            return None

    async def fetch(self, api: Any, namespace: str, name: str, uid: str, timeout: float) -> int:
        """Read the pod from the API server; raise (ApiException, ValueError, TimeoutError)
        when it cannot be read, is another pod than ``uid``, or its request is unreadable."""
        from kubernetes_asyncio import client as k8s
        from kubernetes_asyncio.client.exceptions import ApiException
        from kubernetes_asyncio.client.rest import RESTResponse

        response = await asyncio.wait_for(
            k8s.CoreV1Api(api).read_namespaced_pod(name, namespace, _preload_content=False), timeout)
        data = await response.read()
        if not 200 <= response.status <= 299:
            raise ApiException(http_resp=RESTResponse(response, data))
        pod = json.loads(data)
        found = (pod.get("metadata") or {}).get("uid")
        if uid and found != uid:
            raise ValueError(f"pod has UID {found}, the scheduler bound UID {uid}")
        try:
            return self.of(pod)
        except PodRequestError as exc:
            raise ValueError(str(exc)) from None
