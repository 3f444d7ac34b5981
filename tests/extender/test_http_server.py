"""extender/http_server.py over a real loopback socket, spoken to byte by byte as a client would."""

from __future__ import annotations

import asyncio
import logging
import shutil
import subprocess
from pathlib import Path

import pytest

from gpupair.command.service import LISTEN_BACKLOG
from gpupair.extender.http_server import HttpServer, Request, Response


async def _echo(request: Request) -> Response:
    if request.too_large:
        return Response(400, b'{"Error":"too large"}')
    return Response(200, b"%s %d" % (request.path.encode(), len(request.body)), "text/plain")


async def _slow(request: Request) -> Response:
    await asyncio.sleep(0.05)
    return Response(200, b"slow", "text/plain")


async def _raises(request: Request) -> Response:
    raise RuntimeError("boom")


@pytest.fixture
async def server():
    served = HttpServer({("POST", "/echo"): _echo, ("POST", "/slow"): _slow, ("GET", "/raises"): _raises,
                         ("GET", "/healthz"): _echo}, max_body=1024)
    await served.start("127.0.0.1", 0)
    yield served
    await served.close(1.0)


async def _exchange(server: HttpServer, data: bytes, answers: int = 1) -> list[tuple[int, dict, bytes]]:
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    writer.write(data)
    out = []
    for _ in range(answers):
        out.append(await _response(reader))
    writer.close()
    return out


async def _response(reader: asyncio.StreamReader) -> tuple[int, dict, bytes]:
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    headers = {k.lower(): v.strip() for k, v in (line.split(":", 1) for line in lines[1:] if line)}
    body = await reader.readexactly(int(headers.get("content-length", "0")))
    return status, headers, body


def _post(path: str, body: bytes, extra: bytes = b"") -> bytes:
    return b"POST %s HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n%s\r\n%s" % (path.encode(), len(body), extra, body)


async def test_keep_alive_answers_every_request_on_one_connection(server):
    answers = await _exchange(server, _post("/echo", b"abc") + _post("/echo", b"defgh"), answers=2)
    assert [(s, b) for s, _, b in answers] == [(200, b"/echo 3"), (200, b"/echo 5")]
    assert "connection" not in answers[0][1] and answers[0][1]["content-type"] == "text/plain"


async def test_pipelined_requests_are_answered_in_order(server):
    answers = await _exchange(server, _post("/slow", b"") + _post("/echo", b"x"), answers=2)
    assert [b for _, _, b in answers] == [b"slow", b"/echo 1"]


async def test_chunked_body_and_query_string(server):
    data = (b"POST /echo?timeout=5s HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
            b"3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n")
    [(status, _, body)] = await _exchange(server, data)
    assert (status, body) == (200, b"/echo 5")


async def test_body_over_the_limit_reaches_the_handler_then_the_connection_closes(server):
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    writer.write(_post("/echo", b"x" * 2000))
    status, headers, body = await _response(reader)
    assert (status, body, headers["connection"]) == (400, b'{"Error":"too large"}', "close")
    assert await asyncio.wait_for(reader.read(), 5) == b""  # closed, the rest never read
    writer.close()


