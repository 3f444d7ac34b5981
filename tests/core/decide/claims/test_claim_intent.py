"""The intent of a DRA claim and of a claim pod (gpupair/decide/claims/claim_intent.py), read from what the
claim webhook writes (its real patch applied to the recorded claims) and from the recorded claims."""

from __future__ import annotations

import copy

import jsonpatch
import pytest

from gpupair.kubewire import dra
from gpupair.decide.claims.claim_intent import (
    ANNOTATION, CONSTRAINT, FIRST_AVAILABLE, ClaimIntent, allocated_requests, claim_intent, dra_pod_intent,
    gpu_requests, strictest,
)
from gpupair.decide.pod.intent import PLACEMENT_KEY, Intent
from gpupair.webhook.claims import ClaimOptions, plan_claim
from tests.dra_support import DRIVER, allocated_claim, recorded_claims
from tests.webhook.claim_shapes import plain_claim

GPU_CLASSES = frozenset({"gpu.nvidia.com"})


def recorded(prefix: str) -> dra.ResourceClaim:
    return dra.parse_claim(next(c for c in recorded_claims() if c["metadata"]["name"].startswith(prefix)))


def admitted(intent: Intent, keep_annotation: bool = True, **exactly) -> dra.ResourceClaim:
    """The recorded plain claim as the claim webhook stores it in a namespace defaulting to
    ``intent`` (its real patch applied); without ``keep_annotation``, as a webhook that wrote
    the shape but no annotation left it."""
    obj = plain_claim(**exactly)
    obj["metadata"].update(namespace="team", name="plain-1-gpus-x8jlh")  # the name the apiserver gives it
    plan = plan_claim(obj, "ResourceClaim", ClaimOptions(), Intent.REQUIRED, intent)
    stored = jsonpatch.apply_patch(obj, plan.ops)
    if not keep_annotation:
        stored["metadata"]["annotations"].pop(PLACEMENT_KEY, None)
    return dra.parse_claim(stored)


@pytest.mark.parametrize("intent", list(Intent))
def test_the_annotation_the_webhook_writes_is_the_claims_intent(intent):
    found = claim_intent(admitted(intent))
    assert found == ClaimIntent(intent, ANNOTATION, "team/plain-1-gpus-x8jlh")


@pytest.mark.parametrize("intent, source", [(Intent.REQUIRED, CONSTRAINT), (Intent.PREFERRED, FIRST_AVAILABLE)])
def test_without_the_annotation_the_webhooks_rewrite_tells_the_intent(intent, source):
    found = claim_intent(admitted(intent, keep_annotation=False))
    assert (found.intent, found.source) == (intent, source)


def test_the_recorded_claims_say_what_their_shape_says():
    assert claim_intent(recorded("numa-1")).intent is Intent.REQUIRED  # from the template's constraint
    assert claim_intent(recorded("plain-1")) is None  # as a user writes it: nothing asked
    assert claim_intent(recorded("ext-1")) is None  # kube-scheduler's own: nothing asked
    assert claim_intent(admitted(Intent.NONE, keep_annotation=False)) is None


def test_the_annotation_wins_over_the_shape():
    claim = recorded("numa-1")
    claim.metadata.annotations[PLACEMENT_KEY] = "Preferred "
    assert claim_intent(claim) == ClaimIntent(Intent.PREFERRED, ANNOTATION, "dra-probe/numa-1-gpus-rn5bf")


def test_a_bad_annotation_is_required_with_the_reason():
    claim = recorded("plain-1")
    claim.metadata.annotations[PLACEMENT_KEY] = "requried"
    found = claim_intent(claim)
    assert found.intent is Intent.REQUIRED and found.source == ANNOTATION
    assert "dra-probe/plain-1-gpus-x8jlh" in found.problem and "'requried'" in found.problem
    assert "treated as required" in found.problem


def test_only_the_named_requests_shape_counts():
    claim = recorded("numa-1")
    assert claim_intent(claim, requests={"gpus"}).intent is Intent.REQUIRED
    assert claim_intent(claim, requests={"nics"}) is None
    assert claim_intent(claim, requests=set()) is None


def test_a_constraint_naming_no_request_covers_every_request():
    claim = recorded("plain-1")
    claim.spec.devices.constraints = [dra.DeviceConstraint(matchAttribute=dra.NUMA_ATTRIBUTE)]
    assert claim_intent(claim).intent is Intent.REQUIRED
    claim.spec.devices.constraints = [dra.DeviceConstraint(matchAttribute=dra.PCIE_ROOT_ATTRIBUTE)]
    assert claim_intent(claim) is None  # a pcieRoot constraint is not the NUMA intent


