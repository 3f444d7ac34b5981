"""`gpupair extender`: the kube-scheduler HTTP extender as a long-running service."""

from __future__ import annotations

import argparse
import asyncio
import functools
import gc
import logging
import re
from typing import TYPE_CHECKING

from gpupair.command.flags import (
    DURATION, PORT, add_default_placement, add_dra_driver, add_gpu_device_classes, add_kube_flags,
    add_lease_namespace, add_plans_namespace, add_resource_name, add_shared_resources, add_stale_after, add_tls_flags, listen_address,
)
from gpupair.command.service import add_common_flags, add_flag, run_loop, setup_logging

if TYPE_CHECKING:
    from gpupair.command.tls import ReloadingTLS

log = logging.getLogger("gpupair.extender")


def configure(parser: argparse.ArgumentParser) -> None:
    add_flag(parser, "--host", "0.0.0.0", "address to listen on", type=listen_address)
    add_flag(parser, "--port", 8888, "port to listen on", bounds=PORT)
    add_kube_flags(parser)
    add_resource_name(parser)
    add_stale_after(parser)
    add_lease_namespace(parser, "watched for freshness; '' to judge freshness from the reports alone")
    add_plans_namespace(parser, "the devices a plan frees are held for its pods until it ends ('' to hold none)")
    add_flag(parser, "--unreported", "fail",
             "nodes with no usable report (missing, undecodable, stale): 'fail' multi-GPU pods "
             "there with the reason, or 'pass' them unscored", choices=("fail", "pass"))
    add_flag(parser, "--policy", "aligned",
             "device-plugin allocation policy to plan with: aligned (NVIDIA best-effort) or naive",
             choices=("aligned", "naive"))
    add_flag(parser, "--score", "fragmentation",
             "how prioritize ranks nodes: fragmentation (where the cluster's workload loses the least GPU, CPU "
             "counted; every pod, CPU pods too, through the every-pod entry, prioritizeVerb prioritize-every-pod) or "
             "best-fit (the NUMA node the set breaks least, then its link; GPU pods only)",
             choices=("fragmentation", "best-fit"))
    add_shared_resources(parser, "under --score fragmentation a pod asking one counts as a GPU pod in the "
                         "cluster's workload")
    add_flag(parser, "--reservation-ttl", 120.0,
             "seconds a reservation lasts if no report shows its devices taken and the pod stays", bounds=DURATION)
    add_flag(parser, "--annotate-plan", False,
             "write the planned set on the bound pod as gpupair.io/planned (via the Binding)")
    add_flag(parser, "--node-cache", True,
             "list+watch nodes for NodeNames mode (nodeCacheCapable: true)")
    add_flag(parser, "--api-timeout", 4.0,
             "seconds to wait for the API server during bind (keep below the scheduler's httpTimeout)", bounds=DURATION)
    add_tls_flags(parser)  # empty: plain HTTP
    add_default_placement(parser)
    add_dra_driver(parser, "nodes it publishes are judged from their ResourceSlices and claims ('' for none)", on=False)
    add_gpu_device_classes(parser, "what a pod's claims ask of them counts as its GPU request")
    add_flag(parser, "--rdma-resources", "rdma/hca_shared_devices_a,nvidia.com/rdma",
             "extended resources of RDMA NICs (comma-separated): a pod requesting one asks for GPUs near a NIC")
    add_flag(parser, "--nic-level", "PXB",
             "the farthest GPU x NIC link a pod asking for the network accepts, unless its gpupair.io/nic-level says",
             choices=("PIX", "PXB", "PHB", "NODE"))
    add_flag(parser, "--dra-nic-drivers", "",
             "RDMA DRA drivers (comma-separated) whose ResourceSlices publish the NICs, on nodes whose reporter "
             "publishes none: links inferred from pcieRoot and numaNode")
    add_flag(parser, "--node-links-configmap", "",
             "publish the nodes' gpupair.io/topology into this ConfigMap ([namespace/]name; namespace default: "
             "this pod's), key node-links.json, for the webhook's --node-links-file: written when the nodes' links "
             "change (at most once per 2 s), never on a schedule; needs get and patch on it (the dra component: "
             "gpupair-node-links; empty: not published)", type=configmap_name)
    add_common_flags(parser)


