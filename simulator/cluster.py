"""A simulated cluster of GPU nodes: what is really allocated, and what the reporters last said.

The gap between the two is the race the extender must survive: pods bound back to back are
decided on a report that does not show the earlier pod yet.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from gpupair.layout import NodeLayout, NodeState
from gpupair.policies import Policy


@dataclass
class SimNode:
    name: str
    layout: NodeLayout
    allocated: dict[str, tuple[int, ...]] = field(default_factory=dict)  # pod -> devices
    bound: dict[str, int] = field(default_factory=dict)  # pod -> GPUs asked, once scheduled
    reported_free: frozenset[int] = frozenset()

    def __post_init__(self) -> None:
        self.reported_free = self.actual_free()

    def actual_free(self) -> frozenset[int]:
        taken = {i for devices in self.allocated.values() for i in devices}
        return frozenset(range(self.layout.size)) - taken

    def committed(self) -> int:
        """GPUs counted against the node by kube-scheduler: every bound pod's request."""
        return sum(self.bound.values())

    def uncommitted(self) -> int:
        return self.layout.size - self.committed()

    def reported_state(self) -> NodeState:
        return NodeState(self.layout, self.reported_free)

    def report(self) -> None:
        """The reporter's next scan reaches the scheduler side."""
        self.reported_free = self.actual_free()


@dataclass
class Cluster:
    nodes: dict[str, SimNode]

    @classmethod
    def of(cls, layouts: dict[str, NodeLayout]) -> "Cluster":
        return cls({name: SimNode(name, layout) for name, layout in layouts.items()})

    def bind(self, pod: str, gpus: int, node: str) -> None:
        self.nodes[node].bound[pod] = gpus

    def allocate(self, pod: str, node: str, policy: Policy) -> tuple[int, ...] | None:
        """Kubelet admits the pod: the device plugin picks from the really free devices."""
        sim = self.nodes[node]
        chosen = policy.pick(sim.layout, sim.actual_free(), sim.bound[pod])
        if chosen is not None:
            sim.allocated[pod] = chosen
        return chosen

    def remove(self, pod: str, node: str) -> None:
        sim = self.nodes[node]
        sim.allocated.pop(pod, None)
        sim.bound.pop(pod, None)

    def report_all(self) -> None:
        for sim in self.nodes.values():
            sim.report()

    def gpus_total(self) -> int:
        return sum(sim.layout.size for sim in self.nodes.values())

    def gpus_allocated(self) -> int:
        return sum(len(d) for sim in self.nodes.values() for d in sim.allocated.values())
