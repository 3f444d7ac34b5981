"""NVLink subrequests per class of nodes, from recorded `nvidia-smi topo -m` matrices
(tests/fixtures/topo/SOURCES.md): the bridged 8x RTX A6000 box (NV4 on 0+1, 2+3, 4+5, 6+7), the
HGX H100 and DGX A100 NVSwitch boards (NV18 / NV12 between every pair) and a PCIe-only 8x RTX
5090. topo -m prints no UUIDs or PCI addresses: the tests give each GPU its own UUID and each
board model its bus numbers, some shared between models on purpose."""

from __future__ import annotations

from dataclasses import replace

import pytest

from gpupair.decide.claims.nvlink_classes import dra_pci, index_choices, link_classes, nvlink_choices, selector
from gpupair.topology.layout import NodeLayout
from gpupair.topology.smi_topo import parse_topo_matrix
from tests.core.topology.test_smi_topo import load

A6000 = parse_topo_matrix(load("unige-3741-8x-a6000-nvlink.txt")).to_layout()
HGX_H100 = parse_topo_matrix(load("sglang-30401-hgx-h100.txt")).to_layout()
DGX_A100 = parse_topo_matrix(load("deepep-13-dgx-a100.txt")).to_layout()
PCIE_5090 = parse_topo_matrix(load("sglang-23020-8x5090-pcie.txt")).to_layout()
WORKSTATION_BUSES = (0x21, 0x22, 0x41, 0x42, 0x81, 0x82, 0xC1, 0xC2)
HGX_BUSES = (0x18, 0x2A, 0x3A, 0x5D, 0x9A, 0xAB, 0xBA, 0xDB)


def board(layout: NodeLayout, node: str, buses=WORKSTATION_BUSES) -> NodeLayout:
    return replace(layout, devices=tuple(
        replace(d, uuid=f"GPU-{node}-{d.index}", pci_bus_id=f"00000000:{buses[d.index]:02X}:00.0")
        for d in layout.devices))


def pci_pair(a: int, b: int, buses=WORKSTATION_BUSES) -> str:
    return selector("pciBusID", [f"0000:{buses[a]:02x}:00.0", f"0000:{buses[b]:02x}:00.0"])


def test_the_recordings_are_one_bridged_board_and_two_nvswitch_boards():
    nodes = {"a6000-1": board(A6000, "a6000-1"), "h100-1": board(HGX_H100, "h100-1", HGX_BUSES),
             "a100-1": board(DGX_A100, "a100-1", HGX_BUSES), "rtx-1": board(PCIE_5090, "rtx-1")}
    kinds = {c.nodes: c.kind for c in link_classes(nodes)}
    assert kinds == {("a6000-1",): "bridged", ("h100-1",): "nvswitch", ("a100-1",): "nvswitch",
                     ("rtx-1",): "unlinked"}
    (a6000,) = [c for c in link_classes(nodes) if c.kind == "bridged"]
    assert a6000.nvlink_pairs == ((0, 1), (2, 3), (4, 5), (6, 7))


def test_nodes_with_one_matrix_are_one_class_the_largest_first():
    nodes = {"a6000-2": board(A6000, "a6000-2"), "h100-1": board(HGX_H100, "h100-1", HGX_BUSES),
             "a6000-1": board(A6000, "a6000-1")}
    assert [c.nodes for c in link_classes(nodes)] == [("a6000-1", "a6000-2"), ("h100-1",)]


def test_a_bridged_class_gets_one_subrequest_per_pair_by_the_drivers_pci_address():
    nodes = {f"a6000-{n}": board(A6000, f"a6000-{n}") for n in (1, 2, 3)}
    choices = nvlink_choices(nodes)
    assert choices.selectors == (pci_pair(0, 1), pci_pair(2, 3), pci_pair(4, 5), pci_pair(6, 7))
    assert choices.selectors[0] == \
        'device.attributes["resource.kubernetes.io"].pciBusID in ["0000:21:00.0", "0000:22:00.0"]'
    assert (choices.known, choices.bridged, choices.notes) == (True, True, ())


def test_by_index_where_the_driver_publishes_one():
    nodes = {"a6000-1": board(A6000, "a6000-1")}
    assert nvlink_choices(nodes, "index").selectors == index_choices(((0, 1), (2, 3), (4, 5), (6, 7))).selectors


