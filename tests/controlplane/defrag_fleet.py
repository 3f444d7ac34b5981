"""A fleet where a 4-GPU pod waits only because of where one movable pod sits, on the real
control plane (kube-scheduler with gpupair's extender, the ReplicaSet controller, the harness
kubelets and gpupair's reporters): the defrag tests' cluster.

Two seed nodes (GPU0-3 NUMA0, GPU4-7 NUMA1). Pinned tenants (bare pods: they may not move) hold
a's NUMA1 and all of b but GPU1 and GPU7. "infer", one replica of a ReplicaSet that opted in,
is placed while a's GPU1 is the only free GPU; then the fillers around it go. No NUMA node has
four free GPUs (a's NUMA0 has three), so the 4-GPU pod "wait" waits, until infer moves to b.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tests.controlplane.gpupair_install import Install, scheduler_extenders
from tests.controlplane.kubelet import Kubelets
from tests.controlplane.workloads import SEED_TOPO, gpu_pod, pending_for, scheduling_failures, wait_gone, wait_reported

MOVABLE = {"gpupair.io/movable": "true"}
TENANTS = {**{f"a-{i}": ("frag-a", i) for i in (4, 5, 6, 7)}, **{f"b-{i}": ("frag-b", i) for i in (0, 2, 3, 4, 5, 6)}}
FILLERS = {"fill-a0": ("frag-a", 0), "fill-a2": ("frag-a", 2), "fill-a3": ("frag-a", 3),
           "fill-b1": ("frag-b", 1), "fill-b7": ("frag-b", 7)}


@dataclass
class Fragmented:
    install: Install
    sim: Kubelets
    infer: dict[str, Any]  # the movable pod, on frag-a GPU1
    waiting: dict[str, Any]  # the 4-GPU pod, unschedulable
    tenant_uids: dict[str, str]


def replica_set(namespace: str, name: str) -> dict[str, Any]:
    labels = {"app": name}
    template = gpu_pod(namespace, name, 1, annotations=MOVABLE)
    template["metadata"] = {"labels": labels, "annotations": template["metadata"]["annotations"]}
    return {"apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": {"name": name, "namespace": namespace},
            "spec": {"replicas": 1, "selector": {"matchLabels": labels}, "template": template}}


def pods_of(api, namespace: str, app: str) -> list[dict[str, Any]]:
    return [p for p in api.list("v1", "Pod", namespace, labelSelector=f"app={app}")
            if not p["metadata"].get("deletionTimestamp")]


def events(api, namespace: str, reason: str) -> list[dict[str, Any]]:
    return [e for e in api.list("events.k8s.io/v1", "Event", namespace) if e.get("reason") == reason]


def tenant_uids(api, namespace: str) -> dict[str, str]:
    return {p["metadata"]["name"]: p["metadata"]["uid"] for p in api.list("v1", "Pod", namespace)
            if p["metadata"]["name"] in TENANTS}


def fragmented(api, namespace: str, kubelets, scheduler, gpupair, controller_manager) -> Fragmented:
    """The cluster above, with gpupair installed as deploy/ does with the defrag component (start
    the actor with ``install.defrag()``: its ServiceAccount's RBAC is what it has)."""
    install = gpupair("defrag")
    sim = kubelets(policy="aligned")
    sim.add_node("frag-a", SEED_TOPO)
    sim.add_node("frag-b", SEED_TOPO)
    for name, (node, device) in (TENANTS | FILLERS).items():
        api.create(gpu_pod(namespace, name, 1, node=node, devices=(device,)))
    sim.wait_admitted(namespace, list(TENANTS | FILLERS), timeout=60)
    for node in sim.nodes.values():
        install.reporter(node)
    wait_reported(api, {"frag-a": {1}, "frag-b": set()})
    _, url = install.extender()
    scheduler({"profiles": [{"schedulerName": "default-scheduler"}], "extenders": scheduler_extenders(url)})
    controller_manager("replicaset-controller")
    api.create(replica_set(namespace, "infer"))
    api.wait_for(lambda: [p for p in pods_of(api, namespace, "infer") if p["spec"].get("nodeName")] or None, 60,
                 "infer placed")
    [infer] = pods_of(api, namespace, "infer")
    sim.wait_admitted(namespace, [infer["metadata"]["name"]], timeout=60)
    for name in FILLERS:
        api.delete(f"/api/v1/namespaces/{namespace}/pods/{name}")
    wait_gone(api, namespace, list(FILLERS))
    wait_reported(api, {"frag-a": {0, 2, 3}, "frag-b": {1, 7}})
    waiting = api.create(gpu_pod(namespace, "wait", 4))
    api.wait_for(lambda: scheduling_failures(api, namespace, "wait") or None, 60, "wait's FailedScheduling")
    assert pending_for(api, namespace, ["wait"], 2) == ["wait"]
    return Fragmented(install, sim, infer, api.get("v1", "Pod", "wait", namespace), tenant_uids(api, namespace))
