import pytest

from gpupair.topology import links


def test_closeness_order_matches_nvidia_smi_legend():
    ordered = ["NV12", "NV2", "NV1", "PIX", "PXB", "PHB", "NODE", "SYS"]
    assert sorted(reversed(ordered), key=links.distance) == ordered


def test_worst_link_of_a_set():
    assert links.worst(["NODE", "PIX", "SYS"]) == "SYS"
    assert links.worst(["NV4", "NV12"]) == "NV4"
    assert links.worst([]) is None


def test_old_soc_label_is_sys():
    assert links.normalize("SOC") == "SYS"


@pytest.mark.parametrize("level,label", [
    ("INTERNAL", "PIX"), ("SINGLE", "PIX"), ("MULTIPLE", "PXB"),
    ("HOSTBRIDGE", "PHB"), ("NODE", "NODE"), ("SYSTEM", "SYS"), (50, "SYS"), (40, "NODE"),
])
def test_nvml_common_ancestor_levels(level, label):
    assert links.from_nvml_level(level) == label


def test_nvlink_wins_over_pcie_path():
    assert links.pair_label("SYS", 12) == "NV12"
    assert links.pair_label("NODE", 0) == "NODE"


@pytest.mark.parametrize("bad", ["NV0", "MIG", "", "PCI", "NVX"])
def test_unknown_labels_are_rejected(bad):
    with pytest.raises(links.UnknownLinkError):
        links.normalize(bad)
    with pytest.raises(links.UnknownLinkError):
        links.from_nvml_level(7)


def test_plugin_weights_follow_go_gpuallocator():
    assert [links.plugin_pair_weight(x) for x in ("SYS", "NODE", "PHB", "PXB", "PIX", "NV3")] == [
        10, 20, 30, 40, 50, 300,
    ]
