"""POST /v1/verify on the node reporter: a pod proves who it is, the reporter does the rest.

The caller (the injected ``gpupair verify`` sidecar) sends only its projected token for audience
``gpupair-reporter``. The reporter

1. confirms the token with a TokenReview and takes the pod's identity from the review
   (never from the request), refusing tokens for other audiences, non-pod tokens, tokens
   without a node claim and pods on other nodes;
2. reads the pod from the API and checks it is that pod (same UID) and bound to this node (the
   review itself already rejects a token whose pod is deleted or replaced: 401);
3. asks the kubelet (PodResources) which devices the pod's containers hold, maps them to this
   node's layout and classifies the set (gpupair.decide.judge.verdict.classify), against the extender's
   plan when the pod carries one, and against the placement intent the pod asked (its
   ``gpupair.io/placement``, which the webhook wrote at admission; a bad value counts as
   ``required``, logged);
4. writes the verdict annotations with its own credentials, raises a Warning Event on FAIL,
   and answers with the verdict.

So no pod can write another pod's verdict, or choose its own: a pod can only trigger the
verification of itself, and the facts come from the kubelet and the reporter.

Wire: the answer is JSON. 200: ``kind: Verification`` with ``pod``, ``node``, ``deviceIds``,
``verdict``, ``annotations`` and ``tsvRow`` (the seed's TSV row). Errors: ``kind: Status`` with
``code``, ``reason`` and ``message``; 400 for a body that is neither empty nor a JSON object,
401/403 for a caller that is not proven, 503 (with Retry-After) while something needed is not
there yet, 429 when too many calls are in flight.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any, Protocol

from aiohttp import web
from kubernetes_asyncio import client as k8s
from kubernetes_asyncio.client.exceptions import ApiException
from prometheus_client import CollectorRegistry, Counter

from gpupair.decide.judge import verdict

from gpupair.kubewire import json_body
from gpupair.decide.pod.intent import pod_intent
from gpupair.decide.pod.scope import pod_scope
from gpupair.kubeclient.kube import create_event, patch_annotations
from gpupair.topology.layout import NodeLayout
from gpupair.topology.nics import NicLayout
from gpupair.reporter.allocations import PodNotFoundError, PodResourcesError, device_indices
from gpupair.reporter.identity import PodIdentity, Refused, bearer_token, pod_identity, review_token

log = logging.getLogger("gpupair.reporter.verify")

API_VERSION = "gpupair.io/v1"
AUDIENCE = "gpupair-reporter"
COMPONENT = "gpupair-reporter"
FAIL_REASON = "GPUPlacementFailed"
PHASE = "Running"  # the sidecar runs, so the pod does: the seed's phase column
ROUND = "-"  # the seed numbered rounds of test pods; a live pod has none
_REASONS = {400: "BadRequest", 401: "Unauthorized", 403: "Forbidden", 429: "TooManyRequests",
            500: "InternalError", 503: "ServiceUnavailable"}


class PodDeviceSource(Protocol):
    async def pod_devices(self, namespace: str, name: str, resource_name: str = ...) -> list[str]: ...


async def read_body(request: web.Request) -> None:
    """The token is the whole request, yet the body must be empty or a JSON object (the sidecar
    sends ``{}``): a caller sending anything else gets a clear 400 before any TokenReview."""
    try:
        body = await request.read()
    except web.HTTPRequestEntityTooLarge as exc:
        raise Refused(400, f"body too large: {exc.text}") from None
    if not body.strip():
        return
    try:
        value = json_body.decode(body)
    except json_body.JSONBodyError as exc:
        raise Refused(400, str(exc)) from None
    if not isinstance(value, dict):
        raise Refused(400, f"body must be empty or a JSON object, got {type(value).__name__}")


def status_body(code: int, message: str) -> dict[str, Any]:
    return {"apiVersion": API_VERSION, "kind": "Status", "code": code,
            "reason": _REASONS.get(code, "Error"), "message": message}


class VerifyService:
    """The reporter side of verification; wire it as ``web.post('/v1/verify', service.handle)``."""

    def __init__(
        self,
        api: k8s.ApiClient,
        pod_resources: PodDeviceSource,
        layout: Callable[[], NodeLayout | None],
        node_name: str,
        resource_name: str = "nvidia.com/gpu",
        audience: str = AUDIENCE,
        *,
        registry: CollectorRegistry | None = None,
        max_in_flight: int = 8,
        api_timeout: float = 10.0,
        nics: Callable[[], NicLayout | None] = lambda: None,
    ) -> None:
        if not node_name:
            raise ValueError("the reporter needs its node name to check callers")
        self.api = api
        self.pod_resources = pod_resources
        self.layout = layout
        self.nics = nics  # the node's RDMA NICs, for gpupair.io/nic
        self.node_name = node_name
        self.resource_name = resource_name
        self.audience = audience
        self.api_timeout = api_timeout
        # Every pod on the node can call; bound the TokenReviews one node can cause at once.
        self._slots = asyncio.Semaphore(max_in_flight)
        self.verifications = Counter(
            "gpupair_reporter_verifications",
            "Answers to /v1/verify, by outcome (PASS, FAIL, or the HTTP status of a refusal)",
            ["outcome"],
            registry=registry or CollectorRegistry(),
        )

    async def handle(self, request: web.Request) -> web.Response:
        try:
            await read_body(request)
        except Refused as refusal:
            return self._refuse(refusal, request)
        if self._slots.locked():
            return self._refuse(Refused(429, "too many verifications in flight; retry", retry_after=1), request)
        async with self._slots:
            try:
                answer = await self.verify(request.headers.get("Authorization"))
            except Refused as refusal:
                return self._refuse(refusal, request)
            except Exception:  # a bug must not take the reporter down; the sidecar retries
                log.exception("verification failed unexpectedly")
                self.verifications.labels("500").inc()
                return web.json_response(status_body(500, "internal error; see the reporter's log"), status=500)
        self.verifications.labels(answer["verdict"]["result"]).inc()
        return web.json_response(answer)

    def _refuse(self, refusal: Refused, request: web.Request) -> web.Response:
        self.verifications.labels(str(refusal.status)).inc()
        level = logging.INFO if refusal.status == 503 else logging.WARNING
        log.log(level, "verification refused", extra={"status": refusal.status, "reason": refusal.message,
                                                       "peer": request.remote})
        headers = {}
        if refusal.retry_after is not None:
            headers["Retry-After"] = str(int(refusal.retry_after))
        if refusal.status == 401:
            headers["WWW-Authenticate"] = 'Bearer realm="gpupair-reporter"'
        return web.json_response(status_body(refusal.status, refusal.message), status=refusal.status,
                                 headers=headers)

    # --- the steps ------------------------------------------------------------------------------

    async def verify(self, authorization: str | None) -> dict[str, Any]:
        token = bearer_token(authorization)
        identity = await self._identity(token)
        pod = await self._pod(identity)
        layout = self.layout()
        if layout is None:
            raise Refused(503, "this node's GPU layout is not known yet", retry_after=5)
        ids, indices = await self._devices(identity, layout)
        annotations = (pod.get("metadata") or {}).get("annotations") or {}
        intent, problem = pod_intent(pod)
        if problem:
            log.warning("bad placement intent", extra={"pod": f"{identity.namespace}/{identity.pod_name}",
                                                       "error": problem})
        result = verdict.classify(layout, indices, _planned(annotations, identity), intent, self.nics(),
                                  pod_scope(pod)[0])
        await self._record(pod, identity, result, annotations)
        return {
            "apiVersion": API_VERSION,
            "kind": "Verification",
            "pod": {"namespace": identity.namespace, "name": identity.pod_name, "uid": identity.pod_uid},
            "node": self.node_name,
            "deviceIds": ids,
            "verdict": {"granted": result.granted, "pci": result.pci, "numa": result.numa, "link": result.link,
                        "p2p": result.p2p, "result": result.result, "planMatch": result.plan_match,
                        "placement": result.placement, "nic": result.nic, "nicLink": result.nic_link},
            "annotations": result.annotations(),
            "tsvRow": result.tsv_row(ROUND, identity.pod_name, PHASE),
        }

    async def _identity(self, token: str) -> PodIdentity:
        try:
            status = await review_token(self.api, token, self.audience, self.api_timeout)
        except ApiException as exc:
            hint = " (does the reporter's role allow create on tokenreviews?)" if exc.status == 403 else ""
            raise Refused(503, f"cannot review the token now: apiserver answered {exc.status}{hint}",
                          retry_after=5) from None
        except (OSError, asyncio.TimeoutError, ValueError) as exc:
            raise Refused(503, f"cannot review the token now: {exc}", retry_after=5) from None
        return pod_identity(status, self.audience, self.node_name)

    async def _pod(self, identity: PodIdentity) -> dict[str, Any]:
        try:
            pod = await self.api.call_api(
                "/api/v1/namespaces/{namespace}/pods/{name}",
                "GET",
                path_params={"namespace": identity.namespace, "name": identity.pod_name},
                header_params={"Accept": "application/json"},
                response_types_map={200: "object"},
                auth_settings=["BearerToken"],
                _return_http_data_only=True,
                _request_timeout=self.api_timeout,
            )
        except ApiException as exc:
            if exc.status == 404:  # deleted since the review: the token no longer proves anything
                raise Refused(401, f"pod {identity.namespace}/{identity.pod_name} no longer exists") from None
            raise Refused(503, f"cannot read the pod now: apiserver answered {exc.status}", retry_after=5) from None
        except (OSError, asyncio.TimeoutError) as exc:
            raise Refused(503, f"cannot read the pod now: {exc}", retry_after=5) from None
        if not isinstance(pod, dict):
            raise Refused(503, "the apiserver's pod answer is not an object", retry_after=5)
        uid = (pod.get("metadata") or {}).get("uid")
        if uid != identity.pod_uid:
            # The review already refuses a replayed token of a deleted pod (401); this catches the
            # pod replaced by a namesake between the review and this read, and answers the same.
            raise Refused(401, f"pod {identity.namespace}/{identity.pod_name} is not the pod the token was issued to")
        bound = (pod.get("spec") or {}).get("nodeName")
        if bound != self.node_name:
            raise Refused(403, f"pod {identity.namespace}/{identity.pod_name} is bound to node {bound!r}, "
                               f"not {self.node_name!r}")
        pod.setdefault("kind", "Pod")
        pod.setdefault("apiVersion", "v1")
        return pod

    async def _devices(self, identity: PodIdentity, layout: NodeLayout) -> tuple[list[str], tuple[int, ...]]:
        where = f"{identity.namespace}/{identity.pod_name}"
        try:
            ids = await self.pod_resources.pod_devices(identity.namespace, identity.pod_name, self.resource_name)
        except PodNotFoundError:
            raise Refused(503, f"the kubelet does not list pod {where} yet", retry_after=2) from None
        except PodResourcesError as exc:
            raise Refused(503, f"cannot ask the kubelet: {exc}", retry_after=5) from None
        if not ids:
            raise Refused(503, f"the kubelet shows no {self.resource_name} devices for pod {where}", retry_after=30)
        indices, unknown = device_indices(dict.fromkeys(ids), layout)  # two replicas of one GPU: it, twice
        if unknown:
            raise Refused(503, f"devices {unknown} of pod {where} are not in this node's layout (stale layout?)",
                          retry_after=30)
        return list(ids), tuple(sorted(indices))

    async def _record(self, pod: dict[str, Any], identity: PodIdentity, result: verdict.Verdict,
                      current: dict[str, str]) -> None:
        try:
            await record_verdict(self.api, pod, result, current)
        except ApiException as exc:
            raise Refused(503, f"cannot write the verdict annotations: apiserver answered {exc.status}",
                          retry_after=5) from None
        except (OSError, asyncio.TimeoutError) as exc:
            raise Refused(503, f"cannot write the verdict annotations: {exc}", retry_after=5) from None


async def record_verdict(api: k8s.ApiClient, pod: dict[str, Any], result: verdict.Verdict,
                         current: dict[str, str]) -> bool:
    """Write the verdict annotations on the pod (and a Warning Event on FAIL) with the reporter's
    own credentials; False when the pod already carries them. API errors are the caller's."""
    meta = pod.get("metadata") or {}
    namespace, name = meta.get("namespace", ""), meta.get("name", "")
    wanted = result.annotations()
    if all(current.get(key) == value for key, value in wanted.items()):
        return False  # already written by an earlier call (a restarted sidecar): no new patch or event
    await patch_annotations(api, "pod", name, namespace, wanted)
    log.info("verdict written", extra={"pod": f"{namespace}/{name}",
                                       **{key.split("/", 1)[1]: value for key, value in wanted.items()}})
    if result.result != verdict.PASS:
        await _warn(api, pod, result)
    return True


