"""One node picture, two sources (gpupair/decide/picture/node_picture.py): the reporter's annotations with
their Lease, and a DRA driver's slices and claims, read through one interface."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from gpupair.decide.picture.dra_source import DraNodes
from gpupair.decide.picture.node_entries import ReportDecoder
from gpupair.decide.picture.node_picture import AnnotatedNodes, NodePicture, NodeSource, node_picture
from gpupair.decide.pod.pod_request import PodRequestError
from gpupair.topology.report import encode_annotations
from tests.dra_support import DRIVER, allocated_claim, busy_claims, node_slice
from tests.layouts import seed_layout

AT = datetime(2026, 12, 1, 9, 32, tzinfo=timezone.utc)


def sources(lease=None):
    decoder = ReportDecoder(120.0)
    devices = DraNodes(DRIVER, decoder, AT.timestamp)
    devices.slices.replace([node_slice("dra-node-1")])
    devices.claims.replace([*busy_claims("dra-node-1", {0, 1}),
                            allocated_claim("team", "mine", "dra-node-1", [4, 5], pod_uid="uid-mine")])
    annotated = AnnotatedNodes(decoder, (lease or {}).get)
    return devices, annotated, NodePicture(devices, annotated)


def test_both_sources_and_the_picture_are_node_sources():
    devices, annotated, picture = sources()
    for source in (devices, annotated, picture):
        assert isinstance(source, NodeSource)


def test_a_node_a_driver_publishes_is_read_from_its_slices_and_claims_first():
    _, _, picture = sources()
    notes = encode_annotations(seed_layout(), frozenset(range(8)), 1, AT)  # the reporter says all free
    entry = picture.entry_of("dra-node-1", notes)
    assert entry is not None and entry.report is not None and entry.report.source == "dra"
    assert entry.report.state.free == frozenset({2, 3, 6, 7})
    assert entry.stale_at is None  # as current as the watch


def test_any_other_node_is_read_from_its_annotations_with_its_lease():
    _, _, picture = sources(lease={"gpu-a": AT.timestamp() + 300})
    notes = encode_annotations(seed_layout(), frozenset({0, 1}), 1, AT)
    entry = picture.entry_of("gpu-a", notes)
    assert entry is not None and entry.report is not None and entry.report.source == "reporter"
    assert entry.report.state.free == frozenset({0, 1})
    alive = picture.alive("gpu-a")
    assert entry.is_stale(AT.timestamp() + 200) and not entry.is_stale(AT.timestamp() + 200, alive)
    unusable = picture.entry_of("gpu-b", {})
    assert unusable is not None and unusable.report is None and unusable.kind == "missing"
    assert picture.entry_of("gone", None) is None  # no Node, no slice: no entry


def test_a_pods_own_claims_come_from_the_source_that_knows_them():
    _, annotated, picture = sources()
    picture.entry_of("dra-node-1", {})  # devices are layout indices of the node's picture, once built
    assert picture.owned("uid-mine") == {"dra-node-1": frozenset({4, 5})}
    assert annotated.owned("uid-mine") == {} and annotated.pod_demand({}) is None
    assert picture.owned("someone-else") == {}


def pending_pair(name: str) -> dict:
    """A claim of 2 GPUs under one pcieRoot, not allocated yet: no GPU of the recorded slice shares one."""
    claim = allocated_claim("team", name, "dra-node-1", range(2), constraint="resource.kubernetes.io/pcieRoot")
    claim.pop("status")
    return claim


def pod_naming(claim: str) -> dict:
    return {"metadata": {"namespace": "team", "name": "p", "uid": "u"},
            "spec": {"resourceClaims": [{"name": claim, "resourceClaimName": claim}]}}


def test_without_a_driver_the_factory_reads_the_annotations_alone():
    picture, feed = node_picture(ReportDecoder(120.0), AT.timestamp, alive={"gpu-a": 1.0}.get)
    assert feed is None and picture.listed
    assert [type(s) for s in picture.sources] == [AnnotatedNodes]
    assert picture.alive("gpu-a") == 1.0
    assert picture.why_unallocatable(pod_naming("pair")) == ""


def test_with_a_driver_the_factory_puts_its_slices_and_claims_first_and_hands_back_their_feed():
    picture, feed = node_picture(ReportDecoder(120.0), AT.timestamp, dra_driver=DRIVER)
    assert feed is not None and picture.sources[0] is feed
    assert not picture.listed  # until the slices and the claims are listed
    feed.slices.replace([node_slice("dra-node-1")])
    feed.claims.replace([])
    assert picture.listed
    assert picture.describes("dra-node-1") and not picture.describes("gpu-a")
    entry = picture.entry_of("dra-node-1", {})
    assert entry is not None and entry.report is not None and entry.report.source == "dra"


def test_a_claim_learned_ahead_of_the_watch_is_asked_and_explained_through_the_picture():
    picture, feed = node_picture(ReportDecoder(120.0), AT.timestamp, dra_driver=DRIVER)
    assert feed is not None
    feed.slices.replace([node_slice("dra-node-1")])
    feed.claims.replace(busy_claims("dra-node-1", {0, 1, 2, 5, 6, 7}))
    with pytest.raises(PodRequestError):
        picture.pod_demand(pod_naming("pair"))  # not in the watch yet
    picture.learn_claim(pending_pair("pair"))
    demand = picture.pod_demand(pod_naming("pair"))
    assert demand is not None and demand.gpus == 2
    assert picture.why_unallocatable(pod_naming("pair")).startswith(
        "gpupair: no DRA node can allocate this pod's claims: need 2 GPUs with one resource.kubernetes.io/pcieRoot")
