"""webhook.claims on the recorded DRA objects and variants of them: each patch applied with a
JSON-patch library, the result checked against the v1 validation rules, and admitted again
unchanged (a claim's spec is immutable; a template's claims come back through the webhook)."""

from __future__ import annotations

import copy

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpupair.decide.pod.intent import PLACEMENT_KEY, Intent, IntentError
from gpupair.decide.pod.scope import SCOPE_KEY
from tests.webhook.claim_shapes import (
    apply,
    as_created,
    claim_from_template,
    claim_spec,
    plain_claim,
    plain_template,
    recorded_claims,
    recorded_template,
    validation_errors,
)
from gpupair.webhook.admission import AdmissionRequest, InjectOptions, admit
from gpupair.webhook.claims import (
    ANY_SUBREQUEST,
    CLOSE_SUBREQUEST,
    MAX_CONSTRAINTS,
    NUMA_ATTRIBUTE,
    RESOURCES,
    ClaimError,
    ClaimOptions,
    ClaimPlan,
    plan_claim,
    resolve_intent,
)
from gpupair.webhook.sidecar import SidecarOptions

OPTIONS = ClaimOptions()
REQUIRED = {"matchAttribute": NUMA_ATTRIBUTE, "requests": ["gpus"]}


def plan(obj: dict, default: Intent = Intent.REQUIRED, namespace: Intent | None = None,
         options: ClaimOptions = OPTIONS, pod: dict[str, str] | None = None):
    return plan_claim(obj, obj["kind"], options, default, namespace, pod)


def patched(obj: dict, default: Intent = Intent.REQUIRED, namespace: Intent | None = None,
            options: ClaimOptions = OPTIONS, pod: dict[str, str] | None = None) -> dict:
    """The object after its patch; checked valid, and left unchanged when admitted again."""
    result = plan(obj, default, namespace, options, pod)
    after = apply(obj, result.ops)
    assert validation_errors(claim_spec(after)) == []
    again = plan(after, default, namespace, options, pod)
    assert again.ops == [], "admitting the patched object again changes nothing"
    return after


def spec_ops(result) -> list[dict]:
    """The ops that change the claim's spec: every object admitted also records its intent."""
    return [op for op in result.ops if "/annotations" not in op["path"] and not op["path"].endswith("/metadata")]


def recorded_intent(obj: dict, result) -> str | None:
    """The ``gpupair.io/placement`` the claims of ``obj`` carry once its patch is applied."""
    after = apply(obj, result.ops)
    meta = after["spec"].get("metadata") if after["kind"] == "ResourceClaimTemplate" else after.get("metadata")
    return ((meta or {}).get("annotations") or {}).get(PLACEMENT_KEY)


def annotated(obj: dict, value: str, where: str = "metadata") -> dict:
    obj = copy.deepcopy(obj)
    meta = obj["spec"].setdefault("metadata", {}) if where == "spec.metadata" else obj.setdefault("metadata", {})
    meta.setdefault("annotations", {})[PLACEMENT_KEY] = value
    return obj


# --------------------------------------------------------------------------- the recorded objects


def test_the_recorded_objects_are_valid_as_recorded():
    assert validation_errors(claim_spec(recorded_template())) == []
    for claim in recorded_claims().values():
        assert validation_errors(claim_spec(claim)) == []


@pytest.mark.parametrize("intent", list(Intent))
def test_the_recorded_template_with_its_own_constraint_is_left_as_written(intent):
    assert plan(recorded_template(), intent) == ClaimPlan([], "template-deferred"), "it asks no placement"
    claim = claim_from_template(recorded_template())
    result = plan(claim, intent)
    assert spec_ops(result) == [] and result.outcome == "claim-annotated"
    assert recorded_intent(claim, result) == intent.value
    asking = annotated(recorded_template(), intent.value, "spec.metadata")
    assert patched(asking)["spec"]["spec"] == recorded_template()["spec"]["spec"]
    if intent is not Intent.NONE:
        assert result.left == {"gpus": "own-constraint"} == plan(asking).left


@pytest.mark.parametrize("intent", list(Intent))
def test_the_claim_the_controller_made_from_the_numa_template_is_left_as_written(intent):
    claim = as_created(recorded_claims()["numa"])
    assert claim["metadata"]["ownerReferences"][0]["kind"] == "Pod"
    result = plan(claim, intent)
    assert spec_ops(result) == [] and recorded_intent(claim, result) == intent.value


