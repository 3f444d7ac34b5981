"""GPUs held by pods bound to a node that its report cannot show yet. Pure.

With the node's allocation ledger (``gpupair.io/allocations``, same generation as the free
report) the answer is exact: a GPU pod bound to the node, not terminal, that the ledger does not
list holds GPUs the report still counts as free. Without a usable ledger (an older reporter, or
one the codec rejected) only a lower bound is honest: a pod bound after the report's
``reportedAt`` is certainly not in it (both at one-second precision, so the same second does not
count); a pod bound just before the scan may not have been admitted by the kubelet yet either.

Where the extender left a plan (``gpupair.io/planned``) naming devices the report still shows
free, those devices are drawn as reserved; otherwise only the count is known ("unplaced").
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from gpupair.decide.pod.pod_request import DEFAULT_RESOURCE, PodRequestError, gpu_request
from gpupair.topology.report import NodeReport
from gpupair.decide.judge.verdict import PLANNED_KEY, parse_set
from gpupair.status.objects import annotations, is_terminal, meta, pod_key, scheduled_at

Basis = Literal["ledger", "binding-time"]


@dataclass
class ReservedGpus:
    basis: Basis
    pods: list[str] = field(default_factory=list)
    devices: set[int] = field(default_factory=set)
    unplaced: int = 0


def bound_gpu_pods(pods: Iterable[Mapping[str, Any]], resource: str = DEFAULT_RESOURCE
                   ) -> dict[str, list[tuple[Mapping[str, Any], int]]]:
    """Node name -> [(pod, GPUs)] for pods bound to it, not terminal, asking for GPUs."""
    by_node: dict[str, list[tuple[Mapping[str, Any], int]]] = {}
    for pod in pods:
        node = (pod.get("spec") or {}).get("nodeName")
        if not node or is_terminal(pod):
            continue
        try:
            gpus = gpu_request(pod, resource)
        except PodRequestError:
            continue  # the apiserver validated it; an unreadable request is not ours to judge
        if gpus > 0:
            by_node.setdefault(node, []).append((pod, gpus))
    return by_node


def _unreported(pod: Mapping[str, Any], report: NodeReport) -> bool:
    namespace, name = pod_key(pod)
    if report.ledger is not None:
        return not report.ledger.lists(namespace, name, str(meta(pod).get("uid") or ""))
    bound_at = scheduled_at(pod)
    return bound_at is not None and bound_at > report.reported_at


def reservation(bound: Iterable[tuple[Mapping[str, Any], int]], report: NodeReport) -> ReservedGpus:
    """What the pods bound to one node hold that its report does not show yet."""
    result = ReservedGpus(basis="ledger" if report.ledger is not None else "binding-time")
    free = report.state.free
    for pod, gpus in sorted(bound, key=lambda item: pod_key(item[0])):
        if not _unreported(pod, report):
            continue
        namespace, name = pod_key(pod)
        result.pods.append(f"{namespace}/{name}")
        planned = _plan(annotations(pod).get(PLANNED_KEY))
        if planned and len(planned) == gpus and set(planned) <= free - result.devices:
            result.devices |= set(planned)
        else:
            result.unplaced += gpus
    return result


def _plan(raw: str | None) -> tuple[int, ...] | None:
    if not raw:
        return None
    try:
        return parse_set(raw)
    except ValueError:
        return None