async def _warn(api: k8s.ApiClient, pod: dict[str, Any], result: verdict.Verdict) -> None:
    message = (f"granted {result.granted} on {result.numa} with worst link {result.link}: "
               "a multi-GPU set should sit on one NUMA node without a SYS (cross-socket) link")
    pod = {"kind": "Pod", "apiVersion": "v1", **pod}
    try:
        await create_event(api, pod, FAIL_REASON, message, type="Warning", component=COMPONENT, action="Verify")
    except (ApiException, OSError, asyncio.TimeoutError, ValueError) as exc:
        # The annotations already say FAIL; a lost event must not hide that.
        log.warning("could not record the FAIL event", extra={"error": str(exc)})


def _planned(annotations: dict[str, str], identity: PodIdentity) -> tuple[int, ...] | None:
    return planned_set(annotations, f"{identity.namespace}/{identity.pod_name}")


def planned_set(annotations: dict[str, str], pod: str) -> tuple[int, ...] | None:
    """The extender's plan from ``gpupair.io/planned``; None without one or when unreadable."""
    raw = annotations.get(verdict.PLANNED_KEY)
    if not raw:
        return None
    try:
        return verdict.parse_set(raw)
    except ValueError:
        log.warning("ignoring an unreadable plan", extra={"pod": pod, "planned": raw})
        return None
