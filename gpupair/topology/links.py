"""GPU-to-GPU link classes, as `nvidia-smi topo -m` names them.

Nearest first: ``NV#`` (NVLink; more links is closer), ``PIX``, ``PXB``, ``PHB``, ``NODE``,
``SYS``. ``X`` is a device's link to itself. Labels are kept as the plain strings nvidia-smi
prints so that reports, verdicts and TSV rows read exactly like the tool operators know.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

SELF = "X"
PCIE_CLASSES = ("PIX", "PXB", "PHB", "NODE", "SYS")  # nearest first
_NVLINK = re.compile(r"^NV([1-9][0-9]?)$")

# NVML's nvmlGpuTopologyLevel_t values and the nvidia-smi class each one prints as.
# INTERNAL (two GPUs on one board) has no label of its own; nvidia-smi shows such boards as PIX.
NVML_TOPOLOGY_LEVELS = {
    0: "PIX",  # NVML_TOPOLOGY_INTERNAL
    10: "PIX",  # NVML_TOPOLOGY_SINGLE: one PCIe switch
    20: "PXB",  # NVML_TOPOLOGY_MULTIPLE: several PCIe switches, no host bridge
    30: "PHB",  # NVML_TOPOLOGY_HOSTBRIDGE
    40: "NODE",  # NVML_TOPOLOGY_NODE: host bridges within one NUMA node
    50: "SYS",  # NVML_TOPOLOGY_SYSTEM: across the CPU interconnect (QPI/UPI/Infinity Fabric)
}
NVML_TOPOLOGY_NAMES = {
    "INTERNAL": 0,
    "SINGLE": 10,
    "MULTIPLE": 20,
    "HOSTBRIDGE": 30,
    "NODE": 40,
    "SYSTEM": 50,
}

# Older drivers print SOC for what newer ones call SYS.
_ALIASES = {"SOC": "SYS"}


class UnknownLinkError(ValueError):
    """A label that is not one of nvidia-smi's GPU link classes."""


def normalize(label: str) -> str:
    """Return the canonical spelling of a link label, or raise UnknownLinkError."""
    text = label.strip().upper()
    text = _ALIASES.get(text, text)
    if text == SELF or text in PCIE_CLASSES or _NVLINK.match(text):
        return text
    raise UnknownLinkError(f"unknown link class {label!r}")


def is_known(label: str) -> bool:
    try:
        normalize(label)
    except UnknownLinkError:
        return False
    return True


def nvlink_count(label: str) -> int:
    """Number of NVLinks a label names (``NV12`` -> 12); 0 for PCIe classes."""
    match = _NVLINK.match(label)
    return int(match.group(1)) if match else 0


def nvlink_label(count: int) -> str:
    if count < 1:
        raise ValueError("an NVLink label needs at least one link")
    return f"NV{count}"


def from_nvml_level(level: int | str) -> str:
    """Map an NVML common-ancestor level (number or name) to its nvidia-smi class."""
    if isinstance(level, str):
        if level.upper() not in NVML_TOPOLOGY_NAMES:
            raise UnknownLinkError(f"unknown NVML topology level {level!r}")
        level = NVML_TOPOLOGY_NAMES[level.upper()]
    try:
        return NVML_TOPOLOGY_LEVELS[level]
    except KeyError:
        raise UnknownLinkError(f"unknown NVML topology level {level!r}") from None


def pair_label(pcie_class: str, nvlinks: int) -> str:
    """The label nvidia-smi prints for a pair: NVLink wins over the PCIe path."""
    return nvlink_label(nvlinks) if nvlinks > 0 else normalize(pcie_class)


def distance(label: str) -> tuple[int, int]:
    """Sort key, smaller is closer: NV18 < NV1 < PIX < PXB < PHB < NODE < SYS."""
    label = normalize(label)
    if label == SELF:
        return (-1, 0)
    count = nvlink_count(label)
    if count:
        return (0, -count)
    return (1 + PCIE_CLASSES.index(label), 0)


def worst(labels: Iterable[str]) -> str | None:
    """The farthest link among labels (None for an empty set, e.g. a single GPU)."""
    found = [normalize(label) for label in labels]
    return max(found, key=distance) if found else None


def crosses_sockets(label: str) -> bool:
    return normalize(label) == "SYS"


# The NVIDIA device plugin's best-effort policy (go-gpuallocator, besteffort_policy.go,
# calculateGPUPairScore) weighs each link between a pair and sums the weights: PCIe path
# CrossCPU 10, SameCPU 20, HostBridge 30, MultiSwitch 40, SingleSwitch 50, SameBoard 60,
# plus 100 per NVLink. A topo -m label carries NVLink or PCIe, not both, so an NV# pair
# scores its NVLinks only; NVLink still dominates every PCIe path, as in the plugin.
_PLUGIN_PCIE_WEIGHT = {"SYS": 10, "NODE": 20, "PHB": 30, "PXB": 40, "PIX": 50}


def plugin_pair_weight(label: str) -> int:
    label = normalize(label)
    if label == SELF:
        return 0
    count = nvlink_count(label)
    if count:
        return 100 * count
    return _PLUGIN_PCIE_WEIGHT[label]
