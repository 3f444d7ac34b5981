"""gpupair.service.add_flag: GPUPAIR_* environment defaults, and bad values as usage errors."""

from __future__ import annotations

import argparse

import pytest

from gpupair.service import add_flag


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="t")
    add_flag(p, "--port", 8888, "port")
    add_flag(p, "--stale-after", 300.0, "seconds")
    add_flag(p, "--node-cache", True, "cache")
    add_flag(p, "--policy", "aligned", "policy")
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


def test_a_bad_number_in_the_environment_is_a_usage_error(monkeypatch, capsys):
    monkeypatch.setenv("GPUPAIR_PORT", "eighty")
    with pytest.raises(SystemExit) as exit_:
        parser().parse_args([])
    assert exit_.value.code == 2
    assert "--port: invalid int value: 'eighty'" in capsys.readouterr().err


def test_a_misspelt_boolean_in_the_environment_is_a_usage_error(monkeypatch, capsys):
    monkeypatch.setenv("GPUPAIR_NODE_CACHE", "ture")
    with pytest.raises(SystemExit) as exit_:
        parser()
    assert exit_.value.code == 2
    assert "GPUPAIR_NODE_CACHE='ture'" in capsys.readouterr().err