def configmap_name(text: str) -> tuple[str, str] | None:
    """``[namespace/]name`` -> (namespace, name); the namespace defaults to this pod's."""
    from gpupair.kubewire import leases  # standard library only

    text = text.strip()
    if not text:
        return None
    namespace, _, name = text.rpartition("/")
    dns = re.compile(r"[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?")
    if not dns.fullmatch(name) or (namespace and not re.fullmatch(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?", namespace)):
        raise argparse.ArgumentTypeError(f"expected [namespace/]name of a ConfigMap (lower-case DNS names), got {text!r}")
    return namespace or leases.own_namespace(), name


def run(args: argparse.Namespace) -> int:
    from gpupair.command.tls import serving_tls

    setup_logging(args.log_level)
    tls = serving_tls(args.tls_cert_file, args.tls_private_key_file)  # before any API call: fail fast
    return run_loop(_main(args, tls))


def freeze_long_lived() -> None:
    """Move what exists now (the node cache after its first list: a few hundred thousand
    objects at 5,000 nodes) out of the garbage collector's sight. Otherwise every full
    collection walks them all, and a request that triggers one waits tens of milliseconds."""
    gc.collect()
    gc.freeze()


async def _freeze_when_ready(extender, poll: float = 0.1) -> None:
    """Freeze once the node cache is listed, and only then report ready: the collection takes
    tens of milliseconds (more at 5,000 nodes), and a scheduler already calling would wait them."""
    while not extender.node_cache.ready:
        await asyncio.sleep(poll)
    freeze_long_lived()
    extender.settled = True
    log.info("node cache frozen for the garbage collector", extra={"frozen": gc.get_freeze_count()})


async def _dra_watches(api, dra, restarts) -> list:
    """List+watch the driver's ResourceSlices and every ResourceClaim, where the API serves
    resource.k8s.io/v1; on a cluster without it no node has a DRA picture."""
    from kubernetes_asyncio import client as k8s

    from gpupair.kubeclient.list_watch import ListWatch
    from gpupair.kubeclient import kube

    if not await kube.serves(api, "resource.k8s.io", "v1"):
        log.info("the API serves no resource.k8s.io/v1: every node is judged by its reporter")
        dra.mark_unserved()
        return []
    resource = k8s.ResourceV1Api(api)
    # One driver: the server filters; with RDMA drivers too, every slice comes and the handler picks.
    slices = (functools.partial(resource.list_resource_slice, field_selector=f"spec.driver={dra.driver}")
              if not dra.nic_drivers else resource.list_resource_slice)
    return [
        ListWatch("resourceslices", slices, dra.slices,
                  on_restart=lambda why: restarts.labels("resourceslices", why).inc()),
        ListWatch("resourceclaims", resource.list_resource_claim_for_all_namespaces, dra.claims,
                  on_restart=lambda why: restarts.labels("resourceclaims", why).inc()),
    ]


async def _main(args: argparse.Namespace, tls: ReloadingTLS | None) -> int:
    from kubernetes_asyncio import client as k8s

    from gpupair.extender.app import assemble, build_app
    from gpupair.extender.http_server import serve_http
    from gpupair.decide.judge.decisions import Decider, Unreported
    from gpupair.kubeclient.list_watch import ListWatch
    from gpupair.kubeclient import kube
    from gpupair.decide.pod.intent import Intent
    from gpupair.decide.devices.policies import policy_named

    api = await kube.api_client(args.kubeconfig or None, args.context or None)  # KubeConfigError: exit 2
    decider = Decider(policy=policy_named(args.policy), unreported=Unreported(args.unreported))
    extender = assemble(
        decider=decider,
        resource=args.resource_name,
        api=api,
        stale_after=args.stale_after or None,
        node_cache=args.node_cache,
        reservation_ttl=args.reservation_ttl,
        annotate_plan=args.annotate_plan,
        default_intent=Intent(args.default_placement),
        api_timeout=args.api_timeout,
        heartbeats=bool(args.lease_namespace),
        dra_driver=args.dra_driver,
        gpu_device_classes=args.gpu_device_classes,
        rdma_resources=tuple(name.strip() for name in args.rdma_resources.split(",") if name.strip()),
        nic_level=args.nic_level,
        dra_nic_drivers=frozenset(name.strip() for name in args.dra_nic_drivers.split(",") if name.strip()),
        fragmentation=args.score == "fragmentation",
        shared_resources=tuple(sorted(args.shared_resources)),
        defrag_plans=bool(args.plans_namespace),
    )
    core = k8s.CoreV1Api(api)
    restarts = extender.metrics.watch_restarts
    watches = []
    publisher = None
    node_handlers = [extender.node_cache] if extender.node_cache is not None else []
    if args.node_links_configmap:
        from gpupair.extender.node_links_publisher import NodeLinks, NodeLinksPublisher

        links = NodeLinks()
        node_handlers.append(links)
        publisher = NodeLinksPublisher(api, links, *args.node_links_configmap)
    if node_handlers:
        from gpupair.kubeclient.list_watch import Handlers

        watches.append(ListWatch("nodes", core.list_node, Handlers(*node_handlers),
                                 on_restart=lambda why: restarts.labels("nodes", why).inc()))
    if extender.heartbeats is not None:
        from gpupair.extender.cache.node_leases import list_leases

        watches.append(ListWatch("leases", list_leases(api, args.lease_namespace), extender.heartbeats,
                                 on_restart=lambda why: restarts.labels("leases", why).inc()))
    if extender.defrag_holds is not None:
        from gpupair.extender.cache.defrag_holds import list_plans

        watches.append(ListWatch("defrag-plans", list_plans(api, args.plans_namespace), extender.defrag_holds,
                                 on_restart=lambda why: restarts.labels("defrag-plans", why).inc()))
    if extender.dra is not None:
        watches.extend(await _dra_watches(api, extender.dra, restarts))
    if extender.pod_watch is not None:
        watches.append(ListWatch("pods", core.list_pod_for_all_namespaces, extender.pod_watch,
                                 on_restart=lambda why: restarts.labels("pods", why).inc(),
                                 progress=extender.pod_watch.progress))
    tasks = [asyncio.create_task(w.run(), name=f"watch-{w.resource}") for w in watches]
    if publisher is not None:
        tasks.append(asyncio.create_task(publisher.run(), name="node-links"))
    if extender.node_cache is not None:
        extender.settled = False  # before serving: /readyz waits for the freeze
        tasks.append(asyncio.create_task(_freeze_when_ready(extender)))
    try:
        await serve_http(build_app(extender), args.host, args.port, ssl_context=None if tls is None else tls.context)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await extender.binder.close()
        await api.close()
    return 0
