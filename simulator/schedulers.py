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

With gpupair the extender's own ``Reservations`` holds what each node owes to pods bound since
its last report, on the cluster's simulated clock:

- ``gpupair``: reports carry the allocation ledger. A plan (the extender's own bind) ends when a
  report lists its pod, whatever devices it got; pods bound by others (pinned by ``nodeName``,
  seen by the pod watch) hold their GPU count, decided worst-case, until listed.
- ``gpupair-legacy``: the accounting from before the ledger, as a baseline (the extender before
  commit c2caa39, its reservations and pod watch). Reports carry no ledger; a plan ends only when
  a report shows all its devices taken, or at its TTL; a pod bound by others is reserved the set
  the extender predicts the plugin will pick, ended the same way.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from gpupair.decisions import Decider, NodeDecision, NodeView
from extender.protocol import MAX_EXTENDER_PRIORITY
from gpupair.reservations import DEFAULT_TTL, Reservation, Reservations
from simulator.cluster import NAMESPACE, Cluster
from simulator.kube_scoring import MAX_NODE_SCORE, NodeUsage, PodRequest, Profile

EXTENDER_WEIGHT = 5  # as registered in deploy/ and the README


class Scheduler(Protocol):
    name: str

    def schedule(self, pod: str, request: PodRequest, cluster: Cluster, rng: random.Random) -> str | None: ...

    def pinned(self, pod: str, request: PodRequest, node: str, cluster: Cluster) -> None:
        """A pod created bound to ``node`` (``spec.nodeName``): only the pod watch sees it."""

    def forget(self, pod: str) -> None:
        """The pod is gone (finished or deleted)."""

    def reported(self, cluster: Cluster) -> None:
        """New node reports arrived."""


class GpupairExtender:
    """gpupair's extender as kube-scheduler calls it: filter and prioritize, then bind; its pod
    watch; the nodes' reports, with their ledgers (``ledger=False``: the accounting before it)."""

    def __init__(self, decider: Decider | None = None, ledger: bool = True, ttl: float = DEFAULT_TTL):
        self.decider = decider or Decider()
        self.ledger = ledger
        self.now = 0.0
        self.reservations = Reservations(ttl=ttl, timer=lambda: self.now)

    def decide(self, gpus: int, cluster: Cluster, names: list[str]) -> dict[str, NodeDecision]:
        self.now = cluster.now
        return {name: self._decide(gpus, cluster, name) for name in names}

    def _decide(self, gpus: int, cluster: Cluster, name: str, exclude: str | None = None) -> NodeDecision:
        hold = self.reservations.hold(name, exclude)
        view = NodeView(name, cluster.nodes[name].reported_state(), reserved=hold.devices, held=hold.count)
        return self.decider.decide(gpus, view)

    def bind(self, pod: str, node: str, decision: NodeDecision, gpus: int) -> None:
        if decision.plan:
            self.reservations.reserve(Reservation(pod, node, frozenset(decision.plan), NAMESPACE, pod))
        if self.ledger:  # the pod watch sees the Binding too
            self.reservations.pod_bound(pod, node, NAMESPACE, pod, gpus)

    def pinned(self, pod: str, gpus: int, node: str, cluster: Cluster) -> None:
        self.now = cluster.now
        if self.ledger:
            self.reservations.pod_bound(pod, node, NAMESPACE, pod, gpus)
            return
        # Before the ledger the pod watch reserved the set it predicted the plugin would pick.
        plan = self._decide(gpus, cluster, node, exclude=pod).plan
        if plan:
            self.reservations.reserve(Reservation(pod, node, frozenset(plan), NAMESPACE, pod))

    def forget(self, pod: str) -> None:
        self.reservations.pod_gone(pod, "deleted")

    def reported(self, cluster: Cluster) -> None:
        self.now = cluster.now
        for name, sim in cluster.nodes.items():
            self.reservations.observe_report(name, sim.reported_free, sim.reported_ledger if self.ledger else None)


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
        if self.extender is None:
            return "kube"
        return "gpupair" if self.extender.ledger else "gpupair-legacy"

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
            extender.bind(pod, chosen, decisions[chosen], request.gpus)
        return chosen

    def pinned(self, pod: str, request: PodRequest, node: str, cluster: Cluster) -> None:
        if self.extender is not None and request.gpus > 0:
            self.extender.pinned(pod, request.gpus, node, cluster)

    def forget(self, pod: str) -> None:
        if self.extender is not None:
            self.extender.forget(pod)

    def reported(self, cluster: Cluster) -> None:
        if self.extender is not None:
            self.extender.reported(cluster)


SCHEDULERS: dict[str, Callable[..., KubeScheduler]] = {
    "kube": lambda profile, ttl=DEFAULT_TTL: KubeScheduler(profile),
    "gpupair": lambda profile, ttl=DEFAULT_TTL: KubeScheduler(profile, GpupairExtender(ttl=ttl)),
    "gpupair-legacy": lambda profile, ttl=DEFAULT_TTL: KubeScheduler(profile, GpupairExtender(ledger=False, ttl=ttl)),
}
