"""Decisions shared across nodes of the same hardware (gpupair/decide/picture/node_entries.py): a node decided
under a hold another node of the same shape was decided under reuses that decision, and the
answer is always the one its own report alone would give."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from gpupair.decide.judge.decisions import Decider
from gpupair.decide.pod.intent import Intent
from gpupair.decide.devices.policies import POLICIES
from gpupair.decide.judge.reservations import NO_HOLD, Hold
from gpupair.decide.picture.node_entries import ReportDecoder, ReportEntry
from gpupair.topology.layout import NO_NUMA, NodeLayout
from gpupair.topology.report import encode_annotations
from tests.extender_support import NOW
from tests.layouts import seed_layout


def _relinked(layout: NodeLayout, a: int, b: int, label: str) -> NodeLayout:
    rows = [list(row) for row in layout.links]
    rows[a][b] = rows[b][a] = label
    return replace(layout, links=tuple(tuple(row) for row in rows))


# Two nodes of the seed's hardware (only the UUIDs differ), one with GPU0-GPU1 on one PCIe
# switch, one whose devices report no NUMA node.
LAYOUTS = [
    seed_layout("GPU-a"),
    seed_layout("GPU-b"),
    _relinked(seed_layout("GPU-c"), 0, 1, "PIX"),
    replace(seed_layout("GPU-d"), devices=tuple(replace(d, numa_node=NO_NUMA) for d in seed_layout("GPU-d").devices)),
]
DECIDERS = [Decider(), Decider(policy=POLICIES["naive"])]
NOW_S = NOW.timestamp()


def _entry(decoder: ReportDecoder, layout: NodeLayout, free: frozenset[int]) -> ReportEntry:
    return decoder.decode(encode_annotations(layout, free, 1, NOW, holders=()))


def _verdict(decision):
    return decision.passes, decision.unresolvable, decision.reason, decision.plan, decision.score


asks = st.tuples(
    st.integers(0, len(LAYOUTS) - 1),  # the node asked first
    st.frozensets(st.integers(0, 7)),  # free
    st.frozensets(st.integers(0, 7), max_size=4),  # planned devices held
    st.integers(0, 3),  # GPUs held by count
    st.integers(1, 5),  # GPUs asked
    st.sampled_from(list(Intent)),
)


@settings(max_examples=150, deadline=None)
@given(st.lists(asks, min_size=1, max_size=20))
def test_a_shared_decision_is_the_one_the_node_alone_would_take(sequence):
    decoder = ReportDecoder(stale_after=300.0)
    for index, free, planned, count, gpus, intent in sequence:
        # Each ask on every node, by each policy, first on the node drawn: every shared decision
        # is asked again where it must not leak.
        for node in sorted(range(len(LAYOUTS)), key=lambda n: n != index):
            entry = _entry(decoder, LAYOUTS[node], free)
            for decider in DECIDERS:
                alone = ReportEntry(entry.report, stale_after=300.0)  # nothing shared, nothing memoised
                hold = Hold(planned, count)
                got = entry.decide(decider, f"n{node}", gpus, hold, NOW_S, intent=intent)
                assert _verdict(got) == _verdict(alone.decide(decider, f"n{node}", gpus, hold, NOW_S, intent=intent))


def test_nodes_of_the_same_hardware_share_a_decision_and_other_hardware_does_not():
    decoder = ReportDecoder(stale_after=300.0)
    free = frozenset(range(8))
    a, b, switched = (_entry(decoder, LAYOUTS[i], free) for i in (0, 1, 2))
    first = a.decide(Decider(), "a", 2, NO_HOLD, NOW_S)
    assert b.decide(Decider(), "b", 2, NO_HOLD, NOW_S) is first
    # GPU0 and GPU1 on one PCIe switch: the same pair scores higher there.
    other = switched.decide(Decider(), "c", 2, NO_HOLD, NOW_S)
    assert other.plan == first.plan == (0, 1) and other.score == first.score + 1
    # Another hold, other free devices, or a stale report (its reason is the node's own): not shared.
    held = Hold(frozenset({0}))
    assert b.decide(Decider(), "b", 2, held, NOW_S) is a.decide(Decider(), "a", 2, held, NOW_S) is not first
    assert _entry(decoder, LAYOUTS[1], frozenset(range(1, 8))).decide(Decider(), "b", 2, NO_HOLD, NOW_S) is not first
    assert a.decide(Decider(), "a", 2, NO_HOLD, NOW_S + 301) is not b.decide(Decider(), "b", 2, NO_HOLD, NOW_S + 301)
