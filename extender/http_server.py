"""The extender's HTTP/1.1 server: an asyncio Protocol on httptools, no more than kube-scheduler's
calls need.

kube-scheduler calls the extender three times per pod, one pod at a time, on the path every pod
waits for. On the real scheduler aiohttp's per-request objects (request, response, headers
multidict, router, access-log hooks) were about a third of the extender's CPU per pod
(docs/extender.md, "On the real kube-scheduler"), so the verbs are served here instead, on the
parser aiohttp and uvicorn use:

- exact paths, each with its method (HEAD answers every GET without the body);
- keep-alive, HTTP/1.0 and ``Connection: close``; pipelined requests answered in order;
- bodies sized or chunked, up to ``max_body``. A larger one reaches its handler at once with
  ``Request.too_large`` set, so the verb answers in its own error shape, and the connection is
  closed after that answer (the rest of the body is never read);
- ``Expect: 100-continue``;
- TLS through the loop's own SSL transport (gpupair.command.tls's reloading context, as before);
- a request httptools refuses, or headers over 64 KiB: a plain 400 or 431, then close;
- connections idle for ``idle_timeout`` closed (aiohttp's keep-alive default, 75 s; Go's
  client keeps idle connections 90 s and reconnects);
- ``close`` stops listening, lets the requests in flight finish (a bind is an API write) up to
  a timeout, and closes the rest.

A handler is ``async (Request) -> Response`` and never raises by contract (the extender's
handlers answer every failure in the protocol's shape); one that does is logged and answered
500, the connection kept.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from email.utils import formatdate
from http import HTTPStatus

import httptools

log = logging.getLogger("gpupair.http")
access = logging.getLogger("gpupair.access")

MAX_HEADER_BYTES = 64 * 1024  # names and values of one request; Go's client sends a few hundred bytes
IDLE_TIMEOUT = 75.0
MAX_QUEUED = 16  # pipelined requests waiting on one connection before it stops reading
# The only headers anything here reads; the others are counted against MAX_HEADER_BYTES and
# dropped undecoded (kube-scheduler sends five per request, three requests per pod).
READ_HEADERS = {b"content-length": "content-length", b"expect": "expect"}


@dataclass(slots=True)
class Request:
    method: str
    path: str
    headers: dict[str, str]  # those the server reads (READ_HEADERS), names lower-case; the last value wins
    body: bytes = b""
    too_large: str = ""  # why the body was not read, when it was over the limit


@dataclass(slots=True)
class Response:
    status: int = 200
    body: bytes = b""
    content_type: str = "application/json"
    headers: tuple[tuple[str, str], ...] = ()


Handler = Callable[[Request], Awaitable[Response]]


class _Date:
    """The Date header, formatted once a second."""

    def __init__(self) -> None:
        self._second = -1
        self._value = b""

    def __call__(self) -> bytes:
        now = int(time.time())
        if now != self._second:
            self._second, self._value = now, formatdate(now, usegmt=True).encode()
        return self._value


_REASONS = {status.value: status.phrase.encode() for status in HTTPStatus}


@dataclass
class HttpServer:
    """Routes and limits; ``protocol`` makes one connection's protocol for ``loop.create_server``."""

    routes: dict[tuple[str, str], Handler]  # (method, path) -> handler
    max_body: int
    idle_timeout: float = IDLE_TIMEOUT
    connections: set["_ServerConnection"] = field(default_factory=set)
    date: _Date = field(default_factory=_Date)
    _listener: asyncio.AbstractServer | None = None
    _sweeper: asyncio.Task | None = None

    def __post_init__(self) -> None:
        for (method, path), handler in list(self.routes.items()):
            if method == "GET":
                self.routes.setdefault(("HEAD", path), handler)
        self._methods: dict[str, list[str]] = collections.defaultdict(list)
        for method, path in self.routes:
            self._methods[path].append(method)

    def protocol(self) -> "_ServerConnection":
        return _ServerConnection(self)

    def route(self, request: Request) -> Handler | Response:
        handler = self.routes.get((request.method, request.path))
        if handler is not None:
            return handler
        allowed = self._methods.get(request.path)
        if allowed:
            return Response(405, b"method not allowed", "text/plain", (("Allow", ", ".join(sorted(allowed))),))
        return Response(404, b"not found", "text/plain")

    async def start(self, host: str, port: int, *, ssl=None, backlog: int = 1024) -> None:
        loop = asyncio.get_running_loop()
        self._listener = await loop.create_server(self.protocol, host, port, ssl=ssl, backlog=backlog)
        self._sweeper = loop.create_task(self._sweep())

    @property
    def port(self) -> int:
        assert self._listener is not None
        return self._listener.sockets[0].getsockname()[1]

    async def close(self, timeout: float = 10.0) -> None:
        """Stop listening, close idle connections, wait up to ``timeout`` for requests in flight."""
        if self._sweeper is not None:
            self._sweeper.cancel()
        if self._listener is not None:
            self._listener.close()
        for conn in list(self.connections):
            conn.closing = True
            if not conn.busy:
                conn.close()
        deadline = time.monotonic() + timeout
        while any(conn.busy for conn in self.connections) and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        for conn in list(self.connections):
            conn.close()
        if self._listener is not None:
            await self._listener.wait_closed()

    async def _sweep(self) -> None:
        while True:
            await asyncio.sleep(min(15.0, self.idle_timeout))
            stale = time.monotonic() - self.idle_timeout
            for conn in list(self.connections):
                if not conn.busy and conn.last_seen < stale:
                    conn.close()


