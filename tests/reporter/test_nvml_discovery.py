"""NVML discovery against recorded nodes: the pynvml module object is the only thing replaced."""

from __future__ import annotations

import pytest

from gpupair.topology.smi_topo import parse_topo_matrix
from gpupair.reporter import nvml_discovery
from gpupair.reporter.nvml_discovery import NvmlUnavailable, discover
from tests.nvml_fake import RECORDINGS, FakeNvml, load_recording, real, topo_text, write_sysfs


@pytest.fixture
def node(tmp_path):
    """(fake NVML, sysfs root) for a recording name."""

    def make(name: str):
        recording = load_recording(name)
        return FakeNvml(recording), str(write_sysfs(tmp_path / "sys", recording))

    return make


@pytest.mark.parametrize("name", RECORDINGS)
def test_discovery_agrees_with_nvidia_smi_and_the_recording(node, name):
    nvml, sysfs = node(name)
    result = discover(nvml, sysfs)
    recording = nvml.recording
    smi = parse_topo_matrix(topo_text(recording)).to_layout()

    assert result.errors == () and result.complete
    assert result.layout.links == smi.links
    assert [d.numa_node for d in result.layout.devices] == [d.numa_node for d in smi.devices]
    assert [d.uuid for d in result.layout.devices] == [d["uuid"] for d in recording["devices"]]
    assert [d.pci_bus_id for d in result.layout.devices] == [d["busId"] for d in recording["devices"]]
    assert [d.pcie_root for d in result.layout.devices] == [d["pcieRoot"] for d in recording["devices"]]
    assert result.driver_version == recording["driverVersion"]
    assert result.lost == frozenset() and result.unknown_links == frozenset()
    for i in range(8):
        for j in range(8):
            expected = None if i == j else recording["p2pRead"][i].split()[j] == "OK"
            assert result.layout.p2p[i][j] is expected, (i, j)
    assert nvml.initialised == 0, "nvmlShutdown balances nvmlInit"


def test_seed_node_numa_split_and_classes(node):
    nvml, sysfs = node("seed-5090d")
    layout = discover(nvml, sysfs).layout
    assert layout.numa_nodes == {0: (0, 1, 2, 3), 1: (4, 5, 6, 7)}
    assert layout.link(0, 1) == "NODE" and layout.link(3, 4) == "SYS"
    assert layout.p2p_of([0, 1]) is False  # NODE pairs without peer access, as the seed saw


def test_nvswitch_links_read_as_nv18(node):
    nvml, sysfs = node("hgx-h100")
    layout = discover(nvml, sysfs).layout
    assert {layout.link(i, j) for i in range(8) for j in range(8) if i != j} == {"NV18"}


def test_failed_common_ancestor_reads_sys_and_is_counted(node):
    nvml, sysfs = node("seed-5090d")
    nvml.fail("nvmlDeviceGetTopologyCommonAncestor", 0, 1)
    result = discover(nvml, sysfs)
    assert result.layout.link(0, 1) == "SYS"  # never better than the truth
    assert result.unknown_links == {(0, 1)}
    assert [(e.call, e.target, e.code) for e in result.errors] == [
        ("nvmlDeviceGetTopologyCommonAncestor", "GPU0-GPU1", real.NVML_ERROR_UNKNOWN)
    ]
    assert result.layout.link(0, 2) == "NODE" and result.layout.link(2, 3) == "NODE"


def test_failed_common_ancestor_on_nvlink_pair_keeps_the_nvlink_label(node):
    nvml, sysfs = node("hgx-h100")
    nvml.fail("nvmlDeviceGetTopologyCommonAncestor", 2, 6)
    result = discover(nvml, sysfs)
    assert result.layout.link(2, 6) == "NV18"
    assert result.unknown_links == frozenset()
    assert len(result.errors) == 1


def test_lost_gpu_is_reported_with_what_is_known_about_the_rest(node):
    nvml, sysfs = node("seed-5090d")
    nvml.fail("nvmlDeviceGetHandleByIndex", 3, code=real.NVML_ERROR_GPU_IS_LOST)
    result = discover(nvml, sysfs)
    assert result.lost == {3}
    lost = result.layout.devices[3]
    assert (lost.uuid, lost.pci_bus_id, lost.numa_node) == ("", "", -1)
    assert all(result.layout.link(3, j) == "SYS" for j in range(8) if j != 3)
    assert all(result.layout.p2p[3][j] is None for j in range(8))
    assert result.unknown_links == {(min(3, j), max(3, j)) for j in range(8) if j != 3}
    assert [e.call for e in result.errors] == ["nvmlDeviceGetHandleByIndex"]
    assert "GPU is lost" in result.errors[0].error
    assert result.layout.link(0, 1) == "NODE" and result.layout.devices[5].numa_node == 1


