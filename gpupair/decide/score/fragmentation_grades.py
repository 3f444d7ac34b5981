"""gpupair's fragmentation score for a set of nodes, from rows of what each has left: the one
function the extender's prioritize (extender/fragmentation_score.py, from its watches and the
reports) and the simulator's trace score (simulator/trace/models/gpupair_score.py, from the trace's
arrays) both call, so a change to the measure or the grades reaches both
(tests/simulator/test_fragmentation_parity.py holds them equal).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from gpupair.decide.score.fragmentation import MILLI, PACKING, SHARE_PACKING, Fragmentation, grades


@dataclass(frozen=True)
class NodeRows:
    """One row per node, before and after the pod scored is placed there."""

    cpu_left: np.ndarray  # [n] CPU milli left before the pod
    before: np.ndarray  # [n, G] each GPU's milli left before the pod (0 past the node's GPUs)
    after: np.ndarray  # [n, G] the same with the pod's GPUs taken
    model: np.ndarray  # [n] the node's product, an index into the measure's models
    capacity: np.ndarray  # [n] the node's GPU milli in all
    # (k, after): whether each row holds k whole GPUs as close as gpupair requires, before the
    # pod or after it (alike where ``after`` equals ``before``)
    whole_fits: Callable[[int, bool], np.ndarray]
    memory_left: np.ndarray | None = None  # [n] memory MiB left before the pod; None: not counted


def fragmentation_grades(measure: Fragmentation, rows: NodeRows, pod_cpu: int, pod_memory: int = 0,
                         before_shapes: np.ndarray | None = None) -> np.ndarray:
    """0-10 per row: how little the pod (``pod_cpu`` milli CPU, ``pod_memory`` MiB, its GPUs in
    ``rows.after``) adds to the fragmentation ``measure`` counts. ``before_shapes``: the rows'
    ``measure.per_shape`` before the pod, where the caller keeps it per row (the extender's
    ScoreRows); None: read from ``rows``."""
    weight = measure.scarcity(rows.before, rows.model)
    memory = rows.memory_left
    total = rows.before.sum(axis=1)
    if before_shapes is None:
        before_shapes = shapes_before(measure, rows)
    before = measure.amount_from(before_shapes, total, weight)
    memory_after = None if memory is None else memory - pod_memory
    if np.array_equal(rows.after, rows.before):  # the pod takes no GPU: its GPU side is as before
        after = measure.amount_from(measure.with_less(before_shapes, total, rows.cpu_left - pod_cpu, memory_after),
                                    total, weight)
    else:
        fits = {k: rows.whole_fits(k, True) for k in measure.whole_sizes}
        after = measure.amount_of(rows.cpu_left - pod_cpu, rows.model, measure.gpu_side(rows.after, fits), weight,
                                  memory_after)
    taken = total - rows.after.sum(axis=1)  # the pod's GPU milli, alike on every row
    share = bool(len(taken)) and 0 < int(taken[0]) < MILLI
    return grades(after - before, rows.after.sum(axis=1), rows.capacity, SHARE_PACKING if share else PACKING)


def shapes_before(measure: Fragmentation, rows: NodeRows) -> np.ndarray:
    """``measure.per_shape`` of the rows before the pod: what a caller may keep per row."""
    fits = {k: rows.whole_fits(k, False) for k in measure.whole_sizes}
    return measure.per_shape(rows.cpu_left, rows.model, measure.gpu_side(rows.before, fits), rows.memory_left)