class _ServerConnection(asyncio.Protocol):
    """One client connection: httptools calls the ``on_*`` methods while ``data_received`` feeds it."""

    def __init__(self, server: HttpServer) -> None:
        self.server = server
        self.parser = httptools.HttpRequestParser(self)
        self.transport: asyncio.Transport | None = None
        self.queue: collections.deque[tuple[Request, bool]] = collections.deque()
        self.busy = False  # a handler is running for this connection
        self.closing = False  # answer what is in flight, then close
        self.refusing = False  # a body over the limit: read nothing more
        self.paused = False
        self.last_seen = time.monotonic()
        self._url = b""
        self._headers: dict[str, str] = {}
        self._header_bytes = 0
        self._body: list[bytes] = []
        self._size = 0
        self._started = 0.0

    # ------------------------------------------------------------------ transport
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self.server.connections.add(self)

    def connection_lost(self, exc: Exception | None) -> None:
        self.server.connections.discard(self)
        self.transport = None
        self.queue.clear()

    def data_received(self, data: bytes) -> None:
        self.last_seen = time.monotonic()
        if self.refusing:
            return
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            self._refuse(400, b"upgrade not supported")
        except httptools.HttpParserError as exc:
            if not self.refusing:
                self._refuse(431 if self._header_bytes > MAX_HEADER_BYTES else 400, f"bad request: {exc}".encode())

    def close(self) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.close()

    # ------------------------------------------------------------------ parser callbacks
    def on_message_begin(self) -> None:
        self._url, self._headers, self._header_bytes = b"", {}, 0
        self._body, self._size = [], 0
        self._started = time.perf_counter()

    def on_url(self, url: bytes) -> None:
        self._url += url
        self._header_bytes += len(url)

    def on_header(self, name: bytes, value: bytes) -> None:
        self._header_bytes += len(name) + len(value)
        if self._header_bytes > MAX_HEADER_BYTES:
            raise httptools.HttpParserError("headers too large")  # data_received answers 431
        key = READ_HEADERS.get(name.lower())
        if key is not None:
            self._headers[key] = value.decode("latin-1")

    def on_headers_complete(self) -> None:
        length = self._headers.get("content-length")
        if length is not None and length.isdigit() and int(length) > self.server.max_body:
            self._too_large(f"Content-Length {length} is over the limit of {self.server.max_body} bytes")
            return
        if self._headers.get("expect", "").lower() == "100-continue" and self.transport is not None:
            self.transport.write(b"HTTP/1.1 100 Continue\r\n\r\n")

    def on_body(self, body: bytes) -> None:
        if self.refusing:
            return
        self._size += len(body)
        if self._size > self.server.max_body:
            self._too_large(f"the body is over the limit of {self.server.max_body} bytes")
            return
        self._body.append(body)

    def on_message_complete(self) -> None:
        if self.refusing:
            return
        body = self._body[0] if len(self._body) == 1 else b"".join(self._body)
        self._body = []
        self._enqueue(self._request(body), self.parser.should_keep_alive())

    # ------------------------------------------------------------------ requests
    def _request(self, body: bytes, too_large: str = "") -> Request:
        url = self._url
        if url.startswith(b"/") and b"?" not in url and b"#" not in url:
            path = url.decode("latin-1")  # what kube-scheduler sends: no query to split off
        else:
            try:
                path = (httptools.parse_url(url).path or b"/").decode("latin-1")
            except httptools.HttpParserInvalidURLError:
                path = url.decode("latin-1")
        return Request(self.parser.get_method().decode("latin-1"), path, self._headers, body, too_large)

    def _too_large(self, why: str) -> None:
        """Answer now, through the verb's own error shape, and read nothing more."""
        self.refusing = True
        self._body = []
        self._enqueue(self._request(b"", why), keep_alive=False)

    def _refuse(self, status: int, text: bytes) -> None:
        self.refusing = True
        self.queue.clear()
        if not self.busy:
            self._write(Response(status, text, "text/plain"), keep_alive=False, head=False)
        else:
            self.closing = True

    def _enqueue(self, request: Request, keep_alive: bool) -> None:
        self.queue.append((request, keep_alive))
        if len(self.queue) > MAX_QUEUED and not self.paused and self.transport is not None:
            self.transport.pause_reading()
            self.paused = True
        if not self.busy:
            self._next()

    def _next(self) -> None:
        while self.queue and not self.busy:
            request, keep_alive = self.queue.popleft()
            if self.paused and len(self.queue) <= MAX_QUEUED // 2 and self.transport is not None:
                self.transport.resume_reading()
                self.paused = False
            routed = self.server.route(request)
            if isinstance(routed, Response):
                self._finish(request, routed, keep_alive)
                continue
            self.busy = True
            asyncio.get_running_loop().create_task(self._run(routed, request, keep_alive))

    async def _run(self, handler: Handler, request: Request, keep_alive: bool) -> None:
        try:
            response = await handler(request)
        except Exception:  # noqa: BLE001 - the handler's contract is to answer; log, never crash
            log.exception("handler raised", extra={"method": request.method, "path": request.path})
            response = Response(500, b"internal error", "text/plain")
        self.busy = False
        self._finish(request, response, keep_alive)
        self._next()

    def _finish(self, request: Request, response: Response, keep_alive: bool) -> None:
        keep_alive = keep_alive and not self.closing
        self._write(response, keep_alive, head=request.method == "HEAD")
        if access.isEnabledFor(logging.DEBUG):
            access.debug("request", extra={"method": request.method, "path": request.path,
                                           "status": response.status,
                                           "seconds": round(time.perf_counter() - self._started, 4)})

    def _write(self, response: Response, keep_alive: bool, head: bool) -> None:
        transport = self.transport
        if transport is None or transport.is_closing():
            return
        head_lines = [b"HTTP/1.1 %d %s\r\nDate: %s\r\nContent-Type: %s\r\nContent-Length: %d\r\n" % (
            response.status, _REASONS.get(response.status, b""), self.server.date(),
            response.content_type.encode("latin-1"), len(response.body))]
        for name, value in response.headers:
            head_lines.append(f"{name}: {value}\r\n".encode("latin-1"))
        if not keep_alive:
            head_lines.append(b"Connection: close\r\n")
        head_lines.append(b"\r\n")
        transport.write(b"".join(head_lines) + (b"" if head else response.body))
        if not keep_alive:
            transport.close()


async def serve_http(server: HttpServer, host: str, port: int, ssl_context=None, shutdown_timeout: float = 10.0) -> None:
    """gpupair.command.service's serve loop for an HttpServer: listen (a ``Failure`` if it cannot),
    serve until SIGTERM or SIGINT, then drain; SIGINT raises KeyboardInterrupt once drained."""
    from gpupair.command.service import LISTEN_BACKLOG, serve_until_stopped

    await serve_until_stopped(lambda: server.start(host, port, ssl=ssl_context, backlog=LISTEN_BACKLOG),
                              lambda: server.close(shutdown_timeout), host, port)
