"""Node layouts for tests, built from the field report's node (see the seed DIGEST)."""

from __future__ import annotations

from gpupair.layout import Device, NodeLayout

SEED_PCI_BUSES = ("21", "31", "41", "61", "81", "A1", "C1", "E1")  # NUMA0: first four, NUMA1: rest


def seed_layout(uuid_prefix: str = "GPU-seed") -> NodeLayout:
    """The seed's 8-GPU node: GPU0-3 on NUMA0, GPU4-7 on NUMA1, NODE within, SYS across,
    no NVLink, PCI 00000000:21:00.0 ... 00000000:E1:00.0. ``uuid_prefix`` tells nodes apart."""
    numa = [0] * 4 + [1] * 4
    devices = tuple(
        Device(index=i, uuid=f"{uuid_prefix}-{i}", pci_bus_id=f"00000000:{bus}:00.0", numa_node=numa[i])
        for i, bus in enumerate(SEED_PCI_BUSES)
    )
    links = tuple(
        tuple("X" if i == j else ("NODE" if numa[i] == numa[j] else "SYS") for j in range(8))
        for i in range(8)
    )
    return NodeLayout(devices=devices, links=links)
