"""The close set a node can give a pod: ``gpus`` GPUs with ``milli`` left each, within the fewest
NUMA nodes the node's shape allows (gpupair's placement rule, placement.min_numa_nodes). A share
pod (one GPU, under MILLI) goes on the GPU with the least left that holds it, as sharing layers
pack; whole GPUs go to the NUMA nodes with the fewest such GPUs to spare (best fit).

Memoised on (layout, shares left, ask): a fleet has many nodes alike.
"""

from __future__ import annotations

from functools import lru_cache
from itertools import combinations

from gpupair.decide.devices import placement
from gpupair.topology.layout import NodeLayout


@lru_cache(maxsize=256)
def numa_groups(layout: NodeLayout, gpus: int) -> tuple[tuple[int, ...], ...]:
    """Every union of the fewest NUMA nodes that can hold ``gpus`` GPUs, as device indices."""
    needed = placement.min_numa_nodes(layout, gpus)
    if needed is None or gpus <= 0:
        return ()
    nodes = list(layout.numa_nodes.values())
    return tuple(tuple(sorted(i for members in combo for i in members))
                 for combo in combinations(nodes, needed) if sum(map(len, combo)) >= gpus)


@lru_cache(maxsize=1 << 16)
def close_set(layout: NodeLayout, left: tuple[int, ...], gpus: int, milli: int) -> tuple[int, ...] | None:
    """The set the pod would get, or None where no close set has that much left."""
    if gpus <= 0:
        return ()
    best: tuple[tuple, tuple[int, ...]] | None = None
    for group in numa_groups(layout, gpus):
        usable = sorted((left[i], i) for i in group if left[i] >= milli)
        if len(usable) < gpus:
            continue
        chosen = tuple(sorted(i for _, i in usable[:gpus]))
        key = (len(usable) - gpus, sum(value for value, _ in usable[:gpus]), chosen)
        if best is None or key < best[0]:
            best = (key, chosen)
    return None if best is None else best[1]
