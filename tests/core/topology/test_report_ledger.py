"""The allocation ledger (gpupair.io/allocations): round trip, strict decoding, and both
rolling-upgrade orders with real annotation payloads."""

import json
from datetime import datetime, timezone

import pytest

from gpupair.topology import report
from gpupair.topology.report import PodHolding
from gpupair.simulator.shapes import seed_layout

NOW = datetime(2026, 11, 30, 8, 0, 0, tzinfo=timezone.utc)
FREE = frozenset({0, 1, 2, 4})
HOLDERS = (
    PodHolding("team-a", "train-0", frozenset({3}), uid="u-3"),
    PodHolding("team-a", "pin-5", frozenset({5})),
    PodHolding("team-b", "pair", frozenset({6, 7})),
)


def annotations(holders=HOLDERS, free=FREE, generation=9):
    return report.encode_annotations(seed_layout(), free, generation, NOW, holders=holders)


def test_ledger_round_trip_lists_each_pod_with_its_devices():
    decoded = report.decode_annotations(annotations())
    assert decoded.ledger is not None and decoded.ledger_problem == ""
    assert decoded.ledger.pods == {("team-a", "train-0"): {3}, ("team-a", "pin-5"): {5},
                                   ("team-b", "pair"): {6, 7}}
    assert decoded.ledger.lists("team-b", "pair")
    assert decoded.ledger.lists("team-a", "train-0", uid="u-3")
    assert not decoded.ledger.lists("team-a", "train-0", uid="a-recreated-pod")
    assert decoded.ledger.lists("team-a", "pin-5", uid="any")  # the reporter knew no UID
    assert not decoded.ledger.lists("team-a", "absent")


def test_an_empty_ledger_is_a_ledger_and_no_ledger_is_none():
    assert report.decode_annotations(annotations(holders=())).ledger.pods == {}
    assert report.decode_annotations(
        report.encode_annotations(seed_layout(), FREE, 9, NOW)).ledger is None


@pytest.mark.parametrize("mutate, why", [
    (lambda a: a.update(generation=8), "generation 8"),
    (lambda a: a.update(topology="0" * 16), "refers to topology"),
    (lambda a: a["pods"][0].update(devices=[0]), "shows free"),
    (lambda a: a["pods"][0].update(devices=[6]), "two pods"),
    (lambda a: a["pods"][0].update(devices=[8]), "out of range"),
    (lambda a: a["pods"][0].update(devices=[3, 3]), "twice"),
    (lambda a: a["pods"].append(dict(a["pods"][0])), "twice"),
    (lambda a: a["pods"][0].update(devices=[]), "at least 1"),
    (lambda a: a["pods"][0].update(extra=1), "Extra inputs"),
    (lambda a: a.update(v=2), "v"),
    (lambda a: a["pods"][0].update(devices=["3"]), "devices"),
])
def test_a_corrupt_ledger_leaves_the_report_usable_and_says_why(mutate, why):
    raw = annotations()
    ledger = json.loads(raw[report.ALLOCATIONS_KEY])
    mutate(ledger)
    raw[report.ALLOCATIONS_KEY] = json.dumps(ledger)
    decoded = report.decode_annotations(raw)
    assert decoded.ledger is None
    assert why in decoded.ledger_problem
    assert decoded.state.free == FREE


def test_an_oversized_or_non_json_ledger_is_set_aside():
    raw = annotations()
    raw[report.ALLOCATIONS_KEY] = "{" * (report.MAX_ANNOTATION_BYTES + 1)
    assert "over the" in report.decode_annotations(raw).ledger_problem
    raw[report.ALLOCATIONS_KEY] = "\x00not json"
    assert report.decode_annotations(raw).ledger is None


def test_the_largest_ledger_fits_its_bound():
    layout = seed_layout()
    holders = [PodHolding("n" * 63, f"{i}" + "p" * 250, frozenset({i}), uid="u" * 36) for i in range(8)]
    raw = report.encode_annotations(layout, frozenset(), 1, NOW, holders=holders)
    assert len(raw[report.ALLOCATIONS_KEY]) < report.MAX_ANNOTATION_BYTES / 8
    assert len(report.decode_annotations(raw).ledger.pods) == 8


# ---- rolling upgrades ----------------------------------------------------------------
# The decoders of the release before the ledger, as they were: strict, unknown fields forbidden.
# A new reporter's annotations must decode with them; an old reporter's with the new decoder.

OLD_FREE_FIELDS = {"v", "topology", "free", "unhealthy", "generation", "reportedAt"}
OLD_TOPOLOGY_FIELDS = {"v", "devices", "links", "p2p"}


def test_new_reporter_old_extender_the_old_strict_decoder_reads_the_new_payload():
    raw = annotations()
    # The fields the old models accept are exactly those the new reporter still writes.
    assert set(json.loads(raw[report.FREE_KEY])) == OLD_FREE_FIELDS
    assert set(json.loads(raw[report.TOPOLOGY_KEY])) == OLD_TOPOLOGY_FIELDS
    assert set(report.FreeReport.model_fields) == OLD_FREE_FIELDS
    old_view = {k: v for k, v in raw.items() if k in (report.TOPOLOGY_KEY, report.FREE_KEY)}
    assert report.decode_annotations(raw).state == report.decode_annotations(old_view).state


def test_old_reporter_new_extender_a_recorded_old_payload_decodes_without_a_ledger():
    # Written by the reporter before the ledger (same codec, no allocations annotation).
    old = {
        report.TOPOLOGY_KEY: report.encode_topology(seed_layout()),
    }
    old[report.FREE_KEY] = (
        '{"v":1,"topology":"' + report.fingerprint(old[report.TOPOLOGY_KEY]) +
        '","free":[0,1,2,4],"unhealthy":[],"generation":1764489600000,"reportedAt":"2026-11-30T08:00:00Z"}')
    decoded = report.decode_annotations(old)
    assert decoded.ledger is None and decoded.ledger_problem == ""
    assert decoded.state.free == FREE
