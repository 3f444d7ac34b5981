"""The webhook over real TLS, fed AdmissionReviews for DRA ResourceClaimTemplates and
ResourceClaims: the envelope kube-apiserver v1.36.2 sent for a pod (recorded), with the kind,
resource and object a claim CREATE carries, and the recorded DRA objects inside."""

from __future__ import annotations

import json

from gpupair.decide.pod.intent import PLACEMENT_KEY
from tests.webhook.claim_shapes import (
    apply,
    as_created,
    claim_from_template,
    plain_template,
    recorded_claims,
    recorded_template,
    validation_errors,
)
# The same server as the pod tests (their fixtures: a CA, the app with default options on TLS).
from tests.webhook.test_webhook_server import ca, server  # noqa: F401
from tests.webhook.test_webhook_server import FIXTURE, decode_patch, post
from gpupair.webhook.claims import NUMA_ATTRIBUTE, RESOURCES

USER = {"username": "kubernetes-admin", "groups": ["kubeadm:cluster-admins", "system:authenticated"]}
CLAIM_CONTROLLER = {"username": "system:serviceaccount:kube-system:resource-claim-controller",
                    "uid": "5b0c7a5e-7f6a-4a4e-9f57-0a8d1c2b9e11",
                    "groups": ["system:serviceaccounts", "system:serviceaccounts:kube-system", "system:authenticated"]}


def review_for(obj: dict, user: dict = USER, operation: str = "CREATE", uid: str = "0b6f5d7e-claim") -> dict:
    """The recorded pod review's envelope around a claim or template, as the apiserver sends it
    (no ``name`` key for an object made from generateName)."""
    review = json.loads(FIXTURE.read_text())
    request = review["request"]
    kind = {"group": "resource.k8s.io", "version": "v1", "kind": obj["kind"]}
    resource = {"group": "resource.k8s.io", "version": "v1", "resource": RESOURCES[obj["kind"]]}
    request.update(uid=uid, kind=kind, resource=resource, requestKind=kind, requestResource=resource,
                   namespace=obj["metadata"]["namespace"], operation=operation, userInfo=user, object=obj)
    if obj["metadata"].get("name"):
        request["name"] = obj["metadata"]["name"]
    if operation == "UPDATE":
        request["oldObject"] = obj
        request["options"] = {"kind": "UpdateOptions", "apiVersion": "meta.k8s.io/v1"}
    return review


def answer(server, ca, review: dict, path: str = "/mutate?timeout=5s") -> dict:
    status, body = post(server, ca, json.dumps(review).encode(), path)
    assert status == 200
    result = json.loads(body)
    assert result["apiVersion"] == "admission.k8s.io/v1" and result["kind"] == "AdmissionReview"
    assert result["response"]["uid"] == review["request"]["uid"]
    return result["response"]


def test_a_template_in_a_required_namespace_is_left_and_its_claims_get_the_numa_constraint(server, ca):
    template = as_created(plain_template())
    response = answer(server, ca, review_for(template), "/mutate/placement/required?timeout=5s")
    assert response == {"uid": "0b6f5d7e-claim", "allowed": True}, "it asks nothing: planned claim by claim"
    claim = claim_from_template(template)
    response = answer(server, ca, review_for(claim, CLAIM_CONTROLLER), "/mutate/placement/required?timeout=5s")
    assert response["allowed"] is True and response["patchType"] == "JSONPatch"
    after = apply(claim, decode_patch({"response": response}))
    assert after["spec"]["devices"]["constraints"] == [{"matchAttribute": NUMA_ATTRIBUTE, "requests": ["gpus"]}]
    assert after["metadata"]["annotations"][PLACEMENT_KEY] == "required"
    assert validation_errors(after["spec"]) == []
    # Admitted again (reinvocation) it goes through unchanged.
    assert answer(server, ca, review_for(after, CLAIM_CONTROLLER)) == {"uid": "0b6f5d7e-claim", "allowed": True}


def test_a_templates_claim_in_a_preferred_namespace_is_prioritized(server, ca):
    claim = claim_from_template(as_created(plain_template()))
    response = answer(server, ca, review_for(claim, CLAIM_CONTROLLER), "/mutate/placement/preferred?timeout=5s")
    after = apply(claim, decode_patch({"response": response}))
    (request,) = after["spec"]["devices"]["requests"]
    assert [sub["name"] for sub in request["firstAvailable"]] == ["numa", "any"]
    assert after["spec"]["devices"]["constraints"] == [{"matchAttribute": NUMA_ATTRIBUTE, "requests": ["gpus/numa"]}]
    assert after["metadata"]["annotations"][PLACEMENT_KEY] == "preferred"
    assert validation_errors(after["spec"]) == []
    assert "patch" not in answer(server, ca, review_for(after, CLAIM_CONTROLLER), "/mutate/placement/required")


def test_the_recorded_template_and_claims_keep_their_requests_and_record_the_intent(server, ca):
    template = as_created(recorded_template())
    assert answer(server, ca, review_for(template)) == {"uid": "0b6f5d7e-claim", "allowed": True}
    for obj, user in ((as_created(recorded_claims()["numa"]), CLAIM_CONTROLLER),
                      (as_created(recorded_claims()["busy"]), USER)):
        response = answer(server, ca, review_for(obj, user))
        after = apply(obj, decode_patch({"response": response}))
        assert after["metadata"]["annotations"][PLACEMENT_KEY] == "required", obj["metadata"].get("name")
        assert after["spec"] == obj["spec"]
    ext = as_created(recorded_claims()["ext"])  # kube-scheduler's own: nothing asked, nothing recorded
    assert answer(server, ca, review_for(ext, USER)) == {"uid": "0b6f5d7e-claim", "allowed": True}


def test_the_recorded_plain_claim_is_constrained_by_the_cluster_default(server, ca):
    claim = as_created(recorded_claims()["plain"])
    review = review_for(claim, CLAIM_CONTROLLER)
    assert "name" not in review["request"]
    response = answer(server, ca, review)
    after = apply(claim, decode_patch({"response": response}))
    assert after["spec"] == as_created(recorded_claims()["numa"])["spec"]
    assert after["metadata"]["annotations"][PLACEMENT_KEY] == "required"


def test_a_claim_in_a_none_namespace_keeps_its_requests_and_records_none(server, ca):
    claim = as_created(recorded_claims()["plain"])
    after = apply(claim, decode_patch({"response": answer(server, ca, review_for(claim), "/mutate/placement/none")}))
    assert after["spec"] == claim["spec"]
    assert after["metadata"]["annotations"][PLACEMENT_KEY] == "none"


def test_a_bad_placement_is_refused_with_the_reason(server, ca):
    template = as_created(plain_template())
    template["metadata"]["annotations"] = {PLACEMENT_KEY: "requried"}
    response = answer(server, ca, review_for(template))
    assert response["allowed"] is False
    assert response["status"]["code"] == 400 and "requried" in response["status"]["message"]
    assert "required, preferred, none" in response["status"]["message"]


def test_an_update_is_let_through_unchanged(server, ca):
    claim = as_created(recorded_claims()["plain"])
    claim["metadata"]["name"] = "plain-1-gpus-x8jlh"
    assert answer(server, ca, review_for(claim, operation="UPDATE")) == {"uid": "0b6f5d7e-claim", "allowed": True}
