"""AdmissionReview v1 on the wire, and the JSON patch that adds the verifier to a pod. Pure.
A ResourceClaim or ResourceClaimTemplate being created is dispatched to webhook.claims.

Wire models follow k8s.io/api/admission/v1 (types.go): the fields Go marshals without
``omitempty`` (``uid``, ``kind``, ``resource``, ``operation``) are required here, the rest are
optional; unknown fields are ignored as Go's decoder ignores them. The pod inside is read as
plain JSON, because a patch must be computed against exactly what the apiserver holds.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import Field, ValidationError

from gpupair.decide.judge import verdict

from gpupair.kubewire import json_body
from gpupair.decide.pod.intent import PLACEMENT_KEY, Intent, IntentError, asked_intent
from gpupair.decide.pod.pod_request import DEFAULT_RESOURCE, PodRequestError, gpu_request
from gpupair.decide.pod.scope import SCOPE_KEY, Scope, parse_scope
from gpupair.topology.report import PREFIX
from gpupair.kubewire.wire import KubeWire, UserInfo, explain
from gpupair.webhook import claim_pods, claims, sidecar
from gpupair.webhook.claims import ClaimOptions, pointer

API_VERSION = "admission.k8s.io/v1"
KIND = "AdmissionReview"
VERIFY_KEY = PREFIX + "verify"  # "false" opts a pod out of verification
VERIFIER_KEY = PREFIX + "verifier"  # set to "injected" when the webhook added the verifier
DEFAULT_SCHEDULER = "default-scheduler"
# Only the reporter writes these (and the extender the plan, at bind): a pod created with them
# already set would claim a verdict nobody made, so they are dropped when the verifier goes in.
REPORTER_KEYS = (
    verdict.GRANTED_KEY,
    verdict.PCI_KEY,
    verdict.NUMA_KEY,
    verdict.LINK_KEY,
    verdict.P2P_KEY,
    verdict.VERDICT_KEY,
    verdict.PLAN_MATCH_KEY,
    verdict.PLANNED_KEY,
    verdict.VERDICT_PLACEMENT_KEY,
    verdict.VERDICT_SCOPE_KEY,
    verdict.GRANTED_NIC_KEY,
    verdict.NIC_LINK_KEY,
)


# --- wire models (admission.k8s.io/v1) -------------------------------------------------------


class GroupVersionKind(KubeWire):
    group: str
    version: str
    kind: str


class GroupVersionResource(KubeWire):
    group: str
    version: str
    resource: str


class AdmissionRequest(KubeWire):
    uid: str = Field(min_length=1)
    kind: GroupVersionKind
    resource: GroupVersionResource
    subResource: str = ""
    requestKind: GroupVersionKind | None = None
    requestResource: GroupVersionResource | None = None
    requestSubResource: str = ""
    name: str = ""  # empty on a CREATE that relies on generateName
    namespace: str = ""
    operation: Literal["CREATE", "UPDATE", "DELETE", "CONNECT"]
    userInfo: UserInfo = Field(default_factory=UserInfo)
    object: Any = None  # runtime.RawExtension: the object as JSON
    oldObject: Any = None
    dryRun: bool | None = None
    options: Any = None


class AdmissionResponse(KubeWire):
    uid: str
    allowed: bool
    status: dict[str, Any] | None = None  # metav1.Status; only read when allowed is false
    patch: str | None = None  # base64 of the JSON patch ([]byte marshals as base64)
    patchType: Literal["JSONPatch"] | None = None
    auditAnnotations: dict[str, str] | None = None
    warnings: list[str] | None = None


class AdmissionReview(KubeWire):
    apiVersion: Literal["admission.k8s.io/v1"]
    kind: Literal["AdmissionReview"]
    request: AdmissionRequest | None = None
    response: AdmissionResponse | None = None


class ReviewError(ValueError):
    """A body that is not an AdmissionReview v1 request; the message says what is wrong."""


def parse_review(body: bytes | str) -> AdmissionRequest:
    try:
        raw = json_body.decode(body)
    except json_body.JSONBodyError as exc:
        raise ReviewError(str(exc)) from None
    if not isinstance(raw, dict):
        raise ReviewError(f"body must be a JSON object, got {type(raw).__name__}")
    try:
        review = AdmissionReview.model_validate(raw)
    except ValidationError as exc:
        raise ReviewError(f"not an {API_VERSION} {KIND}: {explain(exc)}") from None
    if review.request is None:
        raise ReviewError(f"{KIND} has no request")
    return review.request


def refusal_review(message: str, uid: str = "") -> dict[str, Any]:
    """A refusing AdmissionReview: its response carries a metav1.Status 400, as Kubernetes' own
    webhook libraries answer one (controller-runtime's admission.Errored). For a body that is
    not a review no uid could be read, so the apiserver counts it as a failed call and applies
    failurePolicy (Ignore, as deployed): the pod is never blocked by it. With the review's uid
    (a pod asking a placement gpupair does not know) it refuses the pod."""
    status = {"metadata": {}, "status": "Failure", "message": message, "reason": "BadRequest", "code": 400}
    return {"apiVersion": API_VERSION, "kind": KIND, "response": {"uid": uid, "allowed": False, "status": status}}


def response_review(uid: str, patch: list[dict[str, Any]], warnings: list[str] = (),
                    refusal: str = "") -> dict[str, Any]:
    """An allowing response, with the patch when there is one; a refusing one if ``refusal``."""
    if refusal:
        return refusal_review(refusal, uid)
    response = AdmissionResponse(uid=uid, allowed=True, warnings=list(warnings) or None)
    if patch:
        response.patch = base64.b64encode(json.dumps(patch, separators=(",", ":")).encode()).decode()
        response.patchType = "JSONPatch"
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "response": response.model_dump(exclude_none=True),
    }


# --- the patch ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class InjectOptions:
    sidecar: sidecar.SidecarOptions
    min_gpus: int = 2
    resource_name: str = DEFAULT_RESOURCE
    scheduler_name: str | None = None  # route multi-GPU pods to gpupair's own scheduler
    default_intent: Intent = Intent.REQUIRED  # the cluster default placement
    claims: ClaimOptions = field(default_factory=ClaimOptions)  # DRA claims and templates
    claim_pod_resource: str = ""  # set: pods with resourceClaims request one (webhook.claim_pods)

    def __post_init__(self) -> None:
        if self.min_gpus < 1:
            raise ValueError(f"min_gpus must be at least 1, got {self.min_gpus}")


@dataclass(frozen=True)
class Plan:
    """The patch for one pod and why it is what it is (for logs and metrics)."""

    ops: list[dict[str, Any]]
    outcome: str  # injected | few-gpus | opted-out | already-injected | name-taken | ...
    gpus: int = 0
    routed: bool = False  # spec.schedulerName set to gpupair's scheduler
    notes: list[str] = field(default_factory=list)
    placement: str = ""  # the intent written on the pod ("" when none was written)
    marked: bool = False  # a claim pod given the claim-pod resource, so the extender is asked about it
    refusal: str = ""  # set: the pod is refused with this message
    claim: claims.ClaimPlan | None = None  # for a claim or template: which requests changed, and why not


def _append(container: Mapping[str, Any], parent: str, key: str, value: Any) -> dict[str, Any]:
    # "add" on a missing (or null) member creates it; "-" appends to an existing array.
    if isinstance(container.get(key), list):
        return {"op": "add", "path": f"{parent}{pointer(key)}/-", "value": value}
    return {"op": "add", "path": f"{parent}{pointer(key)}", "value": [value]}


def _names(spec: Mapping[str, Any], key: str) -> set[str]:
    items = spec.get(key) or []
    if not isinstance(items, list):
        raise PodRequestError(f"spec.{key}: must be a list")
    # A name that is not a string (a list, say) cannot be ours; it must not crash the set either.
    return {item["name"] for item in items if isinstance(item, Mapping) and isinstance(item.get("name"), str)}


def _pull_secret_ops(spec: Mapping[str, Any], names: tuple[str, ...]) -> list[dict[str, Any]]:
    """The sidecar's pull secrets the pod does not name yet, after the pod's own."""
    present = spec.get("imagePullSecrets")
    if not isinstance(present, list):
        missing = [{"name": name} for name in names]
        return [{"op": "add", "path": "/spec/imagePullSecrets", "value": missing}] if missing else []
    have = {s.get("name") for s in present if isinstance(s, Mapping)}
    return [{"op": "add", "path": "/spec/imagePullSecrets/-", "value": {"name": name}}
            for name in names if name not in have]


def _annotation_ops(meta: Mapping[str, Any] | None, add: dict[str, str], strip: bool) -> list[dict[str, Any]]:
    """Add ``add`` to the pod's annotations; with ``strip``, drop the reporter's keys first."""
    if meta is None:
        return [{"op": "add", "path": "/metadata", "value": {"annotations": add}}] if add else []
    annotations = meta.get("annotations")
    if not isinstance(annotations, Mapping):
        return [{"op": "add", "path": "/metadata/annotations", "value": add}] if add else []
    ops = [
        {"op": "remove", "path": pointer("metadata", "annotations", key)}
        for key in (REPORTER_KEYS if strip else ())
        if key in annotations
    ]
    ops.extend({"op": "add", "path": pointer("metadata", "annotations", key), "value": value}
               for key, value in add.items())
    return ops


def plan(pod: Any, options: InjectOptions, namespace_intent: Intent | None = None) -> Plan:
    """Decide what to change in a pod being created. Raises PodRequestError on a pod that
    cannot be read (the caller lets such a pod through untouched), IntentError on a pod whose
    gpupair.io/placement or gpupair.io/scope gpupair does not know (the caller refuses it).

    A multi-GPU pod that asks no placement gets the one that applies written on it when that
    matters: its namespace's default (from the webhook entry its namespace label selected),
    which the extender cannot see; or, for a pod given the verifier, the cluster default, so
    the verdict judges by what placed the pod. Otherwise the extender's own default applies."""
    gpus = gpu_request(pod, options.resource_name)  # also checks pod and spec are objects
    meta = pod.get("metadata")
    if meta is not None and not isinstance(meta, Mapping):
        raise PodRequestError("metadata: must be an object")
    annotations = (meta or {}).get("annotations") or {}
    unasked = gpus >= 2 and asked_intent(annotations) is None
    if isinstance(annotations, Mapping) and SCOPE_KEY in annotations:
        try:
            parse_scope(annotations[SCOPE_KEY])
        except ValueError as exc:
            raise IntentError(str(exc)) from None
    placement = {PLACEMENT_KEY: namespace_intent.value} if unasked and namespace_intent else {}
    spec = pod.get("spec") or {}
    # A pod asking the device plugin's resource reaches the extender through it already.
    ops = claim_pods.mark_ops(pod, options.claim_pod_resource) if gpus == 0 else []
    marked = bool(ops)
    # Only a pod that left the choice to the default scheduler is rerouted: multi-GPU pods, and
    # marked claim pods (the default scheduler has no extender entry naming their mark).
    routed = bool(options.scheduler_name) and (gpus >= options.min_gpus or marked) \
        and spec.get("schedulerName") in (None, "", DEFAULT_SCHEDULER)
    if routed:
        ops.append({"op": "add", "path": "/spec/schedulerName", "value": options.scheduler_name})
    if gpus < options.min_gpus:
        return Plan(ops + _annotation_ops(meta, placement, strip=False), "claim-pod-marked" if marked else "few-gpus",
                    gpus, routed, placement=placement.get(PLACEMENT_KEY, ""), marked=marked)
    notes: list[str] = []

    opt_out = isinstance(annotations, Mapping) and str(annotations.get(VERIFY_KEY, "")).strip().lower() == "false"
    containers = _names(spec, "initContainers") | _names(spec, "containers")
    if opt_out:
        outcome = "opted-out"
    elif sidecar.CONTAINER_NAME in containers:
        outcome = "already-injected"  # reinvocation, or a pod copied from an injected one
    elif sidecar.TOKEN_VOLUME in _names(spec, "volumes"):
        outcome = "name-taken"
        notes.append(f"gpupair: volume {sidecar.TOKEN_VOLUME!r} already exists; verifier not added")
    else:
        outcome = "injected"
        ops.append(_append(spec, "/spec", "initContainers", sidecar.container(options.sidecar)))
        ops.append(_append(spec, "/spec", "volumes", sidecar.token_volume(options.sidecar)))
        ops.extend(_pull_secret_ops(spec, options.sidecar.image_pull_secrets))
        if unasked:
            placement = {PLACEMENT_KEY: (namespace_intent or options.default_intent).value}
    injected = outcome == "injected"
    ops.extend(_annotation_ops(meta, {VERIFIER_KEY: "injected", **placement} if injected else placement,
                               strip=injected))
    return Plan(ops, outcome, gpus, routed, notes, placement=placement.get(PLACEMENT_KEY, ""), marked=marked)


def admit(request: AdmissionRequest, options: InjectOptions, namespace_intent: Intent | None = None,
          pod: Mapping[str, str] | None = None) -> tuple[Plan, list[str]]:
    """The plan for any admission request, and warnings for the client. Refuses only an object
    whose gpupair.io/placement is not a value gpupair knows: placing it by a guess would be
    wrong either way (too strict for a misspelt ``preferred``, too loose for ``requried``).
    A pod gets the verifier (webhook.admission.plan), a ResourceClaim or ResourceClaimTemplate
    the intent as a constraint (webhook.claims); anything else, and any other operation than
    CREATE, is let through unchanged. ``pod``: the annotations of the pod a claim was made for
    (webhook.claim_owner), where they were read."""
    kind, resource = request.kind, request.resource.resource
    if request.subResource or request.operation != "CREATE":
        return Plan([], "not-a-pod-create"), []
    if claims.is_claim_kind(kind.group, kind.version, kind.kind, resource):
        return _admit_claim(request, options, namespace_intent, pod)
    if not (kind.group == "" and kind.kind == "Pod" and resource == "pods"):
        return Plan([], "not-a-pod-create"), []
    try:
        result = plan(request.object, options, namespace_intent)
    except PodRequestError as exc:
        return Plan([], "unreadable"), [f"gpupair: pod left unchanged: {exc}"]
    except IntentError as exc:
        return Plan([], "bad-placement", refusal=f"gpupair: {exc}"), []
    return result, result.notes


def admit_scope(request: AdmissionRequest, scope: Scope,
                pod: Mapping[str, str] | None = None) -> tuple[Plan, list[str]]:
    """The namespace's default ``gpupair.io/scope`` (the calling entry's path) written on a pod,
    claim or template being created that asks none (for a claim made for a pod, ``pod``: the
    pod's own, where it asks one); nothing else changes. The scope entries for
    claims come first in the configuration, so the claim entries plan under the scope recorded."""
    kind, resource = request.kind, request.resource.resource
    if request.subResource or request.operation != "CREATE":
        return Plan([], "not-a-pod-create"), []
    obj = request.object
    if claims.is_claim_kind(kind.group, kind.version, kind.kind, resource):
        try:
            ops = claims.scope_default_ops(obj, kind.kind, scope, pod)
        except claims.ClaimError as exc:
            return Plan([], "claim-unreadable"), [f"gpupair: {kind.kind} left unchanged: {exc}"]
        except IntentError:  # the claim entry refuses it
            return Plan([], "scope-unchanged"), []
    elif kind.group == "" and kind.kind == "Pod" and resource == "pods" and isinstance(obj, Mapping):
        meta = obj.get("metadata")
        if meta is not None and not isinstance(meta, Mapping):
            return Plan([], "unreadable"), ["gpupair: pod left unchanged: metadata: must be an object"]
        annotations = (meta or {}).get("annotations")
        asked = isinstance(annotations, Mapping) and SCOPE_KEY in annotations
        ops = [] if asked else _annotation_ops(meta, {SCOPE_KEY: scope.value}, strip=False)
    else:
        return Plan([], "not-a-pod-create"), []
    return Plan(ops, "scope-defaulted" if ops else "scope-unchanged"), []


def _admit_claim(request: AdmissionRequest, options: InjectOptions, namespace_intent: Intent | None,
                 pod: Mapping[str, str] | None) -> tuple[Plan, list[str]]:
    kind = request.kind.kind
    try:
        result = claims.plan_claim(request.object, kind, options.claims, options.default_intent, namespace_intent,
                                   pod)
    except claims.ClaimError as exc:
        return Plan([], "claim-unreadable"), [f"gpupair: {kind} left unchanged: {exc}"]
    except IntentError as exc:
        return Plan([], "bad-placement", refusal=f"gpupair: {exc}"), []
    return Plan(result.ops, result.outcome, result.devices, notes=result.notes, placement=result.placement,
                claim=result), result.notes
