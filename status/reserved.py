"""GPUs held by pods bound to a node that its report cannot show yet. Pure.

A free report is a scan of the kubelet at ``reportedAt``; a GPU pod bound after that instant is
certainly not in it, so its GPUs count as reserved. This is a lower bound, said so honestly: a
pod bound just before the scan may not have been admitted by the kubelet yet either, and only a
per-pod allocation ledger tied to the report's generation can tell those apart. Where the
extender left a plan (``gpupair.io/planned``) naming devices the report still shows free, those
devices are drawn as reserved; otherwise only the count is known ("unplaced").
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from gpupair.pod_request import DEFAULT_RESOURCE, PodRequestError, gpu_request
from gpupair.verdict import PLANNED_KEY, parse_set
from status.objects import annotations, is_terminal, pod_key, scheduled_at


@dataclass
class Reservation:
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


def reservation(bound: Iterable[tuple[Mapping[str, Any], int]], reported_at: datetime,
                free: frozenset[int]) -> Reservation:
    """What the pods bound to one node after ``reported_at`` hold, against the report's free set."""
    result = Reservation()
    for pod, gpus in sorted(bound, key=lambda item: pod_key(item[0])):
        bound_at = scheduled_at(pod)
        if bound_at is None or bound_at <= reported_at:
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