def test_the_recorded_plain_claim_gets_the_numa_constraint():
    claim = as_created(recorded_claims()["plain"])
    result = plan(claim)
    assert (result.outcome, result.changed, result.devices, result.placement) == (
        "claim-constrained", ("gpus",), 2, "required")
    after = patched(claim)
    assert after["spec"]["devices"]["constraints"] == [REQUIRED]
    assert after["spec"]["devices"]["requests"] == claim["spec"]["devices"]["requests"]
    assert after["metadata"]["annotations"] == {"resource.kubernetes.io/pod-claim-name": "gpus",
                                                PLACEMENT_KEY: "required"}
    # everything else as received
    for key in ("ownerReferences", "finalizers", "generateName", "namespace"):
        assert after["metadata"][key] == claim["metadata"][key]
    # the plain claim, constrained, is the recorded numa claim's spec (what kube-scheduler honoured)
    assert after["spec"] == as_created(recorded_claims()["numa"])["spec"]


def test_one_device_claims_are_left_as_written():
    result = plan(as_created(recorded_claims()["busy"]))
    assert spec_ops(result) == [] and result.left == {"gpus": "one-device"}
    assert recorded_intent(as_created(recorded_claims()["busy"]), result) == "required"


def test_kube_schedulers_extended_resource_claim_is_left_as_written():
    """Made for a pod asking nvidia.com/gpu: 2, after the devices were allocated."""
    claim = as_created(recorded_claims()["ext"])
    assert claim["spec"]["devices"]["requests"][0]["exactly"]["count"] == 2
    for intent in Intent:
        result = plan(claim, intent)
        assert result.ops == [] and result.left == {"container-0-request-0": "extended-resource-claim"}
        assert result.outcome == "claim-unchanged", "nothing asked of it: not even the intent recorded"


# --------------------------------------------------------------------------- required


def test_required_template_gets_the_constraint_and_its_claims_the_intent():
    template = annotated(plain_template(), "required")
    after = patched(template, Intent.NONE)
    spec = after["spec"]["spec"]["devices"]
    assert spec["constraints"] == [REQUIRED]
    assert spec["requests"] == template["spec"]["spec"]["devices"]["requests"]
    assert after["spec"]["metadata"]["annotations"] == {PLACEMENT_KEY: "required"}
    assert after["metadata"] == template["metadata"], "the template's own metadata is not touched"
    # The claim the controller makes from it comes back unchanged, whatever its namespace says
    # now and whatever its pod asks: the template's own ask wins.
    claim = claim_from_template(after)
    for namespace in Intent:
        assert plan(claim, namespace=namespace, pod={PLACEMENT_KEY: "none", SCOPE_KEY: "nvlink"}).ops == []


def test_existing_constraints_are_kept_and_appended_to():
    claim = plain_claim()
    devices = claim["spec"]["devices"]
    devices["requests"].append({"name": "nic", "exactly": {"deviceClassName": "nic.example.com", "count": 2}})
    own = {"matchAttribute": "nic.example.com/rail", "requests": ["nic"]}
    devices["constraints"] = [own]
    result = plan(claim)
    assert result.left == {"nic": "not-a-gpu-class"}
    assert [op["path"] for op in result.ops if "constraints" in op["path"]] == ["/spec/devices/constraints/-"]
    assert patched(claim)["spec"]["devices"]["constraints"] == [own, REQUIRED]


def test_a_null_constraints_list_is_replaced():
    claim = plain_claim()
    claim["spec"]["devices"]["constraints"] = None
    assert patched(claim)["spec"]["devices"]["constraints"] == [REQUIRED]


def test_each_gpu_request_gets_its_own_constraint():
    claim = plain_claim()
    requests = claim["spec"]["devices"]["requests"]
    requests.append({"name": "more", "exactly": {"deviceClassName": "gpu.nvidia.com", "count": 3}})
    result = plan(claim)
    assert result.changed == ("gpus", "more") and result.devices == 5
    assert patched(claim)["spec"]["devices"]["constraints"] == [
        REQUIRED, {"matchAttribute": NUMA_ATTRIBUTE, "requests": ["more"]}]


def test_a_constraint_naming_no_request_covers_them_all():
    claim = plain_claim()
    claim["spec"]["devices"]["constraints"] = [{"matchAttribute": "resource.kubernetes.io/pcieRoot"}]
    result = plan(claim)
    assert spec_ops(result) == [] and result.left == {"gpus": "own-constraint"}