def test_nvswitch_boards_alone_need_no_pair():
    nodes = {"h100-1": board(HGX_H100, "h100-1", HGX_BUSES), "a100-1": board(DGX_A100, "a100-1", HGX_BUSES)}
    assert nvlink_choices(nodes).selectors == (None,), "any two GPUs there are joined by NVLink"


def test_beside_a_bridged_class_an_nvswitch_class_is_named_by_its_own_devices():
    nodes = {"a6000-1": board(A6000, "a6000-1"), "h100-1": board(HGX_H100, "h100-1", HGX_BUSES)}
    choices = nvlink_choices(nodes)
    everything = selector("pciBusID", [f"0000:{b:02x}:00.0" for b in HGX_BUSES])
    assert choices.selectors == (pci_pair(0, 1), pci_pair(2, 3), pci_pair(4, 5), pci_pair(6, 7), everything)


def test_an_address_that_another_class_leaves_unbridged_falls_back_to_uuid():
    """The PCIe-only box has GPUs at the A6000's bus numbers: a selector by PCI address would
    hand it GPU0+GPU1 (NODE) there, so the pairs name their UUIDs."""
    nodes = {"a6000-1": board(A6000, "a6000-1"), "rtx-1": board(PCIE_5090, "rtx-1")}
    choices = nvlink_choices(nodes)
    assert choices.selectors[0] == selector("uuid", ["GPU-a6000-1-0", "GPU-a6000-1-1"])
    assert choices.selectors[0] == 'device.attributes[device.driver].uuid in ["GPU-a6000-1-0", "GPU-a6000-1-1"]'
    assert nvlink_choices(nodes, "index").selectors == choices.selectors, "index repeats on every board"


def test_differently_bridged_classes_get_the_pairs_of_each():
    crossed = [list(row) for row in A6000.links]  # the same board bridged 0+2 and 1+3 instead of 0+1 and 2+3
    for (a, b), label in {(0, 1): "NODE", (2, 3): "NODE", (0, 2): "NV4", (1, 3): "NV4"}.items():
        crossed[a][b] = crossed[b][a] = label
    other = replace(A6000, links=tuple(tuple(row) for row in crossed))
    nodes = {"a6000-1": board(A6000, "a6000-1"), "crossed-1": board(other, "crossed-1")}
    choices = nvlink_choices(nodes, "index")
    both = index_choices([(4, 5), (6, 7)]).selectors  # bridged on both boards: one subrequest each, by index
    assert choices.selectors == (
        selector("uuid", ["GPU-a6000-1-0", "GPU-a6000-1-1"]), selector("uuid", ["GPU-a6000-1-2", "GPU-a6000-1-3"]),
        *both, selector("uuid", ["GPU-crossed-1-0", "GPU-crossed-1-2"]),
        selector("uuid", ["GPU-crossed-1-1", "GPU-crossed-1-3"]))


def test_no_nvlink_anywhere_says_so_and_unknown_links_are_not_no_links():
    unlinked = nvlink_choices({"rtx-1": board(PCIE_5090, "rtx-1")})
    assert (unlinked.selectors, unlinked.known, unlinked.bridged) == ((), True, False)
    unknown = nvlink_choices({})
    assert (unknown.known, unknown.bridged) == (False, False)


def test_more_pairs_than_a_request_holds_are_cut_with_a_note():
    nodes = {"a6000-1": board(A6000, "a6000-1"), "rtx-1": board(PCIE_5090, "rtx-1"),
             "a6000-2": board(A6000, "a6000-2", HGX_BUSES)}
    choices = nvlink_choices(nodes, most=3)
    assert len(choices.selectors) == 3 and choices.notes == ("1 NVLink subrequests left out: a request holds 3",)


def test_a_device_without_the_attribute_is_named_by_uuid():
    bare = replace(board(A6000, "a6000-1"), devices=tuple(replace(d, pci_bus_id="") for d in board(A6000, "a6000-1").devices))
    assert nvlink_choices({"a6000-1": bare}).selectors[0] == selector("uuid", ["GPU-a6000-1-0", "GPU-a6000-1-1"])


@pytest.mark.parametrize("nvml, dra", [("00000000:21:00.0", "0000:21:00.0"), ("00000000:C1:00.0", "0000:c1:00.0"),
                                       ("00000001:0A:1F.7", "0001:0a:1f.7")])
def test_the_drivers_pci_address_is_lower_case_with_a_four_digit_domain(nvml, dra):
    assert dra_pci(nvml) == dra
