"""Pods that ask for the network (``gpupair.io/nic: required``) and whether their grant lets NCCL
use GPUDirect RDMA.

A grant is GDR-capable when every granted GPU has a NIC at ``GDR_LEVEL`` or closer. That is
NCCL's own default cut-off: ``ncclTopoCheckGdr`` (src/graph/paths.cc) starts from
``netGdrLevel = PATH_PXB`` and moves only for ``NCCL_NET_GDR_LEVEL`` (or C2C platforms); a GPU
farther from the NIC has its traffic staged through host memory. It is also gpupair's default
ask (``--nic-level``), but it is judged apart from the ask: a pod asking at ``PHB`` granted a
PHB GPU is not counted as GDR-capable.
"""

from __future__ import annotations

from gpupair.decide.devices import placement

from gpupair.topology import links
from gpupair.topology.layout import NodeLayout, NodeState
from gpupair.topology.nics import NicLayout
from gpupair.decide.judge.verdict import nic_facts

GDR_LEVEL = "PXB"  # NCCL's default NCCL_NET_GDR_LEVEL (PATH_PXB in ncclTopoCheckGdr)


def gdr_capable(nics: NicLayout | None, granted: tuple[int, ...]) -> bool:
    """Every granted GPU has a NIC at GDR_LEVEL or closer (the verdict's gpupair.io/nic-link)."""
    worst = nic_facts(nics, tuple(sorted(granted))).get("nic_link")
    return worst not in (None, "-") and links.distance(worst) <= links.distance(GDR_LEVEL)


def near_gpus(nics: NicLayout | None, level: str) -> frozenset[int]:
    """The GPUs with a NIC at ``level`` or closer."""
    if nics is None:
        return frozenset()
    limit = links.distance(level)
    found = {g: nics.nearest(g) for g in range(len(nics.links))}
    return frozenset(g for g, near in found.items() if near is not None and links.distance(near[1]) <= limit)


def servable(layout: NodeLayout, nics: NicLayout | None, level: str, gpus: int) -> bool:
    """An empty node of this shape has a close set of ``gpus`` near a NIC at ``level``: a pod of
    that size can ask for the network at all (on the lopsided board: up to 4 GPUs)."""
    return placement.fit(NodeState(layout, near_gpus(nics, level) & frozenset(range(layout.size))), gpus).feasible
