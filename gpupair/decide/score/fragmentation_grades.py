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
    order: np.ndarray | None = None  # [n] the node's place in the fixed order (``tie_order``); None: none


def fragmentation_grades(measure: Fragmentation, rows: NodeRows, pod_cpu: int, pod_memory: int = 0,
                         before_shapes: np.ndarray | None = None, after_shapes: np.ndarray | None = None) -> np.ndarray:
    """0-10 per row: how little the pod (``pod_cpu`` milli CPU, ``pod_memory`` MiB, its GPUs in
    ``rows.after``) adds to the fragmentation ``measure`` counts. ``before_shapes`` and
    ``after_shapes``: the rows' ``shapes_of`` before the pod and placed, where the caller keeps
    them per row (the extender's ScoreRows); None: read from ``rows``."""
    weight = measure.scarcity(rows.before, rows.model)
    total = rows.before.sum(axis=1)
    if before_shapes is None:
        before_shapes = shapes_of(measure, rows)
    before = measure.amount_from(before_shapes, total, weight)
    unchanged = rows.after is rows.before or (after_shapes is None and np.array_equal(rows.after, rows.before))
    left = total if unchanged else rows.after.sum(axis=1)
    if after_shapes is None:  # a pod taking no GPU leaves its GPU side as it was
        after_shapes = before_shapes if unchanged else shapes_of(measure, rows, True)
    memory_after = None if rows.memory_left is None else rows.memory_left - pod_memory
    after = measure.amount_from(measure.with_less(after_shapes, left, rows.cpu_left - pod_cpu, memory_after), left,
                                weight)
    taken = total - left  # the pod's GPU milli, alike on every row
    share = bool(len(taken)) and 0 < int(taken[0]) < MILLI
    return grades(after - before, left, rows.capacity, SHARE_PACKING if share else PACKING, rows.order)


def shapes_of(measure: Fragmentation, rows: NodeRows, placed: bool = False) -> np.ndarray:
    """``measure.per_shape`` of the rows before the pod, or with its GPUs taken (``placed``), their
    CPU and memory as before it either way (``Fragmentation.with_less`` takes the pod's): what a
    caller may keep per row, and per kind of pod where placed."""
    fits = {k: rows.whole_fits(k, placed) for k in measure.whole_sizes}
    side = measure.gpu_side(rows.after if placed else rows.before, fits)
    return measure.per_shape(rows.cpu_left, rows.model, side, rows.memory_left)
