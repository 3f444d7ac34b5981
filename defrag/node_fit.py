"""Whether a pod's replacement may be scheduled onto a node at all, as kube-scheduler's
NodeUnschedulable, NodeName, NodeAffinity (nodeSelector and required terms) and TaintToleration
filters judge it. Pure.

The planner must never count on a place the scheduler would refuse: a moved pod whose new place
it cannot take would wait, which is the one thing a move must not cause. Anything this reads
that it does not understand refuses the node.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

UNSCHEDULABLE_TAINT = "node.kubernetes.io/unschedulable"
_BLOCKING = ("NoSchedule", "NoExecute")


def may_run_on(pod: Mapping[str, Any], node: Mapping[str, Any]) -> bool:
    spec = _mapping(pod.get("spec"))
    node_meta = _mapping(node.get("metadata"))
    node_spec = _mapping(node.get("spec"))
    name = node_meta.get("name")
    labels = _mapping(node_meta.get("labels"))
    if spec.get("nodeName") and spec.get("nodeName") != name:
        return False
    selector = _mapping(spec.get("nodeSelector"))
    if any(labels.get(key) != value for key, value in selector.items()):
        return False
    affinity = _mapping(_mapping(_mapping(spec.get("affinity")).get("nodeAffinity"))
                        .get("requiredDuringSchedulingIgnoredDuringExecution"))
    terms = affinity.get("nodeSelectorTerms")
    if terms is not None and not (isinstance(terms, list) and any(_term(t, labels, name) for t in terms)):
        return False
    tolerations = spec.get("tolerations") or []
    taints = list(node_spec.get("taints") or [])
    if node_spec.get("unschedulable"):
        taints.append({"key": UNSCHEDULABLE_TAINT, "effect": "NoSchedule"})
    return all(_tolerated(taint, tolerations) for taint in taints
               if isinstance(taint, Mapping) and taint.get("effect") in _BLOCKING)


def _term(term: Any, labels: Mapping[str, Any], name: Any) -> bool:
    """A nodeSelectorTerm: all its expressions and fields hold (an empty term matches nothing)."""
    if not isinstance(term, Mapping):
        return False
    expressions, fields = term.get("matchExpressions") or [], term.get("matchFields") or []
    if not expressions and not fields:
        return False
    return all(_holds(e, labels) for e in expressions) and all(_holds(f, {"metadata.name": name}) for f in fields)


def _holds(expression: Any, labels: Mapping[str, Any]) -> bool:
    if not isinstance(expression, Mapping):
        return False
    key, operator = expression.get("key"), expression.get("operator")
    values: Sequence[Any] = expression.get("values") or []
    has, value = key in labels, labels.get(key)
    if operator == "In":
        return has and value in values
    if operator == "NotIn":
        return not has or value not in values
    if operator == "Exists":
        return has
    if operator == "DoesNotExist":
        return not has
    if operator in ("Gt", "Lt") and has and len(values) == 1:
        try:
            mine, theirs = int(value), int(values[0])
        except (TypeError, ValueError):
            return False
        return mine > theirs if operator == "Gt" else mine < theirs
    return False


def _tolerated(taint: Mapping[str, Any], tolerations: Any) -> bool:
    if not isinstance(tolerations, list):
        return False
    for toleration in tolerations:
        if not isinstance(toleration, Mapping):
            continue
        if toleration.get("effect") not in (None, "", taint.get("effect")):
            continue
        key, operator = toleration.get("key"), toleration.get("operator") or "Equal"
        if operator == "Exists" and key in (None, "", taint.get("key")):
            return True
        if operator == "Equal" and key == taint.get("key") and (toleration.get("value") or "") == (taint.get("value") or ""):
            return True
    return False


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}
