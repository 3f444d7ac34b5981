"""kube-scheduler's ``percentageOfNodesToScore``: which feasible nodes a cycle scores.

kube-scheduler (pkg/scheduler/schedule_one.go, v1.36) does not filter every node of a large
cluster. ``numFeasibleNodesToFind`` sets how many feasible nodes are enough: every node below 100
nodes, else the percentage of them (0, the default, is adaptive: 50 - nodes/125, at least 5),
at least 100. The search starts where the last cycle stopped (``nextStartNodeIndex``, advanced by
the nodes it processed), walks the node list in order and stops when it has enough; only those
nodes reach the extenders' filter and every score. So at 1,213 nodes a pod is scored on 497.

kube-scheduler filters 16 nodes at a time and also counts the nodes in flight when it stops;
this model walks one at a time, as kube-scheduler would with parallelism 1.
"""

from __future__ import annotations

import numpy as np

MIN_FEASIBLE_NODES_TO_FIND = 100  # minFeasibleNodesToFind
MIN_FEASIBLE_NODES_PERCENTAGE_TO_FIND = 5  # minFeasibleNodesPercentageToFind
ADAPTIVE = 0  # the setting's default: the percentage falls as the cluster grows


def feasible_nodes_to_find(percentage: int, all_nodes: int) -> int:
    """``numFeasibleNodesToFind``: how many feasible nodes end a cycle's search."""
    if all_nodes < MIN_FEASIBLE_NODES_TO_FIND:
        return all_nodes
    if percentage == ADAPTIVE:
        percentage = max(50 - all_nodes // 125, MIN_FEASIBLE_NODES_PERCENTAGE_TO_FIND)
    return max(all_nodes * percentage // 100, MIN_FEASIBLE_NODES_TO_FIND)


class FeasibleNodeSearch:
    """The search's state across cycles: where the next one starts."""

    def __init__(self, all_nodes: int, percentage: int) -> None:
        if not 0 <= percentage <= 100:
            raise ValueError(f"percentageOfNodesToScore must be 0-100, got {percentage}")
        self.all_nodes = all_nodes
        self.to_find = feasible_nodes_to_find(percentage, all_nodes)
        self.next_start = 0

    def feasible(self, fits: np.ndarray) -> np.ndarray:
        """The rows this cycle finds feasible, ascending, from ``fits`` (one bool per node, in the
        scheduler's node order); the next cycle starts after the last node examined."""
        if not self.all_nodes:
            return np.flatnonzero(fits)
        order = np.roll(np.arange(self.all_nodes), -self.next_start)
        hits = np.flatnonzero(fits[order])
        if len(hits) > self.to_find:
            # The search stops on finding one node too many; it counts the feasible nodes kept
            # and the infeasible ones seen, so the next cycle starts at the node it dropped.
            processed = int(hits[self.to_find])
            hits = hits[:self.to_find]
        else:
            processed = self.all_nodes
        self.next_start = (self.next_start + processed) % self.all_nodes
        return np.sort(order[hits])
