"""What the planner plans on, and what it answers, as plain data.

The picture is each node's room (every GPU's share left, CPU and memory left) and the pods on it
with the GPUs they hold and whether each may move. Shares are in it because a GPU with any share
taken is not free for a whole-GPU pod, and moving a share pod is often the cheapest way to free
one. CPU and memory are optional: a caller that does not count them passes None.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpupair.decide.score.fragmentation import MILLI
from gpupair.topology.layout import NodeLayout


@dataclass(frozen=True)
class Ask:
    """What a pod needs of a node: ``gpus`` GPUs with ``milli`` each left (MILLI: whole GPUs), CPU
    and memory, on one of ``nodes`` (None: any node)."""

    gpus: int
    milli: int = MILLI
    cpu: int = 0
    memory: int = 0
    nodes: frozenset[str] | None = None

    def may_run_on(self, node: str) -> bool:
        return self.nodes is None or node in self.nodes


@dataclass(frozen=True)
class NodeRoom:
    """One node now: its layout, each GPU's milli left (MILLI: free), CPU and memory left (None:
    not counted)."""

    name: str
    layout: NodeLayout
    left: tuple[int, ...]
    cpu: int | None = None
    memory: int | None = None

    def __post_init__(self) -> None:
        if len(self.left) != self.layout.size:
            raise ValueError(f"{self.name}: {len(self.left)} GPU shares for {self.layout.size} GPUs")

    def has_room(self, ask: Ask) -> bool:
        """CPU and memory for the ask (always, where they are not counted)."""
        return (self.cpu is None or self.cpu >= ask.cpu) and (self.memory is None or self.memory >= ask.memory)

    def changed(self, left: list[int], cpu: int, memory: int) -> "NodeRoom":
        """The room with ``cpu`` and ``memory`` added (negative: taken), and the GPUs' new shares."""
        return NodeRoom(self.name, self.layout, tuple(left), None if self.cpu is None else self.cpu + cpu,
                        None if self.memory is None else self.memory + memory)


@dataclass(frozen=True)
class PlacedPod:
    uid: str
    node: str
    devices: tuple[int, ...]
    ask: Ask
    movable: bool = False  # opted in and recreated by a controller; never assumed

    @property
    def gpus_held(self) -> int:
        return len(self.devices)


@dataclass(frozen=True)
class WaitingPod:
    uid: str
    ask: Ask


@dataclass(frozen=True)
class Move:
    pod: PlacedPod
    node: str  # where it has a close set now; held for its replacement
    devices: tuple[int, ...]


@dataclass(frozen=True)
class DefragPlan:
    """After ``moves``, ``waiting`` fits ``devices`` on ``node`` (held for it)."""

    waiting: WaitingPod
    node: str
    devices: tuple[int, ...]
    moves: tuple[Move, ...]

    @property
    def gpus_moved(self) -> int:
        return sum(move.pod.gpus_held for move in self.moves)


@dataclass(frozen=True)
class NoDefragPlan:
    waiting: WaitingPod
    reason: str
