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


def fragmentation_grades(measure: Fragmentation, rows: NodeRows, pod_cpu: int, pod_memory: int = 0) -> np.ndarray:
    """0-10 per row: how little the pod (``pod_cpu`` milli CPU, ``pod_memory`` MiB, its GPUs in
    ``rows.after``) adds to the fragmentation ``measure`` counts."""
    def fits(after: bool) -> dict[int, np.ndarray]:
        return {k: rows.whole_fits(k, after) for k in measure.whole_sizes}

    weight = measure.scarcity(rows.before, rows.model)
    side = measure.gpu_side(rows.before, fits(False))
    memory = rows.memory_left
    before = measure.amount_of(rows.cpu_left, rows.model, side, weight, memory)
    if not np.array_equal(rows.after, rows.before):  # else the pod takes no GPU: its GPU side is as before
        side = measure.gpu_side(rows.after, fits(True))
    grown = measure.amount_of(rows.cpu_left - pod_cpu, rows.model, side, weight,
                              None if memory is None else memory - pod_memory) - before
    taken = rows.before.sum(axis=1) - rows.after.sum(axis=1)  # the pod's GPU milli, alike on every row
    share = bool(len(taken)) and 0 < int(taken[0]) < MILLI
    return grades(grown, rows.after.sum(axis=1), rows.capacity, SHARE_PACKING if share else PACKING)
