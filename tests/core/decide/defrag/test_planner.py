"""The defrag planner: fewest moves, then fewest GPUs moved; never a pod that may not move; never
a moved pod without a place now; several waiting pods on disjoint GPUs; the bound, and why."""

from __future__ import annotations

import random

import pytest

from gpupair.decide.defrag.close_sets import close_set
from gpupair.decide.defrag.fleet import Ask, NodeRoom, NoDefragPlan, PlacedPod, DefragPlan, WaitingPod
from gpupair.decide.defrag.planner import SearchBound, Planner
from gpupair.decide.devices import placement
from gpupair.topology.layout import NodeState
from tests.layouts import seed_layout

LAYOUT = seed_layout()  # GPU0-3 NUMA0, GPU4-7 NUMA1
WHOLE = 1000


def one(gpus: int = 1, **fields) -> Ask:
    return Ask(gpus, **fields)


def fleet(spec: dict[str, list[tuple[str, tuple[int, ...], Ask, bool]]]) -> tuple[list[NodeRoom], list[PlacedPod]]:
    """Nodes (in the order given) with the pods on them: (uid, devices, ask, movable)."""
    rooms, pods = [], []
    for name, placed in spec.items():
        left = [WHOLE] * LAYOUT.size
        for uid, devices, ask, movable in placed:
            for device in devices:
                left[device] -= ask.milli
            pods.append(PlacedPod(uid, name, devices, ask, movable))
        rooms.append(NodeRoom(name, LAYOUT, tuple(left)))
    return rooms, pods


def pinned(uid: str, devices: tuple[int, ...]) -> tuple[str, tuple[int, ...], Ask, bool]:
    return (uid, devices, one(len(devices)), False)


def movable(uid: str, devices: tuple[int, ...], ask: Ask | None = None) -> tuple[str, tuple[int, ...], Ask, bool]:
    return (uid, devices, ask or one(len(devices)), True)


# B: GPU0, GPU1 and GPU4 free, the rest held by pods that stay: a place for a 1- or 2-GPU pod,
# never for a 4-GPU one.
B = [pinned("b2", (2,)), pinned("b3", (3,)), pinned("b5", (5,)), pinned("b6", (6,)), pinned("b7", (7,))]
FOUR = WaitingPod("w", one(4))


def test_fewest_moves_then_fewest_gpus_moved():
    # C (first in order) frees NUMA0 by moving one 2-GPU pod, A by moving one 1-GPU pod, D by
    # moving two 1-GPU pods: A wins (1 move, 1 GPU), although C comes first.
    rooms, pods = fleet({
        "C": [movable("c", (0, 1)), pinned("c4", (4,)), pinned("c5", (5,))],
        "A": [movable("a", (0,)), pinned("a4", (4,)), pinned("a5", (5,))],
        "D": [movable("d0", (0,)), movable("d1", (1,)), pinned("d4", (4,)), pinned("d5", (5,))],
        "B": B,
    })
    plan = Planner(rooms, pods).plan(FOUR)
    assert isinstance(plan, DefragPlan)
    assert (plan.node, plan.devices) == ("A", (0, 1, 2, 3))
    assert [m.pod.uid for m in plan.moves] == ["a"] and plan.gpus_moved == 1


def test_a_pod_that_fits_now_needs_no_move():
    rooms, pods = fleet({"A": [movable("a", (0,))], "B": B})
    plan = Planner(rooms, pods).plan(FOUR)
    assert isinstance(plan, DefragPlan) and plan.moves == () and plan.node == "A" and len(plan.devices) == 4


def test_never_moves_a_pod_that_may_not_move():
    rooms, pods = fleet({
        "A": [pinned("a", (0,)), pinned("a4", (4,))],
        "C": [movable("c", (0, 1)), pinned("c4", (4,)), pinned("c5", (5,))],
        "B": B,
    })
    plan = Planner(rooms, pods).plan(FOUR)
    assert isinstance(plan, DefragPlan) and [m.pod.uid for m in plan.moves] == ["c"]
    rooms, pods = fleet({"A": [pinned("a", (0,)), pinned("a4", (4,))], "B": B})
    answer = Planner(rooms, pods).plan(FOUR)
    assert isinstance(answer, NoDefragPlan) and "may not move" in answer.reason


def test_never_moves_a_pod_that_has_no_place_now():
    # a needs a GPU of a model only A has: moving it would make it wait.
    stuck = one(1, nodes=frozenset({"A"}))
    rooms, pods = fleet({"A": [movable("a", (0,), stuck), pinned("a4", (4, 5, 6, 7))], "B": B})
    answer = Planner(rooms, pods).plan(FOUR)
    assert isinstance(answer, NoDefragPlan) and "no place elsewhere" in answer.reason


def test_a_moved_pod_may_take_the_rest_of_the_freed_node():
    # NUMA1 has one free GPU: the pod on NUMA0 moves there, NUMA0 frees, no other node needed.
    rooms, pods = fleet({"A": [movable("a", (0,)), pinned("a4", (4,)), pinned("a5", (5,)), pinned("a6", (6,))]})
    plan = Planner(rooms, pods).plan(FOUR)
    assert isinstance(plan, DefragPlan)
    assert plan.devices == (0, 1, 2, 3) and [(m.node, m.devices) for m in plan.moves] == [("A", (7,))]