def test_a_count_above_one_numa_node_gets_no_constraint_and_a_warning():
    result = plan(plain_claim(count=8))
    assert spec_ops(result) == [] and result.left == {"gpus": "above-one-numa-node"}
    assert recorded_intent(plain_claim(count=8), result) == "required"  # the extender judges it so
    (note,) = result.notes
    assert "8 devices" in note and "(4)" in note and NUMA_ATTRIBUTE in note
    # the bound is a setting: on 8 GPUs per NUMA node the same claim is constrained
    wide = ClaimOptions(gpus_per_numa=8)
    assert patched(plain_claim(count=8), options=wide)["spec"]["devices"]["constraints"] == [REQUIRED]
    assert plan(plain_claim(count=4)).changed == ("gpus",)


@pytest.mark.parametrize("exactly, why", [
    ({"allocationMode": "All"}, "all-devices"),
    ({"allocationMode": "Some"}, "unknown-mode"),
    ({"count": 1}, "one-device"),
    ({"deviceClassName": "nic.example.com"}, "not-a-gpu-class"),
])
def test_requests_left_as_written(exactly, why):
    for intent in (Intent.REQUIRED, Intent.PREFERRED):
        result = plan(plain_claim(**exactly), intent)
        assert (spec_ops(result), result.left, result.outcome) == ([], {"gpus": why}, "claim-annotated")
        assert recorded_intent(plain_claim(**exactly), result) == intent.value


def test_omitted_mode_and_count_read_as_the_apiserver_defaults_them():
    claim = plain_claim()
    exact = claim["spec"]["devices"]["requests"][0]["exactly"]
    del exact["allocationMode"]
    assert plan(claim).changed == ("gpus",)
    del exact["count"]  # ExactCount of 1
    assert plan(claim).left == {"gpus": "one-device"}


def test_the_gpu_device_classes_are_a_setting():
    claim = plain_claim(deviceClassName="gpu.example.com")
    assert spec_ops(plan(claim)) == []
    options = ClaimOptions(device_classes=frozenset({"gpu.nvidia.com", "gpu.example.com"}))
    assert patched(claim, options=options)["spec"]["devices"]["constraints"] == [REQUIRED]


def test_a_full_constraints_list_is_left_with_a_warning():
    claim = plain_claim()
    claim["spec"]["devices"]["requests"].append({"name": "nic", "exactly": {"deviceClassName": "nic.example.com"}})
    claim["spec"]["devices"]["constraints"] = [{"matchAttribute": "nic.example.com/rail", "requests": ["nic"]}
                                               ] * MAX_CONSTRAINTS
    result = plan(claim)
    assert spec_ops(result) == [] and result.left["gpus"] == "constraints-full" and len(result.notes) == 1


# --------------------------------------------------------------------------- preferred


def test_preferred_rewrites_the_request_as_first_available():
    template = plain_template(selectors=[{"cel": {"expression": "device.attributes['gpu.nvidia.com'].index < 8"}}],
                              tolerations=[{"key": "maintenance", "operator": "Exists", "effect": "NoSchedule"}])
    template = annotated(template, "preferred", "spec.metadata")
    exact = copy.deepcopy(template["spec"]["spec"]["devices"]["requests"][0]["exactly"])
    result = plan(template, Intent.PREFERRED)
    assert (result.outcome, result.changed, result.placement) == ("claim-prioritized", ("gpus",), "preferred")
    after = patched(template, Intent.PREFERRED)
    devices = after["spec"]["spec"]["devices"]
    (request,) = devices["requests"]
    assert "exactly" not in request and request["name"] == "gpus"
    assert request["firstAvailable"] == [{"name": CLOSE_SUBREQUEST, **exact}, {"name": ANY_SUBREQUEST, **exact}]
    assert devices["constraints"] == [{"matchAttribute": NUMA_ATTRIBUTE, "requests": [f"gpus/{CLOSE_SUBREQUEST}"]}]
    assert after["spec"]["metadata"]["annotations"] == {PLACEMENT_KEY: "preferred"}
    claim = claim_from_template(after)
    assert validation_errors(claim["spec"]) == []
    for namespace in Intent:
        assert plan(claim, namespace=namespace).ops == [], "the controller's claim is already prioritized"


