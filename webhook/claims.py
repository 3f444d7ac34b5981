"""The placement intent as a DRA claim constraint: what the webhook changes in a
``resource.k8s.io/v1`` ResourceClaim or ResourceClaimTemplate being created. Pure.

kube-scheduler's structured allocator takes the first devices that fit, in ResourceSlice order,
and nothing in DynamicResources scores topology. So gpupair states the intent where the allocator
reads it, in the claim, once, at creation (a claim's spec is immutable):

- ``required``: each request for ``count >= 2`` devices of a GPU DeviceClass gets a constraint
  ``matchAttribute: resource.kubernetes.io/numaNode`` naming it: the devices come from one NUMA
  node or the pod does not schedule there. A count above what one NUMA node holds
  (``gpus_per_numa``) gets none, since no node could honour it; the extender judges such pods
  by the fewest NUMA nodes.
- ``preferred``: the request becomes a ``firstAvailable`` list: subrequest ``numa`` (the same
  devices, with the constraint naming ``<request>/numa``), then ``any`` (the same devices,
  unconstrained). The allocator tries them in order and DynamicResources scores a node by which
  subrequest it used, so nodes where the close set fits rank higher and the others still serve.
- ``none``, a request some constraint of the claim already covers, a request already written as
  ``firstAvailable``, ``allocationMode: All``, an unknown mode and other DeviceClasses: left as
  written.
- ``gpupair.io/scope: nvlink`` on the object: a request for 2 GPUs becomes ``firstAvailable`` of
  one subrequest per NVLink pair (``nvlink-<n>``, a selector naming its two devices), and under
  ``preferred`` the unconstrained ``any`` last. The allocator then takes the first free bridged
  pair on a node. Nothing in DRA names links: the pairs come from the links the reporters
  measured, per class of nodes (gpupair/decide/claims/nvlink_classes.py; an NVSwitch class needs no
  pair), or from ``--nvlink-pairs``, which overrides them. Where the links are known and no node
  has an NVLink pair, ``required`` gets one subrequest without a selector, which the extender
  refuses on every node with its reason, and the client a warning. Other counts are handled as
  under ``numa``.

The intent is the object's own ``gpupair.io/placement`` annotation (for a template, its own or
that of ``spec.metadata``, the metadata its claims get), else, for a claim the resourceclaim
controller made from a template for a pod (owned by the pod), that pod's own annotation, else the
namespace default the webhook entry carries, else the cluster default; the scope likewise (the
claim's, else its pod's). Every claim admitted (but kube-scheduler's extended-resource claim) is
given the intent it was decided under as that annotation, ``none`` and unchanged requests
included, so a claim pod's intent can be read from its claims (gpupair/decide/claims/claim_intent.py).

A template is planned at its creation only where it asks something itself (a placement, or a
scope, its own or its namespace's, recorded by the scope entries): it is annotated and rewritten,
and its claims come back carrying the constraint, left as written: the template's ask wins over
its pods'. A template that asks nothing is left as it is: each claim made from it is planned when
it is made, under its own pod's ask, as pods are planned under their own annotations.

The patch is computed against exactly the object received: unknown fields stay as they are, and
the request's own fields (selectors, tolerations, capacity, fields newer than this module) move
into the subrequests unchanged. Reading goes through small pydantic models, strict about the
types of the fields decided on and lenient about everything else, as Go's decoder is.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from gpupair.kubewire import dra
from gpupair.decide.claims.nvlink_classes import NvlinkChoices, index_choices
from gpupair.decide.pod.intent import PLACEMENT_KEY, Intent, IntentError, asked_intent
from gpupair.decide.pod.scope import SCOPE_KEY, Scope, parse_scope
from gpupair.kubewire.wire import KubeWire, explain
from gpupair.kubewire.defaults import GPU_DEVICE_CLASSES
from gpupair.webhook.claim_defaults import DEFAULT_GPUS_PER_NUMA_NODE

GROUP, VERSION = dra.API_VERSION.split("/")
RESOURCES = {"ResourceClaim": "resourceclaims", "ResourceClaimTemplate": "resourceclaimtemplates"}
NUMA_ATTRIBUTE = dra.NUMA_ATTRIBUTE
CLOSE_SUBREQUEST = "numa"  # tried first: the devices on one NUMA node
ANY_SUBREQUEST = "any"  # then the same devices anywhere on the node
NVLINK_SUBREQUEST = "nvlink-{}"  # one per bridged pair (gpupair/decide/picture/dra_picture.py reads the prefix)
MAX_SUBREQUESTS = 8  # FirstAvailableDeviceRequestMaxSize
EXACT_COUNT = "ExactCount"
MAX_CONSTRAINTS = 32  # DeviceConstraintsMaxSize
# Set by kube-scheduler on the claim it makes for a pod asking an extended resource that a
# DeviceClass maps to DRA devices; it has allocated the devices before it creates the claim.
EXTENDED_RESOURCE_CLAIM_KEY = dra.EXTENDED_RESOURCE_CLAIM_KEY
# Set by the resourceclaim controller on each claim it makes from a pod's template (the entry of
# the pod's spec.resourceClaims it serves); the pod is the claim's controller ownerReference.
POD_CLAIM_NAME_KEY = "resource.kubernetes.io/pod-claim-name"


class ClaimError(ValueError):
    """A claim or template that cannot be read; it is let through unchanged."""


@dataclass(frozen=True)
class ClaimOptions:
    device_classes: frozenset[str] = GPU_DEVICE_CLASSES
    gpus_per_numa: int = DEFAULT_GPUS_PER_NUMA_NODE  # the most devices one NUMA constraint can hold
    nvlink_pairs: tuple[tuple[int, int], ...] = ()  # device indices joined by NVLink bridges, in order (the override)
    # The subrequests from the reporters' measured links (webhook/node_links_file.py), read per claim.
    nvlink_source: Callable[[], NvlinkChoices] | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        if self.gpus_per_numa < 2:
            raise ValueError(f"gpus_per_numa must be at least 2, got {self.gpus_per_numa}")
        if len(self.nvlink_pairs) > MAX_SUBREQUESTS - 1:
            raise ValueError(f"at most {MAX_SUBREQUESTS - 1} NVLink pairs (a request holds {MAX_SUBREQUESTS} "
                             f"subrequests, one kept for 'any'), got {len(self.nvlink_pairs)}")


@dataclass(frozen=True)
class ClaimPlan:
    ops: list[dict[str, Any]]
    outcome: str  # claim-constrained | claim-prioritized | claim-annotated | claim-unchanged
    placement: str = ""  # the intent applied ("" when it did not come into it)
    devices: int = 0  # devices asked by the requests changed
    changed: tuple[str, ...] = ()  # names of the requests changed
    left: dict[str, str] = field(default_factory=dict)  # request name -> why it was left as written
    notes: list[str] = field(default_factory=list)  # warnings for the client


# --- reading (k8s.io/api/resource/v1 types.go: only the fields decided on) ----------------------
# Not gpupair.kubewire.dra's models: mutating admission runs before the apiserver validates, so these
# (Sent*, after the Go types they read) read an object as sent, leniently (a subrequest is not looked
# into); gpupair.kubewire.dra reads stored ones.


class ExactRequest(KubeWire):
    deviceClassName: str = ""
    allocationMode: str = ""  # "" is ExactCount (the apiserver defaults it before admission)
    count: int = 0  # 0 is 1
    adminAccess: bool | None = None


class SentDeviceRequest(KubeWire):
    name: str
    exactly: ExactRequest | None = None
    firstAvailable: list[Any] | None = None


class SentDeviceConstraint(KubeWire):
    requests: list[str] | None = None  # none: every request of the claim


class SentDeviceClaim(KubeWire):
    requests: list[SentDeviceRequest] | None = None
    constraints: list[SentDeviceConstraint] | None = None


class SentObjectMeta(KubeWire):
    annotations: dict[str, str] | None = None


class SentOwnerReference(KubeWire):
    apiVersion: str = ""
    kind: str = ""
    name: str = ""
    uid: str = ""
    controller: bool | None = None


class OwnedMeta(KubeWire):
    annotations: dict[str, str] | None = None
    ownerReferences: list[SentOwnerReference] | None = None


def owner_pod(obj: Any, kind: str) -> tuple[str, str] | None:
    """(name, uid) of the pod a ResourceClaim was made for from a template: its controller
    ownerReference, a v1 Pod, on a claim the resourceclaim controller annotated with the
    pod's claim name (pkg/controller/resourceclaim/controller.go, handleClaim). None for any
    other object, or one that cannot be read."""
    if kind != "ResourceClaim" or not isinstance(obj, Mapping) or not isinstance(obj.get("metadata"), Mapping):
        return None
    try:
        meta = OwnedMeta.model_validate(obj["metadata"])
    except ValidationError:
        return None
    if POD_CLAIM_NAME_KEY not in (meta.annotations or {}):
        return None
    pods = [r for r in meta.ownerReferences or [] if r.controller and r.apiVersion == "v1" and r.kind == "Pod"]
    return (pods[0].name, pods[0].uid) if len(pods) == 1 and pods[0].name and pods[0].uid else None


def _pod_intent(pod: Mapping[str, str] | None) -> Intent | None:
    """The placement a claim's pod asks; a value gpupair does not know counts as ``required``,
    the strictest, as on the pod itself (gpupair/decide/pod/intent.py pod_intent)."""
    try:
        return asked_intent(pod or {})
    except IntentError:
        return Intent.REQUIRED


def _pod_scope(pod: Mapping[str, str] | None) -> Scope | None:
    """The scope a claim's pod asks; None for none, or a value gpupair does not know."""
    value = (pod or {}).get(SCOPE_KEY)
    try:
        return None if value is None else parse_scope(value)
    except ValueError:
        return None


