"""The preempt verb: keep the candidate nodes where evicting frees a set the pod may take.

kube-scheduler calls it (``preemptVerb``) with the victims its own dry run chose on each
candidate node, and evicts on one node of the answer. Each node is judged by
``gpupair.decide.judge.preemption`` on the extender's view of it: the freshest report (node cache, or the
last one a Nodes-mode request carried), the holds of pods bound there but not yet reported,
and each victim's devices from the node's allocation ledger. The answer is always by UID
(``NodeNameToMetaVictims``), as the protocol requires in both node-cache modes.

Victims arrive as whole pods (nodeCacheCapable: false) or by UID only (true); a UID is found in
the node's ledger, which records each pod's UID where the reporter knew it.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from gpupair.extender.evaluation import Evaluator
from gpupair.decide.judge.preemption import (
    NodeSituation, NodeVerdict, Preemption, Victim, VictimGPUs, merge_holds,
)
from gpupair.extender.protocol import ExtenderPreemptionArgs, ExtenderPreemptionResult, MetaPod, MetaVictims
from gpupair.decide.judge.reservations import NO_HOLD, Hold, Reservations
from gpupair.decide.pod.intent import Intent
from gpupair.topology.report import Ledger

log = logging.getLogger("gpupair.extender.preempt")

@dataclass
class PreemptAnswer:
    result: ExtenderPreemptionResult
    verdicts: list[NodeVerdict] = field(default_factory=list)


def victims_of(args: ExtenderPreemptionArgs) -> dict[str, tuple[list[Victim], int]]:
    """node -> (victims in the order sent, NumPDBViolations), from either form."""
    out: dict[str, tuple[list[Victim], int]] = {}
    if args.NodeNameToMetaVictims is not None:
        for node, meta in args.NodeNameToMetaVictims.items():
            out[node] = ([Victim(p.UID) for p in meta.Pods or ()], meta.NumPDBViolations)
    else:
        assert args.NodeNameToVictims is not None
        for node, victims in args.NodeNameToVictims.items():
            pods = []
            for pod in victims.Pods or ():
                meta = pod["metadata"]
                pods.append(Victim(meta["uid"], str(meta.get("namespace") or ""), str(meta.get("name") or "")))
            out[node] = (pods, victims.NumPDBViolations)
    return out


def ledger_devices(ledger: Ledger | None, victim: Victim) -> frozenset[int] | None:
    """A victim's devices by the ledger: those listed for it; none if the ledger does not list
    it (it lists every pod holding devices at the report's generation); None without a ledger."""
    if ledger is None:
        return None
    key = (victim.namespace, victim.name)
    if not (victim.name and ledger.lists(victim.namespace, victim.name, victim.uid)):
        key = next((k for k, uid in ledger.uids.items() if uid == victim.uid), None)
    if key is None:
        return frozenset()
    return ledger.devices_of(*key) or frozenset()


def unchanged(args: ExtenderPreemptionArgs) -> ExtenderPreemptionResult:
    """The scheduler's own proposal, by UID: gpupair's answer when it has no opinion."""
    return ExtenderPreemptionResult(NodeNameToMetaVictims={
        node: MetaVictims(Pods=[MetaPod(UID=v.uid) for v in victims], NumPDBViolations=pdb)
        for node, (victims, pdb) in victims_of(args).items()})


class Preempter:
    def __init__(self, evaluator: Evaluator, reservations: Reservations):
        self.evaluator = evaluator
        self.reservations = reservations

    def answer(self, args: ExtenderPreemptionArgs, gpus: int, intent: Intent) -> PreemptAnswer:
        judge = Preemption(self.evaluator.decider, gpus, intent)
        holds = self._holds(self._own_keys(args.Pod))
        result: dict[str, MetaVictims] = {}
        verdicts = []
        for node, (victims, pdb_violations) in victims_of(args).items():
            verdict = self._judge(judge, node, victims, holds.get(node, {}))
            verdicts.append(verdict)
            if verdict.keep is not None:
                # NumPDBViolations of the kept set is at most the scheduler's count (kube-scheduler
                # does not read it back from an extender's answer).
                result[node] = MetaVictims(Pods=[MetaPod(UID=v.uid) for v in verdict.keep],
                                           NumPDBViolations=pdb_violations)
            log.info("preempt", extra={"node": node, "outcome": verdict.outcome, "reason": verdict.reason,
                                       "victims": len(victims),
                                       "kept": None if verdict.keep is None else len(verdict.keep)})
        return PreemptAnswer(ExtenderPreemptionResult(NodeNameToMetaVictims=result), verdicts)

    def _judge(self, judge: Preemption, node: str, victims: list[Victim], holds: dict[str, Hold]) -> NodeVerdict:
        entry = self.evaluator.entry_for(node)
        report = entry.report
        alive = self.evaluator.alive(node)
        if report is None or entry.is_stale(self.evaluator.clock(), alive):
            problem = entry.problem_when_stale(alive) if report is not None else entry.problem
            return judge.judge(NodeSituation(node, None, problem), victims, [VictimGPUs(None)] * len(victims))
        uids = {v.uid for v in victims}
        others = merge_holds(hold for uid, hold in holds.items() if uid not in uids)
        effects = []
        for victim in victims:
            devices = ledger_devices(report.ledger, victim)
            hold = holds.get(victim.uid, NO_HOLD)
            if devices is None and hold:
                devices = frozenset()  # bound after the report: its GPUs are its hold
            effects.append(VictimGPUs(devices, hold))
        claimed: frozenset[int] = frozenset()
        if report.ledger is not None:
            named = {(v.namespace, v.name) for v in victims} | {k for k, uid in report.ledger.uids.items()
                                                                if uid in uids}
            claimed = frozenset().union(*(d for k, d in report.ledger.pods.items() if k not in named))
        situation = NodeSituation(node, report.state, "", others, report.unhealthy, claimed, entry.picker)
        return judge.judge(situation, victims, effects)

    def _own_keys(self, pod: Any) -> frozenset[str]:
        """The keys of the defrag holds kept for the preemptor (extender/cache/defrag_holds.py)."""
        defrag = self.evaluator.defrag
        return defrag.keys_for(pod) if defrag is not None and defrag.active else frozenset()

    def _holds(self, own: frozenset[str] = frozenset()) -> dict[str, dict[str, Hold]]:
        """node -> pod UID (or a defrag hold's key) -> what the node owes that pod (planned
        devices, or a GPU count); the defrag holds whose keys are in ``own`` left out."""
        out: dict[str, dict[str, Hold]] = {}
        for held in self.reservations.held_sets():
            if held.key not in own:
                out.setdefault(held.node, {})[held.key] = Hold(held.devices, kept=held.devices)
        for plan in self.reservations.plans():
            out.setdefault(plan.node, {})[plan.uid] = Hold(plan.devices)
        for pod in self.reservations.counted():
            out.setdefault(pod.node, {})[pod.uid] = Hold(count=pod.gpus)
        return out
