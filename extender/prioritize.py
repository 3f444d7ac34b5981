"""The prioritize verb: a 0..10 score for every offered node (best fit, then link quality)."""

from __future__ import annotations

from extender.evaluation import Evaluator
from extender.protocol import ExtenderArgs


def prioritize_nodes(evaluator: Evaluator, args: ExtenderArgs, gpus: int) -> str:
    """The HostPriorityList (a bare JSON array of {"Host", "Score"}) for the offered nodes, in
    the order offered. A pod asking no GPU, and a node the core cannot score (no usable
    report, or not passing), gets 0: no opinion. Built as JSON text directly: thousands of
    entries through model objects would cost more than the decisions themselves."""
    offer = evaluator.offer(args)
    return evaluator.scores_json(gpus, offer)
