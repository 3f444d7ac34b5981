"""`gpupair simulate` with NICs: pods that ask for the network, on the lopsided board and on a
recorded `topo -m` with NIC columns, against kube-scheduler alone and gpupair without the ask."""

import subprocess
import sys
from pathlib import Path

import pytest

from gpupair.simulator.configs import Config
from gpupair.simulator.scenarios.fleet_scenario import FleetScenario, arrivals, run_fleet
from gpupair.simulator.network import gdr_capable, servable
from gpupair.simulator.scenarios.seed_scenario import SeedScenario, run_seed_scenario
from gpupair.simulator.shapes import LOPSIDED_NIC, lopsided_nics, seed_layout

ROOT = Path(__file__).parents[2]
LAYOUT = seed_layout()
NICS = lopsided_nics(LAYOUT)
SEED = SeedScenario(runs=1, rounds=6, pods_per_round=3, nics=NICS, nic_share=1.0)


def simulate(*args):
    return subprocess.run([sys.executable, "-m", "gpupair.command.cli", "simulate", "--no-progress", *args],
                          capture_output=True, text=True, cwd=ROOT, timeout=120)


def test_the_lopsided_board_is_the_issues_rtx_4090_shape():
    assert [nic.name for nic in NICS.nics] == [LOPSIDED_NIC] == ["mlx5_bond_0"]
    assert [row[0] for row in NICS.links] == ["PIX"] * 4 + ["SYS"] * 4
    assert gdr_capable(NICS, (2, 3)) and not gdr_capable(NICS, (4, 5)) and not gdr_capable(NICS, (3, 4))
    assert not gdr_capable(None, (0, 1))  # NICs unknown: never counted as GDR-capable
    assert [servable(LAYOUT, NICS, "PXB", k) for k in (1, 2, 4, 8)] == [True, True, True, False]


def test_seed_gpupair_with_the_ask_grants_only_sets_near_the_nic():
    results = {pair: run_seed_scenario(Config.parse(pair), LAYOUT, SEED, seed=1)
               for pair in ("kube+aligned", "gpupair-nonic+aligned", "gpupair+aligned")}
    asked = results["gpupair+aligned"]
    granted = [s for s in asked.network if s.verdict is not None]
    assert len(asked.network) == 18 and granted
    for sample in granted:  # GPU0-3 only, and the verdict names the NIC
        assert sample.gdr and sample.verdict.nic_link == "PIX" and "mlx5_bond_0=PIX" in sample.verdict.nic
        assert all(int(g[3:]) < 4 for g in sample.verdict.granted.split("+"))
    assert asked.pending_no_reason == 0  # what waited had no GPU0-3 pair the plugin would take
    for blind in ("kube+aligned", "gpupair-nonic+aligned"):  # they ignore the ask: some pairs land on GPU4-7
        assert 0 < sum(s.gdr for s in results[blind].network) < len(results[blind].network)


def test_no_network_share_leaves_the_seed_as_it_was():
    plain = run_seed_scenario(Config("gpupair", "aligned"), LAYOUT, SeedScenario(runs=1, rounds=6), seed=3)
    with_nics = run_seed_scenario(Config("gpupair", "aligned"), LAYOUT,
                                  SeedScenario(runs=1, rounds=6, nics=NICS), seed=3)
    assert [s.tsv_row() for s in plain.samples] == [s.tsv_row() for s in with_nics.samples]
    assert not with_nics.network


def test_fleet_network_pods_are_drawn_apart_and_gpupair_grants_them_gdr():
    scenario = FleetScenario(nodes=8, steps=80, arrivals_per_step=1.5, nics=NICS, nic_share=0.5)
    stream = arrivals(scenario, seed=2, layout=LAYOUT)
    plain = arrivals(FleetScenario(nodes=8, steps=80, arrivals_per_step=1.5), seed=2, layout=LAYOUT)
    assert [(a.pod, a.gpus, a.duration) for a in stream] == [(a.pod, a.gpus, a.duration) for a in plain]
    assert any(a.network for a in stream) and not any(a.network and a.gpus == 8 for a in stream)
    asked = run_fleet(Config("gpupair", "aligned"), LAYOUT, scenario, seed=2)
    blind = run_fleet(Config("kube", "aligned"), LAYOUT, scenario, seed=2)
    assert asked.network_granted > 30 and asked.network_gdr == asked.network_granted
    assert blind.network_gdr < blind.network_granted
    assert not asked.network_no_reason


def test_command_prints_the_network_table_with_the_baselines(tmp_path):
    done = simulate("--nics", "lopsided", "--nic-share", "0.5", "--scheduler-profile", "default", "--runs", "1",
                    "--output", str(tmp_path / "out.tsv"))
    assert done.returncode == 0, done.stderr
    assert "GPU0=PIX GPU1=PIX GPU2=PIX GPU3=PIX GPU4=SYS" in done.stdout
    rows = (tmp_path / "out.nic.tsv").read_text().splitlines()
    assert rows[0].split("\t")[2:6] == ["network pods", "granted", "GDR-capable", "GDR rate"]
    table = {row.split("\t")[1]: row.split("\t") for row in rows[1:]}
    assert list(table) == ["kube+naive", "kube+aligned", "gpupair-nonic+aligned", "gpupair+aligned"]
    assert table["gpupair+aligned"][5] == "100.0%"
    assert table["kube+aligned"][5] != "100.0%"


def test_command_reads_the_nic_columns_of_a_topology_file(tmp_path):
    done = simulate("--topology-file", "tests/fixtures/topo/go-gpuallocator-17-8x4090-sys.txt", "--nic-share", "1",
                    "--scheduler-profile", "default", "--runs", "1", "--configs", "kube+aligned,gpupair+aligned",
                    "--output", str(tmp_path / "out.tsv"))
    assert done.returncode == 0, done.stderr
    assert "GPU6=PHB/PHB" in done.stdout  # no pair there is near a NIC at PXB: gpupair holds every pod
    table = {row.split("\t")[1]: row.split("\t") for row in (tmp_path / "out.nic.tsv").read_text().splitlines()[1:]}
    assert table["gpupair+aligned"][3] == "0" and table["kube+aligned"][4] == "0"


@pytest.mark.parametrize("args, why", [
    (("--nic-share", "1.5"), "--nic-share: must be between 0 and 1"),
    (("--nic-share", "0.5"), "--nic-share: the nodes publish no NICs"),
    (("--nic-share", "0.5", "--nics", "lopsided", "--scenario", "fragmentation"), "seed and fleet only"),
    (("--nic-share", "0.5", "--nics", "lopsided", "--scenario", "fleet", "--high-priority-share", "0.1"),
     "not with --high-priority-share"),
    (("--nic-level", "SYS"), "--nic-level"),
])
def test_bad_network_flags_are_usage_errors(args, why):
    done = simulate(*args)
    assert done.returncode == 2
    assert "gpupair simulate: error:" in done.stderr and why in done.stderr
