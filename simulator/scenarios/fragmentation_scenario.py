"""Small pods first, then large ones, on empty nodes: does the scheduler keep whole NUMA nodes free?

The issue's case, measured on a real v1.36.2 control plane: on 4 empty nodes, 4 one-GPU claim pods,
then 8 four-GPU claim pods with the ``numaNode`` constraint. Every pod is created once the one
before it is bound and seen (each node's picture is current for the next), so what is measured is
where each scheduler puts the small pods, not a race. A large pod that no node takes stays pending.

``large_fit`` is how many large pods the nodes could hold had the small pods been packed as
tightly as possible: every NUMA node holds ``size // large_gpus`` large pods, less the slots the
small pods' GPUs must break, packed into as few slots as they fill.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from gpupair.topology.layout import NodeLayout
from gpupair.decide.judge.verdict import classify
from gpupair.simulator.cluster import DEFAULT_NODE_MEMORY, DEFAULT_NODE_MILLI_CPU, Cluster
from gpupair.simulator.configs import Config
from gpupair.simulator.models.kube_scoring import PerGpu


@dataclass(frozen=True)
class FragmentationScenario:
    nodes: int = 4
    small: int = 4  # one-GPU pods, created first
    large: int = 8
    large_gpus: int = 4
    per_gpu: PerGpu = PerGpu()
    node_milli_cpu: int = DEFAULT_NODE_MILLI_CPU
    node_memory: int = DEFAULT_NODE_MEMORY

    def large_fit(self, layout: NodeLayout) -> int | None:
        """Large pods the nodes hold with the small pods packed best; None where large pods do
        not come in whole slots of a NUMA node."""
        sizes = [len(members) for members in layout.numa_nodes.values()]
        if any(size % self.large_gpus for size in sizes) or self.large_gpus > min(sizes):
            return None
        slots = self.nodes * sum(size // self.large_gpus for size in sizes)
        broken = -(-self.small // self.large_gpus)  # ceil: the slots the one-GPU pods fill
        return min(self.large, max(0, slots - broken))


@dataclass
class FragmentationResult:
    config: str
    small_placed: int = 0
    large_placed: int = 0
    large_pending: int = 0
    sys_grants: int = 0
    fragmentation_pending: int = 0  # large pods left pending while a node had their GPUs free by count
    nodes_with_small: set[str] = field(default_factory=set)


def run_fragmentation(config: Config, layout: NodeLayout, scenario: FragmentationScenario = FragmentationScenario(),
                      seed: int = 1) -> FragmentationResult:
    ties = random.Random(f"fragmentation/{seed}")  # an extender's random tie-breaking
    cluster = Cluster.of({f"gpu-node-{i + 1}": layout for i in range(scenario.nodes)},
                         scenario.node_milli_cpu, scenario.node_memory)
    scheduler = config.new_scheduler()
    plugin = config.policy  # no deviation, no pinned pods: the placement alone is measured
    result = FragmentationResult(config.name)
    pods = [(f"small-{n + 1}", 1) for n in range(scenario.small)]
    pods += [(f"large-{n + 1}", scenario.large_gpus) for n in range(scenario.large)]
    for pod, gpus in pods:
        request = scenario.per_gpu.request(gpus)
        node = scheduler.schedule(pod, request, cluster, ties)
        if node is None:
            if gpus > 1:
                result.large_pending += 1
                result.fragmentation_pending += any(sim.usage().fits(request) for sim in cluster.nodes.values())
            continue
        cluster.bind(pod, request, node)
        granted = cluster.allocate(pod, node, plugin)
        if gpus == 1:
            result.small_placed += 1
            result.nodes_with_small.add(node)
        else:
            result.large_placed += 1
            result.sys_grants += bool(granted) and classify(layout, granted).link == "SYS"
        cluster.report_all()  # the next pod is created once this one is bound and seen
        scheduler.reported(cluster)
    return result
