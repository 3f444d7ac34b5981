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

On the DRA path (``KubeScheduler.dra``, simulator/models/dynamic_resources.py) DynamicResources' Filter also runs the
allocator on the node's really free devices (kube-scheduler's own claim cache, in-flight
allocations included): a node where it finds none fails. Its Score adds the ``firstAvailable``
points; claim pods' GPUs are not scored by NodeResourcesFit; the extender decides on
``NodeView(picker=ALLOCATOR)``.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Protocol

from gpupair.kubewire.defaults import MAX_EXTENDER_PRIORITY, MAX_NODE_SCORE
from gpupair.decide.judge.decisions import Decider, NodeDecision, NodeView
from gpupair.decide.devices.pickers import DEVICE_PLUGIN, Picker
from gpupair.decide.pod.intent import Intent
from gpupair.decide.pod.nic_ask import NicAsk
from gpupair.decide.judge.reservations import DEFAULT_TTL, Reservation, Reservations
from gpupair.simulator.cluster import NAMESPACE, Cluster
from gpupair.simulator.models.dynamic_resources import Form, dynamic_resources_scores
from gpupair.simulator.models.kube_scoring import NodeUsage, PodRequest, Profile
from gpupair.simulator.models.default_preemption import PreemptVerb

EXTENDER_WEIGHT = 20  # as registered in deploy/ and the README


class Scheduler(Protocol):
    name: str

    def schedule(self, pod: str, request: PodRequest, cluster: Cluster, rng: random.Random,
                 intent: Intent = Intent.REQUIRED, nominated: Mapping[str, Sequence[PodRequest]] | None = None,
                 nominated_node: str | None = None, nic: NicAsk | None = None) -> str | None: ...

    @property
    def preempt_verb(self) -> PreemptVerb | None:
        """gpupair's preempt verb when the extender registers one."""

    def pinned(self, pod: str, request: PodRequest, node: str, cluster: Cluster) -> None:
        """A pod created bound to ``node`` (``spec.nodeName``): only the pod watch sees it."""

    def forget(self, pod: str) -> None:
        """The pod is gone (finished or deleted)."""

    def reported(self, cluster: Cluster) -> None:
        """New node reports arrived."""


