"""Read an audit pod's log the way the seed's ``classify_log`` did, and give its verdict.

The pod runs ``nvidia-smi --query-gpu=index,uuid,pci.bus_id --format=csv`` then
``nvidia-smi topo -m``. Inside a container nvidia-smi only sees the granted GPUs and numbers them
GPU0..GPUn-1 in PCI order, so neither the CSV ``index`` nor the topo matrix names the host's GPU.
The PCI bus id is the one name both sides share: the node's gpupair report maps it to the host
index and NUMA node. Without a report, NUMA comes from the matrix's ``NUMA Affinity`` column and
the host index stays unknown.

Pure: text and a layout in, a verdict or a LogParseError out.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from gpupair.decide.judge import verdict as verdicts
from gpupair.topology.layout import NO_NUMA, Device, NodeLayout, normalize_pci
from gpupair.topology.smi_topo import TopoParseError, parse_topo_matrix

UNKNOWN = "UNKNOWN"  # the seed's word for a column it could not fill

# One data row of the CSV: "0, GPU-1c7f...-..., 00000000:21:00.0". The seed matched /^[0-9]+, GPU-/;
# MIG-… uuids are accepted too, so a MIG slice reads as a row instead of as "no GPUs".
_CSV_ROW = re.compile(
    r"^\s*(\d+),\s*((?:GPU|MIG)-[0-9A-Za-z/-]+),\s*([0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7])\s*$"
)


class LogParseError(ValueError):
    """The log does not say which GPUs the pod got (the seed's FAIL_PARSE); the message says why."""


@dataclass(frozen=True)
class VisibleGpu:
    """One GPU as the container's nvidia-smi lists it."""

    index: int  # container-local: 0..n-1
    uuid: str
    pci_bus_id: str  # canonical, "00000000:21:00.0"


def parse_query_csv(text: str) -> tuple[VisibleGpu, ...]:
    """The ``--query-gpu=index,uuid,pci.bus_id --format=csv`` rows in ``text`` (header optional)."""
    rows = []
    for line in text.splitlines():
        match = _CSV_ROW.match(line)
        if match:
            index, uuid, pci = match.groups()
            rows.append(VisibleGpu(int(index), uuid, normalize_pci(pci)))
    return tuple(rows)


def classify_log(text: str, node: NodeLayout | None = None, expected: int | None = None) -> verdicts.Verdict:
    """The verdict for one pod log; ``node`` is the node's reported layout when it has one.

    ``expected`` is how many GPUs the pod asked for: a log that lists another number of GPUs did
    not run the way the audit meant (the seed required exactly two).
    """
    gpus = parse_query_csv(text)
    if not gpus:
        raise LogParseError("no GPU rows from nvidia-smi --query-gpu in the log")
    if [g.index for g in gpus] != list(range(len(gpus))):
        raise LogParseError(f"GPU rows are not indexed 0..{len(gpus) - 1}: {[g.index for g in gpus]}")
    if len({g.pci_bus_id for g in gpus}) != len(gpus):
        raise LogParseError("the same PCI bus id is listed twice")
    if expected is not None and len(gpus) != expected:
        raise LogParseError(f"the pod saw {len(gpus)} GPU(s), it asked for {expected}")

    try:
        topo = parse_topo_matrix(text)
    except TopoParseError as exc:
        if len(gpus) > 1:  # one GPU has no pair to judge, so no matrix is needed
            raise LogParseError(f"nvidia-smi topo -m: {exc}") from None
        topo = None
    if topo is not None and len(topo.gpus) != len(gpus):
        raise LogParseError(f"topo -m shows {len(topo.gpus)} GPUs, --query-gpu lists {len(gpus)}")

    host_index = node.by_pci() if node is not None else {}
    numas = []
    hosts: list[int | None] = []
    for gpu in gpus:
        host = host_index.get(gpu.pci_bus_id)
        hosts.append(host)
        if host is not None:
            numas.append(node.numa_of(host))  # type: ignore[union-attr]
        elif topo is not None:
            numas.append(topo.numa_node_of(gpu.index))
        else:
            numas.append(NO_NUMA)

    # The container's own view as a layout, so the PASS/FAIL rule is the core's, unchanged.
    local = NodeLayout(
        devices=tuple(
            Device(index=g.index, uuid=g.uuid, pci_bus_id=g.pci_bus_id, numa_node=numa)
            for g, numa in zip(gpus, numas)
        ),
        links=topo.gpu_links if topo is not None else (("X",),),
    )
    seen = verdicts.classify(local, range(len(gpus)))
    # Columns in host order when every host index is known (they are then comparable across
    # pods); otherwise in the container's order with the GPU names left UNKNOWN.
    if all(h is not None for h in hosts):
        order = sorted(range(len(gpus)), key=lambda i: hosts[i])  # type: ignore[arg-type,return-value]
        granted = verdicts.format_set([hosts[i] for i in order])  # type: ignore[misc]
    else:
        order = list(range(len(gpus)))
        granted = UNKNOWN
    return verdicts.Verdict(
        granted=granted,
        pci="+".join(gpus[i].pci_bus_id for i in order),
        numa="+".join(f"NUMA{numas[i]}" if numas[i] != NO_NUMA else UNKNOWN for i in order),
        link=seen.link,
        p2p=seen.p2p,
        result=seen.result,
    )
