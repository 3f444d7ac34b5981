"""The field report's verification, replayed: rounds of pods created together on seed-like nodes.

Before each round, other tenants' 1-GPU pods hold a random few GPUs on every node (background
load, drawn anew each round since other tenants come and go too). Each round creates its pods together; the scheduler places them one after another on the reports it
has (which do not show the round's earlier pods yet), then kubelet admits them in bind order and
the device plugin picks their GPUs. Each pod gives one TSV row, as the seed's script wrote.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field

from gpupair.layout import NodeLayout
from gpupair.verdict import Verdict, classify
from simulator.cluster import DEFAULT_NODE_MEMORY, DEFAULT_NODE_MILLI_CPU, Cluster
from simulator.configs import Config
from simulator.kube_scoring import PerGpu


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


@dataclass(frozen=True)
class Sample:
    config: str
    run: int
    round: int
    pod: str
    phase: str  # Succeeded, or Pending when no node would take it
    node: str | None
    verdict: Verdict | None

    def tsv_row(self) -> str:
        round_label = f"{self.round:02d}"
        if self.verdict is None:
            return "\t".join((round_label, self.pod, self.phase, "-", "-", "-", "-", "PENDING"))
        return self.verdict.tsv_row(round_label, self.pod, self.phase)


@dataclass
class ConfigResult:
    config: str
    samples: list[Sample] = field(default_factory=list)

    @property
    def granted(self) -> list[Sample]:
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


def _background(cluster: Cluster, scenario: SeedScenario, rng: random.Random) -> None:
    for sim in cluster.nodes.values():
        for pod in [p for p in sim.bound if p.startswith("background-")]:
            cluster.remove(pod, sim.name)
        # Leave room for at least one test pod on small nodes.
        room = max(0, sim.layout.size - scenario.gpus_per_pod)
        count = min(rng.randint(scenario.background_min, scenario.background_max), room)
        for n, device in enumerate(sorted(rng.sample(range(sim.layout.size), count))):
            pod = f"background-{sim.name}-{n}"
            sim.bound[pod] = scenario.per_gpu.request(1)
            sim.allocated[pod] = (device,)
    cluster.report_all()


def run_seed_scenario(
    config: Config,
    layout: NodeLayout,
    scenario: SeedScenario = SeedScenario(),
    seed: int = 1,
    progress: Callable[[], None] = lambda: None,
) -> ConfigResult:
    result = ConfigResult(config.name)
    for run in range(1, scenario.runs + 1):
        # Same seed per run across configurations: every configuration faces the same load.
        rng = random.Random(f"{seed}/{run}")
        ties = random.Random(f"{seed}/{run}/ties")  # apart, so tie-breaking never shifts the load
        cluster = Cluster.of({f"gpu-node-{i + 1}": layout for i in range(scenario.nodes)},
                             scenario.node_milli_cpu, scenario.node_memory)
        scheduler = config.new_scheduler()
        for round_number in range(1, scenario.rounds + 1):
            _background(cluster, scenario, rng)
            scheduler.reported(cluster)
            pods = [f"test-r{run}-{round_number:02d}-{n}" for n in range(1, scenario.pods_per_round + 1)]
            placed: list[tuple[str, str]] = []
            request = scenario.per_gpu.request(scenario.gpus_per_pod)
            for pod in pods:
                node = scheduler.schedule(pod, request, cluster, ties)
                if node is None:
                    result.samples.append(Sample(config.name, run, round_number, pod, "Pending", None, None))
                    continue
                cluster.bind(pod, request, node)
                placed.append((pod, node))
            for pod, node in placed:
                granted = cluster.allocate(pod, node, config.policy)
                verdict = classify(layout, granted) if granted else None
                phase = "Succeeded" if granted else "Failed"
                result.samples.append(Sample(config.name, run, round_number, pod, phase, node, verdict))
            cluster.report_all()
            scheduler.reported(cluster)
            for pod, node in placed:  # the pods finish and are deleted before the next round
                cluster.remove(pod, node)
                scheduler.forget(pod)
            cluster.report_all()
            scheduler.reported(cluster)
            progress()
    return result
