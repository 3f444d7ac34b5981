"""Share claims and 2-GPU claims interleaved on DRA nodes whose GPUs claims share by memory
(consumable capacity, KEP-5075; beta and on by default in v1.36), on a real kube-scheduler, whose
allocator places every claim, and gpupair's extender as the dra component deploys it: each share
goes where the simulator's fragmentation score says it would on the state the plane shows
(tests/controlplane/dra_fleet_score.py), onto a GPU already shared rather than a whole one.

Two seed-like DRA nodes, each GPU a device of 32Gi of memory in 1Gi steps that claims may share
(its default all 32Gi: a claim not asking memory takes the whole GPU). On "dra-a" a resident share claim
holds 8Gi of GPU0 and its pod 8 of the node's 32 CPUs; on "dra-b" tenants hold GPU0-3 whole, so
GPU4-7 are whole. The pods: a share (8Gi), a pair (two whole GPUs on one NUMA node), two shares, a
pair. kube-scheduler's default profile alone prefers dra-b for a share (less of its CPU taken),
and so would the score's packing tie-break (less GPU left there); the allocator's first fit puts
a share on dra-a's GPU0 (room left) but on dra-b's GPU4, a whole one. What decides is where the
share is foreseen to land, sized as the allocator sizes it.

With the shares hidden (the extender told its GPU DeviceClass is another, so it reads nothing a
claim asks), the score has no share to foresee; the shares go to dra-b and break its whole GPUs.
"""

from __future__ import annotations

from typing import Any

from gpupair.decide.pod.pod_request import parse_bytes
from tests.controlplane.dra import NUMA_ATTRIBUTE, RESOURCE, claim_pod, pinned_claim, seed_topology_file
from tests.controlplane.dra_fleet_score import simulated_grades
from tests.controlplane.gpupair_install import scheduler_extenders
from tests.controlplane.kubelet import Kubelets
from tests.controlplane.workloads import with_cpu
from tests.dra_support import DRIVER, shared_slice

MEMORY = "32Gi"
ARRIVALS = [("share-1", "8Gi"), ("pair-1", ""), ("share-2", "8Gi"), ("share-3", "8Gi"), ("pair-2", "")]
HIDDEN = {"GPUPAIR_EXTENDER_GPU_DEVICE_CLASSES": "example.com/not-the-gpus"}


def memory_slice(node: str) -> dict[str, Any]:
    """Every GPU shareable by memory in 1Gi steps, a claim not asking memory taking all of it
    (the apiserver requires a default with a validRange)."""
    obj = shared_slice(node, MEMORY)
    for device in obj["spec"]["devices"]:
        device["capacity"]["memory"]["requestPolicy"]["default"] = MEMORY
    return obj


def claim(namespace: str, name: str, memory: str) -> dict[str, Any]:
    """A share of one GPU asking ``memory``; "" a pair of whole GPUs on one NUMA node (the
    constraint gpupair's webhook writes for ``required``)."""
    request: dict[str, Any] = {"deviceClassName": DRIVER, "allocationMode": "ExactCount", "count": 1 if memory else 2}
    devices: dict[str, Any] = {"requests": [{"name": "gpus", "exactly": request}]}
    if memory:
        request["capacity"] = {"requests": {"memory": memory}}
    else:
        devices["constraints"] = [{"matchAttribute": NUMA_ATTRIBUTE, "requests": ["gpus"]}]
    return {"apiVersion": RESOURCE, "kind": "ResourceClaim", "metadata": {"name": name, "namespace": namespace},
            "spec": {"devices": devices}}


def results(api, namespace: str, name: str) -> list[dict[str, Any]]:
    return api.get(RESOURCE, "ResourceClaim", name, namespace)["status"]["allocation"]["devices"]["results"]


def start(api, namespace, kubelets, scheduler, gpupair, env: dict[str, str] | None) -> Kubelets:
    install = gpupair("dra")
    sim = kubelets()
    for node in ("dra-a", "dra-b"):
        sim.add_node(node, seed_topology_file(sim.directory, node), gpus=None)
        api.apply(memory_slice(node))
    _, url = install.extender(env)
    scheduler({"profiles": [{"schedulerName": "default-scheduler"}], "extenders": scheduler_extenders(url)})
    residents = [("resident", 0, "8Gi", "dra-a")] + [(f"tenant-{i}", i, "", "dra-b") for i in range(4)]
    for name, index, memory, node in residents:
        api.create(pinned_claim(namespace, name, index, memory=memory))
        pod = claim_pod(namespace, name, claim=name, node=node)
        api.create(with_cpu(pod, "8") if name == "resident" else pod)
    names = [name for name, *_ in residents]
    api.wait_for(lambda: all(api.get("v1", "Pod", n, namespace)["spec"].get("nodeName") for n in names),
                 60, "the residents bound")
    return sim


def arrive(api, namespace: str, name: str, memory: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """The pod and its claim, not created yet."""
    return with_cpu(claim_pod(namespace, name, claim=name), "2"), claim(namespace, name, memory)


def placed(api, namespace: str, pod: dict[str, Any], asked: dict[str, Any]) -> tuple[str, list[int]]:
    """Created; the node kube-scheduler bound the pod to and the devices its claim got there."""
    api.create(asked)
    api.create(pod)
    name = pod["metadata"]["name"]
    node = api.wait_for(lambda: api.get("v1", "Pod", name, namespace)["spec"].get("nodeName"), 60, f"{name} bound")
    return node, sorted(int(r["device"].removeprefix("gpu-")) for r in results(api, namespace, name))


def test_dra_shares_go_where_the_simulator_puts_them_and_whole_gpus_stay_whole(
        api, namespace, kubelets, scheduler, gpupair, gpu_device_class):
    sim = start(api, namespace, kubelets, scheduler, gpupair, env=None)
    capacity = parse_bytes(MEMORY, "memory")
    for name, memory in ARRIVALS:
        pod, asked = arrive(api, namespace, name, memory)
        grades = simulated_grades(api, sim, pod, asked, capacity)
        best = [node for node, grade in grades.items() if grade == max(grades.values())]
        node, devices = placed(api, namespace, pod, asked)
        if memory:
            assert len(grades) == 2 and len(best) == 1, (name, grades)  # both offered; the simulator names one
            assert (node, devices) == (best[0], [0]) == ("dra-a", [0]), (name, node, devices, grades)
        else:
            assert len({sim.nodes[node].layout.numa_of(i) for i in devices}) == 1, (name, node, devices)
    shared = [r for name, memory in ARRIVALS if memory for r in results(api, namespace, name)]
    assert all(r["consumedCapacity"] == {"memory": "8Gi"} for r in shared), shared


def test_with_dra_shares_hidden_a_share_breaks_a_whole_gpu(api, namespace, kubelets, scheduler, gpupair,
                                                           gpu_device_class):
    start(api, namespace, kubelets, scheduler, gpupair, env=HIDDEN)
    nodes = [placed(api, namespace, *arrive(api, namespace, name, memory))[0] for name, memory in ARRIVALS]
    assert "dra-b" in [node for node, (_, memory) in zip(nodes, ARRIVALS) if memory], nodes
