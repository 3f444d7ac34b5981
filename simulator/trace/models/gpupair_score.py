"""gpupair's fragmentation score over a trace's nodes (gpupair/decide/score/fragmentation.py), as the
extender runs it with ``--score fragmentation`` behind the every-pod registration.

What the extender is modelled to know: every pod (its CPU, memory, GPUs and share) through its
pod watch, so the workload it measures against is the shapes of the pods seen so far; each
node's CPU and memory left; each GPU's share left; and, for the pod scored, the GPUs its node's picker is expected
to take (the device plugin's or the allocator's set; a share on the GPU the sharing layer packs
it onto, the one with the least left that holds it: gpupair/decide/score/share_pick.py).

It knows each node's GPU product (NVML or GFD's label) and each pod's accepted products
(nodeSelector, node affinity), as the trace does.

``whole_only``: a sharing layer whose shares are not reported (the ``whole-gpus`` comparison).
A GPU with any share taken looks taken, a share pod looks like a one-GPU pod, and where a share
lands is not foreseen (it changes nothing the extender sees).

The grades come from ``fragmentation_grades``, the function the extender's prioritize calls.
"""

from __future__ import annotations

import numpy as np

from gpupair.decide.score.fragmentation import MILLI, Workload, tie_order
from gpupair.decide.score.fragmentation_grades import NodeRows, fragmentation_grades
from gpupair.decide.score.share_pick import packed_after
from gpupair.simulator.trace.node_arrays import TraceCluster
from gpupair.simulator.trace.models.devices import Tables
from gpupair.simulator.trace.files import TracePod


class FragmentationScore:
    def __init__(self, cluster: TraceCluster, tables: Tables, whole_only: bool = False):
        self.cluster, self.tables = cluster, tables
        self.whole_only = whole_only
        self.workload = Workload()
        self.order = tie_order(cluster.names)  # each node's place in the fixed order, as the extender's

    def seen(self, pod: TracePod) -> None:
        """The pod watch saw the pod created: before it is scheduled, whether it fits or not."""
        self.workload.add(self._shape(pod))

    def gone(self, pod: TracePod) -> None:
        """The pod watch saw the pod deleted: FGD's protocol deletes a pod no node takes."""
        self.workload.remove(self._shape(pod))

    def _shape(self, pod: TracePod) -> tuple:
        fgd = (pod.milli_cpu, MILLI if pod.gpus else 0, pod.gpus, pod.models) if self.whole_only else pod.shape
        return (*fgd, pod.memory_mib)

    def scores(self, pod: TracePod, rows: np.ndarray) -> np.ndarray:
        c = self.cluster
        ids = c.layout_id[rows]
        left = c.left[rows]
        if self.whole_only:
            left = np.where(left == MILLI, MILLI, 0)
        after = left.copy()
        if pod.gpus and pod.milli_per_gpu < MILLI and self.whole_only:
            pass
        elif pod.gpus and pod.milli_per_gpu < MILLI:
            after = packed_after(left, pod.milli_per_gpu, pod.gpus)
        elif pod.gpus:
            taken = self.tables.lookup("pick_mask", ids, c.free_mask[rows], pod.gpus)
            after[(taken[:, None] & c.bits) != 0] = 0
        masks = {False: c.free_mask[rows], True: (after == MILLI).astype(np.int64) @ c.bits}

        def whole_fits(k: int, placed: bool) -> np.ndarray:
            return self.tables.lookup("fits", ids, masks[placed], k)

        node_rows = NodeRows(c.cpu_left[rows], left, after, c.model[rows], c.gpus[rows] * MILLI, whole_fits,
                             c.memory_left[rows], self.order[rows])
        return fragmentation_grades(self.workload.measure(c.models), node_rows, pod.milli_cpu, pod.memory_mib)