def test_preferred_keeps_fields_it_does_not_know():
    claim = plain_claim(capacity={"requests": {"memory": "40Gi"}}, futureField={"x": 1})
    claim["spec"]["devices"]["requests"][0]["futureRequestField"] = "kept"
    claim["spec"]["devices"]["futureDevicesField"] = [1]
    claim["spec"]["futureSpecField"] = True
    claim["futureTopLevel"] = "kept"
    after = apply(claim, plan(claim, Intent.PREFERRED).ops)
    (request,) = after["spec"]["devices"]["requests"]
    assert request["futureRequestField"] == "kept"
    for sub in request["firstAvailable"]:
        assert sub["capacity"] == {"requests": {"memory": "40Gi"}} and sub["futureField"] == {"x": 1}
    assert after["spec"]["devices"]["futureDevicesField"] == [1]
    assert after["spec"]["futureSpecField"] is True and after["futureTopLevel"] == "kept"


def test_admin_access_cannot_be_prioritized_but_can_be_constrained():
    result = plan(plain_claim(adminAccess=True), Intent.PREFERRED)
    assert spec_ops(result) == [] and result.left == {"gpus": "admin-access"} and len(result.notes) == 1
    assert plan(plain_claim(adminAccess=True)).changed == ("gpus",)
    # adminAccess: false is the default and simply not carried into the subrequests
    after = patched(plain_claim(adminAccess=False), Intent.PREFERRED)
    assert all("adminAccess" not in sub for sub in after["spec"]["devices"]["requests"][0]["firstAvailable"])


def test_a_request_already_first_available_is_left_as_written():
    claim = plain_claim()
    request = claim["spec"]["devices"]["requests"][0]
    request["firstAvailable"] = [{"name": "big", **request.pop("exactly"), "count": 4},
                                 {"name": "small", "deviceClassName": "gpu.nvidia.com", "count": 2}]
    for intent in (Intent.REQUIRED, Intent.PREFERRED):
        result = plan(claim, intent)
        assert spec_ops(result) == [] and result.left == {"gpus": "first-available"}


# --------------------------------------------------------------------------- none, and the intent


def test_none_leaves_every_request_as_written_and_records_none():
    """Without the annotation a none namespace's claims would read as nothing asked, and the
    verdict and the extender would fall back to the pod's annotation or the default."""
    for obj in (claim_from_template(plain_template()), plain_claim(), annotated(plain_claim(), "none")):
        result = plan(obj, Intent.NONE)
        assert spec_ops(result) == [] and result.placement == "none" and result.changed == ()
        assert recorded_intent(obj, result) == "none"
        assert patched(obj, Intent.NONE)["kind"] == obj["kind"]  # valid, and stable when admitted again
    assert plan(annotated(plain_claim(), "none"), Intent.NONE).ops == []  # already recorded
    result = plan(plain_claim(), namespace=Intent.NONE)
    assert (spec_ops(result), result.outcome) == ([], "claim-annotated")
    assert recorded_intent(plain_claim(), result) == "none"


def test_the_intent_resolves_as_for_pods():
    claim = plain_claim()
    assert resolve_intent(claim, "ResourceClaim", None, Intent.PREFERRED) == (Intent.PREFERRED, "default")
    assert resolve_intent(claim, "ResourceClaim", Intent.NONE, Intent.PREFERRED) == (Intent.NONE, "namespace")
    own = annotated(claim, " Required")
    assert resolve_intent(own, "ResourceClaim", Intent.NONE, Intent.PREFERRED) == (Intent.REQUIRED, "object")
    result = plan(own, Intent.NONE, Intent.NONE)
    assert result.outcome == "claim-constrained"
    assert not [op for op in result.ops if "annotations" in op["path"]], "its own value is left as written"


def test_namespace_default_wins_over_the_cluster_default():
    result = plan(plain_claim(), Intent.NONE, Intent.PREFERRED)
    assert result.outcome == "claim-prioritized"


