"""`gpupair simulate` as a user runs it: the real command, files it writes, what it prints."""

import json
import subprocess
import sys
from pathlib import Path

from gpupair.simulator.configs import Config
from gpupair.simulator.scenarios.fleet_scenario import FleetScenario, run_fleet
from gpupair.simulator.scenarios.seed_scenario import SeedScenario, run_seed_scenario
from gpupair.simulator.shapes import seed_layout


def simulate(*args, cwd):
    return subprocess.run(
        [sys.executable, "-m", "gpupair.command.cli", "simulate", "--no-progress", *args],
        capture_output=True, text=True, cwd=cwd, timeout=120,
    )


def test_default_scenario_writes_seed_tsv_and_gpupair_shows_no_sys(tmp_path):
    done = simulate("--output", str(tmp_path / "out.tsv"), "--verdicts", str(tmp_path / "v.jsonl"),
                    cwd=Path(__file__).parents[2])
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""  # the modelled extender's per-pod info logs stay out of a simulation
    rows = {tuple(line.split()[:2]): line.split()[2:] for line in done.stdout.splitlines()
            if len(line.split()) > 2 and line.split()[1] in ("kube+naive", "kube+aligned", "gpupair+aligned")}
    profiles = ("default", "gpu-binpack", "gpu-spread")
    pairs = ("kube+naive", "kube+aligned", "gpupair+aligned")
    assert set(rows) == {(profile, pair) for profile in profiles for pair in pairs}  # side by side
    for profile in profiles:
        assert rows[(profile, "gpupair+aligned")][:2] == ["40", "0"]  # 40 samples, no SYS
    tsv = (tmp_path / "out.gpu-binpack.gpupair+aligned.tsv").read_text().splitlines()
    assert tsv[0].split("\t") == ["round", "pod", "phase", "gpu_pair", "pci_pair", "numa_pair", "topo", "result"]
    assert len(tsv) == 41
    first = tsv[1].split("\t")
    assert first[0] == "01" and first[2] == "Succeeded" and first[7] == "PASS"
    verdicts = [json.loads(line) for line in (tmp_path / "v.jsonl").read_text().splitlines()]
    assert {"gpupair.io/granted", "gpupair.io/verdict", "gpupair.io/link"} <= set(verdicts[0]["annotations"])


def test_naive_plugin_reproduces_the_field_reports_sys_pairs():
    naive = run_seed_scenario(Config("kube", "naive"), seed_layout(), SeedScenario(), seed=1)
    aligned = run_seed_scenario(Config("kube", "aligned"), seed_layout(), SeedScenario(), seed=1)
    assert naive.sys_count > aligned.sys_count
    for sample in naive.granted:  # every SYS row is a FAIL row, as the seed classified them
        assert (sample.verdict.link == "SYS") == (sample.verdict.result == "FAIL")


def test_same_seed_same_results_different_seed_different_load():
    one = run_seed_scenario(Config("kube", "naive"), seed_layout(), SeedScenario(), seed=5)
    two = run_seed_scenario(Config("kube", "naive"), seed_layout(), SeedScenario(), seed=5)
    three = run_seed_scenario(Config("kube", "naive"), seed_layout(), SeedScenario(), seed=6)
    rows = lambda r: [s.tsv_row() for s in r.samples]
    assert rows(one) == rows(two)
    assert rows(one) != rows(three)


def test_fleet_gpupair_never_grants_an_avoidable_sys_set():
    scenario = FleetScenario(nodes=16, steps=120, arrivals_per_step=2.0)
    gpupair = run_fleet(Config("gpupair", "aligned"), seed_layout(), scenario, seed=3)
    default = run_fleet(Config("kube", "naive"), seed_layout(), scenario, seed=3)
    assert gpupair.granted > 100 and default.granted > 100
    assert gpupair.avoidable_sys == 0
    assert default.avoidable_sys > 0


