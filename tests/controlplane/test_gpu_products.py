"""GPU products on a real kube-scheduler and apiserver, gpupair installed as shipped (both
scheduler entries, ``--score fragmentation``): pods pinned to a product land on it, and an
unpinned pod is kept off the scarce product that pinned pods need.

Three nodes labelled ``NVIDIA-A100-SXM4-80GB`` by GPU feature discovery, 32 CPUs each, and one
``Tesla-T4`` node, "t4", with 96 CPUs. On "t4" a tenant pinned there (nodeSelector) holds GPU0-3;
two pods asking 2 T4 GPUs (required node affinity) wait for another scheduler, so the pod watch
counts their shapes. A pod pinned by nodeSelector lands on "t4", one pinned by node affinity on
an A100 node: kube-scheduler's NodeAffinity filters, and the extender only scores what is left.

Then a pod asking 1 GPU and 8 CPUs, pinned to nothing. "t4" is where everything but the products
sends it: kube-scheduler's default profile alone (LeastAllocated and BalancedAllocation: 88 of 96
CPUs free there, 24 of 32 on the A100 nodes; asserted below with a second kube-scheduler without
the extender), gpupair's score with the products ignored (``pod_accepts`` answering any product:
"t4" is the fullest node and breaks no shape's fit, grades t4 10, A100 0; or every node's
product unknown), and ``--score best-fit`` (the fullest node); each of the last three checked by
hand once, the test then failing with the pod on "t4". With the products, the T4 shapes count
as lost GPU on every A100 node, weighted by how scarce T4 GPUs are (3 of 26 free), so placing the
pod there takes from GPU no pinned pod can use: grades A100 8-10, t4 0, and the extender's
weight 20 outweighs the default profile.
"""

from __future__ import annotations

from typing import Any

from gpupair.decide.score.gpu_products import PRODUCT_LABEL
from tests.controlplane.api import Api
from tests.controlplane.gpupair_install import scheduler_extenders
from tests.controlplane.kubelet import Kubelets
from tests.controlplane.workloads import SEED_TOPO, gpu_pod, wait_gone, wait_reported, with_cpu

A100, T4 = "NVIDIA-A100-SXM4-80GB", "Tesla-T4"
NODES = {"a100-1": A100, "a100-2": A100, "a100-3": A100, "t4": T4}


def by_selector(pod: dict[str, Any], product: str) -> dict[str, Any]:
    pod["spec"]["nodeSelector"] = {PRODUCT_LABEL: product}
    return pod


def by_affinity(pod: dict[str, Any], product: str) -> dict[str, Any]:
    pod["spec"]["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [{"key": PRODUCT_LABEL, "operator": "In", "values": [product]}]}]}}}
    return pod


def node_of(api: Api, namespace: str, pod: str) -> str:
    return api.get("v1", "Pod", pod, namespace)["spec"]["nodeName"]


def free_now(sim: Kubelets) -> dict[str, set[int]]:
    """The GPUs the harness kubelet has left on each node."""
    return {name: set(sim.free(name)) for name in NODES}


def test_pinned_pods_land_on_their_product_and_others_leave_the_scarce_one(api, namespace, kubelets, scheduler, gpupair):
    install = gpupair("device-plugin")
    sim = kubelets(policy="aligned")
    for name, product in NODES.items():
        sim.add_node(name, SEED_TOPO, cpu="96" if product == T4 else "32", labels={PRODUCT_LABEL: product})
        install.reporter(sim.nodes[name])
    api.create(by_selector(gpu_pod(namespace, "tenant", 4, node="t4", devices=(0, 1, 2, 3)), T4))
    for name in ("waiting-1", "waiting-2"):
        waiting = by_affinity(gpu_pod(namespace, name, 2), T4)
        waiting["spec"]["schedulerName"] = "someone-else"
        api.create(waiting)
    sim.wait_admitted(namespace, ["tenant"], timeout=30)
    wait_reported(api, free_now(sim))
    _, url = install.extender()
    scheduler({"profiles": [{"schedulerName": "default-scheduler"}], "extenders": scheduler_extenders(url)})

    api.create(by_selector(gpu_pod(namespace, "t4-by-selector", 1), T4))
    api.create(by_affinity(gpu_pod(namespace, "a100-by-affinity", 1), A100))
    sim.wait_admitted(namespace, ["t4-by-selector", "a100-by-affinity"], timeout=30)
    assert NODES[node_of(api, namespace, "t4-by-selector")] == T4
    assert NODES[node_of(api, namespace, "a100-by-affinity")] == A100
    free = free_now(sim)
    wait_reported(api, free)

    # The counterfactual: kube-scheduler's default profile alone puts the unpinned pod on "t4".
    scheduler({"profiles": [{"schedulerName": "default-alone"}]})
    alone = with_cpu(gpu_pod(namespace, "alone", 1), "8")
    alone["spec"]["schedulerName"] = "default-alone"
    api.create(alone)
    sim.wait_admitted(namespace, ["alone"], timeout=30)
    assert node_of(api, namespace, "alone") == "t4"
    api.delete(alone)
    wait_gone(api, namespace, ["alone"])
    wait_reported(api, free)

    api.create(with_cpu(gpu_pod(namespace, "unpinned", 1), "8"))
    sim.wait_admitted(namespace, ["unpinned"], timeout=30)

    assert NODES[node_of(api, namespace, "unpinned")] == A100
    assert not sim.errors, sim.errors
