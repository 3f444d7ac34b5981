"""gpupair.io/scope: nvlink on a claim or template, with --nvlink-pairs: a request for 2 GPUs
becomes firstAvailable of one subrequest per bridged pair (then ``any`` under preferred), valid by
the v1 rules, stable when admitted again, and read back by the extender as dra-nvlink-pairs."""

from __future__ import annotations

import copy

import pytest

from gpupair.decide.picture.dra_picture import claim_demand
from gpupair.decide.pod.intent import Intent, IntentError
from gpupair.decide.pod.scope import SCOPE_KEY
from gpupair.kubewire import dra
from gpupair.decide.pod.scope import Scope
from gpupair.webhook.admission import AdmissionRequest, admit_scope
from gpupair.webhook.claims import ClaimOptions
from tests.webhook.claim_shapes import apply, claim_from_template, claim_spec, plain_claim, plain_template
from tests.webhook.test_claims import patched, plan

PAIRED = ClaimOptions(nvlink_pairs=((0, 1), (2, 3)))


def scoped(obj: dict, value: str = "nvlink", where: str = "metadata") -> dict:
    obj = copy.deepcopy(obj)
    meta = obj["spec"].setdefault("metadata", {}) if where == "spec.metadata" else obj.setdefault("metadata", {})
    meta.setdefault("annotations", {})[SCOPE_KEY] = value
    return obj


def subrequests(obj: dict) -> list[tuple[str, list[str]]]:
    spec = obj["spec"]["spec"] if obj["kind"] == "ResourceClaimTemplate" else obj["spec"]
    (request,) = spec["devices"]["requests"]
    return [(s["name"], [sel["cel"]["expression"] for sel in s.get("selectors", [])]) for s in request["firstAvailable"]]


def pair(a: int, b: int) -> str:
    return f"device.attributes[device.driver].index in [{a}, {b}]"


def test_required_lists_the_bridged_pairs_and_no_fallback():
    after = patched(scoped(plain_claim()), Intent.REQUIRED, options=PAIRED)
    assert subrequests(after) == [("nvlink-0", [pair(0, 1)]), ("nvlink-1", [pair(2, 3)])]
    assert "constraints" not in after["spec"]["devices"], "a bridged pair needs no NUMA constraint"
    assert plan(scoped(plain_claim()), options=PAIRED).outcome == "claim-paired"


def test_preferred_adds_any_last_and_keeps_the_requests_own_selectors():
    own = {"cel": {"expression": "device.attributes['gpu.nvidia.com'].index < 8"}}
    after = patched(scoped(plain_claim(selectors=[own])), Intent.PREFERRED, options=PAIRED)
    own_expression = own["cel"]["expression"]
    assert subrequests(after) == [("nvlink-0", [own_expression, pair(0, 1)]), ("nvlink-1", [own_expression, pair(2, 3)]),
                                  ("any", [own_expression])]


def test_a_templates_scope_reaches_its_claims_which_are_paired_when_made():
    template = scoped(plain_template(), where="metadata")
    result = plan(template, options=PAIRED)
    after = apply(template, result.ops)
    assert result.outcome == "template-deferred" and claim_spec(after) == claim_spec(template), \
        "a template that asks no placement is left as written"
    assert after["spec"]["metadata"]["annotations"][SCOPE_KEY] == "nvlink", "its claims carry its scope"
    claim = patched(claim_from_template(after), options=PAIRED, pod={SCOPE_KEY: "numa"})
    assert [name for name, _ in subrequests(claim)] == ["nvlink-0", "nvlink-1"], "the template's scope wins"
    demand = claim_demand(dra.parse_claim({**claim, "metadata": {**claim["metadata"], "name": "c"}}),
                          frozenset({"gpu.nvidia.com"}))
    assert (demand.gpus, demand.policy) == (2, "dra-nvlink-pairs")


def test_a_pods_scope_and_placement_reach_a_claim_made_for_it():
    claim = claim_from_template(plain_template())
    after = patched(claim, Intent.NONE, Intent.NONE, options=PAIRED,
                    pod={SCOPE_KEY: "nvlink", "gpupair.io/placement": "preferred"})
    assert [name for name, _ in subrequests(after)] == ["nvlink-0", "nvlink-1", "any"]
    assert {k: v for k, v in after["metadata"]["annotations"].items() if k.startswith("gpupair.io/")} == {
        SCOPE_KEY: "nvlink", "gpupair.io/placement": "preferred"}, "the pod's ask is recorded on its claim"


