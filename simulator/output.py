"""What `gpupair simulate` writes: the seed's TSV, summary tables, verdict annotations, a plot."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from gpupair.command.flags import UsageError
from gpupair.command.outputs import atomic_write, write_text
from gpupair.decide.judge.verdict import TSV_HEADER
from gpupair.simulator.configs import split_name
from gpupair.simulator.scenarios.fleet_scenario import FleetResult
from gpupair.simulator.scenarios.fragmentation_scenario import FragmentationResult
from gpupair.simulator.scenarios.seed_scenario import ConfigResult


def write_tsv(path: Path, results: Sequence[ConfigResult]) -> list[Path]:
    """One TSV per configuration, in the seed's columns: ``<stem>.<profile>.<scheduler>+<plugin>.tsv``."""
    written = []
    for result in results:
        target = path.with_name(f"{path.stem}.{result.config}{path.suffix}")
        lines = ["\t".join(TSV_HEADER)] + [sample.tsv_row() for sample in result.samples]
        written.append(write_text(target, "\n".join(lines) + "\n"))
    return written


def write_verdicts(path: Path, results: Sequence[ConfigResult]) -> None:
    """Per pod, the annotations gpupair's verifier would set on it (JSON lines)."""
    with atomic_write(path) as out:
        for result in results:
            for sample in result.granted:
                entry = {"config": result.config, "pod": sample.pod, "node": sample.node}
                entry["annotations"] = sample.verdict.annotations()
                out.write(json.dumps(entry, sort_keys=True) + "\n")


def write_summary(path: Path, table: tuple[Sequence[str], Sequence[Sequence[object]]], part: str = "summary") -> Path:
    """A summary table as TSV: ``<stem>.<part>.tsv``."""
    header, rows = table
    lines = ["\t".join(header)] + ["\t".join(str(c) for c in row) for row in rows]
    return write_text(path.with_name(f"{path.stem}.{part}{path.suffix}"), "\n".join(lines) + "\n")


