"""The `gpupair` command: one entry point for every service and tool.

Each subcommand lives in its own module with two functions, ``configure(parser)`` to declare its
flags and ``run(args) -> int`` to do the work. Only the chosen subcommand's module is imported,
and none for ``gpupair --help`` (which lists names and one-line helps only), so a small process
such as the verifier sidecar does not load every service's dependencies; heavy imports still
belong inside ``run``. bench/startup.py times these start-ups.
"""

from __future__ import annotations

import argparse
import importlib
import sys

# subcommand -> (module, one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "webhook": ("webhook.main", "mutating admission webhook: add the GPU verifier sidecar to multi-GPU pods"),
    "verify": ("verifier.main", "sidecar: ask this node's reporter for the pod's GPU verdict and log it"),
    "certs": ("webhook.certs", "create or renew the webhook's CA and serving certificate (Secret + caBundle)"),
    "extender": ("extender.main", "kube-scheduler HTTP extender: keep multi-GPU pods on one NUMA node"),
    "simulate": ("simulator.command", "compare placement policies on simulated GPU nodes (no cluster)"),
    "audit": ("audit.main", "run rounds of multi-GPU test pods and report which GPUs each got (TSV)"),
    "reporter": ("reporter.main", "publish this node's GPU layout and free GPUs as node annotations"),
    "status": ("status.main", "the cluster's GPU nodes at a glance: free maps, report ages, pending pods, FAILs"),
}


def build_parser(only: str | None = None, *, names_only: bool = False) -> argparse.ArgumentParser:
    """The full parser, or with ``only`` one configured subcommand (the others listed by name),
    or with ``names_only`` every subcommand listed by name and none configured (no imports)."""
    parser = argparse.ArgumentParser(
        prog="gpupair",
        description="Keep multi-GPU pods on one NUMA node and show which GPUs each pod got.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name, (module_name, help_text) in COMMANDS.items():
        command = sub.add_parser(name, help=help_text, description=help_text)
        command.gpupair_command = name  # gpupair.flags names the command's variables after it
        if names_only or (only is not None and name != only):
            continue
        module = importlib.import_module(module_name)
        module.configure(command)
        command.set_defaults(_run=module.run, _parser=command)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    # The top-level parser has no options of its own besides -h, so the first word is the command.
    # Without a known command argparse only prints the top-level help or an error, which need
    # no subcommand's flags: importing them all cost ~0.5 s on every `gpupair --help`.
    first = next((word for word in argv if not word.startswith("-")), None)
    if first in COMMANDS:
        parser = build_parser(first)
    else:
        parser = build_parser(names_only=True)
    args = parser.parse_args(argv)
    # Every command logs the same JSON lines from here on, deprecation warnings first.
    from gpupair.flags import UsageError, warn_deprecated
    from gpupair.service import setup_logging

    setup_logging(args.log_level)
    warn_deprecated(args._parser)
    try:
        return int(args._run(args) or 0)
    except UsageError as error:
        args._parser.error(str(error))  # argparse's format: usage, then `gpupair CMD: error: ...`; exit 2


if __name__ == "__main__":
    sys.exit(main())
