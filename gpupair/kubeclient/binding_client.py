"""The Binding POST on a small HTTP/1.1 client of its own: the one API call on kube-scheduler's
path for every pod the extender binds.

kube-scheduler waits for the bind answer, and the extender serves every verb from one event
loop, so what a Binding costs in CPU is taken from the next pod's filter. Through aiohttp's
ClientSession a Binding cost 200-250 us of CPU (a request and a response object, a task for
the body, timers, header multidicts); here it costs 45-50 us against the same server, and the
extender's CPU per pod fell by a fifth (bench/request_path.py, docs/extender.md).

What stays the API client's: the server, its TLS settings (CA, client certificate, server
name, verification) and the bearer token, asked of the client's configuration before each
request so a refreshed token is used. The response is parsed by httptools (llhttp, the parser
uvicorn and Node.js use), which handles Content-Length and chunked bodies and keep-alive.

Connections are kept alive and reused one request at a time, at most ``limit`` open (the API
client's pool size, capped at ``BURST_CONNECTIONS``). One the server closed while idle is dropped, never reused; one that fails
or is cancelled mid-request is closed, never returned to the pool. A Binding is not retried:
a request the server may have applied is not sent twice (kube-scheduler retries the pod).

A proxy between the extender and the API server (HTTPS_PROXY, kubeconfig proxy-url) is left to
the API client's aiohttp session: ``for_api`` returns None for it.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Mapping
from typing import Any
from urllib.parse import quote

import httptools
import orjson
from aiohttp.helpers import get_env_proxy_for_url
from kubernetes_asyncio import client as k8s
from kubernetes_asyncio.client.exceptions import ApiException
from yarl import URL


# Connections open at most, whatever the API client's pool allows (100 by default). In a burst
# kube-scheduler runs every pod's binding cycle at once; with a slot each, the extender opened
# up to 100 TLS connections, and their handshakes cost the extender and the apiserver more CPU
# than queueing the Bindings on a few kept-alive ones (bench/real_scheduler.py: the extender's
# CPU per pod fell by a fifth, the apiserver's too). kube-scheduler's own Bindings share one
# HTTP/2 connection.
BURST_CONNECTIONS = 8


class BindingConnectionError(ConnectionError):
    """The connection failed before a whole response came: the Binding's fate is unknown to us."""


