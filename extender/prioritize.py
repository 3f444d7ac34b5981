"""The prioritize verb: a 0..10 score for every offered node, by the score chosen once at
assembly (``--score``), each a ``Score``:

- ``LeastFragmentation`` (extender/fragmentation_score.py, deploy/'s default): every pod, CPU-only
  ones too, scored by how little its placement fragments what the cluster's workload needs.
  Until the pod watch has seen a pod to learn that workload from (an extender just started, or
  Nodes mode without an API server), it scores as best fit does.
- ``BestFit`` (here, ``--score best-fit``): a GPU pod is scored by best fit, then link quality:
  under ``preferred`` placement a node without a close set scores 0, under ``none`` every node;
  a CPU-only pod gets no opinion."""

from __future__ import annotations

from itertools import filterfalse
from typing import Protocol

from gpupair.extender.cache.decision_tables import host_priority_json, host_priority_list
from gpupair.extender.evaluation import Evaluator, Offer
from gpupair.extender.protocol import ExtenderArgs
from gpupair.decide.pod.intent import Intent


class Score(Protocol):
    def answer(self, args: ExtenderArgs, gpus: int, intent: Intent = Intent.REQUIRED) -> str:
        """The HostPriorityList (a bare JSON array of {"Host", "Score"}) for the offered nodes, in
        the order offered, the nodes scored 0 left out (``host_priority_json``). Built as JSON
        text directly: thousands of entries through model objects would cost more than the
        decisions themselves."""
        ...


class BestFit:
    """A pod asking no GPU, and a node the core cannot score (no usable report, or not
    passing), gets 0: no opinion."""

    def __init__(self, evaluator: Evaluator):
        self.evaluator = evaluator

    def answer(self, args: ExtenderArgs, gpus: int, intent: Intent = Intent.REQUIRED) -> str:
        if gpus <= 0:  # no opinion, and nothing to decode for it (see filter_nodes)
            return NO_OPINION
        return scores_json(self.evaluator, gpus, self.evaluator.offer(args), intent)


NO_OPINION = "[]"  # every node 0: adds nothing to any node's total in kube-scheduler


def scores_json(evaluator: Evaluator, gpus: int, offer: Offer, intent: Intent = Intent.REQUIRED) -> str:
    """The HostPriorityList for the offered names, as JSON."""
    if offer.cached:
        assert evaluator.tables is not None
        names = offer.names
        fragments = evaluator.tables.table(gpus, evaluator.clock(), intent).score_json
        own = evaluator.own_cases(offer)
        if not own:
            try:
                return host_priority_list(map(fragments.__getitem__, names))
            except KeyError:
                pass
        # Nodes where the pod's own claims hold devices or bind refused it, and names the cache
        # does not know, are decided for this pod. The table holds every node of the cluster:
        # its fragments are read, never copied (copying 5,000 of them cost more than the verb).
        fresh = _fresh(evaluator, gpus, offer, own | set(filterfalse(fragments.__contains__, names)), intent)
        return host_priority_list(map(fresh.get, names, map(fragments.get, names)))
    decisions = evaluator.decisions(gpus, offer, intent=intent)
    return host_priority_list(host_priority_json(n, d.score) for n, d in zip(offer.names, decisions))


def _fresh(evaluator: Evaluator, gpus: int, offer: Offer, names: set[str], intent: Intent) -> dict[str, str]:
    order = list(names)
    return {name: host_priority_json(name, decision.score)
            for name, decision in zip(order, evaluator.decisions(gpus, offer, order, intent))}
