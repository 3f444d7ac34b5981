"""The webhook's HTTP side: POST /mutate, health and metrics.

The same paths serve pods and DRA ResourceClaims and ResourceClaimTemplates (deploy/components/dra
adds the rules for those); webhook.admission.admit tells them apart by the review's kind.

It denies only an object whose ``gpupair.io/placement`` is not a value gpupair knows, with a
message naming the allowed ones. ``/mutate/placement/VALUE`` is how the apiserver tells it a
namespace's default placement: deploy/ has one webhook entry per value of the namespace label
``gpupair.io/placement``, each selecting its namespaces and calling its own path (a webhook
service path may hold no query), so the webhook reads no Namespace from the API.
``/mutate/scope/VALUE`` likewise carries the namespace label ``gpupair.io/scope``: those entries
only record it on a pod, claim or template that asks no scope of its own.

A claim the resourceclaim controller made from a template for a pod is planned under that pod's
own ``gpupair.io/placement`` and ``gpupair.io/scope`` where the claim asks none: with ``pods``
(webhook.claim_owner, ``--claim-pod-asks``) the webhook reads the pod; a read that fails plans
the claim as if the pod asked nothing.

A body that is not an AdmissionReview gets HTTP 400 and an AdmissionReview whose response
holds a Status 400 with the reason (the apiserver then applies failurePolicy, which gpupair
deploys as Ignore); anything else is allowed, with a patch when the pod should carry the
verifier. An unexpected error while planning is logged and answered as an allowed review
without a patch: the webhook's own trouble must not stop workloads, and must not look like a
server failure either.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING

from aiohttp import web
from prometheus_client import CollectorRegistry, Counter, Histogram

from gpupair.decide.pod.intent import Intent, IntentError, parse_intent
from gpupair.decide.pod.scope import Scope, parse_scope
from gpupair.command.service import add_health_routes
from gpupair.webhook import claims
from gpupair.webhook.admission import (
    InjectOptions,
    ReviewError,
    admit,
    admit_scope,
    parse_review,
    refusal_review,
    response_review,
)

if TYPE_CHECKING:  # the API client is imported only where the webhook reads claims' pods
    from gpupair.webhook.claim_owner import PodReader

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


def create_app(options: InjectOptions, registry: CollectorRegistry | None = None,
               pods: PodReader | None = None) -> web.Application:
    registry = registry or CollectorRegistry()
    metrics = Metrics(registry)
    app = web.Application(client_max_size=MAX_BODY_BYTES)

    async def mutate(request: web.Request) -> web.Response:
        started = time.perf_counter()
        try:
            return await _mutate(request, options, metrics, pods)
        finally:
            metrics.seconds.observe(time.perf_counter() - started)

    app.router.add_post("/mutate", mutate)
    app.router.add_post("/mutate/placement/{placement}", mutate)
    app.router.add_post("/mutate/scope/{scope}", mutate)
    add_health_routes(app, registry)
    return app


def _bad_request(reason: str, metrics: Metrics) -> web.Response:
    metrics.reviews.labels("malformed").inc()
    log.warning("malformed admission review", extra={"reason": reason})
    return web.json_response(refusal_review(reason), status=400)


async def _mutate(request: web.Request, options: InjectOptions, metrics: Metrics,
                  pods: PodReader | None) -> web.Response:
    try:
        body = await request.read()
    except web.HTTPRequestEntityTooLarge:
        return _bad_request(f"body over {MAX_BODY_BYTES} bytes", metrics)
    try:
        admission = parse_review(body)
    except ReviewError as exc:
        return _bad_request(str(exc), metrics)
    namespace_intent, namespace_scope = _namespace_intent(request), _namespace_scope(request)
    owner = _claim_owner(admission) if pods is not None else None
    pod = None if owner is None else await pods.annotations(admission.namespace, *owner)
    try:
        if namespace_scope is not None:
            plan, warnings = admit_scope(admission, namespace_scope, pod)
        else:
            plan, warnings = admit(admission, options, namespace_intent, pod)
    except Exception:  # a bug here must not block pods: let this one through unchanged
        log.exception("planning the patch failed; object allowed unchanged", extra={"uid": admission.uid})
        metrics.reviews.labels("error").inc()
        return web.json_response(response_review(admission.uid, []))
    metrics.reviews.labels(plan.outcome).inc()
    meta = admission.object.get("metadata") if isinstance(admission.object, dict) else None
    meta = meta if isinstance(meta, dict) else {}
    # Objects made by controllers (a Job's pods, a pod's claims) have only generateName at admission.
    name = admission.name or meta.get("name") or f"{meta.get('generateName', '')}*"
    if plan.claim is None:
        what = {"pod": name, "gpus": plan.gpus, "routed": plan.routed, "marked": plan.marked}
    else:
        what = {"kind": admission.kind.kind, "claim": name, "gpus": plan.gpus,
                "requests": list(plan.claim.changed), "left": plan.claim.left,
                **({"pod": owner[0], "pod_read": pod is not None} if owner else {})}
    log.info(
        "admission review",
        extra={
            "uid": admission.uid,
            "namespace": admission.namespace,
            **what,
            "operation": admission.operation,
            "outcome": plan.outcome,
            "placement": plan.placement,
            "ops": len(plan.ops),
            **({"refused": plan.refusal} if plan.refusal else {}),
        },
    )
    return web.json_response(response_review(admission.uid, plan.ops, warnings, plan.refusal))


def _claim_owner(admission) -> tuple[str, str] | None:
    """(name, uid) of the pod a ResourceClaim being created was made for, if it was."""
    kind = admission.kind
    if admission.subResource or admission.operation != "CREATE" or not claims.is_claim_kind(
            kind.group, kind.version, kind.kind, admission.resource.resource):
        return None
    return claims.owner_pod(admission.object, kind.kind)


def _namespace_scope(request: web.Request) -> Scope | None:
    """The namespace's default scope the calling webhook entry carries in its path, if any."""
    raw = request.match_info.get("scope")
    if raw is None:
        return None
    try:
        return parse_scope(raw)
    except ValueError as exc:  # a MutatingWebhookConfiguration mistake: nothing is written
        log.warning("ignoring a bad namespace scope in the webhook path", extra={"error": str(exc)})
        return None


def _namespace_intent(request: web.Request) -> Intent | None:
    """The namespace default the calling webhook entry carries in its path, if any."""
    raw = request.match_info.get("placement")
    if raw is None:
        return None
    try:
        return parse_intent(raw, "/mutate/placement/")
    except IntentError as exc:  # a MutatingWebhookConfiguration mistake: the cluster default applies
        log.warning("ignoring a bad namespace placement in the webhook path", extra={"error": str(exc)})
        return None
