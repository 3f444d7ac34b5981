"""The preemption core (gpupair/decide/judge/preemption.py) on its own: hypothesis properties against the
Decider the filter runs, and the cases the docstring names."""

from __future__ import annotations

from itertools import combinations

from hypothesis import assume, given, settings
from hypothesis import strategies as st

from gpupair.decide.judge.decisions import Decider, NodeView
from gpupair.decide.judge.preemption import DROPPED, KEPT, TRIMMED, UNKNOWN, NodeSituation, Preemption, Victim, VictimGPUs
from gpupair.decide.judge.reservations import Hold
from gpupair.decide.pod.intent import Intent
from gpupair.topology.layout import NodeState
from tests.layouts import seed_layout

LAYOUT = seed_layout()  # GPU0-3 on NUMA0, GPU4-7 on NUMA1
DECIDER = Decider()


def feasible(gpus: int, intent: Intent, free: frozenset[int], freed: frozenset[int]) -> bool:
    """Would the filter pass this node once ``freed`` are free too?"""
    view = NodeView("n", NodeState(LAYOUT, free | freed))
    return DECIDER.decide(gpus, view, intent).passes


@st.composite
def cases(draw):
    """A node with some GPUs free, the rest held by pods (or idle-but-taken), some of them victims."""
    free = draw(st.frozensets(st.integers(0, 7), max_size=7))
    busy = [i for i in range(8) if i not in free]
    owner = {i: draw(st.integers(0, 5)) for i in busy}  # pod 0..5 holds each busy GPU
    pods = sorted(set(owner.values()))
    victims = draw(st.lists(st.sampled_from(pods), unique=True)) if pods else []
    cpu_only = draw(st.integers(0, 1))  # a victim the scheduler chose for CPU, holding no GPU
    devices = [frozenset(i for i in busy if owner[i] == p) for p in victims] + [frozenset()] * cpu_only
    assume(devices)  # kube-scheduler proposes at least one victim on every candidate node
    gpus = draw(st.sampled_from([2, 3, 4]))
    intent = draw(st.sampled_from(list(Intent)))
    return free, devices, gpus, intent


@settings(max_examples=300, deadline=None)
@given(cases())
def test_a_kept_node_becomes_feasible_and_a_dropped_one_would_not_have(case):
    free, devices, gpus, intent = case
    victims = [Victim(f"uid-{k}") for k in range(len(devices))]
    verdict = Preemption(DECIDER, gpus, intent).judge(
        NodeSituation("n", NodeState(LAYOUT, free)), victims, [VictimGPUs(d) for d in devices])
    everything = frozenset().union(*devices)
    if verdict.keep is None:
        assert verdict.outcome == DROPPED
        assert not feasible(gpus, intent, free, everything)
        return
    assert verdict.outcome in (KEPT, TRIMMED) and verdict.keep
    kept = [devices[victims.index(v)] for v in verdict.keep]
    assert feasible(gpus, intent, free, frozenset().union(*kept))
    # The trim is the smallest: no fewer GPU-holding victims free a set.
    if verdict.outcome == TRIMMED:
        holding = [d for d in devices if d]
        kept_holding = [d for d in kept if d]
        assert all(d in kept for d in devices if not d)  # CPU-only victims always stay
        for smaller in combinations(holding, len(kept_holding) - 1):
            assert not feasible(gpus, intent, free, frozenset().union(*smaller))


def test_victims_that_free_only_a_cross_socket_pair_are_not_evicted_for_a_required_pod():
    judge = Preemption(DECIDER, 2, Intent.REQUIRED)
    node = NodeSituation("n", NodeState(LAYOUT, frozenset()))
    victims = [Victim("a"), Victim("b")]
    verdict = judge.judge(node, victims, [VictimGPUs(frozenset({3})), VictimGPUs(frozenset({4}))])
    assert verdict.keep is None and "need 2 GPUs on one NUMA node" in verdict.reason
    # The same eviction is what a preferred pod asked for: it runs on the SYS pair.
    assert Preemption(DECIDER, 2, Intent.PREFERRED).judge(
        node, victims, [VictimGPUs(frozenset({3})), VictimGPUs(frozenset({4}))]).keep == tuple(victims)


