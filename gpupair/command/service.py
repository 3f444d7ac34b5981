"""What every gpupair service shares: flags with env defaults, JSON logs, health, metrics,
and a serve loop that drains on SIGTERM.

Every subcommand's ``configure`` imports this module, so its top level stays on the standard
library: aiohttp, prometheus_client and asyncio load only in the functions that serve (about
0.2 s of `gpupair SUBCOMMAND --help` otherwise; bench/startup.py)."""

from __future__ import annotations

import json
import logging
import sys
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from gpupair.command import flags

if TYPE_CHECKING:
    import ssl

    from aiohttp import web
    from prometheus_client import CollectorRegistry


# The flag helpers live in gpupair.command.flags (the command-line contract); re-exported for the commands.
add_flag = flags.add_flag
add_common_flags = flags.add_log_level


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, message and any ``extra`` fields.

    The extender logs a line per GPU pod it binds, on kube-scheduler's path: the line is written
    by orjson (an eighth of the stdlib encoder's time) and the time formatted once a second.

    Not python-json-logger's OrjsonFormatter (4.2): set up as near as its options go (the fields
    asctime, levelname, name and message renamed to ts, level, logger and msg; converter
    time.gmtime; msec format ``%s.%03dZ``; json_default=str) it writes the same plain line, but
    - it costs 5.2 us a ``bound`` line in a loop against this class's 3.1 (4.4 with the time
      cached once a second, as here): it calls Formatter.formatTime for every record;
    - an int past 64 bits makes orjson raise in it, and the line is lost to a traceback;
    - ``level`` is upper-case (``WARNING``), a dict message is spread into fields with an empty
      ``msg``, and ``exc`` comes before the extra fields rather than last.
    The same line would need formatTime, process_log_record and jsonify_log_record overridden:
    as much code as this class, and a dependency more."""

    _skip = set(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {"message", "asctime"}
    _encoder = json.JSONEncoder(default=str)

    def __init__(self) -> None:
        super().__init__()
        import orjson  # here, not at the top: see the module docstring

        self._dumps, self._option = orjson.dumps, orjson.OPT_NON_STR_KEYS
        self._second, self._stamp = -1, ""

    def format(self, record: logging.LogRecord) -> str:
        second = int(record.created)
        if second != self._second:
            self._second, self._stamp = second, time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(second))
        entry: dict[str, Any] = {
            "ts": f"{self._stamp}.{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        for key, value in record.__dict__.items():
            if key not in self._skip and not key.startswith("_"):
                entry[key] = value
        if record.exc_info:
            entry["exc"] = self.formatException(record.exc_info)
        try:
            return self._dumps(entry, default=str, option=self._option).decode()
        except TypeError:  # what orjson will not write (an int past 64 bits): the stdlib's encoder will
            return self._encoder.encode(entry)


def setup_logging(level: str = "info") -> None:
    # No line carries the caller's file, line or function: skip looking them up for every
    # record (the logging docs' own optimisation).
    logging._srcfile = None  # type: ignore[attr-defined]
    # Nor the thread or process (the logging docs' next optimisations): no line carries them.
    logging.logThreads = logging.logProcesses = logging.logMultiprocessing = False
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())


def metrics_handler(registry: CollectorRegistry) -> Callable[[web.Request], Awaitable[web.Response]]:
    from aiohttp import web
    from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

    async def metrics(_: web.Request) -> web.Response:
        body = generate_latest(registry)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    return metrics


PROBES = frozenset({"/healthz", "/readyz", "/metrics"})  # asked every few seconds by the kubelet, Prometheus


def access_logger():
    """aiohttp's access log as gpupair's JSON lines: probes and scrapes at debug, as kube
    components log them (~15 lines a minute per pod otherwise), every other request at info."""
    from aiohttp.abc import AbstractAccessLogger

    class AccessLogger(AbstractAccessLogger):
        def log(self, request, response, time: float) -> None:
            level = logging.DEBUG if request.path in PROBES else logging.INFO
            self.logger.log(level, "request", extra={"method": request.method, "path": request.path,
                                                     "status": response.status, "seconds": round(time, 4)})

    return AccessLogger


def app_runner(app: web.Application, shutdown_timeout: float = 10.0) -> web.AppRunner:
    """The runner every service serves its app with: gpupair's access log, signals left to ``serve``."""
    from aiohttp import web

    return web.AppRunner(app, handle_signals=False, shutdown_timeout=shutdown_timeout,
                         access_log_class=access_logger(), access_log=logging.getLogger("gpupair.access"))


