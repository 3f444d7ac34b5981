"""The fault matrix on DRA nodes (marker ``chaos``): the burst of test_chaos.py with its GPUs
served by DRA (dra_burst.py), and the faults that only DRA has: the driver republishing its
slices, and a pod's claim deleted while the pod binds."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest

from tests.controlplane.chaos_rows import check, counter, running
from tests.controlplane.dra import RESOURCE, allocated_devices, pod_claims
from tests.controlplane.dra_burst import DraBurstCluster

pytestmark = pytest.mark.chaos


@pytest.fixture(scope="module")
def cluster(control_plane, deploy_renders) -> Iterator[DraBurstCluster]:
    directory = control_plane.directory / "chaos-dra"
    directory.mkdir()
    yield from running(DraBurstCluster(control_plane, deploy_renders("dra"), directory, namespace="chaos-dra"),
                       "chaos-dra")


@pytest.fixture
def fresh(cluster: DraBurstCluster) -> DraBurstCluster:
    cluster.clear()
    return cluster


def test_the_driver_republishes_its_slices_mid_burst(fresh: DraBurstCluster):
    """A new slice of the next generation for every pool, then the old ones deleted, while pods
    are being allocated and bound: nothing is allocated twice and no SYS pair is given."""
    def fault() -> None:
        fresh.republish_slices()

    restarts = counter(fresh, "gpupair_extender_watch_restarts_total", resource="resourceslices")
    outcome = fresh.burst("dra-slices", fault)
    check(fresh, outcome, ("stale", "ResourceSlice"), 'gpupair_extender_watch_restarts_total{resource="resourceslices"}',
          counter(fresh, "gpupair_extender_watch_restarts_total", resource="resourceslices") - restarts)
    assert len(outcome.placed) == outcome.pods


def test_a_claim_deleted_while_its_pod_binds(fresh: DraBurstCluster):
    """The pod's claim is allocated (PreBind), its bind held at the extender's door, and the
    claim deleted: its delete protection keeps it while the pod is bound, and its devices must
    stay taken for every other pod."""
    caught: dict[str, str] = {}

    def fault() -> None:
        fresh.balancer.hold_answers(b"/bind", request_too=True)
        assert fresh.balancer.held.wait(60), "no bind reached the extender"
        caught["pod"] = re.search(rb'"PodName":\s*"([^"]+)"', fresh.balancer.held_request).group(1).decode()
        try:
            pod = fresh.api.get("v1", "Pod", caught["pod"], fresh.namespace)
            [claim] = pod_claims(fresh.api, pod)
            caught["claim"] = claim["metadata"]["name"]
            fresh.api.delete(fresh.api.path(RESOURCE, "ResourceClaim", caught["claim"], fresh.namespace))
        finally:
            fresh.balancer.release()

    failed_before = counter(fresh, "gpupair_extender_decisions_total", verb="bind", outcome="failed")
    outcome = fresh.burst("dra-claim", fault)
    failed = counter(fresh, "gpupair_extender_decisions_total", verb="bind", outcome="failed") - failed_before
    claim = fresh.api.find(RESOURCE, "ResourceClaim", caught["claim"], fresh.namespace)
    outcome.notes["deleted_claim_of"] = caught["pod"]
    outcome.notes["deleted_claim_after"] = "gone" if claim is None else (
        "deleting, allocated" if allocated_devices(claim) else "deleting, not allocated")
    check(fresh, outcome, ("stale", "claim"), 'gpupair_extender_decisions_total{verb="bind",outcome="failed"}', failed)
    assert set(outcome.placed) | set(outcome.waiting) == set(fresh.pod_names("dra-claim"))
    if caught["pod"] in outcome.placed:  # a bound pod's devices are never freed under it
        assert claim is not None and claim["metadata"].get("deletionTimestamp") and allocated_devices(claim), claim
