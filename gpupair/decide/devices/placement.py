"""Where a k-GPU pod can go on one node, and how well it fits. Pure functions of NodeState.

The rule gpupair enforces: all k GPUs in one NUMA node, or, for a k larger than any NUMA node,
in the fewest NUMA nodes the hardware allows. Best fit packs pods into NUMA nodes that are
already broken, so that whole NUMA nodes stay free for larger pods.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpupair.kubewire.defaults import MAX_EXTENDER_PRIORITY as MAX_SCORE
from gpupair.topology import links
from gpupair.topology.layout import NodeLayout, NodeState


@dataclass(frozen=True)
class Fit:
    feasible: bool
    resolvable: bool  # False: this node's hardware can never hold the pod
    reason: str = ""


def numa_label(numa: int) -> str:
    """``NUMA1``; ``NUMA?0`` for a group inferred from links where the NUMA node is unknown."""
    return f"NUMA{numa}" if numa >= 0 else f"NUMA?{-numa - 1}"


def free_summary(state: NodeState) -> str:
    """``NUMA0=1 NUMA1=1``: free devices per NUMA node, as an operator reads it."""
    return " ".join(f"{numa_label(n)}={len(m)}" for n, m in state.free_by_numa().items())


def min_numa_nodes(layout: NodeLayout, k: int) -> int | None:
    """Fewest NUMA nodes whose devices together number at least k (None: more than the node has)."""
    if k <= 0:
        return 0
    sizes = sorted((len(m) for m in layout.numa_nodes.values()), reverse=True)
    total = 0
    for count, size in enumerate(sizes, start=1):
        total += size
        if total >= k:
            return count
    return None


def _spread_phrase(needed: int) -> str:
    return "on one NUMA node" if needed == 1 else f"within {needed} NUMA nodes"


def fit(state: NodeState, k: int) -> Fit:
    """Can a pod asking k GPUs be placed on this node now without spreading wider than needed?"""
    if k <= 0:
        return Fit(True, True)
    needed = min_numa_nodes(state.layout, k)
    if needed is None:
        return Fit(False, False, f"need {k} GPUs; the node has only {state.layout.size}")
    free_counts = sorted((len(m) for m in state.free_by_numa().values()), reverse=True)
    if sum(free_counts[:needed]) >= k:
        return Fit(True, True)
    return Fit(False, True, f"need {k} GPUs {_spread_phrase(needed)}; free: {free_summary(state)}")


def worst_case_take(state: NodeState, count: int) -> NodeState:
    """The free devices left after ``count`` unknown ones are taken, taken as badly as possible.

    Pods bound to a node but not yet in its report hold GPUs nobody has named. Each is taken
    from a NUMA node with the most free devices (water-filling): the result is majorised by
    every other way of taking ``count``, so the free count of the best m NUMA nodes, for
    every m, is as low as it can get. A pod that fits what is left here (``fit`` looks at
    exactly those sums) fits whatever the holders really took.
    """
    if count <= 0:
        return state
    groups = {numa: list(members) for numa, members in state.free_by_numa().items()}
    taken = []
    for _ in range(min(count, len(state.free))):
        numa = max(groups, key=lambda n: (len(groups[n]), -n))
        taken.append(groups[numa].pop())
    return state.take(taken)


def chosen_numa_nodes(state: NodeState, chosen: tuple[int, ...]) -> set[int]:
    return {state.layout.numa_of(i) for i in chosen}


def is_close(state: NodeState, chosen: tuple[int, ...]) -> bool:
    """Whether the set spans no more NUMA nodes than the hardware needs for its size."""
    needed = min_numa_nodes(state.layout, len(chosen))
    return needed is not None and len(chosen_numa_nodes(state, chosen)) <= needed


def best_fit(state: NodeState, chosen: tuple[int, ...]) -> float:
    """0..1, higher when the NUMA nodes the set uses have the fewest free devices left after it.

    Taking the last free GPUs of a broken NUMA node scores 1; breaking a whole free NUMA node for
    a small pod scores low, which keeps whole NUMA nodes for larger pods.
    """
    if not chosen:
        return 0.0
    numas = chosen_numa_nodes(state, chosen)
    groups = state.layout.numa_nodes
    capacity = sum(len(groups[n]) for n in numas)
    left = sum(1 for n in numas for i in groups[n] if i in state.free) - len(chosen)
    return 1.0 - left / capacity


def link_bonus(state: NodeState, chosen: tuple[int, ...]) -> int:
    """0..2 for the link quality of a set: 2 for NVLink or one PCIe switch, 0 across sockets."""
    worst = state.layout.worst_link(chosen)
    if worst is None or links.nvlink_count(worst) or worst == "PIX":
        return 2
    return 0 if links.crosses_sockets(worst) else 1


def score(state: NodeState, chosen: tuple[int, ...] | None) -> int:
    """0..10: best fit (0..8) first, link quality of the expected set as tie-breaker (0..2)."""
    if not chosen:
        return 0
    return round(best_fit(state, chosen) * (MAX_SCORE - 2)) + link_bonus(state, chosen)
