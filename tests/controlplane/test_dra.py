"""DRA on the real control plane: kube-scheduler's allocator, the resourceclaim controller, and
gpupair as deploy/ with the dra component runs it (webhook rewriting claim templates, reporters
writing DRA pods' verdicts from their claims, the extender with the component's env)."""

from __future__ import annotations

from tests.controlplane.dra import (
    RESOURCE, allocated_devices, claim_pod, claim_template, device_class, hold_devices, pod_claims,
    publish_slices, seed_topology_file,
)
from tests.controlplane.gpupair_install import scheduler_extender

INJECT = {"gpupair.io/inject": "enabled"}
VERDICT_KEYS = ("gpupair.io/granted", "gpupair.io/numa", "gpupair.io/link", "gpupair.io/verdict")


def test_a_claim_written_without_a_constraint_gets_a_close_pair_and_its_verdict(
        api, namespace, kubelets, scheduler, controller_manager, gpupair):
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
    device_class(api)
    publish_slices(api, [node])
    install.reporter(sim.nodes[node])
    _, url = install.extender()
    controller_manager("resourceclaim-controller")
    scheduler({"profiles": [{"schedulerName": "default-scheduler"}], "extenders": [scheduler_extender(url)]})
    tenants = hold_devices(api, namespace, node, [0, 1, 2, 7])
    api.wait_for(lambda: all(api.get("v1", "Pod", n, namespace)["spec"].get("nodeName") for n in tenants),
                 60, "the tenants' claim pods bound")

    created = api.create(claim_template(namespace, "pair", 2, constraint=None))
    constraints = created["spec"]["spec"]["devices"].get("constraints") or []
    assert [c.get("matchAttribute") for c in constraints] == ["resource.kubernetes.io/numaNode"], created["spec"]
    api.create(claim_pod(namespace, "trainer", template="pair"))

    pod = api.wait_for(lambda: (lambda p: p if p["spec"].get("nodeName") else None)(
        api.get("v1", "Pod", "trainer", namespace)), 60, "the claim pod bound")
    claims = pod_claims(api, pod)
    assert [allocated_devices(c) for c in claims] == [[4, 5]], [c.get("status") for c in claims]
    annotations = api.wait_for(lambda: (lambda a: a if all(k in a for k in VERDICT_KEYS) else None)(
        api.get("v1", "Pod", "trainer", namespace)["metadata"].get("annotations") or {}),
        10, "the reporter's verdict on the claim pod")
    assert annotations["gpupair.io/verdict"] == "PASS", annotations
    assert annotations["gpupair.io/link"] == "NODE", annotations
    assert annotations["gpupair.io/granted"] == "GPU4+GPU5", annotations
    assert annotations["gpupair.io/verdict-placement"] == "required", annotations
    assert api.list(RESOURCE, "ResourceClaim", namespace), "the controller made no claim"
