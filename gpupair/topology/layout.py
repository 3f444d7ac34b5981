"""A GPU node's layout as plain data: devices, the pairwise link matrix, P2P, free devices."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import cached_property

from gpupair.topology import limits, links

NO_NUMA = -1  # NVML and sysfs both say -1 when a device has no NUMA affinity


@dataclass(frozen=True)
class Device:
    index: int
    uuid: str = ""
    pci_bus_id: str = ""  # NVML's spelling: 8-digit domain, "00000000:21:00.0"
    numa_node: int = NO_NUMA
    pcie_root: str = ""  # DRA's pcieRoot, e.g. "pci0000:20", when known

    @property
    def name(self) -> str:
        return f"GPU{self.index}"


@dataclass(frozen=True)
class NodeLayout:
    """The static hardware part of a node: what does not change while the node runs.

    ``links[i][j]`` is the nvidia-smi label between device i and j (``X`` on the diagonal).
    ``p2p[i][j]`` is True/False where peer access was probed, None where unknown.
    Devices are listed in index order and ``devices[i].index == i``.
    """

    devices: tuple[Device, ...]
    links: tuple[tuple[str, ...], ...]
    p2p: tuple[tuple[bool | None, ...], ...] | None = None
    # The order a DRA allocator walks the devices (their order in the ResourceSlices), where it
    # is not index order; None: index order. Not part of the reporter's topology annotation.
    walk: tuple[int, ...] | None = None

    def __post_init__(self) -> None:
        n = len(self.devices)
        if n > limits.MAX_GPUS:  # the placement search grows combinatorially past it (gpupair.topology.limits)
            raise ValueError(f"{n} GPUs on one node; gpupair handles at most {limits.MAX_GPUS}")
        if self.walk is not None and sorted(self.walk) != list(range(n)):
            raise ValueError(f"walk order must list each of the {n} devices once")
        for position, device in enumerate(self.devices):
            if device.index != position:
                raise ValueError(f"device at position {position} has index {device.index}")
        if len(self.links) != n or any(len(row) != n for row in self.links):
            raise ValueError(f"link matrix must be {n}x{n}")
        for i in range(n):
            if links.normalize(self.links[i][i]) != links.SELF:
                raise ValueError(f"link GPU{i}->GPU{i} must be X, got {self.links[i][i]!r}")
            for j in range(i + 1, n):
                a, b = links.normalize(self.links[i][j]), links.normalize(self.links[j][i])
                if a != b:
                    raise ValueError(f"link matrix not symmetric at GPU{i},GPU{j}: {a} vs {b}")
                if a == links.SELF:
                    raise ValueError(f"link GPU{i}->GPU{j} is X off the diagonal")
        if self.p2p is not None and (
            len(self.p2p) != n or any(len(row) != n for row in self.p2p)
        ):
            raise ValueError(f"p2p matrix must be {n}x{n}")

    def __hash__(self) -> int:
        # Layouts key the placement caches (lru_cache): hashing the device and link tuples on
        # every lookup took a third of the extender's CPU at 1,213 nodes, so it is done once.
        try:
            return self.__dict__["_hash"]
        except KeyError:
            value = hash((self.devices, self.links, self.p2p, self.walk))
            object.__setattr__(self, "_hash", value)  # frozen: set once, as cached_property does
            return value

    def __getstate__(self) -> dict:
        # A str's hash differs between processes: a layout sent to another hashes afresh there.
        return {key: value for key, value in self.__dict__.items() if key != "_hash"}

    @property
    def size(self) -> int:
        return len(self.devices)

    @property
    def walk_order(self) -> tuple[int, ...]:
        return self.walk if self.walk is not None else tuple(range(len(self.devices)))

    def link(self, i: int, j: int) -> str:
        return self.links[i][j]

    def numa_of(self, index: int) -> int:
        """The device's NUMA node; for a device without one, its inferred group (negative)."""
        return self._groups[index]

    @cached_property
    def _groups(self) -> tuple[int, ...]:
        # Many boxes report no NUMA affinity (N/A, -1) yet show SYS between two halves. Devices
        # without a NUMA node form one locality group per set joined by non-SYS links: -1, -2...
        groups: list[int | None] = [
            d.numa_node if d.numa_node != NO_NUMA else None for d in self.devices
        ]
        label = NO_NUMA
        for start, group in enumerate(groups):
            if group is not None:
                continue
            groups[start] = label
            stack = [start]
            while stack:
                i = stack.pop()
                for j, other in enumerate(groups):
                    if other is None and links.normalize(self.links[i][j]) != "SYS":
                        groups[j] = label
                        stack.append(j)
            label -= 1
        return tuple(g for g in groups if g is not None)

    @cached_property
    def numa_nodes(self) -> dict[int, tuple[int, ...]]:
        """NUMA node (or inferred group, negative) -> device indices on it."""
        groups: dict[int, list[int]] = defaultdict(list)
        for device in self.devices:
            groups[self.numa_of(device.index)].append(device.index)
        return {n: tuple(groups[n]) for n in sorted(groups, key=lambda n: (n < 0, abs(n)))}

    @cached_property
    def pair_weights(self) -> tuple[tuple[int, ...], ...]:
        """Device-plugin pair weights (see links.plugin_pair_weight), precomputed once."""
        return tuple(tuple(links.plugin_pair_weight(label) for label in row) for row in self.links)

    def worst_link(self, indices: Iterable[int]) -> str | None:
        members = sorted(set(indices))
        return links.worst(
            self.links[a][b] for pos, a in enumerate(members) for b in members[pos + 1 :]
        )

    def p2p_of(self, indices: Iterable[int]) -> bool | None:
        """True when every pair probed peer-capable, False when any pair is not, else None."""
        members = sorted(set(indices))
        if len(members) < 2:
            return None
        if self.p2p is None:
            return None
        seen = [self.p2p[a][b] for pos, a in enumerate(members) for b in members[pos + 1 :]]
        if any(value is False for value in seen):
            return False
        if all(value is True for value in seen):
            return True
        return None

    def by_uuid(self) -> dict[str, int]:
        return {d.uuid: d.index for d in self.devices if d.uuid}

    def by_pci(self) -> dict[str, int]:
        return {normalize_pci(d.pci_bus_id): d.index for d in self.devices if d.pci_bus_id}


