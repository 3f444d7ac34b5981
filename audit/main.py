"""`gpupair audit`: the seed's repeat-verification as a command.

Rows go to ``--output`` (the seed's TSV, written as they come so an interrupted run still leaves
a valid file) and to stdout; the progress bar and logs go to stderr; the summary ends stdout.

Exit status: 0 every sample PASS; 1 any sample did not; 2 the audit could not run (no cluster
configuration, pods refused, bad flags); 130 interrupted (Ctrl-C or SIGTERM), after its pods
were deleted.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys
from typing import TextIO

from gpupair.flags import UsageError, add_kube_flags, add_resource_name
from gpupair.service import add_common_flags, add_flag, setup_logging

EXIT_OK, EXIT_FAILED, EXIT_ERROR, EXIT_INTERRUPTED = 0, 1, 2, 130
DEFAULT_IMAGE = "nvidia/cuda:12.4.1-base-ubuntu22.04"

log = logging.getLogger("gpupair.audit")


def configure(parser: argparse.ArgumentParser) -> None:
    add_flag(parser, "--rounds", 10, "rounds of pods, created in parallel within a round")
    add_flag(parser, "--pods-per-round", 2, "pods created together in each round")
    add_flag(parser, "--gpus", 2, "GPUs each pod asks for (requests = limits)")
    add_flag(parser, "--node", "", "pin the pods to this node (spec.nodeName, as the seed did); "
                                   "empty: let the scheduler place them")
    add_flag(parser, "--namespace", "gpupair-audit", "namespace for the test pods (must exist)")
    add_flag(parser, "--image", DEFAULT_IMAGE, "image with nvidia-smi and bash")
    add_flag(parser, "--timeout", 180.0, "seconds a round waits for its pods to finish")
    add_flag(parser, "--output", "results.tsv", "TSV file to write (the seed's columns)")
    add_kube_flags(parser)
    add_resource_name(parser)
    add_flag(parser, "--scheduler-name", "", "spec.schedulerName for the pods (e.g. gpupair-scheduler); "
                                             "empty: the cluster default")
    add_flag(parser, "--poll-interval", 2.0, "seconds between pod status polls")
    add_flag(parser, "--delete-timeout", 90.0, "seconds to wait for a round's pods to be gone")
    add_flag(parser, "--progress", True, "progress bar on stderr (shown on a terminal only)")
    add_common_flags(parser)


def run(args: argparse.Namespace) -> int:
    setup_logging(args.log_level)
    from audit.manifest import PodTemplate
    from audit.runner import AuditPlan

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
    try:
        output = open(args.output, "w", encoding="utf-8", newline="\n")
    except OSError as exc:
        print(f"gpupair audit: cannot write {args.output}: {exc}", file=sys.stderr)
        return EXIT_ERROR
    with output:
        return _run(args, plan, output)


def _run(args: argparse.Namespace, plan, output: TextIO) -> int:
    from tqdm import tqdm
    from tqdm.contrib.logging import logging_redirect_tqdm

    from audit.runner import AuditError
    from audit.sample import Sample, tsv_header
    from audit.summary import format_summary, summarize, verdict_line

    samples: list[Sample] = []
    print(tsv_header(), file=output, flush=True)
    print(tsv_header(), flush=True)

    bar = tqdm(total=plan.rounds * plan.pods_per_round, unit="pod", file=sys.stderr,
               disable=None if args.progress else True, dynamic_ncols=True)

    def record(sample: Sample) -> None:
        samples.append(sample)
        print(sample.tsv_row(), file=output, flush=True)
        tqdm.write(sample.tsv_row(), file=sys.stdout)

    status = EXIT_OK
    log.info("audit starting", extra={"run": plan.run_id, "namespace": plan.template.namespace,
                                      "rounds": plan.rounds, "pods_per_round": plan.pods_per_round,
                                      "gpus": plan.template.gpus, "node": plan.template.node})
    with bar, logging_redirect_tqdm():
        try:
            if asyncio.run(_audit(args, plan, record, bar)):
                status = EXIT_INTERRUPTED
        except KeyboardInterrupt:
            status = EXIT_INTERRUPTED
        except AuditError as exc:
            log.error(str(exc))
            status = EXIT_ERROR
        except Exception as exc:  # the cluster configuration, an unreachable apiserver, ...
            log.error("audit failed: %s", exc)
            status = EXIT_ERROR
    summary = summarize(samples)
    print()
    print(format_summary(summary))
    print(verdict_line(summary) + (" (interrupted)" if status == EXIT_INTERRUPTED else ""), flush=True)
    if status != EXIT_OK:
        return status
    return EXIT_OK if summary.all_passed else EXIT_FAILED


async def _audit(args: argparse.Namespace, plan, record, bar) -> bool:
    """Run the audit; True when SIGTERM stopped it (Ctrl-C surfaces as KeyboardInterrupt)."""
    from gpupair.kube import api_client

    from audit.runner import Auditor

    task = asyncio.current_task()
    assert task is not None
    # asyncio.run turns the first Ctrl-C into a cancel of this task; SIGTERM (kubectl delete of
    # an audit Job, a CI timeout) takes the same path, so the Auditor's finally deletes the pods.
    terminated = False

    def on_sigterm() -> None:
        nonlocal terminated
        terminated = True
        task.cancel()

    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, on_sigterm)
    try:
        async with await api_client(args.kubeconfig or None, args.context or None) as api:
            await Auditor(api, plan, on_sample=record, progress=bar).run()
    except asyncio.CancelledError:
        if terminated:
            return True
        raise
    finally:
        loop.remove_signal_handler(signal.SIGTERM)
    return False
