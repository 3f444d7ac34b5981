"""`gpupair simulate` as a user runs it: the real command, files it writes, what it prints."""

import json
import subprocess
import sys
from pathlib import Path

from simulator.configs import Config
from simulator.fleet import FleetScenario, run_fleet
from simulator.seed_scenario import SeedScenario, run_seed_scenario
from simulator.shapes import seed_layout


def simulate(*args, cwd):
    return subprocess.run(
        [sys.executable, "-m", "gpupair.cli", "simulate", "--no-progress", *args],
        capture_output=True, text=True, cwd=cwd, timeout=120,
    )


def test_default_scenario_writes_seed_tsv_and_gpupair_shows_no_sys(tmp_path):
    done = simulate("--output", str(tmp_path / "out.tsv"), "--verdicts", str(tmp_path / "v.jsonl"),
                    cwd=Path(__file__).parents[1])
    assert done.returncode == 0, done.stderr
    rows = {line.split()[0]: line.split() for line in done.stdout.splitlines() if "+" in line.split()[0]}
    assert set(rows) == {"default+naive", "default+aligned", "gpupair+aligned"}
    assert rows["gpupair+aligned"][1:3] == ["40", "0"]  # 40 samples, no SYS
    tsv = (tmp_path / "out.gpupair+aligned.tsv").read_text().splitlines()
    assert tsv[0].split("\t") == ["round", "pod", "phase", "gpu_pair", "pci_pair", "numa_pair", "topo", "result"]
    assert len(tsv) == 41
    first = tsv[1].split("\t")
    assert first[0] == "01" and first[2] == "Succeeded" and first[7] == "PASS"
    verdicts = [json.loads(line) for line in (tmp_path / "v.jsonl").read_text().splitlines()]
    assert {"gpupair.io/granted", "gpupair.io/verdict", "gpupair.io/link"} <= set(verdicts[0]["annotations"])


def test_naive_plugin_reproduces_the_field_reports_sys_pairs():
    naive = run_seed_scenario(Config("default", "naive"), seed_layout(), SeedScenario(), seed=1)
    aligned = run_seed_scenario(Config("default", "aligned"), seed_layout(), SeedScenario(), seed=1)
    assert naive.sys_count > 0
    assert aligned.sys_count == 0
    for sample in naive.granted:  # every SYS row is a FAIL row, as the seed classified them
        assert (sample.verdict.link == "SYS") == (sample.verdict.result == "FAIL")


def test_same_seed_same_results_different_seed_different_load():
    one = run_seed_scenario(Config("default", "naive"), seed_layout(), SeedScenario(), seed=5)
    two = run_seed_scenario(Config("default", "naive"), seed_layout(), SeedScenario(), seed=5)
    three = run_seed_scenario(Config("default", "naive"), seed_layout(), SeedScenario(), seed=6)
    rows = lambda r: [s.tsv_row() for s in r.samples]
    assert rows(one) == rows(two)
    assert rows(one) != rows(three)


def test_fleet_gpupair_never_grants_an_avoidable_sys_set():
    scenario = FleetScenario(nodes=16, steps=120, arrivals_per_step=2.0)
    gpupair = run_fleet(Config("gpupair", "aligned"), seed_layout(), scenario, seed=3)
    default = run_fleet(Config("default", "naive"), seed_layout(), scenario, seed=3)
    assert gpupair.granted > 100 and default.granted > 100
    assert gpupair.avoidable_sys == 0
    assert default.avoidable_sys > 0


def test_fleet_command_draws_a_plot(tmp_path):
    done = simulate("--scenario", "fleet", "--nodes", "8", "--steps", "40", "--plot", str(tmp_path / "f.png"),
                    cwd=Path(__file__).parents[1])
    assert done.returncode == 0, done.stderr
    assert "avoidable SYS" in done.stdout
    assert (tmp_path / "f.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_bad_topology_file_is_a_clear_error(tmp_path):
    bad = tmp_path / "topo.txt"
    bad.write_text("this is not nvidia-smi output\n")
    done = simulate("--topology", str(bad), cwd=Path(__file__).parents[1])
    assert done.returncode == 2
    assert "gpupair simulate:" in done.stderr


def test_simulated_extender_reserves_the_pair_it_promised_until_a_report_shows_it_taken():
    import random

    from gpupair.policies import POLICIES
    from simulator.cluster import Cluster
    from simulator.schedulers import GpupairScheduler

    cluster = Cluster.of({"only": seed_layout()})
    node = cluster.nodes["only"]
    for device in (2, 3, 5, 6, 7):  # free: GPU0, GPU1 (one same-NUMA pair) and GPU4
        node.bound[f"bg-{device}"] = 1
        node.allocated[f"bg-{device}"] = (device,)
    cluster.report_all()
    scheduler, rng = GpupairScheduler(), random.Random(0)
    assert scheduler.schedule("a", 2, cluster, rng) == "only"
    cluster.bind("a", 2, "only")
    assert scheduler.schedule("b", 1, cluster, rng) == "only"  # 1 GPU still fits
    assert scheduler.schedule("c", 2, cluster, rng) is None  # the pair is promised to "a"
    assert cluster.allocate("a", "only", POLICIES["aligned"]) == (0, 1)
    cluster.report_all()
    scheduler.reported(cluster)
    assert scheduler.reservations.get("a") is None  # the report shows GPU0 and GPU1 taken
