"""docs/ say what is true now; the measurement diary lives in bench/RESULTS.md.

A page under docs/ quotes the current figure and the bench command that produced it. Dated
measurement sets ("(2026-12-03, later)"), their labels ("set n", "sets e-g") and tables of sets
(a first column headed `set`) belong in bench/RESULTS.md, newest first, where a reader looking
for the product's behaviour never wades through them. Text in code blocks and code spans is left
alone: a log line or a command's output may carry a timestamp."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.docs.test_doc_links import REPO, prose

DOCS = REPO / "docs"
NOT_YET: set[str] = set()  # pages not yet held to this check (none: every page under docs/ is)
# Dates that are facts about the world, not the day a measurement was taken: page -> {date: why}.
ALLOWED_DATES = {
    "field-report.md": {"2026-07-29": "the day the public write-up gpupair started from was posted"},
}

ISO_DATE = re.compile(r"\b(?:19|20)\d\d-[01]\d-[0-3]\d\b")
# A set's label, as the diary named them: "set n", "(set o)", "sets e-g", "sets e-g and l",
# "set l above". Plain English ("it sets a default") is not a label: a label is followed by
# punctuation, a range, or a word that points at another set.
SET_LABEL = re.compile(
    r"\bsets? [a-o](?:-[a-o]\b|(?=\s*[),;:.]|\s+(?:and|or|above|below|before|after)\b))",
    re.I,
)
SET_TABLE = re.compile(r"^\|\s*set\b[^|]*\|", re.I | re.M)
DIARY_HEADING = re.compile(r"^#{1,6} .*\b(?:evening|morning|afternoon|quiet hour|busy hour|later\))", re.I | re.M)
CURRENT_FIGURES = re.compile(r"^#{1,6} Current figures\s*$", re.M)
BENCH_COMMAND = re.compile(r"`[^`]*bench/\w+\.py[^`]*`")


def diary_lines(text: str, allowed_dates: dict[str, str] | None = None) -> list[str]:
    """Each line of ``text`` (outside code) that reads as a measurement diary, with why."""
    allowed_dates = allowed_dates or {}
    found = []
    for number, line in enumerate(prose(text).splitlines(), 1):
        why = [f"date {d}" for d in ISO_DATE.findall(line) if d not in allowed_dates]
        why += [f"set label {m.group(0)!r}" for m in SET_LABEL.finditer(line)]
        why += ["a table of measurement sets"] if SET_TABLE.match(line) else []
        why += ["a dated heading"] if DIARY_HEADING.match(line) else []
        found += [f"{number}: {', '.join(why)}: {line.strip()[:100]}"] if why else []
    return found


def pages() -> list[Path]:
    return [p for p in sorted(DOCS.glob("*.md")) if p.name not in NOT_YET]


@pytest.mark.parametrize("path", pages(), ids=lambda p: p.name)
def test_docs_carry_no_measurement_diary(path):
    found = diary_lines(path.read_text(encoding="utf-8"), ALLOWED_DATES.get(path.name))
    assert found == [], f"move dated sets to bench/RESULTS.md and quote the current figure: {path.name}: {found}"


@pytest.mark.parametrize("path", pages(), ids=lambda p: p.name)
def test_current_figures_name_their_bench_command(path):
    text = prose(path.read_text(encoding="utf-8"), spans=False)
    for m in CURRENT_FIGURES.finditer(text):
        section = re.split(r"^#{1,6} ", text[m.end():], maxsplit=1, flags=re.M)[0]
        assert BENCH_COMMAND.search(section), f"{path.name}: a 'Current figures' section must say which bench command produced it"


def test_the_extender_page_quotes_current_figures():
    assert CURRENT_FIGURES.search((DOCS / "extender.md").read_text(encoding="utf-8"))


def test_bench_results_exist_for_the_sets_docs_left():
    text = (REPO / "bench" / "RESULTS.md").read_text(encoding="utf-8")
    assert text.startswith("# Bench results")
    dates = [m.group(0) for m in re.finditer(r"^## (\d{4}-\d\d-\d\d)", text, re.M)]
    assert dates and dates == sorted(dates, reverse=True), "bench/RESULTS.md is newest first"


# ---- the checker itself


@pytest.mark.parametrize("line", [
    "#### A quiet hour and a busy one (2026-12-03, later)",
    "After that change, four sets of interleaved runs (2026-12-02, three runs each):",
    "It is 0.23 ms when the floor adds 0.9 ms per pod (set n), and 0.6-0.9 ms in the busy hour.",
    "- **Filter and prioritize answering at once, a third time** (sets e-g and l above), now run",
    "Three sets of six on the tree as it stands (j, k, m), and set l below.",
    "| set | floor over alone | gpupair over the floor |",
    "#### Fourteen rounds, and three ideas that did not help (this evening)",
])
def test_a_diary_line_is_caught(line):
    assert diary_lines(f"# Page\n\n{line}\n") != []


@pytest.mark.parametrize("line", [
    "A namespace sets a default for its pods with the label `gpupair.io/placement`.",
    "`--default-placement` sets the cluster's; it sets a floor, and sets no limit.",
    "- **Without an extender**, a tie goes to the first node in node order. `--seed` sets a",
    "The stale reason names both: `gpupair reporter last seen 2026-11-30T07:29:55Z`.",
    "| what | figure | bench command |",
    "Measured in a set of six runs (`bench/real_scheduler.py`).",
])
def test_ordinary_prose_and_code_pass(line):
    assert diary_lines(f"# Page\n\n{line}\n\n```json\n{{\"ts\":\"2026-11-30T07:51:44.103Z\"}}\n```\n") == []


def test_an_allowed_date_is_allowed_only_where_named():
    text = "# Page\n\ngpupair started from one public write-up (posted 2026-07-29).\n"
    assert diary_lines(text, ALLOWED_DATES["field-report.md"]) == []
    assert diary_lines(text) != []
