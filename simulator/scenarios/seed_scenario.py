"""The field report's verification, replayed: rounds of pods created together on seed-like nodes.

Before each round, other tenants' 1-GPU pods hold a random few GPUs on every node (background
load, drawn anew each round since other tenants come and go too). With a pinned share, some of
them are created with ``spec.nodeName`` set instead: kubelet admits them at once, the device
plugin picks their GPU, and the extender learns of them only through its pod watch, then through
the nodes' next reports. Each round then creates its pods together; the scheduler places them one
after another on the reports it has (which do not show the round's earlier pods yet), kubelet
admits each as it is bound and the device plugin picks its GPUs. Each pod gives one TSV row, as
the seed's script wrote.

With a network share, that share of the round's pods asks for the network (``gpupair.io/nic:
required`` at the scenario's level), drawn from a stream of its own so the load and the other
draws stay the same at any share; the nodes' reporters publish the scenario's NICs. The NIC
columns (simulator/network.py) count how many of those pods got a GDR-capable grant."""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field

from gpupair.decide.judge.decisions import Decider
from gpupair.decide.pod.intent import Intent
from gpupair.topology.layout import NodeLayout
from gpupair.decide.pod.nic_ask import DEFAULT_LEVEL, NicAsk
from gpupair.topology.nics import NicLayout
from gpupair.decide.judge.verdict import Verdict, classify
from gpupair.simulator.cluster import DEFAULT_NODE_MEMORY, DEFAULT_NODE_MILLI_CPU, Cluster
from gpupair.simulator.configs import Config
from gpupair.simulator.interference import Interference
from gpupair.simulator.models.kube_scoring import PerGpu
from gpupair.simulator.network import gdr_capable
from gpupair.simulator.models.schedulers import Scheduler

SECONDS_PER_ROUND = 60.0  # the extender's clock; a hold never outlives its round here anyway


@dataclass(frozen=True)
class SeedScenario:
    nodes: int = 4
    runs: int = 2
    rounds: int = 10
    pods_per_round: int = 2
    gpus_per_pod: int = 2
    background_min: int = 3  # background GPUs held per node, drawn per round
    background_max: int = 5
    per_gpu: PerGpu = PerGpu()  # every pod's cpu/memory requests, test and background alike
    node_milli_cpu: int = DEFAULT_NODE_MILLI_CPU
    node_memory: int = DEFAULT_NODE_MEMORY
    interference: Interference = Interference()
    nics: NicLayout | None = None  # every node's NICs, as its reporter publishes them
    nic_share: float = 0.0  # share of the round's pods asking gpupair.io/nic: required
    nic_level: str = DEFAULT_LEVEL  # their gpupair.io/nic-level

    @property
    def nic_ask(self) -> NicAsk:
        return NicAsk(Intent.REQUIRED, self.nic_level)


@dataclass(frozen=True)
class SeedSample:
    config: str
    run: int
    round: int
    pod: str
    phase: str  # Succeeded, or Pending when no node would take it
    node: str | None
    verdict: Verdict | None
    close_set_free: bool = False  # pending while some node really had a close set free
    network: bool = False  # the pod asks gpupair.io/nic: required
    gdr: bool = False  # granted, every GPU at GDR_LEVEL or closer to a NIC

    def tsv_row(self) -> str:
        round_label = f"{self.round:02d}"
        if self.verdict is None:
            result = "PENDING-CLOSE-SET-FREE" if self.close_set_free else "PENDING"
            return "\t".join((round_label, self.pod, self.phase, "-", "-", "-", "-", result))
        return self.verdict.tsv_row(round_label, self.pod, self.phase)


@dataclass
class ConfigResult:
    config: str
    samples: list[SeedSample] = field(default_factory=list)

    @property
    def granted(self) -> list[SeedSample]:
        return [s for s in self.samples if s.verdict is not None]

    @property
    def sys_count(self) -> int:
        return sum(1 for s in self.granted if s.verdict.link == "SYS")

    @property
    def pass_count(self) -> int:
        return sum(1 for s in self.granted if s.verdict.result == "PASS")

    @property
    def pending(self) -> int:
        return sum(1 for s in self.samples if s.verdict is None)

    @property
    def pending_no_reason(self) -> int:
        """Pods left pending while some node really had a close set free for them."""
        return sum(1 for s in self.samples if s.verdict is None and s.close_set_free)

    @property
    def network(self) -> list[SeedSample]:
        """The pods that asked for the network."""
        return [s for s in self.samples if s.network]


