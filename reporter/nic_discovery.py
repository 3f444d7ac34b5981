"""The node's RDMA NICs and their links to the GPUs, from sysfs (NVML has no NIC API).

Every RDMA device the kernel registers appears under ``/sys/class/infiniband/<name>`` (mlx5_0,
mlx5_bond_0 for a bonded pair) with a ``device`` link to its PCI function. A PCI device's place in
the hierarchy is the path of ``/sys/bus/pci/devices/<bdf>`` resolved below ``/sys/devices``:
``pci0000:20/0000:20:01.1/0000:21:00.0`` is a root complex, a root port, the device. The GPU x
NIC class follows from the two paths and NUMA nodes (gpupair.topology.nics.pci_link). Everything that is
missing or unreadable is left out with the reason, never guessed.
"""

from __future__ import annotations

import logging
import os

from gpupair.topology.layout import NO_NUMA, NodeLayout, normalize_pci, sysfs_pci
from gpupair.topology.nics import Nic, NicLayout, pci_link

log = logging.getLogger("gpupair.reporter.nics")

DEFAULT_SYSFS = "/sys"


def pci_path(device_dir: str, sysfs_root: str) -> list[str] | None:
    """The device's path below /sys/devices, as components; None when it is not a PCI device there."""
    try:
        target = os.path.realpath(device_dir, strict=True)
    except OSError:
        return None
    base = os.path.realpath(os.path.join(sysfs_root, "devices"))
    relative = os.path.relpath(target, base)
    parts = relative.split(os.sep)
    if relative.startswith("..") or not parts or not parts[0].startswith("pci"):
        return None
    return parts


def _numa(device_dir: str) -> int:
    try:
        with open(os.path.join(device_dir, "numa_node"), encoding="ascii") as handle:
            value = int(handle.read().strip())
    except (OSError, ValueError):
        return NO_NUMA
    return value if value >= 0 else NO_NUMA


def discover_nics(layout: NodeLayout, sysfs_root: str = DEFAULT_SYSFS) -> NicLayout | None:
    """The RDMA NICs of this node and each GPU's link to them; None when sysfs has no
    infiniband class at all (no RDMA stack, or not visible here: unknown, not "no NIC"). A GPU
    whose PCI device sysfs does not show gets SYS to every NIC (its place is unknown)."""
    gpus: list[tuple[list[str] | None, int]] = []
    for device in layout.devices:
        directory = os.path.join(sysfs_root, "bus", "pci", "devices", sysfs_pci(device.pci_bus_id)) \
            if device.pci_bus_id else ""
        path = pci_path(directory, sysfs_root) if directory else None
        if path is None:
            log.warning("GPU not found in sysfs: its NIC links count as SYS", extra={"gpu": device.index})
        gpus.append((path, _numa(directory) if directory else NO_NUMA))
    class_dir = os.path.join(sysfs_root, "class", "infiniband")
    try:
        names = sorted(os.listdir(class_dir))
    except OSError:
        return None
    nics: list[Nic] = []
    columns: list[list[str]] = []
    for name in names:
        device_dir = os.path.join(class_dir, name, "device")
        path = pci_path(device_dir, sysfs_root)
        if path is None:
            log.warning("RDMA device without a PCI function in sysfs: left out", extra={"nic": name})
            continue
        numa = _numa(device_dir)
        try:
            bus_id = normalize_pci(path[-1])
        except ValueError:
            bus_id = ""
        nics.append(Nic(name=name, pci_bus_id=bus_id, numa_node=numa, pcie_root=path[0]))
        columns.append([pci_link(gpu_path, path, gpu_numa, numa) if gpu_path is not None else "SYS"
                        for gpu_path, gpu_numa in gpus])
    return NicLayout(nics=tuple(nics), links=tuple(tuple(column[g] for column in columns) for g in range(len(gpus))))
