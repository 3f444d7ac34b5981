"""The pure parts: a scan's arithmetic (reading --topology-file: tests/core/topology/test_layout_file.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpupair.topology import report
from gpupair.reporter.scan import Allocations, StaticAllocations, UnknownDevicesError, compute, parse_id_list
from gpupair.topology.layout_file import parse_layout_text
from tests.reporter_support import SEED_UUIDS, seed_layout

TOPO = Path(__file__).parents[1] / "fixtures" / "topo"


@pytest.fixture
def layout(tmp_path):
    return seed_layout(tmp_path).layout


def test_free_is_allocatable_minus_allocated_minus_unhealthy(layout):
    scan = compute(
        layout,
        Allocations(allocated=(SEED_UUIDS[0], SEED_UUIDS[4] + "::2"), allocatable=tuple(SEED_UUIDS[:7])),
        lost=[5],
    )
    assert scan.free == {1, 2, 3, 6}
    assert scan.allocated == {0, 4}
    assert scan.unhealthy == {5, 7}
    assert scan.free_by_numa() == {0: (1, 2, 3), 1: (6,)}


def test_without_a_kubelet_every_device_is_allocatable(layout):
    scan = compute(layout, Allocations(allocated=("0", "4")))
    assert scan.free == {1, 2, 3, 5, 6, 7} and scan.unhealthy == frozenset()


def test_ids_the_layout_lacks_are_reported(layout):
    scan = compute(layout, Allocations(allocated=("GPU-not-here", "0")))
    assert scan.unknown_ids == ("GPU-not-here",) and scan.allocated == {0}


def test_annotations_decode_back(layout):
    from datetime import datetime, timezone

    at = datetime(2025, 3, 1, tzinfo=timezone.utc)
    scan = compute(layout, Allocations(allocated=("1",)))
    decoded = report.decode_annotations(scan.annotations(7, at))
    assert decoded.layout == layout and decoded.state.free == {0, 2, 3, 4, 5, 6, 7}
    assert decoded.generation == 7 and decoded.reported_at == at


def test_static_allocations_check_names_the_missing_devices(layout):
    StaticAllocations(["0", SEED_UUIDS[3]]).check(layout)
    with pytest.raises(UnknownDevicesError, match="8, GPU-x"):
        StaticAllocations(["8", "GPU-x"]).check(layout)
    without_uuids = parse_layout_text((TOPO / "seed-5090d.txt").read_text())
    with pytest.raises(UnknownDevicesError, match="use device indices"):
        StaticAllocations([SEED_UUIDS[0]]).check(without_uuids)


def test_parse_id_list():
    assert parse_id_list("0, 4,,") == ("0", "4")
    assert parse_id_list("") == ()
