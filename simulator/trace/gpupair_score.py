"""gpupair's fragmentation score over a trace's nodes (gpupair/decide/fragmentation.py), as the
extender runs it with ``--score fragmentation`` behind the every-pod registration.

What the extender is modelled to know: every pod (its CPU, GPUs and share) through its pod
watch, so the workload it measures against is the shapes of the pods seen so far; each node's
CPU left; each GPU's share left; and, for the pod scored, the GPUs its node's picker is expected
to take (the device plugin's or the allocator's set; a share on the GPU the sharing layer packs
it onto, the one with the least left that holds it).

``whole_only``: the extender as it runs today, whose reporters publish whole GPUs. A GPU with
any share taken looks taken, a share pod looks like a one-GPU pod, and where a share lands is
not foreseen (it changes nothing the extender sees).
"""

from __future__ import annotations

import numpy as np

from gpupair.decide.fragmentation import MILLI, Workload, grades
from gpupair.simulator.trace.cluster import TraceCluster
from gpupair.simulator.trace.devices import Tables
from gpupair.simulator.trace.files import TracePod


class FragmentationScore:
    def __init__(self, cluster: TraceCluster, tables: Tables, whole_only: bool = False):
        self.cluster, self.tables = cluster, tables
        self.whole_only = whole_only
        self.workload = Workload()

    def seen(self, pod: TracePod) -> None:
        """The pod watch saw the pod created: before it is scheduled, whether it fits or not."""
        if self.whole_only:
            self.workload.add((pod.milli_cpu, MILLI if pod.gpus else 0, pod.gpus, ()))
        else:
            self.workload.add(pod.shape)

    def scores(self, pod: TracePod, rows: np.ndarray) -> np.ndarray:
        c = self.cluster
        measure = self.workload.measure(c.models)
        ids = c.layout_id[rows]

        def fits(masks: np.ndarray) -> dict[int, np.ndarray]:
            return {k: self.tables.lookup("fits", ids, masks, k) for k in measure.whole_sizes}

        left, cpu, model = c.left[rows], c.cpu_left[rows], c.model[rows]
        if self.whole_only:
            left = np.where(left == MILLI, MILLI, 0)
        before = measure.amount(cpu, left, model, fits(c.free_mask[rows]))
        after = left.copy()
        if pod.gpus and pod.milli_per_gpu < MILLI and self.whole_only:
            pass
        elif pod.gpus and pod.milli_per_gpu < MILLI:
            packed = np.argmin(np.where(left >= pod.milli_per_gpu, left, MILLI + 1), axis=1)
            after[np.arange(len(rows)), packed] -= pod.milli_per_gpu
        elif pod.gpus:
            taken = self.tables.lookup("pick_mask", ids, c.free_mask[rows], pod.gpus)
            after[(taken[:, None] & c.bits) != 0] = 0
        masks = (after == MILLI).astype(np.int64) @ c.bits
        grown = measure.amount(cpu - pod.milli_cpu, after, model, fits(masks)) - before
        return grades(grown, after.sum(axis=1), c.gpus[rows] * MILLI)
