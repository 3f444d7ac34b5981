"""The extender's verbs on aiohttp's low-level server (``web.Server``): no Application, router or
middlewares, one lookup by exact method and path.

What kube-scheduler and operators rely on, and whose it is:
- exact paths, each with its method; HEAD answers every GET without the body (aiohttp sends a
  HEAD no body);
- keep-alive, HTTP/1.0 and ``Connection: close``, pipelining, chunked bodies, and a plain 400 for
  what does not parse: aiohttp's;
- a body over ``max_body`` reaches its handler unread, with ``Request.too_large`` set, so the verb
  answers in its own error shape; the connection closes after that answer (``lingering_time`` 0:
  the rest of the body is never read);
- ``Expect: 100-continue``, answered here as aiohttp's router would (the low-level server has
  none), and only for a body within the limit;
- connections idle for ``idle_timeout`` closed (75 s, as ``web.run_app``; Go's client keeps idle
  connections 90 s and reconnects);
- TLS, the listen backlog, the drain on SIGTERM and "cannot listen": gpupair.command.service's,
  as for every gpupair server; /healthz, /readyz and /metrics: its ``health_handlers``;
- access lines at debug only: kube-scheduler calls three verbs per pod, and the request metrics
  count them.

A handler is ``async (Request) -> Response`` and answers every failure in its protocol's shape
by contract; one that raises anyway is logged and answered 500, the connection kept.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass

from aiohttp import hdrs, web

from gpupair.command import service

log = logging.getLogger("gpupair.http")

IDLE_TIMEOUT = 75.0


@dataclass(slots=True)
class Request:
    method: str
    path: str
    headers: Mapping[str, str]  # as received; names case-insensitive
    body: bytes = b""
    too_large: str = ""  # why the body was not read, when it was over the limit


@dataclass(slots=True)
class Response:
    status: int = 200
    body: bytes = b""
    content_type: str = "application/json"
    headers: tuple[tuple[str, str], ...] = ()


Handler = Callable[[Request], Awaitable[Response]]
Probe = Callable[[web.BaseRequest], Awaitable[web.StreamResponse]]  # an aiohttp handler, as service's


class HttpServer:
    """``routes`` ((method, path) -> handler) and ``probes`` (GET path -> aiohttp handler) on one
    ``web.Server``; ``start``/``close`` for tests, ``web_server`` for gpupair.command.service.serve."""

    def __init__(self, routes: Mapping[tuple[str, str], Handler], max_body: int, *,
                 probes: Mapping[str, Probe] | None = None, idle_timeout: float = IDLE_TIMEOUT) -> None:
        self.max_body = max_body
        self.idle_timeout = idle_timeout
        self._routes: dict[tuple[str, str], Handler] = dict(routes)
        self._probes: dict[tuple[str, str], Probe] = {}
        for path, probe in (probes or {}).items():
            self._probes[("GET", path)] = self._probes[("HEAD", path)] = probe
        for (method, path), handler in list(self._routes.items()):
            if method == "GET":
                self._routes.setdefault(("HEAD", path), handler)
        self._allowed: dict[str, list[str]] = defaultdict(list)
        for method, path in [*self._routes, *self._probes]:
            self._allowed[path].append(method)
        self._runner: web.BaseRunner | None = None

    def web_server(self) -> web.Server:
        """A ``web.Server`` for this server's routes (made inside the running loop)."""
        return web.Server(self._dispatch, keepalive_timeout=self.idle_timeout, lingering_time=0,
                          access_log_class=service.access_logger(every_request_at_debug=True),
                          access_log=logging.getLogger("gpupair.access"))

    async def start(self, host: str, port: int, *, ssl=None, shutdown_timeout: float = 10.0) -> None:
        self._runner = service.app_runner(self.web_server(), shutdown_timeout)
        await service.listen(self._runner, host, port, ssl)

    @property
    def port(self) -> int:
        assert self._runner is not None
        return self._runner.addresses[0][1]

    async def close(self) -> None:
        """Stop listening, let the requests in flight finish (up to ``shutdown_timeout``), close the rest."""
        if self._runner is not None:
            await self._runner.cleanup()

    async def _dispatch(self, request: web.BaseRequest) -> web.StreamResponse:
        key = (request.method, request.path)
        handler = self._routes.get(key)
        if handler is None:
            probe = self._probes.get(key)
            if probe is not None:
                return await probe(request)
            allowed = self._allowed.get(request.path)
            if allowed:
                return web.Response(status=405, text="method not allowed", headers={"Allow": ", ".join(sorted(allowed))})
            return web.Response(status=404, text="not found")
        body, too_large = await self._read(request)
        try:
            answer = await handler(Request(request.method, request.path, request.headers, body, too_large))
        except Exception:  # noqa: BLE001 - the handler's contract is to answer; log, never crash
            log.exception("handler raised", extra={"method": request.method, "path": request.path})
            answer = Response(500, b"internal error", "text/plain")
        response = web.Response(status=answer.status, body=answer.body,
                                headers={hdrs.CONTENT_TYPE: answer.content_type, **dict(answer.headers)})
        if too_large:
            response.force_close()
        return response

    async def _read(self, request: web.BaseRequest) -> tuple[bytes, str]:
        """The body, or why it was left unread: over ``max_body``, by its Content-Length or as read."""
        length = request.content_length
        if length is not None and length > self.max_body:
            return b"", f"Content-Length {length} is over the limit of {self.max_body} bytes"
        if request.headers.get(hdrs.EXPECT, "").lower() == "100-continue":
            await request.writer.write(b"HTTP/%d.%d 100 Continue\r\n\r\n" % request.version)
        if length is not None:  # within the limit: read whole
            return await request.content.read(), ""
        chunks, size = [], 0
        while chunk := await request.content.readany():  # chunked: counted as it comes
            size += len(chunk)
            if size > self.max_body:
                return b"", f"the body is over the limit of {self.max_body} bytes"
            chunks.append(chunk)
        return b"".join(chunks), ""
