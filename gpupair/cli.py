"""The `gpupair` command: one entry point for every service and tool.

Each subcommand lives in its own module with two functions, ``configure(parser)`` to declare its
flags and ``run(args) -> int`` to do the work. Modules are imported when the command line is
parsed; heavy imports belong inside ``run``.
"""

from __future__ import annotations

import argparse
import importlib
import sys

# subcommand -> (module, one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "simulate": ("simulator.command", "compare placement policies on simulated GPU nodes (no cluster)"),
    "audit": ("audit.main", "run rounds of multi-GPU test pods and report which GPUs each got (TSV)"),
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="gpupair",
        description="Keep multi-GPU pods on one NUMA node and show which GPUs each pod got.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name, (module_name, help_text) in COMMANDS.items():
        module = importlib.import_module(module_name)
        command = sub.add_parser(name, help=help_text, description=help_text)
        module.configure(command)
        command.set_defaults(_run=module.run)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return int(args._run(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