def add_health_routes(
    app: web.Application,
    registry: CollectorRegistry,
    ready: Callable[[], bool] = lambda: True,
) -> None:
    """/healthz (process alive), /readyz (``ready()``), /metrics (Prometheus text)."""
    from aiohttp import web

    async def healthz(_: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def readyz(_: web.Request) -> web.Response:
        if ready():
            return web.Response(text="ok")
        return web.Response(status=503, text="not ready")

    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    app.router.add_get("/metrics", metrics_handler(registry))


LISTEN_BACKLOG = 1024  # the kernel caps it at net.core.somaxconn


def run_loop(main: Awaitable[Any], *, fast: bool = True) -> Any:
    """Run ``main`` to completion on the event loop a gpupair service serves from: uvloop's
    where it is installed (``fast``), which takes about 20 us off each aiohttp request, an
    eighth of it (bench/request_path.py), else asyncio's own."""
    import asyncio

    if fast:
        try:
            import uvloop
        except ImportError:
            pass
        else:
            return uvloop.run(main)
    return asyncio.run(main)


async def serve(
    app: web.Application,
    host: str,
    port: int,
    ssl_context: ssl.SSLContext | None = None,
    shutdown_timeout: float = 10.0,
) -> None:
    """Serve ``app`` until SIGTERM or SIGINT, then stop accepting and drain in-flight requests
    (``serve_until_stopped``)."""
    from aiohttp import web

    runner = app_runner(app, shutdown_timeout)
    await runner.setup()
    # Above aiohttp's 128: a burst of clients connecting while the loop is busy would overflow
    # it, and each dropped handshake waits a 1 s SYN retransmit (docs/extender.md, the pool).
    site = web.TCPSite(runner, host, port, ssl_context=ssl_context, backlog=LISTEN_BACKLOG)

    async def listen() -> None:
        try:
            await site.start()
        except (OSError, OverflowError):
            await runner.cleanup()
            raise

    await serve_until_stopped(listen, runner.cleanup, host, port)


async def serve_until_stopped(listen: Callable[[], Awaitable[None]], close: Callable[[], Awaitable[None]],
                              host: str, port: int) -> None:
    """Every gpupair server's loop (aiohttp's for the webhook and reporter, the extender's own):
    ``listen`` on ``host:port``, serve until SIGTERM or SIGINT, then ``close``, which stops
    accepting and drains the requests in flight.

    An address it cannot listen on is a ``Failure`` (one line, exit 1). SIGTERM returns; SIGINT
    raises KeyboardInterrupt once drained, so Ctrl-C exits 130 like every command."""
    import signal

    from gpupair.command.version import version

    try:
        await listen()
    except (OSError, OverflowError) as exc:  # in use, not an address of this host, a name that does not resolve
        raise flags.Failure(f"cannot listen on {host}:{port}: {getattr(exc, 'strerror', None) or exc}") from None
    logging.getLogger("gpupair").info("serving", extra={"host": host, "port": port, "version": version()})
    try:
        stopped_by = await until_stopped()
        logging.getLogger("gpupair").info("shutting down")
    finally:
        await close()
    if stopped_by == signal.SIGINT:
        raise KeyboardInterrupt


async def until_stopped() -> int:
    """Wait for SIGTERM or SIGINT and return which came: a service then drains and returns
    (SIGTERM) or raises KeyboardInterrupt once drained (SIGINT), so Ctrl-C exits 130."""
    import asyncio
    import signal

    stop = asyncio.Event()
    stopped_by: list[int] = []

    def on_signal(sig: int) -> None:
        stopped_by.append(sig)
        stop.set()

    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, on_signal, sig)
    try:
        await stop.wait()
    finally:
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(sig)
    return stopped_by[0]
