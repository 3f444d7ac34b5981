"""The reporter's NIC links from sysfs against the NIC columns of every recorded real
``nvidia-smi topo -m`` that has them (tests/fixtures/topo), through a sysfs tree laid out to match."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpupair.topology import nics
from gpupair.topology.smi_topo import parse_topo_matrix
from gpupair.reporter.nic_discovery import discover_nics
from tests.sysfs_tree import build

TOPO = Path(__file__).resolve().parents[1] / "fixtures" / "topo"
WITH_NICS = sorted(p.name for p in TOPO.glob("*.txt") if parse_topo_matrix(p.read_text()).nics)


def test_the_recorded_boxes_with_nics_are_here():
    assert len(WITH_NICS) >= 5, WITH_NICS


@pytest.mark.parametrize("name", WITH_NICS)
def test_sysfs_links_equal_the_topo_parse(tmp_path, name):
    topo = parse_topo_matrix((TOPO / name).read_text())
    layout = build(tmp_path, topo)
    found = discover_nics(layout, str(tmp_path))
    expected = topo.to_nic_layout()
    assert [n.name for n in found.nics] == sorted(n.name for n in expected.nics)
    order = [[n.name for n in expected.nics].index(n.name) for n in found.nics]
    assert found.links == tuple(tuple(row[i] for i in order) for row in expected.links)
    assert all(n.pci_bus_id and n.pcie_root.startswith("pci") for n in found.nics)


@pytest.mark.parametrize("gpu, nic, numa, expected", [
    ("pci0000:20/0000:20:01.1/0000:21:00.0/0000:22:08.0/0000:23:00.0",
     "pci0000:20/0000:20:01.1/0000:21:00.0/0000:22:09.0/0000:24:00.0", (0, 0), "PIX"),
    ("pci0000:20/0000:20:01.1/0000:21:00.0/0000:22:08.0/0000:23:00.0/0000:24:00.0/0000:25:00.0",
     "pci0000:20/0000:20:01.1/0000:21:00.0/0000:22:09.0/0000:26:00.0", (0, 0), "PXB"),
    ("pci0000:20/0000:20:01.1/0000:21:00.0", "pci0000:20/0000:20:03.1/0000:31:00.0", (0, 0), "PHB"),
    ("pci0000:20/0000:20:01.1/0000:21:00.0", "pci0000:40/0000:40:01.1/0000:41:00.0", (0, 0), "NODE"),
    ("pci0000:20/0000:20:01.1/0000:21:00.0", "pci0000:80/0000:80:01.1/0000:81:00.0", (0, 1), "SYS"),
    ("pci0000:20/0000:20:01.1/0000:21:00.0", "pci0000:40/0000:40:01.1/0000:41:00.0", (-1, -1), "SYS"),
])
def test_pci_link_classes(gpu, nic, numa, expected):
    assert nics.pci_link(gpu.split("/"), nic.split("/"), *numa) == expected


def test_a_node_without_rdma_devices_has_no_nics_and_one_without_the_class_is_unknown(tmp_path):
    topo = parse_topo_matrix((TOPO / "seed-5090d.txt").read_text())
    layout = build(tmp_path, topo)
    assert discover_nics(layout, str(tmp_path)) is None  # no /sys/class/infiniband: unknown
    (tmp_path / "class" / "infiniband").mkdir(parents=True)
    found = discover_nics(layout, str(tmp_path))
    assert found.nics == () and found.links == tuple(() for _ in range(8))


def test_the_annotation_round_trips_and_refuses_another_topology(tmp_path):
    topo = parse_topo_matrix((TOPO / "sglang-30401-hgx-h100.txt").read_text())
    layout = build(tmp_path, topo)
    found = discover_nics(layout, str(tmp_path))
    text = nics.encode_nics(found, "abc")
    assert nics.decode_nics(text, "abc", 8) == found
    assert found.nearest(3) == ("mlx5_3", "PIX")
    with pytest.raises(nics.NicsError, match="refers to topology abc"):
        nics.decode_nics(text, "def", 8)
    with pytest.raises(nics.NicsError, match="links for 8 GPUs, the topology 4"):
        nics.decode_nics(text, "abc", 4)
    with pytest.raises(nics.NicsError, match="rejected at links"):
        nics.decode_nics(text.replace('"PIX"', '"FAST"', 1), "abc", 8)
