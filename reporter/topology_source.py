"""Where the reporter's node layout comes from: NVML on a GPU node, or a file without one.

``--topology-file`` takes every layout form gpupair prints or reads (gpupair.topology.layout_file).
"""

from __future__ import annotations

from typing import Any, Protocol

from dataclasses import replace

from gpupair.topology.layout_file import read_layout
from gpupair.topology.nics import NicLayout
from gpupair.topology.smi_topo import parse_topo_matrix
from gpupair.reporter.nic_discovery import discover_nics
from gpupair.reporter.nvml_discovery import DEFAULT_SYSFS, DiscoveryResult, discover


class LayoutSource(Protocol):
    """Gives the node's layout. ``load`` blocks (NVML is a C library); run it off the loop."""

    description: str

    def load(self) -> DiscoveryResult: ...


class FileLayoutSource:
    """A fixed layout read once from --topology-file."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.description = f"file {path}"
        self._layout = read_layout(path)
        self._nics = nics_of_file(path)

    def load(self) -> DiscoveryResult:
        return DiscoveryResult(layout=self._layout, nics=self._nics)


class NvmlLayoutSource:
    """The layout as NVML reports it now (``nvml``: the pynvml module or a test stand-in)."""

    def __init__(self, nvml: Any = None, sysfs_root: str = DEFAULT_SYSFS) -> None:
        self.nvml = nvml
        self.sysfs_root = sysfs_root
        self.description = "NVML"

    def load(self) -> DiscoveryResult:
        result = discover(self.nvml, self.sysfs_root)
        return replace(result, nics=discover_nics(result.layout, self.sysfs_root))


def nics_of_file(path: str) -> NicLayout | None:
    """The NIC columns of an ``nvidia-smi topo -m`` file (read_layout has checked it); None for
    other forms or a matrix without NICs."""
    try:
        with open(path, encoding="utf-8") as handle:
            topo = parse_topo_matrix(handle.read())
    except (OSError, ValueError):
        return None
    return topo.to_nic_layout() if topo.nics else None
