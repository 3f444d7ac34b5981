"""Share pods and 2-GPU pods interleaved on a real kube-scheduler and apiserver, gpupair as
deploy/ runs it: each share goes where the simulator's fragmentation score says it would, on the
fleet state the plane shows (tests/controlplane/fleet_score.py), which keeps a time-sliced node's
untouched GPUs whole; the 2-GPU pod that comes last still gets a close pair.

Three seed-like nodes. "shared-a" and "shared-b" are time-sliced with renameByDefault: each GPU
offered four times as nvidia.com/gpu.shared (``<index>::<n>`` ids, handed out as NVIDIA's device
plugin does). On shared-a a resident share pod holds a replica of GPU0 and 8 of the 32 CPUs; on
shared-b a filler holds every replica of GPU0-3, so GPU4-7 are whole. "whole" offers whole GPUs,
GPU0-2 held by a tenant. The pods: a share, a pair, two shares, a pair. kube-scheduler's default
profile alone prefers shared-b for a share (less of its CPU taken), and so would the score's
packing tie-break (less left there); what decides is where the share is foreseen to land: on
shared-a, a GPU already shared; on shared-b, one of its whole GPUs.

With shares hidden (the reporters reading a shared resource the device plugin does not offer:
``--shared-resources`` left to name another), the score sees no GPU of the time-sliced nodes
and has no preference; the shares go to shared-b and break its whole GPUs.
"""

from __future__ import annotations

import json
from collections import Counter

from gpupair.decide.score.fragmentation import MILLI
from gpupair.topology.shares import SHARES_KEY
from tests.controlplane.fleet_score import simulated_grades
from tests.controlplane.gpupair_install import scheduler_extenders
from tests.controlplane.kubelet import GPU, SHARED, Grant, Kubelets
from tests.controlplane.workloads import SEED_TOPO, gpu_pod, reported_free, with_cpu

REPLICAS = 4
ARRIVALS = [("share-1", SHARED, 1), ("pair-1", GPU, 2), ("share-2", SHARED, 1), ("share-3", SHARED, 1),
            ("pair-2", GPU, 2)]
FILLED = tuple(i for i in range(4) for _ in range(REPLICAS))  # every replica of GPU0-3
SHARED_B = [REPLICAS] * 4 + [0] * 4
HIDDEN = {"GPUPAIR_REPORTER_SHARED_RESOURCES": "example.com/gpu.shared"}  # not what the plugin offers


def taken(sim: Kubelets, node: str) -> list[int]:
    """Replicas held per GPU, as the harness kubelet handed them out."""
    counts = Counter(i for containers in sim.nodes[node].held.values() for _, devices in containers for i in devices)
    return [counts[i] for i in range(sim.nodes[node].layout.size)]


def published_taken(api, node: str) -> list[int] | None:
    raw = (api.get("v1", "Node", node)["metadata"].get("annotations") or {}).get(SHARES_KEY)
    return json.loads(raw)["taken"] if raw else None


def wait_settled(api, sim: Kubelets, shares_seen: bool) -> None:
    """Until every report shows what the kubelets hold: free GPUs, and each GPU's replicas taken
    (hidden: no shares published, nothing of the time-sliced nodes free)."""
    def settled() -> bool:
        for name, node in sim.nodes.items():
            sliced = node.resource == SHARED
            free = sorted(sim.free(name)) if shares_seen or not sliced else []
            if reported_free(api, name) != free:
                return False
            if sliced and published_taken(api, name) != (taken(sim, name) if shares_seen else None):
                return False
        return True

    api.wait_for(settled, 30, "reports showing the kubelets' holdings")


def start(api, namespace, kubelets, scheduler, gpupair, reporter_env: dict[str, str] | None) -> Kubelets:
    install = gpupair("device-plugin")
    sim = kubelets(policy="aligned")
    sim.add_node("shared-a", SEED_TOPO, replicas=REPLICAS, renamed=True)
    sim.add_node("shared-b", SEED_TOPO, replicas=REPLICAS, renamed=True)
    sim.add_node("whole", SEED_TOPO)
    api.create(with_cpu(gpu_pod(namespace, "resident", 1, node="shared-a", resource=SHARED), "8"))
    api.create(gpu_pod(namespace, "filler", 16, node="shared-b", resource=SHARED, devices=FILLED))
    api.create(gpu_pod(namespace, "tenant", 3, node="whole", devices=(0, 1, 2)))
    sim.wait_admitted(namespace, ["resident", "filler", "tenant"], timeout=30)
    assert taken(sim, "shared-a") == [1, 0, 0, 0, 0, 0, 0, 0] and taken(sim, "shared-b") == SHARED_B
    for node in sim.nodes.values():
        install.reporter(node, env=reporter_env)
    wait_settled(api, sim, shares_seen=reporter_env is None)
    _, url = install.extender()
    scheduler({"profiles": [{"schedulerName": "default-scheduler"}], "extenders": scheduler_extenders(url)})
    return sim


def arrival(namespace: str, name: str, resource: str, count: int) -> dict:
    return with_cpu(gpu_pod(namespace, name, count, resource=resource), "2")


def placed(api, namespace: str, sim: Kubelets, pod: dict) -> Grant:
    """The pod created, and its grant once the kubelet admitted it where kube-scheduler bound it."""
    api.create(pod)
    [grant] = sim.wait_admitted(namespace, [pod["metadata"]["name"]], timeout=60)
    return grant


def test_shares_go_where_the_simulator_puts_them_and_whole_gpus_stay_whole(api, namespace, kubelets, scheduler,
                                                                           gpupair):
    sim = start(api, namespace, kubelets, scheduler, gpupair, reporter_env=None)
    grants: dict[str, Grant] = {}
    for name, resource, count in ARRIVALS:
        pod = arrival(namespace, name, resource, count)
        grades = simulated_grades(api, sim, pod, MILLI // REPLICAS)
        best = [node for node, grade in grades.items() if grade == max(grades.values())]
        assert len(best) == 1, (name, grades)  # the simulator names one node
        if resource == SHARED:
            assert len(grades) == 2, (name, grades)  # both time-sliced nodes offered: the choice is the score's
        grants[name] = placed(api, namespace, sim, pod)
        assert grants[name].node == best[0], (name, grants[name], "simulator's grades", grades)
        wait_settled(api, sim, shares_seen=True)

    assert taken(sim, "shared-b") == SHARED_B  # its whole GPUs kept whole
    last = grants["pair-2"]
    assert last.node == "whole" and len({sim.nodes["whole"].layout.numa_of(i) for i in last.devices}) == 1, last
    assert not sim.errors, sim.errors


def test_with_shares_hidden_a_share_breaks_a_whole_gpu(api, namespace, kubelets, scheduler, gpupair):
    sim = start(api, namespace, kubelets, scheduler, gpupair, reporter_env=HIDDEN)
    for name, resource, count in ARRIVALS:
        placed(api, namespace, sim, arrival(namespace, name, resource, count))
        wait_settled(api, sim, shares_seen=False)

    assert published_taken(api, "shared-a") is None
    assert taken(sim, "shared-b") != SHARED_B  # a share put on one of its whole GPUs
    assert not sim.errors, sim.errors
