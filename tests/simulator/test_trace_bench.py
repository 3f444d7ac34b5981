"""bench/trace.py --floor (gpupair#44 item 3) on slices of Alibaba's trace: one table a workload,
FGD's published figure or, for a workload of our own, FGD replayed, and which workloads pass."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[2]
TRACE = ROOT / "tests" / "fixtures" / "trace"
OPENB = ROOT / "bench" / "openb"


@pytest.fixture(scope="module")
def sliced(tmp_path_factory):
    """Every eighth node, and every eighth pod of multigpu50 (which FGD published) and of our
    pinned workload (which it did not)."""
    folder = tmp_path_factory.mktemp("floor")
    for source in (TRACE / "openb_node_list_gpu_node.csv", TRACE / "openb_pod_list_multigpu50.csv",
                   OPENB / "openb_pod_list_pinned.csv"):
        lines = source.read_text().splitlines()
        (folder / source.name).write_text("\n".join([lines[0], *lines[1::8]]) + "\n")
    return folder


def bench(*args):
    return subprocess.run([sys.executable, str(ROOT / "bench" / "trace.py"), *args],
                          capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def floor_run(sliced, tmp_path_factory):
    """One --floor run over the slices, seeds 1-2, both scores: its output and its runs' JSON."""
    folder = tmp_path_factory.mktemp("floor-run")
    done = bench("--floor", "--fixtures", str(sliced), "--openb", str(folder), "--seeds", "1-2",
                 "--goal-scores", "shipped,whole-gpus", "--workers", "1", "--json", str(folder / "runs.json"))
    assert done.returncode == 0, done.stderr
    return done.stdout, json.loads((folder / "runs.json").read_text())


def test_floor_prints_a_table_a_workload_and_which_pass(floor_run):
    out, runs = floor_run
    assert out.index("### multigpu50") < out.index("### pinned")  # FGD's workloads first, then ours
    tables = {section.split("\n", 1)[0]: section for section in out.split("### ")[1:]}
    assert "FGD published @100 / @130" in tables["multigpu50"]
    assert "FGD replayed @100 / @130" in tables["pinned"]
    for name in ("multigpu50", "pinned"):
        rows = [line for line in tables[name].splitlines() if line.startswith("| alone") or line.startswith("| +")]
        assert [row.split(" | ")[0] for row in rows] == [
            "| alone", "| + gpupair (shipped)", "| + gpupair-whole-gpus (whole-gpus)"]
        assert rows[0].split(" | ")[4] == "-"  # no gap to itself
        assert all(" @" in row.split(" | ")[4] for row in rows[1:])  # the worst gap and where
    summary = tables["Which workloads pass (2 workloads)"]
    assert summary.count("- gpupair (shipped), ") == 4 and summary.count("- gpupair-whole-gpus (whole-gpus), ") == 4
    # per workload: kube-default alone and with each score, two seeds; FGD replayed on pinned only
    assert len(runs) == 2 * 3 * 2 + 2
    assert sum(r["policy"] == "FGD" for r in runs) == 2 and {r["trace"] for r in runs if r["policy"] == "FGD"} == {
        "pinned"}
    assert all(set(map(int, r["allocation"])) >= set(range(50, 131)) for r in runs)


def test_the_gap_carries_its_standard_error_where_both_sides_ran_the_same_seeds(floor_run):
    """FGD replayed on ``pinned`` ran seeds 1-2 as gpupair did: its gap shows the standard error
    of the per-seed gaps. FGD's published seeds are 42-51, not 1-2: no pairs, no error shown."""
    out, runs = floor_run
    tables = {section.split("\n", 1)[0]: section for section in out.split("### ")[1:]}
    pinned = {(r["policy"], r["gpupair"], r["score"]): {} for r in runs if r["trace"] == "pinned"}
    for r in runs:
        if r["trace"] == "pinned":
            pinned[r["policy"], r["gpupair"], r["score"]][r["seed"]] = r["allocation"]
    for name, row_start, expect_error in (("pinned", "| + gpupair", True), ("multigpu50", "| + gpupair", False)):
        row = next(line for line in tables[name].splitlines() if line.startswith(row_start))
        gaps = row.split(" | ")[3].split("(")[1].rstrip(")").split(" / ")
        assert all(("±" in gap) == expect_error for gap in gaps), row
    row = next(line for line in tables["pinned"].splitlines() if line.startswith("| + gpupair"))
    shown = [float(gap.split("± ")[1]) for gap in row.split(" | ")[3].split("(")[1].rstrip(")").split(" / ")]
    for point, error in zip(("100", "130"), shown):
        a, b = (pinned["kube-default", True, "shipped"][s][point] - pinned["FGD", False, None][s][point] for s in (1, 2))
        assert error == pytest.approx(abs(a - b) / 2, abs=0.006)  # two seeds: sd |a-b|/sqrt(2), over sqrt(2)


def test_another_fleet_is_measured_against_fgd_replayed_on_it(sliced, tmp_path):
    """FGD published the openb fleet only: on a node list of another shape (--nodes) every
    workload's FGD is replayed over the same seeds, the published figures never read."""
    lines = (sliced / "openb_node_list_gpu_node.csv").read_text().splitlines()
    fleet = tmp_path / "fleet.csv"
    fleet.write_text("\n".join([lines[0], *[line.replace(",8,", ",4,") for line in lines[1:]]]) + "\n")
    done = bench("--floor", "--fixtures", str(sliced), "--openb", str(tmp_path), "--nodes", str(fleet),
                 "--traces", "multigpu50", "--seeds", "1", "--workers", "1", "--json", str(tmp_path / "runs.json"))
    assert done.returncode == 0, done.stderr
    assert "FGD replayed @100 / @130" in done.stdout and "FGD published" not in done.stdout
    runs = json.loads((tmp_path / "runs.json").read_text())
    assert sorted(r["policy"] for r in runs) == ["FGD", "kube-default", "kube-default"]


@pytest.mark.parametrize("args, expected", [
    (("--traces", "nope"), "--traces: no pod list for nope"),
    (("--goal-scores", "magic"), "--goal-scores: unknown magic"),
    (("--goal-policies", "tetris"), "--goal-policies: unknown policy 'tetris'"),
    (("--published", "/nonexistent.csv"), "cannot read FGD's result file"),
    (("--nodes", "/nonexistent.csv"), "/nonexistent.csv: cannot read"),
])
def test_bad_input_is_one_line_and_exit_2(sliced, args, expected):
    done = bench("--floor", "--fixtures", str(sliced), "--traces", "pinned", *args)
    assert done.returncode == 2
    assert len(done.stderr.strip().splitlines()) == 1 and expected in done.stderr


def test_ctrl_c_is_one_line_exit_130_and_no_worker_left(sliced, tmp_path):
    """Ctrl-C reaches the whole foreground group (the bench and its workers): one line, 130.
    Started with SIGINT at its default, as a terminal starts it, whatever this runner ignores."""
    done = subprocess.Popen([sys.executable, str(ROOT / "bench" / "trace.py"), "--floor", "--fixtures", str(sliced),
                             "--openb", str(tmp_path), "--seeds", "1-40", "--workers", "2"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    assert done.stdout.readline().startswith("## The floor")  # the workers are at it
    os.killpg(done.pid, signal.SIGINT)
    _, err = done.communicate(timeout=60)
    assert done.returncode == 130 and err == "trace.py: interrupted\n", err
    for _ in range(50):  # the group is gone: no worker left behind
        try:
            os.killpg(done.pid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.1)
    else:
        pytest.fail("a process of the bench's group outlived it")