def test_fleet_command_draws_a_plot(tmp_path):
    done = simulate("--scenario", "fleet", "--nodes", "8", "--steps", "40", "--plot", str(tmp_path / "f.png"),
                    cwd=Path(__file__).parents[2])
    assert done.returncode == 0, done.stderr
    assert "avoidable SYS" in done.stdout
    assert (tmp_path / "f.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_bad_topology_file_is_a_clear_error(tmp_path):
    bad = tmp_path / "topo.txt"
    bad.write_text("this is not nvidia-smi output\n")
    done = simulate("--topology-file", str(bad), cwd=Path(__file__).parents[2])
    assert done.returncode == 2
    assert "gpupair simulate: error: " in done.stderr and "no nvidia-smi topo -m matrix" in done.stderr


def test_simulated_extender_reserves_the_pair_it_promised_until_a_report_shows_it_taken():
    import random

    from gpupair.decide.devices.policies import POLICIES
    from gpupair.simulator.cluster import Cluster
    from gpupair.simulator.models.kube_scoring import PROFILES, PodRequest
    from gpupair.simulator.models.schedulers import GpupairExtender, KubeScheduler

    cluster = Cluster.of({"only": seed_layout()})
    node = cluster.nodes["only"]
    for device in (2, 3, 5, 6, 7):  # free: GPU0, GPU1 (one same-NUMA pair) and GPU4
        node.bound[f"bg-{device}"] = PodRequest(1)
        node.allocated[f"bg-{device}"] = (device,)
    cluster.report_all()
    scheduler, rng = KubeScheduler(PROFILES["default"], GpupairExtender()), random.Random(0)
    assert scheduler.schedule("a", PodRequest(2), cluster, rng) == "only"
    cluster.bind("a", PodRequest(2), "only")
    assert scheduler.schedule("b", PodRequest(1), cluster, rng) == "only"  # 1 GPU still fits
    assert scheduler.schedule("c", PodRequest(2), cluster, rng) is None  # the pair is promised to "a"
    assert cluster.allocate("a", "only", POLICIES["aligned"]) == (0, 1)
    cluster.report_all()
    scheduler.reported(cluster)
    assert scheduler.extender.reservations.get("a") is None  # the report shows GPU0 and GPU1 taken


def test_seed_command_with_cpu_requests_one_profile_and_a_plot(tmp_path):
    done = simulate("--scheduler-profile", "gpu-binpack", "--cpu-per-gpu", "3", "--memory-per-gpu", "16",
                    "--output", str(tmp_path / "out.tsv"), "--plot", str(tmp_path / "s.png"),
                    cwd=Path(__file__).parents[2])
    assert done.returncode == 0, done.stderr
    assert "pods request 3 CPU and 16Gi per GPU" in done.stdout
    assert sorted(p.name for p in tmp_path.glob("out.*.tsv")) == [
        "out.gpu-binpack.gpupair+aligned.tsv", "out.gpu-binpack.kube+aligned.tsv", "out.gpu-binpack.kube+naive.tsv",
        "out.summary.tsv"]
    assert (tmp_path / "s.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_pods_requests_change_where_the_default_profile_puts_them():
    # No requests: every pod counts as 100m/200Mi, so ties by pod count go to the first node.
    # With CPU per GPU the default profile spreads by CPU, hence by GPUs, as gpu-spread does.
    def nodes_used(per_gpu):
        result = run_seed_scenario(Config("kube", "aligned"), seed_layout(),
                                   SeedScenario(per_gpu=per_gpu), seed=1)
        return {s.node for s in result.granted}

    from gpupair.simulator.models.kube_scoring import PerGpu

    assert len(nodes_used(PerGpu())) < len(nodes_used(PerGpu(milli_cpu=4000)))


def test_unknown_profile_or_negative_request_is_a_clear_error():
    root = Path(__file__).parents[2]
    for args, says in ((("--scheduler-profile", "binpack"), "scheduler profile 'binpack'"),
                       (("--cpu-per-gpu", "-1"), "--cpu-per-gpu: must be between 0 and 1024, got -1"),
                       (("--configs", "default+naive,spread+aligned"), "configuration 'spread+aligned'")):
        done = simulate(*args, cwd=root)
        assert done.returncode == 2
        assert says in done.stderr


def test_a_fleet_run_leaves_the_seed_runs_summary_beside_its_own(tmp_path):
    out = str(tmp_path / "out.tsv")
    seed = simulate("--runs", "1", "--rounds", "2", "--scheduler-profile", "default", "--output", out,
                    cwd=Path(__file__).parents[2])
    assert seed.returncode == 0, seed.stderr
    seed_summary = (tmp_path / "out.summary.tsv").read_text()
    fleet = simulate("--scenario", "fleet", "--nodes", "4", "--steps", "10", "--scheduler-profile", "default",
                     "--output", out, cwd=Path(__file__).parents[2])
    assert fleet.returncode == 0, fleet.stderr
    assert (tmp_path / "out.summary.tsv").read_text() == seed_summary
    assert (tmp_path / "out.fleet.summary.tsv").read_text().startswith("profile\tconfiguration\tpods placed")
    assert f"TSV: {tmp_path / 'out.fleet.summary.tsv'}" in fleet.stdout
