"""What `gpupair simulate` writes: the seed's TSV, summary tables, verdict annotations, a plot."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from gpupair.verdict import TSV_HEADER
from simulator.fleet import FleetResult
from simulator.seed_scenario import ConfigResult


def write_tsv(path: Path, results: Sequence[ConfigResult]) -> list[Path]:
    """One TSV per configuration, in the seed's columns: ``<stem>.<config>.tsv``."""
    written = []
    for result in results:
        target = path.with_name(f"{path.stem}.{result.config}{path.suffix or '.tsv'}")
        target.parent.mkdir(parents=True, exist_ok=True)
        lines = ["\t".join(TSV_HEADER)] + [sample.tsv_row() for sample in result.samples]
        target.write_text("\n".join(lines) + "\n", encoding="utf-8")
        written.append(target)
    return written


def write_verdicts(path: Path, results: Sequence[ConfigResult]) -> None:
    """Per pod, the annotations gpupair's verifier would set on it (JSON lines)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as out:
        for result in results:
            for sample in result.granted:
                entry = {"config": result.config, "pod": sample.pod, "node": sample.node}
                entry["annotations"] = sample.verdict.annotations()
                out.write(json.dumps(entry, sort_keys=True) + "\n")


def _table(header: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    cells = [list(map(str, header))] + [[str(c) for c in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(header))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def seed_summary(results: Sequence[ConfigResult]) -> str:
    rows = []
    for r in results:
        granted = len(r.granted)
        rate = f"{100 * r.pass_count / granted:.1f}%" if granted else "-"
        rows.append((r.config, granted, r.sys_count, rate, r.pending))
    return _table(("configuration", "samples", "SYS", "PASS rate", "pending"), rows)


def fleet_summary(results: Sequence[FleetResult]) -> str:
    rows = [
        (
            r.config,
            r.granted,
            f"{100 * r.utilisation:.1f}%",
            r.sys_grants,
            r.avoidable_sys,
            len(r.fragmentation_pending),
            r.still_pending,
            f"{r.mean_wait:.2f}",
        )
        for r in results
    ]
    header = (
        "configuration",
        "pods placed",
        "GPU util",
        "SYS grants",
        "avoidable SYS",
        "pending (fragmentation)",
        "pending at end",
        "mean wait (steps)",
    )
    return _table(header, rows)


def plot_seed(path: Path, results: Sequence[ConfigResult]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [r.config for r in results]
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    axes[0].bar(names, [r.sys_count for r in results], color="tab:red")
    axes[0].set_title("SYS grants")
    rates = [100 * r.pass_count / len(r.granted) if r.granted else 0 for r in results]
    axes[1].bar(names, rates, color="tab:green")
    axes[1].set_title("PASS rate (%)")
    axes[1].set_ylim(0, 100)
    _finish(fig, axes, path)


def plot_fleet(path: Path, results: Sequence[FleetResult]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [r.config for r in results]
    fig, axes = plt.subplots(1, 3, figsize=(14, 4))
    axes[0].bar(names, [100 * r.utilisation for r in results], color="tab:blue")
    axes[0].set_title("GPU utilisation (%)")
    axes[0].set_ylim(0, 100)
    axes[1].bar(names, [r.avoidable_sys for r in results], color="tab:red")
    axes[1].set_title("avoidable SYS grants")
    axes[2].bar(names, [len(r.fragmentation_pending) for r in results], color="tab:orange")
    axes[2].set_title("pods pending (fragmentation)")
    _finish(fig, axes, path)


def _finish(fig, axes, path: Path) -> None:
    for axis in axes:
        axis.tick_params(axis="x", labelrotation=15)
        bottom, top = axis.get_ylim()
        axis.set_ylim(0, max(top, 1))  # counts are never negative, even when all are zero
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
