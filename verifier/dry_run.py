"""`gpupair verify --dry-run`: the annotations a granted device set would get, offline.

For operators and tests: the same classification the reporter runs (gpupair.decide.judge.verdict.classify),
fed from a layout file and a device list instead of the kubelet.
"""

from __future__ import annotations

import re

from gpupair.decide.judge import verdict
from gpupair.decide.pod.intent import parse_intent
from gpupair.topology.layout import NodeLayout, normalize_pci
from gpupair.topology.layout_file import read_layout

_GPU_NAME = re.compile(r"^GPU(\d+)$", re.IGNORECASE)


def device_indices(spec: str, layout: NodeLayout) -> tuple[int, ...]:
    """``1,2`` / ``GPU1+GPU2`` / GPU UUIDs / PCI bus ids -> layout indices."""
    by_uuid = {uuid.lower(): index for uuid, index in layout.by_uuid().items()}
    by_pci = layout.by_pci()
    found: list[int] = []
    for part in filter(None, (p.strip() for p in re.split(r"[,+\s]+", spec))):
        if part.isdecimal():
            index = int(part)
        elif match := _GPU_NAME.match(part):
            index = int(match.group(1))
        elif part.lower() in by_uuid:
            index = by_uuid[part.lower()]
        else:
            try:
                index = by_pci[normalize_pci(part)]
            except (ValueError, KeyError):
                raise ValueError(f"device {part!r} is not an index, GPU name, UUID or PCI bus id on this node") from None
        if not 0 <= index < layout.size:
            raise ValueError(f"GPU{index} is not on this node (it has {layout.size})")
        found.append(index)
    if not found:
        raise ValueError("no devices given")
    return tuple(sorted(set(found)))


def annotations_for(layout_path: str, devices: str, planned: str | None = None,
                    placement: str = "required") -> dict[str, str]:
    intent = parse_intent(placement, "--placement")  # before any file is read: a typo fails fast
    layout = read_layout(layout_path)
    indices = device_indices(devices, layout)
    plan = device_indices(planned, layout) if planned else None
    from gpupair.reporter.topology_source import nics_of_file  # a topo -m file's NIC columns

    return verdict.classify(layout, indices, plan, intent, nics_of_file(layout_path)).annotations()
