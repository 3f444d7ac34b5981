"""The simulator's default node shape: the field report's node (--topology-file reads others)."""

from __future__ import annotations

from gpupair.topology import links
from gpupair.topology.layout import Device, NodeLayout
from gpupair.topology.nics import Nic, NicLayout

# The field report's 8-GPU RTX 5090D node: GPU0-3 on NUMA0, GPU4-7 on NUMA1, no NVLink.
SEED_PCI_BUSES = ("21", "31", "41", "61", "81", "A1", "C1", "E1")


def seed_layout() -> NodeLayout:
    devices = tuple(
        Device(
            index=i,
            uuid=f"GPU-5090d000-0000-4000-8000-00000000000{i}",
            pci_bus_id=f"00000000:{bus}:00.0",
            numa_node=0 if i < 4 else 1,
        )
        for i, bus in enumerate(SEED_PCI_BUSES)
    )
    matrix = tuple(
        tuple(
            links.SELF if i == j else ("NODE" if (i < 4) == (j < 4) else "SYS")
            for j in range(len(devices))
        )
        for i in range(len(devices))
    )
    # Peer access was probed on these nodes: cudaDeviceCanAccessPeer returned 0 even for NODE.
    p2p = tuple(tuple(None if i == j else False for j in range(8)) for i in range(8))
    return NodeLayout(devices, matrix, p2p)



LOPSIDED_NIC = "mlx5_bond_0"


def lopsided_nics(layout: NodeLayout) -> NicLayout:
    """The issue's RTX 4090 box, on any board: one NIC, ``mlx5_bond_0``, ``PIX`` to the GPUs of
    GPU0's NUMA node (behind its PCIe switch) and ``SYS`` to every other GPU. On the seed's board
    that is PIX to GPU0-3 and SYS to GPU4-7. Built here, not read: the recording the issue
    describes is not among tests/fixtures/topo (go-gpuallocator-17-8x4090-sys.txt, the 4090 box
    there, has its NICs at PHB to GPU6 only)."""
    home = layout.numa_of(0) if layout.size else -1
    near = [layout.numa_of(i) == home for i in range(layout.size)]
    return NicLayout(nics=(Nic(LOPSIDED_NIC, numa_node=max(home, -1)),),
                     links=tuple(("PIX" if close else "SYS",) for close in near))
