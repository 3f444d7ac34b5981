"""Claim pods marked with gpupair.io/claim (webhook.claim_pods), on the real Job pod shape: the
patch applied with a JSON-patch library, the pod checked."""

from __future__ import annotations

import copy

import pytest

from gpupair.decide.pod.intent import IntentError
from gpupair.webhook.admission import InjectOptions, plan
from gpupair.webhook.claim_pods import CLAIM_POD_RESOURCE, MARK
from tests.webhook.test_webhook_patch import OPTIONS, patched, pod_with

MARKING = InjectOptions(sidecar=OPTIONS.sidecar, claim_pod_resource=CLAIM_POD_RESOURCE)
CLAIMS = [{"name": "gpus", "resourceClaimTemplateName": "two-gpus"}]


def claim_pod(**resources) -> dict:
    pod = pod_with(None)
    pod["spec"]["resourceClaims"] = copy.deepcopy(CLAIMS)
    if resources:
        pod["spec"]["containers"][0]["resources"] = resources
    return pod


def asked(pod: dict) -> tuple[dict, dict]:
    resources = pod["spec"]["containers"][0]["resources"]
    return resources.get("requests") or {}, resources.get("limits") or {}


def test_a_claim_pod_requests_and_limits_a_zero_mark_in_its_first_container():
    """Zero: kube-scheduler routes by the name, and nothing that counts a quantity counts a zero,
    so no scheduler configuration can leave the pod waiting on it (webhook.claim_pods)."""
    after, ops = patched(claim_pod(), MARKING)
    assert MARK == "0" and asked(after) == ({CLAIM_POD_RESOURCE: "0"}, {CLAIM_POD_RESOURCE: "0"})
    assert {o["path"] for o in ops} == {"/spec/containers/0/resources"}


@pytest.mark.parametrize("resources", [
    {"requests": {"cpu": "100m"}},
    {"limits": {"memory": "1Gi"}},
    {"requests": {"cpu": "100m"}, "limits": {"memory": "1Gi"}, "claims": [{"name": "gpus"}]},
])
def test_the_mark_joins_what_the_container_already_asks(resources):
    after, _ = patched(claim_pod(**copy.deepcopy(resources)), MARKING)
    requests, limits = asked(after)
    assert requests == {**resources.get("requests", {}), CLAIM_POD_RESOURCE: MARK}
    assert limits == {**resources.get("limits", {}), CLAIM_POD_RESOURCE: MARK}
    assert after["spec"]["containers"][0]["resources"].get("claims") == resources.get("claims")


def test_a_marked_pod_comes_back_unchanged():
    once, _ = patched(claim_pod(), MARKING)
    again, ops = patched(copy.deepcopy(once), MARKING)
    assert ops == [] and again == once


@pytest.mark.parametrize("why, pod, options", [
    ("no claims", pod_with(None), MARKING),
    ("an empty claim list", {**pod_with(None), "spec": {**pod_with(None)["spec"], "resourceClaims": []}}, MARKING),
    ("device-plugin GPUs: they reach the extender already", {**pod_with(1), "spec": {**pod_with(1)["spec"],
                                                                                    "resourceClaims": CLAIMS}}, MARKING),
    ("marking off (no dra component)", claim_pod(), OPTIONS),
])
def test_other_pods_are_not_marked(why, pod, options):
    _, ops = patched(pod, options)
    assert not [o for o in ops if CLAIM_POD_RESOURCE.replace("/", "~1") in o["path"] or "resources" in o["path"]], why


def test_a_marked_claim_pod_goes_to_gpupairs_own_scheduler_where_there_is_one():
    options = InjectOptions(sidecar=OPTIONS.sidecar, claim_pod_resource=CLAIM_POD_RESOURCE,
                            scheduler_name="gpupair-scheduler")
    after, _ = patched(claim_pod(), options)
    assert after["spec"]["schedulerName"] == "gpupair-scheduler"


def test_a_pod_asking_a_scope_gpupair_does_not_know_is_refused_with_the_choices():
    pod = claim_pod()
    pod["metadata"]["annotations"] = {"gpupair.io/scope": "nvlnk"}
    with pytest.raises(IntentError, match=r"gpupair.io/scope: 'nvlnk' is not a scope gpupair knows \(one of numa, "):
        plan(pod, MARKING)
    pod["metadata"]["annotations"] = {"gpupair.io/scope": "nvlink"}
    assert plan(pod, MARKING).marked
