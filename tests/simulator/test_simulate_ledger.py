"""`gpupair simulate` with a device plugin that deviates from the plan and pods pinned by nodeName:
the extender's holds reconciled with the allocation ledger against the accounting before it."""

import random
import subprocess
import sys
from pathlib import Path

import pytest

from gpupair.decide.devices.policies import POLICIES
from gpupair.simulator.cluster import Cluster
from gpupair.simulator.configs import Config
from gpupair.simulator.scenarios.fleet_scenario import FleetScenario, run_fleet
from gpupair.simulator.interference import DevicePlugin, Interference
from gpupair.simulator.models.kube_scoring import PROFILES, PodRequest
from gpupair.simulator.models.schedulers import GpupairExtender, KubeScheduler
from gpupair.simulator.scenarios.seed_scenario import SeedScenario, run_seed_scenario
from gpupair.simulator.shapes import seed_layout

ROOT = Path(__file__).parents[2]
LEDGER, LEGACY = Config("gpupair", "aligned"), Config("gpupair-legacy", "aligned")


def test_the_ledger_leaves_fewer_pods_pending_for_no_reason_than_the_legacy_accounting():
    # The burst: every background GPU held by a pod pinned by nodeName, 8 two-GPU pods
    # per round on 4 nodes, a plugin that picks another set than planned 10% of the time.
    scenario = SeedScenario(pods_per_round=8, interference=Interference(plugin_deviation=0.1, pinned_share=1.0))
    legacy = run_seed_scenario(LEGACY, seed_layout(), scenario, seed=1)
    ledger = run_seed_scenario(LEDGER, seed_layout(), scenario, seed=1)
    assert legacy.pending_no_reason > 0
    assert ledger.pending_no_reason < legacy.pending_no_reason
    assert len(ledger.granted) > len(legacy.granted)
    assert legacy.sys_count == ledger.sys_count == 0
    again = run_seed_scenario(LEGACY, seed_layout(), scenario, seed=1)  # deterministic with a seed
    assert [s.tsv_row() for s in again.samples] == [s.tsv_row() for s in legacy.samples]
    rows = [s.tsv_row() for s in legacy.samples if s.close_set_free]
    assert rows and all(row.endswith("\tPENDING-CLOSE-SET-FREE") for row in rows)


def test_without_deviation_or_pinned_pods_both_accountings_place_alike():
    ledger = run_seed_scenario(LEDGER, seed_layout(), SeedScenario(pods_per_round=6), seed=2)
    legacy = run_seed_scenario(LEGACY, seed_layout(), SeedScenario(pods_per_round=6), seed=2)
    assert [s.tsv_row() for s in ledger.samples] == [s.tsv_row() for s in legacy.samples]
    assert ledger.pending > 0 and ledger.pending_no_reason == 0


def test_a_deviating_plugin_still_grants_a_valid_set_as_tight_as_its_policys():
    layout, rng = seed_layout(), random.Random(7)
    plugin = DevicePlugin(POLICIES["aligned"], deviation=0.5, rng=random.Random(3))
    draws = 400
    for _ in range(draws):
        free = frozenset(rng.sample(range(8), rng.randint(2, 8)))
        k = rng.randint(1, len(free))
        planned = POLICIES["aligned"].pick(layout, free, k)
        got = plugin.pick(layout, free, k)
        assert len(got) == k and set(got) <= free
        assert len({layout.numa_of(i) for i in got}) <= len({layout.numa_of(i) for i in planned})
    assert 0.3 * draws < plugin.deviated < 0.5 * draws  # some draws have no other set as tight
    assert DevicePlugin(POLICIES["aligned"]).pick(layout, frozenset({0, 1, 4}), 2) == (0, 1)


def _one_node_with_a_pinned_pod(extender):
    """GPU0-3 free on NUMA0; a 1-GPU pod pinned to the node, which the plugin puts on GPU3
    (the extender's policy would pick GPU0), reported."""
    cluster = Cluster.of({"n": seed_layout()})
    node = cluster.nodes["n"]
    for device in (4, 5, 6, 7):
        node.bound[f"bg-{device}"] = PodRequest(1)
        node.allocated[f"bg-{device}"] = (device,)
    cluster.report_all()
    scheduler = KubeScheduler(PROFILES["default"], extender)
    scheduler.reported(cluster)
    cluster.bind("pinned", PodRequest(1), "n")
    node.allocated["pinned"] = (3,)
    scheduler.pinned("pinned", PodRequest(1), "n", cluster)
    return cluster, scheduler


