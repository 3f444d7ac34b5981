"""Which GPU pairs a DRA claim asking ``gpupair.io/scope: nvlink`` may take, from the links the
reporters measured on each node. Pure.

A claim is written once, before any node is chosen, so its ``firstAvailable`` subrequests must be
right on every node the allocator might try. Nodes are grouped into classes: the nodes whose link
matrices are the same (one board model, one way of bridging it). Then, per class:

- **bridged** (some pairs ``NV#``, some not: PCIe boards with NVLink bridges): one subrequest per
  bridged pair, its selector naming the pair's two devices;
- **NVSwitch** (every pair ``NV#``: HGX/DGX boards): any two of its GPUs are as good, so it needs
  no pair at all. Where every class is one, the claim needs one subrequest without a selector;
  beside bridged classes, one subrequest whose selector names that class's devices;
- **unlinked** (no ``NV#`` pair): nothing. Where no class has an ``NV#`` pair, the caller knows
  it (``bridged`` is False) and says so.

A selector names devices by one attribute of the DRA driver: ``index``, the standard
``resource.kubernetes.io/pciBusID`` or ``uuid``. NVIDIA's driver publishes no ``index`` since
v25.12 (k8s-dra-driver-gpu 36fc80ab), and its ``pciBusID`` is the lower-case, four-digit-domain
form that k8s.io/dynamic-resource-allocation/deviceattribute checks (``0000:18:00.0``). Index
and PCI address repeat from node to node, so a selector by them is kept only where it is safe:
on every known node, every two devices it matches are joined by NVLink. Otherwise the class's
selector names its devices by ``uuid`` (unique to one GPU), which may grow long: a selector over
the CEL limit is left out, with a note. The safety check is what lets the subrequests of all
classes sit in one list: on any node, whichever of them the allocator takes is a bridged pair.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from itertools import combinations

from gpupair.topology import links
from gpupair.topology.layout import NodeLayout

ATTRIBUTES = ("index", "pciBusID", "uuid")
PCI_DOMAIN = "resource.kubernetes.io"  # the standard attribute's domain (KEP-5316)
MAX_SELECTOR_CHARS = 10 * 1024  # CELSelectorExpressionMaxLength


@dataclass(frozen=True)
class LinkClass:
    """Nodes with one link matrix."""

    links: tuple[tuple[str, ...], ...]
    nodes: tuple[str, ...]  # sorted

    @property
    def nvlink_pairs(self) -> tuple[tuple[int, int], ...]:
        n = len(self.links)
        return tuple((i, j) for i, j in combinations(range(n), 2) if links.nvlink_count(self.links[i][j]))

    @property
    def kind(self) -> str:
        """``nvswitch`` (every pair NV#), ``bridged`` (some) or ``unlinked`` (none, or one GPU)."""
        pairs, n = len(self.nvlink_pairs), len(self.links)
        if not pairs:
            return "unlinked"
        return "nvswitch" if pairs == n * (n - 1) // 2 else "bridged"


@dataclass(frozen=True)
class NvlinkChoices:
    """The subrequests to write: one CEL selector each, None for one without a selector."""

    selectors: tuple[str | None, ...]
    known: bool  # some node's links are known
    bridged: bool  # some class has an NV# pair
    notes: tuple[str, ...] = ()  # what was left out, and why


def link_classes(layouts: Mapping[str, NodeLayout]) -> list[LinkClass]:
    """The classes of ``layouts`` (node name -> layout), the most nodes first, then by name."""
    grouped: dict[tuple[tuple[str, ...], ...], list[str]] = {}
    for name, layout in layouts.items():
        grouped.setdefault(tuple(tuple(row) for row in layout.links), []).append(name)
    found = [LinkClass(matrix, tuple(sorted(names))) for matrix, names in grouped.items()]
    return sorted(found, key=lambda c: (-len(c.nodes), c.nodes[0]))


def dra_pci(bus_id: str) -> str:
    """The reporter's ``00000000:18:00.0`` as the DRA driver publishes it: ``0000:18:00.0``."""
    domain, bus, rest = bus_id.split(":")
    device, function = rest.split(".")
    return "%04x:%02x:%02x.%x" % (int(domain, 16), int(bus, 16), int(device, 16), int(function, 16))


def _value(layout: NodeLayout, index: int, attribute: str) -> int | str | None:
    device = layout.devices[index]
    if attribute == "index":
        return index
    if attribute == "uuid":
        return device.uuid or None
    try:
        return dra_pci(device.pci_bus_id) if device.pci_bus_id else None
    except ValueError:
        return None


def _values(layouts: Mapping[str, NodeLayout], nodes: Iterable[str], members: Iterable[int],
            attribute: str) -> frozenset[int | str] | None:
    """The attribute's values of ``members`` on ``nodes``; None where a device has none."""
    found = set()
    for node in nodes:
        for index in members:
            value = _value(layouts[node], index, attribute)
            if value is None:
                return None
            found.add(value)
    return frozenset(found)


def _safe(layouts: Mapping[str, NodeLayout], attribute: str, values: frozenset[int | str]) -> bool:
    """Whether every two devices the selector matches, on any known node, are joined by NVLink."""
    for layout in layouts.values():
        matched = [i for i in range(layout.size) if _value(layout, i, attribute) in values]
        if any(not links.nvlink_count(layout.link(i, j)) for i, j in combinations(matched, 2)):
            return False
    return True


def selector(attribute: str, values: Iterable[int | str]) -> str:
    """The CEL selector matching devices whose ``attribute`` is one of ``values``."""
    ordered = sorted(values)
    listed = ", ".join(json.dumps(v) for v in ordered)
    domain = f'"{PCI_DOMAIN}"' if attribute == "pciBusID" else "device.driver"
    return f"device.attributes[{domain}].{attribute} in [{listed}]"


def nvlink_choices(layouts: Mapping[str, NodeLayout], attribute: str = "pciBusID",
                   most: int = 7) -> NvlinkChoices:
    """The subrequests for a 2-GPU request under scope ``nvlink`` on nodes ``layouts``, at most
    ``most`` of them, selecting by ``attribute`` where that is safe and by ``uuid`` otherwise."""
    if attribute not in ATTRIBUTES:
        raise ValueError(f"attribute must be one of {', '.join(ATTRIBUTES)}, got {attribute!r}")
    classes = link_classes(layouts)
    bridged = any(c.kind != "unlinked" for c in classes)
    if classes and all(c.kind == "nvswitch" for c in classes):
        return NvlinkChoices((None,), True, True)
    wanted: list[tuple[LinkClass, tuple[int, ...]]] = []
    for cls in classes:
        if cls.kind == "nvswitch":
            wanted.append((cls, tuple(range(len(cls.links)))))
        elif cls.kind == "bridged":
            wanted += [(cls, pair) for pair in cls.nvlink_pairs]
    selectors: list[str] = []
    notes: list[str] = []
    for cls, members in wanted:
        written = None
        for name in dict.fromkeys((attribute, "uuid")):
            values = _values(layouts, cls.nodes, members, name)
            if values is not None and _safe(layouts, name, values):
                written = selector(name, values)
                break
        what = (f"GPU{'+GPU'.join(map(str, members))}" if len(members) == 2 else "any two GPUs") + \
            f" of {_nodes(cls)}"
        if written is None:
            notes.append(f"{what}: no attribute names those devices alone")
        elif len(written) > MAX_SELECTOR_CHARS:
            notes.append(f"{what}: the selector would be {len(written)} characters, over CEL's {MAX_SELECTOR_CHARS}")
        elif written not in selectors:
            selectors.append(written)
    if len(selectors) > most:
        notes.append(f"{len(selectors) - most} NVLink subrequests left out: a request holds {most}")
        selectors = selectors[:most]
    return NvlinkChoices(tuple(selectors), bool(classes), bridged, tuple(notes))


def _nodes(cls: LinkClass) -> str:
    shown = ", ".join(cls.nodes[:3])
    return f"node {shown}" if len(cls.nodes) == 1 else f"nodes {shown}{', ...' if len(cls.nodes) > 3 else ''}"


def index_choices(pairs: Iterable[tuple[int, int]]) -> NvlinkChoices:
    """``--nvlink-pairs``, the cluster-wide override: one subrequest per pair, by ``index``."""
    found = tuple(f"device.attributes[device.driver].index in [{a}, {b}]" for a, b in pairs)
    return NvlinkChoices(found, bool(found), bool(found))
