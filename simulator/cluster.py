"""A simulated cluster of GPU nodes: what is really allocated, and what the reporters last said.

The gap between the two is the race the extender must survive: pods bound back to back are
decided on a report that does not show the earlier pod yet.
"""

from __future__ import annotations

from collections.abc import Container
from dataclasses import dataclass, field

from gpupair.decide.devices import placement
from gpupair.decide.judge.decisions import Decider, NodeView
from gpupair.decide.devices.pickers import ALLOCATOR, DEVICE_PLUGIN
from gpupair.topology.layout import NodeLayout, NodeState
from gpupair.topology.nics import NicLayout
from gpupair.decide.devices.policies import Policy
from gpupair.topology.report import Ledger
from gpupair.simulator.models.kube_scoring import NodeAllocatable, NodeUsage, PodRequest

# The nodes of the recorded real placements (tests/fixtures/real-k8s): 32 CPU, 256Gi each.
DEFAULT_NODE_MILLI_CPU = 32_000
DEFAULT_NODE_MEMORY = 256 * 1024**3
NAMESPACE = "sim"  # every simulated pod's namespace; its name is its UID too


class Bound(dict[str, PodRequest]):
    """pod -> its requests; counts its changes so a node's usage is summed once per change."""

    version = 0

    def __setitem__(self, pod: str, request: PodRequest) -> None:
        self.version += 1
        super().__setitem__(pod, request)

    def __delitem__(self, pod: str) -> None:
        self.version += 1
        super().__delitem__(pod)

    def pop(self, pod: str, *default):
        self.version += 1
        return super().pop(pod, *default)

    def clear(self) -> None:
        self.version += 1
        super().clear()

    def update(self, *args, **kwargs) -> None:
        self.version += 1
        super().update(*args, **kwargs)


@dataclass
class SimNode:
    name: str
    layout: NodeLayout
    milli_cpu: int = DEFAULT_NODE_MILLI_CPU
    memory: int = DEFAULT_NODE_MEMORY
    allocated: dict[str, tuple[int, ...]] = field(default_factory=dict)  # pod -> devices
    bound: Bound = field(default_factory=Bound)  # pod -> its requests, once scheduled
    reported_free: frozenset[int] = frozenset()
    reported_ledger: Ledger = Ledger({}, {})  # which pod held which devices at the last report
    nics: NicLayout | None = None  # what the reporter publishes as gpupair.io/nics; None: nothing
    _usage: tuple[int, NodeUsage | None] = field(default=(-1, None), repr=False, compare=False)

    def __post_init__(self) -> None:
        self.bound = Bound(self.bound)
        self.report()

    def actual_free(self) -> frozenset[int]:
        taken = {i for devices in self.allocated.values() for i in devices}
        return frozenset(range(self.layout.size)) - taken

    def usage(self) -> NodeUsage:
        """What kube-scheduler's cache counts against the node."""
        version, usage = self._usage
        if usage is None or version != self.bound.version:
            usage = NodeUsage.of(NodeAllocatable(self.milli_cpu, self.memory, self.layout.size), self.bound.values())
            self._usage = (self.bound.version, usage)
        return usage

    def reported_state(self) -> NodeState:
        return NodeState(self.layout, self.reported_free)

    def report(self) -> None:
        """The reporter's next scan reaches the scheduler side, with its allocation ledger."""
        self.reported_free = self.actual_free()
        keys = {pod: (NAMESPACE, pod) for pod in self.allocated}
        self.reported_ledger = Ledger({keys[pod]: frozenset(d) for pod, d in self.allocated.items()},
                                      {key: pod for pod, key in keys.items()})

    def close_set_free(self, request: PodRequest, allocator: Policy | None = None,
                       near_nic: Decider | None = None) -> bool:
        """The pod fits here now, really: cpu and memory, and GPUs within the fewest NUMA nodes.
        With ``allocator`` (the DRA path, where kube-scheduler's allocator picks and nobody else
        does): the set it would take is that close. With ``near_nic`` (a pod that asks for the
        network, where the scheduler honours the ask): that Decider, with the pod's ask, passes
        the node on its real free GPUs and its NICs (a close set near a NIC, and the picker's
        set one)."""
        if not self.usage().fits(request) or request.gpus <= 0:
            return self.usage().fits(request)
        if near_nic is not None:
            view = NodeView(self.name, NodeState(self.layout, self.actual_free()), nics=self.nics,
                            picker=ALLOCATOR if allocator is not None else DEVICE_PLUGIN)
            return near_nic.decide(request.gpus, view).passes
        return self.close_pick(request.gpus, allocator)

    def close_pick(self, gpus: int, allocator: Policy | None = None) -> bool:
        """A set of ``gpus`` within the fewest NUMA nodes is free here (``allocator``: and it is
        the one the allocator takes)."""
        state = NodeState(self.layout, self.actual_free())
        if allocator is None:
            return placement.fit(state, gpus).feasible
        chosen = allocator.pick(self.layout, state.free, gpus)
        return chosen is not None and placement.is_close(state, chosen)


@dataclass
class Cluster:
    nodes: dict[str, SimNode]
    now: float = 0.0  # simulated seconds, the extender's clock (hold TTLs)

    @classmethod
    def of(
        cls,
        layouts: dict[str, NodeLayout],
        milli_cpu: int = DEFAULT_NODE_MILLI_CPU,
        memory: int = DEFAULT_NODE_MEMORY,
        nics: NicLayout | None = None,
    ) -> "Cluster":
        """Nodes in kube-scheduler's node order (the order of ``layouts``), each with ``nics``
        as its reporter publishes them."""
        return cls({name: SimNode(name, layout, milli_cpu, memory, nics=nics) for name, layout in layouts.items()})

    def bind(self, pod: str, request: PodRequest, node: str) -> None:
        self.nodes[node].bound[pod] = request

    def allocate(self, pod: str, node: str, policy: Policy) -> tuple[int, ...] | None:
        """Kubelet admits the pod: the device plugin (a policy, or a ``DevicePlugin`` that may
        deviate from it) picks from the really free devices."""
        sim = self.nodes[node]
        chosen = policy.pick(sim.layout, sim.actual_free(), sim.bound[pod].gpus)
        if chosen is not None:
            sim.allocated[pod] = chosen
        return chosen

    def remove(self, pod: str, node: str) -> None:
        sim = self.nodes[node]
        sim.allocated.pop(pod, None)
        sim.bound.pop(pod, None)

    def close_set_free(self, request: PodRequest, skip: Container[str] = (), allocator: Policy | None = None,
                       near_nic: Decider | None = None) -> bool:
        """Some node (but those in ``skip``) could really take the pod now, its GPUs within the
        fewest NUMA nodes (``allocator``: as the DRA allocator would take them; ``near_nic``: near
        a NIC as the pod asks, see SimNode.close_set_free): a pod left pending then waits for no
        reason but the scheduler's picture."""
        return any(sim.close_set_free(request, allocator, near_nic)
                   for name, sim in self.nodes.items() if name not in skip)

    def report_all(self) -> None:
        for sim in self.nodes.values():
            sim.report()

    def gpus_total(self) -> int:
        return sum(sim.layout.size for sim in self.nodes.values())

    def gpus_allocated(self) -> int:
        return sum(len(d) for sim in self.nodes.values() for d in sim.allocated.values())
