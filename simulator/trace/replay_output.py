"""What a trace replay prints and writes: the table, TSV, one JSON document, a plot.

Rows are configurations (path, policy, gpupair's part), each the mean over its seeds.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path
from statistics import mean

from gpupair.command.outputs import atomic_write
from gpupair.simulator.trace.replay import SCORE_LABELS, ReplayResult

POINTS = (90, 100, 110, 130)  # arrival % the table shows (FGD's figures read 100 and 130)


def gpupair_label(run: ReplayResult) -> str:
    return SCORE_LABELS[run.score] if run.gpupair else "-"


def _groups(runs: Sequence[ReplayResult]) -> dict[tuple[str, str, str], list[ReplayResult]]:
    groups: dict[tuple[str, str, str], list[ReplayResult]] = {}
    for run in runs:
        groups.setdefault((run.path, run.policy, gpupair_label(run)), []).append(run)
    return groups


def _mean_at(runs: Sequence[ReplayResult], point: int) -> str:
    values = [run.allocation.get(point) for run in runs]
    present = [v for v in values if v is not None]
    return f"{mean(present):.2f}" if present else "-"


HEADER = ("path", "policy", "gpupair", "seeds", *(f"alloc@{p}%" for p in POINTS), "multi-GPU placed",
          "NUMA-local", "avoidable SYS", "stranded by NUMA rule", "free NUMA nodes", "moves")


def table(runs: Sequence[ReplayResult]) -> tuple[tuple[str, ...], list[tuple[object, ...]]]:
    rows = []
    for (path, policy, label), group in _groups(runs).items():
        placed = sum(r.multi_gpu_placed for r in group)
        local = sum(r.multi_gpu_numa_local for r in group)
        rows.append((path, policy, label, len(group), *(_mean_at(group, p) for p in POINTS),
                     f"{placed / len(group):.1f}", f"{100 * local / placed:.1f}%" if placed else "-",
                     f"{mean(r.avoidable_sys for r in group):.1f}",
                     f"{mean(r.stranded_by_numa_rule for r in group):.1f}",
                     f"{mean(r.free_numa_nodes for r in group):.1f}", f"{mean(r.moves for r in group):.1f}"))
    return HEADER, rows


RUN_HEADER = ("path", "policy", "gpupair", "seed", *(f"alloc@{p}%" for p in range(0, 131, 10)),
              "multi_gpu_placed", "multi_gpu_numa_local", "sys_grants", "avoidable_sys", "stranded_by_numa_rule",
              "stranded_gpus", "failed_pods", "free_numa_nodes", "cpu_seconds", "moves", "gpus_moved",
              "placed_by_moves")


def run_rows(runs: Sequence[ReplayResult]) -> tuple[tuple[str, ...], list[tuple[object, ...]]]:
    rows = [(r.path, r.policy, gpupair_label(r), r.seed,
             *("" if r.allocation.get(p) is None else r.allocation[p] for p in range(0, 131, 10)),
             r.multi_gpu_placed, r.multi_gpu_numa_local, r.sys_grants, r.avoidable_sys, r.stranded_by_numa_rule,
             r.stranded_gpus, r.failed_pods, r.free_numa_nodes, f"{r.seconds:.1f}", r.moves, r.gpus_moved,
             r.placed_by_moves) for r in runs]
    return RUN_HEADER, rows


def document(about: dict, runs: Sequence[ReplayResult]) -> str:
    """The one JSON document ``--output json`` prints."""
    return json.dumps({"trace": about, "runs": [run.as_json() for run in runs]}, indent=1)


ZOOM_FROM = 70  # arrival %: below it every policy places nearly all that arrived, and the curves overlap


def figure(runs: Sequence[ReplayResult], workload: str):
    """Allocation against arrival, one line per configuration (mean over its seeds), one panel a
    path, as FGD's figure 9a draws it, zoomed to where policies part: arrival from 70 to 130%,
    allocation from the lowest curve there."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    groups = _groups(runs)
    paths = list(dict.fromkeys(key[0] for key in groups))
    fig, axes = plt.subplots(1, len(paths), figsize=(8 * len(paths), 6), squeeze=False)
    for axis, device_path in zip(axes[0], paths):
        shown: list[float] = []
        for (run_path, policy, label), group in groups.items():
            if run_path != device_path:
                continue
            points = sorted({p for r in group for p, v in r.allocation.items() if v is not None and p >= ZOOM_FROM})
            values = [mean(v for r in group if (v := r.allocation.get(p)) is not None) for p in points]
            shown += values
            style = {"-": "-", "gpupair": "--"}.get(label, ":")
            axis.plot(points, values, style, label=policy if label == "-" else f"{policy} + {label}")
        axis.plot([0, 130], [0, 130], color="grey", linewidth=0.5)
        axis.set_xlim(ZOOM_FROM, 130)
        low, high = (min(shown), max(shown)) if shown else (0.0, 100.0)
        axis.set_ylim(max(0.0, math.floor(low) - 1), min(100.0, math.ceil(high) + 1))
        axis.set_xlabel("GPU demand arrived (% of the cluster's GPUs)")
        axis.set_ylabel("GPUs allocated (%)")
        axis.set_title(f"{workload}: {device_path} path")
        axis.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    return fig


def plot(path: Path, runs: Sequence[ReplayResult], workload: str) -> None:
    """``figure`` written as PNG."""
    import matplotlib.pyplot as plt

    fig = figure(runs, workload)
    with atomic_write(path, binary=True) as out:
        fig.savefig(out, format="png", dpi=100)
    plt.close(fig)
