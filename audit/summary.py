"""The audit's closing table: samples, SYS count and PASS rate, per node and in total.

It answers the seed's question in its own terms (样本数 / SYS 次数 per setup): how many samples,
how many got a cross-socket SYS set, and how often the verdict was PASS. Pure: rows in, text out.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field

from gpupair.topology import links

from gpupair.audit.sample import FAIL_TIMEOUT, RESULTS, Sample

UNSCHEDULED = "(unscheduled)"
TOTAL = "all nodes"


@dataclass
class Tally:
    samples: int = 0
    results: Counter = field(default_factory=Counter)
    links: Counter = field(default_factory=Counter)  # link class -> samples, where one was read

    def add(self, sample: Sample) -> None:
        self.samples += 1
        self.results[sample.result] += 1
        if links.is_known(sample.topo):
            self.links[links.normalize(sample.topo)] += 1

    @property
    def sys_count(self) -> int:
        return self.links["SYS"]

    @property
    def passed(self) -> int:
        return self.results["PASS"]

    @property
    def pass_rate(self) -> float:
        return self.passed / self.samples if self.samples else 0.0


@dataclass
class AuditSummary:
    nodes: dict[str, Tally]
    total: Tally

    @property
    def all_passed(self) -> bool:
        return self.total.samples > 0 and self.total.passed == self.total.samples


def summarize(samples: Iterable[Sample]) -> AuditSummary:
    nodes: dict[str, Tally] = {}
    total = Tally()
    for sample in samples:
        nodes.setdefault(sample.node or UNSCHEDULED, Tally()).add(sample)
        total.add(sample)
    return AuditSummary(dict(sorted(nodes.items())), total)


def _link_mix(tally: Tally) -> str:
    if not tally.links:
        return "-"
    ordered = sorted(tally.links.items(), key=lambda item: links.distance(item[0]))
    return " ".join(f"{label}={count}" for label, count in ordered)


def format_summary(summary: AuditSummary) -> str:
    header = ("node", "samples", "SYS", *RESULTS, "PASS rate", "links")
    rows = [header]
    named = list(summary.nodes.items())
    if len(named) != 1:  # one node: its row is the total already
        named.append((TOTAL, summary.total))
    for name, tally in named:
        rows.append(
            (
                name,
                str(tally.samples),
                str(tally.sys_count),
                *(str(tally.results[result]) for result in RESULTS),
                f"{100 * tally.pass_rate:.1f}%",
                _link_mix(tally),
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    lines = []
    for row in rows:
        cells = [row[0].ljust(widths[0])]
        cells += [cell.rjust(width) for cell, width in zip(row[1:-1], widths[1:-1])]
        cells.append(row[-1])
        lines.append("  ".join(cells))
    return "\n".join(lines)


def verdict_line(summary: AuditSummary) -> str:
    """One sentence an operator can paste: the seed's conclusion line."""
    total = summary.total
    if total.samples == 0:
        return "no samples"
    failed = total.samples - total.passed
    timeouts = total.results[FAIL_TIMEOUT]
    text = (
        f"{total.samples} samples, {total.sys_count} SYS, {total.passed} PASS "
        f"({100 * total.pass_rate:.1f}%)"
    )
    if failed:
        text += f": {failed} failed"
        if timeouts:
            text += f" ({timeouts} timed out)"
    return text
