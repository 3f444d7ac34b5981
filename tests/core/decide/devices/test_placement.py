"""Placement decisions: fit, best-fit scores, and the extender's Decider the simulator shares."""

from hypothesis import given, settings
from hypothesis import strategies as st

from gpupair.decide.judge.decisions import Decider, FilterOutcome, NodeView, Unreported
from gpupair.decide.devices import placement
from gpupair.topology.layout import Device, NodeLayout, NodeState
from gpupair.simulator.shapes import seed_layout

SEED = seed_layout()


def state(free):
    return NodeState(SEED, frozenset(free))


def filtered(decider, gpus, nodes):
    """What the extender's filter answers for these nodes: each node's decision, gathered."""
    outcome = FilterOutcome()
    for node in nodes:
        outcome.add(node.name, decider.decide(gpus, node))
    return outcome


def scores(decider, gpus, nodes):
    return {node.name: decider.decide(gpus, node).score for node in nodes}


def test_pair_fails_when_each_numa_node_has_one_free_and_says_so():
    fit = placement.fit(state({3, 4}), 2)
    assert not fit.feasible and fit.resolvable
    assert fit.reason == "need 2 GPUs on one NUMA node; free: NUMA0=1 NUMA1=1"


def test_more_gpus_than_the_node_has_is_unresolvable():
    fit = placement.fit(state(range(8)), 16)
    assert not fit.feasible and not fit.resolvable


def test_eight_gpus_need_both_numa_nodes_of_the_seed_node():
    assert placement.min_numa_nodes(SEED, 8) == 2
    assert placement.fit(state(range(8)), 8).feasible
    assert not placement.fit(state(range(7)), 8).feasible


def test_best_fit_prefers_a_broken_numa_node():
    whole = placement.score(state({0, 1, 2, 3}), (0, 1))
    broken = placement.score(state({2, 3, 4, 5, 6, 7}), (2, 3))
    assert broken > whole


def test_decider_fails_cross_only_nodes_and_passes_same_numa_ones():
    decider = Decider()
    outcome = filtered(decider, 2, [NodeView("a", state({3, 4})), NodeView("b", state({1, 2, 4})),
                                    NodeView("c", None, problem="no gpupair report")])
    assert outcome.passed == ["b"]
    assert outcome.failed == {"a": "need 2 GPUs on one NUMA node; free: NUMA0=1 NUMA1=1",
                              "c": "no gpupair report"}


def test_reservations_hide_devices_promised_to_an_earlier_pod():
    decider = Decider()
    node = NodeView("a", state({1, 2, 5}), reserved=frozenset({1, 2}))
    assert not decider.decide(2, node).passes


def test_unreported_nodes_pass_unscored_when_told_to():
    decision = Decider(unreported=Unreported.PASS).decide(2, NodeView("c", None, problem="stale"))
    assert decision.passes and decision.score == 0


def test_pods_without_gpus_and_single_gpu_pods_pass_everywhere():
    decider = Decider()
    nodes = [NodeView("a", state(set())), NodeView("b", None, problem="missing")]
    assert filtered(decider, 0, nodes).passed == ["a", "b"]
    assert filtered(decider, 1, nodes).passed == ["a", "b"]
    assert set(scores(decider, 0, nodes).values()) == {0}


def test_single_gpu_pod_is_steered_to_a_broken_numa_node():
    decider = Decider()
    given = scores(decider, 1, [NodeView("whole", state(range(8))), NodeView("broken", state({3}))])
    assert given["broken"] > given["whole"]


@st.composite
def fleets(draw):
    return [frozenset(draw(st.sets(st.integers(0, 7)))) for _ in range(draw(st.integers(1, 6)))]


@settings(max_examples=300, deadline=None)
@given(fleets(), st.sampled_from([2, 3, 4]))
def test_never_across_numa_while_some_node_has_k_free_in_one_numa_node(free_sets, k):
    nodes = [NodeView(f"n{i}", state(free)) for i, free in enumerate(free_sets)]
    decider = Decider()
    outcome = filtered(decider, k, nodes)
    somewhere = any(max(len(m) for m in state(f).free_by_numa().values()) >= k for f in free_sets)
    assert bool(outcome.passed) == somewhere
    for name in outcome.passed:
        plan = decider.decide(k, nodes[int(name[1:])]).plan
        assert len({SEED.numa_of(i) for i in plan}) == 1


@settings(max_examples=300, deadline=None)
@given(st.sets(st.integers(0, 15)), st.integers(0, 16))
def test_scores_stay_within_0_to_10(free, k):
    layout = NodeLayout(
        tuple(Device(i, numa_node=i // 4) for i in range(16)),
        tuple(tuple("X" if i == j else ("PIX" if i // 2 == j // 2 else "NODE" if i // 4 == j // 4 else "SYS")
                    for j in range(16)) for i in range(16)),
    )
    for score in scores(Decider(), k, [NodeView("n", NodeState(layout, frozenset(free)))]).values():
        assert 0 <= score <= 10


def test_numa_groups_are_inferred_from_sys_links_when_the_box_reports_none():
    from pathlib import Path

    from gpupair.topology.smi_topo import parse_topo_matrix

    text = (Path(__file__).parents[3] / "fixtures" / "topo" / "vllm-11122-8gpu-pix-pxb.txt").read_text()
    layout = parse_topo_matrix(text).to_layout()  # NUMA Affinity N/A on every GPU
    assert list(layout.numa_nodes.values()) == [(0, 1, 2, 3), (4, 5, 6, 7)]
    fit = placement.fit(NodeState(layout, frozenset({3, 4})), 2)
    assert fit.reason == "need 2 GPUs on one NUMA node; free: NUMA?0=1 NUMA?1=1"


@given(free=st.sets(st.integers(0, 7)), held=st.integers(0, 8), k=st.integers(1, 8))
@settings(max_examples=300, deadline=None)
def test_worst_case_take_is_no_better_than_any_real_take(free, held, k):
    """A pod that fits after the worst-case take fits whatever ``held`` devices were really
    taken, and the worst case is itself one of the real takes."""
    from itertools import combinations

    state = NodeState(seed_layout(), frozenset(free))
    worst = placement.worst_case_take(state, held)
    assert worst.free <= state.free and len(state.free - worst.free) == min(held, len(free))
    if placement.fit(worst, k).feasible:
        for taken in combinations(sorted(free), min(held, len(free))):
            assert placement.fit(state.take(taken), k).feasible