def pointer(*parts: str | int) -> str:
    """A JSON pointer (RFC 6901): "~" and "/" inside a part are escaped. (The pod patch uses it too.)"""
    return "".join("/" + str(part).replace("~", "~0").replace("/", "~1") for part in parts)


def is_claim_kind(group: str, version: str, kind: str, resource: str) -> bool:
    return group == GROUP and version == VERSION and RESOURCES.get(kind) == resource


def _object(value: Any, where: str) -> Mapping[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ClaimError(f"{where}: must be an object")
    return value


def _annotations(meta: Mapping[str, Any], where: str) -> dict[str, str]:
    try:
        return SentObjectMeta.model_validate(meta).annotations or {}
    except ValidationError as exc:
        raise ClaimError(f"{where}.{explain(exc)}") from None


@dataclass(frozen=True)
class _Parts:
    """Where things are in a claim or a template (whose claim spec is at spec.spec)."""

    spec_path: tuple[str, ...]  # the ResourceClaimSpec
    meta_path: tuple[str, ...]  # the metadata the claims get (the claim's own, or spec.metadata)
    spec: Mapping[str, Any]
    meta: Mapping[str, Any] | None  # None: absent


def _parts(obj: Any, kind: str) -> _Parts:
    obj = _object(obj, kind)
    if not obj:
        raise ClaimError(f"{kind}: no object")
    if kind == "ResourceClaim":
        meta = obj.get("metadata")
        return _Parts(("spec",), ("metadata",), _object(obj.get("spec"), "spec"),
                      None if meta is None else _object(meta, "metadata"))
    template = _object(obj.get("spec"), "spec")
    meta = template.get("metadata")
    return _Parts(("spec", "spec"), ("spec", "metadata"), _object(template.get("spec"), "spec.spec"),
                  None if meta is None else _object(meta, "spec.metadata"))


def resolve_intent(obj: Any, kind: str, namespace_intent: Intent | None, default: Intent,
                   pod: Mapping[str, str] | None = None) -> tuple[Intent, str]:
    """The intent for a claim or template and where it came from: ``object`` (its own
    annotation; for a template, that of ``spec.metadata``), ``template`` (a template's own
    metadata only), ``pod`` (the annotations ``pod`` of the pod a claim was made for),
    ``namespace`` or ``default``. IntentError on a value gpupair does not know, or a template
    whose two annotations disagree."""
    parts = _parts(obj, kind)
    own = asked_intent(_annotations(parts.meta or {}, ".".join(parts.meta_path)))
    if kind == "ResourceClaimTemplate":
        top = asked_intent(_annotations(_object(_object(obj, kind).get("metadata"), "metadata"), "metadata"))
        if own is not None and top is not None and own is not top:
            raise IntentError(f"{PLACEMENT_KEY}: the template asks {top.value} in metadata.annotations but "
                              f"{own.value} in spec.metadata.annotations (the claims get the second); set one")
        if own is None and top is not None:
            return top, "template"
    if own is not None:
        return own, "object"
    if _pod_intent(pod) is not None:
        return _pod_intent(pod), "pod"
    if namespace_intent is not None:
        return namespace_intent, "namespace"
    return default, "default"


def _asks_placement(obj: Any, kind: str) -> bool:
    """Whether the claim or template asks a placement of its own: then it is planned whole under
    its own ask (and its namespace's scope), and the pod it was made for does not come into it.
    IntentError on a value gpupair does not know."""
    return resolve_intent(obj, kind, None, Intent.NONE)[1] in ("object", "template")


def _asked_scope(obj: Any, kind: str) -> str | None:
    """The object's own ``gpupair.io/scope`` (for a template, that of ``spec.metadata``, else of
    its own metadata), None without one."""
    parts = _parts(obj, kind)
    found = [_annotations(parts.meta or {}, ".".join(parts.meta_path)).get(SCOPE_KEY)]
    if kind == "ResourceClaimTemplate":
        found.append(_annotations(_object(_object(obj, kind).get("metadata"), "metadata"), "metadata").get(SCOPE_KEY))
    return next((value for value in found if value is not None), None)


def resolve_scope(obj: Any, kind: str, pod: Mapping[str, str] | None = None) -> Scope:
    """The scope a claim or template asks, else the one its pod asks (``pod``: the annotations
    of the pod a claim was made for), ``numa`` without one. IntentError on a value gpupair does
    not know on the object (it is refused, as for a bad placement)."""
    value = _asked_scope(obj, kind)
    if value is None:
        return _pod_scope(pod) or Scope.NUMA
    try:
        return parse_scope(value)
    except ValueError as exc:
        raise IntentError(str(exc)) from None


# --- deciding -------------------------------------------------------------------------------------


def _covered(name: str, constraints: list[SentDeviceConstraint]) -> bool:
    """Whether a constraint of the claim already applies to request ``name`` (one that names no
    request applies to all; ``name/sub`` names one of its subrequests)."""
    return any(not c.requests or any(r == name or r.startswith(name + "/") for r in c.requests)
               for c in constraints)


def _why_left(request: SentDeviceRequest, constraints: list[SentDeviceConstraint], options: ClaimOptions) -> str:
    """Why this request is left as written ("" if it is one to change)."""
    exact = request.exactly
    if request.firstAvailable:
        return "first-available" if exact is None else "exactly-and-first-available"
    if exact is None:
        return "no-devices"
    if exact.deviceClassName not in options.device_classes:
        return "not-a-gpu-class"
    if (exact.allocationMode or EXACT_COUNT) != EXACT_COUNT:
        return "all-devices" if exact.allocationMode == "All" else "unknown-mode"
    if (exact.count or 1) < 2:
        return "one-device"
    if _covered(request.name, constraints):
        return "own-constraint"
    if exact.count > options.gpus_per_numa:
        return "above-one-numa-node"
    return ""


def plan_claim(obj: Any, kind: str, options: ClaimOptions, default: Intent,
               namespace_intent: Intent | None = None, pod: Mapping[str, str] | None = None) -> ClaimPlan:
    """What to change in a ResourceClaim or ResourceClaimTemplate (``kind``) being created;
    ``pod``: the annotations of the pod a claim was made for (``owner_pod``), where read.
    Raises ClaimError on an object that cannot be read, IntentError on a placement gpupair does
    not know (the caller refuses the object)."""
    if kind not in RESOURCES:
        raise ClaimError(f"{kind}: not a ResourceClaim or ResourceClaimTemplate")
    parts = _parts(obj, kind)
    if _asks_placement(obj, kind):
        pod = None  # planned whole under its own ask (a claim from a template that asked one)
    intent, source = resolve_intent(obj, kind, namespace_intent, default, pod)
    if kind == "ResourceClaimTemplate" and source in ("namespace", "default"):
        return _defer(obj, parts)
    scope = resolve_scope(obj, kind, pod)
    pairs, pair_notes = _nvlink_selectors(options, intent) if scope is Scope.NVLINK else ((), ())
    annotations = _annotations(parts.meta or {}, ".".join(parts.meta_path))
    try:
        devices = SentDeviceClaim.model_validate(_object(parts.spec.get("devices"), "devices"))
    except ValidationError as exc:
        raise ClaimError(f"{'.'.join(parts.spec_path)}.devices.{explain(exc)}") from None
    requests, constraints = devices.requests or [], devices.constraints or []
    base = (*parts.spec_path, "devices")

    ops: list[dict[str, Any]] = []
    left: dict[str, str] = {}
    notes: list[str] = []
    changed: list[str] = []
    added: list[dict[str, Any]] = []
    paired: list[str] = []
    count = 0
    extended = kind == "ResourceClaim" and annotations.get(EXTENDED_RESOURCE_CLAIM_KEY) == "true"
    if extended:
        # Made by kube-scheduler after it allocated the devices: a constraint now would be a
        # statement the allocation never honoured. The extender places such pods (managedResources).
        left = {r.name: "extended-resource-claim" for r in requests}
    elif intent is not Intent.NONE:
        for index, request in enumerate(requests):
            why = _why_left(request, constraints, options)
            exact = request.exactly
            if not why and len(constraints) + len(added) >= MAX_CONSTRAINTS:
                why = "constraints-full"
            if not why and intent is Intent.PREFERRED and exact.adminAccess:
                why = "admin-access"  # a subrequest has no adminAccess
            if why:
                left[request.name] = why
                if why in ("above-one-numa-node", "constraints-full", "admin-access"):
                    notes.append(_note(request, why, intent, options))
                continue
            changed.append(request.name)
            count += exact.count
            if exact.count == 2:
                notes += [f"gpupair: request {request.name!r}: {note}" for note in pair_notes]
            if pairs and exact.count == 2:
                paired.append(request.name)
                ops += _pair(parts.spec["devices"]["requests"][index], pointer(*base, "requests", index), pairs,
                             intent is Intent.PREFERRED)
                continue
            if intent is Intent.REQUIRED:
                added.append({"matchAttribute": NUMA_ATTRIBUTE, "requests": [request.name]})
                continue
            raw = parts.spec["devices"]["requests"][index]
            ops += _prioritize(raw, pointer(*base, "requests", index))
            added.append({"matchAttribute": NUMA_ATTRIBUTE, "requests": [f"{request.name}/{CLOSE_SUBREQUEST}"]})
    if added:
        existing = parts.spec["devices"].get("constraints")
        if isinstance(existing, list):
            ops += [{"op": "add", "path": pointer(*base, "constraints", "-"), "value": c} for c in added]
        else:  # absent or null
            ops.append({"op": "add", "path": pointer(*base, "constraints"), "value": added})
    # Every object admitted records the intent it was decided under, ``none`` and unchanged
    # requests included: the extender, the verdict and ``status`` read a claim pod's intent from
    # its claims (gpupair/decide/claims/claim_intent.py), and a template's claims carry what it says, not
    # whatever the namespace's default is when they are made. kube-scheduler's own claim is the
    # exception: nothing was asked of it.
    record = {} if extended or PLACEMENT_KEY in annotations else {PLACEMENT_KEY: intent.value}
    if SCOPE_KEY not in annotations and (pairs or _asked_scope(obj, kind) is None and _pod_scope(pod)):
        record[SCOPE_KEY] = scope.value  # a template's own metadata only, or its pod's: its claims carry it too
    if record:
        ops += _annotation_ops(parts, record)
    outcome = "claim-annotated" if ops else "claim-unchanged"  # annotated: the intent recorded, no request changed
    if changed:
        outcome = "claim-constrained" if intent is Intent.REQUIRED else "claim-prioritized"
    if paired and len(paired) == len(changed):
        outcome = "claim-paired"
    return ClaimPlan(ops, outcome, intent.value, count, tuple(changed), left, notes)


def _prioritize(request: Mapping[str, Any], path: str) -> list[dict[str, Any]]:
    """``exactly`` becomes ``firstAvailable``: the same devices on one NUMA node first, then anywhere."""
    sub = {key: value for key, value in request["exactly"].items() if key != "adminAccess"}
    return [
        {"op": "remove", "path": f"{path}/exactly"},
        {"op": "add", "path": f"{path}/firstAvailable",
         "value": [{"name": CLOSE_SUBREQUEST, **sub}, {"name": ANY_SUBREQUEST, **sub}]},
    ]


def _nvlink_selectors(options: ClaimOptions, intent: Intent) -> tuple[tuple[str | None, ...], tuple[str, ...]]:
    """The NVLink subrequests' selectors (None: one without) and notes for the client: from
    ``--nvlink-pairs`` where set, else from the measured links; none where neither is known."""
    if options.nvlink_pairs:
        return index_choices(options.nvlink_pairs).selectors, ()
    choices = options.nvlink_source() if options.nvlink_source is not None else None
    if choices is None or not choices.known:
        return (), ()
    if choices.bridged:
        return choices.selectors, choices.notes
    if intent is Intent.REQUIRED:  # the extender then refuses each node: "free sets joined by NVLink: none"
        return (None,), ("no node the reporters measured has an NVLink pair: under required it waits until one does",)
    return (), ("no node the reporters measured has an NVLink pair: placed as under numa",)


def _pair(request: Mapping[str, Any], path: str, pairs: tuple[str | None, ...], or_any: bool
          ) -> list[dict[str, Any]]:
    """``exactly`` becomes ``firstAvailable``: each NVLink selector in turn (None: any two, as on
    NVSwitch boards), then (``or_any``) any two."""
    sub = {key: value for key, value in request["exactly"].items() if key != "adminAccess"}
    own = list(sub.pop("selectors", None) or [])
    subrequests = [{"name": NVLINK_SUBREQUEST.format(n), **sub, **(
        {"selectors": own + [{"cel": {"expression": cel}}]} if cel is not None else ({"selectors": own} if own else {}))}
        for n, cel in enumerate(pairs)]
    if or_any:
        subrequests.append({"name": ANY_SUBREQUEST, **sub, **({"selectors": own} if own else {})})
    return [{"op": "remove", "path": f"{path}/exactly"},
            {"op": "add", "path": f"{path}/firstAvailable", "value": subrequests}]


def _defer(obj: Any, parts: _Parts) -> ClaimPlan:
    """A template that asks no placement of its own: its spec is left as written, and each claim
    made from it is planned when the resourceclaim controller makes it, under its pod's ask. A
    scope on the template's own metadata is copied into ``spec.metadata``, so its claims carry
    it as their own ask (which wins over their pod's)."""
    spec_meta = _annotations(parts.meta or {}, ".".join(parts.meta_path))
    top = _annotations(_object(_object(obj, "ResourceClaimTemplate").get("metadata"), "metadata"), "metadata")
    if SCOPE_KEY in top and SCOPE_KEY not in spec_meta:
        return ClaimPlan(_annotation_ops(parts, {SCOPE_KEY: top[SCOPE_KEY]}), "template-deferred")
    return ClaimPlan([], "template-deferred")


def scope_default_ops(obj: Any, kind: str, scope: Scope, pod: Mapping[str, str] | None = None
                      ) -> list[dict[str, Any]]:
    """A namespace's default scope recorded on a claim or template that asks none (a template's
    in ``spec.metadata``, which its claims get); for a claim made for a pod (``pod``: its
    annotations) that asks a scope, the pod's. A template that asks no placement is left as it
    is: it is not planned (``_defer``), and its claims are recorded here when they are made.
    ClaimError on an object that cannot be read; IntentError on a placement gpupair does not know."""
    if _asked_scope(obj, kind) is not None:
        return []
    if _asks_placement(obj, kind):
        pod = None
    elif kind == "ResourceClaimTemplate":
        return []
    return _annotation_ops(_parts(obj, kind), {SCOPE_KEY: (_pod_scope(pod) or scope).value})


def _annotation_ops(parts: _Parts, add: dict[str, str]) -> list[dict[str, Any]]:
    if parts.meta is None:
        return [{"op": "add", "path": pointer(*parts.meta_path), "value": {"annotations": add}}]
    if not isinstance(parts.meta.get("annotations"), Mapping):
        return [{"op": "add", "path": pointer(*parts.meta_path, "annotations"), "value": add}]
    return [{"op": "add", "path": pointer(*parts.meta_path, "annotations", key), "value": value}
            for key, value in add.items()]


def _note(request: SentDeviceRequest, why: str, intent: Intent, options: ClaimOptions) -> str:
    name, count = request.name, request.exactly.count
    if why == "above-one-numa-node":
        return (f"gpupair: request {name!r} asks {count} devices, more than one NUMA node holds "
                f"({options.gpus_per_numa}): left without a {NUMA_ATTRIBUTE} constraint; the fewest NUMA "
                f"nodes is the extender's to judge")
    if why == "constraints-full":
        return f"gpupair: request {name!r} left as written: the claim already has {MAX_CONSTRAINTS} constraints"
    return (f"gpupair: request {name!r} asks adminAccess, which a firstAvailable subrequest cannot: "
            f"left as written ({intent.value} not applied)")
