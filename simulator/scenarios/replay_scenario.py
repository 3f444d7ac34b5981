"""Replay a recorded cluster state through the scheduler model, pod by pod.

A state file (JSON) gives the nodes in kube-scheduler's node order, the pods already bound on
each, and the pods then created one at a time, each deleted once bound, as the recordings in
tests/fixtures/real-k8s/ were made; optionally the node the real scheduler chose for each.
For every pod the model predicts a node; since deletion is asynchronous, it also predicts the
node it would choose had the scheduler's cache still counted the previous pod, so a pick that
only that explains is told apart from a wrong one.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from gpupair.topology.layout import NodeLayout
from gpupair.kubewire.wire import explain
from gpupair.simulator.cluster import Cluster, SimNode
from gpupair.simulator.models.kube_scoring import PodRequest, Profile
from gpupair.simulator.models.schedulers import KubeScheduler


class StatePod(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = ""
    gpus: int = Field(ge=0)
    milli_cpu: int = Field(0, ge=0)
    memory: int = Field(0, ge=0, description="bytes")
    count: int = Field(1, ge=1, description="this many identical pods")

    @property
    def request(self) -> PodRequest:
        return PodRequest(self.gpus, self.milli_cpu, self.memory)


class StateNode(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str
    milli_cpu: int = Field(gt=0)
    memory: int = Field(gt=0, description="bytes")
    gpus: int = Field(gt=0)
    pods: list[StatePod] = []


class RecordedState(BaseModel):
    model_config = ConfigDict(extra="forbid")

    what: str = ""
    source: str = ""
    nodes: list[StateNode] = Field(min_length=1)
    pods: list[StatePod] = Field(min_length=1, description="created one at a time, each deleted once bound")
    recorded: list[str] | None = Field(None, description="the node the real scheduler chose for each pod")

    def pod_names(self) -> list[str]:
        names = []
        for entry in self.pods:
            base = entry.name or "pod"
            names += [base if entry.count == 1 else f"{base}-{n:02d}" for n in range(1, entry.count + 1)]
        return names

    def pod_requests(self) -> list[PodRequest]:
        return [entry.request for entry in self.pods for _ in range(entry.count)]


class StateError(ValueError):
    pass


MAX_STATE_BYTES = 16 * 1024 * 1024  # recorded states are kilobytes


def load_state(path: str | Path) -> RecordedState:
    try:
        with open(path, "rb") as handle:
            raw = handle.read(MAX_STATE_BYTES + 1)
        if len(raw) > MAX_STATE_BYTES:
            raise StateError(f"recorded state {path}: larger than {MAX_STATE_BYTES // 2**20} MiB")
        state = RecordedState.model_validate(json.loads(raw.decode("utf-8")))
    except OSError as exc:
        raise StateError(f"recorded state {path}: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise StateError(f"recorded state {path}: not UTF-8 text") from None
    except (json.JSONDecodeError, RecursionError) as exc:
        raise StateError(f"recorded state {path}: not JSON: {exc}") from None
    except ValidationError as exc:
        raise StateError(f"recorded state {path}: {explain(exc)}") from None
    if state.recorded is not None and len(state.recorded) != len(state.pod_requests()):
        raise StateError(f"recorded state {path}: {len(state.recorded)} recorded picks for "
                         f"{len(state.pod_requests())} pods")
    unknown = set(state.recorded or ()) - {node.name for node in state.nodes}
    if unknown:
        raise StateError(f"recorded state {path}: recorded picks name unknown nodes {sorted(unknown)}")
    return state


def cluster_of(state: RecordedState, layout: NodeLayout) -> Cluster:
    nodes = {}
    for node in state.nodes:
        if node.gpus != layout.size:
            raise StateError(f"node {node.name} has {node.gpus} GPUs; the node shape has {layout.size}")
        sim = SimNode(node.name, layout, node.milli_cpu, node.memory)
        for entry in node.pods:
            for n in range(entry.count):
                sim.bound[f"{node.name}/{entry.name or 'bound'}-{n}"] = entry.request
        nodes[node.name] = sim
    return Cluster(nodes)


@dataclass(frozen=True)
class ReplayStep:
    pod: str
    recorded: str | None
    predicted: str | None
    scores: dict[str, int]  # every feasible node's total, node order
    if_previous_lingers: str | None  # the model's pick had the previous pod still been counted

    @property
    def verdict(self) -> str:
        if self.recorded is None:
            return "-"
        if self.recorded == self.predicted:
            return "same"
        if self.recorded == self.if_previous_lingers:
            return "same if the previous pod was still counted"
        return "differs"


def replay(state: RecordedState, profile: Profile, layout: NodeLayout) -> list[ReplayStep]:
    """kube-scheduler alone (no extender, so ties go by node order), one pod at a time."""
    scheduler = KubeScheduler(profile)
    names, requests = state.pod_names(), state.pod_requests()
    recorded = state.recorded or [None] * len(names)
    steps = []
    for i, (pod, request) in enumerate(zip(names, requests)):
        cluster = cluster_of(state, layout)
        usages = {name: sim.usage() for name, sim in cluster.nodes.items()}
        scores = scheduler.scores(request, {name: u for name, u in usages.items() if u.fits(request)})
        predicted = scheduler.schedule(pod, request, cluster, rng=None)
        lingering = None
        if i > 0 and recorded[i - 1] is not None:
            cluster.bind(names[i - 1], requests[i - 1], recorded[i - 1])
            lingering = scheduler.schedule(pod, request, cluster, rng=None)
        steps.append(ReplayStep(pod, recorded[i], predicted, scores, lingering))
    return steps


def summary(steps: list[ReplayStep]) -> str:
    counts: dict[str, int] = {}
    for step in steps:
        counts[step.verdict] = counts.get(step.verdict, 0) + 1
    return ", ".join(f"{verdict}: {count}" for verdict, count in counts.items())