def test_a_share_is_made_by_moving_the_largest_share_first():
    share = lambda milli: one(1, milli=milli)  # noqa: E731
    rooms, pods = fleet({
        "A": [movable("s1", (0,), share(400)), movable("s2", (0,), share(300)),
              *(pinned(f"a{g}", (g,)) for g in range(1, 8))],
        "B": [movable("t", (0,), share(500)), *(pinned(f"b{g}", (g,)) for g in range(1, 8))],
    })
    plan = Planner(rooms, pods).plan(WaitingPod("w", share(600)))
    assert isinstance(plan, DefragPlan) and plan.node == "A" and plan.devices == (0,)
    assert [(m.pod.uid, m.node, m.devices) for m in plan.moves] == [("s1", "B", (0,))]


def test_several_waiting_pods_never_share_gpus():
    # Only A can be freed, by one move to B: the second waiting pod gets no plan, not A again.
    rooms, pods = fleet({"A": [movable("a", (0,)), pinned("a4", (4,)), pinned("a5", (5,))], "B": B})
    first, second = Planner(rooms, pods).plan_all([FOUR, WaitingPod("w2", one(4))])
    assert isinstance(first, DefragPlan) and isinstance(second, NoDefragPlan)
    # Two nodes to free: two plans, on disjoint GPUs, neither moving a pod into the other's set.
    rooms, pods = fleet({
        "A": [movable("a", (0,)), pinned("a4", (4,)), pinned("a5", (5,))],
        "C": [movable("c", (0,)), pinned("c4", (4,)), pinned("c5", (5,))],
        "B": B,
    })
    plans = Planner(rooms, pods).plan_all([FOUR, WaitingPod("w2", one(4))])
    assert all(isinstance(p, DefragPlan) for p in plans)
    taken = [(p.node, d) for p in plans for d in p.devices] + \
        [(m.node, d) for p in plans for m in p.moves for d in m.devices]
    assert len(taken) == len(set(taken)) == 10


def test_the_bound_on_moves_and_its_reason():
    rooms, pods = fleet({"A": [movable("a0", (0,)), movable("a1", (1,)), pinned("a4", (4,)), pinned("a5", (5,))],
                         "B": B})
    assert isinstance(Planner(rooms, pods, SearchBound(moves=2)).plan(FOUR), DefragPlan)
    answer = Planner(rooms, pods, SearchBound(moves=1)).plan(FOUR)
    assert isinstance(answer, NoDefragPlan)
    assert "within 1 moves" in answer.reason and "need more moves than the bound" in answer.reason


def test_the_bound_on_candidates_stops_the_search_and_says_so():
    # C's pod (first by node order) may run on C only; A's moves to B. One candidate checked: C's.
    rooms, pods = fleet({
        "C": [movable("c", (0,), one(1, nodes=frozenset({"C"}))), pinned("c4", (4, 5, 6, 7))],
        "A": [movable("a", (0,)), pinned("a4", (4,)), pinned("a5", (5,))],
        "B": B,
    })
    assert Planner(rooms, pods).plan(FOUR).node == "A"
    answer = Planner(rooms, pods, SearchBound(candidates=1)).plan(FOUR)
    assert isinstance(answer, NoDefragPlan) and "the first 1 checked" in answer.reason


def test_cpu_counts_where_it_is_given():
    rooms, pods = fleet({"A": [movable("a", (0,)), pinned("a4", (4,)), pinned("a5", (5,))], "B": B})
    short = [NodeRoom(r.name, r.layout, r.left, cpu=0, memory=0) for r in rooms]
    assert isinstance(Planner(short, pods).plan(FOUR), DefragPlan)  # it asks no CPU
    answer = Planner(short, pods).plan(WaitingPod("w", one(4, cpu=1000)))
    assert isinstance(answer, NoDefragPlan) and "lack CPU" in answer.reason


@pytest.mark.parametrize("seed", range(60))
def test_every_plan_on_a_random_fleet_is_carried_out_without_a_new_waiting_pod(seed):
    """Whatever the fleet: the plan moves only movable pods, within the bound; applied in order,
    no GPU is promised twice, the waiting pod and every moved pod sit on a close set of a node
    they may run on."""
    rng = random.Random(seed)
    spec: dict[str, list] = {}
    for n in "ABCD":
        left = [WHOLE] * LAYOUT.size
        placed = []
        for index in range(rng.randint(2, 9)):
            gpus = rng.choice([1, 1, 1, 2, 4])
            milli = rng.choice([WHOLE, WHOLE, 300, 500]) if gpus == 1 else WHOLE
            devices = close_set(LAYOUT, tuple(left), gpus, milli)
            if devices is None:
                continue
            for d in devices:
                left[d] -= milli
            placed.append((f"{n}{index}", devices, one(gpus, milli=milli), rng.random() < 0.7))
        spec[n] = placed
    rooms, pods = fleet(spec)
    waiting = WaitingPod("w", one(rng.choice([2, 4, 8])))
    bound = SearchBound(moves=rng.randint(1, 4))
    answer = Planner(rooms, pods, bound).plan(waiting)
    if isinstance(answer, NoDefragPlan):
        assert answer.reason
        return
    assert len(answer.moves) <= bound.moves
    assert all(m.pod.movable for m in answer.moves)
    left = {r.name: list(r.left) for r in rooms}
    for m in answer.moves:
        for d in m.pod.devices:
            left[m.pod.node][d] += m.pod.ask.milli
    for node, devices, ask in [(answer.node, answer.devices, waiting.ask),
                               *((m.node, m.devices, m.pod.ask) for m in answer.moves)]:
        assert len(devices) == ask.gpus and ask.may_run_on(node)
        assert all(left[node][d] >= ask.milli for d in devices)
        for d in devices:
            left[node][d] -= ask.milli
        if ask.milli == WHOLE:
            assert placement.is_close(NodeState(LAYOUT), devices)