def _table(header: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    cells = [list(map(str, header))] + [[str(c) for c in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(header))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


NO_REASON = "pending for no reason"  # left pending while some node really had a close set free


def seed_table(results: Sequence[ConfigResult]) -> tuple[tuple[str, ...], list[tuple[object, ...]]]:
    rows = []
    for r in results:
        granted = len(r.granted)
        rate = f"{100 * r.pass_count / granted:.1f}%" if granted else "-"
        rows.append((*split_name(r.config), granted, r.sys_count, rate, r.pending, r.pending_no_reason))
    return ("profile", "configuration", "samples", "SYS", "PASS rate", "pending", NO_REASON), rows


def seed_summary(results: Sequence[ConfigResult]) -> str:
    return _table(*seed_table(results))


def fleet_table(results: Sequence[FleetResult]) -> tuple[tuple[str, ...], list[tuple[object, ...]]]:
    rows = [
        (
            *split_name(r.config),
            r.granted,
            f"{100 * r.utilisation:.1f}%",
            r.sys_grants,
            r.avoidable_sys,
            len(r.fragmentation_pending),
            len(r.no_reason_pending),
            r.still_pending,
            f"{r.mean_wait:.2f}",
        )
        for r in results
    ]
    header = (
        "profile",
        "configuration",
        "pods placed",
        "GPU util",
        "SYS grants",
        "avoidable SYS",
        "pending (fragmentation)",
        NO_REASON,
        "pending at end",
        "mean wait (steps)",
    )
    return header, rows


def fleet_summary(results: Sequence[FleetResult]) -> str:
    return _table(*fleet_table(results))


def _rate(part: int, whole: int) -> str:
    return f"{100 * part / whole:.1f}%" if whole else "-"


def nic_seed_table(results: Sequence[ConfigResult]) -> tuple[tuple[str, ...], list[tuple[object, ...]]]:
    """The pods that asked for the network: how many were granted GPUs close enough for GPUDirect RDMA."""
    rows = []
    for r in results:
        network = r.network
        granted = [s for s in network if s.verdict is not None]
        gdr = sum(1 for s in granted if s.gdr)
        pending = [s for s in network if s.verdict is None]
        rows.append((*split_name(r.config), len(network), len(granted), gdr, _rate(gdr, len(granted)),
                     len(pending), sum(1 for s in pending if s.close_set_free)))
    return ("profile", "configuration", "network pods", "granted", "GDR-capable", "GDR rate", "pending",
            NO_REASON), rows


def nic_fleet_table(results: Sequence[FleetResult]) -> tuple[tuple[str, ...], list[tuple[object, ...]]]:
    rows = [(*split_name(r.config), r.network_granted, r.network_gdr, _rate(r.network_gdr, r.network_granted),
             len(r.network_no_reason), r.network_pending, f"{r.network_mean_wait:.2f}") for r in results]
    return ("profile", "configuration", "network pods placed", "GDR-capable", "GDR rate", NO_REASON,
            "pending at end", "mean wait (steps)"), rows


def text_table(header: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """A table as the summaries print it, columns aligned."""
    return _table(header, rows)


WASTED = "wasted evictions"  # victims evicted on a node where the pod still had no set it may take


def preemption_table(results: Sequence[FleetResult]) -> tuple[tuple[str, ...], list[tuple[object, ...]]]:
    """With high-priority pods: what their preemptions cost and what they waited."""
    rows = [
        (*split_name(r.config), r.preemptions, r.evictions, r.wasted_evictions, r.lost_gpu_steps,
         r.preemptions_declined, len(r.high_waits), f"{r.high_mean_wait:.2f}", max(r.high_waits, default=0),
         r.high_pending)
        for r in results
    ]
    header = ("profile", "configuration", "preemptions", "evictions", WASTED, "GPU-steps lost", "declined by the verb",
              "high-priority placed", "their mean wait (steps)", "their longest wait", "high-priority pending at end")
    return header, rows


def preemption_summary(results: Sequence[FleetResult]) -> str:
    return _table(*preemption_table(results))


def check_plotting() -> None:
    """Before the run: --plot needs the plot extra."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise UsageError("--plot: needs matplotlib, which is not installed: pip install 'gpupair[plot]'") from None


def plot_seed(path: Path, results: Sequence[ConfigResult]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(3, 1, figsize=(_width(results), 11))
    _bars(axes[0], [r.config for r in results], [r.sys_count for r in results], "SYS grants")
    rates = [100 * r.pass_count / len(r.granted) if r.granted else 0 for r in results]
    _bars(axes[1], [r.config for r in results], rates, "PASS rate (%)")
    axes[1].set_ylim(0, 100)
    _bars(axes[2], [r.config for r in results], [r.pending_no_reason for r in results],
          "pods pending for no reason (a close set was free)")
    _finish(fig, axes, path)


def plot_fleet(path: Path, results: Sequence[FleetResult], preemption: bool = False) -> None:
    """Four panels; with ``preemption`` (high-priority pods), two more: evictions, wasted ones
    drawn over them, and the high-priority pods' mean wait."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [r.config for r in results]
    fig, axes = plt.subplots(6 if preemption else 4, 1, figsize=(_width(results), 21 if preemption else 14))
    _bars(axes[0], names, [100 * r.utilisation for r in results], "GPU utilisation (%)")
    axes[0].set_ylim(0, 100)
    _bars(axes[1], names, [r.avoidable_sys for r in results], "avoidable SYS grants")
    _bars(axes[2], names, [len(r.fragmentation_pending) for r in results], "pods pending (fragmentation)")
    _bars(axes[3], names, [len(r.no_reason_pending) for r in results],
          "pods pending for no reason (a close set was free)")
    if preemption:
        _bars(axes[4], names, [r.evictions for r in results],
              f"evictions by preemption (hatched: {WASTED})")
        axes[4].bar(range(len(names)), [r.wasted_evictions for r in results], fill=False, hatch="//")
        _bars(axes[5], names, [r.high_mean_wait for r in results], "high-priority pods' mean wait (steps)")
    _finish(fig, axes, path)


def _width(results: Sequence[object]) -> float:
    return max(8.0, 1.1 * len(results))


def _bars(axis, names: Sequence[str], values: Sequence[float], title: str) -> None:
    """Side by side, grouped by profile; one colour per SCHEDULER+PLUGIN pair in every group."""
    labels = [split_name(name) for name in names]
    pairs = list(dict.fromkeys(pair for _, pair in labels))
    colours = {pair: f"C{i}" for i, pair in enumerate(pairs)}
    axis.bar(range(len(names)), values, color=[colours[pair] for _, pair in labels])
    axis.set_xticks(range(len(names)), [f"{pair}\n{profile}" for profile, pair in labels], fontsize=8)
    for i in range(1, len(labels)):
        if labels[i][0] != labels[i - 1][0]:
            axis.axvline(i - 0.5, color="grey", linewidth=0.8)
    axis.set_title(title)


def _finish(fig, axes, path: Path) -> None:
    for axis in axes:
        bottom, top = axis.get_ylim()
        axis.set_ylim(0, max(top, 1))  # counts are never negative, even when all are zero
    fig.tight_layout()
    with atomic_write(path, binary=True) as out:
        fig.savefig(out, format="png", dpi=100)


def fragmentation_table(results: Sequence[FragmentationResult]) -> tuple[tuple[str, ...], list[tuple[object, ...]]]:
    """Small pods, then large ones: where the small pods went and how many large pods fit after them."""
    rows = [(*split_name(r.config), r.small_placed, len(r.nodes_with_small), r.large_placed, r.sys_grants,
             r.large_pending, r.fragmentation_pending) for r in results]
    header = ("profile", "configuration", "one-GPU placed", "nodes they took", "large placed", "SYS grants",
              "large pending", "pending (fragmentation)")
    return header, rows


def fragmentation_summary(results: Sequence[FragmentationResult]) -> str:
    return _table(*fragmentation_table(results))
