"""A smaller fleet with the trace's GPU mix: ``--nodes N`` of bench/trace_real.py and the
control-plane test that replays a trace on a real kube-scheduler, where 1,213 nodes cost minutes.

Nodes are grouped by (GPUs, model); each group keeps its share of the fleet, rounded by largest
remainder so the sample has exactly N nodes, and its members are drawn with the seed. FGD's
protocol then samples the pods to 130% of the sample's GPUs (``fgd_protocol.arrivals``), so a
sample is a small copy of the fleet, not a slice of its demand.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from gpupair.command.flags import InputError
from gpupair.simulator.trace.files import TraceNode


def sample_nodes(nodes: Sequence[TraceNode], count: int, rng: np.random.Generator) -> list[TraceNode]:
    """``count`` of ``nodes`` with their mix of (GPUs, model), in the list's order."""
    if count < 1:
        raise InputError(f"--nodes must be at least 1, got {count}")
    if count >= len(nodes):
        return list(nodes)
    groups: dict[tuple[int, str], list[int]] = {}
    for index, node in enumerate(nodes):
        groups.setdefault((node.gpus, node.model), []).append(index)
    keys = sorted(groups)
    exact = [count * len(groups[key]) / len(nodes) for key in keys]
    taken = [int(share) for share in exact]
    # largest remainder first; ties to the larger group, then the key's order
    order = sorted(range(len(keys)), key=lambda i: (-(exact[i] - taken[i]), -len(groups[keys[i]]), i))
    for i in order[:count - sum(taken)]:
        taken[i] += 1
    chosen: list[int] = []
    for key, want in zip(keys, taken):
        members = groups[key]
        chosen += [members[i] for i in rng.choice(len(members), size=want, replace=False)]
    return [nodes[i] for i in sorted(chosen)]
