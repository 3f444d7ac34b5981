"""The `gpupair` command: one entry point for every service and tool.

Each subcommand lives in its own module with two functions, ``configure(parser)`` to declare its
flags and ``run(args) -> int`` to do the work. Only the chosen subcommand's module is imported,
and none for ``gpupair --help`` (which lists names and one-line helps only), so a small process
such as the verifier sidecar does not load every service's dependencies; heavy imports still
belong inside ``run``. bench/startup.py times these start-ups.

Every error leaves here as one line (docs/cli.md, "The contract"): usage errors and bad input
files exit 2, runtime failures 1, Ctrl-C 130; no traceback reaches the user.

The wheel installs it twice: as ``gpupair``, and as ``kubectl-gpupair``, which kubectl runs for
``kubectl gpupair ...`` (a kubectl plugin is any ``kubectl-NAME`` on the PATH). The two differ only
in the name their help and errors give the command (``kubectl gpupair status: error: ...``).
"""

from __future__ import annotations

import argparse
import importlib
import logging
import re
import sys

from gpupair.command.version import version

# subcommand -> (module, one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "webhook": ("gpupair.webhook.main", "mutating admission webhook: add the GPU verifier sidecar to multi-GPU pods"),
    "verify": ("gpupair.verifier.main", "sidecar: ask this node's reporter for the pod's GPU verdict and log it"),
    "certs": ("gpupair.webhook.certs", "create or renew the webhook's CA and serving certificate (Secret + caBundle)"),
    "extender": ("gpupair.extender.main", "kube-scheduler HTTP extender: keep multi-GPU pods on one NUMA node"),
    "simulate": ("gpupair.simulator.command", "compare placement policies on simulated GPU nodes (no cluster)"),
    "audit": ("gpupair.audit.main", "run rounds of multi-GPU test pods and report which GPUs each got (TSV)"),
    "reporter": ("gpupair.reporter.main", "publish this node's GPU layout and free GPUs as node annotations"),
    "status": ("gpupair.status.main", "the cluster's GPU nodes at a glance: free maps, report ages, pending pods, FAILs"),
    "snapshot": ("gpupair.snapshot.main", "write the cluster's nodes and pods as the openb CSVs `simulate --scenario trace` replays"),
    "defrag": ("gpupair.defrag.main", "preview the moves of opted-in pods that would free a close set for each waiting GPU pod"),
}


# Commands that run as services (or in-cluster Jobs): a runtime failure is their JSON error line.
SERVICES = frozenset({"webhook", "verify", "certs", "extender", "reporter"})
EXIT_FAILURE, EXIT_USAGE, EXIT_INTERRUPTED = 1, 2, 130


class Parser(argparse.ArgumentParser):
    """argparse, with the contract's error form: one line, ``gpupair CMD: error: --flag: why``
    (argparse says ``argument --flag/--no-flag: why`` after the whole usage), exit 2."""

    def error(self, message: str):  # type: ignore[override]
        # the flag by its --long name, also where a short spelling comes first (-o/--output)
        message = re.sub(r"^argument (?:-[^-/:\s]/)?(-[^/:\s]+)(/[^:\s]+)*: ", r"\1: ", message)
        message = "; ".join(line.strip() for line in message.splitlines() if line.strip())  # one line, always
        if getattr(self, "gpupair_command", None) is None:
            self.print_usage(sys.stderr)  # no command yet: its one usage line lists what to type
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message}\n")


PROG = "gpupair"
KUBECTL_PROG = "kubectl gpupair"


def build_parser(only: str | None = None, *, names_only: bool = False, prog: str = PROG) -> argparse.ArgumentParser:
    """The full parser, or with ``only`` one configured subcommand (the others listed by name),
    or with ``names_only`` every subcommand listed by name and none configured (no imports).
    ``prog`` is the command's name in help and errors (``kubectl gpupair`` for the plugin)."""
    parser = Parser(
        prog=prog,
        description="Keep multi-GPU pods on one NUMA node and show which GPUs each pod got.",
    )
    parser.add_argument("--version", action="version", version=f"gpupair {version()}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name, (module_name, help_text) in COMMANDS.items():
        command = sub.add_parser(name, help=help_text, description=help_text)  # a Parser too
        command.gpupair_command = name  # gpupair.command.flags names the command's variables after it
        if names_only or (only is not None and name != only):
            continue
        module = importlib.import_module(module_name)
        module.configure(command)
        command.set_defaults(_run=module.run, _parser=command)
    return parser


def main(argv: list[str] | None = None, prog: str = PROG) -> int:
    argv = sys.argv[1:] if argv is None else argv
    # The top-level parser has no options of its own besides -h, so the first word is the command.
    # Without a known command argparse only prints the top-level help or an error, which need
    # no subcommand's flags: importing them all cost ~0.5 s on every `gpupair --help`.
    first = next((word for word in argv if not word.startswith("-")), None)
    if first in COMMANDS:
        parser = build_parser(first, prog=prog)
    else:
        parser = build_parser(names_only=True, prog=prog)
    args, unknown = parser.parse_known_args(argv)
    command: argparse.ArgumentParser = args._parser
    if unknown:  # said by the command's parser: `gpupair CMD: error: ...`, not `gpupair: error: ...`
        command.error(f"unrecognized arguments: {' '.join(unknown)}")
    from gpupair.command.flags import Failure, UsageError, bad_value, warn_deprecated
    from gpupair.command.service import setup_logging

    if (bad := bad_value(args)) is not None:
        command.error(f"{bad.source}: {bad.why}")
    # Every command logs the same JSON lines from here on, deprecation warnings first.
    setup_logging(args.log_level)
    warn_deprecated(command)
    try:
        return int(args._run(args) or 0)
    except UsageError as error:  # InputError too
        command.error(str(error))
    except KeyboardInterrupt:
        print(f"{command.prog}: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except Failure as error:
        return _failed(command, str(error))
    except Exception as error:  # the API server unreachable, a full disk, a bug: still one line
        logging.getLogger("gpupair").debug("failed", exc_info=True)  # --log-level debug: the traceback
        return _failed(command, describe(error))


def kubectl_main() -> int:
    """``kubectl-gpupair``: what kubectl runs for ``kubectl gpupair ARGS`` (with ARGS as argv).
    kubectl passes its environment, so the current context of $KUBECONFIG (or ~/.kube/config) is
    the one ``gpupair status`` reads, and ``--context`` picks another, as for ``gpupair``."""
    return main(sys.argv[1:], prog=KUBECTL_PROG)


def describe(error: BaseException) -> str:
    """One line for an exception that reached the top: what failed and where, without its chain."""
    if type(error).__name__ == "ApiException" or isinstance(error, TimeoutError):
        from gpupair.kubeclient.kube import describe_error

        return describe_error(error)
    if isinstance(error, OSError) and error.strerror and getattr(error, "filename", None):
        return f"{error.filename}: {error.strerror}"
    text = str(error).replace("\n", " ").strip()
    return f"{type(error).__name__}: {text}" if text else type(error).__name__


def _failed(command: argparse.ArgumentParser, message: str) -> int:
    name = command.gpupair_command
    if name in SERVICES:  # a service's log is JSON lines; this is its last one
        logging.getLogger("gpupair").getChild(name).error(message)
    else:
        print(f"{command.prog}: {message}", file=sys.stderr)
    return EXIT_FAILURE


if __name__ == "__main__":
    sys.exit(main())
