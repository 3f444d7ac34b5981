"""gpupair.command.service.add_flag: GPUPAIR_* environment defaults, and bad values as usage errors."""

from __future__ import annotations

import argparse

import pytest

from gpupair.command.flags import PORT, bad_value
from gpupair.command.service import add_flag


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="t")
    add_flag(p, "--port", 8888, "port", bounds=PORT)
    add_flag(p, "--stale-after", 300.0, "seconds")
    add_flag(p, "--node-cache", True, "cache")
    add_flag(p, "--policy", "aligned", "policy", choices=("aligned", "naive"))
    return p


def test_defaults_without_environment(monkeypatch):
    for name in ("PORT", "STALE_AFTER", "NODE_CACHE", "POLICY"):
        monkeypatch.delenv(f"GPUPAIR_{name}", raising=False)
    args = parser().parse_args([])
    assert (args.port, args.stale_after, args.node_cache, args.policy) == (8888, 300.0, True, "aligned")


def test_environment_values_take_the_flag_type(monkeypatch):
    monkeypatch.setenv("GPUPAIR_PORT", "9000")
    monkeypatch.setenv("GPUPAIR_STALE_AFTER", "0")
    monkeypatch.setenv("GPUPAIR_NODE_CACHE", "No")
    monkeypatch.setenv("GPUPAIR_POLICY", "naive")
    args = parser().parse_args([])
    assert (args.port, args.stale_after, args.node_cache, args.policy) == (9000, 0.0, False, "naive")


def test_command_line_beats_environment(monkeypatch):
    monkeypatch.setenv("GPUPAIR_PORT", "9000")
    monkeypatch.setenv("GPUPAIR_NODE_CACHE", "false")
    args = parser().parse_args(["--port", "7000", "--node-cache"])
    assert (args.port, args.node_cache) == (7000, True)


def bad(args: argparse.Namespace) -> tuple[str, str] | None:
    found = bad_value(args)
    return None if found is None else (found.source, found.why)


def test_a_bad_number_in_the_environment_is_reported_by_its_variable(monkeypatch):
    monkeypatch.setenv("GPUPAIR_PORT", "eighty")
    assert bad(parser().parse_args([])) == ("GPUPAIR_PORT", "expected an integer, got 'eighty'")
    assert bad(parser().parse_args(["--port", "80"])) is None  # the flag beats its variable


def test_a_misspelt_boolean_or_choice_in_the_environment_is_reported(monkeypatch):
    monkeypatch.setenv("GPUPAIR_NODE_CACHE", "ture")
    assert bad(parser().parse_args([])) == ("GPUPAIR_NODE_CACHE", "expected one of 1, true, yes, on, 0, false, no, off, got 'ture'")
    monkeypatch.delenv("GPUPAIR_NODE_CACHE")
    monkeypatch.setenv("GPUPAIR_POLICY", "bogus")
    assert bad(parser().parse_args([])) == ("GPUPAIR_POLICY", "'bogus' is not one of aligned, naive")


def test_bounds_and_finiteness_hold_for_flag_and_variable(monkeypatch, capsys):
    monkeypatch.setenv("GPUPAIR_STALE_AFTER", "nan")
    assert bad(parser().parse_args([])) == ("GPUPAIR_STALE_AFTER", "must be a finite number, got 'nan'")
    with pytest.raises(SystemExit):
        parser().parse_args(["--port", "0"])
    assert "argument --port: must be between 1 and 65535, got 0" in capsys.readouterr().err


async def test_probes_are_logged_at_debug_and_other_requests_at_info(caplog):
    """The kubelet's probes and Prometheus' scrapes come every few seconds: debug, as kube components
    log them; anything else a service answers stays at info."""
    import logging

    import aiohttp
    from aiohttp import web
    from prometheus_client import CollectorRegistry

    from gpupair.command.service import add_health_routes, app_runner

    app = web.Application()
    add_health_routes(app, CollectorRegistry())
    runner = app_runner(app, shutdown_timeout=0.1)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]
    caplog.set_level(logging.DEBUG, logger="gpupair.access")
    try:
        async with aiohttp.ClientSession() as session:
            for path in ("/healthz", "/readyz", "/metrics", "/mutate"):
                async with session.get(f"http://127.0.0.1:{port}{path}") as response:
                    await response.read()
    finally:
        await runner.cleanup()
    logged = {(r.path, r.levelname, r.status) for r in caplog.records if r.name == "gpupair.access"}
    assert logged == {("/healthz", "DEBUG", 200), ("/readyz", "DEBUG", 200), ("/metrics", "DEBUG", 200),
                      ("/mutate", "INFO", 404)}
