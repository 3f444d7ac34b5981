"""extender/http_server.py (the verbs on aiohttp's low-level server) over real loopback sockets,
spoken to in raw bytes where the bytes are the point, as kube-scheduler's client would."""

from __future__ import annotations

import asyncio
import logging
import shutil
import ssl
import subprocess

import pytest
from prometheus_client import CollectorRegistry, Counter

from gpupair.command.service import LISTEN_BACKLOG, health_handlers
from gpupair.extender.http_server import HttpServer, Request, Response
from tests.tls_support import serving_tls

MAX_BODY = 1024


async def _echo(request: Request) -> Response:
    if request.too_large:
        return Response(400, b'{"Error":"too large: %s"}' % request.too_large.encode())
    return Response(200, b"%s %d" % (request.path.encode(), len(request.body)), "text/plain", (("X-Verb", "echo"),))


async def _slow(request: Request) -> Response:
    await asyncio.sleep(0.2)
    return Response(200, b"slow", "text/plain")


async def _raises(request: Request) -> Response:
    raise RuntimeError("boom")


READY = [True]


def _server(**kwargs) -> HttpServer:
    registry = CollectorRegistry()
    Counter("gpupair_test_total", "a metric to scrape", registry=registry).inc()
    return HttpServer({("POST", "/echo"): _echo, ("POST", "/slow"): _slow, ("GET", "/raises"): _raises},
                      MAX_BODY, probes=health_handlers(registry, lambda: READY[0]), **kwargs)


@pytest.fixture
async def server():
    served = _server()
    await served.start("127.0.0.1", 0, shutdown_timeout=2.0)
    yield served
    await served.close()


async def _open(server: HttpServer, **kwargs) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    return await asyncio.open_connection("127.0.0.1", server.port, **kwargs)


async def _exchange(server: HttpServer, data: bytes, answers: int = 1) -> list[tuple[int, dict, bytes]]:
    reader, writer = await _open(server)
    writer.write(data)
    out = [await _response(reader) for _ in range(answers)]
    writer.close()
    return out


async def _response(reader: asyncio.StreamReader, head_only: bool = False) -> tuple[int, dict, bytes]:
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    headers = {k.lower(): v.strip() for k, v in (line.split(":", 1) for line in lines[1:] if line)}
    body = b"" if head_only else await reader.readexactly(int(headers.get("content-length", "0")))
    return status, headers, body


async def _closed(reader: asyncio.StreamReader) -> bool:
    try:
        return await asyncio.wait_for(reader.read(), 5) == b""
    except ConnectionResetError:
        return True


def _post(path: str, body: bytes, extra: bytes = b"") -> bytes:
    return b"POST %s HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n%s\r\n%s" % (path.encode(), len(body), extra, body)


async def test_keep_alive_answers_every_request_on_one_connection(server):
    answers = await _exchange(server, _post("/echo", b"abc") + _post("/echo", b"defgh"), answers=2)
    assert [(s, b) for s, _, b in answers] == [(200, b"/echo 3"), (200, b"/echo 5")]
    headers = answers[0][1]
    assert headers["content-type"] == "text/plain" and headers["x-verb"] == "echo"
    assert headers.get("connection", "keep-alive").lower() == "keep-alive"


async def test_pipelined_requests_are_answered_in_order(server):
    answers = await _exchange(server, _post("/slow", b"") + _post("/echo", b"x"), answers=2)
    assert [b for _, _, b in answers] == [b"slow", b"/echo 1"]


async def test_chunked_body_and_query_string(server):
    data = (b"POST /echo?timeout=5s HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
            b"3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n")
    [(status, _, body)] = await _exchange(server, data)
    assert (status, body) == (200, b"/echo 5")


