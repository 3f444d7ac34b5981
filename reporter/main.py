"""`gpupair reporter`: publish this node's GPU layout and free GPUs as node annotations.

One runs on every GPU node (a DaemonSet). It reads the layout from NVML (or --topology-file),
what the kubelet has allocated from its PodResources API (or --allocated), and writes the
core's two annotations with a JSON merge patch. ``--once --dry-run`` prints them instead, as
one JSON object (annotation key -> value), and exits.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import sys
import time
from collections.abc import Awaitable, Callable, Mapping
from datetime import datetime, timezone
from typing import Any

from aiohttp import web
from prometheus_client import CollectorRegistry

from gpupair.command import flags

from gpupair.kubewire import defaults
from gpupair.topology.layout import NodeLayout
from gpupair.topology.layout_file import LayoutFileError
from gpupair.command.service import add_common_flags, add_flag, serve, setup_logging
from gpupair.reporter.allocations import DEFAULT_SOCKET, PodResourcesClient
from gpupair.reporter.app import build_app
from gpupair.reporter.checkpoint_watch import DEFAULT_CHECKPOINT, CheckpointWatch
from gpupair.reporter.heartbeat import KubeLeases, LeaseKeeper
from gpupair.reporter.loop import ReporterLoop
from gpupair.reporter.metrics import ReporterMetrics
from gpupair.reporter.nvml_discovery import NvmlUnavailable
from gpupair.reporter.publisher import Publisher, Write
from gpupair.reporter.scan import (
    AllocationSource,
    PodResourcesAllocations,
    StaticAllocations,
    UnknownDevicesError,
    parse_id_list,
)
from gpupair.reporter.topology_source import FileLayoutSource, LayoutSource, NvmlLayoutSource

log = logging.getLogger("gpupair.reporter")

EXIT_OK, EXIT_FAILED = 0, 1  # usage errors: exit 2, from gpupair.command.cli


def configure(parser: argparse.ArgumentParser) -> None:
    add_flag(parser, "--node-name", "", "this node's name, from the downward API (also env NODE_NAME)",
             fallback_env=("NODE_NAME",))
    flags.add_resource_name(parser)
    flags.add_shared_resources(parser, "the reporter counts each GPU's shares held under them too "
                                       "(gpupair.io/shares)")
    add_flag(parser, "--scan-interval", 5.0, "seconds between scans", bounds=flags.DURATION)
    add_flag(parser, "--heartbeat", 30.0,
             "seconds between liveness signals: renewals of this node's Lease (with --lease-namespace '': "
             "re-writes of the unchanged annotations)", bounds=flags.DURATION)
    flags.add_lease_namespace(parser, "where this node's liveness Lease is renewed; '' for no Lease")
    flags.add_dra_driver(parser, "where its slices name this node, the report is the topology alone and "
                                 "multi-GPU DRA pods get verdicts from their claims ('' for none)", on=False)
    add_flag(parser, "--lease-duration", 120, "leaseDurationSeconds written on the Lease (for people and "
             "tools reading it; the extender goes by its own --stale-after)", bounds=flags.Range(1, 7 * 86400))
    add_flag(parser, "--annotation-refresh", 90.0,
             "also re-write unchanged annotations this often (seconds) for extenders older than the Lease, "
             "which judge freshness from the report alone; keep it below their --stale-after; "
             "0 once every extender reads Leases (annotations are then written only on change)", bounds=flags.OPTIONAL_DURATION)
    add_flag(parser, "--pod-resources-socket", DEFAULT_SOCKET, "kubelet PodResources v1 Unix socket")
    add_flag(parser, "--checkpoint-file", DEFAULT_CHECKPOINT,
             "kubelet device checkpoint; a change triggers a rescan at once ('' to disable)")
    add_flag(parser, "--checkpoint-poll", 0.5, "seconds between checks of the checkpoint file", bounds=flags.DURATION)
    add_flag(parser, "--host", "0.0.0.0", "address for /healthz, /readyz, /metrics and /v1/verify",
             type=flags.listen_address)
    add_flag(parser, "--port", defaults.REPORTER_PORT, "port for the same (the webhook's and verifier's --reporter-port)", bounds=flags.PORT)
    flags.add_token_audience(parser, "audience a verifier's service-account token must carry "
                                     "(the webhook's --token-audience)")
    flags.add_topology_file(parser, "read the layout from a file instead of NVML: `nvidia-smi topo -m` output, "
                                    "topology JSON, a Node, or this command's --once --dry-run output")
    add_flag(parser, "--allocated", None,
             "comma-separated allocated devices (indices or UUIDs), instead of asking the kubelet")
    add_flag(parser, "--layout-file", "",
             "also keep the topology JSON in this file (a host directory node-local readers mount)")
    add_flag(parser, "--admission-probe", True,
             "write nothing until dry-run writes that the reporter's ValidatingAdmissionPolicies must refuse are "
             "refused (the apiserver enforces a new policy a second or so after it is applied); "
             "--no-admission-probe only where those policies are not installed")
    add_flag(parser, "--once", False, "scan once, write if due, and exit")
    add_flag(parser, "--dry-run", False, "print the annotations as one JSON object instead of writing them")
    flags.add_kube_flags(parser)
    add_common_flags(parser)


UsageError = flags.UsageError  # a flag combination or value the reporter cannot work with

def check_args(args: argparse.Namespace) -> None:
    if not args.dry_run and not args.node_name:
        raise UsageError("--node-name (or NODE_NAME) is required unless --dry-run")
    if args.dry_run and not args.once:
        args.once = True  # a dry run is a single look; nothing would ever be written


def layout_source(args: argparse.Namespace) -> LayoutSource:
    if args.topology_file:
        return FileLayoutSource(args.topology_file)
    return NvmlLayoutSource()


def allocation_source(args: argparse.Namespace, client: PodResourcesClient) -> AllocationSource:
    if args.allocated is not None:
        return StaticAllocations(parse_id_list(args.allocated))
    if args.dry_run and not os.path.exists(args.pod_resources_socket):
        # Off a GPU node (a laptop, CI) a dry run still shows the report: nothing allocated.
        log.warning("no kubelet pod-resources socket; the dry run shows every GPU free (--allocated says otherwise)",
                    extra={"socket": args.pod_resources_socket})
        return StaticAllocations(())
    return PodResourcesAllocations(client, args.resource_name, sorted(args.shared_resources))


def node_writer(api: Any, node_name: str) -> Write:
    from gpupair.kubeclient import kube

    async def write(annotations: Mapping[str, str]) -> None:
        await kube.patch_annotations(api, "node", node_name, None, annotations)

    return write


def publisher_for(args: argparse.Namespace, api: Any) -> Publisher:
    """With a Lease, unchanged annotations are re-written only for old extenders (or never);
    without one, re-writing them is the liveness signal, as before the Lease."""
    refresh = args.heartbeat if not args.lease_namespace else (args.annotation_refresh or None)
    return Publisher(node_writer(api, args.node_name), heartbeat=refresh)


def lease_keeper(args: argparse.Namespace, api: Any) -> LeaseKeeper | None:
    if not args.lease_namespace:
        return None
    return LeaseKeeper(KubeLeases(api), args.node_name, args.lease_namespace,
                       interval=args.heartbeat, duration=args.lease_duration)


def admission_guard(args: argparse.Namespace, api: Any) -> Any:
    """The wait for the admission policies (reporter/admission_guard.py), or None without it."""
    if not args.admission_probe:
        return None
    from gpupair.reporter.admission_guard import AdmissionGuard

    return AdmissionGuard(api, args.node_name, args.lease_namespace)


async def policies_enforced(guard: Any, stop: asyncio.Event, timeout: float | None = None) -> bool:
    """Whether the reporter may write: at once without a guard, else once its probes are
    refused (False when ``stop`` or ``timeout`` comes first)."""
    if guard is None:
        return True
    try:
        return await asyncio.wait_for(guard.wait_enforced(stop), timeout)
    except asyncio.TimeoutError:
        return False


ONCE_POLICY_WAIT = 30.0  # seconds --once waits for the admission policies before it gives up


def dra_node(args: argparse.Namespace, api: Any) -> Any:
    """This node's DRA side (reporter/dra_node.py), or None with --dra-driver ''."""
    if not args.dra_driver:
        return None
    from gpupair.reporter.dra_node import DraNode

    return DraNode(api, args.node_name, args.dra_driver)  # the loop gives it its layout


