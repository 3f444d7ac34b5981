"""`gpupair` itself: the top-level help and errors load no subcommand, and a subcommand's
``configure`` does not load the server stack (bench/startup.py times both)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from gpupair.command import cli

REPO = Path(__file__).resolve().parents[3]
HEAVY = ("aiohttp", "pydantic", "grpc", "kubernetes_asyncio", "prometheus_client", "google.protobuf",
         "cryptography", "numpy", "matplotlib")


def loaded_after(code: str) -> tuple[str, list[str]]:
    """Run ``code`` in a fresh interpreter; its stdout and the modules it had loaded."""
    probe = (f"import sys, json, contextlib, io\nout = io.StringIO()\n"
             f"with contextlib.redirect_stdout(out), contextlib.suppress(SystemExit):\n    {code}\n"
             f"print(json.dumps([out.getvalue(), sorted(sys.modules)]))")
    result = subprocess.run([sys.executable, "-c", probe], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    text, modules = json.loads(result.stdout)
    return text, modules


def heavy(modules: list[str]) -> list[str]:
    return [m for m in modules if any(m == h or m.startswith(h + ".") for h in HEAVY)]


def test_top_level_help_lists_every_command_and_imports_none():
    text, modules = loaded_after("from gpupair.command import cli; cli.main(['--help'])")
    for name, (_, help_text) in cli.COMMANDS.items():
        assert name in text and help_text.split(":")[0] in " ".join(text.split())
    assert not [m for m in modules if m in {module for module, _ in cli.COMMANDS.values()}]
    assert heavy(modules) == []


def test_no_command_or_an_unknown_one_is_a_usage_error_naming_the_choices():
    for argv, says in (([], "arguments are required: COMMAND"), (["--nope"], "arguments are required: COMMAND"),
                       (["nope"], "invalid choice: 'nope' (choose from 'webhook', 'verify'")):
        result = subprocess.run([sys.executable, "-m", "gpupair.command.cli", *argv], cwd=REPO, capture_output=True,
                                text=True, timeout=60)
        assert result.returncode == 2, argv
        assert result.stderr.startswith("usage: gpupair") and says in result.stderr, result.stderr


def test_a_subcommand_help_configures_only_that_command_without_the_server_stack():
    text, modules = loaded_after("from gpupair.command import cli; cli.main(['extender', '--help'])")
    assert "--api-timeout" in text and "GPUPAIR_EXTENDER_API_TIMEOUT" in text
    assert "gpupair.command.service" in modules and "gpupair.extender.main" in modules
    assert "gpupair.webhook.main" not in modules
    assert heavy(modules) == []


def test_the_full_parser_still_configures_every_command():
    parser = cli.build_parser()
    choices = parser._subparsers._group_actions[0].choices
    assert set(choices) == set(cli.COMMANDS)
    assert all(len(sub._actions) > 1 for sub in choices.values())  # more than -h: configured