async def test_unknown_path_wrong_method_and_head(server):
    data = (b"GET /nope HTTP/1.1\r\nHost: x\r\n\r\n" + b"GET /echo HTTP/1.1\r\nHost: x\r\n\r\n"
            + b"HEAD /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    writer.write(data)
    missing, wrong = await _response(reader), await _response(reader)
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
    writer.close()
    assert missing[0] == 404
    assert wrong[0] == 405 and wrong[1]["allow"] == "POST"
    assert head.startswith(b"HTTP/1.1 200 ") and b"Content-Length: 10" in head  # the GET body's length, no body


async def test_http_1_0_and_connection_close_are_honoured(server):
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    writer.write(b"POST /echo HTTP/1.0\r\nContent-Length: 1\r\n\r\nx")
    status, headers, body = await _response(reader)
    assert (status, body, headers["connection"]) == (200, b"/echo 1", "close")
    assert await asyncio.wait_for(reader.read(), 5) == b""
    [(_, headers, _)] = await _exchange(server, _post("/echo", b"", b"Connection: close\r\n"))
    assert headers["connection"] == "close"


async def test_malformed_request_gets_400_and_huge_headers_431(server):
    [(status, headers, _)] = await _exchange(server, b"NOT HTTP AT ALL\r\n\r\n")
    assert status == 400 and headers["connection"] == "close"
    huge = b"POST /echo HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 70_000 + b"\r\n\r\n"
    [(status, _, _)] = await _exchange(server, huge)
    assert status == 431


async def test_a_handler_that_raises_is_answered_500_and_the_connection_kept(server, caplog):
    answers = await _exchange(server, b"GET /raises HTTP/1.1\r\nHost: x\r\n\r\n" + _post("/echo", b"ok"), answers=2)
    assert [s for s, _, _ in answers] == [500, 200]
    assert "handler raised" in caplog.text


async def test_expect_100_continue(server):
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    writer.write(b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nExpect: 100-continue\r\n\r\n")
    assert await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5) == b"HTTP/1.1 100 Continue\r\n\r\n"
    writer.write(b"hi")
    assert (await _response(reader))[2] == b"/echo 2"
    writer.close()


async def test_close_lets_the_request_in_flight_finish():
    served = HttpServer({("POST", "/slow"): _slow}, max_body=1024)
    await served.start("127.0.0.1", 0)
    port = served.port
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(_post("/slow", b""))
    await asyncio.sleep(0.01)  # the handler is running
    closing = asyncio.create_task(served.close(5.0))
    status, headers, body = await _response(reader)
    await closing
    assert (status, body, headers["connection"]) == (200, b"slow", "close")
    writer.close()
    with pytest.raises(OSError):
        await asyncio.open_connection("127.0.0.1", port)  # no longer listening


async def _closed(reader: asyncio.StreamReader) -> bool:
    try:
        return await asyncio.wait_for(reader.read(), 5) == b""
    except ConnectionResetError:
        return True


async def test_a_chunked_body_over_the_limit_is_cut_off_as_it_comes(server):
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    writer.write(b"POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
                 + b"400\r\n" + b"x" * 1024 + b"\r\n" + b"1\r\ny\r\n")
    status, headers, body = await _response(reader)
    assert (status, body, headers["connection"]) == (400, b'{"Error":"too large"}', "close")
    assert await _closed(reader)
    writer.close()


async def test_no_100_continue_for_a_body_over_the_limit(server):
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    writer.write(b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 4096\r\nExpect: 100-continue\r\n\r\n")
    status, _, body = await _response(reader)  # the verb's own answer at once, no 100 before it
    assert (status, body) == (400, b'{"Error":"too large"}')
    assert await _closed(reader)
    writer.close()


async def test_an_idle_keep_alive_connection_is_closed_after_the_idle_timeout():
    assert HttpServer({}, 1).idle_timeout == 75.0  # Go's client keeps its idle ones 90 s, and reconnects
    served = HttpServer({("POST", "/echo"): _echo}, max_body=1024, idle_timeout=0.3)
    await served.start("127.0.0.1", 0)
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", served.port)
        writer.write(_post("/echo", b"a"))
        assert (await _response(reader))[2] == b"/echo 1"
        assert await _closed(reader)  # closed by the server once idle
        writer.close()
    finally:
        await served.close(1.0)


@pytest.mark.skipif(not shutil.which("ss"), reason="needs ss (iproute2) to read the listen backlog")
async def test_it_listens_with_a_backlog_of_1024(server):
    listing = subprocess.run(["ss", "-ltnH", f"sport = :{server.port}"], capture_output=True, text=True).stdout
    [line] = listing.splitlines()
    backlog = int(line.split()[2])  # a listening socket's Send-Q: its backlog, capped at somaxconn
    somaxconn = int(Path("/proc/sys/net/core/somaxconn").read_text())
    assert backlog == min(LISTEN_BACKLOG, somaxconn) and LISTEN_BACKLOG == 1024


async def test_close_closes_idle_connections_and_gives_up_on_a_handler_past_its_timeout():
    async def stuck(request: Request) -> Response:
        await asyncio.sleep(30)
        return Response()

    served = HttpServer({("POST", "/stuck"): stuck, ("POST", "/echo"): _echo}, max_body=1024)
    await served.start("127.0.0.1", 0)
    idle_reader, idle_writer = await asyncio.open_connection("127.0.0.1", served.port)
    idle_writer.write(_post("/echo", b""))
    assert (await _response(idle_reader))[0] == 200
    stuck_reader, stuck_writer = await asyncio.open_connection("127.0.0.1", served.port)
    stuck_writer.write(_post("/stuck", b""))
    await asyncio.sleep(0.05)
    started = asyncio.get_running_loop().time()
    await served.close(0.2)
    assert asyncio.get_running_loop().time() - started < 5
    assert await _closed(idle_reader) and await _closed(stuck_reader)
    idle_writer.close()
    stuck_writer.close()


async def test_access_lines_at_debug_only(server, caplog):
    with caplog.at_level(logging.INFO, logger="gpupair.access"):
        await _exchange(server, _post("/echo", b"quiet"))
    assert not [r for r in caplog.records if r.name == "gpupair.access"]
    with caplog.at_level(logging.DEBUG, logger="gpupair.access"):
        await _exchange(server, _post("/echo", b"loud"))
    [line] = [r for r in caplog.records if r.name == "gpupair.access"]
    assert (line.levelno, line.method, line.path, line.status) == (logging.DEBUG, "POST", "/echo", 200)
