"""kube-scheduler's percentageOfNodesToScore as the trace replay models it
(simulator/trace/nodes_to_score.py; pkg/scheduler/schedule_one.go, v1.36)."""

import numpy as np
import pytest

from gpupair.simulator.trace.files import read_nodes, read_pods
from gpupair.simulator.trace.nodes_to_score import ADAPTIVE, FeasibleNodeSearch, feasible_nodes_to_find
from gpupair.simulator.trace.replay import ReplayConfig, replay
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