def test_a_templates_own_annotation_is_handed_to_its_claims():
    """A template that says none in its own metadata: its claims must not get the namespace's
    required, so the intent goes into spec.metadata, the metadata the claims get."""
    template = annotated(plain_template(), "none")
    result = plan(template, namespace=Intent.REQUIRED)
    assert result.ops == [{"op": "add", "path": "/spec/metadata/annotations", "value": {PLACEMENT_KEY: "none"}}]
    assert result.outcome == "claim-annotated" and result.changed == ()
    claim = claim_from_template(apply(template, result.ops))
    assert plan(claim, namespace=Intent.REQUIRED).ops == []
    # the same in spec.metadata already: nothing to hand on
    both = annotated(template, "none", "spec.metadata")
    assert plan(both, namespace=Intent.REQUIRED).ops == []
    only_spec = annotated(plain_template(), "preferred", "spec.metadata")
    assert resolve_intent(only_spec, "ResourceClaimTemplate", None, Intent.REQUIRED) == (Intent.PREFERRED, "object")


def test_a_template_without_spec_metadata_gets_one():
    template = annotated(plain_template(), "required")
    del template["spec"]["metadata"]
    after = patched(template)
    assert after["spec"]["metadata"] == {"annotations": {PLACEMENT_KEY: "required"}}


def test_a_template_that_asks_no_placement_is_planned_claim_by_claim():
    """Its claims are planned when made, under the claim's own ask, then its pod's, then the
    namespace's, then the cluster default (gpupair#47: a template planned early would pin the
    namespace's intent on claims whose pods ask another)."""
    template = plain_template()
    for namespace in (None, *Intent):
        assert plan(template, namespace=namespace) == ClaimPlan([], "template-deferred")
    claim = claim_from_template(template)
    assert plan(claim, Intent.NONE, Intent.NONE, pod={PLACEMENT_KEY: "required"}).outcome == "claim-constrained"
    assert plan(claim, Intent.NONE, Intent.PREFERRED, pod={}).outcome == "claim-prioritized"
    assert plan(claim, Intent.REQUIRED, None, pod=None).outcome == "claim-constrained"
    assert plan(claim, Intent.NONE, Intent.NONE, pod={PLACEMENT_KEY: "bogus"}).outcome == "claim-constrained", \
        "a pod's unknown placement counts as required, as on the pod"
    own = annotated(claim, "none")
    assert plan(own, namespace=Intent.REQUIRED, pod={PLACEMENT_KEY: "required"}).outcome == "claim-unchanged", \
        "the claim's own ask wins over its pod's"


@pytest.mark.parametrize("obj", [
    annotated(plain_claim(), "requried"),
    annotated(plain_template(), "sometimes"),
    annotated(plain_template(), "sometimes", "spec.metadata"),
    annotated(annotated(plain_template(), "required"), "none", "spec.metadata"),
])
def test_a_bad_or_contradictory_placement_raises_intent_error(obj):
    with pytest.raises(IntentError, match="gpupair.io/placement"):
        plan(obj)


def test_bad_placement_is_refused_even_where_nothing_would_change():
    with pytest.raises(IntentError):
        plan(annotated(as_created(recorded_claims()["busy"]), "requried"))


@pytest.mark.parametrize("mutate", [
    lambda c: c.update(spec="x"),
    lambda c: c["spec"].update(devices=[]),
    lambda c: c["spec"]["devices"].update(requests={}),
    lambda c: c["spec"]["devices"]["requests"][0]["exactly"].update(count="2"),
    lambda c: c["spec"]["devices"]["requests"][0].pop("name"),
    lambda c: c["spec"]["devices"].update(constraints=[{"requests": "gpus"}]),
    lambda c: c["metadata"].update(annotations=["x"]),
])
def test_unreadable_claims_raise_claim_error(mutate):
    claim = plain_claim()
    mutate(claim)
    with pytest.raises(ClaimError):
        plan(claim)


# --------------------------------------------------------------------------- admit(): dispatch by kind


def request_for(obj: dict, operation: str = "CREATE", version: str = "v1") -> AdmissionRequest:
    resource = RESOURCES[obj["kind"]]
    kind = {"group": "resource.k8s.io", "version": version, "kind": obj["kind"]}
    gvr = {"group": "resource.k8s.io", "version": version, "resource": resource}
    return AdmissionRequest.model_validate({
        "uid": "u", "kind": kind, "resource": gvr, "requestKind": kind, "requestResource": gvr,
        "namespace": "dra-probe", "operation": operation, "object": obj})


INJECT = InjectOptions(sidecar=SidecarOptions(image="registry.example/gpupair:test"))