def _background(cluster: Cluster, scenario: SeedScenario, scheduler: Scheduler, rng: random.Random,
                pins: random.Random) -> list[tuple[str, str]]:
    """Other tenants' pods for this round: placed and reported, less those to be created pinned
    (returned as pod, node; the ``pins`` draws leave ``rng``'s load the same at any share)."""
    pinned = []
    for sim in cluster.nodes.values():
        for pod in [p for p in sim.bound if p.startswith("background-")]:
            cluster.remove(pod, sim.name)
            scheduler.forget(pod)
        # Leave room for at least one test pod on small nodes.
        room = max(0, sim.layout.size - scenario.gpus_per_pod)
        count = min(rng.randint(scenario.background_min, scenario.background_max), room)
        for n, device in enumerate(sorted(rng.sample(range(sim.layout.size), count))):
            pod = f"background-{sim.name}-{n}"
            if scenario.interference.pinned_share and pins.random() < scenario.interference.pinned_share:
                pinned.append((pod, sim.name))
                continue
            sim.bound[pod] = scenario.per_gpu.request(1)
            sim.allocated[pod] = (device,)
    cluster.report_all()
    scheduler.reported(cluster)
    return pinned


def run_seed_scenario(
    config: Config,
    layout: NodeLayout,
    scenario: SeedScenario = SeedScenario(),
    seed: int = 1,
    progress: Callable[[], None] = lambda: None,
) -> ConfigResult:
    result = ConfigResult(config.name)
    interference = scenario.interference
    for run in range(1, scenario.runs + 1):
        # Same seed per run across configurations: every configuration faces the same load.
        rng = random.Random(f"{seed}/{run}")
        ties = random.Random(f"{seed}/{run}/ties")  # apart, so tie-breaking never shifts the load
        pins = random.Random(f"{seed}/{run}/pinned")
        asks = random.Random(f"{seed}/{run}/nic")  # apart too: any share leaves the rest the same
        plugin = config.allocator(interference, random.Random(f"{seed}/{run}/plugin"))
        cluster = Cluster.of({f"gpu-node-{i + 1}": layout for i in range(scenario.nodes)},
                             scenario.node_milli_cpu, scenario.node_memory, scenario.nics)
        scheduler = config.new_scheduler(interference.reservation_ttl)
        reach = config.policy if config.form is not None else None  # DRA: the allocator's pick
        # A network pod waits for no reason where a node really passes it under its ask; only
        # where the scheduler honours the ask (elsewhere it is judged as any other pod).
        near_nic = Decider(policy=config.policy, dra_policy=config.policy, nic=scenario.nic_ask)
        for round_number in range(1, scenario.rounds + 1):
            cluster.now = round_number * SECONDS_PER_ROUND
            pinned = _background(cluster, scenario, scheduler, rng, pins)
            if pinned:
                for pod, node in pinned:  # bound by their creator; kubelet admits them at once
                    cluster.bind(pod, scenario.per_gpu.request(1), node)
                    cluster.allocate(pod, node, plugin)
                    scheduler.pinned(pod, scenario.per_gpu.request(1), node, cluster)
                cluster.report_all()  # the reporters rescan before the round's pods arrive
                scheduler.reported(cluster)
            pods = [f"test-r{run}-{round_number:02d}-{n}" for n in range(1, scenario.pods_per_round + 1)]
            placed: list[tuple[str, str]] = []
            request = scenario.per_gpu.request(scenario.gpus_per_pod)
            for pod in pods:
                network = bool(scenario.nic_share) and asks.random() < scenario.nic_share
                ask = scenario.nic_ask if network else None
                node = scheduler.schedule(pod, request, cluster, ties, nic=ask)
                if node is None:
                    judge = near_nic if network and config.honours_nic else None
                    result.samples.append(SeedSample(config.name, run, round_number, pod, "Pending", None, None,
                                                 cluster.close_set_free(request, allocator=reach, near_nic=judge),
                                                 network))
                    continue
                cluster.bind(pod, request, node)
                placed.append((pod, node))
                granted = cluster.allocate(pod, node, plugin)
                nics = cluster.nodes[node].nics
                verdict = classify(layout, granted, nics=nics) if granted else None
                phase = "Succeeded" if granted else "Failed"
                result.samples.append(SeedSample(config.name, run, round_number, pod, phase, node, verdict,
                                             network=network, gdr=bool(granted) and gdr_capable(nics, granted)))
            cluster.report_all()
            scheduler.reported(cluster)
            for pod, node in placed:  # the pods finish and are deleted before the next round
                cluster.remove(pod, node)
                scheduler.forget(pod)
            cluster.report_all()
            scheduler.reported(cluster)
            progress()
    return result
