"""Keeping this node's liveness Lease renewed (see gpupair/kubewire/leases.py for why a Lease).

The loop calls ``keep_alive`` after each scan whose report is published as scanned (written or
unchanged): the Lease then says "this node's report is current", not merely "a process runs".
A reporter whose scans fail, or whose report writes fail, stops renewing and the node goes stale
after the extender's --stale-after, as it did when heartbeats were annotation writes.

One renewal per ``interval``: a PUT of the Lease with the resourceVersion last seen, so a
concurrent writer gets 409 (then one GET and one more PUT). A missing Lease (404) is created,
with an owner reference to the Node so it goes when the node goes. Failures back off like the
publisher's writes: exponentially, up to ``backoff_cap``, with jitter.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Callable
from enum import Enum
from typing import Any, Protocol

from gpupair.kubewire import leases
from gpupair.reporter.publisher import backoff_delay, describe_write_error

log = logging.getLogger("gpupair.reporter.heartbeat")


class LeaseApi(Protocol):
    async def get(self, namespace: str, name: str) -> dict[str, Any] | None: ...
    async def create(self, namespace: str, body: dict[str, Any]) -> dict[str, Any]: ...
    async def replace(self, namespace: str, name: str, body: dict[str, Any]) -> dict[str, Any]: ...
    async def node_uid(self, name: str) -> str: ...


class Renewal(str, Enum):
    RENEWED = "renewed"
    CREATED = "created"
    ERROR = "error"
    NOT_DUE = "not_due"
    BACKOFF = "backoff"


class LeaseKeeper:
    def __init__(
        self,
        api: LeaseApi,
        node: str,
        namespace: str,
        *,
        interval: float = 30.0,
        duration: int = 120,
        backoff_base: float = 1.0,
        backoff_cap: float = 60.0,
        timeout: float = 10.0,
        clock: Callable[[], float] = time.monotonic,
        wall_ns: Callable[[], int] = time.time_ns,
        rng: Callable[[], float] = random.random,
    ) -> None:
        if interval <= 0 or duration <= 0:
            raise ValueError("the Lease interval and duration must be positive")
        self._api = api
        self.node = node
        self.namespace = namespace
        self.interval = interval
        self.duration = duration
        self.backoff_base = backoff_base
        self.backoff_cap = backoff_cap
        self.timeout = timeout
        self._clock = clock
        self._wall_ns = wall_ns
        self._rng = rng
        self.lease: dict[str, Any] | None = None  # as the apiserver last returned it
        self.renewed_at: float | None = None  # clock() of the last success
        self.failures = 0
        self.retry_at: float | None = None
        self.last_error = ""

    def due(self) -> Renewal:
        now = self._clock()
        if self.renewed_at is not None and now - self.renewed_at < self.interval:
            return Renewal.NOT_DUE
        if self.retry_at is not None and now < self.retry_at:
            return Renewal.BACKOFF
        return Renewal.RENEWED

    async def keep_alive(self) -> Renewal:
        """Renew (or create) the Lease if an interval has passed since the last renewal."""
        due = self.due()
        if due is not Renewal.RENEWED:
            return due
        try:
            outcome = await asyncio.wait_for(self._renew(), timeout=self.timeout)
        except Exception as error:  # noqa: BLE001 - any failure: back off and retry later
            self.failures += 1
            delay = backoff_delay(self.failures, self.backoff_base, self.backoff_cap, self._rng)
            self.retry_at = self._clock() + delay
            self.last_error = describe_write_error(error, "leases")
            log.warning("renewing the node's Lease failed; backing off",
                        extra={"error": self.last_error, "failures": self.failures, "retry_in_s": round(delay, 3)})
            return Renewal.ERROR
        self.failures, self.retry_at, self.last_error = 0, None, ""
        self.renewed_at = self._clock()
        if outcome is Renewal.CREATED:
            log.info("node Lease created", extra={"lease": f"{self.namespace}/{self.node}"})
        return outcome

    async def _renew(self) -> Renewal:
        if self.lease is None:
            self.lease = await self._api.get(self.namespace, self.node)
            if self.lease is None:
                return await self._create()
        try:
            self.lease = await self._put()
        except Exception as error:  # noqa: BLE001 - sorted by status below
            status = getattr(error, "status", None)
            if status == 404:
                self.lease = None
                return await self._create()
            if status != 409:
                raise
            # Someone else wrote it (a reporter restarted with a stale copy, an operator): take
            # the current version and renew once more.
            self.lease = await self._api.get(self.namespace, self.node)
            if self.lease is None:
                return await self._create()
            self.lease = await self._put()
        return Renewal.RENEWED

    async def _put(self) -> dict[str, Any]:
        body = leases.lease_body(self.node, self.namespace, self.duration, self._wall_ns(), previous=self.lease)
        return await self._api.replace(self.namespace, self.node, body)

    async def _create(self) -> Renewal:
        try:
            uid = await self._api.node_uid(self.node)
        except Exception as error:  # noqa: BLE001 - the owner reference is a nicety, not a need
            log.info("no owner reference on the node Lease", extra={"error": describe_write_error(error)})
            uid = ""
        body = leases.lease_body(self.node, self.namespace, self.duration, self._wall_ns(), node_uid=uid)
        try:
            self.lease = await self._api.create(self.namespace, body)
        except Exception as error:  # noqa: BLE001
            if getattr(error, "status", None) == 409:  # created meanwhile: renew it next time
                self.lease = None
            raise
        return Renewal.CREATED


class KubeLeases:
    """LeaseApi over kubernetes-asyncio, reading raw JSON: the generated V1Lease would
    re-serialise renewTime without the six fractional digits a MicroTime must carry."""

    def __init__(self, api: Any) -> None:
        from kubernetes_asyncio import client as k8s

        self._leases = k8s.CoordinationV1Api(api)
        self._core = k8s.CoreV1Api(api)

    async def get(self, namespace: str, name: str) -> dict[str, Any] | None:
        try:
            return await _raw(self._leases.read_namespaced_lease(name, namespace, _preload_content=False))
        except Exception as error:  # noqa: BLE001
            if getattr(error, "status", None) == 404:
                return None
            raise

    async def create(self, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
        return await _raw(self._leases.create_namespaced_lease(namespace, body, _preload_content=False))

    async def replace(self, namespace: str, name: str, body: dict[str, Any]) -> dict[str, Any]:
        return await _raw(self._leases.replace_namespaced_lease(name, namespace, body, _preload_content=False))

    async def node_uid(self, name: str) -> str:
        node = await _raw(self._core.read_node(name, _preload_content=False))
        return str((node.get("metadata") or {}).get("uid") or "")


async def _raw(call: Any) -> dict[str, Any]:
    import json

    from kubernetes_asyncio.client.exceptions import ApiException
    from kubernetes_asyncio.client.rest import RESTResponse

    response = await call
    try:
        data = await response.read()
    finally:
        response.release()
    if not 200 <= response.status <= 299:
        error = ApiException(http_resp=RESTResponse(response, data))
        error.body = data.decode(errors="replace")
        raise error
    return json.loads(data)
