"""Scheduler models: where a pod goes. Each returns a node name, or None to leave it pending.

- ``spread``: kube-scheduler without gpupair. Its fit check counts GPUs only; its default
  scoring spreads load (least allocated), ties broken at random.
- ``gpupair``: the same, with gpupair's extender registered: the extender's own Decider filters
  and scores (weight 5, scaled by kube-scheduler from 0..10 to 0..100 per weight), and the
  extender's own reservation store holds the plan of every pod bound since the node's last
  report (simulated time never expires it; reports and deletions release it).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Protocol

from extender.decisions import Decider, NodeView
from extender.protocol import MAX_EXTENDER_PRIORITY
from extender.reservations import Reservation, Reservations
from simulator.cluster import Cluster

EXTENDER_WEIGHT = 5
MAX_NODE_SCORE = 100  # kube-scheduler framework's node score range


class Scheduler(Protocol):
    name: str

    def schedule(self, pod: str, gpus: int, cluster: Cluster, rng: random.Random) -> str | None: ...

    def forget(self, pod: str) -> None:
        """The pod is gone (finished or deleted)."""

    def reported(self, cluster: Cluster) -> None:
        """New node reports arrived."""


def _spread_scores(cluster: Cluster, names: list[str]) -> dict[str, float]:
    return {
        name: MAX_NODE_SCORE * cluster.nodes[name].uncommitted() / cluster.nodes[name].layout.size
        for name in names
    }


def _pick_best(scores: dict[str, float], rng: random.Random) -> str | None:
    if not scores:
        return None
    top = max(scores.values())
    best = sorted(name for name, value in scores.items() if value == top)
    return rng.choice(best)


def _fits_by_count(cluster: Cluster, gpus: int) -> list[str]:
    return [name for name, sim in cluster.nodes.items() if sim.uncommitted() >= gpus]


@dataclass
class SpreadScheduler:
    name: str = "default"

    def schedule(self, pod: str, gpus: int, cluster: Cluster, rng: random.Random) -> str | None:
        return _pick_best(_spread_scores(cluster, _fits_by_count(cluster, gpus)), rng)

    def forget(self, pod: str) -> None:
        pass

    def reported(self, cluster: Cluster) -> None:
        pass


@dataclass
class GpupairScheduler:
    decider: Decider = field(default_factory=Decider)
    name: str = "gpupair"
    reservations: Reservations = field(default_factory=lambda: Reservations(timer=lambda: 0.0))

    def schedule(self, pod: str, gpus: int, cluster: Cluster, rng: random.Random) -> str | None:
        views = [
            NodeView(name, cluster.nodes[name].reported_state(), reserved=self.reservations.on_node(name))
            for name in _fits_by_count(cluster, gpus)
        ]
        decisions = {view.name: self.decider.decide(gpus, view) for view in views}
        passed = [name for name, d in decisions.items() if d.passes]
        spread = _spread_scores(cluster, passed)
        scale = EXTENDER_WEIGHT * MAX_NODE_SCORE / MAX_EXTENDER_PRIORITY
        chosen = _pick_best({n: spread[n] + decisions[n].score * scale for n in passed}, rng)
        if chosen is not None and decisions[chosen].plan:
            self.reservations.reserve(Reservation(pod, chosen, frozenset(decisions[chosen].plan)))
        return chosen

    def forget(self, pod: str) -> None:
        self.reservations.release(pod)

    def reported(self, cluster: Cluster) -> None:
        for name, sim in cluster.nodes.items():
            self.reservations.observe_report(name, sim.reported_free)


SCHEDULERS = {"default": SpreadScheduler, "gpupair": GpupairScheduler}
