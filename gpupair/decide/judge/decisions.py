"""The extender's filter and prioritize decisions, as pure functions.

The HTTP verbs call these, and so does ``gpupair simulate``: the simulation runs the very logic
the extender serves. Inputs are what the extender knows about each node (its decoded report, or
why it has none, and the devices reserved for pods bound but not yet seen in a report) and the
pod's placement intent (gpupair/decide/pod/intent.py):

- ``required``: a node passes only with a close set free (placement.fit); best fit scores;
- ``preferred``: a node with a close set passes as under ``required``, scored at least 1; one
  without passes too, with score 0, so it ranks below every node with one; a node without a
  usable report passes unscored;
- ``none``: topology plays no part: a node passes with enough GPUs free and scores 0.

A pod's ``gpupair.io/scope`` (gpupair/decide/pod/scope.py) narrows "close": under ``pcie-switch`` or
``nvlink`` the set the node's picker would take must be within it (``required``), or nodes where
it is rank above the others (``preferred``).

Under every intent a node with fewer free GPUs than asked (after reservations) fails, and one
whose hardware has fewer GPUs than asked is unresolvable.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from enum import Enum

from gpupair.decide.devices import placement

from gpupair.topology import links
from gpupair.decide.pod.intent import Intent
from gpupair.topology.layout import NodeState
from gpupair.decide.pod.nic_ask import NicAsk
from gpupair.decide.devices.pickers import DEVICE_PLUGIN, Picker
from gpupair.topology.nics import NICS_KEY, NicLayout
from gpupair.decide.devices.policies import POLICIES, Policy
from gpupair.decide.pod.scope import Scope, free_sets, within

from gpupair.decide.judge.verdict import format_set

class Unreported(str, Enum):
    """What to do with a node whose report is missing, undecodable or stale."""

    FAIL = "fail"  # fail multi-GPU pods there, with the reason (default)
    PASS = "pass"  # let them pass, unscored


@dataclass(frozen=True)
class NodeView:
    """One node as the extender sees it for one pod."""

    name: str
    state: NodeState | None  # None: no usable report
    problem: str = ""  # why there is no usable report
    reserved: frozenset[int] = field(default_factory=frozenset)
    held: int = 0  # GPUs of pods bound here, not yet in the report, devices unknown
    picker: Picker = DEVICE_PLUGIN  # who picks the pod's devices here (gpupair/decide/devices/pickers.py)
    nics: NicLayout | None = None  # the node's RDMA NICs and GPU links; None: its reporter names none
    # Its GPU resource is time-slicing replicas (gpupair.io/shares): a pod asking several may get
    # one GPU more than once.
    replicated: bool = False
    # Of ``reserved``, the GPUs a defrag plan keeps for another pod: free to whoever picks the
    # devices here (reservations.Hold.kept).
    kept: frozenset[int] = frozenset()

    def available(self) -> NodeState | None:
        """Free devices less those planned for pods bound here but not yet in the report, and
        less the worst ``held`` others (their pods' devices are not known yet). Beside a count,
        a plan's pod may have got other devices than planned (the planned ones may be the
        counted pods'), so its GPUs are taken at worst too: the next pod fits whatever either
        really took."""
        if self.state is None:
            return None
        state = self.state.take(self.reserved) if self.reserved else self.state
        if not self.held:
            return state
        return placement.worst_case_take(state, self.held + len(self.reserved - self.kept))


@dataclass(frozen=True)
class NodeDecision:
    name: str
    passes: bool
    unresolvable: bool = False
    reason: str = ""
    plan: tuple[int, ...] | None = None  # the set the device plugin is expected to pick
    score: int = 0
    # False where a ``preferred`` pod passes with a set that misses what it prefers (not close,
    # outside its scope, not near a NIC): the tier a score other than best fit must keep.
    preferred_met: bool = True


def preferred_band(score: int, met: bool) -> int:
    """A 0-10 score moved into its tier: 6-10 where the set is what the pod prefers, 0-5 where
    not, so every node that meets the preference ranks above every node that does not."""
    return 6 + score * 4 // 10 if met else score * 5 // 10


@dataclass
class FilterOutcome:
    """Filter's three answers: nodes passed (in order), and failed or unresolvable with why."""

    passed: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)
    unresolvable: dict[str, str] = field(default_factory=dict)

    def add(self, name: str, decision: NodeDecision) -> None:
        if decision.passes:
            self.passed.append(name)
        elif decision.unresolvable:
            self.unresolvable[name] = decision.reason
        else:
            self.failed[name] = decision.reason


