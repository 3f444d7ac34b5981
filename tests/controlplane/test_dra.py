"""DRA on the real control plane: kube-scheduler's allocator, the resourceclaim controller, and
gpupair as deploy/ with the dra component runs it (webhook rewriting claim templates, reporters
writing DRA pods' verdicts from their claims, the extender with the component's env)."""

from __future__ import annotations

from gpupair.decide.judge.verdict import format_set
from tests.controlplane.dra import (
    RESOURCE, allocated_devices, claim_pod, claim_template, cross_numa, dra_nodes_with_tenants, frag,
    hold_devices, pod_claims, publish_slices, run_rounds, seed_topology_file,
)
from tests.controlplane.gpupair_install import scheduler_extenders
from tests.controlplane.workloads import gpu_pod, wait_verdict
from tests.dra_support import FRAGMENTED

INJECT = {"gpupair.io/inject": "enabled"}


def test_a_claim_written_without_a_constraint_gets_a_close_pair_and_its_verdict(
        api, namespace, kubelets, scheduler, controller_manager, gpupair, gpu_device_class):
    """Free GPU3-6 on one DRA node: the allocator's first fit for 2 devices would be GPU3+GPU4
    (one per socket); in an opted-in namespace (default intent required) the webhook gives the
    template the numaNode constraint, so the claim gets GPU4+GPU5 (the first two free on the
    first NUMA node with two free, in slice order), and the node's reporter
    writes the pod's verdict from the claim."""
    api.patch(f"/api/v1/namespaces/{namespace}", {"metadata": {"labels": INJECT}})
    install = gpupair("dra")
    install.webhook()
    sim = kubelets()
    node = "dra-smoke-1"
    sim.add_node(node, seed_topology_file(sim.directory, node), gpus=None)
    publish_slices(api, [node])
    install.reporter(sim.nodes[node])
    _, url = install.extender()
    controller_manager("resourceclaim-controller")
    scheduler({"profiles": [{"schedulerName": "default-scheduler"}], "extenders": scheduler_extenders(url)})
    tenants = hold_devices(api, namespace, node, [0, 1, 2, 7])
    api.wait_for(lambda: all(api.get("v1", "Pod", n, namespace)["spec"].get("nodeName") for n in tenants),
                 60, "the tenants' claim pods bound")

    created = api.create(claim_template(namespace, "pair", 2, constraint=None))
    assert "constraints" not in created["spec"]["spec"]["devices"], "it asks nothing: planned claim by claim"
    api.create(claim_pod(namespace, "trainer", template="pair"))

    pod = api.wait_for(lambda: (lambda p: p if p["spec"].get("nodeName") else None)(
        api.get("v1", "Pod", "trainer", namespace)), 60, "the claim pod bound")
    claims = pod_claims(api, pod)
    constraints = [c.get("matchAttribute") for claim in claims for c in claim["spec"]["devices"].get("constraints") or []]
    assert constraints == ["resource.kubernetes.io/numaNode"], [c["spec"] for c in claims]
    assert [allocated_devices(c) for c in claims] == [[4, 5]], [c.get("status") for c in claims]
    annotations = wait_verdict(api, namespace, "trainer")
    assert annotations["gpupair.io/verdict"] == "PASS", annotations
    assert annotations["gpupair.io/link"] == "NODE", annotations
    assert annotations["gpupair.io/granted"] == "GPU4+GPU5", annotations
    assert annotations["gpupair.io/verdict-placement"] == "required", annotations
    assert api.list(RESOURCE, "ResourceClaim", namespace), "the controller made no claim"



def test_kube_scheduler_alone_gives_ext_pods_served_from_dra_sys_pairs(api, namespace, kubelets, scheduler,
                                                                       controller_manager, gpu_device_class):
    """The control for EXT (issue 25's table, first row): pods asking ``nvidia.com/gpu: 2``
    served from DRA devices through the DeviceClass's extendedResourceName, on the fragmented DRA
    nodes, 10 rounds x 2 pods, kube-scheduler alone. Its allocator takes the first free devices
    in slice order, so the recording's 9 of 20 SYS is what to expect; here at least one."""
    sim = kubelets()
    controller_manager("resourceclaim-controller")
    scheduler({"profiles": [{"schedulerName": "default-scheduler"}]})
    dra_nodes_with_tenants(api, sim, namespace, {n: set(f) for n, f in FRAGMENTED.items()})

    grants = run_rounds(api, namespace, lambda ns, name: gpu_pod(ns, name, 2))

    assert len(grants) == 20 and all(len(devices) == 2 for _, _, devices in grants), grants
    assert cross_numa(grants), f"no SYS pair without gpupair: {grants}"


def test_claims_as_written_in_a_required_namespace_get_close_pairs_and_verdicts(
        api, namespace, kubelets, scheduler, controller_manager, gpupair, gpu_device_class):
    """Issue 25's "claims as written under required": a template asking 2 GPUs with no
    constraint, in an opted-in namespace (default intent required), on the fragmented DRA nodes,
    10 rounds x 2 pods. The webhook gives the template the numaNode constraint; every pod is
    placed on a close pair, and its verdict (from the node's reporter, within 10 s of binding)
    names the claim's devices and the intent."""
    api.patch(f"/api/v1/namespaces/{namespace}", {"metadata": {"labels": INJECT}})
    install = gpupair("dra")
    install.webhook()
    sim = kubelets()
    controller_manager("resourceclaim-controller")
    _, url = install.extender()
    scheduler({"profiles": [{"schedulerName": "default-scheduler"}], "extenders": scheduler_extenders(url)})
    dra_nodes_with_tenants(api, sim, namespace, {n: set(f) for n, f in FRAGMENTED.items()})
    for node in FRAGMENTED:
        install.reporter(sim.nodes[node])
    api.create(claim_template(namespace, "pair", 2, constraint=None))
    verdicts = {}

    def on_bound(pod: dict) -> None:
        verdicts[pod["metadata"]["name"]] = wait_verdict(api, namespace, pod["metadata"]["name"])

    grants = run_rounds(api, namespace, lambda ns, name: claim_pod(ns, name, template="pair"), on_bound=on_bound)

    assert len(grants) == 20 and all(len(devices) == 2 for _, _, devices in grants), grants
    assert cross_numa(grants) == [], grants
    for name, _, devices in grants:
        assert verdicts[name]["gpupair.io/granted"] == format_set(devices), (name, devices, verdicts[name])
        assert verdicts[name]["gpupair.io/verdict"] == "PASS", verdicts[name]
        assert verdicts[name]["gpupair.io/verdict-placement"] == "required", verdicts[name]


EMPTY_NODES = {f"frag-{i}": set(range(8)) for i in range(1, 5)}


def test_kube_scheduler_alone_strands_room_for_four_gpu_claims(api, namespace, kubelets, scheduler,
                                                              controller_manager, gpu_device_class):
    """The control for FRAG (issue 25's table, second row): kube-scheduler alone spreads the
    one-GPU claims, so fewer than the seven four-GPU claims that could fit are placed."""
    sim = kubelets()
    controller_manager("resourceclaim-controller")
    scheduler({"profiles": [{"schedulerName": "default-scheduler"}]})
    dra_nodes_with_tenants(api, sim, namespace, EMPTY_NODES)

    placed, ones = frag(api, namespace)

    assert len(placed) < 7, (placed, ones)
    assert len({node for node, _ in ones.values()}) > 1, ones  # spread, not packed
