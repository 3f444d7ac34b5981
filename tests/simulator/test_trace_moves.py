"""`simulate --scenario trace --move-budget`: a pod no node takes gets a plan of the defrag planner
within the budget, carried out through the replay's own scheduling cycle."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from gpupair.simulator.trace.files import TraceNode, TracePod
from gpupair.simulator.trace.models.devices import Tables, gpupair_decider, picker
from gpupair.simulator.trace.models.scoring_policies import make_policy
from gpupair.simulator.trace.node_arrays import TraceCluster
from gpupair.simulator.trace.numa import NumaSplits
from gpupair.simulator.trace.replay import ReplayConfig, ReplayResult, _mover, _schedule

NODES = [TraceNode("a", 64000, 256000, 8, "V100"), TraceNode("b", 64000, 256000, 8, "V100")]
FOUR = TracePod("four", 1000, 1000, 4, 1000)


def built(share: float):
    """Node a: one 1-GPU pod on each NUMA node, b: seven GPUs taken. 10 free GPUs, no 4 on one
    NUMA node: a 4-GPU pod fails until a's pod on NUMA0 moves to b's last GPU or a's NUMA1."""
    config = ReplayConfig("kube-default", True, 42, move_budget=share)
    cluster = TraceCluster(NODES, NumaSplits(), np.arange(2))
    policy = make_policy(config.policy)
    policy.bind(cluster, [], np.random.default_rng(1))
    tables = Tables(cluster.layouts, picker(config.path, config.plugin, True), gpupair_decider(config.path, config.plugin))
    result = ReplayResult("kube-default", True, 42, config.path, config.score, {})
    mover = _mover(cluster, policy, (tables, None), config, np.random.default_rng(2), result, None)
    if mover is None:
        cluster.keep_gpu_pods()
    for name, row, devices in [("a0", 0, (0,)), ("a4", 0, (4,)), *((f"b{g}", 1, (g,)) for g in range(7))]:
        cluster.place(row, TracePod(name, 1000, 1000, 1, 1000), devices)
    fails = _schedule(cluster, policy, (tables, None), FOUR, config, np.random.default_rng(3), result)
    return cluster, mover, fails


def test_a_move_places_a_pod_that_would_be_dropped():
    cluster, mover, fails = built(0.01)
    assert fails is None
    row = mover.rescue(FOUR, arrived=100)  # 1% of 100 pods: one move
    assert row is not None and mover.ledger.moves == 1 and mover.ledger.plans == 1
    assert mover.ledger.lost == 0
    # Every pod is still placed: the moved one on a GPU of its own, the 4-GPU pod on one NUMA node.
    held = {name: (r, devices) for r, pods in enumerate(cluster.gpu_pods) for name, (_, devices) in pods.items()}
    assert set(held) == {"a0", "a4", *(f"b{g}" for g in range(7)), "four"}
    r, devices = held["four"]
    numa = cluster.layouts[int(cluster.layout_id[r])].numa_of
    assert len({numa(d) for d in devices}) == 1
    assert (cluster.left >= 0).all() and int((cluster.left == 0).sum()) == 13


@pytest.mark.parametrize("share, arrived", [(0.0, 100), (0.01, 99), (0.005, 100)])
def test_no_move_beyond_the_budget(share, arrived):
    cluster, mover, fails = built(share)
    if mover is None:
        assert share == 0
        return
    before = cluster.left.copy()
    assert mover.rescue(FOUR, arrived=arrived) is None  # int(share * arrived) < 1
    assert mover.ledger.moves == 0 and (cluster.left == before).all()


# --- the command -----------------------------------------------------------------------------

TRACE = Path(__file__).parents[1] / "fixtures" / "trace"


@pytest.fixture(scope="module")
def sliced(tmp_path_factory):
    """Every eighth node and every eighth pod of multigpu50: 152 nodes."""
    folder = tmp_path_factory.mktemp("slice")
    for source, name in ((TRACE / "openb_node_list_gpu_node.csv", "nodes.csv"),
                         (TRACE / "openb_pod_list_multigpu50.csv", "pods.csv")):
        lines = source.read_text().splitlines()
        (folder / name).write_text("\n".join([lines[0], *lines[1::8]]) + "\n")
    return folder / "nodes.csv", folder / "pods.csv"


def simulate(*args):
    return subprocess.run([sys.executable, "-m", "gpupair.command.cli", "simulate", "--no-progress",
                           "--scenario", "trace", *args], capture_output=True, text=True, timeout=300)


def test_the_flag_spends_moves_within_the_budget(sliced):
    done = simulate("--trace-nodes", str(sliced[0]), "--trace-pods", str(sliced[1]), "--policies", "kube-default",
                    "--gpupair-scores", "shipped", "--seeds", "42", "--move-budget", "2", "--output", "json")
    assert done.returncode == 0, done.stderr
    document = json.loads(done.stdout)
    assert document["trace"]["move_budget_percent"] == 2
    for run in document["runs"]:
        assert run["moves"] <= 0.02 * run["arrived_pods"]
        assert run["moves_by"]["130"] == run["moves"]
    assert any(run["moves"] for run in document["runs"]), document["runs"]


def test_a_budget_out_of_range_is_one_line():
    done = simulate("--trace-nodes", "n.csv", "--trace-pods", "p.csv", "--move-budget", "101")
    assert done.returncode == 2
    assert "--move-budget" in done.stderr and len(done.stderr.strip().splitlines()) <= 3
