"""The pure part of reporter.allocations: device ids -> layout indices, and the free set."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpupair.reporter.allocations import free_devices, map_device_ids, share_counts, strip_replica
from gpupair.reporter.nvml_discovery import discover
from tests.nvml_fake import FakeNvml, load_recording, write_sysfs
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


# --- MIG: the recorded DGX A100 (tests/fixtures/nvml/dgx-a100-mig.json), GPU0 carved 3g+2g+1g+1g,
# GPU1 3g+3g (one of its 7 slices in no device), GPU2-7 whole


@pytest.fixture(scope="module")
def a100_mig(tmp_path_factory):
    recording = load_recording("dgx-a100-mig")
    result = discover(FakeNvml(recording), str(write_sysfs(tmp_path_factory.mktemp("sys"), recording)))
    migs = [[device["uuid"] for device in gpu.get("mig", {}).get("devices", [])] for gpu in recording["devices"]]
    return result.layout, result.mig, migs


def mig_ids(layout, mig, migs, form: str) -> list[str]:
    """The MIG devices of GPU0 and GPU1 as the device plugin names them in ``form``."""
    ids = []
    for device in mig.devices:
        if form == "uuid":  # R470 and newer
            ids.append(migs[device.gpu][device.index])
        elif form == "gpu-uuid":  # before R470
            ids.append(f"MIG-{layout.devices[device.gpu].uuid}/{device.gpu_instance}/{device.compute_instance}")
        else:  # the plugin's index ids
            ids.append(f"{device.gpu}:{device.index}")
    return ids


def test_mig_uuids_map_to_their_gpu_only_through_nvml(a100_mig):
    layout, mig, migs = a100_mig
    assert map_device_ids([migs[1][0], migs[0][3]], layout, mig) == ({0, 1}, [])
    assert map_device_ids([migs[1][0]], layout) == (set(), [migs[1][0]])  # no NVML: names no GPU


@pytest.mark.parametrize("form", ["uuid", "gpu-uuid", "index"])
def test_mig_shares_count_compute_slices_in_every_id_form(a100_mig, form):
    """GPU0: the 3g and a 1g taken, 4 of 7 slices; GPU1: one 3g of its two, 3 of the 6 offered of
    7, so 3/7 of it is left, not half."""
    layout, mig, migs = a100_mig
    ids = mig_ids(layout, mig, migs, form)
    offered = ids + [gpu.uuid for gpu in layout.devices[2:]]
    shares = share_counts(layout, offered, [ids[0], ids[3], ids[5]], mig=mig)
    assert shares is not None
    assert shares.of[:3] == (7, 6, 1) and shares.taken[:3] == (4, 3, 0)
    assert shares.whole == (0, 7) + (0,) * 6
    assert [shares.milli_left(i) for i in range(3)] == [3 * 1000 // 7, 3 * 1000 // 7, 1000]
    assert shares.partly_taken(0) and shares.partly_taken(1) and not shares.partly_taken(2)


def test_without_nvml_mig_ids_that_name_their_gpu_count_one_a_share(a100_mig):
    layout, mig, migs = a100_mig
    ids = mig_ids(layout, mig, migs, "gpu-uuid")
    shares = share_counts(layout, ids, [ids[0]])
    assert shares is not None and shares.of[:2] == (4, 2) and shares.taken[:2] == (1, 0) and shares.whole is None


def test_a_gpu_with_a_mig_device_nvml_did_not_list_counts_its_ids(a100_mig):
    """Slices and ids are not added up on one GPU: one device NVML does not know (carved after
    discovery) and the GPU is counted as before, one id a share."""
    layout, mig, migs = a100_mig
    ids = mig_ids(layout, mig, migs, "index") + ["0:6"]
    shares = share_counts(layout, ids, [ids[0]], mig=mig)
    assert shares is not None and shares.of[:2] == (5, 6) and shares.taken[:2] == (1, 0)


def test_a_held_mig_device_that_turned_unhealthy_still_counts_as_offered(a100_mig):
    layout, mig, migs = a100_mig
    ids = mig_ids(layout, mig, migs, "uuid")
    shares = share_counts(layout, ids[1:], [ids[0]], mig=mig)  # the held 3g is no longer allocatable
    assert shares is not None and shares.of[0] == 7 and shares.taken[0] == 3
