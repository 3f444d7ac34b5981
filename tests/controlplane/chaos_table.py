"""The chaos matrix as docs/reliability.md shows it: its rows, and the table of measured figures
rendered from the rows a run wrote (chaos_rows.py, GPUPAIR_CHAOS_RESULTS). Pure: JSON in,
Markdown out. bench/chaos_table.py runs the matrix and writes the table into the page;
tests/docs/test_reliability_doc.py checks the page has a figure for every row."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

# Row id (the burst's name in test_chaos*.py) -> the fault as the table names it, in table order.
MATRIX: dict[str, str] = {
    "apiserver": "kube-apiserver SIGKILLed, restarted on the same etcd",
    "watches": "watches expire: etcd compacted past every resourceVersion, connections dropped",
    "etcd": "etcd stopped (SIGSTOP) 5 s with a bind in flight, then continued",
    "extender": "extender SIGKILLed between a Binding and its answer, restarted",
    "replica": "one of two extender replicas behind a round robin SIGKILLed between a Binding and its answer",
    "extender-down": "the extender down (both entries registered): CPU pods created meanwhile, restarted",
    "reporter": "a reporter SIGKILLed and restarted",
    "webhook": "the webhook down 10 s (failurePolicy Ignore)",
    "sigterm": "SIGTERM to the extender while a Binding waits on etcd",
    "reporter-sigterm": "SIGTERM to a reporter",
    "defrag": "extender SIGKILLed and restarted while a defrag plan holds a freed set",
    "dra-slices": "DRA: every pool republished at its next generation",
    "dra-claim": "DRA: a pod's claim deleted while the pod binds",
}
BEGIN, END = "<!-- chaos-table:begin -->", "<!-- chaos-table:end -->"
HEADER = ("| fault | pods placed | GPUs promised twice | SYS under required | fault lasted (s) "
          "| fault's end to next bind (s) | to last pod bound (s) | API lists / watches / writes until then "
          "| what an operator sees (this run) |")


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def row_line(row: Mapping[str, Any]) -> str:
    cells = [
        MATRIX[row["row"]],
        f"{row['placed']} of {row['pods']}",
        str(row["gpus_twice"]),
        str(row["sys"]),
        _seconds(row["fault_s"]),
        _seconds(row["next_bind_s"]),
        _seconds(row["all_placed_s"]),
        f"{row['lists']} / {row['watches']} / {row['writes']}",
        f"`{row['signal']}`: {row['signal_value']:g}",
    ]
    return "| " + " | ".join(cells) + " |"


def render(rows: Iterable[Mapping[str, Any]]) -> str:
    """The table, in MATRIX's order (the last run of a row wins)."""
    by_row = {row["row"]: row for row in rows}
    missing = [name for name in MATRIX if name not in by_row]
    if missing:
        raise ValueError(f"the run has no figures for {missing}")
    lines = [HEADER, "|" + "---|" * HEADER.count(" | ") + "---|"]
    lines += [row_line(by_row[name]) for name in MATRIX]
    return "\n".join(lines)


def replace_table(page: str, table: str) -> str:
    """``page`` with the text between its BEGIN and END markers replaced by ``table``."""
    head, found, rest = page.partition(BEGIN)
    _, found_end, tail = rest.partition(END)
    if not (found and found_end):
        raise ValueError(f"the page has no {BEGIN} ... {END} markers")
    return f"{head}{BEGIN}\n{table}\n{END}{tail}"


def table_rows(page: str) -> list[list[str]]:
    """The cells of each body row of the table between the markers."""
    _, _, rest = page.partition(BEGIN)
    body, _, _ = rest.partition(END)
    lines = [line for line in body.strip().splitlines() if line.startswith("|")][2:]
    return [[cell.strip() for cell in line.strip("|").split(" | ")] for line in lines]
