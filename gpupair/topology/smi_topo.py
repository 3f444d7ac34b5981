"""Parse the matrix that `nvidia-smi topo -m` (or `-mp`) prints, from any text that contains it.

The input is whatever an operator or a pod log holds: a shell prompt, the
`nvidia-smi --query-gpu ... --format=csv` lines before it, a Markdown fence, `NVIDIA Topology:` from
an env-collection script, the Legend after it. The first matrix found is parsed; the rest is skipped.

Cells are split on runs of whitespace, not on column positions: pasted outputs lose their tabs,
turn them into spaces, or let a long CPU list run into the next column (``128-255,384-511 1``), so
positions cannot be trusted while the token order always can.

The attribute cells after the links (CPU Affinity, NUMA Affinity, GPU NUMA ID) can be empty: where
the driver knows no affinity (VMs, WSL2) it prints ``GPU0\\t X \\t\\t\\t\\tN/A``. nvidia-smi writes one
tab after the CPU Affinity value and two after the NUMA Affinity value, so on a row that still has
its tabs the cells are read by tab position. Once the tabs are gone, the values present are
aligned to the right: the empty cells are the affinity ones, which come first.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from gpupair.topology import links
from gpupair.topology.layout import NO_NUMA, Device, NodeLayout

# nvidia-smi underlines the header row on a terminal; CSI sequences in general are dropped.
_ANSI = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]")
_ATTRIBUTE_COLUMNS = {
    "CPU Affinity": re.compile(r"CPU\s+Affinity"),
    "NUMA Affinity": re.compile(r"NUMA\s+Affinity"),
    "GPU NUMA ID": re.compile(r"GPU\s+NUMA\s+ID"),
}
_GPU_NAME = re.compile(r"^GPU(\d+)$")
# NIC columns are NIC<n> on current drivers and the RDMA device name (mlx5_0, mlx4_0, ...) on old
# ones; any other identifier-like token is accepted as a device column too.
_DEVICE_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_.-]*$")
_LEGEND_TITLE = "NIC Legend:"
_LEGEND_ENTRY = re.compile(r"^(NIC\d+):\s*(\S+)$")
_INTEGER = re.compile(r"^\d+$")


if TYPE_CHECKING:
    from gpupair.topology.nics import NicLayout


class TopoParseError(ValueError):
    """Text that does not hold a well-formed topology matrix.

    ``lineno`` is 1-based and ``line`` is that line's text as given; both are None only when the
    text holds no matrix at all.
    """

    def __init__(self, reason: str, lineno: int | None = None, line: str | None = None) -> None:
        self.reason = reason
        self.lineno = lineno
        self.line = line
        if lineno is None:
            super().__init__(reason)
        else:
            super().__init__(f"line {lineno}: {reason}: {line!r}")


@dataclass(frozen=True)
class SmiTopology:
    gpus: tuple[str, ...]
    nics: tuple[str, ...]
    gpu_links: tuple[tuple[str, ...], ...]  # GPU x GPU, normalized labels, X on the diagonal
    gpu_nic_links: tuple[tuple[str, ...], ...]  # GPU x NIC, in `nics` order
    cpu_affinity: tuple[str | None, ...]  # raw text per GPU, None where the cell is empty
    numa_affinity: tuple[str | None, ...]  # "0", "0-1", "N/A", ...
    gpu_numa_id: tuple[str | None, ...]  # newer drivers only; None where the column is absent
    nic_legend: dict[str, str] = field(default_factory=dict, hash=False)  # NIC0 -> mlx5_0

    def numa_node_of(self, index: int) -> int:
        """NUMA node of GPU ``index``: NUMA Affinity when it names one node, else GPU NUMA ID, else -1.

        Affinity like ``0-1`` (several nodes) or ``N/A`` names no single node.
        """
        for value in (self.numa_affinity[index], self.gpu_numa_id[index]):
            if value is not None and _INTEGER.match(value):
                return int(value)
        return NO_NUMA

    def to_nic_layout(self) -> "NicLayout":
        """The NICs this matrix shows, named by the NIC legend where it has one (NIC0 -> mlx5_0),
        with each GPU's link to each; topo -m prints no PCI ids or NUMA nodes for NICs."""
        from gpupair.topology.nics import Nic, NicLayout

        return NicLayout(
            nics=tuple(Nic(self.nic_legend.get(column, column)) for column in self.nics),
            links=tuple(tuple(row) for row in self.gpu_nic_links),
        )

    def to_layout(self) -> NodeLayout:
        """The node layout this matrix describes; topo -m prints no UUIDs or PCI ids, so none are set."""
        devices = tuple(
            Device(index=i, numa_node=self.numa_node_of(i)) for i in range(len(self.gpus))
        )
        return NodeLayout(devices=devices, links=self.gpu_links)