# --- the verdict endpoint -----------------------------------------------------------------
# POST /v1/verify runs inside this process, on this port (reporter/verification.py).


def verification_routes(
    args: argparse.Namespace,
    api: Any,
    pod_resources: PodResourcesClient,
    layout: Callable[[], NodeLayout | None],
    registry: CollectorRegistry | None = None,
    nics: Callable[[], Any] = lambda: None,
) -> list[web.RouteDef]:
    from gpupair.reporter.verification import VerifyService  # only the service mode needs it

    service = VerifyService(
        api=api,
        pod_resources=pod_resources,
        layout=layout,
        node_name=args.node_name,
        resource_name=args.resource_name,
        audience=args.token_audience,
        registry=registry,  # its counters show on the reporter's /metrics
        nics=nics,
    )
    return [web.post("/v1/verify", service.handle)]


# --- modes ----------------------------------------------------------------------------------


async def _api_client(args: argparse.Namespace) -> Any:
    from gpupair.kubeclient import kube  # kubernetes-asyncio takes a while to import; dry runs skip it

    return await kube.api_client(args.kubeconfig or None, args.context or None)  # KubeConfigError: exit 2


async def run_once(args: argparse.Namespace) -> int:
    topology = layout_source(args)
    metrics = ReporterMetrics()
    async with PodResourcesClient(args.pod_resources_socket) as client:
        allocations = allocation_source(args, client)
        api = None if args.dry_run else await _api_client(args)
        try:
            publisher = None if api is None else publisher_for(args, api)
            loop = ReporterLoop(topology, allocations, publisher, metrics, scan_interval=args.scan_interval,
                                layout_file="" if args.dry_run else args.layout_file,  # a dry run writes nothing
                                lease=None if api is None else lease_keeper(args, api),
                                dra=None if api is None else dra_node(args, api))
            discovery = await loop.refresh_topology()
            if discovery is None:
                print("gpupair reporter: no GPU layout (see the log)", file=sys.stderr)
                return EXIT_FAILED
            if isinstance(allocations, StaticAllocations):
                allocations.check(discovery.layout)
            guard = None if api is None else admission_guard(args, api)
            if not await policies_enforced(guard, asyncio.Event(), ONCE_POLICY_WAIT):
                print(f"gpupair reporter: not written: {guard.last_why}", file=sys.stderr)
                return EXIT_FAILED
            scan = await loop.scan_once()
            if scan is None:
                print("gpupair reporter: the scan failed (see the log)", file=sys.stderr)
                return EXIT_FAILED
            if args.dry_run:
                now = datetime.now(timezone.utc)
                annotations = scan.annotations(int(now.timestamp() * 1000), now)
                json.dump(annotations, sys.stdout, indent=2, sort_keys=True)
                sys.stdout.write("\n")
                return EXIT_OK
            assert publisher is not None
            if loop.last_outcome is None or not loop.last_outcome.wrote:
                print(f"gpupair reporter: not written: {publisher.last_error}", file=sys.stderr)
                return EXIT_FAILED
            return EXIT_OK
        finally:
            if api is not None:
                await api.close()