@dataclass(frozen=True)
class NodeState:
    """A layout together with the devices free right now."""

    layout: NodeLayout
    free: frozenset[int] = field(default_factory=frozenset)

    def __post_init__(self) -> None:
        bad = [i for i in self.free if not 0 <= i < self.layout.size]
        if bad:
            raise ValueError(f"free devices out of range: {sorted(bad)}")

    def free_by_numa(self) -> dict[int, tuple[int, ...]]:
        return {
            numa: tuple(i for i in members if i in self.free)
            for numa, members in self.layout.numa_nodes.items()
        }

    def take(self, indices: Iterable[int]) -> "NodeState":
        return NodeState(self.layout, self.free - frozenset(indices))

    @cached_property
    def free_mask(self) -> int:
        """The free devices as bits (device i: 1 << i), for scoring many nodes as arrays."""
        return sum(1 << index for index in self.free)


def normalize_pci(bus_id: str) -> str:
    """Canonical PCI address: 8-hex-digit domain, upper case ("00000000:21:00.0").

    NVML prints an 8-digit domain, sysfs and lspci a 4-digit one ("0000:21:00.0").
    """
    text = bus_id.strip()
    parts = text.split(":")
    if len(parts) == 2:  # "21:00.0" without a domain
        parts = ["0", *parts]
    if len(parts) != 3 or "." not in parts[2]:
        raise ValueError(f"not a PCI bus id: {bus_id!r}")
    domain, bus, rest = parts
    device, function = rest.split(".", 1)
    try:
        return "%08X:%02X:%02X.%X" % (int(domain, 16), int(bus, 16), int(device, 16), int(function, 16))
    except ValueError:
        raise ValueError(f"not a PCI bus id: {bus_id!r}") from None


def sysfs_pci(bus_id: str) -> str:
    """The spelling sysfs uses under /sys/bus/pci/devices: 4-digit lower-case domain."""
    canonical = normalize_pci(bus_id)
    domain, rest = canonical.split(":", 1)
    return f"{int(domain, 16):04x}:{rest.lower()}"
