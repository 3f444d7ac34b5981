"""A fragmentation score for gpupair's extender, as the trace replay models it (proposed; the
live extender's prioritize still scores with ``placement.score``: docs/extender.md).

FGD's measure, made NUMA-aware and learned rather than given:
- the target workload is what the extender has been asked to place so far (each pod's CPU,
  GPUs and share), not a list handed to it;
- a shape of several whole GPUs fits a node only where gpupair's rule lets it: on the fewest
  NUMA nodes its size allows (``placement.fit``), so GPUs stranded across a socket count as lost;
- the pod's GPUs are those the node's picker is expected to take (the device plugin's or the
  allocator's set; a share on the GPU the sharing layer packs it onto), as the extender plans.

Its 0-10 answer: 10 where the pod adds the least fragmentation among the nodes asked about, one
point less for each further ``QUANTUM`` milli. It needs each node's CPU left and every pod, GPU
or not, to reach it: the every-pod registration (docs/dra.md), not ``managedResources``.
"""

from __future__ import annotations

from collections import Counter

import numpy as np

from gpupair.decide.placement import MAX_SCORE
from gpupair.simulator.trace.cluster import TraceCluster
from gpupair.simulator.trace.devices import Tables
from gpupair.simulator.trace.fgd import Fragmentation
from gpupair.simulator.trace.files import MILLI, TracePod

QUANTUM = 10  # milli of fragmentation a point of score stands for


class FragmentationScore:
    def __init__(self, cluster: TraceCluster, tables: Tables):
        self.cluster, self.tables = cluster, tables
        self.seen: Counter = Counter()

    def _measure(self) -> Fragmentation:
        total = sum(self.seen.values())
        return Fragmentation([(shape, count / total) for shape, count in self.seen.items()], self.cluster.models)

    def _whole_fits(self, measure: Fragmentation, rows: np.ndarray, masks: np.ndarray) -> dict[int, np.ndarray]:
        ids = self.cluster.layout_id[rows]
        return {k: self.tables.lookup("fits", ids, masks, k) for k in measure.whole_sizes}

    def scores(self, pod: TracePod, rows: np.ndarray) -> np.ndarray:
        c = self.cluster
        if pod.gpus:
            self.seen[pod.shape] += 1
        if not self.seen:
            return np.zeros(len(rows), dtype=np.int64)
        measure = self._measure()
        left, cpu, model = c.left[rows], c.cpu_left[rows], c.model[rows]
        before = measure.amount(cpu, left, model, self._whole_fits(measure, rows, c.free_mask[rows]))
        after = left.copy()
        if pod.gpus and pod.milli_per_gpu < MILLI:
            packed = np.argmin(np.where(left >= pod.milli_per_gpu, left, MILLI + 1), axis=1)
            after[np.arange(len(rows)), packed] -= pod.milli_per_gpu
        elif pod.gpus:
            for i, row in enumerate(rows):
                after[i, list(self.tables.pick(int(c.layout_id[row]), int(c.free_mask[row]), pod.gpus))] = 0
        masks = (after == MILLI).astype(np.int64) @ c.bits
        grown = measure.amount(cpu - pod.milli_cpu, after, model, self._whole_fits(measure, rows, masks)) - before
        steps = np.ceil((grown - grown.min()) / QUANTUM - 1e-9)
        return np.clip(MAX_SCORE - steps, 0, MAX_SCORE).astype(np.int64)