def test_admit_sends_claims_and_templates_to_the_claim_plan():
    assert admit(request_for(plain_template()), INJECT, Intent.PREFERRED)[0].outcome == "template-deferred"
    for obj in (plain_claim(), annotated(plain_template(), "preferred"), claim_from_template(plain_template())):
        result, warnings = admit(request_for(obj), INJECT, Intent.PREFERRED)
        assert result.outcome == "claim-prioritized" and result.ops and warnings == []
        assert result.claim.changed == ("gpus",) and result.gpus == 2 and result.placement == "preferred"


def test_admit_leaves_other_operations_and_versions_alone():
    assert admit(request_for(plain_claim(), "UPDATE"), INJECT)[0].outcome == "not-a-pod-create"
    assert admit(request_for(plain_claim(), version="v1beta2"), INJECT)[0].outcome == "not-a-pod-create"


def test_admit_refuses_a_bad_placement_and_lets_unreadable_claims_through():
    refused, _ = admit(request_for(annotated(plain_claim(), "requried")), INJECT)
    assert refused.outcome == "bad-placement" and "requried" in refused.refusal
    broken = plain_claim()
    broken["spec"]["devices"]["requests"] = "x"
    result, warnings = admit(request_for(broken), INJECT)
    assert result.outcome == "claim-unreadable" and result.ops == []
    assert warnings and "ResourceClaim left unchanged" in warnings[0]


def test_admit_uses_the_webhooks_claim_options_and_default():
    options = InjectOptions(sidecar=INJECT.sidecar, default_intent=Intent.NONE,
                            claims=ClaimOptions(device_classes=frozenset({"gpu.example.com"})))
    assert spec_ops(admit(request_for(plain_claim()), options)[0]) == []
    claim = plain_claim(deviceClassName="gpu.example.com")
    assert spec_ops(admit(request_for(claim), options)[0]) == []  # default none
    assert admit(request_for(claim), options, Intent.REQUIRED)[0].outcome == "claim-constrained"


# --------------------------------------------------------------------------- properties

request_names = st.sampled_from(["gpus", "gpu-a", "b", "nic"])
exactly = st.fixed_dictionaries({
    "deviceClassName": st.sampled_from(["gpu.nvidia.com", "nic.example.com"]),
    "allocationMode": st.sampled_from(["ExactCount", "All"]),
    "count": st.integers(1, 9),
}, optional={"adminAccess": st.booleans(),
             "selectors": st.just([{"cel": {"expression": "device.driver == 'gpu.nvidia.com'"}}])})


@st.composite
def claims(draw):
    names = draw(st.lists(request_names, min_size=1, max_size=4, unique=True))
    requests = []
    for name in names:
        exact = draw(exactly)
        if exact["allocationMode"] == "All":
            exact.pop("count")
        if draw(st.booleans()):  # a subrequest has no adminAccess
            sub = {key: value for key, value in exact.items() if key != "adminAccess"}
            requests.append({"name": name, "firstAvailable": [{"name": "only", **sub}]})
        else:
            requests.append({"name": name, "exactly": exact})
    constraints = draw(st.lists(st.builds(
        lambda refs: {"matchAttribute": "resource.kubernetes.io/pcieRoot", **({"requests": refs} if refs else {})},
        st.lists(st.sampled_from(names), unique=True, max_size=2)), max_size=2))
    claim = plain_claim()
    claim["spec"]["devices"] = {"requests": requests, **({"constraints": constraints} if constraints else {})}
    return claim


@settings(max_examples=150, deadline=None)
@given(claims(), st.sampled_from(list(Intent)), st.sampled_from([None, *Intent]))
def test_any_claim_patched_is_valid_and_stable(claim, default, namespace):
    result = plan(claim, default, namespace)
    after = patched(claim, default, namespace)
    before_requests = {r["name"]: r for r in claim["spec"]["devices"]["requests"]}
    after_requests = {r["name"]: r for r in after["spec"]["devices"]["requests"]}
    assert list(before_requests) == list(after_requests), "no request added, removed or reordered"
    for name, request in before_requests.items():
        if name not in result.changed:
            assert after_requests[name] == request
    # what was there is still there, in order, with the new constraints after it
    old = claim["spec"]["devices"].get("constraints") or []
    assert after["spec"]["devices"].get("constraints", [])[:len(old)] == old
    assert (result.ops == []) == (result.outcome == "claim-unchanged")
    assert after["metadata"]["annotations"][PLACEMENT_KEY] == result.placement, "the intent recorded"
