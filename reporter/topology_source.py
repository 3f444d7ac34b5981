"""Where the reporter's node layout comes from: NVML on a GPU node, or a file without one.

``--topology-file`` takes either a real ``nvidia-smi topo -m`` output (any text around the
matrix is fine) or the core's JSON: the ``gpupair.io/topology`` annotation value, or a whole
annotation object as ``--dry-run`` prints it. topo -m prints no UUIDs or PCI ids, so a layout
from it can only be matched to device ids by index; the JSON form carries both.
"""

from __future__ import annotations

import json
from typing import Any, Protocol

from gpupair import report
from gpupair.layout import NodeLayout
from gpupair.smi_topo import TopoParseError, parse_topo_matrix
from reporter.nvml_discovery import DEFAULT_SYSFS, DiscoveryResult, discover

MAX_FILE_BYTES = 1024 * 1024


class TopologyFileError(ValueError):
    """A --topology-file that cannot be read or holds no usable layout; the message says why."""


class LayoutSource(Protocol):
    """Gives the node's layout. ``load`` blocks (NVML is a C library); run it off the loop."""

    description: str

    def load(self) -> DiscoveryResult: ...


def parse_topology_text(text: str, origin: str = "topology") -> NodeLayout:
    """A layout from topo -m text or the core's JSON; TopologyFileError says what is wrong."""
    if text.lstrip().startswith("{"):
        try:
            data: Any = json.loads(text)
        except json.JSONDecodeError as error:
            raise TopologyFileError(f"{origin}: not valid JSON: {error}") from None
        if isinstance(data, dict) and report.TOPOLOGY_KEY in data:
            value = data[report.TOPOLOGY_KEY]
            if not isinstance(value, str):
                raise TopologyFileError(f"{origin}: {report.TOPOLOGY_KEY} must be a JSON string")
            text = value
        try:
            return report.decode_layout(text)
        except report.ReportError as error:
            raise TopologyFileError(f"{origin}: {error.reason}") from None
    try:
        return parse_topo_matrix(text).to_layout()
    except TopoParseError as error:
        raise TopologyFileError(f"{origin}: {error}") from None
    except ValueError as error:  # a matrix the layout itself rejects
        raise TopologyFileError(f"{origin}: {error}") from None


def read_topology_file(path: str) -> NodeLayout:
    try:
        with open(path, "rb") as handle:
            raw = handle.read(MAX_FILE_BYTES + 1)
    except OSError as error:
        raise TopologyFileError(f"cannot read topology file {path}: {error.strerror or error}") from None
    if len(raw) > MAX_FILE_BYTES:
        raise TopologyFileError(f"topology file {path} is larger than {MAX_FILE_BYTES} bytes")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise TopologyFileError(f"topology file {path} is not UTF-8 text") from None
    return parse_topology_text(text, origin=path)


class FileLayoutSource:
    """A fixed layout read once from --topology-file."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.description = f"file {path}"
        self._layout = read_topology_file(path)

    def load(self) -> DiscoveryResult:
        return DiscoveryResult(layout=self._layout)


class NvmlLayoutSource:
    """The layout as NVML reports it now (``nvml``: the pynvml module or a test stand-in)."""

    def __init__(self, nvml: Any = None, sysfs_root: str = DEFAULT_SYSFS) -> None:
        self.nvml = nvml
        self.sysfs_root = sysfs_root
        self.description = "NVML"

    def load(self) -> DiscoveryResult:
        return discover(self.nvml, self.sysfs_root)
