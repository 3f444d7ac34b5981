"""List, then watch, one kind of Kubernetes object, for as long as the service runs: the
extender's Nodes, Pods, Leases, ResourceSlices and ResourceClaims, the reporter's Pods on a DRA
node.

The loop keeps the last resourceVersion it saw (from objects and BOOKMARK events) and resumes
the watch from it when a stream ends; a 410 Gone (the version was compacted away) means events
were lost, so it lists afresh; any other failure waits with capped, jittered exponential
backoff. Objects stay plain dicts from the JSON: the generated models would cost a deep copy
and a type walk per event for fields nobody reads. orjson decodes them: a 5,000-node list
(19 MB) in a third of the stdlib's time, one Node event in half, all of it time the event loop
answers no scheduler request.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

import orjson
from kubernetes_asyncio.client.exceptions import ApiException

from gpupair.kubeclient.watch_progress import WatchProgress
from gpupair.kubeclient import kube

log = logging.getLogger("gpupair.extender.watch")  # the name operators filter the extender's log by

LIST_PAGE = 500


class Gone(Exception):
    """HTTP 410: the resourceVersion is too old; a fresh list is needed."""


class WatchHandler(Protocol):
    def replace(self, items: list[dict[str, Any]]) -> None:
        """The full current set of objects (after each list)."""

    def apply(self, event_type: str, obj: dict[str, Any]) -> None:
        """One ADDED, MODIFIED or DELETED event."""


class Handlers:
    """Several handlers on one watch: each sees every list and event, in the order given."""

    def __init__(self, *handlers: WatchHandler) -> None:
        self.handlers = handlers

    def replace(self, items: list[dict[str, Any]]) -> None:
        for handler in self.handlers:
            handler.replace(items)

    def apply(self, event_type: str, obj: dict[str, Any]) -> None:
        for handler in self.handlers:
            handler.apply(event_type, obj)


class ListWatch:
    """``list_func`` is a kubernetes-asyncio list call such as ``CoreV1Api(api).list_node``."""

    def __init__(
        self,
        resource: str,
        list_func: Callable[..., Awaitable[Any]],
        handler: WatchHandler,
        *,
        timeout_seconds: int = 290,
        connect_timeout: float = 10.0,
        backoff_base: float = 0.5,
        backoff_max: float = 30.0,
        on_restart: Callable[[str], None] | None = None,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        progress: WatchProgress | None = None,
    ):
        self.resource = resource
        self._list_func = list_func
        self._handler = handler
        self._timeout_seconds = timeout_seconds
        self._connect_timeout = connect_timeout
        self._backoff = (backoff_base, backoff_max)
        self._on_restart = on_restart or (lambda reason: None)
        self._sleep = sleep
        self._progress = progress  # told every version read, for requests that wait on it
        self.resource_version: str | None = None
        self.lists = 0  # completed lists, for tests and logs

    async def run(self) -> None:
        failures = 0
        while True:
            try:
                if self.resource_version is None:
                    self.resource_version = await self._list()
                    self.lists += 1
                await self._watch()
                failures = 0
            except asyncio.CancelledError:
                raise
            except Gone as exc:
                log.info("watch expired, listing again", extra={"resource": self.resource, "why": str(exc)})
                self.resource_version = None
                self._on_restart("gone")
            except Exception as exc:  # noqa: BLE001 - an API outage must not end the loop
                failures += 1
                base, cap = self._backoff
                delay = min(cap, base * 2 ** (failures - 1)) * (0.5 + random.random() / 2)
                log.warning(
                    "list/watch failed, retrying",
                    extra={"resource": self.resource, "error": kube.describe_error(exc), "retry_in_s": round(delay, 2)},
                )
                self._on_restart("error")
                await self._sleep(delay)

    async def _list(self) -> str:
        items: list[dict[str, Any]] = []
        token = None
        while True:
            kwargs: dict[str, Any] = {"limit": LIST_PAGE}
            if token:
                kwargs["_continue"] = token
            body = await self._call(**kwargs, _request_timeout=(self._connect_timeout, 60))
            data = orjson.loads(body)
            items.extend(data.get("items") or [])
            meta = data.get("metadata") or {}
            token = meta.get("continue")
            if not token:
                break
        self._handler.replace(items)
        version = meta.get("resourceVersion")
        if not version:
            raise ValueError(f"{self.resource} list carries no resourceVersion")
        if self._progress is not None:
            self._progress.advance(version)
        return version

    async def _call(self, **kwargs: Any) -> bytes:
        response = await self._list_func(_preload_content=False, **kwargs)
        try:
            data = await response.read()
        finally:
            response.release()
        _check(response.status, data)
        return data

    async def _watch(self) -> None:
        response = await self._list_func(
            watch=True,
            resource_version=self.resource_version,
            allow_watch_bookmarks=True,
            timeout_seconds=self._timeout_seconds,
            _preload_content=False,
            # The server ends the stream after timeout_seconds; a silent peer is dead.
            _request_timeout=(self._connect_timeout, self._timeout_seconds + 30),
        )
        try:
            if response.status != 200:
                _check(response.status, await response.read())
            buffer = b""
            async for chunk in response.content.iter_any():
                buffer += chunk
                *lines, buffer = buffer.split(b"\n")
                for line in lines:
                    if line.strip():
                        self._event(line)
            if buffer.strip():
                self._event(buffer)
        finally:
            response.release()

    def _event(self, line: bytes) -> None:
        event = orjson.loads(line)
        kind = event.get("type")
        obj = event.get("object") or {}
        if kind == "ERROR":
            code = obj.get("code")
            message = f"{obj.get('reason')}: {obj.get('message')}"
            if code == 410:
                raise Gone(message)
            raise ApiException(status=code or 0, reason=message)
        version = (obj.get("metadata") or {}).get("resourceVersion")
        if kind in ("ADDED", "MODIFIED", "DELETED"):
            self._handler.apply(kind, obj)
        elif kind != "BOOKMARK":
            log.warning("unknown watch event type", extra={"resource": self.resource, "type": kind})
            return
        if version:
            self.resource_version = version
            if self._progress is not None:
                self._progress.advance(version)


def _check(status: int, body: bytes) -> None:
    if 200 <= status <= 299:
        return
    try:
        message = orjson.loads(body).get("message", "")
    except (ValueError, AttributeError):
        message = body[:200].decode(errors="replace")
    if status == 410:
        raise Gone(message)
    raise ApiException(status=status, reason=message)
