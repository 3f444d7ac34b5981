"""A hypothesis state machine over the extender's holds: binds (the extender's own plans),
pods pinned by ``spec.nodeName``, kubelet admissions that follow or deviate from the plan,
reports with their ledgers, deletes, TTL expiry and restarts (holds rebuilt from the pod list
and the reports, in either order). After every step:

- no device is promised to two live pods (planned sets are disjoint, and free in the node's
  latest report: not held by any pod its ledger lists);
- no hold remains for a pod the node's latest report lists.
"""

from __future__ import annotations

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from gpupair.decide.judge.decisions import Decider, NodeView
from gpupair.decide.judge.reservations import Reservation, Reservations
from gpupair.topology.layout import NodeState
from gpupair.decide.devices.policies import POLICIES
from gpupair.topology.report import Ledger
from gpupair.simulator.shapes import seed_layout

LAYOUT = seed_layout()
NODES = ("a", "b")
TTL = 100.0


class Node:
    def __init__(self) -> None:
        self.held: dict[str, frozenset[int]] = {}  # pod -> devices, as the kubelet has them
        self.reported_free: frozenset[int] = frozenset(range(LAYOUT.size))
        self.reported_ledger: Ledger = Ledger({}, {})

    def free(self) -> frozenset[int]:
        return frozenset(range(LAYOUT.size)) - frozenset().union(*self.held.values())


class Holds(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.now = 0.0
        self.res = self._fresh()
        self.nodes = {name: Node() for name in NODES}
        self.pods: dict[str, tuple[str, int]] = {}  # live bound pods -> (node, GPUs)
        self.serial = 0
        self.decider = Decider()

    def _fresh(self) -> Reservations:
        return Reservations(ttl=TTL, timer=lambda: self.now)

    def _new_pod(self) -> str:
        self.serial += 1
        return f"p{self.serial}"

    # ---- rules

    @rule(node=st.sampled_from(NODES), gpus=st.integers(1, 4))
    def extender_binds(self, node, gpus):
        pod = self._new_pod()
        hold = self.res.hold(node, exclude=pod)
        view = NodeView(node, NodeState(LAYOUT, self.nodes[node].reported_free), "", hold.devices, hold.count)
        decision = self.decider.decide(gpus, view)
        if decision.passes and decision.plan:
            self.res.reserve(Reservation(pod, node, frozenset(decision.plan), "ml", pod))
            self.pods[pod] = (node, gpus)

    @rule(node=st.sampled_from(NODES), gpus=st.integers(1, 2))
    def pinned_pod_created(self, node, gpus):
        pod = self._new_pod()
        self.pods[pod] = (node, gpus)
        self.res.pod_bound(pod, node, "ml", pod, gpus)

    @precondition(lambda self: self.pods)
    @rule(data=st.data())
    def watch_sees_a_binding(self, data):
        pod = data.draw(st.sampled_from(sorted(self.pods)))
        node, gpus = self.pods[pod]
        self.res.pod_bound(pod, node, "ml", pod, gpus)

    @precondition(lambda self: any(p not in self.nodes[n].held for p, (n, _) in self.pods.items()))
    @rule(data=st.data(), follow=st.booleans())
    def kubelet_admits(self, data, follow):
        waiting = sorted(p for p, (n, _) in self.pods.items() if p not in self.nodes[n].held)
        pod = data.draw(st.sampled_from(waiting))
        node, gpus = self.pods[pod]
        kubelet = self.nodes[node]
        free = kubelet.free()
        if len(free) < gpus:  # the kubelet refuses it (UnexpectedAdmissionError): the pod fails
            del self.pods[pod]
            self.res.pod_gone(pod, "finished")
            return
        plan = self.res.get(pod)
        if follow and plan is not None and plan.devices <= free:
            devices = plan.devices
        elif follow:
            devices = frozenset(POLICIES["aligned"].pick(LAYOUT, free, gpus))
        else:
            devices = frozenset(data.draw(st.permutations(sorted(free)))[:gpus])
        kubelet.held[pod] = devices

    @rule(node=st.sampled_from(NODES))
    def report(self, node):
        kubelet = self.nodes[node]
        kubelet.reported_free = kubelet.free()
        kubelet.reported_ledger = Ledger({("ml", p): d for p, d in kubelet.held.items()}, {})
        self.res.observe_report(node, kubelet.reported_free, kubelet.reported_ledger)

    @precondition(lambda self: self.pods)
    @rule(data=st.data())
    def pod_deleted(self, data):
        pod = data.draw(st.sampled_from(sorted(self.pods)))
        node, _ = self.pods.pop(pod)
        self.nodes[node].held.pop(pod, None)
        self.res.pod_gone(pod, "deleted")

    @rule(seconds=st.sampled_from([1.0, 30.0, TTL + 1]))
    def time_passes(self, seconds):
        self.now += seconds

    @rule(reports_first=st.booleans())
    def restart(self, reports_first):
        self.res = self._fresh()
        replay_reports = [lambda n=n: self.res.observe_report(n, self.nodes[n].reported_free,
                                                              self.nodes[n].reported_ledger) for n in NODES]
        replay_pods = [lambda p=p: self.res.pod_bound(p, self.pods[p][0], "ml", p, self.pods[p][1])
                       for p in sorted(self.pods)]
        for step in (replay_reports + replay_pods) if reports_first else (replay_pods + replay_reports):
            step()

    # ---- invariants

    @invariant()
    def no_device_promised_to_two_live_pods(self):
        seen: dict[tuple[str, int], str] = {}
        for plan in self.res.plans():
            assert plan.uid in self.pods, f"plan of a pod that is gone: {plan}"
            node = self.nodes[plan.node]
            assert plan.devices <= node.reported_free, f"{plan} names devices the report shows held"
            for device in plan.devices:
                other = seen.setdefault((plan.node, device), plan.uid)
                assert other == plan.uid, f"GPU{device} on {plan.node} promised to {other} and {plan.uid}"

    @invariant()
    def no_hold_for_a_pod_its_report_lists(self):
        for plan in self.res.plans():
            assert not self.nodes[plan.node].reported_ledger.lists("ml", plan.uid), plan
        for pod in self.res.counted():
            assert not self.nodes[pod.node].reported_ledger.lists("ml", pod.uid), pod
            assert pod.uid in self.pods, f"count hold of a pod that is gone: {pod}"


Holds.TestCase.settings = settings(max_examples=150, stateful_step_count=40, deadline=None, derandomize=True)
TestHolds = Holds.TestCase


class CachedHolds(Holds):
    @invariant()
    def by_node_is_current(self):
        """by_node() is rebuilt only after a change: it must equal each node asked afresh."""
        assert self.res.by_node() == {node: hold for node in NODES if (hold := self.res.hold(node))}


CachedHolds.TestCase.settings = settings(max_examples=60, stateful_step_count=40, deadline=None, derandomize=True)
TestCachedHolds = CachedHolds.TestCase