class GpupairExtender:
    """gpupair's extender as kube-scheduler calls it: filter and prioritize, then bind; its pod
    watch; the nodes' reports, with their ledgers (``ledger=False``: the accounting before it)."""

    def __init__(self, decider: Decider | None = None, ledger: bool = True, ttl: float = DEFAULT_TTL,
                 preempt_verb: bool = False, picker: Picker = DEVICE_PLUGIN, nic_ask: bool = True):
        self.decider = decider or Decider()
        self.ledger = ledger
        self.nic_ask = nic_ask  # reads gpupair.io/nic (False: the extender before the network issue)
        self.preempt_verb = preempt_verb  # registered with preemptVerb
        self.picker = picker  # who picks on every node: the allocator on the DRA path
        self.now = 0.0
        self.reservations = Reservations(ttl=ttl, timer=lambda: self.now)

    def decide(self, gpus: int, cluster: Cluster, names: list[str],
               intent: Intent = Intent.REQUIRED, nic: NicAsk | None = None) -> dict[str, NodeDecision]:
        self.now = cluster.now
        decider = self.decider_for(nic)
        return {name: self._decide(gpus, cluster, name, intent=intent, decider=decider) for name in names}

    def decider_for(self, nic: NicAsk | None) -> Decider:
        """The pod's Decider, as the extender's ``decider_for``: its NIC ask on the node's one."""
        if nic is None or not self.nic_ask:
            return self.decider
        return replace(self.decider, nic=nic)

    def _decide(self, gpus: int, cluster: Cluster, name: str, exclude: str | None = None,
                intent: Intent = Intent.REQUIRED, decider: Decider | None = None) -> NodeDecision:
        hold = self.reservations.hold(name, exclude)
        sim = cluster.nodes[name]
        view = NodeView(name, sim.reported_state(), reserved=hold.devices, held=hold.count, picker=self.picker,
                        nics=sim.nics)
        return (decider or self.decider).decide(gpus, view, intent)

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
    dra: Form | None = None  # the DRA path: how the pods ask for their devices

    @property
    def name(self) -> str:
        if self.extender is None:
            return "kube"
        if not self.extender.ledger:
            return "gpupair-legacy"
        if not self.extender.nic_ask:
            return "gpupair-nonic"
        return "gpupair" if self.extender.preempt_verb else "gpupair-nopreempt"

    @property
    def preempt_verb(self) -> PreemptVerb | None:
        if self.extender is None or not self.extender.preempt_verb:
            return None
        from gpupair.simulator.models.preempt_verb import judge_candidates

        return lambda gpus, intent, candidates, cluster: judge_candidates(
            self.extender, gpus, intent, candidates, cluster)

    def scores(self, request: PodRequest, usages: dict[str, NodeUsage]) -> dict[str, int]:
        """Each node's total from the profile's score plugins, in node order. A claim pod
        requests no ``nvidia.com/gpu``: its GPUs are not scored."""
        if self.dra is not None and not self.dra.scored_gpus:
            request = PodRequest(0, request.milli_cpu, request.memory)
        return {name: self.profile.score(request, usage) for name, usage in usages.items()}

    def _allocations(self, request: PodRequest, cluster: Cluster, names: list[str]) -> dict[str, int] | None:
        """On the DRA path, per node where the allocator finds devices for the pod's claim, the
        subrequest it used; None on the device-plugin path."""
        if self.dra is None or request.gpus <= 0:
            return None
        picks = {}
        for name in names:
            sim = cluster.nodes[name]
            index, chosen = self.dra.policy.subrequest(sim.layout, sim.actual_free(), request.gpus)
            if chosen is not None:
                picks[name] = index
        return picks

    def schedule(self, pod: str, request: PodRequest, cluster: Cluster, rng: random.Random | None,
                 intent: Intent = Intent.REQUIRED, nominated: Mapping[str, Sequence[PodRequest]] | None = None,
                 nominated_node: str | None = None, nic: NicAsk | None = None) -> str | None:
        """``nominated``: per node, the requests of pods nominated there (by preemption) that
        this pod must leave room for (their priority is at least its own); ``nominated_node``:
        this pod's own nomination, tried first as schedule_one's evaluateNominatedNode does;
        ``nic``: the pod's ``gpupair.io/nic`` ask (kube-scheduler alone ignores it)."""
        usages = {name: sim.usage() for name, sim in cluster.nodes.items()}
        fit_usages = dict(usages)
        for name, requests in (nominated or {}).items():
            if requests:
                sim = cluster.nodes[name]
                fit_usages[name] = NodeUsage.of(usages[name].allocatable, [*sim.bound.values(), *requests])
        feasible = [name for name, usage in fit_usages.items() if usage.fits(request)]
        picks = self._allocations(request, cluster, feasible)
        if picks is not None:  # DynamicResources' Filter: the allocator found devices there
            feasible = [name for name in feasible if name in picks]
            intent = self.dra.intent if self.dra.intent is not None else intent  # the claim's, as the webhook wrote it
        if nominated_node in feasible:
            feasible = [nominated_node, *(name for name in feasible if name != nominated_node)]
        # managedResources: nvidia.com/gpu, so only pods asking GPUs reach the extender.
        extender = self.extender if request.gpus > 0 else None
        decisions: dict[str, NodeDecision] = {}
        if extender is not None and feasible:
            decisions = extender.decide(request.gpus, cluster, feasible, intent, nic)
            feasible = [name for name in feasible if decisions[name].passes]
        if not feasible:
            return None
        if nominated_node is not None and feasible[0] == nominated_node:
            chosen = nominated_node  # the nominated node passes: taken without scoring the others
        elif len(feasible) == 1:
            chosen = feasible[0]
        else:
            scores = self.scores(request, {name: usages[name] for name in feasible})
            if picks is not None:
                dynamic = dynamic_resources_scores(self.dra, {name: picks[name] for name in feasible})
                scores = {name: score + dynamic[name] for name, score in scores.items()}
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
    "gpupair": lambda profile, ttl=DEFAULT_TTL: KubeScheduler(profile, GpupairExtender(ttl=ttl, preempt_verb=True)),
    "gpupair-nopreempt": lambda profile, ttl=DEFAULT_TTL: KubeScheduler(profile, GpupairExtender(ttl=ttl)),
    "gpupair-legacy": lambda profile, ttl=DEFAULT_TTL: KubeScheduler(profile, GpupairExtender(ledger=False, ttl=ttl)),
    # The extender before the network issue: it never reads gpupair.io/nic, a baseline for --nic-share.
    "gpupair-nonic": lambda profile, ttl=DEFAULT_TTL: KubeScheduler(profile, GpupairExtender(
        ttl=ttl, preempt_verb=True, nic_ask=False)),
}