@dataclass(frozen=True)
class Decider:
    policy: Policy = POLICIES["aligned"]  # the device plugin's, on device-plugin nodes
    unreported: Unreported = Unreported.FAIL
    dra_policy: Policy = POLICIES["dra-first-fit"]  # the allocator's, on DRA nodes
    nic: NicAsk | None = None  # the pod asks for GPUs near a NIC (gpupair/decide/pod/nic_ask.py)
    scope: Scope = Scope.NUMA  # how close the set must be (gpupair/decide/pod/scope.py)

    def policy_for(self, node: NodeView) -> Policy:
        return node.picker.policy(self)

    def decide(self, gpus: int, node: NodeView, intent: Intent = Intent.REQUIRED) -> NodeDecision:
        """Whether a pod asking ``gpus`` under ``intent`` (and, with ``nic``, near a NIC) may go
        to ``node``, and how well it would fit there."""
        decision = self._within_scope(gpus, node, self._decide(gpus, node, intent), intent)
        if self.nic is None or gpus <= 0 or not decision.passes:
            return decision
        return self._near_nic(gpus, node, decision)

    def _takes_kept(self, gpus: int, node: NodeView) -> tuple[int, ...]:
        """The kept GPUs the node's picker would take for this pod: it sees them free, so the
        plan the extender makes around them is not what the pod would get."""
        if not node.kept or node.state is None or gpus <= 0:
            return ()
        seen = node.state.take(node.reserved - node.kept)
        pick = self.policy_for(node).pick(seen.layout, seen.free, gpus)
        return tuple(sorted(set(pick or ()) & node.kept))

    def _within_scope(self, gpus: int, node: NodeView, decision: NodeDecision, intent: Intent,
                      taken: bool = False) -> NodeDecision:
        """The decision under a scope narrower than NUMA: the picker's set must be within it
        (``required``), or ranks by whether it is (``preferred``: 6-10 within, 0-5 not).
        ``taken``: the set is the allocation already made for the pod (bind, a retry)."""
        state = node.available() if not taken else node.state
        if self.scope is Scope.NUMA or gpus <= 1 or intent is Intent.NONE or not decision.passes or state is None:
            return decision
        layout = state.layout
        if decision.plan is None:  # the picker finds no set here (dra-nvlink-pairs: no bridged pair free)
            if len(state.free) < gpus or intent is Intent.PREFERRED:
                return decision
            return NodeDecision(node.name, False, reason=(
                f"need {gpus} GPUs {self.scope.phrase}; free sets {self.scope.phrase}: none "
                f"(free: {placement.free_summary(state)})"))
        if within(layout, decision.plan, self.scope):
            return replace(decision, score=preferred_band(decision.score, True))
        if intent is Intent.PREFERRED:
            return replace(decision, score=preferred_band(decision.score, False), preferred_met=False)
        got = f"{format_set(decision.plan)} ({layout.worst_link(decision.plan)})"
        sets = free_sets(layout, state.free, gpus, self.scope)
        free = (", ".join(format_set(s) for s in sets) if sets else "none")
        verb = "took" if taken else "would take"
        return NodeDecision(node.name, False, reason=(
            f"need {gpus} GPUs {self.scope.phrase}; the {node.picker.name} {verb} {got}; "
            f"free sets {self.scope.phrase}: {free}"))

    def _near_nic(self, gpus: int, node: NodeView, decision: NodeDecision) -> NodeDecision:
        """The decision for a pod that asks for the network: only a set whose every GPU has a NIC
        at the asked level or closer qualifies, and the set the node's picker would take must be
        one (the device plugin and the DRA allocator know nothing of NICs)."""
        assert self.nic is not None
        state = node.available()
        if state is None:
            return decision  # unjudged already: no report
        required, level = self.nic.intent is Intent.REQUIRED, self.nic.level
        if node.nics is None:
            if required:
                return NodeDecision(node.name, False, reason=(
                    f"the pod asks for a NIC at {level} or closer; this node's reporter publishes no NICs "
                    f"({NICS_KEY} missing)"))
            return replace(decision, score=0, preferred_met=False)
        limit = links.distance(level)
        nearest = {g: node.nics.nearest(g) for g in range(state.layout.size)}
        near = frozenset(g for g, found in nearest.items() if found and links.distance(found[1]) <= limit)
        free_near = ", ".join(
            f"{nic.name}: {sum(1 for g in state.free & near if nearest[g][0] == nic.name)}" for nic in node.nics.nics
        ) or "no NICs"
        if not placement.fit(NodeState(state.layout, state.free & near), gpus).feasible:
            if not required:
                return replace(decision, score=0, preferred_met=False)
            needed = placement.min_numa_nodes(state.layout, gpus) or 1
            where = "on one NUMA node" if needed == 1 else f"within {needed} NUMA nodes"
            return NodeDecision(node.name, False, reason=(
                f"need {gpus} GPUs {where} with a NIC at {level} or closer; free near {free_near}"))
        if decision.plan is not None and not set(decision.plan) <= near:
            if not required:
                return replace(decision, score=0, preferred_met=False)
            return NodeDecision(node.name, False, reason=(
                f"the {node.picker.name} would take {format_set(decision.plan)}, not all near a NIC at {level}; "
                f"free near {free_near}"))
        return decision

    def decide_owning(self, gpus: int, node: NodeView, own: frozenset[int],
                      intent: Intent = Intent.REQUIRED) -> NodeDecision:
        """The decision for a pod whose own claims already hold ``own`` on this DRA node:
        kube-scheduler allocates a pod's claims in PreBind, before any extender's bind, and a
        retried pod may find them still allocated. Those devices are the pod's, not taken from
        it. Where they cover what it asks they are its set, judged as they are (nobody picks
        again; the reason names the allocation); otherwise the rest is decided as usual over
        the free devices and its own."""
        if node.state is None or not own or gpus <= 0:
            return self.decide(gpus, node, intent)
        layout = node.state.layout
        state = NodeState(layout, node.state.free | own)
        if len(own) < gpus:
            others = replace(node, state=state, reserved=node.reserved - own)
            return self.decide(gpus, others, intent)
        plan = tuple(sorted(own))
        close = len(plan) <= 1 or placement.is_close(state, plan)
        if not close and intent is Intent.REQUIRED:
            return NodeDecision(node.name, False, reason=(
                f"the allocator took {format_set(plan)} ({layout.worst_link(plan)}) for this pod's claims here, "
                "not a close set"))
        if intent is Intent.NONE or not close:
            decision = NodeDecision(node.name, True, plan=plan, preferred_met=close or intent is not Intent.PREFERRED)
        else:
            score = placement.score(state, plan)
            decision = NodeDecision(node.name, True, plan=plan,
                                    score=max(score, 1) if intent is Intent.PREFERRED else score)
        decision = self._within_scope(gpus, replace(node, state=state), decision, intent, taken=True)
        if self.nic is None or not decision.passes:
            return decision
        return self._near_nic(gpus, replace(node, state=state, reserved=frozenset(), held=0), decision)

    def _decide(self, gpus: int, node: NodeView, intent: Intent) -> NodeDecision:
        if gpus <= 0:
            return NodeDecision(node.name, True)
        if gpus > 1 and node.replicated:
            return NodeDecision(node.name, False, unresolvable=True, reason=(
                f"need {gpus} GPUs; this node's GPUs are time-slicing replicas under the same resource "
                "name: two may be one GPU (the device plugin's renameByDefault or failRequestsGreaterThanOne "
                "prevents it)"))
        state = node.available()
        if state is None:
            if gpus == 1 or intent is not Intent.REQUIRED or self.unreported is Unreported.PASS:
                return NodeDecision(node.name, True)
            return NodeDecision(node.name, False, reason=node.problem or "no gpupair report")
        taking = self._takes_kept(gpus, node)
        if taking:
            return NodeDecision(node.name, False, reason=(
                f"the {node.picker.name} would take {format_set(taking)} here, kept for a defrag plan's pods"))
        fit = placement.fit(state, gpus)
        if not fit.feasible and not fit.resolvable:
            return NodeDecision(node.name, False, unresolvable=True, reason=fit.reason)
        close = fit.feasible
        if gpus > 1 and not close:
            if intent is Intent.REQUIRED:
                return NodeDecision(node.name, False, reason=fit.reason)
            if len(state.free) < gpus:
                return NodeDecision(node.name, False, reason=(
                    f"need {gpus} GPUs ({intent.value} placement); free: {placement.free_summary(state)}"))
        plan = self.policy_for(node).pick(state.layout, state.free, gpus)
        if plan is None:
            # A 1-GPU pod with nothing free here: kube-scheduler's own fit check decides.
            return NodeDecision(node.name, True)
        if close and gpus > 1 and node.picker.first_fit and not placement.is_close(state, plan):
            # A close set is free, but the picker takes the first fit in its own order (the
            # allocator: slice order), and nobody can steer it.
            if intent is Intent.REQUIRED:
                return NodeDecision(node.name, False, reason=(
                    f"the {node.picker.name} would take {format_set(plan)} ({state.layout.worst_link(plan)}); "
                    f"free: {placement.free_summary(state)}"))
            close = False
        if intent is Intent.NONE or not close:
            return NodeDecision(node.name, True, plan=plan, preferred_met=close or intent is not Intent.PREFERRED)
        score = placement.score(state, plan)
        if intent is Intent.PREFERRED:
            score = max(score, 1)  # above every node without a close set (those score 0)
        return NodeDecision(node.name, True, plan=plan, score=score)
