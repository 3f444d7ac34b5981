"""Every logger of gpupair's code sits under the ``gpupair.`` tree, so one ``--log-level`` and one
handler govern them all and an operator filters on one prefix."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("gpupair", "extender", "reporter", "webhook", "verifier", "audit", "simulator", "status")


def logger_names():
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                        and node.func.attr == "getLogger" and node.args):
                    arg = node.args[0]
                    yield path.relative_to(ROOT), (arg.value if isinstance(arg, ast.Constant) else ast.unparse(arg))


def test_every_logger_is_under_gpupair():
    names = list(logger_names())
    assert len(names) > 20  # the walk found the modules
    stray = [(str(path), name) for path, name in names
             if not (isinstance(name, str) and (name == "gpupair" or name.startswith("gpupair.")))]
    assert stray == []