def test_uuid_and_pci_failures_leave_them_empty(node):
    nvml, sysfs = node("seed-5090d")
    nvml.fail("nvmlDeviceGetUUID", 2).fail("nvmlDeviceGetPciInfo", 6, code=real.NVML_ERROR_NO_PERMISSION)
    result = discover(nvml, sysfs)
    assert result.layout.devices[2].uuid == "" and result.layout.devices[2].pci_bus_id == "00000000:41:00.0"
    assert result.layout.devices[6].pci_bus_id == "" and result.layout.devices[6].numa_node == 1
    assert {(e.call, e.target) for e in result.errors} == {
        ("nvmlDeviceGetUUID", "GPU2"),
        ("nvmlDeviceGetPciInfo", "GPU6"),
    }


def test_numa_falls_back_to_sysfs_without_counting_an_error(node):
    nvml, sysfs = node("seed-5090d")
    nvml.fail("nvmlDeviceGetNumaNodeId", code=real.NVML_ERROR_FUNCTION_NOT_FOUND)  # an older driver
    result = discover(nvml, sysfs)
    assert [d.numa_node for d in result.layout.devices] == [0, 0, 0, 0, 1, 1, 1, 1]
    assert result.errors == ()


def test_numa_unknown_when_neither_nvml_nor_sysfs_answers(node, tmp_path):
    nvml, _ = node("seed-5090d")
    nvml.fail("nvmlDeviceGetNumaNodeId", 5, code=real.NVML_ERROR_NOT_SUPPORTED)
    result = discover(nvml, str(tmp_path / "no-sysfs"))
    assert result.layout.devices[5].numa_node == -1
    assert result.layout.devices[4].numa_node == 1
    assert [(e.call, e.target) for e in result.errors] == [("nvmlDeviceGetNumaNodeId", "GPU5")]
    assert all(d.pcie_root == "" for d in result.layout.devices)


def test_sysfs_minus_one_means_no_numa_affinity(node):
    nvml, sysfs = node("pix-pxb-8gpu")  # NVML: Not Supported; sysfs: -1
    result = discover(nvml, sysfs)
    assert [d.numa_node for d in result.layout.devices] == [-1] * 8
    assert result.errors == ()


def test_p2p_failure_is_unknown_not_false(node):
    nvml, sysfs = node("hgx-h100")
    nvml.fail("nvmlDeviceGetP2PStatus", 0, 1)
    result = discover(nvml, sysfs)
    assert result.layout.p2p[0][1] is None and result.layout.p2p[1][0] is True
    assert result.layout.p2p_of([0, 1]) is None
    assert len(result.errors) == 1


def test_driver_without_remote_device_type_still_counts_switch_links(node):
    nvml, sysfs = node("hgx-h100")
    nvml.fail("nvmlDeviceGetNvLinkRemoteDeviceType", code=real.NVML_ERROR_FUNCTION_NOT_FOUND)
    result = discover(nvml, sysfs)
    assert result.layout.link(0, 7) == "NV18"
    assert result.errors == ()


def test_failed_nvlink_state_is_counted_and_lowers_the_count(node):
    nvml, sysfs = node("hgx-h100")
    nvml.fail("nvmlDeviceGetNvLinkState", 0, 17)
    result = discover(nvml, sysfs)
    assert result.layout.link(0, 1) == "NV17"  # min(17, 18) switch links
    assert result.layout.link(1, 2) == "NV18"
    assert [(e.call, e.target) for e in result.errors] == [("nvmlDeviceGetNvLinkState", "GPU0 link 17")]


def test_direct_gpu_to_gpu_nvlinks(tmp_path):
    recording = load_recording("seed-5090d")
    # an NVLink bridge between GPU0 and GPU1 (4 links), as on paired workstation boards
    recording["devices"][0]["nvlinks"] = [{"remoteType": "GPU", "remoteBusId": "00000000:31:00.0", "count": 4}]
    recording["devices"][1]["nvlinks"] = [{"remoteType": "GPU", "remoteBusId": "00000000:21:00.0", "count": 4}]
    layout = discover(FakeNvml(recording), str(write_sysfs(tmp_path, recording))).layout
    assert layout.link(0, 1) == "NV4"
    assert layout.link(0, 2) == "NODE" and layout.link(1, 4) == "SYS"


def test_p2p_is_queried_with_a_plain_int_capability_index(node):
    # nvidia-ml-py's NVML_P2P_CAPS_INDEX_READ is the tuple (0,); ctypes cannot pass it.
    assert real.NVML_P2P_CAPS_INDEX_READ == (0,)
    nvml, sysfs = node("seed-5090d")
    discover(nvml, sysfs)
    assert nvml.count("nvmlDeviceGetP2PStatus") == 8 * 7


