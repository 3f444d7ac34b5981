"""Moves in a trace replay: when a pod no node takes would be dropped, the defrag planner
(gpupair/decide/defrag/planner.py, pure, for the live modes to run too) may move pods to free a close
set for it, within a budget of moves as a share of the pods arrived so far.

A plan is carried out as the live cluster would: the moved pods are evicted, the waiting pod
goes through a scheduling cycle (the same filters, policy and gpupair as every pod), then each
moved pod's replacement does. The planner guarantees each moved pod a close set now; where the
policy's choice for one took another's, the replacement goes to the place the plan held for it
(``held``). Every GPU pod in the trace is taken as movable: the trace says nothing of owners.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from gpupair.decide.defrag.fleet import Ask, NodeRoom, PlacedPod, DefragPlan, WaitingPod
from gpupair.decide.defrag.planner import SearchBound, Planner
from gpupair.simulator.trace.files import TracePod
from gpupair.simulator.trace.node_arrays import TraceCluster

MOVES_PER_PLAN = 4


@dataclass
class MoveLedger:
    """What the moves did in one replay."""

    moves: int = 0
    gpus_moved: int = 0
    plans: int = 0  # waiting pods placed by a plan
    held: int = 0  # moved pods the policy could not re-place, put where the plan held a place
    lost: int = 0  # moved pods with no place at all (never, if the planner is right)
    reasons: Counter = field(default_factory=Counter)  # why no plan, first words


class MoveBudget:
    def __init__(self, cluster: TraceCluster, share: float, schedule: Callable[[TracePod], int | None],
                 changed: Callable[[int], None] = lambda row: None):
        """``share``: moves allowed per pod arrived; ``schedule``: one scheduling cycle for a pod
        (the row it landed on, None where it fits no node); ``changed``: told of a row changed
        outside a cycle (the policy's own per-node state)."""
        self.cluster, self.share, self.schedule, self.changed = cluster, share, schedule, changed
        cluster.keep_gpu_pods()
        self.row_of = {name: row for row, name in enumerate(cluster.names)}
        self.ledger = MoveLedger()
        self._asks: dict[tuple, Ask] = {}
        self._placed: dict[tuple[str, int, tuple[int, ...]], PlacedPod] = {}
        self._allowed: dict[tuple[str, ...], frozenset[str]] = {}
        # Asks the planner found no plan for, with the moves it had, since the last plan carried
        # out. Between plans pods only arrive, and a pod added never makes a plan possible (the
        # same plan less that pod was possible before), so the answer stands until a plan runs.
        self._hopeless: dict[Ask, int] = {}

    def left(self, arrived: int) -> int:
        return int(self.share * arrived) - self.ledger.moves

    def rescue(self, pod: TracePod, arrived: int) -> int | None:
        """After ``pod`` failed its cycle: the row it lands on once the planned pods moved, or None."""
        budget = min(MOVES_PER_PLAN, self.left(arrived))
        if budget < 1 or not pod.gpus:
            return None
        ask = self._ask(pod)
        if self._hopeless.get(ask, 0) >= budget:
            return None
        planner = Planner(self._rooms(), self._pods(), SearchBound(moves=budget))
        answer = planner.plan(WaitingPod(pod.name, ask))
        if not isinstance(answer, DefragPlan):
            self.ledger.reasons[answer.reason] += 1
            self._hopeless[ask] = budget
            return None
        if not answer.moves:  # fits by the planner's rule but failed the cycle: nothing to move
            self.ledger.reasons["fits without a move"] += 1
            return None
        return self._carry_out(pod, answer)

    def _carry_out(self, pod: TracePod, plan: DefragPlan) -> int | None:
        moved = []
        for move in plan.moves:
            row = self.row_of[move.pod.node]
            trace_pod = self.cluster.gpu_pods[row][move.pod.uid][0]
            self.cluster.remove(row, trace_pod)
            self.changed(row)
            moved.append((trace_pod, move))
        self._hopeless.clear()
        self.ledger.moves += len(plan.moves)
        self.ledger.gpus_moved += plan.gpus_moved
        row = self.schedule(pod)
        if row is None:
            row = self._put(pod, plan.node, plan.devices)
        self.ledger.plans += row is not None
        for trace_pod, move in moved:
            if self.schedule(trace_pod) is None:
                placed = self._put(trace_pod, move.node, move.devices)
                self.ledger.held += placed is not None
                self.ledger.lost += placed is None
        return row

    def _put(self, pod: TracePod, node: str, devices: tuple[int, ...]) -> int | None:
        """The pod placed on the set the plan held for it, where that is still free."""
        row = self.row_of[node]
        c = self.cluster
        if (c.cpu_left[row] < pod.milli_cpu or c.memory_left[row] < pod.memory_mib
                or any(c.left[row, d] < pod.milli_per_gpu for d in devices)):
            return None
        c.place(row, pod, devices)
        self.changed(row)
        return row

    # -- the planner's picture, from the cluster's arrays ------------------------------------

    def _rooms(self) -> list[NodeRoom]:
        c = self.cluster
        left, cpu, memory = c.left.tolist(), c.cpu_left.tolist(), c.memory_left.tolist()
        return [NodeRoom(name, c.layouts[layout], tuple(left[row][:gpus]), cpu[row], memory[row])
                for row, (name, layout, gpus) in enumerate(zip(c.names, c.layout_id.tolist(), c.gpus.tolist()))]

    def _pods(self) -> list[PlacedPod]:
        out = []
        for row, pods in enumerate(self.cluster.gpu_pods):
            for pod, devices in pods.values():
                key = (pod.name, row, devices)
                placed = self._placed.get(key)
                if placed is None:
                    placed = self._placed[key] = PlacedPod(pod.name, self.cluster.names[row], devices,
                                                           self._ask(pod), movable=True)
                out.append(placed)
        return out

    def _ask(self, pod: TracePod) -> Ask:
        key = (pod.milli_cpu, pod.memory_mib, pod.gpus, pod.milli_per_gpu, pod.models)
        ask = self._asks.get(key)
        if ask is None:
            ask = self._asks[key] = Ask(pod.gpus, pod.milli_per_gpu, pod.milli_cpu, pod.memory_mib,
                                        self._nodes(pod.models))
        return ask

    def _nodes(self, models: tuple[str, ...]) -> frozenset[str] | None:
        if not models:
            return None
        if models not in self._allowed:
            allowed = self.cluster.allowed(TracePod("", 0, 0, 1, 1000, models))
            self._allowed[models] = frozenset(np.array(self.cluster.names)[allowed].tolist())
        return self._allowed[models]
