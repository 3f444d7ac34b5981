"""`gpupair defrag --plan`: the moves that would free a close set for each pod waiting for GPUs,
and why where there are none. A dry run: it lists the cluster once and changes nothing.

`gpupair defrag --act`: the service that carries plans out (defrag/actor.py), every
``--interval`` seconds, serving /healthz, /readyz (after its first round) and /metrics.

Only pods that opted in are ever planned to move (defrag/live_fleet.py). Exit status: 0 shown
(or the service stopped by SIGTERM); 1 the cluster could not be asked; 2 bad flags or kubeconfig.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
from datetime import datetime, timezone

from gpupair.command.flags import (
    DURATION, Failure, Range, UsageError, add_dra_driver, add_gpu_device_classes, add_kube_flags, add_lease_namespace,
    add_log_level, add_plans_namespace, add_resource_name, add_shared_resources, add_stale_after,
)
from gpupair.command.flags import PORT, listen_address
from gpupair.command.service import add_flag

OUTPUTS = ("text", "json")
log = logging.getLogger("gpupair.defrag")


def configure(parser: argparse.ArgumentParser) -> None:
    add_flag(parser, "--plan", False, "print the moves that would free a close set for each waiting GPU pod, "
                                      "and change nothing (a dry run)")
    add_flag(parser, "--act", False, "run as a service that carries the plans out: evicts the planned pods through "
                                     "the Eviction API, with the freed sets held by the extender (docs/defrag.md)")
    add_flag(parser, "--output", "text", "--plan: text or json", choices=OUTPUTS, short="-o")
    add_flag(parser, "--max-moves", 4, "most pods moved for one waiting pod", bounds=Range(1, 16))
    add_flag(parser, "--interval", 30.0, "--act: seconds between rounds", bounds=DURATION)
    add_flag(parser, "--moves-per-minute", 4.0, "--act: most evictions a minute, all plans together",
             bounds=Range(0.1, 600))
    add_flag(parser, "--hold-seconds", 120.0, "--act: how long the extender holds a plan's freed set and its moved "
                                              "pods' places; a plan not placed by then is dropped", bounds=DURATION)
    add_plans_namespace(parser, "--act writes the plans there for the extender to hold their GPUs")
    add_flag(parser, "--host", "0.0.0.0", "--act: address for /healthz, /readyz and /metrics", type=listen_address)
    add_flag(parser, "--port", 8084, "--act: port for the same", bounds=PORT)
    add_stale_after(parser, "; as the extender's --stale-after")
    add_lease_namespace(parser, "a heartbeat newer than the report ('' to skip)")
    add_resource_name(parser)
    add_shared_resources(parser, "a pod holding them is a share pod: it moves as its part of one GPU")
    add_dra_driver(parser, "nodes it publishes are planned on from their ResourceSlices and claims ('' to skip)")
    add_gpu_device_classes(parser, "what a waiting pod's claims ask of them counts as its GPUs")
    add_flag(parser, "--request-timeout", 30.0, "seconds each list call may take", bounds=DURATION)
    add_kube_flags(parser)
    add_log_level(parser)


def run(args: argparse.Namespace) -> int:
    if args.plan == args.act:
        raise UsageError("say --plan (a dry run) or --act (the service), one of them")
    if args.act:
        from gpupair.command.service import run_loop, setup_logging

        setup_logging(args.log_level)
        return run_loop(_act(args))
    from gpupair.decide.defrag.planner import Planner, SearchBound
    from gpupair.defrag.live_fleet import live_fleet
    from gpupair.defrag.plan_view import defrag_view, render_text
    from gpupair.status.build import Options

    listing, namespaces, budgets, unseen = asyncio.run(_list(args))
    for why in unseen:
        log.warning(why)
    now = datetime.now(timezone.utc)
    fleet = live_fleet(listing, now, Options(stale_after=args.stale_after, resource=args.resource_name,
                                             gpu_classes=args.gpu_device_classes),
                       namespaces, budgets, tuple(sorted(args.shared_resources)))
    answers = Planner(fleet.rooms, fleet.placed, SearchBound(moves=args.max_moves)).plan_all(fleet.waiting)
    view = defrag_view(fleet, answers, now)
    sys.stdout.write(view.model_dump_json() + "\n" if args.output == "json" else render_text(view))
    return 0


async def _act(args: argparse.Namespace) -> int:
    from aiohttp import web

    from gpupair.command.service import add_health_routes, serve
    from gpupair.defrag.actor import ActOptions, DefragActor, run_rounds
    from gpupair.defrag.metrics import DefragMetrics
    from gpupair.kubeclient.kube import api_client
    from gpupair.status.build import Options

    metrics = DefragMetrics()
    api = await api_client(args.kubeconfig or None, args.context or None)
    options = ActOptions(plans_namespace=args.plans_namespace, hold_seconds=args.hold_seconds,
                         moves_per_minute=args.moves_per_minute, max_moves=args.max_moves,
                         status=Options(stale_after=args.stale_after, resource=args.resource_name,
                                        gpu_classes=args.gpu_device_classes),
                         shared=tuple(sorted(args.shared_resources)))
    actor = DefragActor(api, options, metrics, lambda: _list_with(api, args))
    app = web.Application()
    add_health_routes(app, metrics.registry, ready=lambda: actor.rounds > 0)
    stop = asyncio.Event()
    log.info("defrag acting", extra={"plans": f"{args.plans_namespace}/gpupair-defrag-plans",
                                     "moves_per_minute": args.moves_per_minute, "hold_seconds": args.hold_seconds})
    rounds = asyncio.create_task(run_rounds(actor, args.interval, stop), name="defrag-rounds")
    try:
        await serve(app, args.host, args.port)  # returns on SIGTERM
    finally:
        stop.set()
        await asyncio.gather(rounds, return_exceptions=True)
        await api.close()
    return 0


async def _list(args: argparse.Namespace):
    from gpupair.kubeclient.kube import api_client

    api = await api_client(args.kubeconfig or None, args.context or None)
    async with api:
        return await _list_with(api, args)


async def _list_with(api, args: argparse.Namespace):
    """The cluster as `gpupair status` lists it (status/fetch.py), the namespaces labelled movable
    and the PodDisruptionBudgets. Without nodes or pods there is nothing to plan; without the
    other two the plan is made on what was seen, and a warning says what was not."""
    from kubernetes_asyncio import client as k8s

    from gpupair.defrag.live_fleet import MOVABLE_KEY
    from gpupair.kubeclient.kube import describe_error
    from gpupair.status.fetch import NodesNotVisible, list_cluster, read_items

    listing, namespaces, budgets = await asyncio.gather(
        list_cluster(api, timeout=args.request_timeout, lease_namespace=args.lease_namespace,
                     dra_driver=args.dra_driver, with_events=False),
        asyncio.wait_for(read_items(k8s.CoreV1Api(api).list_namespace, label_selector=f"{MOVABLE_KEY}=true"),
                         args.request_timeout),
        asyncio.wait_for(read_items(k8s.PolicyV1Api(api).list_pod_disruption_budget_for_all_namespaces),
                         args.request_timeout),
        return_exceptions=True)
    if isinstance(listing, BaseException):
        if isinstance(listing, NodesNotVisible):
            raise Failure(str(listing)) from None
        raise Failure(describe_error(listing)) from None
    if listing.pods is None:
        raise Failure(next(seen.reason for seen in listing.unseen if seen.resource == "pods"))
    unseen = [seen.reason for seen in listing.unseen]
    if isinstance(namespaces, BaseException):
        unseen.append(f"cannot list namespaces labelled {MOVABLE_KEY}=true: {describe_error(namespaces)}; "
                      "only pods annotated so may move")
        namespaces = []
    if isinstance(budgets, BaseException):
        unseen.append(f"cannot list PodDisruptionBudgets: {describe_error(budgets)}; the plan does not avoid "
                      "pods they protect (an eviction still respects them)")
        budgets = []
    names = [str((n.get("metadata") or {}).get("name") or "") for n in namespaces]
    return listing, names, budgets, unseen
