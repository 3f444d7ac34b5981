"""Node and pod lists in the openb CSV format (Alibaba's cluster-trace-gpu-v2023, as FGD's
simulator reads them), checked row by row.

- nodes: ``sn,cpu_milli,memory_mib,gpu,model``
- pods: ``name,cpu_milli,memory_mib,num_gpu,gpu_milli`` and optionally ``gpu_spec`` (allowed GPU
  models, ``A|B``) plus the trace's own bookkeeping columns (``qos``, ``pod_phase`` and the
  times), which are read past: the protocol has pods arrive and never leave.

A file that cannot be read as such stops the run with one line naming the file and the row
(``TraceFileError``, exit 2): an unknown column, a missing value, a negative number, a pod
asking a share of more than one GPU. ``gpu_milli`` above 1000 is taken as 1000, as FGD's
converter does (``data/pod_csv_to_yaml.py``); an empty one on a GPU pod means whole GPUs.

``write_nodes`` and ``write_pods`` write the same format (`gpupair snapshot`); what they write,
``read_nodes`` and ``read_pods`` read back unchanged.
"""

from __future__ import annotations

import csv
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from gpupair.command.flags import InputError
from gpupair.decide.score.fragmentation import MILLI
from gpupair.topology import limits

MAX_FILE_BYTES = 256 * 1024 * 1024
NODE_COLUMNS = ("sn", "cpu_milli", "memory_mib", "gpu", "model")
POD_COLUMNS = ("name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli")
POD_OPTIONAL = ("gpu_spec", "qos", "pod_phase", "creation_time", "deletion_time", "scheduled_time")


class TraceFileError(InputError):
    """A node or pod list that is not in the openb format: one line naming file and row."""


@dataclass(frozen=True)
class TraceNode:
    name: str
    milli_cpu: int
    memory_mib: int
    gpus: int
    model: str


@dataclass(frozen=True)
class TracePod:
    name: str
    milli_cpu: int
    memory_mib: int
    gpus: int  # num_gpu
    milli_per_gpu: int  # gpu_milli: 1000 is a whole GPU; below, a share of one
    models: tuple[str, ...] = ()  # gpu_spec: the GPU models it may run on; empty: any

    @property
    def gpu_milli(self) -> int:
        """Total GPU demand in milli (FGD's TotalMilliGpu)."""
        return self.gpus * self.milli_per_gpu

    @property
    def shape(self) -> tuple[int, int, int, tuple[str, ...]]:
        """(cpu, milli per GPU, GPUs, models): FGD's pod resource tuple (memory plays no part)."""
        return (self.milli_cpu, self.milli_per_gpu, self.gpus, self.models)


def _rows(path: Path, required: tuple[str, ...], optional: tuple[str, ...]):
    """(row number, row) for each data row, after the header is checked."""
    try:
        size = path.stat().st_size
    except OSError as error:
        raise TraceFileError(f"{path}: cannot read: {error.strerror or error}") from None
    if size > MAX_FILE_BYTES:
        raise TraceFileError(f"{path}: {size} bytes, more than the {MAX_FILE_BYTES} a trace file may have")
    try:
        text = path.read_text(encoding="utf-8-sig")
    except (OSError, UnicodeDecodeError) as error:
        raise TraceFileError(f"{path}: cannot read as UTF-8 text: {error}") from None
    reader = csv.reader(text.splitlines())
    header = next(reader, None)
    if not header or not any(cell.strip() for cell in header):
        raise TraceFileError(f"{path}: empty file; expected a header row: {','.join(required)}")
    header = [cell.strip() for cell in header]
    missing = [name for name in required if name not in header]
    unknown = [name for name in header if name not in required and name not in optional]
    if missing or unknown:
        what = "; ".join(part for part in (
            f"missing column(s) {', '.join(missing)}" if missing else "",
            f"unknown column(s) {', '.join(unknown)}" if unknown else "") if part)
        raise TraceFileError(f"{path}: row 1 (header): {what}; expected {','.join(required)}"
                             + (f"[,{','.join(optional)}]" if optional else ""))
    if len(set(header)) != len(header):
        raise TraceFileError(f"{path}: row 1 (header): a column is named twice")
    count = 0
    for number, cells in enumerate(reader, start=2):
        if not cells or not any(cell.strip() for cell in cells):
            continue
        if len(cells) != len(header):
            raise TraceFileError(f"{path}: row {number}: {len(cells)} cells, the header has {len(header)}")
        count += 1
        yield number, dict(zip(header, (cell.strip() for cell in cells)))
    if count == 0:
        raise TraceFileError(f"{path}: no data rows after the header")


