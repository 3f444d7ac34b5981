"""The NUMA layout each trace node gets by its GPU count: the trace has no topology.

Defaults, as the common boards are built: 8 GPUs = 4+4 (two sockets, four GPUs each), 4 = 2+2,
2 = 1+1, 1 = 1. A count no split names is halved when even, one NUMA node when odd. Within a
NUMA node GPUs see each other at ``NODE``, across at ``SYS``, as on the field report's board.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache

from gpupair.topology import limits, links
from gpupair.topology.layout import Device, NodeLayout

DEFAULT_SPLITS = "8=4+4,4=2+2,2=1+1,1=1"


@dataclass(frozen=True)
class NumaSplits:
    sizes: dict[int, tuple[int, ...]] = field(default_factory=dict)  # GPUs -> GPUs per NUMA node

    @classmethod
    def parse(cls, text: str) -> "NumaSplits":
        """``8=4+4,4=2+2``: ValueError naming the part that is wrong."""
        sizes: dict[int, tuple[int, ...]] = {}
        for part in (p.strip() for p in text.split(",")):
            if not part:
                continue
            count, sep, split = part.partition("=")
            try:
                gpus = int(count)
                groups = tuple(int(g) for g in split.split("+"))
            except ValueError:
                raise ValueError(f"--numa-split: {part!r} is not GPUS=A+B (e.g. 8=4+4)") from None
            if not sep or gpus < 1 or gpus > limits.MAX_GPUS or any(g < 1 for g in groups) or sum(groups) != gpus:
                raise ValueError(f"--numa-split: {part!r}: the NUMA nodes' GPUs must be positive and add up to "
                                 f"1-{limits.MAX_GPUS} GPUs")
            if gpus in sizes:
                raise ValueError(f"--numa-split: {gpus} GPUs given twice")
            sizes[gpus] = groups
        return cls(sizes)

    def split(self, gpus: int) -> tuple[int, ...]:
        if gpus in self.sizes:
            return self.sizes[gpus]
        if gpus == 0:
            return ()
        return (gpus // 2, gpus // 2) if gpus % 2 == 0 else (gpus,)

    def describe(self, counts: list[int]) -> str:
        """``8 GPUs = 4+4, 2 GPUs = 1+1``: the splits in use, largest first."""
        return ", ".join(f"{n} GPU{'s' if n != 1 else ''} = {'+'.join(map(str, self.split(n)))}"
                         for n in sorted(set(counts), reverse=True) if n)

    def layout(self, gpus: int) -> NodeLayout:
        return _layout(self.split(gpus))


@lru_cache(maxsize=64)
def _layout(groups: tuple[int, ...]) -> NodeLayout:
    numa = [node for node, size in enumerate(groups) for _ in range(size)]
    devices = tuple(Device(index=i, numa_node=n) for i, n in enumerate(numa))
    matrix = tuple(tuple(links.SELF if i == j else ("NODE" if numa[i] == numa[j] else "SYS")
                         for j in range(len(numa))) for i in range(len(numa)))
    return NodeLayout(devices, matrix)
