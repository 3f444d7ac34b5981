"""One node picture, two sources (gpupair/decide/node_picture.py): the reporter's annotations with
their Lease, and a DRA driver's slices and claims, read through one interface."""

from __future__ import annotations

from datetime import datetime, timezone

from gpupair.decide.dra_source import DraNodes
from gpupair.decide.node_entries import ReportDecoder
from gpupair.decide.node_picture import AnnotatedNodes, NodePicture, NodeSource
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
