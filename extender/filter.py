"""The filter verb: which of the offered nodes can take the pod, and why the others cannot."""

from __future__ import annotations

from dataclasses import dataclass
from itertools import filterfalse

from gpupair.extender.evaluation import Evaluator, Offer
from gpupair.extender.protocol import ExtenderArgs, ExtenderFilterResult, NodeList
from gpupair.decide.judge.decisions import FilterOutcome
from gpupair.decide.pod.intent import Intent


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
    FailedNodes or FailedAndUnresolvableNodes. A pod asking for no GPU passes every node with
    nothing decided or decoded: registered without managedResources (for DRA claim pods), the
    extender sees every pod of the cluster, and those should cost no more than the round trip."""
    if gpus <= 0:
        names = args.node_names()
        nodes = args.Nodes.items if args.NodeNames is None and args.Nodes is not None else None
        result = ExtenderFilterResult.model_construct(
            Nodes=None if nodes is None else NodeList.model_construct(metadata={}, items=nodes),
            NodeNames=None if nodes is not None else names, FailedNodes={}, FailedAndUnresolvableNodes={}, Error="")
        return FilterAnswer(result, len(names), 0, 0)
    offer = evaluator.offer(args)
    verdicts = filter_verdicts(evaluator, gpus, offer, intent)
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


def filter_verdicts(evaluator: Evaluator, gpus: int, offer: Offer, intent: Intent = Intent.REQUIRED) -> FilterOutcome:
    """Passed, failed and unresolvable for the offered names: from the tables where they apply."""
    if offer.cached:
        return _table_verdicts(evaluator, gpus, offer, intent)
    out = FilterOutcome()
    for name, decision in zip(offer.names, evaluator.decisions(gpus, offer, intent=intent)):
        out.add(name, decision)
    return out


def _table_verdicts(evaluator: Evaluator, gpus: int, offer: Offer, intent: Intent) -> FilterOutcome:
    assert evaluator.tables is not None
    table = evaluator.tables.table(gpus, evaluator.clock(), intent)
    names = offer.names
    passing = table.passing
    # filter() with a bound __contains__ runs the loop in C; it also computes each fresh
    # name's hash once, for every later lookup of this request.
    passed = list(filter(passing.__contains__, names))
    own = evaluator.own_cases(offer)
    if len(passed) == len(names) and not own:
        return FilterOutcome(passed)
    out = FilterOutcome(list(filterfalse(own.__contains__, passed)) if own else passed)
    redo = own
    if len(passed) < len(names):
        others = set(filterfalse(passing.__contains__, names))
        others -= own
        for found, decided in ((out.failed, table.failed), (out.unresolvable, table.unresolvable)):
            common = decided.keys() & others
            found.update(zip(common, map(decided.__getitem__, common)))
            others -= common
        redo = redo | others  # names the cache does not know
    # Nodes where the pod's own claims hold devices or bind refused it, and unknown names, are
    # decided for this pod.
    order = list(redo)
    for name, decision in zip(order, evaluator.decisions(gpus, offer, order, intent)):
        out.add(name, decision)
    return out
