"""The node report codec: round trips, and strict decoding that says why it rejects."""

import json
from datetime import datetime, timedelta, timezone

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpupair.topology import report
from gpupair.topology.layout import normalize_pci, sysfs_pci
from gpupair.simulator.shapes import seed_layout

NOW = datetime(2026, 11, 30, 8, 0, 0, tzinfo=timezone.utc)


def seed_annotations(free=frozenset({1, 2, 3, 5, 6, 7}), generation=7, at=NOW):
    return report.encode_annotations(seed_layout(), free, generation, at)


def test_round_trip_keeps_devices_links_free_and_time():
    decoded = report.decode_annotations(seed_annotations(), now=NOW, stale_after=60)
    assert decoded.state.free_by_numa() == {0: (1, 2, 3), 1: (5, 6, 7)}
    assert decoded.layout == seed_layout()
    assert decoded.generation == 7
    assert decoded.reported_at == NOW
    device = decoded.layout.devices[5]
    assert (device.pci_bus_id, device.numa_node) == ("00000000:A1:00.0", 1)


def test_wire_names_follow_dra_attributes():
    topology = json.loads(seed_annotations()[report.TOPOLOGY_KEY])
    assert set(topology["devices"][0]) == {"index", "uuid", "pciBusID", "numaNode", "pcieRoot"}
    free = json.loads(seed_annotations()[report.FREE_KEY])
    assert free["reportedAt"] == "2026-11-30T08:00:00Z"


def test_stale_report_is_refused_with_its_age():
    old = seed_annotations(at=NOW - timedelta(minutes=10))
    with pytest.raises(report.ReportError) as caught:
        report.decode_annotations(old, now=NOW, stale_after=120)
    assert caught.value.kind == "stale"
    assert "600s old" in caught.value.reason


def test_missing_report():
    with pytest.raises(report.ReportError) as caught:
        report.decode_annotations({"gpupair.io/test": "x"})
    assert caught.value.kind == "missing"


def _corrupt(mutator):
    annotations = seed_annotations()
    topology = json.loads(annotations[report.TOPOLOGY_KEY])
    free = json.loads(annotations[report.FREE_KEY])
    mutator(topology, free)
    topology_json = json.dumps(topology)
    free["topology"] = free["topology"] if free.get("keep_fp") else report.fingerprint(topology_json)
    free.pop("keep_fp", None)
    return {report.TOPOLOGY_KEY: topology_json, report.FREE_KEY: json.dumps(free)}


@pytest.mark.parametrize("mutator,needle", [
    (lambda t, f: t["links"][0].__setitem__(1, "SYS"), "not symmetric"),
    (lambda t, f: t["links"][2].__setitem__(3, "FOO"), "unknown link label"),
    (lambda t, f: t["links"].pop(), "link matrix must be"),
    (lambda t, f: t["devices"][3].__setitem__("index", 9), "index 9"),
    (lambda t, f: f.__setitem__("free", [1, 2, 12]), "out of range"),
    (lambda t, f: f.__setitem__("free", [1, 1]), "twice"),
    (lambda t, f: f.__setitem__("unhealthy", [1]), "both free and unhealthy"),
    (lambda t, f: f.__setitem__("generation", "7"), "generation"),
    (lambda t, f: f.__setitem__("reportedAt", "2026-11-30T08:00:00"), "time zone"),
    (lambda t, f: f.__setitem__("v", 2), "v"),
    (lambda t, f: (f.__setitem__("topology", "0123456789abcdef"), f.__setitem__("keep_fp", True)), "refers to topology"),
])
def test_corrupt_reports_are_rejected_with_a_reason(mutator, needle):
    with pytest.raises(report.ReportError) as caught:
        report.decode_annotations(_corrupt(mutator))
    assert needle in caught.value.reason


def test_oversized_annotation_is_rejected():
    annotations = seed_annotations()
    annotations[report.TOPOLOGY_KEY] = " " * (report.MAX_ANNOTATION_BYTES + 1)
    with pytest.raises(report.ReportError, match="over the"):
        report.decode_annotations(annotations)


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=300), st.text(max_size=300))
def test_garbage_never_escapes_as_anything_but_report_error(topology, free):
    with pytest.raises(report.ReportError):
        report.decode_annotations({report.TOPOLOGY_KEY: topology, report.FREE_KEY: free})


def test_pci_spellings_of_nvml_and_sysfs_agree():
    assert normalize_pci("0000:a1:00.0") == "00000000:A1:00.0"
    assert sysfs_pci("00000000:A1:00.0") == "0000:a1:00.0"
    with pytest.raises(ValueError):
        normalize_pci("garbage")


def test_the_product_travels_beside_the_report_and_reports_without_it_still_read():
    from gpupair.reporter.scan import Allocations, compute

    scan = compute(seed_layout(), Allocations(), product="NVIDIA GeForce RTX 5090 D")
    annotations = scan.annotations(7, NOW)
    assert annotations[report.PRODUCT_KEY] == "NVIDIA GeForce RTX 5090 D"
    assert report.decode_annotations(annotations).product == "NVIDIA GeForce RTX 5090 D"
    assert report.decode_annotations(seed_annotations()).product == ""  # an older reporter's
    assert report.PRODUCT_KEY not in compute(seed_layout(), Allocations()).annotations(7, NOW)
    for bad in ("x" * 200, "two\nlines"):
        assert report.decode_annotations({**seed_annotations(), report.PRODUCT_KEY: bad}).product == ""