def _count(path: Path, number: int, row: dict[str, str], column: str, default: int | None = None) -> int:
    value = row.get(column, "")
    if value == "" and default is not None:
        return default
    try:
        parsed = int(value)
    except ValueError:
        try:  # pandas exports write whole numbers as 1000.0
            as_float = float(value)
        except ValueError:
            as_float = float("nan")
        if not as_float.is_integer():
            raise TraceFileError(f"{path}: row {number}: {column} must be a whole number, got {value!r}") from None
        parsed = int(as_float)
    if parsed < 0:
        raise TraceFileError(f"{path}: row {number}: {column} must not be negative, got {parsed}")
    return parsed


def _new_name(path: Path, number: int, row: dict[str, str], column: str, kind: str, names: set[str]) -> str:
    """The row's name, refused when empty or already listed."""
    name = row[column]
    if not name:
        raise TraceFileError(f"{path}: row {number}: {column} (the {kind}'s name) is empty")
    if name in names:
        raise TraceFileError(f"{path}: row {number}: {kind} {name} is listed twice")
    names.add(name)
    return name


def workload_name(path: str | Path) -> str:
    """The workload a pod list holds, by its file name: ``multigpu50`` for
    ``openb_pod_list_multigpu50.csv``, else the file's stem."""
    return Path(path).stem.removeprefix("openb_pod_list_") or Path(path).stem


def read_nodes(path: str | Path) -> list[TraceNode]:
    path = Path(path)
    nodes: list[TraceNode] = []
    names: set[str] = set()
    for number, row in _rows(path, NODE_COLUMNS, ()):
        name = _new_name(path, number, row, "sn", "node", names)
        gpus = _count(path, number, row, "gpu")
        if gpus > limits.MAX_GPUS:
            raise TraceFileError(f"{path}: row {number}: {gpus} GPUs; gpupair handles at most {limits.MAX_GPUS} a node")
        nodes.append(TraceNode(name, _count(path, number, row, "cpu_milli"), _count(path, number, row, "memory_mib"),
                               gpus, row["model"]))
    return nodes


def read_pods(path: str | Path) -> list[TracePod]:
    path = Path(path)
    pods: list[TracePod] = []
    names: set[str] = set()
    for number, row in _rows(path, POD_COLUMNS, POD_OPTIONAL):
        name = _new_name(path, number, row, "name", "pod", names)
        gpus = _count(path, number, row, "num_gpu")
        milli = min(_count(path, number, row, "gpu_milli", default=MILLI), MILLI) if gpus else 0
        if gpus and milli == 0:
            raise TraceFileError(f"{path}: row {number}: gpu_milli is 0 on a pod asking {gpus} GPU(s)")
        if gpus > 1 and milli < MILLI:
            raise TraceFileError(f"{path}: row {number}: {gpus} GPUs at gpu_milli {milli}: only a one-GPU pod "
                                 "may ask a share of a GPU")
        models = tuple(m for m in row.get("gpu_spec", "").split("|") if m) if gpus else ()
        pods.append(TracePod(name, _count(path, number, row, "cpu_milli"), _count(path, number, row, "memory_mib"),
                             gpus, milli, models))
    return pods


def write_nodes(path: str | Path, nodes: Sequence[TraceNode]) -> None:
    with Path(path).open("w", encoding="utf-8", newline="") as out:
        writer = csv.writer(out, lineterminator="\n")
        writer.writerow(NODE_COLUMNS)
        writer.writerows((n.name, n.milli_cpu, n.memory_mib, n.gpus, n.model) for n in nodes)


def write_pods(path: str | Path, pods: Sequence[TracePod]) -> None:
    """With ``gpu_spec``: the models a GPU pod may run on, ``A|B`` (empty: any)."""
    with Path(path).open("w", encoding="utf-8", newline="") as out:
        writer = csv.writer(out, lineterminator="\n")
        writer.writerow((*POD_COLUMNS, "gpu_spec"))
        writer.writerows((p.name, p.milli_cpu, p.memory_mib, p.gpus, p.milli_per_gpu if p.gpus else 0,
                          "|".join(p.models)) for p in pods)
