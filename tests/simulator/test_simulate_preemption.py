"""`gpupair simulate --high-priority-share`: kube-scheduler's default preemption on the simulated
fleet, with and without gpupair's preempt verb; `--intent-mix`."""

import random
import subprocess
import sys
from pathlib import Path

import pytest

from gpupair.decide.pod.intent import Intent
from gpupair.simulator.cluster import Cluster
from gpupair.simulator.configs import Config
from gpupair.simulator.scenarios.fleet_scenario import FleetScenario, arrivals, run_fleet
from gpupair.simulator.models.kube_scoring import PROFILES, PodRequest
from gpupair.simulator.models.default_preemption import HIGH_PRIORITY, Running, pick_node, preempt, select_victims
from gpupair.simulator.models.schedulers import GpupairExtender, KubeScheduler
from gpupair.simulator.shapes import seed_layout
from gpupair.simulator.workload import PodMix, parse_intent_mix

ROOT = Path(__file__).parents[2]
KUBE, NO_VERB, VERB = Config("kube", "aligned"), Config("gpupair-nopreempt", "aligned"), Config("gpupair", "aligned")


def full_cluster(starts: dict[str, dict[int, int]]) -> tuple[Cluster, dict[str, Running]]:
    """Nodes of the seed's shape (GPU0-3 on NUMA 0, GPU4-7 on NUMA 1), every GPU held by a
    low-priority 1-GPU pod started at the given step; reported, ledgers and all."""
    cluster = Cluster.of({name: seed_layout() for name in starts})
    running = {}
    for name, by_device in starts.items():
        for device, start in by_device.items():
            pod = f"{name}-gpu{device}"
            cluster.bind(pod, PodRequest(1), name)
            cluster.nodes[name].allocated[pod] = (device,)
            running[pod] = Running(0, start)
    cluster.report_all()
    return cluster, running


# On "sys" the two pods started last hold GPU3 and GPU5 (across the sockets); on "close" they hold
# GPU6 and GPU7, but one of them started earlier, so kube-scheduler prefers "sys".
STARTS = {"sys": {0: 1, 1: 1, 2: 1, 3: 8, 4: 1, 5: 9, 6: 1, 7: 1},
          "close": {0: 1, 1: 1, 2: 1, 3: 1, 4: 1, 5: 1, 6: 5, 7: 9}}


def test_default_preemption_evicts_by_count_the_pods_started_last():
    cluster, running = full_cluster(STARTS)
    assert select_victims(cluster.nodes["sys"], PodRequest(2), HIGH_PRIORITY, running) == ["sys-gpu3", "sys-gpu5"]
    assert select_victims(cluster.nodes["sys"], PodRequest(2), 0, running) == []  # nobody below priority 0
    chosen = preempt(PodRequest(2), HIGH_PRIORITY, Intent.REQUIRED, cluster, running, {}, random.Random(0))
    # Equal victims and priorities: the node whose highest-priority victims started latest wins.
    assert (chosen.node, chosen.victims, chosen.proposed) == ("sys", ("sys-gpu3", "sys-gpu5"), 2)


def test_gpupairs_verb_drops_the_node_whose_victims_free_no_close_pair():
    cluster, running = full_cluster(STARTS)
    scheduler = KubeScheduler(PROFILES["default"], GpupairExtender(preempt_verb=True))
    scheduler.reported(cluster)
    chosen = preempt(PodRequest(2), HIGH_PRIORITY, Intent.REQUIRED, cluster, running, {}, random.Random(0),
                     scheduler.preempt_verb)
    assert (chosen.node, chosen.victims, chosen.candidates, chosen.proposed) == ("close", ("close-gpu6", "close-gpu7"), 1, 2)
    for victim in chosen.victims:
        cluster.remove(victim, "close")
    cluster.report_all()
    scheduler.reported(cluster)
    assert scheduler.schedule("high", PodRequest(2), cluster, random.Random(0)) == "close"
    # A pod that would rather run now on a SYS pair keeps both nodes.
    cluster, running = full_cluster(STARTS)
    scheduler = KubeScheduler(PROFILES["default"], GpupairExtender(preempt_verb=True))
    scheduler.reported(cluster)
    chosen = preempt(PodRequest(2), HIGH_PRIORITY, Intent.PREFERRED, cluster, running, {}, random.Random(0),
                     scheduler.preempt_verb)
    assert (chosen.node, chosen.candidates) == ("sys", 2)


