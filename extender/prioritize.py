"""The prioritize verb: a 0..10 score for every offered node (best fit, then link quality;
under ``preferred`` placement a node without a close set scores 0, under ``none`` every node)."""

from __future__ import annotations

from extender.evaluation import Evaluator
from extender.protocol import ExtenderArgs
from gpupair.intent import Intent


def prioritize_nodes(evaluator: Evaluator, args: ExtenderArgs, gpus: int,
                     intent: Intent = Intent.REQUIRED) -> str:
    """The HostPriorityList (a bare JSON array of {"Host", "Score"}) for the offered nodes, in
    the order offered. A pod asking no GPU, and a node the core cannot score (no usable
    report, or not passing), gets 0: no opinion. Built as JSON text directly: thousands of
    entries through model objects would cost more than the decisions themselves."""
    offer = evaluator.offer(args)
    return evaluator.scores_json(gpus, offer, intent)
