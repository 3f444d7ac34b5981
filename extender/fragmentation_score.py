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
from gpupair.topology.limits import MAX_GPUS


@lru_cache(maxsize=65536)
def _fits(layout: NodeLayout, free_mask: int, gpus: int) -> bool:
    free = frozenset(i for i in range(layout.size) if free_mask >> i & 1)
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
        hold = holds.get(name, NO_HOLD)
        # Without a hold the report's state is what is available (no view to build per node).
        state = entry.view(name, hold, False, alive).available() if hold else entry.report.state
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
    # Arrays from each node's free mask (kept on its state, which lives as long as its report)
    # and the planned set's: per-row Python cost more than the measure at a thousand nodes.
    sizes = [len(state.layout.devices) for state, *_ in nodes]
    bits = np.int64(1) << np.arange(max(sizes), dtype=np.int64)
    masks = np.array([state.free_mask for state, *_ in nodes], dtype=np.int64)
    planned = any(plan for _, plan, *_ in nodes)  # a CPU-only pod takes no GPU: after is before
    masks_after = masks & ~np.array([sum(1 << gpu for gpu in plan) for _, plan, *_ in nodes], dtype=np.int64) \
        if planned else masks
    before = ((masks[:, None] & bits) != 0) * MILLI
    after = ((masks_after[:, None] & bits) != 0) * MILLI
    # Nodes alike (one layout object, one free mask) ask the placement rule once.
    numbers: dict[int, int] = {}
    layouts = [state.layout for state, *_ in nodes]
    layout_of = np.array([numbers.setdefault(id(layout), len(numbers)) for layout in layouts], dtype=np.int64)
    first = dict(zip(layout_of.tolist(), layouts))  # a number's layout: one object
    known: dict[tuple[int, bool], np.ndarray] = {}

    def whole_fits(k: int, placed: bool) -> np.ndarray:
        key = (k, placed and planned)
        if key not in known:
            alike, inverse = np.unique((layout_of << MAX_GPUS) | (masks_after if key[1] else masks),
                                       return_inverse=True)
            answers = np.array([_fits(first[int(code) >> MAX_GPUS], int(code) & ((1 << MAX_GPUS) - 1), k)
                                for code in alike], dtype=bool)
            known[key] = answers[inverse.reshape(-1)]
        return known[key]

    return NodeRows(
        cpu_left=np.array([cpu_left for _, _, cpu_left, _ in nodes], dtype=np.int64),
        before=before, after=after,
        model=np.array([model for *_, model in nodes], dtype=np.int64),
        capacity=np.array(sizes, dtype=np.int64) * MILLI,
        whole_fits=whole_fits,
    )
