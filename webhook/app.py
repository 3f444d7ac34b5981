"""The webhook's HTTP side: POST /mutate, health and metrics.

It never denies a pod. A body that is not an AdmissionReview gets HTTP 400 and an
AdmissionReview whose response holds a Status 400 with the reason (the apiserver then applies
failurePolicy, which gpupair deploys as Ignore); anything else is allowed, with a patch when the
pod should carry the verifier. An unexpected error while planning is logged and answered as an
allowed review without a patch: the webhook's own trouble must not stop workloads, and must not
look like a server failure either.
"""

from __future__ import annotations

import logging
import time

from aiohttp import web
from prometheus_client import CollectorRegistry, Counter, Histogram

from gpupair.service import add_health_routes
from webhook.admission import (
    InjectOptions,
    ReviewError,
    admit,
    parse_review,
    refusal_review,
    response_review,
)

log = logging.getLogger("gpupair.webhook")

MAX_BODY_BYTES = 3 * 1024 * 1024  # the apiserver caps objects at 1.5 MiB; a review holds up to two


class Metrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.reviews = Counter(
            "gpupair_webhook_reviews",
            "Admission reviews answered, by outcome",
            ["outcome"],
            registry=registry,
        )
        self.seconds = Histogram(
            "gpupair_webhook_review_seconds",
            "Time to answer one admission review",
            registry=registry,
            buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25),
        )


def create_app(options: InjectOptions, registry: CollectorRegistry | None = None) -> web.Application:
    registry = registry or CollectorRegistry()
    metrics = Metrics(registry)
    app = web.Application(client_max_size=MAX_BODY_BYTES)

    async def mutate(request: web.Request) -> web.Response:
        started = time.perf_counter()
        try:
            return await _mutate(request, options, metrics)
        finally:
            metrics.seconds.observe(time.perf_counter() - started)

    app.router.add_post("/mutate", mutate)
    add_health_routes(app, registry)
    return app


def _bad_request(reason: str, metrics: Metrics) -> web.Response:
    metrics.reviews.labels("malformed").inc()
    log.warning("malformed admission review", extra={"reason": reason})
    return web.json_response(refusal_review(reason), status=400)


async def _mutate(request: web.Request, options: InjectOptions, metrics: Metrics) -> web.Response:
    try:
        body = await request.read()
    except web.HTTPRequestEntityTooLarge:
        return _bad_request(f"body over {MAX_BODY_BYTES} bytes", metrics)
    try:
        admission = parse_review(body)
    except ReviewError as exc:
        return _bad_request(str(exc), metrics)
    try:
        plan, warnings = admit(admission, options)
    except Exception:  # a bug here must not block pods: let this one through unchanged
        log.exception("planning the patch failed; pod allowed unchanged", extra={"uid": admission.uid})
        metrics.reviews.labels("error").inc()
        return web.json_response(response_review(admission.uid, []))
    metrics.reviews.labels(plan.outcome).inc()
    pod_meta = admission.object.get("metadata") if isinstance(admission.object, dict) else None
    pod_meta = pod_meta if isinstance(pod_meta, dict) else {}
    log.info(
        "admission review",
        extra={
            "uid": admission.uid,
            "namespace": admission.namespace,
            # Pods made by controllers have only generateName at admission time.
            "pod": admission.name or pod_meta.get("name") or f"{pod_meta.get('generateName', '')}*",
            "operation": admission.operation,
            "outcome": plan.outcome,
            "gpus": plan.gpus,
            "routed": plan.routed,
            "ops": len(plan.ops),
        },
    )
    return web.json_response(response_review(admission.uid, plan.ops, warnings))