def test_the_verb_trims_victims_that_free_nothing_the_pod_needs():
    # 1-GPU pods on GPU0-4 from the start, a 2-GPU pod on GPU6-7, and one on GPU5 bound after the
    # last report (the extender holds its count). A 3-GPU pod: kube-scheduler's dry run keeps
    # the oldest pods and evicts the two started last, by count.
    cluster, running = full_cluster({"n": {0: 1, 1: 1, 2: 1, 3: 1, 4: 1}})
    cluster.bind("pair", PodRequest(2), "n")
    cluster.nodes["n"].allocated["pair"] = (6, 7)
    running["pair"] = Running(0, 8)
    cluster.report_all()
    scheduler = KubeScheduler(PROFILES["default"], GpupairExtender(preempt_verb=True))
    scheduler.reported(cluster)
    cluster.bind("late", PodRequest(1), "n")
    cluster.nodes["n"].allocated["late"] = (5,)
    scheduler.pinned("late", PodRequest(1), "n", cluster)  # seen by the pod watch
    running["late"] = Running(0, 9)
    victims = select_victims(cluster.nodes["n"], PodRequest(3), HIGH_PRIORITY, running)
    assert victims == ["pair", "late"]
    kept = scheduler.preempt_verb(3, Intent.REQUIRED, {"n": victims}, cluster)
    assert kept == {"n": ["pair", "late"]}  # both needed: GPU5-7 is the close set
    kept = scheduler.preempt_verb(2, Intent.REQUIRED, {"n": victims}, cluster)
    assert kept == {"n": ["pair"]}  # for two GPUs, the pair's eviction alone frees GPU6-7


def test_pick_node_follows_kube_schedulers_criteria_in_order():
    running = {"lo-a": Running(0, 1), "lo-b": Running(0, 5), "mid": Running(500, 9), "lo-c": Running(0, 3)}
    rng = random.Random(0)
    assert pick_node({"x": ["mid"], "y": ["lo-a", "lo-b"]}, running, rng) == "y"  # lowest highest priority
    assert pick_node({"x": ["lo-a", "lo-b"], "y": ["lo-c"]}, running, rng) == "y"  # fewest victims
    assert pick_node({"x": ["lo-a"], "y": ["lo-c"]}, running, rng) == "y"  # started latest
    ties = {pick_node({"x": ["lo-a"], "y": ["lo-a"]}, running, random.Random(seed)) for seed in range(20)}
    assert ties == {"x", "y"}  # Go's map order: at random


def test_fleet_gpupairs_verb_wastes_fewer_evictions_than_default_preemption():
    scenario = FleetScenario(nodes=16, steps=150, arrivals_per_step=2.5, mix=PodMix(0.3))
    results = {c.scheduler: run_fleet(c, seed_layout(), scenario, seed=3) for c in (KUBE, NO_VERB, VERB)}
    verb, default = results["gpupair"], results["gpupair-nopreempt"]
    assert default.wasted_evictions > 0 and results["kube"].wasted_evictions > 0
    assert verb.wasted_evictions < default.wasted_evictions
    assert verb.evictions > 0 and verb.high_waits and verb.lost_gpu_steps > 0
    again = run_fleet(VERB, seed_layout(), scenario, seed=3)
    assert (again.evictions, again.wasted_evictions, again.high_waits) == (verb.evictions, 0, verb.high_waits)


