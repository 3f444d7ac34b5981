"""`gpupair extender --score fragmentation` as shipped (both scheduler entries: the CPU pod is
scored by the every-pod entry), on a real kube-scheduler and apiserver: a CPU-only pod is kept
off the CPU that a node's free GPUs need.

Two seed-like nodes, GPU0-3 of each held by a pinned tenant asking 4 GPUs and 4 CPUs. "roomy"
has 64 CPUs, 46 of them taken by a pinned CPU-only pod; "tight" has 24. A pod asking 4 GPUs and
16 CPUs waits for another scheduler, so the pod watch counts its shape. Then a CPU-only pod asking
8 CPUs: kube-scheduler's default profile alone prefers "tight" (LeastAllocated: half its CPU is
free, against a tenth of roomy's), where it would leave 12 CPUs and so strand GPU4-7 for the
waiting shape; on "roomy" those GPUs are stranded already. The extender's score, at weight 20,
outweighs the profile's.
"""

from __future__ import annotations

from tests.controlplane.gpupair_install import scheduler_extenders
from tests.controlplane.workloads import SEED_TOPO, gpu_pod, wait_reported, with_cpu

FREE = {"roomy": {4, 5, 6, 7}, "tight": {4, 5, 6, 7}}


def test_a_cpu_pod_goes_where_it_strands_no_gpu(api, namespace, kubelets, scheduler, gpupair):
    install = gpupair("device-plugin")
    sim = kubelets(policy="aligned")
    sim.add_node("roomy", SEED_TOPO, cpu="64")
    sim.add_node("tight", SEED_TOPO, cpu="24")
    tenants = []
    for node in FREE:
        install.reporter(sim.nodes[node])
        tenants.append(f"tenant-{node}")
        api.create(with_cpu(gpu_pod(namespace, tenants[-1], 4, node=node, devices=(0, 1, 2, 3)), "4"))
    api.create(with_cpu(gpu_pod(namespace, "hog", 0, node="roomy"), "46"))
    waiting = with_cpu(gpu_pod(namespace, "waiting", 4), "16")
    waiting["spec"]["schedulerName"] = "someone-else"
    api.create(waiting)
    sim.wait_admitted(namespace, [*tenants, "hog"], timeout=30)
    wait_reported(api, FREE)
    _, url = install.extender()
    scheduler({"profiles": [{"schedulerName": "default-scheduler"}], "extenders": scheduler_extenders(url)})

    api.create(with_cpu(gpu_pod(namespace, "web", 0), "8"))
    sim.wait_admitted(namespace, ["web"], timeout=60)

    assert api.get("v1", "Pod", "web", namespace)["spec"]["nodeName"] == "roomy"
    assert not sim.errors, sim.errors