def test_first_available_every_alternative_constrained_is_required_and_unconstrained_first_is_nothing():
    claim = admitted(Intent.PREFERRED, keep_annotation=False)
    claim.spec.devices.constraints.append(dra.DeviceConstraint(matchAttribute=dra.NUMA_ATTRIBUTE,
                                                               requests=["gpus/any"]))
    assert (claim_intent(claim).intent, claim_intent(claim).source) == (Intent.REQUIRED, CONSTRAINT)
    claim = admitted(Intent.PREFERRED, keep_annotation=False)
    claim.spec.devices.constraints[0].requests = ["gpus/any"]  # tried second: the first is unconstrained
    assert claim_intent(claim) is None


def test_two_requests_of_one_claim_count_the_strictest():
    claim = admitted(Intent.PREFERRED, keep_annotation=False)
    second = copy.deepcopy(recorded("numa-1"))
    claim.spec.devices.requests.append(second.spec.devices.requests[0].model_copy(update={"name": "more"}))
    claim.spec.devices.constraints.append(dra.DeviceConstraint(matchAttribute=dra.NUMA_ATTRIBUTE, requests=["more"]))
    assert claim_intent(claim).intent is Intent.REQUIRED
    assert claim_intent(claim, requests={"gpus"}).intent is Intent.PREFERRED


def test_gpu_requests_and_allocated_requests_name_the_gpu_ones():
    preferred = admitted(Intent.PREFERRED)
    assert gpu_requests(preferred, GPU_CLASSES) == {"gpus"}  # by its first subrequest
    assert gpu_requests(preferred, frozenset({"nic.example.com"})) == set()
    claim = dra.parse_claim(allocated_claim("t", "c", "n", [0, 1]))
    assert allocated_requests(claim, DRIVER) == {"gpus"}
    assert allocated_requests(claim, "rdma.example.com") == set()
    claim.status.allocation.devices.results[0].request = "gpus/numa"  # a subrequest was picked
    assert allocated_requests(claim, DRIVER) == {"gpus"}
    claim.status.allocation = None
    assert allocated_requests(claim, DRIVER) == set()


def test_the_strictest_claim_counts_and_a_disagreement_is_named():
    a = ClaimIntent(Intent.PREFERRED, ANNOTATION, "t/a")
    b = ClaimIntent(Intent.REQUIRED, CONSTRAINT, "t/b")
    c = ClaimIntent(Intent.NONE, ANNOTATION, "t/c")
    assert strictest([None, None]) == (None, "")
    assert strictest([a, None]) == (a, "")
    chosen, note = strictest([c, a, b])
    assert chosen is b
    assert note == "the pod's claims ask different placements (t/c: none, t/a: preferred, t/b: required); " \
                   "judged as required"
    assert strictest([c, a])[0] is a
    assert strictest([a, a]) == (a, "")


def pod(annotations=None):
    return {"metadata": {"namespace": "t", "name": "p", "annotations": annotations or {}}}


def test_a_pod_takes_its_claims_intent_then_its_own_then_the_default():
    preferred = ClaimIntent(Intent.PREFERRED, ANNOTATION, "t/a")
    asks_none = pod({PLACEMENT_KEY: "none"})
    assert dra_pod_intent(asks_none, [preferred], Intent.REQUIRED) == (Intent.PREFERRED, "")
    assert dra_pod_intent(asks_none, [None], Intent.REQUIRED) == (Intent.NONE, "")
    assert dra_pod_intent(pod(), [None], Intent.PREFERRED) == (Intent.PREFERRED, "")
    assert dra_pod_intent(pod(), [], Intent.NONE) == (Intent.NONE, "")
    intent, problem = dra_pod_intent(pod({PLACEMENT_KEY: "nope"}), [], Intent.NONE)
    assert intent is Intent.REQUIRED and "treated as required" in problem  # never loosened by a typo


def test_a_bad_claim_annotation_is_reported_through_the_pod():
    bad = claim_intent(dra.parse_claim({"metadata": {"namespace": "t", "name": "x",
                                                     "annotations": {PLACEMENT_KEY: "sometimes"}}}))
    intent, problem = dra_pod_intent(pod({PLACEMENT_KEY: "none"}), [bad], Intent.NONE)
    assert intent is Intent.REQUIRED and "'sometimes'" in problem


def test_what_a_pod_asks_is_none_where_neither_its_claims_nor_its_annotation_say():
    from gpupair.decide.claims.claim_intent import asked_pod_intent

    assert asked_pod_intent(pod(), [None]) == (None, "")
    assert asked_pod_intent(pod({PLACEMENT_KEY: "none"}), []) == (Intent.NONE, "")
    assert asked_pod_intent(pod(), [ClaimIntent(Intent.PREFERRED, CONSTRAINT, "t/a")]) == (Intent.PREFERRED, "")
    intent, problem = asked_pod_intent(pod({PLACEMENT_KEY: "x"}), [])
    assert intent is Intent.REQUIRED and "treated as required" in problem
