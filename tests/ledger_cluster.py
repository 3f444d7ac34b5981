"""A small GPU cluster for end-to-end tests of the ledger: per node, a kubelet + device plugin
stand-in that admits bound pods (the plugin's own aligned pick, or devices a test imposes) and
publishes the node's report through the reporter's real scan and publisher, over the API
double; and a kube-scheduler stand-in that drives the extender's verbs over HTTP as the real
scheduler does (filter, prioritize when more than one node passes, bind)."""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

from gpupair.topology.layout import NodeLayout
from gpupair.decide.devices.policies import POLICIES
from gpupair.reporter.main import node_writer
from gpupair.reporter.publisher import Outcome, Publisher
from gpupair.reporter.scan import Allocations, compute
from tests.extender_support import ExtenderClient, args_body, host_scores, pod_object
from tests.layouts import seed_layout


@dataclass
class NodeKubelet:
    """One node's kubelet and device plugin, as far as GPUs go."""

    name: str
    api: Any
    layout: NodeLayout = field(default_factory=seed_layout)
    held: dict[tuple[str, str], frozenset[int]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.publisher = Publisher(node_writer(self.api, self.name), heartbeat=3600.0)

    @property
    def free(self) -> frozenset[int]:
        taken = set().union(*self.held.values()) if self.held else set()
        return frozenset(range(self.layout.size)) - taken

    def admit(self, namespace: str, name: str, gpus: int, devices: set[int] | None = None) -> frozenset[int]:
        """Allocate a pod's GPUs: ``devices`` if given, else what the plugin's policy picks."""
        chosen = frozenset(devices) if devices is not None else frozenset(
            POLICIES["aligned"].pick(self.layout, self.free, gpus) or ())
        assert len(chosen) == gpus and chosen <= self.free, (self.name, chosen, self.free)
        self.held[(namespace, name)] = chosen
        return chosen

    def remove(self, namespace: str, name: str) -> None:
        self.held.pop((namespace, name), None)

    async def report(self) -> None:
        """Scan and publish, as the reporter does after a checkpoint change."""
        pods = tuple((ns, name, tuple(str(i) for i in sorted(d))) for (ns, name), d in self.held.items())
        allocated = tuple(i for _, _, ids in pods for i in ids)
        scan = compute(self.layout, Allocations(allocated=allocated, pods=pods))
        outcome = await self.publisher.publish(scan)
        assert outcome is not Outcome.ERROR, self.publisher.last_error

    def worst_link(self, namespace: str, name: str) -> str | None:
        return self.layout.worst_link(tuple(sorted(self.held[(namespace, name)])))


async def schedule(client: ExtenderClient, pod: dict[str, Any], names: list[str], rng: random.Random) -> str | None:
    """One scheduling cycle of kube-scheduler with the extender registered (filter, then
    prioritize if several nodes pass, random ties, then bind); the node bound, or None."""
    names = list(names)
    rng.shuffle(names)  # the real NodeNames order varies between cycles
    _, filtered = await client.post("filter", args_body(pod, names=names))
    passed = filtered["NodeNames"] or []
    if not passed:
        return None
    chosen = passed[0]
    if len(passed) > 1:
        _, answer = await client.post("prioritize", args_body(pod, names=passed))
        scores = host_scores(answer, passed)
        best = max(scores.values())
        chosen = rng.choice([name for name, score in scores.items() if score == best])
    meta = pod["metadata"]
    _, bound = await client.post("bind", {"PodName": meta["name"], "PodNamespace": meta["namespace"],
                                          "PodUID": meta["uid"], "Node": chosen})
    return chosen if bound == {"Error": ""} else None


def gpu_pod(created: dict[str, Any], gpus: int) -> dict[str, Any]:
    """The ExtenderArgs Pod for a pod created in the double."""
    meta = created["metadata"]
    return pod_object(gpus, name=meta["name"], uid=meta["uid"], namespace=meta["namespace"])