@dataclass(frozen=True)
class _Header:
    index: int  # 0-based line index
    devices: tuple[str, ...]  # GPU0..GPUn-1, then NICs
    attributes: tuple[str, ...]

    @property
    def gpu_count(self) -> int:
        return sum(1 for name in self.devices if _GPU_NAME.match(name))


@dataclass(frozen=True)
class _GpuRow:
    index: int  # 0-based line index
    labels: tuple[str, ...]  # one per device column
    cells: tuple[str, ...]  # every whitespace token after the row name


class _Text:
    """The input split into lines, ANSI codes removed, with errors that quote the original line."""

    def __init__(self, text: str) -> None:
        self.original = text.splitlines()
        self.lines = [_ANSI.sub("", line) for line in self.original]

    def error(self, reason: str, index: int) -> TopoParseError:
        return TopoParseError(reason, index + 1, self.original[index])


def parse_topo_matrix(text: str) -> SmiTopology:
    """Parse the first `nvidia-smi topo -m` matrix in ``text``; raise TopoParseError if malformed."""
    source = _Text(text)
    header = _find_header(source.lines, 0)
    if header is None:
        raise TopoParseError(f"no nvidia-smi topo -m matrix found in {len(source.lines)} lines")
    rows, end = _read_rows(source, header)
    n_gpu = header.gpu_count
    gpu_links = tuple(row.labels[:n_gpu] for row in rows)
    _check_gpu_block(source, rows, gpu_links)

    attributes = [
        _attributes(header.attributes, source.lines[row.index], row.cells, len(header.devices))
        for row in rows
    ]
    nics = header.devices[n_gpu:]
    return SmiTopology(
        gpus=header.devices[:n_gpu],
        nics=nics,
        gpu_links=gpu_links,
        gpu_nic_links=tuple(row.labels[n_gpu:] for row in rows),
        cpu_affinity=tuple(a.get("CPU Affinity") for a in attributes),
        numa_affinity=tuple(a.get("NUMA Affinity") for a in attributes),
        gpu_numa_id=tuple(a.get("GPU NUMA ID") for a in attributes),
        nic_legend=_nic_legend(source, end, nics),
    )


def _find_header(lines: Sequence[str], start: int) -> _Header | None:
    for index in range(start, len(lines)):
        header = _parse_header(lines[index], index)
        if header is not None:
            return header
    return None


def _parse_header(line: str, index: int) -> _Header | None:
    """A header lists GPU0, GPU1, ..., then other devices, then the attribute columns; nothing else."""
    text = line
    for name, pattern in _ATTRIBUTE_COLUMNS.items():
        text = pattern.sub(name.replace(" ", "\x00"), text)
    tokens = [token.replace("\x00", " ") for token in text.split()]
    if not tokens or tokens[0] != "GPU0":
        return None
    devices: list[str] = []
    attributes: list[str] = []
    for token in tokens:
        if token in _ATTRIBUTE_COLUMNS:
            attributes.append(token)
        elif attributes or not _DEVICE_NAME.match(token) or links.is_known(token):
            return None  # a link label (so a GPU0 row), or stray text after the attribute columns
        else:
            devices.append(token)
    gpu_names = [name for name in devices if _GPU_NAME.match(name)]
    if devices[: len(gpu_names)] != [f"GPU{i}" for i in range(len(gpu_names))]:
        return None
    if len(set(devices)) != len(devices):
        return None
    return _Header(index=index, devices=tuple(devices), attributes=tuple(attributes))


