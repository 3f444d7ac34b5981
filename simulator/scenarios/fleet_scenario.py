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

With a high-priority share, that share of arrivals runs at a higher priority and may preempt the
others when it fits no node (simulator/models/default_preemption.py: kube-scheduler's default preemption, with
gpupair's preempt verb where registered). Per configuration it then counts evictions, and the
wasted ones: victims evicted on a node where, once they are gone, the pod still has no set it may
take under its intent (gpupair's rule, judged on the node's real free GPUs); the GPU-steps the
victims had run (lost: their controller recreates them, and they start over); and the
high-priority pods' wait. Queues are ordered by priority, then arrival (PrioritySort).

With a network share, that share of the arrivals asks for the network (``gpupair.io/nic:
required``), drawn from a stream of its own, among the sizes an empty node of the shape can
serve near a NIC (on the lopsided board: up to 4 GPUs; an 8-GPU pod there can never be near
it, and a training job would not ask so). The nodes' reporters publish the scenario's NICs; the
NIC columns count the network pods placed, how many got a GDR-capable grant, and their wait.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from gpupair.decide.devices import placement
from gpupair.decide.judge.decisions import Decider, NodeView
from gpupair.decide.devices.pickers import ALLOCATOR
from gpupair.decide.pod.intent import Intent
from gpupair.topology.layout import NodeLayout, NodeState
from gpupair.decide.pod.nic_ask import DEFAULT_LEVEL, NicAsk
from gpupair.topology.nics import NicLayout
from gpupair.decide.devices.policies import Policy
from gpupair.decide.judge.verdict import classify
from gpupair.simulator.cluster import DEFAULT_NODE_MEMORY, DEFAULT_NODE_MILLI_CPU, Cluster
from gpupair.simulator.configs import Config
from gpupair.simulator.interference import Interference
from gpupair.simulator.models.kube_scoring import PerGpu, PodRequest
from gpupair.simulator.network import gdr_capable, servable
from gpupair.simulator.models.default_preemption import HIGH_PRIORITY, Running, preempt
from gpupair.simulator.models.schedulers import Scheduler
from gpupair.simulator.workload import PodMix


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
    mix: PodMix = PodMix()  # priorities and placement intents
    nics: NicLayout | None = None  # every node's NICs, as its reporter publishes them
    nic_share: float = 0.0  # share of the arrivals asking gpupair.io/nic: required
    nic_level: str = DEFAULT_LEVEL  # their gpupair.io/nic-level

    @property
    def nic_ask(self) -> NicAsk:
        return NicAsk(Intent.REQUIRED, self.nic_level)


@dataclass(frozen=True)
class Arrival:
    pod: str
    gpus: int
    step: int
    duration: int
    pinned: bool = False  # created with spec.nodeName set: the scheduler never sees it
    priority: int = 0
    intent: Intent = Intent.REQUIRED
    network: bool = False  # asks gpupair.io/nic: required


@dataclass
class FleetResult:
    config: str
    granted: int = 0
    sys_grants: int = 0
    avoidable_sys: int = 0  # SYS sets spread wider than needed while a tight set fit elsewhere
    fragmentation_pending: set[str] = field(default_factory=set)
    no_reason_pending: set[str] = field(default_factory=set)
    pinned: int = 0  # pods placed by others (spec.nodeName)
    still_pending: int = 0
    utilisation_samples: list[float] = field(default_factory=list)
    waits: list[int] = field(default_factory=list)
    preemptions: int = 0  # times a pod's preemption evicted victims
    evictions: int = 0  # victims evicted
    lost_gpu_steps: int = 0  # GPUs x steps the victims had run when evicted
    wasted_evictions: int = 0  # victims evicted where the pod still had no set it may take
    preemptions_declined: int = 0  # candidates existed, the preempt verb kept none
    high_waits: list[int] = field(default_factory=list)  # high-priority pods placed: steps waited
    high_pending: int = 0  # high-priority pods still pending at the end
    network_granted: int = 0  # network pods placed by the scheduler
    network_gdr: int = 0  # of those, granted every GPU at GDR_LEVEL or closer to a NIC
    network_waits: list[int] = field(default_factory=list)
    network_pending: int = 0  # network pods still pending at the end
    network_no_reason: set[str] = field(default_factory=set)  # network pods pending for no reason

    @property
    def network_mean_wait(self) -> float:
        return sum(self.network_waits) / len(self.network_waits) if self.network_waits else 0.0

    @property
    def utilisation(self) -> float:
        samples = self.utilisation_samples
        return sum(samples) / len(samples) if samples else 0.0

    @property
    def mean_wait(self) -> float:
        return sum(self.waits) / len(self.waits) if self.waits else 0.0

    @property
    def high_mean_wait(self) -> float:
        return sum(self.high_waits) / len(self.high_waits) if self.high_waits else 0.0


def arrivals(scenario: FleetScenario, seed: int, layout: NodeLayout | None = None) -> list[Arrival]:
    """The same pod stream for every configuration, drawn from ``seed`` (``layout``: the node
    shape, for which sizes may ask for the network)."""
    rng = random.Random(f"fleet/{seed}")
    pins = random.Random(f"fleet/{seed}/pinned")  # apart, so any share leaves the stream the same
    ranks = random.Random(f"fleet/{seed}/priority")
    asks = random.Random(f"fleet/{seed}/intent")
    networks = random.Random(f"fleet/{seed}/nic")
    near = {k: layout is not None and servable(layout, scenario.nics, scenario.nic_level, k) for k, _ in scenario.sizes}
    share, mix = scenario.interference.pinned_share, scenario.mix
    intents, intent_weights = zip(*mix.intents)
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
            high = bool(mix.high_priority_share) and ranks.random() < mix.high_priority_share
            intent = asks.choices(intents, intent_weights)[0] if len(intents) > 1 else intents[0]
            network = bool(scenario.nic_share) and networks.random() < scenario.nic_share and near[gpus]
            stream.append(Arrival(f"pod-{len(stream):05d}", gpus, step, duration, pinned,
                                  HIGH_PRIORITY if high else 0, intent, network))
    return stream


def _tightest_possible(cluster: Cluster, gpus: int, allocator: Policy | None = None) -> bool:
    """Some node could hold the pod within the fewest NUMA nodes its hardware allows (on the DRA
    path: the allocator's pick there is that close)."""
    return any(sim.close_pick(gpus, allocator) for sim in cluster.nodes.values())


def _pinned_node(cluster: Cluster, request: PodRequest, rng: random.Random) -> str | None:
    """Where another party binds a pod: any node it fits by count, knowing nothing of topology."""
    fits = [name for name, sim in cluster.nodes.items() if sim.usage().fits(request)]
    return rng.choice(fits) if fits else None


def _may_take(cluster: Cluster, node: str, arrival: Arrival, config: Config) -> bool:
    """gpupair's rule on the node's real free GPUs: some set the pod may take under its intent
    (on the DRA path: the set the allocator takes, under the intent the claim carries)."""
    sim = cluster.nodes[node]
    form = config.form
    if form is None:
        view = NodeView(node, NodeState(sim.layout, sim.actual_free()))
        return Decider().decide(arrival.gpus, view, arrival.intent).passes
    view = NodeView(node, NodeState(sim.layout, sim.actual_free()), picker=ALLOCATOR)
    return Decider(dra_policy=form.policy).decide(arrival.gpus, view, config.intent(arrival.intent)).passes


def run_fleet(
    config: Config,
    layout: NodeLayout,
    scenario: FleetScenario,
    seed: int = 1,
    progress: Callable[[], None] = lambda: None,
) -> FleetResult:
    rng = random.Random(f"fleet-scheduler/{seed}")
    others = random.Random(f"fleet-pinned/{seed}")  # where pinned pods' creators put them
    plugin = config.allocator(scenario.interference, random.Random(f"fleet-plugin/{seed}"))
    stream = arrivals(scenario, seed, layout)
    cluster = Cluster.of({f"gpu-node-{i + 1:03d}": layout for i in range(scenario.nodes)},
                         scenario.node_milli_cpu, scenario.node_memory, scenario.nics)
    scheduler = config.new_scheduler(scenario.interference.reservation_ttl)
    result = FleetResult(config.name)
    queue: list[Arrival] = []
    running: dict[str, tuple[str, int]] = {}  # pod -> (node, end step)
    ranks: dict[str, Running] = {}  # running pod -> its priority and start, for preemption
    placed: dict[str, Arrival] = {}  # running pod -> its arrival, to recreate it when evicted
    nominations: dict[str, tuple[str, PodRequest, int]] = {}  # pod -> (node, request, priority)
    preemption_rng = random.Random(f"fleet-preemption/{seed}")
    upcoming = iter(stream)
    next_arrival = next(upcoming, None)
    needed = {k: placement.min_numa_nodes(layout, k) for k, _ in scenario.sizes}
    reach = config.policy if config.form is not None else None  # DRA: only the allocator's pick counts
    near_nic = Decider(policy=config.policy, dra_policy=config.policy, nic=scenario.nic_ask)

    for step in range(scenario.steps):
        cluster.now = step * scenario.step_seconds
        for pod, (node, end) in list(running.items()):
            if end <= step:
                cluster.remove(pod, node)
                scheduler.forget(pod)
                del running[pod], ranks[pod], placed[pod]
        cluster.report_all()
        scheduler.reported(cluster)
        while next_arrival is not None and next_arrival.step == step:
            queue.append(next_arrival)
            next_arrival = next(upcoming, None)

        queue.sort(key=lambda a: -a.priority)  # stable: arrival order within a priority
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
                ranks[pod.pod], placed[pod.pod] = Running(pod.priority, step), pod
                result.pinned += 1
                continue
            mine = nominations.pop(pod.pod, None)
            room = _nominated(nominations, pod.priority)
            ask = scenario.nic_ask if pod.network else None
            node = scheduler.schedule(pod.pod, request, cluster, rng, pod.intent, room, mine and mine[0], ask)
            if node is None:
                waiting.append(pod)
                # Nodes kept for a nominated pod (preemption) count as full for these figures.
                if any(sim.usage().fits(request) for name, sim in cluster.nodes.items() if name not in room):
                    result.fragmentation_pending.add(pod.pod)
                    judge = near_nic if pod.network and config.honours_nic else None
                    if cluster.close_set_free(request, room, reach, judge):  # a close set fits by count too
                        result.no_reason_pending.add(pod.pod)
                        if pod.network:
                            result.network_no_reason.add(pod.pod)
                if pod.priority > 0:  # PostFilter: only a pod above some other may preempt
                    target = _preempt(pod, request, cluster, (scheduler, config), (running, ranks, placed), room,
                                      preemption_rng, result, step, waiting)
                    mine = (target, request, pod.priority) if target else None  # none found clears it
                if mine is not None:
                    nominations[pod.pod] = mine
                continue
            cluster.bind(pod.pod, request, node)
            # Kubelet admits it as it is bound. Judged before this pod's own grant, and only
            # where a SYS grant can be counted.
            tight_elsewhere = pod.gpus >= 2 and _tightest_possible(cluster, pod.gpus, reach)
            granted = cluster.allocate(pod.pod, node, plugin)
            if granted is None:  # cannot happen: binding counted the GPUs
                continue
            result.granted += 1
            result.waits.append(step - pod.step)
            if pod.priority > 0:
                result.high_waits.append(step - pod.step)
            running[pod.pod] = (node, step + pod.duration)
            ranks[pod.pod], placed[pod.pod] = Running(pod.priority, step), pod
            if pod.network:
                result.network_granted += 1
                result.network_gdr += gdr_capable(cluster.nodes[node].nics, granted)
                result.network_waits.append(step - pod.step)
            if pod.gpus < 2:
                continue
            verdict = classify(layout, granted)
            spans = len({layout.numa_of(i) for i in granted})
            wider = needed[pod.gpus] is not None and spans > needed[pod.gpus]
            if verdict.link == "SYS":
                result.sys_grants += 1
                if wider and tight_elsewhere:
                    result.avoidable_sys += 1
        queue = waiting
        result.utilisation_samples.append(cluster.gpus_allocated() / cluster.gpus_total())
        progress()
    result.still_pending = len(queue)
    result.high_pending = sum(1 for pod in queue if pod.priority > 0)
    result.network_pending = sum(1 for pod in queue if pod.network and not pod.pinned)
    return result


def _preempt(pod: Arrival, request: PodRequest, cluster: Cluster, deciders: tuple[Scheduler, Config],
             pods: tuple[dict[str, tuple[str, int]], dict[str, Running], dict[str, Arrival]],
             room: dict[str, list[PodRequest]], rng: random.Random, result: FleetResult, step: int,
             recreated: list[Arrival]) -> str | None:
    """Preemption for a pod that fits no node: evict the victims chosen (their controller
    recreates each, to start over), count them and whether they were wasted; the node the pod is
    nominated to, or None."""
    running, ranks, placed = pods
    scheduler, config = deciders
    verb = scheduler.preempt_verb
    allocator = config.policy if config.form is not None else None  # DRA: the dry run runs the allocator
    chosen = preempt(request, pod.priority, config.intent(pod.intent), cluster, ranks, room, rng, verb, allocator)
    if chosen.node is None:
        result.preemptions_declined += verb is not None and chosen.proposed > 0
        return None
    for victim in chosen.victims:  # evicted: removed and forgotten as a finished pod is
        cluster.remove(victim, chosen.node)
        scheduler.forget(victim)
        was = placed.pop(victim)
        result.lost_gpu_steps += was.gpus * (step - ranks[victim].start)
        recreated.append(replace(was, pod=f"{was.pod}-r{step}", step=step))
        del running[victim], ranks[victim]
    result.preemptions += 1
    result.evictions += len(chosen.victims)
    if not _may_take(cluster, chosen.node, pod, config):
        result.wasted_evictions += len(chosen.victims)
    return chosen.node


def _nominated(nominations: dict[str, tuple[str, PodRequest, int]], priority: int) -> dict[str, list[PodRequest]]:
    """Per node, the requests of pods nominated there that a pod of ``priority`` must leave room for."""
    room: dict[str, list[PodRequest]] = {}
    for node, request, rank in nominations.values():
        if rank >= priority:
            room.setdefault(node, []).append(request)
    return room
