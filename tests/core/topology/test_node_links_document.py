"""The node-links document past a ConfigMap's 1 MiB: one entry per distinct layout, every node
kept with its links and addresses; empty (links unknown) where even that does not fit."""

from __future__ import annotations

from dataclasses import replace

from gpupair.decide.claims.nvlink_classes import nvlink_choices
from gpupair.topology.node_links import decode_node_links, encode_node_links, encode_node_links_within
from gpupair.topology.report import encode_topology
from tests.core.decide.claims.test_nvlink_classes import A6000, HGX_BUSES, HGX_H100, board

A6000_NODES = {f"a6000-{n}": encode_topology(board(A6000, f"a6000-{n}")) for n in range(40)}
H100_NODES = {f"h100-{n}": encode_topology(board(HGX_H100, f"h100-{n}", HGX_BUSES)) for n in range(40)}
NODES = {**A6000_NODES, **H100_NODES}


def test_a_document_that_fits_is_written_in_full():
    text, form = encode_node_links_within(NODES)
    assert (text, form) == (encode_node_links(NODES), "full")
    layouts, problems = decode_node_links(text)
    assert problems == {} and len(layouts) == 80 and layouts["a6000-7"].devices[0].uuid == "GPU-a6000-7-0"


def test_past_the_limit_one_entry_per_layout_keeps_every_node_and_its_links():
    full = len(encode_node_links(NODES))
    text, form = encode_node_links_within(NODES, limit=full // 10)
    assert form == "compact" and len(text) <= full // 10
    layouts, problems = decode_node_links(text)
    assert problems == {} and set(layouts) == set(NODES)
    assert layouts["a6000-39"].links == A6000.links and layouts["h100-5"].links == HGX_H100.links
    assert layouts["h100-5"].devices[1].pci_bus_id == board(HGX_H100, "x", HGX_BUSES).devices[1].pci_bus_id
    # the same subrequests as from the full document: the classes are the same
    assert nvlink_choices(layouts).selectors == nvlink_choices(decode_node_links(encode_node_links(NODES))[0]).selectors


def test_nodes_of_one_board_at_other_pci_addresses_are_kept_apart():
    moved = encode_topology(replace(board(A6000, "moved"), devices=tuple(
        replace(d, pci_bus_id=f"00000000:{0x10 + d.index:02X}:00.0") for d in A6000.devices)))
    text, form = encode_node_links_within({**A6000_NODES, "moved": moved}, limit=len(moved) * 4)
    layouts, _ = decode_node_links(text)
    assert form == "compact" and layouts["moved"].devices[0].pci_bus_id == "00000000:10:00.0"
    assert layouts["a6000-3"].devices[0].pci_bus_id != "00000000:10:00.0"


def test_when_not_even_one_entry_per_layout_fits_the_links_are_unknown():
    text, form = encode_node_links_within(NODES, limit=1000)
    assert form == "empty" and decode_node_links(text) == ({}, {})
    assert not nvlink_choices(decode_node_links(text)[0]).known


def test_a_same_entry_naming_no_written_node_is_reported_not_guessed():
    text = '{"v":1,"nodes":{},"same":{"a":"b"}}'
    assert decode_node_links(text) == ({}, {"a": "the same as 'b', which the document does not hold decoded"})
