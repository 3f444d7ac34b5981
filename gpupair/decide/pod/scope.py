"""How close a multi-GPU pod's set must be: the pod annotation ``gpupair.io/scope``. Pure.

- ``numa`` (the default): today's rule, one NUMA node (or the fewest the size needs);
- ``pcie-switch``: every pair behind one PCIe switch (``PIX``) or joined by NVLink;
- ``nvlink``: every pair joined by NVLink (``NV#``), as PCIe boards with bridges pair them.

``gpupair.io/placement`` still says how strict: under ``required`` a node passes only where the
set its picker would take (the device plugin's, or DRA's allocator's first fit) is within the
scope; under ``preferred`` such nodes rank above every other, and the rest still take the pod;
``none`` ignores topology, scope included. A value gpupair does not know counts as ``nvlink``,
the strictest, never as the default: a typo must not loosen placement (as for placement).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from enum import Enum
from itertools import combinations
from typing import Any

from gpupair.decide.devices.placement import min_numa_nodes
from gpupair.topology import links
from gpupair.topology.layout import NodeLayout

SCOPE_KEY = "gpupair.io/scope"  # pod annotation, and namespace label for its default


class Scope(str, Enum):
    NUMA = "numa"
    PCIE_SWITCH = "pcie-switch"
    NVLINK = "nvlink"

    @property
    def phrase(self) -> str:
        """How a reason says it: ``need 2 GPUs joined by NVLink``."""
        return {Scope.NUMA: "on one NUMA node", Scope.PCIE_SWITCH: "behind one PCIe switch",
                Scope.NVLINK: "joined by NVLink"}[self]


CHOICES = ", ".join(s.value for s in Scope)
_PIX = links.distance("PIX")


def parse_scope(value: Any) -> Scope:
    """``"NVLink "`` -> Scope.NVLINK; ValueError naming the choices otherwise."""
    text = value.strip().lower() if isinstance(value, str) else None
    for scope in Scope:
        if text == scope.value:
            return scope
    raise ValueError(f"{SCOPE_KEY}: {value!r} is not a scope gpupair knows (one of {CHOICES})")


def pod_scope(pod: Any) -> tuple[Scope, str]:
    """The scope a pod's annotation asks (``numa`` without one), and why a bad value was read
    as ``nvlink`` ("" if it was not)."""
    meta = pod.get("metadata") if isinstance(pod, Mapping) else None
    annotations = meta.get("annotations") if isinstance(meta, Mapping) else None
    if not isinstance(annotations, Mapping) or SCOPE_KEY not in annotations:
        return Scope.NUMA, ""
    try:
        return parse_scope(annotations[SCOPE_KEY]), ""
    except ValueError as exc:
        return Scope.NVLINK, f"{exc}; treated as {Scope.NVLINK.value}"


def _pair_within(label: str, scope: Scope) -> bool:
    if scope is Scope.NVLINK:
        return links.nvlink_count(label) > 0
    return links.distance(label) <= _PIX


def within(layout: NodeLayout, chosen: Iterable[int], scope: Scope) -> bool:
    """Whether a set of GPUs is within ``scope`` (a single GPU always is)."""
    chosen = tuple(chosen)
    if len(chosen) <= 1:
        return True
    if scope is Scope.NUMA:
        needed = min_numa_nodes(layout, len(chosen))
        return needed is not None and len({layout.numa_of(i) for i in chosen}) <= needed
    return all(_pair_within(layout.link(i, j), scope) for i, j in combinations(chosen, 2))


def free_sets(layout: NodeLayout, free: Iterable[int], k: int, scope: Scope, limit: int = 4) -> list[tuple[int, ...]]:
    """Up to ``limit`` sets of ``k`` free GPUs within ``scope``, in index order (for reasons:
    "free NVLink sets: GPU2+GPU3"). Pairs are what bridges make; larger k over an 8-GPU node
    stays small (70 sets of 4)."""
    found = []
    for chosen in combinations(sorted(free), k):
        if within(layout, chosen, scope):
            found.append(chosen)
            if len(found) >= limit:
                break
    return found