def test_init_failure_is_nvml_unavailable(node):
    nvml, sysfs = node("seed-5090d")
    nvml.init_error = real.NVML_ERROR_DRIVER_NOT_LOADED
    with pytest.raises(NvmlUnavailable, match="Driver Not Loaded"):
        discover(nvml, sysfs)


def test_count_failure_is_nvml_unavailable_and_still_shuts_down(node):
    nvml, sysfs = node("seed-5090d")
    nvml.fail("nvmlDeviceGetCount")
    with pytest.raises(NvmlUnavailable, match="could not count"):
        discover(nvml, sysfs)
    assert nvml.initialised == 0


def test_sysfs_spelling_uses_four_digit_domain(tmp_path):
    root = tmp_path / "bus" / "pci" / "devices" / "0000:21:00.0"
    root.mkdir(parents=True)
    (root / "numa_node").write_text("1\n")
    assert nvml_discovery.read_sysfs_numa("00000000:21:00.0", str(tmp_path)) == 1
    assert nvml_discovery.read_sysfs_numa("00000000:31:00.0", str(tmp_path)) is None


def test_the_product_is_nvmls_name_when_every_gpu_gives_the_same(node, tmp_path):
    nvml, sysfs = node("hgx-h100")
    for device in nvml.devices:  # the recording predates names: given here, as NVML spells H100 SXM
        device["name"] = "NVIDIA H100 80GB HBM3"
    assert discover(nvml, sysfs).product == "NVIDIA H100 80GB HBM3"
    nvml.devices[3]["name"] = "NVIDIA H200"
    mixed = discover(nvml, sysfs)
    assert mixed.product == "" and mixed.complete  # mixed: GFD's label would be a coin toss


def test_a_driver_without_names_leaves_the_product_unknown_and_no_error(node):
    nvml, sysfs = node("seed-5090d")
    result = discover(nvml, sysfs)
    assert result.product == "" and result.complete
    assert nvml.count("nvmlDeviceGetName") == len(nvml.devices)


# --- MIG (tests/fixtures/nvml/dgx-a100-mig.json: GPU0 3g+2g+1g+1g, GPU1 3g+3g, the rest MIG off)


def test_mig_devices_are_listed_with_their_gpu_instances_and_compute_slices(node):
    nvml, sysfs = node("dgx-a100-mig")
    result = discover(nvml, sysfs)
    mig = result.mig
    assert result.complete
    assert mig.gpu_slices == ((0, 7), (1, 7))
    assert [(d.gpu, d.index, d.gpu_instance, d.compute_instance, d.slices) for d in mig.devices] == [
        (0, 0, 2, 0, 3), (0, 1, 3, 0, 2), (0, 2, 9, 0, 1), (0, 3, 10, 0, 1), (1, 0, 1, 0, 3), (1, 1, 2, 0, 3)]
    recorded = nvml.devices[1]["mig"]["devices"][1]["uuid"]
    assert mig.by_uuid(recorded.upper().replace("MIG-", "mig-")) == mig.devices[5]
    # indices past the last device answer Not Found: no error, no device
    assert nvml.count("nvmlDeviceGetMigDeviceHandleByIndex") == 2 * 7


def test_gpus_without_mig_have_no_mig_devices_and_no_error(node):
    nvml, sysfs = node("hgx-h100")  # recorded without MIG: the calls answer Not Supported
    result = discover(nvml, sysfs)
    assert result.complete and result.mig.devices == () and result.mig.gpu_slices == ()


def test_without_the_profile_call_a_gpus_slices_are_its_most_mig_devices(node):
    nvml, sysfs = node("dgx-a100-mig")
    nvml.fail("nvmlDeviceGetGpuInstanceProfileInfo", code=real.NVML_ERROR_FUNCTION_NOT_FOUND)
    result = discover(nvml, sysfs)
    assert result.complete and result.mig.slices_of(0) == 7 and result.mig.slices_of(1) == 7


def test_a_compute_instance_takes_its_own_slices_not_its_gpu_instances(node):
    nvml, sysfs = node("dgx-a100-mig")
    split = nvml.devices[1]["mig"]["devices"][0]
    split["computeInstanceSlices"] = 1  # a 1c.3g.40gb compute instance of the 3g GPU instance
    assert discover(nvml, sysfs).mig.by_index(1, 0).slices == 1


def test_a_mig_device_nvml_cannot_read_is_left_out_and_counted(node):
    nvml, sysfs = node("dgx-a100-mig")
    nvml.fail("nvmlDeviceGetUUID", 0, 1)  # GPU0's MIG device 1
    result = discover(nvml, sysfs)
    assert not result.complete
    assert [(e.call, e.target) for e in result.errors] == [("nvmlDeviceGetUUID", "GPU0 MIG 1")]
    assert [d.index for d in result.mig.devices if d.gpu == 0] == [0, 2, 3]
