"""resource.k8s.io/v1 claim specs for the webhook's claim tests: the recorded objects, variants of
them, and a check of a (patched) spec against the v1.36 validation rules the patch could break
(pkg/apis/resource/validation: request and subrequest names, exactly vs firstAvailable,
constraint references)."""

from __future__ import annotations

import copy
import json
import re
from typing import Any

import jsonpatch

from tests.real_k8s import load

DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
QUALIFIED = re.compile(r"[a-z0-9]([-a-z0-9.]*[a-z0-9])?/[A-Za-z_][A-Za-z0-9_]*")
MAX_SUBREQUESTS = 8  # FirstAvailableDeviceRequestMaxSize
MAX_CONSTRAINTS = 32  # DeviceConstraintsMaxSize
SUBREQUEST_FIELDS = {"name", "deviceClassName", "selectors", "allocationMode", "count", "tolerations", "capacity"}


def recorded_template() -> dict:
    """The pair-numa ResourceClaimTemplate (2 GPUs, its own numaNode constraint)."""
    return load("dra/resourceclaimtemplate-pair-numa.json")


def recorded_claims() -> dict[str, dict]:
    """The allocated claims, by name prefix: busy (1 device), plain (2, no constraint), numa (2,
    from the template), ext (kube-scheduler's, for nvidia.com/gpu: 2)."""
    claims = {}
    for claim in load("dra/resourceclaims-allocated.json")["items"]:
        claims.setdefault(claim["metadata"]["name"].split("-")[0], claim)
    return claims


def as_created(claim: dict) -> dict:
    """A claim as admission sees its CREATE: no status, uid, resourceVersion or timestamp yet."""
    claim = copy.deepcopy(claim)
    claim.pop("status", None)
    for key in ("uid", "resourceVersion", "creationTimestamp"):
        claim["metadata"].pop(key, None)
    if claim["metadata"].get("generateName"):
        claim["metadata"].pop("name", None)
    return claim


def plain_template(**exactly: Any) -> dict:
    """The recorded template without its constraint; ``exactly`` fields replace its request's."""
    template = recorded_template()
    devices = template["spec"]["spec"]["devices"]
    del devices["constraints"]
    devices["requests"][0]["exactly"].update(exactly)
    return template


def plain_claim(**exactly: Any) -> dict:
    claim = as_created(recorded_claims()["plain"])
    claim["spec"]["devices"]["requests"][0]["exactly"].update(exactly)
    return claim


def claim_spec(obj: dict) -> dict:
    return obj["spec"]["spec"] if obj["kind"] == "ResourceClaimTemplate" else obj["spec"]


def claim_from_template(template: dict, pod: str = "numa-1", claim: str = "gpus") -> dict:
    """What the resourceclaim controller creates for a pod from a template: spec.metadata and
    spec.spec copied, owned by the pod (as in the recorded numa-1-gpus-* claim)."""
    meta = copy.deepcopy(template["spec"].get("metadata") or {})
    annotations = {**(meta.get("annotations") or {}), "resource.kubernetes.io/pod-claim-name": claim}
    return {
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
        "metadata": {**meta, "annotations": annotations, "generateName": f"{pod}-{claim}-",
                     "namespace": template["metadata"]["namespace"],
                     "ownerReferences": [{"apiVersion": "v1", "controller": True, "kind": "Pod", "name": pod,
                                          "uid": "1306e38e-2cf3-4648-b092-e94a711894ae"}]},
        "spec": copy.deepcopy(template["spec"]["spec"]),
    }


def apply(obj: dict, ops: list[dict]) -> dict:
    """The patch applied as the apiserver would: after a JSON round trip, to a copy."""
    return jsonpatch.apply_patch(copy.deepcopy(obj), json.loads(json.dumps(ops)))


def validation_errors(spec: dict) -> list[str]:
    """What kube-apiserver v1.36 would refuse in a ResourceClaimSpec, for the rules a patch of
    requests and constraints could break."""
    errors: list[str] = []
    devices = spec.get("devices") or {}
    names: set[str] = set()  # what a constraint may name: "req", "req/sub"
    for i, request in enumerate(devices.get("requests") or []):
        where = f"requests[{i}]"
        name = request.get("name", "")
        if not DNS_LABEL.fullmatch(name) or len(name) > 63:
            errors.append(f"{where}.name {name!r}: not a DNS label")
        if name in names:
            errors.append(f"{where}.name {name!r}: duplicate")
        names.add(name)
        exactly, first = request.get("exactly"), request.get("firstAvailable")
        if (exactly is None) == (not first):
            errors.append(f"{where}: exactly one of exactly and firstAvailable must be set")
        if exactly is not None and not exactly.get("deviceClassName"):
            errors.append(f"{where}.exactly.deviceClassName: required")
        subs = set()
        for j, sub in enumerate(first or []):
            sub_where = f"{where}.firstAvailable[{j}]"
            sub_name = sub.get("name", "")
            if not DNS_LABEL.fullmatch(sub_name):
                errors.append(f"{sub_where}.name {sub_name!r}: not a DNS label")
            if sub_name in subs:
                errors.append(f"{sub_where}.name {sub_name!r}: duplicate")
            subs.add(sub_name)
            names.add(f"{name}/{sub_name}")
            if not sub.get("deviceClassName"):
                errors.append(f"{sub_where}.deviceClassName: required")
            if "adminAccess" in sub:
                errors.append(f"{sub_where}.adminAccess: not a field of DeviceSubRequest")
        if len(first or []) > MAX_SUBREQUESTS:
            errors.append(f"{where}.firstAvailable: more than {MAX_SUBREQUESTS}")
    constraints = devices.get("constraints") or []
    if len(constraints) > MAX_CONSTRAINTS:
        errors.append(f"constraints: more than {MAX_CONSTRAINTS}")
    for i, constraint in enumerate(constraints):
        attribute = constraint.get("matchAttribute")
        if attribute is not None and not QUALIFIED.fullmatch(attribute):
            errors.append(f"constraints[{i}].matchAttribute {attribute!r}: not fully qualified")
        refs = constraint.get("requests") or []
        if len(refs) != len(set(refs)):
            errors.append(f"constraints[{i}].requests: duplicates")
        for ref in refs:
            if ref not in names:
                errors.append(f"constraints[{i}].requests: {ref!r} names no request or subrequest")
    return errors
