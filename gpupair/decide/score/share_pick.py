"""Where a pod asking GPU shares is foreseen to land on each node, for the fragmentation score:
the extender's (extender/fragmentation_score.py) and the simulator's (simulator/trace/models/
gpupair_score.py) alike.

A share goes on the GPU with the least left that still holds it (ties: the lowest index), the
sharing layer packing shares as FGD's simulator models it; a pod asking several takes them on as
many GPUs, one each. NVIDIA's device plugin hands time-slicing replicas out the other way round
(``distributedAlloc``: the GPU with the fewest replicas taken first), so on its nodes this is
what a packing sharing layer would do, not what it does (docs/extender.md says so).
"""

from __future__ import annotations

import numpy as np

MILLI = 1000


def packed_after(left: np.ndarray, milli: np.ndarray | int, count: int = 1) -> np.ndarray:
    """``left`` ([n, G], each GPU's milli left) after a pod asking ``count`` shares of
    ``milli`` (per row, or one for all) takes them, each on a GPU of its own. A row where fewer
    than ``count`` GPUs hold a share is returned as it was: the pod does not fit there."""
    after = np.array(left, dtype=np.int64, copy=True)
    need = np.broadcast_to(np.asarray(milli, dtype=np.int64), (len(after),))[:, None]
    holds = after >= need
    fits = holds.sum(axis=1) >= count
    order = np.argsort(np.where(holds, after, MILLI + 1), axis=1, kind="stable")[:, :count]
    rows = np.flatnonzero(fits)
    if len(rows):
        picked = order[rows]
        after[rows[:, None], picked] -= need[rows]
    return after
