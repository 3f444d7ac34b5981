"""The filter verb: which of the offered nodes can take the pod, and why the others cannot."""

from __future__ import annotations

from dataclasses import dataclass

from extender.evaluation import Evaluator
from extender.protocol import ExtenderArgs, ExtenderFilterResult, NodeList
from gpupair.intent import Intent


@dataclass
class FilterAnswer:
    result: ExtenderFilterResult
    passed: int
    failed: int
    unresolvable: int


def filter_nodes(evaluator: Evaluator, args: ExtenderArgs, gpus: int,
                 intent: Intent = Intent.REQUIRED) -> FilterAnswer:
    """Answer in the form asked: NodeNames for NodeNames, the Node objects themselves for
    Nodes (kube-scheduler reads only the field matching its nodeCacheCapable setting), deciding
    under the pod's placement ``intent``. Only offered nodes appear, each in one of passed,
    FailedNodes or FailedAndUnresolvableNodes."""
    offer = evaluator.offer(args)
    verdicts = evaluator.verdicts(gpus, offer, intent)
    if offer.nodes is None:
        result = ExtenderFilterResult.model_construct(
            Nodes=None, NodeNames=verdicts.passed, FailedNodes=verdicts.failed,
            FailedAndUnresolvableNodes=verdicts.unresolvable, Error="",
        )
    else:
        keep = set(verdicts.passed)
        items = [node for node in offer.nodes if node["metadata"]["name"] in keep]
        result = ExtenderFilterResult.model_construct(
            Nodes=NodeList.model_construct(metadata={}, items=items), NodeNames=None,
            FailedNodes=verdicts.failed, FailedAndUnresolvableNodes=verdicts.unresolvable, Error="",
        )
    return FilterAnswer(result, len(verdicts.passed), len(verdicts.failed), len(verdicts.unresolvable))