async def test_a_sized_body_over_the_limit_reaches_the_handler_unread_then_the_connection_closes(server):
    reader, writer = await _open(server)
    writer.write(b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 5000000\r\n\r\n" + b"x" * 2000)
    status, headers, body = await _response(reader)
    assert status == 400 and headers["connection"].lower() == "close"
    assert body == b'{"Error":"too large: Content-Length 5000000 is over the limit of 1024 bytes"}'
    assert await _closed(reader)  # without the other 4,998,000 bytes
    writer.close()


async def test_a_chunked_body_over_the_limit_is_cut_off_as_it_comes(server):
    reader, writer = await _open(server)
    writer.write(b"POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
                 + b"400\r\n" + b"x" * 1024 + b"\r\n" + b"1\r\ny\r\n")
    status, headers, body = await _response(reader)
    assert (status, headers["connection"].lower()) == (400, "close")
    assert b"the body is over the limit of 1024 bytes" in body
    assert await _closed(reader)
    writer.close()


async def test_exact_paths_with_their_methods_and_head_answers_get_without_the_body(server):
    data = (b"GET /nope HTTP/1.1\r\nHost: x\r\n\r\n" + b"GET /echo HTTP/1.1\r\nHost: x\r\n\r\n"
            + b"GET /echo/ HTTP/1.1\r\nHost: x\r\n\r\n" + b"HEAD /healthz HTTP/1.1\r\nHost: x\r\n\r\n"
            + b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
    reader, writer = await _open(server)
    writer.write(data)
    missing, wrong, slash = await _response(reader), await _response(reader), await _response(reader)
    head = await _response(reader, head_only=True)
    get = await _response(reader)  # read right after the HEAD's head: no body came between
    writer.close()
    assert missing[0] == 404 and slash[0] == 404
    assert wrong[0] == 405 and wrong[1]["allow"] == "POST"
    assert head[0] == 200 and head[1]["content-length"] == "2"
    assert get[:1] == (200,) and get[2] == b"ok"


async def test_health_readiness_and_metrics(server):
    [(healthz, _, ok), (metrics, headers, page)] = await _exchange(
        server, b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\nGET /metrics HTTP/1.1\r\nHost: x\r\n\r\n", answers=2)
    assert (healthz, ok) == (200, b"ok")
    assert metrics == 200 and headers["content-type"].startswith("text/plain") and b"gpupair_test_total 1.0" in page
    READY[0] = False
    try:
        [(readyz, _, body)] = await _exchange(server, b"GET /readyz HTTP/1.1\r\nHost: x\r\n\r\n")
    finally:
        READY[0] = True
    assert (readyz, body) == (503, b"not ready")
    assert (await _exchange(server, b"GET /readyz HTTP/1.1\r\nHost: x\r\n\r\n"))[0][0] == 200


async def test_http_1_0_and_connection_close_are_honoured(server):
    reader, writer = await _open(server)
    writer.write(b"POST /echo HTTP/1.0\r\nContent-Length: 1\r\n\r\nx")
    status, _, body = await _response(reader)
    assert (status, body) == (200, b"/echo 1")
    assert await _closed(reader)
    writer.close()
    reader, writer = await _open(server)
    writer.write(_post("/echo", b"", b"Connection: close\r\n"))
    status, headers, _ = await _response(reader)
    assert status == 200 and headers["connection"].lower() == "close"
    assert await _closed(reader)
    writer.close()


async def test_a_request_that_does_not_parse_gets_400_and_the_connection_closes(server):
    for garbage in (b"NOT HTTP AT ALL\r\n\r\n",
                    b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nx",
                    b"POST /echo HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 70_000 + b"\r\n\r\n"):
        reader, writer = await _open(server)
        writer.write(garbage)
        status, _, _ = await _response(reader)
        assert status == 400, garbage[:40]
        assert await _closed(reader)
        writer.close()


async def test_a_handler_that_raises_is_answered_500_and_the_connection_kept(server, caplog):
    answers = await _exchange(server, b"GET /raises HTTP/1.1\r\nHost: x\r\n\r\n" + _post("/echo", b"ok"), answers=2)
    assert [(s, b) for s, _, b in answers] == [(500, b"internal error"), (200, b"/echo 2")]
    assert "handler raised" in caplog.text


async def test_expect_100_continue_within_the_limit_and_not_over_it(server):
    reader, writer = await _open(server)
    writer.write(b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nExpect: 100-continue\r\n\r\n")
    assert await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5) == b"HTTP/1.1 100 Continue\r\n\r\n"
    writer.write(b"hi")
    assert (await _response(reader))[2] == b"/echo 2"
    writer.write(b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 4096\r\nExpect: 100-continue\r\n\r\n")
    status, _, body = await _response(reader)  # the verb's answer at once, no 100 before it
    assert status == 400 and b"Content-Length 4096" in body
    assert await _closed(reader)
    writer.close()


async def test_an_idle_keep_alive_connection_is_closed_after_the_idle_timeout():
    assert HttpServer({}, 1).idle_timeout == 75.0  # Go's client keeps its idle ones 90 s, and reconnects
    served = _server(idle_timeout=0.3)
    await served.start("127.0.0.1", 0)
    try:
        reader, writer = await _open(served)
        writer.write(_post("/echo", b"a"))
        assert (await _response(reader))[0] == 200
        await asyncio.sleep(0.1)
        writer.write(_post("/echo", b"b"))  # kept alive while in use
        assert (await _response(reader))[2] == b"/echo 1"
        assert await _closed(reader)  # then closed by the server, once idle
        writer.close()
    finally:
        await served.close()


@pytest.mark.skipif(not shutil.which("ss"), reason="needs ss (iproute2) to read the listen backlog")
async def test_it_listens_with_a_backlog_of_1024(server):
    listing = subprocess.run(["ss", "-ltnH", f"sport = :{server.port}"], capture_output=True, text=True).stdout
    [line] = listing.splitlines()
    backlog = int(line.split()[2])  # Send-Q of a listening socket: its backlog, capped at somaxconn
    somaxconn = int(open("/proc/sys/net/core/somaxconn").read())
    assert backlog == min(LISTEN_BACKLOG, somaxconn) and LISTEN_BACKLOG == 1024


async def test_tls_through_the_reloading_context(tmp_path):
    server_tls, client = serving_tls(tmp_path, "gpupair-extender.gpupair-system.svc")
    served = _server()
    await served.start("127.0.0.1", 0, ssl=server_tls)
    try:
        reader, writer = await _open(served, ssl=client, server_hostname="gpupair-extender.gpupair-system.svc")
        writer.write(_post("/echo", b"over tls") + _post("/echo", b"again"))
        assert [(await _response(reader))[2] for _ in range(2)] == [b"/echo 8", b"/echo 5"]
        writer.close()
        with pytest.raises(ssl.SSLError):  # a client that does not trust the CA gets no handshake
            await _open(served, ssl=ssl.create_default_context(), server_hostname="gpupair-extender.gpupair-system.svc")
    finally:
        await served.close()


async def test_close_lets_the_request_in_flight_finish_and_stops_listening():
    served = _server()
    await served.start("127.0.0.1", 0, shutdown_timeout=5.0)
    port = served.port
    busy_reader, busy_writer = await _open(served)
    idle_reader, idle_writer = await _open(served)
    idle_writer.write(_post("/echo", b""))
    assert (await _response(idle_reader))[0] == 200  # kept alive, idle
    busy_writer.write(_post("/slow", b""))
    await asyncio.sleep(0.05)  # the handler is running: a bind's API write, say
    closing = asyncio.create_task(served.close())
    status, _, body = await _response(busy_reader)
    await closing
    assert (status, body) == (200, b"slow")
    assert await _closed(busy_reader) and await _closed(idle_reader)  # answered, then closed
    busy_writer.close()
    idle_writer.close()
    with pytest.raises(OSError):
        await asyncio.open_connection("127.0.0.1", port)  # no longer listening


async def test_close_gives_up_on_a_handler_past_the_shutdown_timeout():
    async def stuck(request: Request) -> Response:
        await asyncio.sleep(30)
        return Response()

    served = HttpServer({("POST", "/stuck"): stuck}, MAX_BODY)
    await served.start("127.0.0.1", 0, shutdown_timeout=0.2)
    reader, writer = await _open(served)
    writer.write(_post("/stuck", b""))
    await asyncio.sleep(0.05)
    started = asyncio.get_running_loop().time()
    await served.close()
    assert asyncio.get_running_loop().time() - started < 5
    assert await _closed(reader)
    writer.close()


async def test_access_lines_at_debug_only(server, caplog):
    with caplog.at_level(logging.INFO, logger="gpupair.access"):
        await _exchange(server, _post("/echo", b"quiet"))
    assert not [r for r in caplog.records if r.name == "gpupair.access"]
    served = _server()
    with caplog.at_level(logging.DEBUG, logger="gpupair.access"):
        await served.start("127.0.0.1", 0)  # the level is read as a connection opens
        try:
            await _exchange(served, _post("/echo", b"loud"))
        finally:
            await served.close()
    [line] = [r for r in caplog.records if r.name == "gpupair.access"]
    assert (line.levelno, line.method, line.path, line.status) == (logging.DEBUG, "POST", "/echo", 200)
