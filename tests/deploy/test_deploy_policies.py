"""The CEL in deploy/ does what its comments say: the reporter's ValidatingAdmissionPolicies, the
policy that keeps pods' verdict annotations the reporter's, and the webhook's matchConditions,
evaluated with cel-python against admission requests shaped like the apiserver's (the webhook
and pod-CREATE cases start from a recorded v1.36.2 AdmissionReview).

cel-python is a generic CEL runtime: this checks the expressions' logic, not the apiserver's
schema type-checking (kubernetes-validate checks the objects' shape in test_deploy.py)."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import celpy
import pytest
import yaml

from gpupair.decide.judge import verdict

from gpupair.kubewire import leases
from tests.deploy_manifests import DEPLOY, OVERLAYS, find, needs_kubectl, render
from gpupair.webhook.admission import REPORTER_KEYS
from tests.real_k8s import REAL_K8S

REPORTER = "system:serviceaccount:gpupair-system:gpupair-reporter"
FIXTURE = REAL_K8S / "admission-pod-create-p1-05-job-generatename.json"

_env = celpy.Environment()


def evaluate(expression: str, activation: dict):
    return _env.program(_env.compile(expression)).evaluate(activation)


def to_cel(value):
    return celpy.json_to_cel(value)


def admit(policy: dict, request: dict) -> tuple[bool, list[str]]:
    """A ValidatingAdmissionPolicy's verdict on a CREATE or UPDATE: not matched -> allowed; any
    validation false -> denied with its message; an evaluation error -> failurePolicy (Fail: denied)."""
    spec = policy["spec"]
    activation = {"request": to_cel(request), "object": to_cel(request["object"]),
                  "oldObject": to_cel(request.get("oldObject"))}
    for condition in spec.get("matchConditions", []):
        if not evaluate(condition["expression"], activation):
            return True, []
    variables = {}
    for variable in spec.get("variables", []):
        activation["variables"] = celpy.celtypes.MapType(variables)
        variables[celpy.celtypes.StringType(variable["name"])] = evaluate(variable["expression"], activation)
    activation["variables"] = celpy.celtypes.MapType(variables)
    denied = []
    for validation in spec["validations"]:
        try:
            ok = evaluate(validation["expression"], activation)
        except celpy.CELEvalError as exc:
            assert spec["failurePolicy"] == "Fail"
            denied.append(f"error: {exc}")
            continue
        if isinstance(ok, celpy.CELEvalError):
            denied.append(f"error: {ok}")
        elif not ok:
            message = validation.get("message")
            if "messageExpression" in validation:
                message = str(evaluate(validation["messageExpression"], activation))
            denied.append(message)
    return not denied, denied


def update_request(resource: str, old: dict, new: dict, *, user: str = REPORTER, node: str | None = "gpu-1") -> dict:
    extra = {"authentication.kubernetes.io/credential-id": ["JTI=abc"]}
    if node is not None:
        extra.update({"authentication.kubernetes.io/node-name": [node],
                      "authentication.kubernetes.io/node-uid": ["0b7f5c0e-0000-4000-8000-000000000001"],
                      "authentication.kubernetes.io/pod-name": ["gpupair-reporter-x7k2p"],
                      "authentication.kubernetes.io/pod-uid": ["5d9e0c7a-0000-4000-8000-000000000002"]})
    return {
        "uid": "6f1c2d3e-0000-4000-8000-000000000003", "operation": "UPDATE",
        "resource": {"group": "", "version": "v1", "resource": resource},
        "name": new["metadata"]["name"], "namespace": new["metadata"].get("namespace", ""),
        "userInfo": {"username": user, "uid": "1", "groups": ["system:serviceaccounts", "system:authenticated"],
                     "extra": extra},
        "object": new, "oldObject": old,
    }


@pytest.fixture(scope="module")
def objs():
    """The policy and webhook files as written (kustomize only adds a label to them), so these
    tests run where kubectl is missing too."""
    docs = []
    for name in ("reporter/admission-policy.yaml", "verdict-policy.yaml", "webhook/mutatingwebhookconfiguration.yaml"):
        docs += [d for d in yaml.safe_load_all((DEPLOY / "base" / name).read_text()) if d]
    return docs


# --------------------------------------------------------------------------- nodes


def node(name: str = "gpu-1", annotations: dict | None = None, labels: dict | None = None) -> dict:
    meta = {"name": name, "uid": "n-1", "resourceVersion": "41",
            "labels": {"kubernetes.io/hostname": name, "nvidia.com/gpu.present": "true", **(labels or {})}}
    if annotations is not None:
        meta["annotations"] = annotations
    return {"apiVersion": "v1", "kind": "Node", "metadata": meta,
            "spec": {"podCIDR": "10.244.1.0/24", "providerID": "kind://docker/kind/" + name},
            "status": {"allocatable": {"nvidia.com/gpu": "8"}}}


BASE_ANNOTATIONS = {"node.alpha.kubernetes.io/ttl": "0", "gpupair.io/free": "old"}


def node_update(change, **kwargs) -> dict:
    old = node(annotations=dict(BASE_ANNOTATIONS))
    new = copy.deepcopy(old)
    change(new)
    return update_request("nodes", old, new, **kwargs)


def set_annotation(key, value):
    return lambda o: o["metadata"].setdefault("annotations", {}).__setitem__(key, value)


@pytest.mark.parametrize("change", [
    set_annotation("gpupair.io/free", "new"),
    set_annotation("gpupair.io/layout", "{}"),
    set_annotation("gpupair.io/allocations", '{"v":1,"pods":[]}'),
    lambda o: o["metadata"]["annotations"].pop("gpupair.io/free"),
], ids=["change-own", "add-own", "add-ledger", "remove-own"])
def test_reporter_may_write_gpupair_annotations_on_its_node(objs, change):
    policy = find(objs, "ValidatingAdmissionPolicy", "gpupair-reporter-nodes")
    assert admit(policy, node_update(change)) == (True, [])


def test_reporter_may_annotate_a_node_that_had_no_annotations(objs):
    policy = find(objs, "ValidatingAdmissionPolicy", "gpupair-reporter-nodes")
    old = node(annotations=None)
    new = node(annotations={"gpupair.io/layout": "{}"})
    assert admit(policy, update_request("nodes", old, new)) == (True, [])


@pytest.mark.parametrize("change,why", [
    (set_annotation("node.alpha.kubernetes.io/ttl", "30"), "only gpupair.io/ annotations"),
    (lambda o: o["metadata"]["annotations"].pop("node.alpha.kubernetes.io/ttl"), "only gpupair.io/ annotations"),
    (set_annotation("gpupair.io.evil.example/x", "1"), "only gpupair.io/ annotations"),
    (lambda o: o["metadata"]["labels"].__setitem__("nvidia.com/gpu.present", "false"), "labels, spec"),
    (lambda o: o["spec"].__setitem__("taints", [{"key": "x", "effect": "NoSchedule"}]), "labels, spec"),
    (lambda o: o["spec"].__setitem__("unschedulable", True), "labels, spec"),
    (lambda o: o["metadata"].__setitem__("finalizers", ["example.com/keep"]), "labels, spec"),
], ids=["foreign-annotation", "remove-foreign", "lookalike-prefix", "label", "taint", "cordon", "finalizer"])
def test_reporter_may_change_nothing_else_on_its_node(objs, change, why):
    policy = find(objs, "ValidatingAdmissionPolicy", "gpupair-reporter-nodes")
    allowed, messages = admit(policy, node_update(change))
    assert not allowed and any(why in m for m in messages), messages


def test_reporter_may_not_touch_another_node(objs):
    policy = find(objs, "ValidatingAdmissionPolicy", "gpupair-reporter-nodes")
    old = node("gpu-2", annotations={"gpupair.io/free": "old"})
    new = node("gpu-2", annotations={"gpupair.io/free": "forged"})
    allowed, messages = admit(policy, update_request("nodes", old, new, node="gpu-1"))
    assert not allowed and messages == ["the gpupair reporter on gpu-1 may not change node gpu-2"]


@pytest.mark.parametrize("without", ["node-claims", "extra"])
def test_a_token_without_a_node_is_refused(objs, without):
    policy = find(objs, "ValidatingAdmissionPolicy", "gpupair-reporter-nodes")
    request = node_update(set_annotation("gpupair.io/free", "new"), node=None)
    if without == "extra":  # e.g. a legacy Secret-based token: no extra at all
        del request["userInfo"]["extra"]
    allowed, messages = admit(policy, request)
    assert not allowed
    assert "must call with its pod's node-bound service-account token" in messages[0]


def test_other_users_are_not_this_policys_business(objs):
    policy = find(objs, "ValidatingAdmissionPolicy", "gpupair-reporter-nodes")
    request = node_update(lambda o: o["metadata"]["labels"].__setitem__("x", "y"),
                          user="system:node:gpu-1", node=None)
    assert admit(policy, request) == (True, [])


# --------------------------------------------------------------------------- node Leases


def lease(node_name: str = "gpu-1", *, previous: dict | None = None, uid: str = "n-1") -> dict:
    """The Lease the reporter sends (gpupair.kubewire.leases builds it), as admission sees it."""
    body = leases.lease_body(node_name, "gpupair-system", 120, 1_764_543_321_123_456_789,
                             previous=previous, node_uid=uid)
    body["metadata"].setdefault("resourceVersion", "77")
    return body


def lease_request(operation: str, new: dict, old: dict | None = None, **kwargs) -> dict:
    request = update_request("leases", old or new, new, **kwargs)
    request["operation"] = operation
    request["resource"] = {"group": "coordination.k8s.io", "version": "v1", "resource": "leases"}
    if operation == "CREATE":
        request["oldObject"] = None
    return request


@pytest.fixture(scope="module")
def lease_policy(objs):
    return find(objs, "ValidatingAdmissionPolicy", "gpupair-reporter-leases")


def test_reporter_may_create_and_renew_its_nodes_lease(lease_policy):
    created = lease()
    assert created["spec"]["renewTime"] == "2025-11-30T22:55:21.123456Z"
    assert admit(lease_policy, lease_request("CREATE", created)) == (True, [])
    renewed = lease(previous=created)
    assert admit(lease_policy, lease_request("UPDATE", renewed, created)) == (True, [])
    no_owner = lease(uid="")
    assert "ownerReferences" not in no_owner["metadata"]
    assert admit(lease_policy, lease_request("CREATE", no_owner)) == (True, [])


def _relabel(o):
    o["metadata"]["labels"] = {"app.kubernetes.io/name": "gpupair-reporter"}


@pytest.mark.parametrize("operation", ["CREATE", "UPDATE"])
@pytest.mark.parametrize("change,why", [
    (lambda o: o["metadata"].__setitem__("name", "gpu-2"), "on gpu-1 may not write Lease gpu-2"),
    (lambda o: o["metadata"].__setitem__("name", "gpupair-extender"), "may not write Lease gpupair-extender"),
    (lambda o: o["spec"].__setitem__("holderIdentity", "gpu-2"), "must hold its Lease as gpu-1"),
    (lambda o: o["spec"].pop("holderIdentity"), "must hold its Lease as gpu-1"),
    (_relabel, "must carry the label gpupair.io/heartbeat=node"),
    (lambda o: o["metadata"]["ownerReferences"][0].__setitem__("name", "gpu-2"), "owned only by its own Node"),
    (lambda o: o["metadata"]["ownerReferences"].append(
        {"apiVersion": "apps/v1", "kind": "Deployment", "name": "x", "uid": "d"}), "owned only by its own Node"),
], ids=["other-node", "leader-lease", "other-holder", "no-holder", "unlabelled", "other-owner", "foreign-owner"])
def test_reporter_may_write_no_other_lease(lease_policy, operation, change, why):
    new = lease()
    change(new)
    allowed, messages = admit(lease_policy, lease_request(operation, new, lease()))
    assert not allowed and any(why in m for m in messages), messages


def test_a_lease_write_without_a_node_bound_token_is_refused(lease_policy):
    allowed, messages = admit(lease_policy, lease_request("UPDATE", lease(), lease(), node=None))
    assert not allowed and "node-bound service-account token" in messages[0]


def test_other_lease_writers_are_not_this_policys_business(lease_policy):
    # The extender's leader election, the kubelet's own node Lease: not the reporter's.
    request = lease_request("UPDATE", lease("gpupair-extender"), lease("gpupair-extender"),
                            user="system:serviceaccount:gpupair-system:gpupair-extender", node=None)
    assert admit(lease_policy, request) == (True, [])


# --------------------------------------------------------------------------- pods


def pod(node_name: str | None = "gpu-1", annotations: dict | None = None) -> dict:
    spec = {"containers": [{"name": "cuda", "image": "nvidia/cuda:12.4.1-base-ubuntu22.04",
                            "resources": {"limits": {"nvidia.com/gpu": "2"}, "requests": {"nvidia.com/gpu": "2"}}}]}
    if node_name:
        spec["nodeName"] = node_name
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "test-01-1", "namespace": "gpu-jobs", "uid": "p-1", "labels": {"app": "t"},
                         "annotations": dict(annotations or {})},
            "spec": spec, "status": {"phase": "Running"}}


VERDICT = {"gpupair.io/granted": "GPU0+GPU1", "gpupair.io/numa": "NUMA0+NUMA0", "gpupair.io/link": "NODE",
           "gpupair.io/verdict": "PASS"}


def test_reporter_may_write_a_verdict_on_a_pod_of_its_node(objs):
    policy = find(objs, "ValidatingAdmissionPolicy", "gpupair-reporter-pods")
    request = update_request("pods", pod(), pod(annotations=VERDICT))
    assert admit(policy, request) == (True, [])


@pytest.mark.parametrize("old,new,why", [
    (pod("gpu-2"), pod("gpu-2", annotations=VERDICT), "may change only pods on that node"),
    (pod(None), pod(None, annotations=VERDICT), "may change only pods on that node"),
    (pod(), pod(annotations={"example.com/owner": "me"}), "only gpupair.io/ annotations"),
], ids=["other-node", "unscheduled", "foreign-annotation"])
def test_reporter_is_refused_other_pod_changes(objs, old, new, why):
    policy = find(objs, "ValidatingAdmissionPolicy", "gpupair-reporter-pods")
    allowed, messages = admit(policy, update_request("pods", old, new))
    assert not allowed and any(why in m for m in messages), messages


@pytest.mark.parametrize("field", ["labels", "image"])
def test_reporter_may_not_change_a_pods_labels_or_spec(objs, field):
    policy = find(objs, "ValidatingAdmissionPolicy", "gpupair-reporter-pods")
    new = pod(annotations=VERDICT)
    if field == "labels":
        new["metadata"]["labels"]["app"] = "hijacked"
    else:
        new["spec"]["containers"][0]["image"] = "evil/miner:latest"
    allowed, messages = admit(policy, update_request("pods", pod(), new))
    assert not allowed and any("may not change a pod's spec, labels" in m for m in messages)


# --------------------------------------------------------------------------- pod verdicts (any user)

USER = "alice@example.com"
VERDICT_KEYS = (verdict.GRANTED_KEY, verdict.PCI_KEY, verdict.NUMA_KEY, verdict.LINK_KEY, verdict.P2P_KEY,
                verdict.VERDICT_KEY, verdict.PLAN_MATCH_KEY, verdict.PLANNED_KEY, verdict.VERDICT_PLACEMENT_KEY,
                verdict.GRANTED_NIC_KEY, verdict.NIC_LINK_KEY, verdict.VERDICT_SCOPE_KEY)
# Everything a bound, verified pod carries: the reporter's six keys and the plan, with its match.
BOUND = {**VERDICT, verdict.PCI_KEY: "00000000:21:00.0+00000000:31:00.0", verdict.P2P_KEY: "supported",
         verdict.PLANNED_KEY: "GPU0+GPU1", verdict.PLAN_MATCH_KEY: "true"}


def user_request(operation: str, new: dict, old: dict | None = None, *, user: str = USER,
                 subresource: str | None = None) -> dict:
    request = {
        "uid": "7a2b3c4d-0000-4000-8000-000000000004", "operation": operation,
        "kind": {"group": "", "version": "v1", "kind": "Pod"},
        "resource": {"group": "", "version": "v1", "resource": "pods"},
        "name": new["metadata"]["name"], "namespace": new["metadata"]["namespace"],
        "userInfo": {"username": user, "uid": "2", "groups": ["system:authenticated"]},
        "object": new, "oldObject": old,
    }
    if subresource:
        request["subResource"] = subresource
    return request


@pytest.fixture(scope="module")
def verdicts(objs):
    return find(objs, "ValidatingAdmissionPolicy", "gpupair-pod-verdicts")


def test_the_policy_guards_the_keys_the_reporter_writes_and_the_webhook_strips(verdicts):
    (keys,) = [v for v in verdicts["spec"]["variables"] if v["name"] == "keys"]
    guarded = list(evaluate(keys["expression"], {}))
    assert sorted(guarded) == sorted(VERDICT_KEYS) == sorted(REPORTER_KEYS)


@pytest.mark.parametrize("key", VERDICT_KEYS)
def test_a_user_may_not_create_a_pod_with_a_verdict(verdicts, key):
    allowed, messages = admit(verdicts, user_request("CREATE", pod(None, annotations={key: "forged"})))
    assert not allowed
    assert messages == [f"a new pod may not carry {key} (1 gpupair verdict annotation(s) in all): "
                        "only gpupair writes them; remove them from the pod or its template"]


def test_a_create_forging_a_whole_verdict_is_denied_once(verdicts):
    allowed, messages = admit(verdicts, user_request("CREATE", pod(None, annotations=BOUND)))
    assert not allowed and len(messages) == 1 and "(8 gpupair verdict annotation(s) in all)" in messages[0]


@pytest.mark.parametrize("annotations", [None, {}, {"example.com/team": "ml", "gpupair.io/verify": "false"}],
                         ids=["no-annotations-key", "empty", "foreign-and-opt-out"])
def test_a_pod_without_verdict_keys_is_created(verdicts, annotations):
    p = pod(None)
    if annotations is None:
        del p["metadata"]["annotations"]
    else:
        p["metadata"]["annotations"] = annotations
    assert admit(verdicts, user_request("CREATE", p)) == (True, [])


def test_the_recorded_job_controller_create(verdicts):
    request = json.loads(FIXTURE.read_text())["request"]
    assert request["operation"] == "CREATE" and request["oldObject"] is None
    assert "annotations" not in request["object"]["metadata"]
    assert admit(verdicts, request) == (True, [])
    request["object"]["metadata"]["annotations"] = {verdict.VERDICT_KEY: "PASS"}  # from a forged pod template
    allowed, messages = admit(verdicts, request)
    assert not allowed and messages[0].startswith("a new pod may not carry gpupair.io/verdict ")


@pytest.mark.parametrize("old,new,key", [
    ({}, {verdict.VERDICT_KEY: "PASS"}, verdict.VERDICT_KEY),
    ({**BOUND, verdict.VERDICT_KEY: "FAIL"}, BOUND, verdict.VERDICT_KEY),
    (BOUND, {k: v for k, v in BOUND.items() if k != verdict.LINK_KEY}, verdict.LINK_KEY),
    (BOUND, {**BOUND, verdict.PLANNED_KEY: "GPU4+GPU5"}, verdict.PLANNED_KEY),
    ({verdict.PLANNED_KEY: "GPU0+GPU1"}, {verdict.PLANNED_KEY: "GPU0+GPU1", verdict.PLAN_MATCH_KEY: "true"},
     verdict.PLAN_MATCH_KEY),
], ids=["add", "change-fail-to-pass", "remove", "rewrite-plan", "add-plan-match"])
@pytest.mark.parametrize("subresource", [None, "status"])
def test_a_user_may_not_touch_a_pods_verdict(verdicts, old, new, key, subresource):
    request = user_request("UPDATE", pod(annotations=new), pod(annotations=old), subresource=subresource)
    allowed, messages = admit(verdicts, request)
    assert not allowed
    assert messages == [f"only the gpupair reporter may set, change or remove {key} (1 gpupair verdict annotation(s) touched)"]


def test_dropping_every_annotation_of_a_verified_pod_is_denied(verdicts):
    old = pod(annotations=BOUND)
    new = pod()
    del new["metadata"]["annotations"]
    allowed, messages = admit(verdicts, user_request("UPDATE", new, old))
    assert not allowed and "(8 gpupair verdict annotation(s) touched)" in messages[0]


@pytest.mark.parametrize("change", [
    set_annotation("example.com/owner", "me"),
    set_annotation("gpupair.io/verify", "false"),
    lambda o: o["metadata"]["labels"].__setitem__("app", "renamed"),
    lambda o: o["metadata"].__setitem__("finalizers", ["example.com/keep"]),
    lambda o: o["status"].__setitem__("phase", "Succeeded"),
], ids=["foreign-annotation", "other-gpupair-key", "label", "finalizer", "status"])
def test_a_user_may_change_everything_else_on_a_verified_pod(verdicts, change):
    old = pod(annotations=BOUND)
    new = copy.deepcopy(old)
    change(new)
    assert admit(verdicts, user_request("UPDATE", new, old)) == (True, [])


def test_an_update_of_a_pod_without_verdict_keys_is_allowed(verdicts):
    old = pod()
    del old["metadata"]["annotations"]
    new = pod(annotations={"example.com/owner": "me"})
    assert admit(verdicts, user_request("UPDATE", new, old)) == (True, [])


def test_the_reporter_is_not_held_by_this_policy(verdicts):
    """Its own policy (gpupair-reporter-pods) holds it to its node; this one skips it."""
    request = user_request("UPDATE", pod(annotations=BOUND), pod(annotations={verdict.PLANNED_KEY: "GPU0+GPU1"}),
                           user=REPORTER)
    (condition,) = verdicts["spec"]["matchConditions"]
    assert evaluate(condition["expression"], {"request": to_cel(request)}) == celpy.celtypes.BoolType(False)
    assert admit(verdicts, request) == (True, [])
    # the same write from anyone else is refused
    assert admit(verdicts, user_request("UPDATE", request["object"], request["oldObject"]))[0] is False


# --------------------------------------------------------------------------- webhook matchConditions


def recorded_pod() -> dict:
    return copy.deepcopy(json.loads(FIXTURE.read_text())["request"]["object"])


def webhook_called(objs, pod_object: dict) -> bool:
    hook, *_ = find(objs, "MutatingWebhookConfiguration", "gpupair-webhook")["webhooks"]  # the rest: same conditions
    activation = {"object": to_cel(pod_object), "oldObject": to_cel(None),
                  "request": to_cel({"operation": "CREATE"})}
    return all(bool(evaluate(c["expression"], activation)) for c in hook["matchConditions"])


def test_recorded_gpu_pod_reaches_the_webhook(objs):
    p = recorded_pod()
    assert p["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "2"
    assert webhook_called(objs, p)


def test_gpus_only_in_an_init_container_reach_the_webhook(objs):
    p = recorded_pod()
    gpu = p["spec"]["containers"][0].pop("resources")
    p["spec"]["initContainers"] = [{"name": "warmup", "image": "busybox", "resources": gpu}]
    assert webhook_called(objs, p)


@pytest.mark.parametrize("mutate", [
    lambda p: p["spec"]["containers"][0].pop("resources"),
    lambda p: p["spec"]["containers"][0].__setitem__("resources", {"limits": {"cpu": "1"}}),
    lambda p: p["metadata"].setdefault("annotations", {}).__setitem__("gpupair.io/verify", "false"),
], ids=["no-resources", "cpu-only", "opted-out"])
def test_pods_that_cannot_need_a_verifier_skip_the_webhook(objs, mutate):
    p = recorded_pod()
    mutate(p)
    assert not webhook_called(objs, p)


def test_an_explicit_verify_true_still_reaches_the_webhook(objs):
    p = recorded_pod()
    p["metadata"]["annotations"] = {"gpupair.io/verify": "true"}
    assert webhook_called(objs, p)


@needs_kubectl
@pytest.mark.parametrize("overlay", [o for o in OVERLAYS if o.startswith("second-scheduler")])
def test_with_a_second_scheduler_opted_out_gpu_pods_still_reach_the_webhook(overlay):
    # The webhook routes them (spec.schedulerName) though it adds no verifier.
    p = recorded_pod()
    p["metadata"]["annotations"] = {"gpupair.io/verify": "false"}
    assert webhook_called(render(overlay), p)
    no_gpu = recorded_pod()
    no_gpu["spec"]["containers"][0].pop("resources")
    assert not webhook_called(render(overlay), no_gpu)
