"""`gpupair webhook`: the mutating admission webhook that adds the verifier to multi-GPU pods."""

from __future__ import annotations

import argparse

from gpupair.pod_request import DEFAULT_RESOURCE
from gpupair.service import add_common_flags, add_flag, add_placement_flag


def configure(parser: argparse.ArgumentParser) -> None:
    add_flag(parser, "--host", "0.0.0.0", "address to listen on")
    add_flag(parser, "--port", 8443, "HTTPS port for /mutate, /healthz, /readyz, /metrics")
    add_flag(parser, "--tls-cert", "/etc/gpupair/tls/tls.crt", "serving certificate (PEM); reloaded when it changes")
    add_flag(parser, "--tls-key", "/etc/gpupair/tls/tls.key", "serving key (PEM); reloaded when it changes")
    add_flag(parser, "--min-gpus", 2, "inject the verifier into pods whose effective GPU request is at least this")
    add_flag(parser, "--scheduler-name", "",
             "if set, multi-GPU pods that use the default scheduler are given this schedulerName")
    add_flag(parser, "--verifier-image", "ghcr.io/gpupair/gpupair:0.1.0",
             "image of the injected verifier sidecar (runs `gpupair verify`)")
    add_flag(parser, "--reporter-port", 9400, "port the node reporter serves /v1/verify on (host network)")
    add_flag(parser, "--resource-name", DEFAULT_RESOURCE, "extended resource that counts as a GPU")
    add_placement_flag(parser)
    add_common_flags(parser)


def run(args: argparse.Namespace) -> int:
    import asyncio

    from gpupair.service import serve, setup_logging
    from gpupair.intent import Intent
    from webhook.admission import InjectOptions
    from webhook.app import create_app
    from webhook.cert_expiry import CertificateExpiry
    from webhook.sidecar import SidecarOptions
    from webhook.tls import ReloadingTLS

    setup_logging(args.log_level)
    if args.min_gpus < 1:
        raise SystemExit("--min-gpus must be at least 1")
    if not 0 < args.reporter_port < 65536:
        raise SystemExit("--reporter-port must be a TCP port (1-65535)")
    options = InjectOptions(
        sidecar=SidecarOptions(image=args.verifier_image, reporter_port=args.reporter_port),
        min_gpus=args.min_gpus,
        resource_name=args.resource_name,
        scheduler_name=args.scheduler_name or None,
        default_intent=Intent(args.default_placement),
    )
    try:
        tls = ReloadingTLS(args.tls_cert, args.tls_key)
    except (OSError, ValueError) as exc:
        raise SystemExit(f"cannot load TLS certificate {args.tls_cert} / key {args.tls_key}: {exc}") from None
    from prometheus_client import CollectorRegistry

    registry = CollectorRegistry()
    registry.register(CertificateExpiry(args.tls_cert))  # what the monitoring component alerts on
    asyncio.run(serve(create_app(options, registry), args.host, args.port, ssl_context=tls.context))
    return 0
