"""A fleet over time: many nodes, pods of 1, 2, 4 and 8 GPUs arriving and leaving.

Per configuration it measures what an operator of a GPU fleet pays for each policy:
- utilisation: the share of GPUs allocated, averaged over time;
- avoidable SYS grants: a pod got a set spanning more NUMA nodes than the hardware needs (a
  SYS set, for pods that fit one NUMA node) while some node had a tighter set free at that moment;
- pods pending because of fragmentation: pods that waited while some node had enough GPUs by
  count (and cpu and memory), just not together;
- pods pending for no reason: pods that waited while some node really had a close set free for
  them (and cpu and memory): only the scheduler's picture of the nodes kept them waiting.

With a pinned share, that share of arrivals is created with ``spec.nodeName`` set by another
party (a DaemonSet, another scheduler), on a node where it fits by count: kubelet admits it at
once and the extender sees it only through its pod watch. Pinned pods count in utilisation, not
in the per-pod figures, which judge the scheduler's own placements.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field

from gpupair import placement
from gpupair.layout import NodeLayout, NodeState
from gpupair.verdict import classify
from simulator.cluster import DEFAULT_NODE_MEMORY, DEFAULT_NODE_MILLI_CPU, Cluster
from simulator.configs import Config
from simulator.interference import Interference
from simulator.kube_scoring import PerGpu, PodRequest


@dataclass(frozen=True)
class FleetScenario:
    nodes: int = 64
    steps: int = 400
    arrivals_per_step: float = 5.5
    mean_duration: int = 40  # steps
    sizes: tuple[tuple[int, float], ...] = ((1, 0.4), (2, 0.35), (4, 0.2), (8, 0.05))
    per_gpu: PerGpu = PerGpu()  # every pod's cpu/memory requests
    node_milli_cpu: int = DEFAULT_NODE_MILLI_CPU
    node_memory: int = DEFAULT_NODE_MEMORY
    interference: Interference = Interference()
    step_seconds: float = 60.0  # the extender's clock: a hold's TTL of 120 s lasts two steps


@dataclass(frozen=True)
class Arrival:
    pod: str
    gpus: int
    step: int
    duration: int
    pinned: bool = False  # created with spec.nodeName set: the scheduler never sees it


@dataclass
class FleetResult:
    config: str
    granted: int = 0
    sys_grants: int = 0
    avoidable_sys: int = 0
    wider_than_needed: int = 0
    fragmentation_pending: set[str] = field(default_factory=set)
    no_reason_pending: set[str] = field(default_factory=set)
    pinned: int = 0  # pods placed by others (spec.nodeName)
    still_pending: int = 0
    utilisation_samples: list[float] = field(default_factory=list)
    waits: list[int] = field(default_factory=list)

    @property
    def utilisation(self) -> float:
        samples = self.utilisation_samples
        return sum(samples) / len(samples) if samples else 0.0

    @property
    def mean_wait(self) -> float:
        return sum(self.waits) / len(self.waits) if self.waits else 0.0


def arrivals(scenario: FleetScenario, seed: int) -> list[Arrival]:
    """The same pod stream for every configuration, drawn from ``seed``."""
    rng = random.Random(f"fleet/{seed}")
    pins = random.Random(f"fleet/{seed}/pinned")  # apart, so any share leaves the stream the same
    share = scenario.interference.pinned_share
    sizes, weights = zip(*scenario.sizes)
    stream: list[Arrival] = []
    for step in range(scenario.steps):
        # Poisson arrivals by counting exponential gaps within one step.
        count, elapsed = 0, rng.expovariate(scenario.arrivals_per_step)
        while elapsed < 1.0:
            count += 1
            elapsed += rng.expovariate(scenario.arrivals_per_step)
        for _ in range(count):
            duration = max(1, round(rng.expovariate(1 / scenario.mean_duration)))
            gpus = rng.choices(sizes, weights)[0]
            pinned = bool(share) and pins.random() < share
            stream.append(Arrival(f"pod-{len(stream):05d}", gpus, step, duration, pinned))
    return stream


def _tightest_possible(cluster: Cluster, gpus: int) -> bool:
    """Some node could hold the pod within the fewest NUMA nodes its hardware allows."""
    return any(
        placement.fit(NodeState(sim.layout, sim.actual_free()), gpus).feasible
        for sim in cluster.nodes.values()
    )


def _pinned_node(cluster: Cluster, request: PodRequest, rng: random.Random) -> str | None:
    """Where another party binds a pod: any node it fits by count, knowing nothing of topology."""
    fits = [name for name, sim in cluster.nodes.items() if sim.usage().fits(request)]
    return rng.choice(fits) if fits else None


def run_fleet(
    config: Config,
    layout: NodeLayout,
    scenario: FleetScenario,
    seed: int = 1,
    progress: Callable[[], None] = lambda: None,
) -> FleetResult:
    rng = random.Random(f"fleet-scheduler/{seed}")
    others = random.Random(f"fleet-pinned/{seed}")  # where pinned pods' creators put them
    plugin = scenario.interference.plugin(config.policy, random.Random(f"fleet-plugin/{seed}"))
    stream = arrivals(scenario, seed)
    cluster = Cluster.of({f"gpu-node-{i + 1:03d}": layout for i in range(scenario.nodes)},
                         scenario.node_milli_cpu, scenario.node_memory)
    scheduler = config.new_scheduler(scenario.interference.reservation_ttl)
    result = FleetResult(config.name)
    queue: list[Arrival] = []
    running: dict[str, tuple[str, int]] = {}  # pod -> (node, end step)
    upcoming = iter(stream)
    next_arrival = next(upcoming, None)
    needed = {k: placement.min_numa_nodes(layout, k) for k, _ in scenario.sizes}

    for step in range(scenario.steps):
        cluster.now = step * scenario.step_seconds
        for pod, (node, end) in list(running.items()):
            if end <= step:
                cluster.remove(pod, node)
                scheduler.forget(pod)
                del running[pod]
        cluster.report_all()
        scheduler.reported(cluster)
        while next_arrival is not None and next_arrival.step == step:
            queue.append(next_arrival)
            next_arrival = next(upcoming, None)

        waiting: list[Arrival] = []
        for pod in queue:
            request = scenario.per_gpu.request(pod.gpus)
            if pod.pinned:
                node = _pinned_node(cluster, request, others)
                if node is None:
                    waiting.append(pod)
                    continue
                cluster.bind(pod.pod, request, node)
                cluster.allocate(pod.pod, node, plugin)  # kubelet admits it at once
                scheduler.pinned(pod.pod, request, node, cluster)
                running[pod.pod] = (node, step + pod.duration)
                result.pinned += 1
                continue
            node = scheduler.schedule(pod.pod, request, cluster, rng)
            if node is None:
                waiting.append(pod)
                if any(sim.usage().fits(request) for sim in cluster.nodes.values()):
                    result.fragmentation_pending.add(pod.pod)
                    if cluster.close_set_free(request):  # a subset: a close set fits by count too
                        result.no_reason_pending.add(pod.pod)
                continue
            cluster.bind(pod.pod, request, node)
            # Kubelet admits it as it is bound. Judged before this pod's own grant, and only
            # where a SYS grant can be counted.
            tight_elsewhere = pod.gpus >= 2 and _tightest_possible(cluster, pod.gpus)
            granted = cluster.allocate(pod.pod, node, plugin)
            if granted is None:  # cannot happen: binding counted the GPUs
                continue
            result.granted += 1
            result.waits.append(step - pod.step)
            running[pod.pod] = (node, step + pod.duration)
            if pod.gpus < 2:
                continue
            verdict = classify(layout, granted)
            spans = len({layout.numa_of(i) for i in granted})
            wider = needed[pod.gpus] is not None and spans > needed[pod.gpus]
            result.wider_than_needed += wider
            if verdict.link == "SYS":
                result.sys_grants += 1
                if wider and tight_elsewhere:
                    result.avoidable_sys += 1
        queue = waiting
        result.utilisation_samples.append(cluster.gpus_allocated() / cluster.gpus_total())
        progress()
    result.still_pending = len(queue)
    return result
