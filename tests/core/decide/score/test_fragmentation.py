"""The fragmentation measure and gpupair's score over it (gpupair/decide/score/fragmentation.py), and
the CPU request it is fed (gpupair/decide/pod/pod_request.py)."""

import zlib

import numpy as np
import pytest

from gpupair.decide.score.fragmentation import (MAX_SCORE, MAX_SHAPES, PACKING, QUANTUM, TIE_ORDER, Fragmentation,
                                                Workload, grades, tie_order)
from gpupair.decide.pod.pod_request import PodRequestError, cpu_request, parse_milli


def test_a_shape_of_whole_gpus_fits_only_as_close_as_gpupair_allows():
    four = ((0, 1000, 4, ()), 1.0)
    measure = Fragmentation([four], [""])
    left = np.array([[1000] * 4 + [0] * 4, [1000, 1000, 0, 0, 1000, 1000, 0, 0]])
    cpu, model = np.array([8000, 8000]), np.array([0, 0])
    assert measure.amount(cpu, left, model).tolist() == [0.0, 0.0]  # FGD: four free GPUs fit anywhere
    numa = {4: np.array([True, False])}  # the second node's four are split over both sockets
    assert measure.amount(cpu, left, model, numa).tolist() == [0.0, 4000.0]
    assert measure.whole_sizes == [4]


def test_a_shape_of_whole_gpus_fits_only_where_its_memory_fits_and_others_ask_none():
    # one GPU with 64Gi, as gpupair learns it (memory MiB last), beside a CPU-only shape
    measure = Fragmentation([((4000, 1000, 1, (), 65536), 0.5), ((1000, 0, 0, (), 1024), 0.5)], [""])
    left = np.array([[1000, 0], [1000, 0]])
    cpu, model = np.array([8000, 8000]), np.array([0, 0])
    memory = np.array([131072, 32768])  # the second node's memory cannot hold the GPU shape's
    assert measure.amount(cpu, left, model, memory_left=memory).tolist() == [500.0, 1000.0]
    assert measure.amount(cpu, left, model).tolist() == [500.0, 500.0]  # not told: memory not counted
    fgd = Fragmentation([((4000, 1000, 1, ()), 1.0)], [""])  # FGD's shape: no memory field
    assert fgd.amount(cpu, left, model, memory_left=memory).tolist() == [0.0, 0.0]
    share = Fragmentation([((4000, 500, 1, (), 65536), 1.0)], [""])  # a share's memory is not counted
    assert share.amount(cpu, left, model, memory_left=memory).tolist() == [0.0, 0.0]


def test_grades_give_ten_to_the_least_growth_and_a_point_less_per_quantum():
    grown = np.array([250.0, 250.0 + QUANTUM, 250.0 + 3.5 * QUANTUM, 1e6])
    assert grades(grown, np.zeros(4), np.full(4, 8000)).tolist() == [MAX_SCORE, MAX_SCORE - 1, MAX_SCORE - 4, 0]
    assert grades(np.zeros(0), np.zeros(0), np.zeros(0)).tolist() == []


def test_the_node_order_is_fixed_by_the_name_and_under_a_step():
    names = [f"gpu-node-{number}" for number in range(200)]
    order = tie_order(names)
    assert order.tolist() == tie_order(list(names)).tolist()  # another call, another caller: the same
    assert tie_order(["gpu-node-0"])[0] == zlib.crc32(b"gpu-node-0") * TIE_ORDER / 2**32  # not Python's salted hash
    assert 0 <= order.min() and order.max() < QUANTUM
    assert len(set(order.tolist())) == len(names)


def test_the_node_order_parts_nodes_graded_alike_and_never_a_step_apart():
    order = np.array([30.0, 5.0, 20.0])
    alike = grades(np.zeros(3), np.zeros(3), np.full(3, 8000), order=order)
    assert alike.tolist() == [MAX_SCORE - 1, MAX_SCORE, MAX_SCORE - 1]  # the first in the order wins
    # a node a step better keeps its lead whatever its place in the order
    ahead = grades(np.array([0.0, QUANTUM]), np.zeros(2), np.full(2, 8000), order=np.array([TIE_ORDER, 0.0]))
    assert ahead.tolist() == [MAX_SCORE, MAX_SCORE - 1]
    assert grades(np.zeros(3), np.zeros(3), np.full(3, 8000)).tolist() == [MAX_SCORE] * 3