def test_the_extender_reads_preferreds_fallback():
    after = patched(scoped(plain_claim()), Intent.PREFERRED, options=PAIRED)
    after["metadata"]["name"] = "paired"
    assert claim_demand(dra.parse_claim(after), frozenset({"gpu.nvidia.com"})).policy == "dra-nvlink-pairs-or-first-fit"


@pytest.mark.parametrize("why, obj, options", [
    ("no pairs configured", scoped(plain_claim()), ClaimOptions()),
    ("a count bridges cannot join", scoped(plain_claim(count=4)), PAIRED),
    ("numa scope", scoped(plain_claim(), "numa"), PAIRED),
])
def test_otherwise_the_numa_rule_applies(why, obj, options):
    assert plan(obj, options=options).outcome == "claim-constrained", why


def test_none_leaves_the_request_as_written():
    assert plan(scoped(plain_claim()), Intent.NONE, options=PAIRED).outcome == "claim-annotated"


def test_a_scope_gpupair_does_not_know_is_refused():
    with pytest.raises(IntentError, match="gpupair.io/scope: 'nvlnk' is not a scope gpupair knows"):
        plan(scoped(plain_claim(), "nvlnk"), options=PAIRED)


def test_too_many_pairs_for_one_request_is_a_clear_error():
    with pytest.raises(ValueError, match="at most 7 NVLink pairs"):
        ClaimOptions(nvlink_pairs=tuple((2 * n, 2 * n + 1) for n in range(8)))


def review(obj: dict) -> AdmissionRequest:
    kind = obj["kind"]
    group, version = ("", "v1") if kind == "Pod" else ("resource.k8s.io", "v1")
    resource = {"Pod": "pods", "ResourceClaim": "resourceclaims", "ResourceClaimTemplate": "resourceclaimtemplates"}[kind]
    return AdmissionRequest.model_validate({
        "uid": "u", "kind": {"group": group, "version": version, "kind": kind},
        "resource": {"group": group, "version": version, "resource": resource},
        "operation": "CREATE", "object": obj})


def placed(obj: dict, value: str) -> dict:
    obj = copy.deepcopy(obj)
    obj["metadata"].setdefault("annotations", {})["gpupair.io/placement"] = value
    return obj


@pytest.mark.parametrize("obj, where", [
    ({"kind": "Pod", "metadata": {"name": "p"}, "spec": {"containers": []}}, ("metadata",)),
    (plain_claim(), ("metadata",)),
    (placed(plain_template(), "required"), ("spec", "metadata")),
])
def test_a_namespaces_default_scope_is_recorded_where_none_is_asked(obj, where):
    plan, _ = admit_scope(review(obj), Scope.NVLINK)
    after = apply(obj, plan.ops)
    meta = after
    for part in where:
        meta = meta[part]
    assert plan.outcome == "scope-defaulted" and meta["annotations"][SCOPE_KEY] == "nvlink"
    again, _ = admit_scope(review(after), Scope.PCIE_SWITCH)
    assert again.ops == [] and again.outcome == "scope-unchanged", "an object's own scope wins"


def test_a_namespaces_default_scope_reaches_a_templates_claims_unless_their_pod_asks_one():
    template = plain_template()
    result, _ = admit_scope(review(template), Scope.NVLINK)
    assert result.ops == [], "a template that asks nothing is planned claim by claim"
    claim = claim_from_template(template)
    scoped_claim = apply(claim, admit_scope(review(claim), Scope.NVLINK)[0].ops)
    assert [name for name, _ in subrequests(patched(scoped_claim, options=PAIRED))] == ["nvlink-0", "nvlink-1"]
    own, _ = admit_scope(review(claim), Scope.NVLINK, pod={SCOPE_KEY: "pcie-switch"})
    assert apply(claim, own.ops)["metadata"]["annotations"][SCOPE_KEY] == "pcie-switch", "the pod's scope wins"