def _read_rows(source: _Text, header: _Header) -> tuple[list[_GpuRow], int]:
    """The GPU rows under ``header`` (NIC rows are checked and skipped) and the index after the matrix."""
    n_dev = len(header.devices)
    n_gpu = header.gpu_count
    rows: list[_GpuRow] = []
    index = header.index + 1
    while index < len(source.lines):
        tokens = source.lines[index].split()
        if not tokens or tokens[0] not in header.devices:
            break
        name, cells = tokens[0], tokens[1:]
        if len(cells) < n_dev:
            raise source.error(
                f"row {name} has {len(cells)} cells for {n_dev} device columns (truncated row?)", index
            )
        if len(cells) > n_dev + len(header.attributes):
            raise source.error(
                f"row {name} has {len(cells)} cells, more than the header's {n_dev} device "
                f"and {len(header.attributes)} attribute columns",
                index,
            )
        labels = tuple(_normalize(source, cell, index) for cell in cells[:n_dev])
        position = header.devices.index(name)
        if labels[position] != links.SELF:
            raise source.error(f"row {name} is not X in its own column", index)
        if position < n_gpu:
            if position != len(rows):
                raise source.error(f"expected row {header.devices[len(rows)]}, got {name}", index)
            rows.append(_GpuRow(index=index, labels=labels, cells=tuple(cells)))
        index += 1
    if len(rows) < n_gpu:
        # The matrix stopped early: name the line where it stopped, or the last line there is.
        stop = min(index, len(source.lines) - 1)
        raise source.error(f"matrix ends after {len(rows)} of {n_gpu} GPU rows (truncated?)", stop)
    return rows, index


def _check_gpu_block(
    source: _Text, rows: Sequence[_GpuRow], gpu_links: Sequence[Sequence[str]]
) -> None:
    for i, row in enumerate(rows):
        for j in range(i):
            if gpu_links[i][j] != gpu_links[j][i]:
                raise source.error(
                    f"matrix not symmetric: GPU{i}->GPU{j} is {gpu_links[i][j]} "
                    f"but GPU{j}->GPU{i} is {gpu_links[j][i]}",
                    row.index,
                )
            if gpu_links[i][j] == links.SELF:
                raise source.error(f"GPU{i}->GPU{j} is X off the diagonal", row.index)


def _normalize(source: _Text, cell: str, index: int) -> str:
    try:
        return links.normalize(cell)
    except links.UnknownLinkError:
        raise source.error(f"unknown link label {cell!r}", index) from None


def _attributes(
    columns: Sequence[str], line: str, cells: Sequence[str], n_dev: int
) -> dict[str, str]:
    """Attribute column -> value for one GPU row; columns with an empty cell are left out."""
    values = _tab_attributes(columns, line, cells, n_dev)
    if values is None:
        present: list[str | None] = list(cells[n_dev:])
        values = [None] * (len(columns) - len(present)) + present
    return {column: value for column, value in zip(columns, values) if value}


def _tab_attributes(
    columns: Sequence[str], line: str, cells: Sequence[str], n_dev: int
) -> list[str | None] | None:
    """The attribute cells read by tab position, or None when the row's tabs are not nvidia-smi's."""
    if "\t" not in line:
        return None
    fields = [f.strip() for f in line.split("\t")]
    while len(fields) > 1 and not fields[0]:
        fields.pop(0)  # indentation before the row name
    if fields[1 : 1 + n_dev] != list(cells[:n_dev]):
        return None  # some link cells are not tab-separated: the tabs were edited
    tail = fields[1 + n_dev :]
    if "NUMA Affinity" in columns and len(tail) > len(columns):
        pad = columns.index("NUMA Affinity") + 1  # the second tab after the NUMA value
        if pad < len(tail) and not tail[pad]:
            del tail[pad]
    while len(tail) > len(columns) and not tail[-1]:
        tail.pop()
    if len(tail) != len(columns):
        return None  # nvidia-smi prints every separator, even around empty cells
    return [value or None for value in tail]


def _nic_legend(source: _Text, start: int, nics: Sequence[str]) -> dict[str, str]:
    """The ``NIC Legend:`` block after this matrix (and before any next matrix), if there is one."""
    lines = source.lines
    index = start
    while index < len(lines) and " ".join(lines[index].split()) != _LEGEND_TITLE:
        if _parse_header(lines[index], index) is not None:
            return {}
        index += 1
    legend: dict[str, str] = {}
    for index in range(index + 1, len(lines)):
        text = lines[index].strip()
        if not text:
            if legend:
                break
            continue
        match = _LEGEND_ENTRY.match(text)
        if match is None:
            break
        nic, device = match.groups()
        if nic not in nics:
            raise source.error(f"NIC Legend names {nic}, which is not a column of the matrix", index)
        legend[nic] = device
    return legend