def test_among_nodes_that_fragment_alike_the_fuller_one_wins():
    left_after = np.array([6000, 2000])  # half of the first node left, a quarter of the second
    capacity = np.array([8000, 8000])
    assert grades(np.zeros(2), left_after, capacity).tolist() == [MAX_SCORE - round(PACKING * (6 / 8 - 2 / 8) / QUANTUM), MAX_SCORE]


def test_packing_weighs_the_share_left_not_the_gpus_so_small_nodes_are_not_drained_first():
    # One GPU left of a 2-GPU node and seven of an 8-GPU node: by count the small node would win
    # by 6 GPUs; by share they are near equals (a half against seven eighths).
    grown = np.zeros(2)
    scores = grades(grown, np.array([1000, 7000]), np.array([2000, 8000])).tolist()
    assert scores[0] - scores[1] == round(PACKING * (7 / 8 - 1 / 2) / QUANTUM)


def test_the_workload_counts_each_pod_once_and_forgets_it():
    workload = Workload()
    assert not workload
    for shape in ((1000, 1000, 1, ()), (1000, 1000, 1, ()), (4000, 1000, 8, ())):
        workload.add(shape)
    measure = workload.measure([""])
    assert sorted(measure.share.tolist()) == pytest.approx([1 / 3, 2 / 3])
    workload.remove((4000, 1000, 8, ()))
    assert workload.measure([""]).whole_sizes == []


def test_gpupair_learns_every_shape_where_fgds_target_workload_drops_the_tail():
    workload = Workload()
    for _ in range(99):
        workload.add((1000, 1000, 1, ()))
    workload.add((1000, 1000, 1, ("T4",)))  # 1% of the pods, pinned: FGD's 95% cut drops it
    assert len(workload.typical()) == 1
    assert [shape for shape, _ in workload.learned()] == [(1000, 1000, 1, ()), (1000, 1000, 1, ("T4",))]
    for cpu in range(MAX_SHAPES + 10):
        workload.add((cpu, 0, 0, ()))
    assert len(workload.learned()) == MAX_SHAPES  # the most common, a bound on the cost


def test_a_shape_pinned_to_a_scarce_product_weighs_by_its_scarcity():
    pinned, flexible = ((0, 1000, 1, ("T4",)), 0.5), ((0, 1000, 1, ()), 0.5)
    measure = Fragmentation([pinned, flexible], ["G2", "T4"])
    # Eight GPUs left on the G2 node, two on the T4 node: the T4 shape can use a fifth of them.
    left = np.array([[1000] * 8, [1000, 1000] + [0] * 6])
    model = np.array([0, 1])
    assert measure.scarcity(left, model).tolist() == [5.0, 1.0]
    # A flexible pod placed on the T4 node takes what the pinned shape needs: that costs five
    # times the pinned shape's share; on the G2 node it frees the T4 node for it.
    after = np.array([[0] + [1000] * 7, [0, 1000] + [0] * 6])
    weight = measure.scarcity(left, model)
    grown = measure.amount(np.zeros(2), after, model, weight=weight) - measure.amount(np.zeros(2), left, model, weight=weight)
    unweighted = measure.amount(np.zeros(2), after, model) - measure.amount(np.zeros(2), left, model)
    assert grown[1] - grown[0] > unweighted[1] - unweighted[0] > 0
    # No product of the shape among the rows: it weighs every row alike, so 1.
    assert measure.scarcity(left[:1], model[:1]).tolist() == [1.0, 1.0]


def test_cpu_requests_in_millicores_by_the_effective_request_rule():
    pod = {"spec": {
        "containers": [{"resources": {"requests": {"cpu": "1500m"}}}, {"resources": {"limits": {"cpu": "0.5"}}}],
        "initContainers": [{"resources": {"requests": {"cpu": "3"}}}]}}
    assert cpu_request(pod) == 3000  # the init container's 3 cores outweigh 2
    assert parse_milli("100u", "x") == 1  # rounded up, as the API server stores it
    assert cpu_request({"spec": {"containers": [{}]}}) == 0
    for bad in ("lots", "-1", True):
        with pytest.raises(PodRequestError):
            parse_milli(bad, "cpu")
