"""Node layouts for tests, built from the field report's node (see the seed DIGEST)."""

from __future__ import annotations

from dataclasses import replace

from gpupair.topology.layout import NodeLayout
from gpupair.simulator.shapes import SEED_PCI_BUSES, seed_layout as simulated_seed_layout

__all__ = ["SEED_PCI_BUSES", "seed_layout"]


def seed_layout(uuid_prefix: str = "GPU-seed") -> NodeLayout:
    """The seed's 8-GPU node (GPU0-3 NUMA0, GPU4-7 NUMA1, NODE within, SYS across, PCI
    00000000:21:00.0 ... E1), with UUIDs ``<uuid_prefix>-<index>`` to tell nodes apart and P2P
    not probed (unknown), as a reporter without a P2P answer would publish it."""
    base = simulated_seed_layout()
    devices = tuple(replace(d, uuid=f"{uuid_prefix}-{d.index}") for d in base.devices)
    return NodeLayout(devices=devices, links=base.links)
