"""`gpupair defrag --plan`: the moves that would free a close set for each pod waiting for GPUs,
and why where there are none. A dry run: it lists the cluster once and changes nothing.

Only pods that opted in are ever planned to move (defrag/live_fleet.py). Exit status: 0 shown;
1 the cluster could not be asked; 2 bad flags or kubeconfig.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
from datetime import datetime, timezone

from gpupair.command.flags import (
    DURATION, Failure, Range, UsageError, add_dra_driver, add_gpu_device_classes, add_kube_flags, add_lease_namespace,
    add_log_level, add_resource_name, add_shared_resources, add_stale_after,
)
from gpupair.command.service import add_flag

OUTPUTS = ("text", "json")
log = logging.getLogger("gpupair.defrag")


def configure(parser: argparse.ArgumentParser) -> None:
    add_flag(parser, "--plan", False, "print the moves that would free a close set for each waiting GPU pod, "
                                      "and change nothing (the only mode of this command)")
    add_flag(parser, "--output", "text", "text or json", choices=OUTPUTS, short="-o")
    add_flag(parser, "--max-moves", 4, "most pods moved for one waiting pod", bounds=Range(1, 16))
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
    if not args.plan:
        raise UsageError("say --plan: this command only previews the moves")
    from gpupair.decide.defrag.planner import Planner, SearchBound
    from gpupair.defrag.live_fleet import live_fleet
    from gpupair.defrag.view import defrag_view, render_text
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


async def _list(args: argparse.Namespace):
    """The cluster as `gpupair status` lists it (status/fetch.py), the namespaces labelled movable
    and the PodDisruptionBudgets. Without nodes or pods there is nothing to plan; without the
    other two the plan is made on what was seen, and a warning says what was not."""
    from kubernetes_asyncio import client as k8s

    from gpupair.defrag.live_fleet import MOVABLE_KEY
    from gpupair.kubeclient.kube import api_client, describe_error
    from gpupair.status.fetch import NodesNotVisible, list_cluster, read_items

    api = await api_client(args.kubeconfig or None, args.context or None)
    async with api:
        try:
            listing, namespaces, budgets = await asyncio.gather(
                list_cluster(api, timeout=args.request_timeout, lease_namespace=args.lease_namespace,
                             dra_driver=args.dra_driver, with_events=False),
                asyncio.wait_for(read_items(k8s.CoreV1Api(api).list_namespace, label_selector=f"{MOVABLE_KEY}=true"),
                                 args.request_timeout),
                asyncio.wait_for(read_items(k8s.PolicyV1Api(api).list_pod_disruption_budget_for_all_namespaces),
                                 args.request_timeout),
                return_exceptions=True)
        except NodesNotVisible as error:
            raise Failure(str(error)) from None
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
