"""kube-scheduler's percentageOfNodesToScore as the trace replay models it
(simulator/trace/models/nodes_to_score.py; pkg/scheduler/schedule_one.go, v1.36)."""

import numpy as np
import pytest

from gpupair.decide.devices.pickers import DEVICE_PLUGIN
from gpupair.simulator.trace.node_arrays import TraceCluster
from gpupair.simulator.trace.models.devices import Tables, gpupair_decider, picker
from gpupair.simulator.trace.files import MILLI, TraceNode, TracePod, read_nodes, read_pods
from gpupair.simulator.trace.models.nodes_to_score import ADAPTIVE, FeasibleNodeSearch, feasible_nodes_to_find
from gpupair.simulator.trace.numa import NumaSplits
from gpupair.simulator.trace.models.scoring_policies import make_policy
from gpupair.simulator.trace.replay import ReplayConfig, ReplayResult, _schedule, replay
from tests.simulator.test_trace_replay import NODES, PODS


@pytest.mark.parametrize("percentage, nodes, expected", [
    (ADAPTIVE, 99, 99),  # under 100 nodes: every node
    (ADAPTIVE, 100, 100),  # 49% of 100 is 49, raised to the floor of 100
    (ADAPTIVE, 1213, 497),  # 50 - 1213/125 = 41%: Alibaba's fleet
    (ADAPTIVE, 4852, 582),  # 50 - 38 = 12%: the fleet four times over
    (ADAPTIVE, 10000, 500),  # 50 - 80 is under 5: 5%
    (100, 1213, 1213),
    (10, 1213, 121),
    (1, 1213, 100),
])
def test_how_many_feasible_nodes_end_the_search(percentage, nodes, expected):
    assert feasible_nodes_to_find(percentage, nodes) == expected


def test_the_search_stops_at_enough_and_the_next_starts_at_the_node_it_dropped():
    search = FeasibleNodeSearch(300, 1)  # 100 to find
    fits = np.ones(300, dtype=bool)
    fits[[0, 5]] = False
    first = search.feasible(fits)
    assert list(first) == [n for n in range(102) if n not in (0, 5)]
    assert search.next_start == 102  # 100 kept + 2 refused; node 102, found and dropped, comes first next
    second = search.feasible(fits)
    assert list(second) == list(range(102, 202))
    third = search.feasible(fits)  # wraps round: 98 nodes to the end, node 0 refused, 1 and 2
    assert list(third) == [1, 2, *range(202, 300)]
    assert search.next_start == 3


def test_with_too_few_feasible_every_node_is_examined_and_the_start_stays():
    search = FeasibleNodeSearch(300, 1)
    search.next_start = 40
    fits = np.zeros(300, dtype=bool)
    fits[[10, 250]] = True
    assert list(search.feasible(fits)) == [10, 250]
    assert search.next_start == 40


def test_the_setting_is_checked():
    with pytest.raises(ValueError, match="0-100"):
        FeasibleNodeSearch(10, 101)


@pytest.fixture(scope="module")
def fleet():
    nodes, pods = read_nodes(NODES), read_pods(PODS)
    return nodes[::6], pods[::6]  # 203 nodes: kube-scheduler's adaptive search finds 100


def test_at_100_the_replay_examines_every_node_and_below_only_what_the_search_found(fleet):
    nodes, pods = fleet
    every = replay(nodes, pods, ReplayConfig("kube-default", True, 42))
    at_100 = replay(nodes, pods, ReplayConfig("kube-default", True, 42, percentage_of_nodes_to_score=100))
    adaptive = replay(nodes, pods, ReplayConfig("kube-default", True, 42, percentage_of_nodes_to_score=ADAPTIVE))
    assert at_100.allocation == every.allocation
    # kube-default spreads pods (LeastAllocated), and half the fleet reaches each pod's scores.
    assert adaptive.allocation != every.allocation
    assert adaptive.multi_gpu_numa_local == adaptive.multi_gpu_placed > 0


def test_a_pod_refused_on_every_node_searched_while_an_unsearched_one_passes_is_counted():
    """120 of 150 8-GPU nodes keep one GPU free on each NUMA node: kube-scheduler's own filter
    passes them for 2 GPUs, gpupair's refuses them; the last 30 have a close pair."""
    nodes = [TraceNode(f"n{i:03d}", 64000, 262144, 8, "V100") for i in range(150)]
    one = TracePod("one", 0, 0, 1, MILLI)
    two = TracePod("two", 1000, 1024, 2, MILLI)
    outcomes = {}
    for percentage in (None, 1):
        cluster = TraceCluster(nodes, NumaSplits(), np.arange(len(nodes)))
        for row in range(120):
            for gpu in (0, 1, 2, 4, 5, 6):
                cluster.place(row, one, (gpu,))
        config = ReplayConfig("kube-default", True, 42, percentage_of_nodes_to_score=percentage)
        policy = make_policy("kube-default")
        policy.bind(cluster, [two], np.random.default_rng(0))
        tables = Tables(cluster.layouts, picker(config.path, config.plugin, True),
                        gpupair_decider(config.path, config.plugin), DEVICE_PLUGIN)
        search = None if percentage is None else FeasibleNodeSearch(len(nodes), percentage)
        result = ReplayResult("kube-default", True, 42, config.path, config.score, {})
        row = _schedule(cluster, policy, (tables, None), two, config, np.random.default_rng(1), result, search)
        outcomes[percentage] = (row, result.missed_by_search)
    assert outcomes[None][0] >= 120 and outcomes[None][1] == 0
    assert outcomes[1] == (None, 1)  # nodes 0-99 searched, all refused by gpupair's filter