async def run_service(args: argparse.Namespace) -> int:
    topology = layout_source(args)
    metrics = ReporterMetrics()
    api = await _api_client(args)
    client = PodResourcesClient(args.pod_resources_socket)
    try:
        allocations = allocation_source(args, client)
        publisher = publisher_for(args, api)
        loop = ReporterLoop(topology, allocations, publisher, metrics, scan_interval=args.scan_interval,
                            layout_file=args.layout_file, lease=lease_keeper(args, api), dra=dra_node(args, api))
        if isinstance(allocations, StaticAllocations):
            discovery = await loop.refresh_topology()
            if discovery is not None:
                allocations.check(discovery.layout)
        guard = admission_guard(args, api)
        # No verdict is written before the policies are in force either: /v1/verify answers 503
        # (layout unknown) until then.
        layout = loop.layout if guard is None else (lambda: loop.layout() if guard.enforced else None)
        app = build_app(metrics.registry, loop.ready, verification_routes(args, api, client, layout, metrics.registry,
                                                                         loop.nics))
        stop, wake = asyncio.Event(), asyncio.Event()

        async def guarded(work: Callable[[], Awaitable[None]]) -> None:
            if await policies_enforced(guard, stop):
                await work()

        tasks = [asyncio.create_task(guarded(lambda: loop.run(stop, wake)), name="reporter-loop")]
        if args.checkpoint_file:
            watch = CheckpointWatch(args.checkpoint_file)
            tasks.append(asyncio.create_task(watch.run(wake.set, stop, args.checkpoint_poll), name="checkpoint"))
        if loop.dra is not None:
            from gpupair.reporter.dra_node import serve_verdicts

            tasks.append(asyncio.create_task(guarded(lambda: serve_verdicts(loop.dra, stop)), name="dra-verdicts"))
        log.info("reporter started", extra={"node": args.node_name, "layout": topology.description,
                                             "allocations": allocations.description,
                                             "lease": f"{args.lease_namespace}/{args.node_name}" if args.lease_namespace else "",
                                             "dra_driver": args.dra_driver,
                                             "annotation_refresh_s": publisher.heartbeat})
        try:
            await serve(app, args.host, args.port)  # returns on SIGTERM/SIGINT
        finally:
            stop.set()
            await asyncio.gather(*tasks, return_exceptions=True)
        return EXIT_OK
    finally:
        await client.close()
        await api.close()


def run(args: argparse.Namespace) -> int:
    setup_logging(args.log_level)
    started = time.perf_counter()
    try:
        check_args(args)
        code = asyncio.run(run_once(args) if args.once else run_service(args))
    except (LayoutFileError, UnknownDevicesError) as error:
        raise UsageError(str(error)) from None  # gpupair.command.cli prints it as argparse does: exit 2
    except NvmlUnavailable as error:
        print(f"gpupair reporter: {error}", file=sys.stderr)
        return EXIT_FAILED
    log.debug("reporter exiting", extra={"seconds": round(time.perf_counter() - started, 3)})
    return code