def test_shares_and_mixes_leave_the_pod_stream_unchanged():
    plain = arrivals(FleetScenario(steps=60), seed=4)
    mixed = arrivals(FleetScenario(steps=60, mix=PodMix(0.25, parse_intent_mix("required=0.5,none=0.5"))), seed=4)
    assert [(a.pod, a.gpus, a.step, a.duration) for a in plain] == [(a.pod, a.gpus, a.step, a.duration) for a in mixed]
    assert {a.priority for a in plain} == {0} and {a.intent for a in plain} == {Intent.REQUIRED}
    assert 0.15 < sum(a.priority > 0 for a in mixed) / len(mixed) < 0.35
    assert {a.intent for a in mixed} == {Intent.REQUIRED, Intent.NONE}
    # Without high-priority pods nobody preempts, whatever the scheduler.
    result = run_fleet(VERB, seed_layout(), FleetScenario(nodes=8, steps=60, arrivals_per_step=2.0), seed=4)
    assert result.evictions == result.preemptions == 0 and not result.high_waits


def test_the_intent_mix_reaches_the_extender():
    # Pods that ignore topology take SYS sets when nothing closer is free; required ones never do.
    scenario = FleetScenario(nodes=8, steps=120, arrivals_per_step=1.5)
    required = run_fleet(VERB, seed_layout(), scenario, seed=2)
    anywhere = run_fleet(VERB, seed_layout(), FleetScenario(nodes=8, steps=120, arrivals_per_step=1.5,
                                                            mix=PodMix(0, parse_intent_mix("none=1"))), seed=2)
    assert required.avoidable_sys == 0 and anywhere.sys_grants > required.sys_grants


@pytest.mark.parametrize("text, message", [
    ("required=0.5", "must sum to 1"),
    ("requried=1", "INTENT=SHARE"),
    ("required", "INTENT=SHARE"),
    ("required=2,none=-1", "between 0 and 1"),
    ("none=0.5,none=0.5", "twice"),
])
def test_bad_intent_mixes_are_refused_clearly(text, message):
    with pytest.raises(ValueError, match=message):
        parse_intent_mix(text)


def simulate(*args, cwd):
    return subprocess.run([sys.executable, "-m", "gpupair.command.cli", "simulate", "--no-progress", *args],
                          capture_output=True, text=True, cwd=cwd, timeout=120)


def test_fleet_command_reports_preemption_and_draws_its_panels(tmp_path):
    done = simulate("--scenario", "fleet", "--nodes", "8", "--steps", "40", "--arrivals", "2",
                    "--high-priority-share", "0.3", "--intent-mix", "required=0.7,preferred=0.2,none=0.1",
                    "--configs", "gpupair-nopreempt+aligned,gpupair+aligned", "--scheduler-profile", "default",
                    "--output", str(tmp_path / "f.tsv"), "--plot", str(tmp_path / "f.png"), cwd=ROOT)
    assert done.returncode == 0, done.stderr
    assert "30% high priority (may preempt), intents required 70%, preferred 20%, none 10%" in done.stdout
    assert "wasted evictions" in done.stdout
    rows = (tmp_path / "f.fleet.preemption.tsv").read_text().splitlines()
    assert rows[0].split("\t")[:5] == ["profile", "configuration", "preemptions", "evictions", "wasted evictions"]
    assert [row.split("\t")[1] for row in rows[1:]] == ["gpupair-nopreempt+aligned", "gpupair+aligned"]
    assert (tmp_path / "f.png").stat().st_size > 0


@pytest.mark.parametrize("args, message", [
    (("--scenario", "fleet", "--high-priority-share", "1.5"), "--high-priority-share: must be between 0 and 1, got 1.5"),
    (("--scenario", "fleet", "--intent-mix", "required=0.4"), "--intent-mix: the shares must sum to 1"),
    (("--high-priority-share", "0.2"), "apply to --scenario fleet only"),
])
def test_bad_preemption_flags_exit_2_with_a_clear_message(args, message, tmp_path):
    done = simulate(*args, "--output", str(tmp_path / "x.tsv"), cwd=ROOT)
    assert done.returncode == 2 and message in done.stderr and "Traceback" not in done.stderr
