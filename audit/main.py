"""`gpupair audit`: the seed's repeat-verification as a command.

Rows go to ``--output`` (the seed's TSV, written as they come so an interrupted run still leaves
a valid file) and to stdout; the progress bar and logs go to stderr; the summary ends stdout.
The output file is checked before the run and opened at the first sample: an audit that gets
none (no cluster, refused pods, interrupted early) leaves an existing file as it was.

Exit status: 0 every sample PASS; 1 any sample did not, or the audit failed at run time (the API
server unreachable, pods refused); 2 it could not start (bad flags, no or bad kubeconfig, an
output path it cannot write); 130 interrupted (Ctrl-C or SIGTERM), after its pods were deleted.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys
from pathlib import Path

from gpupair.topology import limits
from gpupair.command.flags import DURATION, Failure, Range, UsageError, add_kube_flags, add_resource_name
from gpupair.command.service import add_common_flags, add_flag, setup_logging

EXIT_OK, EXIT_FAILED, EXIT_INTERRUPTED = 0, 1, 130  # 2 (usage, input): from gpupair.command.cli
DEFAULT_IMAGE = "nvidia/cuda:12.4.1-base-ubuntu22.04"

log = logging.getLogger("gpupair.audit")


def configure(parser: argparse.ArgumentParser) -> None:
    add_flag(parser, "--rounds", 10, "rounds of pods, created in parallel within a round", bounds=Range(1, 10000))
    add_flag(parser, "--pods-per-round", 2, "pods created together in each round", bounds=Range(1, 1000))
    add_flag(parser, "--gpus", 2, "GPUs each pod asks for (requests = limits)", bounds=Range(1, limits.MAX_GPUS))
    add_flag(parser, "--node", "", "pin the pods to this node (spec.nodeName, as the seed did); "
                                   "empty: let the scheduler place them")
    add_flag(parser, "--namespace", "gpupair-audit", "namespace for the test pods (must exist)")
    add_flag(parser, "--image", DEFAULT_IMAGE, "image with nvidia-smi and bash")
    add_flag(parser, "--timeout", 180.0, "seconds a round waits for its pods to finish", bounds=DURATION)
    add_flag(parser, "--output", "results.tsv", "TSV file to write (the seed's columns)")
    add_kube_flags(parser)
    add_resource_name(parser)
    add_flag(parser, "--scheduler-name", "", "spec.schedulerName for the pods (e.g. gpupair-scheduler); "
                                             "empty: the cluster default")
    add_flag(parser, "--poll-interval", 2.0, "seconds between pod status polls", bounds=DURATION)
    add_flag(parser, "--delete-timeout", 90.0, "seconds to wait for a round's pods to be gone", bounds=DURATION)
    add_flag(parser, "--progress", True, "progress bar on stderr (shown on a terminal only)")
    add_common_flags(parser)


def run(args: argparse.Namespace) -> int:
    setup_logging(args.log_level)
    from gpupair.audit.manifest import PodTemplate
    from gpupair.audit.runner import AuditPlan

    try:
        plan = AuditPlan(
            template=PodTemplate(
                namespace=args.namespace, image=args.image, gpus=args.gpus,
                resource=args.resource_name, node=args.node or None,
                scheduler_name=args.scheduler_name or None),
            rounds=args.rounds, pods_per_round=args.pods_per_round, timeout=args.timeout,
            poll_interval=args.poll_interval, delete_timeout=args.delete_timeout)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    from gpupair.command.outputs import check_output

    return _run(args, plan, check_output(args.output, "--output", (".tsv",)))


class _Rows:
    """The TSV file, opened (and only then truncated) when the first row is there to write."""

    def __init__(self, path: Path, header: str) -> None:
        self.path, self.header, self.handle = path, header, None

    def write(self, row: str) -> None:
        if self.handle is None:
            self.handle = open(self.path, "w", encoding="utf-8", newline="\n")
            print(self.header, file=self.handle)
        print(row, file=self.handle, flush=True)

    def close(self) -> None:
        if self.handle is not None:
            self.handle.close()


def _run(args: argparse.Namespace, plan, path: Path) -> int:
    from tqdm import tqdm
    from tqdm.contrib.logging import logging_redirect_tqdm

    from gpupair.audit.runner import AuditError
    from gpupair.audit.sample import Sample, tsv_header
    from gpupair.audit.summary import format_summary, summarize, verdict_line
    from gpupair.command.cli import describe

    samples: list[Sample] = []
    output = _Rows(path, tsv_header())

    bar = tqdm(total=plan.rounds * plan.pods_per_round, unit="pod", file=sys.stderr,
               disable=None if args.progress else True, dynamic_ncols=True)

    def record(sample: Sample) -> None:
        if not samples:
            tqdm.write(tsv_header(), file=sys.stdout)
        samples.append(sample)
        output.write(sample.tsv_row())
        tqdm.write(sample.tsv_row(), file=sys.stdout)

    status = EXIT_OK
    with bar, logging_redirect_tqdm():
        try:
            if asyncio.run(_audit(args, plan, record, bar)):
                status = EXIT_INTERRUPTED
        except KeyboardInterrupt:
            status = EXIT_INTERRUPTED
        except UsageError:  # a kubeconfig that does not load: exit 2 from gpupair.command.cli
            raise
        except Exception as exc:  # refused pods, an unreachable apiserver, ...
            if not samples:
                raise Failure(str(exc) if isinstance(exc, AuditError) else describe(exc)) from None  # one line
            log.error("audit failed: %s", str(exc) if isinstance(exc, AuditError) else describe(exc))
            status = EXIT_FAILED
        finally:
            output.close()
    summary = summarize(samples)
    print()
    print(format_summary(summary))
    print(verdict_line(summary) + (" (interrupted)" if status == EXIT_INTERRUPTED else ""), flush=True)
    if status != EXIT_OK:
        return status
    return EXIT_OK if summary.all_passed else EXIT_FAILED


STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)
RECANCEL_S = 1.0


async def _audit(args: argparse.Namespace, plan, record, bar) -> bool:
    """Run the audit; True when Ctrl-C or SIGTERM stopped it (after its pods were deleted)."""
    from gpupair.kubeclient.kube import api_client

    from gpupair.audit.runner import Auditor

    task = asyncio.current_task()
    assert task is not None
    # Ctrl-C and SIGTERM (kubectl delete of an audit Job, a CI timeout) cancel this task, so the
    # Auditor's finally deletes the pods. The handlers are ours, not asyncio.run's: a cancel that
    # lands while a library turns it into an error of its own (a timeout expiring at that moment,
    # a connection reset) would be caught as a transient failure and the audit would go on
    # polling for --timeout per round; so the cancel is repeated until cleanup has begun.
    stopped = False
    auditor: Auditor | None = None
    loop = asyncio.get_running_loop()

    def cancel_until_cleaning() -> None:
        if not task.done() and not (auditor is not None and auditor.cleaning):
            task.cancel()
            loop.call_later(RECANCEL_S, cancel_until_cleaning)

    def on_signal() -> None:
        nonlocal stopped
        if stopped and auditor is not None and auditor.cleaning:
            log.warning("interrupted again: pods of this run may be left", extra={"run": plan.run_id})
            task.cancel()  # the user insists: stop deleting
        stopped = True
        cancel_until_cleaning()

    for sig in STOP_SIGNALS:
        loop.add_signal_handler(sig, on_signal)
    try:
        async with await api_client(args.kubeconfig or None, args.context or None) as api:
            log.info("audit starting", extra={"run": plan.run_id, "namespace": plan.template.namespace,
                                              "rounds": plan.rounds, "pods_per_round": plan.pods_per_round,
                                              "gpus": plan.template.gpus, "node": plan.template.node})
            auditor = Auditor(api, plan, on_sample=record, progress=bar)
            await auditor.run()
    except asyncio.CancelledError:
        if stopped:
            return True
        raise
    finally:
        for sig in STOP_SIGNALS:
            loop.remove_signal_handler(sig)
    return stopped
