"""The prioritize verb under ``--score fragmentation``: gpupair's fragmentation score
(gpupair/decide/score/fragmentation.py) for every offered node, CPU-only pods included.

Per node it takes what the extender already knows (the report's free GPUs less what bound pods
hold, the set the device plugin or allocator is expected to take) plus what ``ClusterUsage``
keeps: the node's CPU left, its GPU product (its report's, else its GFD label) and the shapes of
the cluster's pods with the products each accepts. A node the pod cannot go to, or one without a
usable report or a known CPU, gets 0: no opinion, and no part in the grading. The grades are
``fragmentation_grades``'s, the simulator's trace score's too.

Registered for every pod (no ``managedResources``): a CPU pod placed where it strands GPUs costs
as much as a badly placed GPU pod (docs/extender.md, docs/simulate.md).
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from gpupair.decide.devices import placement
from gpupair.decide.judge.decisions import preferred_band
from gpupair.decide.score.fragmentation import MILLI
from gpupair.decide.score.fragmentation_grades import NodeRows, fragmentation_grades
from gpupair.decide.pod.intent import Intent
from gpupair.decide.judge.reservations import NO_HOLD
from gpupair.extender.cluster_usage import ClusterUsage
from gpupair.extender.evaluation import Evaluator, Offer
from gpupair.topology.layout import NodeLayout, NodeState


@lru_cache(maxsize=65536)
def _fits(layout: NodeLayout, free: frozenset[int], gpus: int) -> bool:
    return gpus <= layout.size and placement.fit(NodeState(layout, free), gpus).feasible


def fragmentation_scores(evaluator: Evaluator, usage: ClusterUsage, offer: Offer, gpus: int, cpu: int,
                         intent: Intent = Intent.REQUIRED) -> list[int]:
    """0-10 per offered name, in order."""
    names = offer.names
    scores = [0] * len(names)
    if not usage.workload:
        return scores
    decisions = evaluator.decisions(gpus, offer, intent=intent) if gpus > 0 else None
    now, holds = evaluator.clock(), evaluator.reservations.by_node()
    rows: list[tuple[int, NodeState, tuple[int, ...], int, str]] = []
    for index, name in enumerate(names):
        plan: tuple[int, ...] = ()
        if decisions is not None:
            if not decisions[index].passes or decisions[index].plan is None:
                continue
            plan = decisions[index].plan
        entry = offer.entry_of(name) or offer.unknown
        alive = evaluator.alive(name)
        if entry.report is None or entry.is_stale(now, alive):
            continue
        state = entry.view(name, holds.get(name, NO_HOLD), False, alive).available()
        cpu_left = usage.cpu_left(name)
        if state is None or cpu_left is None:
            continue
        rows.append((index, state, plan, cpu_left, usage.product(name, entry.report.product)))
    if not rows:
        return scores
    models = sorted({product for *_, product in rows})
    measure = usage.measure(models)
    graded = fragmentation_grades(measure, node_rows([(state, plan, cpu_left, models.index(product))
                                                       for _, state, plan, cpu_left, product in rows]), cpu)
    banded = decisions is not None and not all(decisions[index].preferred_met for index, *_ in rows)
    for (index, *_), grade in zip(rows, graded.tolist()):
        # A preferred pod: the nodes with the set it prefers first, fragmentation within each tier.
        scores[index] = preferred_band(grade, decisions[index].preferred_met) if banded else grade
    return scores


def node_rows(nodes: list[tuple[NodeState, tuple[int, ...], int, int]]) -> NodeRows:
    """The grading rows of what the extender knows per node: its GPUs available (whole GPUs:
    the report's free less what bound pods hold), the pod's planned set, its CPU left and its
    product's index."""
    width = max(state.layout.size for state, *_ in nodes)
    before = np.zeros((len(nodes), width), dtype=np.int64)
    for row, (state, *_) in enumerate(nodes):
        before[row, list(state.free)] = MILLI
    after = before.copy()
    for row, (_, plan, *_) in enumerate(nodes):
        after[row, list(plan)] = 0

    def whole_fits(k: int, placed: bool) -> np.ndarray:
        return np.array([_fits(state.layout, state.free - frozenset(plan) if placed else state.free, k)
                         for state, plan, *_ in nodes])

    return NodeRows(
        cpu_left=np.array([cpu_left for _, _, cpu_left, _ in nodes], dtype=np.int64),
        before=before, after=after,
        model=np.array([model for *_, model in nodes], dtype=np.int64),
        capacity=np.array([state.layout.size * MILLI for state, *_ in nodes], dtype=np.int64),
        whole_fits=whole_fits,
    )
