"""Why no DRA node can allocate a claim pod's GPUs, in gpupair's words. Pure.

kube-scheduler calls an extender only with the nodes its own filters passed. When DynamicResources
refuses every node (a ``matchAttribute`` constraint no node can meet, too few free devices), the
extender is never asked and the pod waits with the scheduler's generic "cannot allocate all
claims". The extender, which watches the pods and the claims, then says which constraint, on
which nodes, and the free sets there: "need 2 GPUs with one resource.kubernetes.io/pcieRoot;
dra-node-1: free GPU3 (pci0000:30) | GPU4 (pci0000:40)".
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

FreeDevice = tuple[str, Mapping[str, Any]]  # (its name, as GPU<index>; its attribute values)
MAX_NODES = 8  # named in one message; the rest counted (an Event note holds 1024 bytes)


def _groups(free: Sequence[FreeDevice], attributes: Sequence[str]) -> list[tuple[tuple[Any, ...], list[str]]]:
    """The free devices by their values of ``attributes`` (one group without any), in the
    devices' order; a device without one of them joins no group (the constraint fails it)."""
    groups: dict[tuple[Any, ...], list[str]] = {}
    for name, values in free:
        key = tuple(values.get(a) for a in attributes)
        if None not in key:
            groups.setdefault(key, []).append(name)
    return list(groups.items())


def why_unallocatable(gpus: int, attributes: Sequence[str], nodes: Mapping[str, Sequence[FreeDevice]]) -> str:
    """The reason no node in ``nodes`` (node -> its free GPUs) holds ``gpus`` GPUs that agree on
    every attribute in ``attributes``; "" where some node does (then the reason is not the GPUs')."""
    if not nodes:
        return ""
    where = []
    for node in sorted(nodes):
        groups = _groups(nodes[node], attributes)
        if any(len(members) >= gpus for _, members in groups):
            return ""
        if not nodes[node]:
            where.append(f"{node}: none free")
        elif attributes:
            where.append(f"{node}: free " + " | ".join(
                "+".join(members) + f" ({'/'.join(map(str, key))})" for key, members in groups))
        else:
            where.append(f"{node}: free " + "+".join(name for name, _ in nodes[node]))
    asked = f"{gpus} GPUs" + (f" with one {' and one '.join(attributes)}" if attributes else "")
    more = f"; {len(where) - MAX_NODES} more nodes" if len(where) > MAX_NODES else ""
    return f"gpupair: no DRA node can allocate this pod's claims: need {asked}; " + "; ".join(where[:MAX_NODES]) + more
