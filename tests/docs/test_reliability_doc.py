"""docs/reliability.md's table of the chaos matrix: a row of measured figures for every fault
the chaos tests inject, and none for a fault they do not (tests/controlplane/chaos_table.py
renders it from a run; bench/chaos_table.py writes it into the page)."""

from __future__ import annotations

import re

from tests.controlplane.chaos_table import BEGIN, END, MATRIX, render, replace_table, table_rows
from tests.docs.test_doc_links import REPO

PAGE = REPO / "docs" / "reliability.md"
BURST_NAME = re.compile(r'\.burst\(\s*"([\w-]+)"')


def test_the_chaos_tests_and_the_matrix_name_the_same_rows():
    tests = sorted((REPO / "tests" / "controlplane").glob("test_chaos*.py"))
    named = {name for path in tests for name in BURST_NAME.findall(path.read_text(encoding="utf-8"))}
    assert named == set(MATRIX), f"rows only in the tests: {named - set(MATRIX)}; only in the matrix: {set(MATRIX) - named}"


def test_the_page_has_measured_figures_for_every_row():
    rows = table_rows(PAGE.read_text(encoding="utf-8"))
    assert [cells[0] for cells in rows] == list(MATRIX.values()), "run bench/chaos_table.py --write"
    for cells in rows:
        assert len(cells) == 9 and all(cells), cells
        placed, promised_twice, sys_pairs = cells[1:4]
        assert re.fullmatch(r"\d+ of \d+", placed) and promised_twice == "0" and sys_pairs == "0", cells


def sample_row(name: str) -> dict:
    return {"row": name, "pods": 40, "placed": 40, "waiting": 0, "gpus_twice": 0, "sys": 0, "fault_s": 3.0,
            "next_bind_s": 0.5, "all_placed_s": None, "lists": 12, "node_lists": 1, "watches": 4, "writes": 90,
            "bindings": 30, "signal": "gpupair_extender_watch_restarts_total", "signal_value": 2.0}


def test_a_run_renders_into_the_page_between_its_markers():
    page = f"# title\n\ntext\n\n{BEGIN}\nold table\n{END}\n\nmore text\n"
    written = replace_table(page, render([sample_row(name) for name in MATRIX]))
    assert written.startswith("# title\n\ntext\n\n") and written.endswith("\n\nmore text\n")
    rows = table_rows(written)
    assert [cells[0] for cells in rows] == list(MATRIX.values())
    assert rows[0][4:8] == ["3.00", "0.50", "-", "12 / 4 / 90"]