class _BindingConnection(asyncio.Protocol):
    """One keep-alive connection: one request at a time, its response parsed as it arrives."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpResponseParser(self)
        self.waiter: asyncio.Future | None = None
        self.closed = False
        self.reusable = False
        self._status = 0
        self._reason = ""
        self._headers: dict[str, str] = {}
        self._body: list[bytes] = []

    # ---- asyncio.Protocol

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        if self.waiter is None:  # bytes nobody asked for: the stream is out of step
            self.close()
            return
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError as exc:
            self._fail(BindingConnectionError(f"unparsable response from the API server: {exc}"))
            self.close()

    def eof_received(self) -> bool:
        return False  # the transport closes itself; connection_lost follows

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self._fail(BindingConnectionError("the API server closed the connection before answering"
                                          + (f" ({exc})" if exc else "")))

    # ---- httptools callbacks

    def on_message_begin(self) -> None:
        self._headers, self._body = {}, []

    def on_status(self, status: bytes) -> None:
        self._reason = status.decode("latin-1")

    def on_header(self, name: bytes, value: bytes) -> None:
        self._headers[name.decode("latin-1")] = value.decode("latin-1")

    def on_body(self, body: bytes) -> None:
        self._body.append(body)

    def on_message_complete(self) -> None:
        self._status = self.parser.get_status_code()
        self.reusable = self.parser.should_keep_alive()
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_result((self._status, self._reason, self._headers, b"".join(self._body)))
        else:  # a response nobody asked for: the stream is out of step, so it is not reused
            self.reusable = False

    # ---- the client's side

    async def send(self, request: bytes) -> tuple[int, str, dict[str, str], bytes]:
        assert self.transport is not None and self.waiter is None
        self.reusable = False
        self.waiter = asyncio.get_running_loop().create_future()
        try:
            self.transport.write(request)
            return await self.waiter
        finally:
            self.waiter = None

    def close(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.close()

    def _fail(self, exc: Exception) -> None:
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_exception(exc)


class BindingClient:
    """POST pods/{name}/binding for ``api``'s server and credentials; see the module docstring."""

    def __init__(self, api: k8s.ApiClient, limit: int | None = None):
        config = api.configuration
        url = URL(config.host)
        if url.scheme not in ("http", "https") or not url.host:
            raise ValueError(f"not an http(s) API server address: {config.host!r}")
        self._api = api
        self._host, self._port = url.host, url.port or (443 if url.scheme == "https" else 80)
        self._ssl = _ssl_context(config) if url.scheme == "https" else None
        self._server_hostname = (config.tls_server_name or None) if self._ssl is not None else None
        self._prefix = url.path.rstrip("/")
        host = f"[{url.host}]" if ":" in url.host else url.host
        self._authority = host if url.port is None or url.is_default_port() else f"{host}:{url.port}"
        if limit is None:
            limit = min(config.connection_pool_maxsize or BURST_CONNECTIONS, BURST_CONNECTIONS)
        self._slots = asyncio.Semaphore(limit) if limit else None
        self._idle: list[_BindingConnection] = []
        self._open: set[_BindingConnection] = set()

    @classmethod
    def for_api(cls, api: k8s.ApiClient) -> "BindingClient | None":
        """A client for ``api``'s server, or None where a proxy stands between (left to aiohttp)."""
        rest = api.rest_client
        if rest.proxy:
            return None
        if getattr(rest.pool_manager, "trust_env", False):  # aiohttp reads *_PROXY per request
            try:
                get_env_proxy_for_url(URL(api.configuration.host))
            except LookupError:
                pass  # none names this server
            else:
                return None
        return cls(api)

    async def bind(self, namespace: str, name: str, node: str, uid: str | None = None,
                   annotations: Mapping[str, str] | None = None) -> None:
        """Create the Binding (see gpupair.kubeclient.kube.bind_pod); an API error raises ApiException as
        the generated client does, a broken connection BindingConnectionError."""
        body = orjson.dumps(binding(namespace, name, node, uid, annotations))
        request = await self._request(self._prefix + binding_path(namespace, name), body)
        if self._slots is None:
            status, reason, headers, data = await self._exchange(request)
        else:
            async with self._slots:
                status, reason, headers, data = await self._exchange(request)
        if not 200 <= status <= 299:
            exc = ApiException(status=status, reason=reason)
            exc.headers, exc.body = headers, data.decode(errors="replace")
            raise exc

    async def close(self) -> None:
        for conn in list(self._open):
            conn.close()
        self._open.clear()
        self._idle.clear()

    # ---- internals

    async def _request(self, path: str, body: bytes) -> bytes:
        api = self._api
        headers = {**api.default_headers, "Accept": "application/json", "Content-Type": "application/json"}
        auth = (await api.configuration.auth_settings()).get("BearerToken")
        if auth and auth.get("value"):
            headers[auth["key"]] = auth["value"]
        lines = [f"POST {path} HTTP/1.1", f"Host: {self._authority}"]
        for key, value in headers.items():
            if key.lower() in ("host", "content-length"):
                continue  # this request's own
            text = f"{key}: {value}"
            if "\r" in text or "\n" in text:  # a header injected into the request: never sent
                raise ValueError(f"refusing to send header {key!r}: a line break in it")
            lines.append(text)
        lines.append(f"Content-Length: {len(body)}")
        return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body

    async def _exchange(self, request: bytes) -> tuple[int, str, dict[str, str], bytes]:
        conn = self._take_idle() or await self._connect()
        try:
            answer = await conn.send(request)
        except BaseException:  # failed, timed out or cancelled mid-request: the stream is unknown
            self._drop(conn)
            raise
        if conn.reusable and not conn.closed:
            self._idle.append(conn)
        else:
            self._drop(conn)
        return answer

    def _take_idle(self) -> _BindingConnection | None:
        while self._idle:
            conn = self._idle.pop()
            if not conn.closed:
                return conn
            self._open.discard(conn)
        return None

    async def _connect(self) -> _BindingConnection:
        loop = asyncio.get_running_loop()
        kwargs: dict[str, Any] = {}
        if self._ssl is not None:
            kwargs = {"ssl": self._ssl, "server_hostname": self._server_hostname or self._host}
        try:
            _, conn = await loop.create_connection(_BindingConnection, self._host, self._port, **kwargs)
        except ssl.SSLError:
            raise  # a certificate problem says so itself
        except OSError as exc:
            raise BindingConnectionError(f"cannot connect to the API server at {self._authority}: "
                                         f"{exc.strerror or exc}") from None
        self._open.add(conn)
        return conn

    def _drop(self, conn: _BindingConnection) -> None:
        conn.close()
        self._open.discard(conn)


def binding(namespace: str, name: str, node: str, uid: str | None = None,
            annotations: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The v1 Binding of pod ``namespace/name`` to ``node``: ``uid`` makes the apiserver refuse a
    same-named newer pod; ``annotations`` are merged into the pod in the same update."""
    metadata: dict[str, Any] = {"name": name, "namespace": namespace}
    if uid:
        metadata["uid"] = uid
    if annotations:
        metadata["annotations"] = dict(annotations)
    return {"apiVersion": "v1", "kind": "Binding", "metadata": metadata,
            "target": {"apiVersion": "v1", "kind": "Node", "name": node}}


def binding_path(namespace: str, name: str) -> str:
    return f"/api/v1/namespaces/{quote(namespace, safe='')}/pods/{quote(name, safe='')}/binding"


def _ssl_context(config: k8s.Configuration) -> ssl.SSLContext:
    """The TLS settings kubernetes-asyncio's REST client builds from the same configuration."""
    context = ssl.create_default_context(cafile=config.ssl_ca_cert)
    if config.cert_file:
        context.load_cert_chain(config.cert_file, keyfile=config.key_file)
    if not config.verify_ssl:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    if config.disable_strict_ssl_verification:
        context.verify_flags &= ~ssl.VERIFY_X509_STRICT
    return context
