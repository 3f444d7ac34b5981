"""Scheduler models: where kube-scheduler puts a pod, with or without gpupair's extender.

Each returns a node name, or None to leave the pod pending. Both follow one scheduling cycle of
kube-scheduler v1.36 (pkg/scheduler/schedule_one.go):

- filter: NodeResourcesFit's fit check (GPUs by count, cpu and memory by request); then, with
  gpupair, the extender's own Decider filters the nodes left;
- score: the profile's resource scoring (``kube_scoring``), plus, with gpupair, the extender's
  score scaled as prioritizeNodes does: ``score * weight * (MaxNodeScore / MaxExtenderPriority)``
  in integers;
- select: the highest total. Ties go to the first node in node order when no extender is
  registered: prioritizeNodes sets each node's ``Randomizer`` only in its extender branch, so
  without one all are 0 and the heap keeps node order. With an extender every scored node gets
  ``rand.Int()``, a uniform draw among the tied nodes. When only one node passes, it is chosen
  without scoring.

With gpupair the extender's own reservation store holds the plan of every pod bound since the
node's last report (simulated time never expires it; reports and deletions release it).
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from extender.decisions import Decider, NodeDecision, NodeView
from extender.protocol import MAX_EXTENDER_PRIORITY
from extender.reservations import Reservation, Reservations
from simulator.cluster import Cluster
from simulator.kube_scoring import MAX_NODE_SCORE, NodeUsage, PodRequest, Profile

EXTENDER_WEIGHT = 5  # as registered in deploy/ and the README


class Scheduler(Protocol):
    name: str

    def schedule(self, pod: str, request: PodRequest, cluster: Cluster, rng: random.Random) -> str | None: ...

    def forget(self, pod: str) -> None:
        """The pod is gone (finished or deleted)."""

    def reported(self, cluster: Cluster) -> None:
        """New node reports arrived."""


@dataclass
class GpupairExtender:
    """gpupair's extender as kube-scheduler calls it: filter and prioritize, then bind."""

    decider: Decider = field(default_factory=Decider)
    reservations: Reservations = field(default_factory=lambda: Reservations(timer=lambda: 0.0))

    def decide(self, gpus: int, cluster: Cluster, names: list[str]) -> dict[str, NodeDecision]:
        views = [
            NodeView(name, cluster.nodes[name].reported_state(), reserved=self.reservations.on_node(name))
            for name in names
        ]
        return {view.name: self.decider.decide(gpus, view) for view in views}

    def bind(self, pod: str, node: str, decision: NodeDecision) -> None:
        if decision.plan:
            self.reservations.reserve(Reservation(pod, node, frozenset(decision.plan)))

    def forget(self, pod: str) -> None:
        self.reservations.release(pod)

    def reported(self, cluster: Cluster) -> None:
        for name, sim in cluster.nodes.items():
            self.reservations.observe_report(name, sim.reported_free)


def select_host(scores: dict[str, int], rng: random.Random | None) -> str:
    """The highest score; ties to the first in node order, or uniformly at random with ``rng``."""
    top = max(scores.values())
    tied = [name for name, score in scores.items() if score == top]
    return rng.choice(tied) if rng is not None and len(tied) > 1 else tied[0]


@dataclass
class KubeScheduler:
    profile: Profile
    extender: GpupairExtender | None = None

    @property
    def name(self) -> str:
        return "kube" if self.extender is None else "gpupair"

    def scores(self, request: PodRequest, usages: dict[str, NodeUsage]) -> dict[str, int]:
        """Each node's total from the profile's score plugins, in node order."""
        return {name: self.profile.score(request, usage) for name, usage in usages.items()}

    def schedule(self, pod: str, request: PodRequest, cluster: Cluster, rng: random.Random | None) -> str | None:
        usages = {name: sim.usage() for name, sim in cluster.nodes.items()}
        feasible = [name for name, usage in usages.items() if usage.fits(request)]
        # managedResources: nvidia.com/gpu, so only pods asking GPUs reach the extender.
        extender = self.extender if request.gpus > 0 else None
        decisions: dict[str, NodeDecision] = {}
        if extender is not None and feasible:
            decisions = extender.decide(request.gpus, cluster, feasible)
            feasible = [name for name in feasible if decisions[name].passes]
        if not feasible:
            return None
        if len(feasible) == 1:
            chosen = feasible[0]
        else:
            scores = self.scores(request, {name: usages[name] for name in feasible})
            if extender is not None:
                scale = EXTENDER_WEIGHT * (MAX_NODE_SCORE // MAX_EXTENDER_PRIORITY)
                scores = {name: score + decisions[name].score * scale for name, score in scores.items()}
            chosen = select_host(scores, rng if extender is not None else None)
        if extender is not None:
            extender.bind(pod, chosen, decisions[chosen])
        return chosen

    def forget(self, pod: str) -> None:
        if self.extender is not None:
            self.extender.forget(pod)

    def reported(self, cluster: Cluster) -> None:
        if self.extender is not None:
            self.extender.reported(cluster)


SCHEDULERS: dict[str, Callable[[Profile], KubeScheduler]] = {
    "kube": KubeScheduler,
    "gpupair": lambda profile: KubeScheduler(profile, GpupairExtender()),
}
