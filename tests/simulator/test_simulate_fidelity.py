"""The scheduler model against a real kube-scheduler v1.36.2: the recorded placements, replayed.

tests/fixtures/real-k8s/default-scheduler-placements.json holds where the real scheduler (default
profile, no extender) put 40 two-GPU pods, one at a time, in two request variants. The state files
in simulator/recorded/ transcribe those set-ups; this test checks them against the recording,
replays them through the model and asks for the same node per pod. Without an extender ties go
by node order, so there is no randomness to allow for; the one pick per run that the clean state
does not give is the one the model makes when the previous pod, deleted once bound, was still in
the scheduler's cache.
"""

import random
import subprocess
import sys
from pathlib import Path

import pytest

from gpupair.simulator.cluster import Cluster
from gpupair.simulator.models.kube_scoring import PROFILES, PodRequest
from gpupair.simulator.scenarios.replay_scenario import load_state, replay
from gpupair.simulator.models.schedulers import GpupairExtender, KubeScheduler
from gpupair.simulator.shapes import seed_layout
from tests.real_k8s import load

ROOT = Path(__file__).parents[2]
STATES = ("default-scheduler-no-requests.json", "default-scheduler-cpu-requests.json")


@pytest.mark.parametrize("run", [0, 1])
def test_recorded_states_transcribe_the_recording(run):
    recording = load("default-scheduler-placements.json")
    recorded_run = recording["runs"][run]
    state = load_state(ROOT / "simulator" / "recorded" / STATES[run])
    assert [node.name for node in state.nodes] == recording["nodes_in_creation_order"]
    assert {node.name: node.gpus - sum(p.gpus * p.count for p in node.pods) for node in state.nodes} == \
        recorded_run["free_gpus"]
    assert state.recorded == recorded_run["sequence"]
    cpu = {p.milli_cpu for node in state.nodes for p in node.pods} | {p.milli_cpu for p in state.pods}
    assert cpu == ({0} if run == 0 else {3000})  # "no cpu/memory requests" / "requests 3 CPU"
    assert {p.memory for p in state.pods} == {0}


@pytest.mark.parametrize("run", [0, 1])
def test_model_predicts_the_real_schedulers_node_for_every_pod(run):
    state = load_state(ROOT / "simulator" / "recorded" / STATES[run])
    steps = replay(state, PROFILES["default"], seed_layout())
    verdicts = [step.verdict for step in steps]
    assert "differs" not in verdicts
    assert verdicts.count("same") == 39
    # The one exception is explained by the previous pod lingering, never by a random tie.
    exception = next(step for step in steps if step.verdict != "same")
    assert exception.if_previous_lingers == exception.recorded


def test_model_scores_what_the_real_scheduler_logged():
    # At v10 the real scheduler logged NodeResourcesFit 98 on all four nodes (BalancedAllocation
    # skipped: the pods request no cpu or memory), so ties went by node order to fn-1.
    recording = load("default-scheduler-placements.json")
    assert recording["scores_seen_at_v10_for_the_first_variant"]["NodeResourcesFit"] == 98
    state = load_state(ROOT / "simulator" / "recorded" / STATES[0])
    first = replay(state, PROFILES["default"], seed_layout())[0]
    assert first.scores == {"fn-1": 98, "fn-2": 98, "fn-3": 98, "fn-4": 98}
    assert first.predicted == "fn-1"


def test_ties_go_by_node_order_without_an_extender_and_at_random_with_gpupair():
    picks = {"kube": set(), "gpupair": set()}
    for seed in range(20):
        for name, extender in (("kube", None), ("gpupair", GpupairExtender())):
            cluster = Cluster.of({f"n{i}": seed_layout() for i in range(4)})
            cluster.report_all()
            scheduler = KubeScheduler(PROFILES["default"], extender)
            picks[name].add(scheduler.schedule("p", PodRequest(2), cluster, random.Random(seed)))
    assert picks["kube"] == {"n0"}
    assert len(picks["gpupair"]) > 1
    # A pod asking no GPU never reaches the extender (managedResources), so no Randomizer either.
    cluster = Cluster.of({f"n{i}": seed_layout() for i in range(4)})
    scheduler = KubeScheduler(PROFILES["default"], GpupairExtender())
    assert {scheduler.schedule("cpu-only", PodRequest(0, 500), cluster, random.Random(s)) for s in range(20)} == {"n0"}


def test_replay_scenario_from_the_command_line():
    done = subprocess.run(
        [sys.executable, "-m", "gpupair.command.cli", "simulate", "--no-progress", "--scenario", "replay",
         "--state", "simulator/recorded/default-scheduler-cpu-requests.json", "--scheduler-profile", "default"],
        capture_output=True, text=True, cwd=ROOT, timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert "profile default: same: 39, same if the previous pod was still counted: 1" in done.stdout
    assert "test-01\tfn-2\tfn-2\tsame\tfn-1=139 fn-2=148 fn-3=139 fn-4=148" in done.stdout


def test_replay_of_a_bad_state_file_is_a_clear_error(tmp_path):
    bad = tmp_path / "state.json"
    bad.write_text('{"nodes": [], "pods": [{"gpus": 2}]}')
    done = subprocess.run(
        [sys.executable, "-m", "gpupair.command.cli", "simulate", "--no-progress", "--scenario", "replay", "--state", str(bad)],
        capture_output=True, text=True, cwd=ROOT, timeout=120,
    )
    assert done.returncode == 2
    assert "gpupair simulate: error: recorded state" in done.stderr


def test_a_model_that_spreads_gpus_would_not_reproduce_the_recording():
    # The simulator's earlier model, in effect: LeastAllocated on GPUs. The real scheduler did not.
    state = load_state(ROOT / "simulator" / "recorded" / STATES[0])
    steps = replay(state, PROFILES["gpu-spread"], seed_layout())
    assert [step.verdict for step in steps].count("differs") == 39
    assert {step.predicted for step in steps} == {"fn-2"}  # 4 GPUs free there, 2 on fn-1
