"""Readers the benches on the real control plane share: a process's CPU time, and histograms
and counters from a Prometheus text page (kube-scheduler's, kube-apiserver's, the extender's)."""

from __future__ import annotations

import os
import re
from pathlib import Path


def cpu_seconds(pid: int) -> float:
    """utime + stime of a process and its reaped children, from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = sum(int(v) for v in fields[11:15])
    return ticks / _CLOCK_TICKS


_CLOCK_TICKS = 100
try:
    _CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
except (ValueError, OSError, AttributeError):
    pass


def histogram(text: str, name: str, label: str) -> list[tuple[float, float]]:
    """(upper bound, cumulative count) of one histogram series in a Prometheus text page."""
    buckets: dict[float, float] = {}
    for line in text.splitlines():
        if line.startswith(f"{name}_bucket{{") and label in line:
            le = re.search(r'[{,]le="([^"]+)"', line).group(1)  # type: ignore[union-attr]
            bound = float("inf") if le == "+Inf" else float(le)
            buckets[bound] = buckets.get(bound, 0.0) + float(line.rsplit(" ", 1)[1])
    return sorted(buckets.items())


def sum_count(text: str, name: str, label: str = "") -> tuple[float, float]:
    """A histogram's _sum and _count, from a Prometheus text page."""
    total = {"sum": 0.0, "count": 0.0}
    for line in text.splitlines():
        for part in total:
            if line.startswith(f"{name}_{part}") and label in line:
                total[part] += float(line.rsplit(" ", 1)[1])
    return total["sum"], total["count"]


def mean(after: str, name: str, label: str = "", before: str = "") -> float | None:
    """A histogram's mean over what ``after`` counted beyond ``before``: exact, where a quantile
    is read from buckets."""
    (total, n), (total0, n0) = sum_count(after, name, label), sum_count(before, name, label)
    return (total - total0) / (n - n0) if n > n0 else None


def sums_by(text: str, name: str, label: str) -> dict[str, tuple[float, float]]:
    """A histogram's _sum and _count summed by the value of ``label``, from a Prometheus text page."""
    total, count = counts(text, f"{name}_sum", label), counts(text, f"{name}_count", label)
    return {value: (total.get(value, 0.0), n) for value, n in count.items()}


def counts(text: str, name: str, label: str) -> dict[str, float]:
    """A counter's samples summed by the value of ``label``, from a Prometheus text page."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        found = re.match(rf'{name}{{(?:.*,)?{label}="([^"]+)"', line)
        if found:
            out[found.group(1)] = out.get(found.group(1), 0.0) + float(line.rsplit(" ", 1)[1])
    return out


def minus(after: list[tuple[float, float]], before: list[tuple[float, float]]) -> list[tuple[float, float]]:
    earlier = dict(before)
    return [(bound, count - earlier.get(bound, 0.0)) for bound, count in after]


def quantile(buckets: list[tuple[float, float]], q: float) -> float | None:
    """The q-quantile, linear within its bucket (as PromQL's histogram_quantile)."""
    if not buckets or buckets[-1][1] <= 0:
        return None
    rank = q * buckets[-1][1]
    lower, below = 0.0, 0.0
    for bound, count in buckets:
        if count >= rank:
            if bound == float("inf"):
                return lower
            return lower + (bound - lower) * ((rank - below) / (count - below) if count > below else 0.0)
        lower, below = bound, count
    return lower