def test_trims_to_the_victims_that_free_a_close_pair():
    node = NodeSituation("n", NodeState(LAYOUT, frozenset()))
    victims = [Victim("a"), Victim("b"), Victim("c"), Victim("cpu")]
    gpus_of = [VictimGPUs(frozenset({5})), VictimGPUs(frozenset({2})), VictimGPUs(frozenset({3})),
               VictimGPUs(frozenset())]
    verdict = Preemption(DECIDER, 2, Intent.REQUIRED).judge(node, victims, gpus_of)
    assert verdict.outcome == TRIMMED
    assert verdict.keep == (Victim("b"), Victim("c"), Victim("cpu"))


def test_a_node_that_already_fits_keeps_the_schedulers_victims():
    """gpupair has no GPU objection: the scheduler chose these victims for what only it sees."""
    node = NodeSituation("n", NodeState(LAYOUT, frozenset({0, 1})))
    victims = [Victim("a")]
    verdict = Preemption(DECIDER, 2, Intent.REQUIRED).judge(node, victims, [VictimGPUs(frozenset({5}))])
    assert verdict.outcome == KEPT and verdict.keep == (Victim("a"),)


def test_a_hold_of_a_pod_bound_but_not_reported_is_freed_by_evicting_it():
    # GPU0 and GPU1 show free, but a pod bound a moment ago was promised them: evicting it frees them.
    node = NodeSituation("n", NodeState(LAYOUT, frozenset({0, 1})))
    verdict = Preemption(DECIDER, 2, Intent.REQUIRED).judge(
        node, [Victim("new")], [VictimGPUs(frozenset(), Hold(frozenset({0, 1})))])
    assert verdict.outcome == KEPT and verdict.keep == (Victim("new"),)
    # Held for someone else (not a victim), they stay promised: no set, the node is dropped.
    taken = NodeSituation("n", NodeState(LAYOUT, frozenset({0, 1})), others=Hold(frozenset({0, 1})))
    assert Preemption(DECIDER, 2, Intent.REQUIRED).judge(
        taken, [Victim("x")], [VictimGPUs(frozenset({4}))]).keep is None


def test_unknown_devices_are_judged_both_ways():
    free = NodeState(LAYOUT, frozenset({0}))
    judge = Preemption(DECIDER, 2, Intent.REQUIRED)
    # Best case: the unknown victim frees GPU1 (next to free GPU0), so gpupair cannot say no...
    unknown = judge.judge(NodeSituation("n", free), [Victim("u")], [VictimGPUs(None)])
    assert unknown.outcome == UNKNOWN and unknown.keep == (Victim("u"),) and "unknown" in unknown.reason
    # ...unless the ledger shows every device it could hold is someone else's.
    claimed = judge.judge(NodeSituation("n", free, claimed=frozenset({1, 2, 3, 4, 5, 6, 7})),
                          [Victim("u")], [VictimGPUs(None)])
    assert claimed.keep is None
    # A known victim that frees a pair is enough: kept, the unknown one stays a victim too.
    known = judge.judge(NodeSituation("n", free), [Victim("u"), Victim("k")],
                        [VictimGPUs(None), VictimGPUs(frozenset({1}))])
    assert known.outcome == KEPT and known.keep == (Victim("u"), Victim("k"))


def test_a_node_without_a_report_follows_the_filter():
    node = NodeSituation("n", None, "no gpupair report (gpupair.io/topology missing)")
    victims = [Victim("a")]
    assert Preemption(DECIDER, 2, Intent.REQUIRED).judge(node, victims, [VictimGPUs(None)]).keep is None
    assert Preemption(DECIDER, 2, Intent.NONE).judge(node, victims, [VictimGPUs(None)]).keep == (Victim("a"),)