def test_a_pinned_pod_reaches_the_extender_through_its_pod_watch_and_the_ledger_ends_its_hold():
    cluster, scheduler = _one_node_with_a_pinned_pod(GpupairExtender())
    reservations = scheduler.extender.reservations
    assert [pod.uid for pod in reservations.counted()] == ["pinned"]  # its GPU count, no guessed device
    assert reservations.hold("n").count == 1 and not reservations.hold("n").devices
    cluster.report_all()
    scheduler.reported(cluster)
    assert len(reservations) == 0  # the ledger lists the pod
    assert cluster.close_set_free(PodRequest(3))  # GPU0-2
    assert scheduler.schedule("a", PodRequest(3), cluster, random.Random(0)) == "n"


def test_the_legacy_accounting_holds_its_wrong_guess_for_a_pinned_pod_until_the_ttl():
    cluster, scheduler = _one_node_with_a_pinned_pod(GpupairExtender(ledger=False, ttl=120))
    reservations = scheduler.extender.reservations
    assert reservations.on_node("n") == {0}  # the set it predicted; the pod really got GPU3
    cluster.report_all()
    scheduler.reported(cluster)
    assert reservations.on_node("n") == {0}  # GPU0 shows free, so the guess stays
    cluster.now = 60.0
    assert cluster.close_set_free(PodRequest(3))  # GPU0-2 really are free
    assert scheduler.schedule("a", PodRequest(3), cluster, random.Random(0)) is None
    cluster.now = 121.0
    assert scheduler.schedule("a", PodRequest(3), cluster, random.Random(0)) == "n"  # the guess expired


def test_fleet_with_pinned_pods_and_a_deviating_plugin():
    scenario = FleetScenario(nodes=16, steps=80, arrivals_per_step=2.5,
                             interference=Interference(plugin_deviation=0.2, pinned_share=0.2))
    results = {config.scheduler: run_fleet(config, seed_layout(), scenario, seed=3) for config in (LEDGER, LEGACY)}
    for result in results.values():
        assert result.pinned > 20 and result.granted > 100
    plain = run_fleet(LEDGER, seed_layout(), FleetScenario(nodes=16, steps=80, arrivals_per_step=2.5), seed=3)
    assert plain.pinned == 0


def simulate(*args):
    return subprocess.run([sys.executable, "-m", "gpupair.command.cli", "simulate", "--no-progress", *args],
                          capture_output=True, text=True, cwd=ROOT, timeout=120)


def test_command_compares_the_two_accountings_and_writes_the_summary_tsv(tmp_path):
    done = simulate("--configs", "gpupair-legacy+aligned,gpupair+aligned", "--scheduler-profile", "default",
                    "--pods-per-round", "8", "--pinned-share", "1", "--plugin-deviation", "0.1",
                    "--output", str(tmp_path / "out.tsv"))
    assert done.returncode == 0, done.stderr
    assert "plugin deviates 10%, 100% pinned by nodeName, hold TTL 120 s" in done.stdout
    summary = (tmp_path / "out.summary.tsv").read_text().splitlines()
    header = summary[0].split("\t")
    assert header[-1] == "pending for no reason"
    counts = {row.split("\t")[1]: int(row.split("\t")[-1]) for row in summary[1:]}
    assert counts["gpupair+aligned"] < counts["gpupair-legacy+aligned"]


@pytest.mark.parametrize("args, says", [
    (("--plugin-deviation", "1.5"), "--plugin-deviation: must be between 0 and 1, got 1.5"),
    (("--pinned-share", "-0.1"), "--pinned-share: must be between 0 and 1, got -0.1"),
    (("--reservation-ttl", "0"), "--reservation-ttl: must be above 0"),
])
def test_bad_interference_is_a_clear_error(args, says):
    done = simulate(*args)
    assert done.returncode == 2
    assert says in done.stderr
