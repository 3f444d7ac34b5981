"""The prioritize verb under ``--score fragmentation``: gpupair's fragmentation score
(gpupair/decide/fragmentation.py) for every offered node, CPU-only pods included.

Per node it takes what the extender already knows (the report's free GPUs less what bound pods
hold, the set the device plugin or allocator is expected to take) plus what ``ClusterUsage``
keeps: the node's CPU left and the shapes of the cluster's pods. A node the pod cannot go to, or
one without a usable report or a known CPU, gets 0: no opinion, and no part in the grading.

Registered for every pod (no ``managedResources``): a CPU pod placed where it strands GPUs costs
as much as a badly placed GPU pod (docs/extender.md, docs/simulate.md).
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from gpupair.decide import placement
from gpupair.decide.fragmentation import MILLI, grades
from gpupair.decide.intent import Intent
from gpupair.decide.reservations import NO_HOLD
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
    rows: list[tuple[int, NodeState, tuple[int, ...], int]] = []
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
        rows.append((index, state, plan, cpu_left))
    if not rows:
        return scores
    measure = usage.workload.measure([""])
    width = max(state.layout.size for _, state, _, _ in rows)
    left = np.zeros((len(rows), width), dtype=np.int64)
    for row, (_, state, _, _) in enumerate(rows):
        left[row, list(state.free)] = MILLI
    after = left.copy()
    for row, (_, _, plan, _) in enumerate(rows):
        after[row, list(plan)] = 0

    def fits(taken: bool) -> dict[int, np.ndarray]:
        return {k: np.array([_fits(state.layout, state.free - frozenset(plan) if taken else state.free, k)
                             for _, state, plan, _ in rows]) for k in measure.whole_sizes}

    cpu_left = np.array([c for _, _, _, c in rows], dtype=np.int64)
    model = np.zeros(len(rows), dtype=np.int64)
    grown = measure.amount(cpu_left - cpu, after, model, fits(True)) - measure.amount(cpu_left, left, model, fits(False))
    capacity = np.array([state.layout.size * MILLI for _, state, _, _ in rows], dtype=np.int64)
    for (index, _, _, _), grade in zip(rows, grades(grown, after.sum(axis=1), capacity).tolist()):
        scores[index] = grade
    return scores
