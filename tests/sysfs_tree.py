"""A sysfs tree laid out to match a recorded ``nvidia-smi topo -m`` (PCI paths, ``numa_node``,
``/sys/class/infiniband``): the boundary the reporter's NIC discovery reads, as nvml_fake is NVML's.

The hierarchy is recovered from the matrix's PCIe classes: devices joined by links no farther
than NODE share a NUMA node, by PHB a root complex, by PXB a root port, by PIX a switch. Each
device then hangs off root complex / root port / top switch port / leaf switch / its own
downstream port. NVLink labels say nothing about PCIe and are not used.
"""

from __future__ import annotations

import itertools
import os
from dataclasses import replace
from pathlib import Path

from gpupair.topology.layout import NodeLayout, sysfs_pci
from gpupair.topology.smi_topo import SmiTopology

CLOSENESS = {"SYS": 0, "NODE": 1, "PHB": 2, "PXB": 3, "PIX": 4}


def _components(count: int, edges: list[tuple[int, int, str]], level: int) -> list[int]:
    parent = list(range(count))

    def find(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    for a, b, label in edges:
        if CLOSENESS.get(label, -1) >= level:
            parent[find(a)] = find(b)
    roots = {}
    return [roots.setdefault(find(i), len(roots)) for i in range(count)]


def build(root: Path, topo: SmiTopology) -> NodeLayout:
    """Write the tree under ``root``; returns the matrix's layout with the PCI ids written."""
    gpus, nics = len(topo.gpus), len(topo.nics)
    edges = [(g, gpus + n, topo.gpu_nic_links[g][n]) for g in range(gpus) for n in range(nics)]
    edges += [(a, b, topo.gpu_links[a][b]) for a in range(gpus) for b in range(a + 1, gpus)]
    count = gpus + nics
    numa, complex_, port, switch = (_components(count, edges, level) for level in (1, 2, 3, 4))
    buses = itertools.count(1)
    names: dict[tuple, str] = {}

    def bdf(key: tuple, function: str = "00.0") -> str:
        if key not in names:
            names[key] = f"0000:{next(buses):02x}:{function}"
        return names[key]

    paths = []
    for d in range(count):
        rc = f"pci0000:{complex_[d] + 0xa0:02x}"
        chain = [rc, bdf(("rp", port[d])), bdf(("top", port[d])), bdf(("topdn", switch[d])),
                 bdf(("leaf", switch[d])), bdf(("leafdn", d)), bdf(("dev", d))]
        directory = root.joinpath("devices", *chain)
        directory.mkdir(parents=True, exist_ok=True)
        (directory / "numa_node").write_text(f"{numa[d]}\n")
        paths.append(directory)
    (root / "bus" / "pci" / "devices").mkdir(parents=True, exist_ok=True)
    layout = topo.to_layout()
    devices = []
    for g, device in enumerate(layout.devices):
        bus_id = paths[g].name
        os.symlink(paths[g], root / "bus" / "pci" / "devices" / sysfs_pci(bus_id))
        devices.append(replace(device, pci_bus_id=bus_id))
    for n, column in enumerate(topo.nics):
        name = topo.nic_legend.get(column, column)
        ib = root / "class" / "infiniband" / name
        ib.mkdir(parents=True)
        os.symlink(paths[gpus + n], ib / "device")
    return replace(layout, devices=tuple(devices))
