"""`gpupair webhook`: the mutating admission webhook that adds the verifier to multi-GPU pods and
writes the placement intent into DRA claims as a constraint."""

from __future__ import annotations

import argparse

from gpupair.topology import limits
from gpupair.command.flags import (PORT, Range, UsageError, add_default_placement, add_gpu_device_classes,
                                   add_kube_flags, add_reporter_port, add_resource_name, add_tls_flags,
                                   add_token_audience,
                                   extended_resource, index_pairs, listen_address, object_names)
from gpupair.command.service import add_common_flags, add_flag
from gpupair.webhook.claim_defaults import DEFAULT_GPUS_PER_NUMA_NODE


def configure(parser: argparse.ArgumentParser) -> None:
    add_flag(parser, "--host", "0.0.0.0", "address to listen on", type=listen_address)
    add_flag(parser, "--port", 8443, "HTTPS port for /mutate, /healthz, /readyz, /metrics", bounds=PORT)
    add_tls_flags(parser, "/etc/gpupair/tls/tls.crt", "/etc/gpupair/tls/tls.key")
    add_flag(parser, "--min-gpus", 2, "inject the verifier into pods whose effective GPU request is at least this", bounds=Range(1, limits.MAX_GPUS))
    add_flag(parser, "--scheduler-name", "",
             "if set, multi-GPU pods that use the default scheduler are given this schedulerName")
    add_flag(parser, "--verifier-image", "ghcr.io/gpupair/gpupair:0.2.0",
             "image of the injected verifier sidecar (runs `gpupair verify`)")
    add_flag(parser, "--verifier-image-pull-secrets", "",
             "pull secrets for that image (comma-separated Secret names): added to the spec.imagePullSecrets of "
             "each pod given the verifier that does not name them (a Secret of that name must exist in the "
             "pod's namespace; empty: none)", type=object_names)
    add_reporter_port(parser)
    add_token_audience(parser, "audience of the verifier's projected token (the reporter's --token-audience)")
    add_resource_name(parser)
    add_default_placement(parser)
    add_gpu_device_classes(parser, "a ResourceClaim or ResourceClaimTemplate asking 2 or more of one gets the "
                                   "placement intent as a constraint")
    add_flag(parser, "--gpus-per-numa-node", DEFAULT_GPUS_PER_NUMA_NODE,
             "the most GPUs one NUMA node holds: a DRA request for more gets no NUMA constraint "
             "(no node could honour it; the extender judges it by the fewest NUMA nodes)",
             bounds=Range(2, limits.MAX_GPUS))
    add_flag(parser, "--claim-pod-resource", "",
             "if set (the dra component: gpupair.io/claim), pods with spec.resourceClaims request and limit "
             "zero of this extended resource, which only the extender's scheduler entry names: kube-scheduler "
             "then asks the extender about claim pods, and still not about other pods (a zero is never "
             "counted: without that entry they are placed as before)", type=extended_resource)
    add_flag(parser, "--node-links-file", "",
             "the nodes' measured links (the ConfigMap gpupair-node-links mounted, node-links.json), read when it "
             "changes: a claim asking gpupair.io/scope: nvlink gets, for a request of 2, one firstAvailable "
             "subrequest per NVLink pair of each class of nodes with one link matrix (none for an NVSwitch "
             "class; empty or unreadable: the links are unknown)")
    add_flag(parser, "--nvlink-device-attribute", "pciBusID",
             "the DRA driver's attribute the NVLink subrequests name devices by (resource.kubernetes.io/pciBusID, "
             "or the driver's index or uuid; uuid wherever the chosen one would also match an unbridged pair; "
             "NVIDIA's driver publishes no index since v25.12)", choices=("pciBusID", "index", "uuid"))
    add_flag(parser, "--nvlink-pairs", "",
             "override: GPU indices joined by NVLink bridges on every DRA node (0+1,2+3,...; at most 7 pairs), "
             "written by the driver's index instead of the measured links of --node-links-file "
             "(empty: no override)", type=index_pairs)
    add_flag(parser, "--claim-pod-asks", False,
             "plan a claim the resourceclaim controller makes from a template for a pod under that pod's "
             "gpupair.io/placement and gpupair.io/scope where the claim asks none: the webhook reads the pod "
             "(get pods; the dra component grants it and mounts a token); a read that fails within 2 s plans "
             "the claim without them")
    add_kube_flags(parser)
    add_common_flags(parser)


def run(args: argparse.Namespace) -> int:
    import asyncio

    from gpupair.decide.pod.intent import Intent
    from gpupair.command.service import setup_logging
    from gpupair.command.tls import serving_tls
    from gpupair.webhook.admission import InjectOptions
    from gpupair.webhook.cert_expiry import CertificateExpiry
    from gpupair.webhook.sidecar import SidecarOptions

    setup_logging(args.log_level)
    if not args.token_audience:
        raise UsageError("--token-audience must not be empty")
    if not (args.tls_cert_file and args.tls_private_key_file):
        raise UsageError("the webhook serves HTTPS only: --tls-cert-file and --tls-private-key-file are required")
    options = InjectOptions(
        sidecar=SidecarOptions(image=args.verifier_image, reporter_port=args.reporter_port,
                               token_audience=args.token_audience,
                               image_pull_secrets=args.verifier_image_pull_secrets),
        min_gpus=args.min_gpus,
        resource_name=args.resource_name,
        scheduler_name=args.scheduler_name or None,
        default_intent=Intent(args.default_placement),
        claims=claim_options(args),
        claim_pod_resource=args.claim_pod_resource,
    )
    tls = serving_tls(args.tls_cert_file, args.tls_private_key_file)  # both set: never None
    from prometheus_client import CollectorRegistry

    registry = CollectorRegistry()
    registry.register(CertificateExpiry(args.tls_cert_file))  # what the monitoring component alerts on
    asyncio.run(_serve(args, options, registry, tls))
    return 0


async def _serve(args: argparse.Namespace, options, registry, tls) -> None:
    from gpupair.command.service import serve
    from gpupair.webhook.app import create_app

    if not args.claim_pod_asks:
        await serve(create_app(options, registry), args.host, args.port, ssl_context=tls.context)
        return
    from gpupair.kubeclient import kube
    from gpupair.webhook.claim_owner import PodReader

    api = await kube.api_client(args.kubeconfig or None, args.context or None)  # KubeConfigError: exit 2
    try:
        await serve(create_app(options, registry, PodReader(api)), args.host, args.port, ssl_context=tls.context)
    finally:
        await api.close()


def claim_options(args: argparse.Namespace):
    from gpupair.webhook.claims import ClaimOptions

    from gpupair.webhook.node_links_file import NodeLinksFile

    source = NodeLinksFile(args.node_links_file, args.nvlink_device_attribute) if args.node_links_file else None
    try:
        return ClaimOptions(device_classes=args.gpu_device_classes, gpus_per_numa=args.gpus_per_numa_node,
                            nvlink_pairs=args.nvlink_pairs, nvlink_source=source)
    except ValueError as exc:
        raise UsageError(f"--nvlink-pairs: {exc}") from None
