"""The network cards next to a node's GPUs: which RDMA NICs there are, and each GPU x NIC link.

NCCL moves a multi-node job's gradients GPU-to-NIC directly (GPUDirect RDMA) only when the NIC
is close on PCIe (NCCL_NET_GDR_LEVEL; PXB in ncclTopoCheckGdr without it); otherwise every byte is staged through
host memory. So a NIC is described by where it sits, as a GPU is, and each GPU x NIC pair gets
a link class in nvidia-smi's vocabulary (``PIX``, ``PXB``, ``PHB``, ``NODE``, ``SYS``).

NVML has no NIC API. The reporter computes the links from the PCI hierarchy in sysfs
(``pci_link``); ``nvidia-smi topo -m`` input gives the same facts from its NIC columns. Both
are published as ``gpupair.io/nics``, an annotation of its own, so extenders older than it
(whose topology decoder forbids unknown fields) keep working beside reporters that write it.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict, Field, field_validator

from gpupair.topology import links
from gpupair.kubewire.wire import annotation_model

NICS_KEY = "gpupair.io/nics"
FORMAT_VERSION = 1
MAX_NICS = 32
MAX_GPUS = 64
PCIE_CLASSES = ("PIX", "PXB", "PHB", "NODE", "SYS")


@dataclass(frozen=True)
class Nic:
    name: str  # as in /sys/class/infiniband and the NIC legend: mlx5_0, mlx5_bond_0
    pci_bus_id: str = ""
    numa_node: int = -1
    pcie_root: str = ""


@dataclass(frozen=True)
class NicLayout:
    """``links[g][n]``: the class between GPU g and NIC n (GPUs in layout index order)."""

    nics: tuple[Nic, ...]
    links: tuple[tuple[str, ...], ...]

    def __post_init__(self) -> None:
        if any(len(row) != len(self.nics) for row in self.links):
            raise ValueError(f"GPU x NIC links must have {len(self.nics)} columns")
        for row in self.links:
            for label in row:
                if label not in PCIE_CLASSES:
                    raise ValueError(f"unknown GPU x NIC link {label!r}")

    def nearest(self, gpu: int) -> tuple[str, str] | None:
        """(NIC name, link) of the closest NIC to GPU ``gpu``, the first such in NIC order;
        None without NICs."""
        if not self.nics or not 0 <= gpu < len(self.links):
            return None
        row = self.links[gpu]
        best = min(range(len(row)), key=lambda n: links.distance(row[n]))
        return self.nics[best].name, row[best]


def pci_link(gpu_path: Sequence[str], nic_path: Sequence[str], gpu_numa: int, nic_numa: int) -> str:
    """The class between two PCI devices from their sysfs paths below /sys/devices
    (``pci0000:20/0000:20:01.1/.../0000:21:00.0``, the device itself last).

    Different root complexes: ``NODE`` on one NUMA node, else ``SYS`` (a NUMA node unknown on
    either side counts as another one: gpupair never judges a path closer than it can show).
    One root complex: ``PHB`` when only the root is shared; below a shared bridge, ``PIX`` when
    each device is at most one bridge (a switch's downstream port) below it, as behind one
    PCIe switch, else ``PXB``."""
    if not gpu_path or not nic_path or gpu_path[0] != nic_path[0]:
        return "NODE" if gpu_numa >= 0 and gpu_numa == nic_numa else "SYS"
    common = 0
    for a, b in zip(gpu_path, nic_path):
        if a != b:
            break
        common += 1
    if common <= 1:
        return "PHB"
    below_gpu, below_nic = len(gpu_path) - common - 1, len(nic_path) - common - 1
    return "PIX" if below_gpu <= 1 and below_nic <= 1 else "PXB"


# ---- the annotation


class _NicsModel(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


class NicEntry(_NicsModel):
    name: str = Field(min_length=1, max_length=64)
    pciBusID: str = Field(default="", max_length=32)
    numaNode: int = Field(default=-1, ge=-1, le=1024)
    pcieRoot: str = Field(default="", max_length=64)


class NicsReport(_NicsModel):
    v: int = Field(default=FORMAT_VERSION, ge=FORMAT_VERSION, le=FORMAT_VERSION)
    topology: str = Field(min_length=1, max_length=64)  # fingerprint of gpupair.io/topology
    nics: list[NicEntry] = Field(max_length=MAX_NICS)
    links: list[list[str]] = Field(max_length=MAX_GPUS)  # GPU x NIC

    @field_validator("links")
    @classmethod
    def _known(cls, rows: list[list[str]]) -> list[list[str]]:
        for row in rows:
            for label in row:
                if label not in PCIE_CLASSES:
                    raise ValueError(f"unknown GPU x NIC link {label!r}")
        return rows


class NicsError(ValueError):
    """``gpupair.io/nics`` cannot be used; the message says why."""


def encode_nics(layout: NicLayout, topology_fingerprint: str) -> str:
    report = NicsReport(
        topology=topology_fingerprint,
        nics=[NicEntry(name=n.name, pciBusID=n.pci_bus_id, numaNode=n.numa_node, pcieRoot=n.pcie_root)
              for n in layout.nics],
        links=[list(row) for row in layout.links],
    )
    return json.dumps(report.model_dump(mode="json"), separators=(",", ":"))


def decode_nics(text: object, topology_fingerprint: str, gpus: int) -> NicLayout:
    """The NICs of a report whose topology has this fingerprint and ``gpus`` GPUs."""
    report = annotation_model(NICS_KEY, text, NicsReport, 64 * 1024, NicsError)
    if report.topology != topology_fingerprint:
        raise NicsError(f"{NICS_KEY} refers to topology {report.topology}, the node shows {topology_fingerprint}")
    if len(report.links) != gpus:
        raise NicsError(f"{NICS_KEY} has links for {len(report.links)} GPUs, the topology {gpus}")
    try:
        return NicLayout(
            nics=tuple(Nic(e.name, e.pciBusID, e.numaNode, e.pcieRoot) for e in report.nics),
            links=tuple(tuple(row) for row in report.links),
        )
    except ValueError as exc:
        raise NicsError(f"{NICS_KEY} rejected: {exc}") from None
