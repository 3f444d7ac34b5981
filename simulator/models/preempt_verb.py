"""gpupair's preempt verb in the simulation: the extender's own judge (gpupair/decide/judge/preemption.py)
on what the simulated extender knows.

As the extender's Preempter does: a victim's devices come from the node's last report's
allocation ledger (the simulated kubelet's allocations); a victim bound after that report frees
what the extender holds for it (its plan, or its GPU count); devices the ledger gives pods that
are not victims stay claimed.
"""

from __future__ import annotations

from gpupair.decide.pod.intent import Intent
from gpupair.decide.judge.preemption import NodeSituation, Preemption, Victim, VictimGPUs
from gpupair.decide.judge.reservations import NO_HOLD, Hold
from gpupair.simulator.cluster import NAMESPACE, Cluster
from gpupair.simulator.models.schedulers import GpupairExtender


def _hold_of(extender: GpupairExtender, node: str, pod: str, total: Hold) -> Hold:
    """What ``node`` owes ``pod`` alone: the node's hold less the hold without that pod."""
    without = extender.reservations.hold(node, exclude=pod)
    devices, count = total.devices - without.devices, total.count - without.count
    return Hold(devices, count) if devices or count else NO_HOLD


def judge_candidates(extender: GpupairExtender, gpus: int, intent: Intent, candidates: dict[str, list[str]],
                     cluster: Cluster) -> dict[str, list[str]]:
    """The nodes the verb keeps, each with its trimmed victims (in the scheduler's order)."""
    extender.now = cluster.now
    judge = Preemption(extender.decider, gpus, intent)
    kept: dict[str, list[str]] = {}
    for node, victims in candidates.items():
        sim = cluster.nodes[node]
        ledger = sim.reported_ledger
        total = extender.reservations.hold(node)
        effects, held_devices, held_count = [], set(), 0
        for pod in victims:
            hold = _hold_of(extender, node, pod, total)
            held_devices |= hold.devices
            held_count += hold.count
            # The ledger lists every pod holding devices at its report; one it does not list was
            # bound since and frees what the extender holds for it.
            devices = ledger.devices_of(NAMESPACE, pod) if ledger.lists(NAMESPACE, pod, pod) else frozenset()
            effects.append(VictimGPUs(devices or frozenset(), hold))
        others = Hold(total.devices - held_devices, total.count - held_count)
        claimed = frozenset().union(*(d for (_, name), d in ledger.pods.items() if name not in victims))
        situation = NodeSituation(node, sim.reported_state(), "", others, frozenset(), claimed, extender.picker)
        verdict = judge.judge(situation, [Victim(pod, NAMESPACE, pod) for pod in victims], effects)
        if verdict.keep is not None:
            kept[node] = [victim.uid for victim in verdict.keep]
    return kept
