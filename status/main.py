"""`gpupair status`: one line per GPU node (free map, largest close set, report age and state),
then the cluster summary (fragmentation, pending GPU pods with the scheduler's last reason,
recent FAIL verdicts).

Exit status: 0 shown (possibly partial: what could not be listed is named); 1 the cluster could
not be asked (the API server unreachable, nodes not listable); 2 it could not start (bad flags, no
or bad kubeconfig); 130 interrupted before it showed anything (--watch: at any time).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import signal
import sys
from datetime import datetime, timezone
from typing import TextIO

from gpupair.command.flags import (
    DURATION, Failure, Range, UsageError, add_dra_driver, add_gpu_device_classes, add_kube_flags, add_lease_namespace,
    add_log_level, add_resource_name, add_stale_after,
)
from gpupair.command.service import add_flag

EXIT_OK = 0  # 1, 2 and 130: from gpupair.command.cli
OUTPUTS = ("text", "wide", "json")
CLEAR = "\x1b[H\x1b[2J"  # cursor home, clear screen: a redraw in place


def configure(parser: argparse.ArgumentParser) -> None:
    add_flag(parser, "--output", "text", "text, wide (adds generation, heartbeat source, reservations and their pods) "
                                         "or json (docs/status.schema.json)", choices=OUTPUTS, short="-o")
    add_flag(parser, "--selector", "", "label selector for the nodes shown, e.g. pool=a100", short="-l")
    add_flag(parser, "--namespace", "", "only pods and Events in this namespace (pending pods, FAIL verdicts, "
                                        "reservations); empty: all namespaces", short="-n")
    add_flag(parser, "--watch", False, "redraw every --interval seconds until interrupted", short="-w")
    add_flag(parser, "--interval", 2.0, "seconds between redraws with --watch", bounds=DURATION)
    add_stale_after(parser, "; as the extender's --stale-after")
    add_lease_namespace(parser, "a heartbeat newer than the report ('' to skip)")
    add_flag(parser, "--fails", 5, "how many recent FAIL verdicts to list", bounds=Range(0, 1000))
    add_resource_name(parser)
    add_dra_driver(parser, "nodes it publishes are shown from their ResourceSlices and claims, marked DRA ('' to skip)")
    add_gpu_device_classes(parser, "what a pending pod's claims ask of them counts as its GPUs, and their "
                                   "placement as its own")
    add_flag(parser, "--request-timeout", 30.0, "seconds each list call may take", bounds=DURATION)
    add_flag(parser, "--now", "", "judge ages as of this RFC 3339 time instead of the clock (reproducible output)")
    add_kube_flags(parser)
    add_log_level(parser)


def run(args: argparse.Namespace) -> int:
    from gpupair.status.objects import parse_time

    fixed_now = None
    if args.now:
        fixed_now = parse_time(args.now)
        if fixed_now is None:
            raise UsageError(f"--now {args.now!r} is not an RFC 3339 time with a zone")
    return asyncio.run(_status(args, fixed_now, sys.stdout))


async def _status(args: argparse.Namespace, fixed_now: datetime | None, out: TextIO) -> int:
    from gpupair.kubeclient.kube import api_client, describe_error
    from gpupair.status.build import LayoutCache, Options, build
    from gpupair.status.fetch import NodesNotVisible, list_cluster

    options = Options(stale_after=args.stale_after, resource=args.resource_name, fails=args.fails,
                      gpu_classes=args.gpu_device_classes)
    layouts = LayoutCache(options.stale_after)
    api = await api_client(args.kubeconfig or None, args.context or None)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    redraw = args.watch and args.output != "json" and out.isatty()
    try:
        async with api:
            while True:
                try:
                    with paused_gc():
                        listing = await list_cluster(api, args.selector, args.namespace, args.request_timeout,
                                                     args.lease_namespace, args.dra_driver)
                        view = build(listing, fixed_now or datetime.now(timezone.utc), options, layouts)
                        frame = _format(view, args.output)
                except Exception as exc:  # nodes not listable, an unreachable apiserver, a broken proxy, ...
                    why = str(exc) if isinstance(exc, NodesNotVisible) else describe_error(exc)
                    if not args.watch:
                        raise Failure(why) from None  # one line, exit 1
                    _show(out, f"{args._parser.prog}: {why}\n", redraw)
                else:
                    _show(out, frame, redraw)
                if not args.watch:
                    return EXIT_OK
                try:
                    await asyncio.wait_for(stop.wait(), args.interval)
                    return EXIT_OK  # SIGTERM
                except asyncio.TimeoutError:
                    pass
    finally:
        loop.remove_signal_handler(signal.SIGTERM)


@contextlib.contextmanager
def paused_gc():
    """No cyclic garbage collection while a frame is listed, built and formatted: the lists of a large
    cluster are hundreds of thousands of live objects that every collection would walk again
    (a third of the time on 5,000 nodes) and that are freed by reference counting anyway."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def _format(view, output: str) -> str:
    if output == "json":
        return view.model_dump_json() + "\n"
    from gpupair.status.render import render_text

    return render_text(view, wide=output == "wide")


def _show(out: TextIO, text: str, redraw: bool) -> None:
    # On a terminal --watch redraws in place; piped, frames follow each other (JSON: one per line).
    out.write(CLEAR + text if redraw else text)
    out.flush()
