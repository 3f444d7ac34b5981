"""The pure part of reporter.allocations: device ids -> layout indices, and the free set."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from gpupair.reporter.allocations import free_devices, map_device_ids, strip_replica
from tests.reporter.test_podresources import UUIDS, node_layout

LAYOUT = node_layout()


def test_uuid_ids_map_to_their_index():
    assert map_device_ids([UUIDS[5], UUIDS[0]], LAYOUT) == ({0, 5}, [])


def test_uuid_match_ignores_case():
    assert map_device_ids([UUIDS[2].upper().replace("GPU-", "gpu-")], LAYOUT) == ({2}, [])


def test_index_ids_map_to_their_index():
    assert map_device_ids(["0", "7"], LAYOUT) == ({0, 7}, [])


def test_replica_suffix_is_stripped():
    assert strip_replica(f"{UUIDS[3]}::12") == UUIDS[3]
    assert strip_replica("4::0") == "4"
    assert map_device_ids([f"{UUIDS[3]}::0", f"{UUIDS[3]}::1", "4::2"], LAYOUT) == ({3, 4}, [])


def test_mig_ids_that_name_their_gpu_map_to_it():
    old_style_mig = f"MIG-{UUIDS[6]}/7/0"  # drivers before R470
    assert map_device_ids(["1:0", "1:2", old_style_mig], LAYOUT) == ({1, 6}, [])


def test_unknown_ids_are_returned_once_in_order():
    ids = ["MIG-4f1c0e6a-1111-2222-3333-444455556666", "8", "GPU-ffffffff", "8", "", "-1", UUIDS[1]]
    indices, unknown = map_device_ids(ids, LAYOUT)
    assert indices == {1}
    assert unknown == ["MIG-4f1c0e6a-1111-2222-3333-444455556666", "8", "GPU-ffffffff", "", "-1"]


def test_free_is_allocatable_minus_allocated():
    allocatable = [UUIDS[i] for i in range(8) if i != 3]  # GPU3 unhealthy
    allocated = [UUIDS[0], UUIDS[3], "GPU-not-on-this-node"]  # GPU3 held, then went unhealthy
    result = free_devices(LAYOUT, allocatable + ["GPU-gone"], allocated)
    assert result.free == {1, 2, 4, 5, 6, 7}
    assert result.allocated == {0, 3}
    assert result.unavailable == {3}
    assert result.unknown_ids == ("GPU-gone", "GPU-not-on-this-node")
    assert result.state().free == {1, 2, 4, 5, 6, 7}


def test_nothing_allocatable_means_everything_unavailable():
    result = free_devices(LAYOUT, [], [])
    assert result.free == frozenset()
    assert result.unavailable == set(range(8))


device_id = st.one_of(
    st.sampled_from(UUIDS),
    st.integers(0, 9).map(str),
    st.tuples(st.sampled_from(UUIDS), st.integers(0, 3)).map(lambda t: f"{t[0]}::{t[1]}"),
    st.text(max_size=6),
)


@given(st.lists(device_id, max_size=20), st.lists(device_id, max_size=20))
def test_free_allocated_unavailable_partition_holds(allocatable, allocated):
    result = free_devices(LAYOUT, allocatable, allocated)
    everything = set(range(LAYOUT.size))
    assert result.free <= everything - result.unavailable
    assert not result.free & result.allocated
    assert result.free | result.allocated | result.unavailable <= everything
    assert everything - result.unavailable - result.allocated == result.free
