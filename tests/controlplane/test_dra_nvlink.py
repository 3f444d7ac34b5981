"""NVLink pairs on DRA nodes, on the real control plane: three nodes of a recorded 8x RTX A6000
box whose bridges join GPU0+1, 2+3, 4+5 and 6+7 (tests/fixtures/topo/unige-3741-8x-a6000-nvlink.txt),
free {1,2,3} | {4,5} | {0,2,4,6}: two bridged pairs free, and on the first node the allocator's
first fit would take GPU1+GPU2 (NODE) while GPU2+GPU3 is free. A ResourceClaimTemplate asking
gpupair.io/scope: nvlink (its own annotation, then the namespace's label), in an opted-in
namespace, with the webhook's --nvlink-pairs as the override (0+1,2+3,4+5,6+7): the
webhook writes one firstAvailable subrequest per bridged pair, the extender predicts the pick
from the node's measured links, and the reporters judge the verdict against the scope."""

from __future__ import annotations

import time
from typing import Any

from tests.controlplane.api import Api
from tests.controlplane.dra import (
    RESOURCE, a6000_topology_file, allocated_devices, claim_pod, claim_template, dra_nodes_with_tenants, pod_claims,
    run_rounds,
)
from tests.controlplane.test_dra_gpupair import INJECT, PLACEMENT, bound, fragmented
from tests.controlplane.workloads import wait_gone, wait_verdict

# The dra component no longer sets it (the webhook reads the measured links from the ConfigMap
# the extender writes); these tests keep the index pairs as the override.
OVERRIDE = {"GPUPAIR_WEBHOOK_NVLINK_PAIRS": "0+1,2+3,4+5,6+7"}
FREE = {"a6000-1": {1, 2, 3}, "a6000-2": {4, 5}, "a6000-3": {0, 2, 4, 6}}


def nvlink_template(api: Api, namespace: str, name: str, intent: str, *, own: bool = True) -> dict[str, Any]:
    """A template asking 2 GPUs under gpupair.io/scope: nvlink (its own annotation, or with
    ``own=False`` the namespace's label), created once the webhook admits it under ``intent`` and
    that scope (the apiserver's cached namespace labels may lag a relabel)."""
    def admitted() -> dict[str, Any] | None:
        created = api.create(claim_template(namespace, name, 2, constraint=None,
                                            annotations={"gpupair.io/scope": "nvlink"} if own else {}))
        said = (created["spec"].get("metadata") or {}).get("annotations") or {}
        if said.get(PLACEMENT) == intent and said.get("gpupair.io/scope") == "nvlink":
            return created
        api.delete(api.path_of(created))
        return None

    return api.wait_for(admitted, 20, f"template {name} admitted under {intent}", interval=0.2)


def placed(api: Api, namespace: str, names: list[str]) -> dict[str, tuple[str, list[int], dict[str, str]]]:
    """For each bound pod of ``names``: its node, its devices and its verdict."""
    found = {}
    for name in names:
        pod = api.get("v1", "Pod", name, namespace)
        if pod["spec"].get("nodeName"):
            devices = sorted(d for c in pod_claims(api, pod) for d in allocated_devices(c))
            found[name] = (pod["spec"]["nodeName"], devices, wait_verdict(api, namespace, name, timeout=10.0))
    return found


def test_nvlink_pairs_required_then_preferred(api, namespace, kubelets, scheduler, controller_manager, gpupair,
                                              gpu_device_class):
    fragmented(api, namespace, kubelets, scheduler, controller_manager, gpupair, free=FREE, webhook_env=OVERRIDE,
               topology=a6000_topology_file)  # as the dra component installs it: its pairs are this box's

    # required: as many placed as there are free bridged pairs, each on one.
    api.patch(f"/api/v1/namespaces/{namespace}", {"metadata": {"labels": {INJECT: "enabled", PLACEMENT: "required"}}})
    template = nvlink_template(api, namespace, "pair-required", "required")
    names = [f"required-{i}" for i in range(3)]
    for name in names:
        api.create(claim_pod(namespace, name, template="pair-required"))
    api.wait_for(lambda: len([n for n in names if api.get("v1", "Pod", n, namespace)["spec"].get("nodeName")]) >= 2,
                 60, "two pods bound")
    time.sleep(8)  # the third has had its chances
    required = placed(api, namespace, names)
    # The waiting pod goes first: freed pairs would otherwise be allocated to it while it is deleted.
    for group in ([n for n in names if n not in required], list(required)):
        for name in group:
            api.delete(api.path("v1", "Pod", name, namespace), grace=0)
        wait_gone(api, namespace, group)
    api.wait_for(lambda: not [c for c in api.list(RESOURCE, "ResourceClaim", namespace)
                              if c["metadata"]["name"].startswith("required-") and allocated_devices(c)],
                 30, "the required pods' claims deallocated")

    # preferred, the scope now the namespace's default (its label), not the template's: every pod
    # placed, the bridged pairs first, each verdict naming the link it got.
    api.patch(f"/api/v1/namespaces/{namespace}", {"metadata": {"labels": {PLACEMENT: "preferred",
                                                                          "gpupair.io/scope": "nvlink"}}})
    nvlink_template(api, namespace, "pair-preferred", "preferred", own=False)
    names = [f"preferred-{i}" for i in range(3)]
    for name in names:
        api.create(claim_pod(namespace, name, template="pair-preferred"))
    bound(api, namespace, names)
    preferred = placed(api, namespace, names)

    subrequests = [s["name"] for s in template["spec"]["spec"]["devices"]["requests"][0]["firstAvailable"]]
    assert subrequests == ["nvlink-0", "nvlink-1", "nvlink-2", "nvlink-3"]
    assert sorted((node, devices) for node, devices, _ in required.values()) == [("a6000-1", [2, 3]),
                                                                                   ("a6000-2", [4, 5])], required
    assert {(v["gpupair.io/link"], v["gpupair.io/verdict"], v["gpupair.io/verdict-scope"])
            for _, _, v in required.values()} == {("NV4", "PASS", "nvlink")}
    links = [v["gpupair.io/link"] for _, _, v in preferred.values()]
    assert len(preferred) == 3 and links.count("NV4") == 2, preferred
    assert {(v["gpupair.io/verdict"], v["gpupair.io/verdict-placement"], v["gpupair.io/verdict-scope"])
            for _, _, v in preferred.values()} == {("PASS", "preferred", "nvlink")}
    assert {api.get("v1", "Pod", n, namespace)["metadata"]["annotations"].get("gpupair.io/scope") for n in names} \
        == {"nvlink"}, "the namespace's scope is recorded on its claim pods too"


THREE_PAIRS = {"a6000-1": {1, 2, 3}, "a6000-2": {4, 5}, "a6000-3": {0, 2, 4, 6, 7}}
BRIDGED = {("a6000-1", (2, 3)), ("a6000-2", (4, 5)), ("a6000-3", (6, 7))}


def test_kube_scheduler_alone_misses_bridged_pairs(api, namespace, kubelets, scheduler, controller_manager,
                                                  gpu_device_class):
    """The control for the rounds below: the same nodes and rounds, claims as users write them,
    no gpupair. The allocator's first fit takes GPU1+GPU2 and GPU0+GPU2 where bridged pairs are free."""
    sim = kubelets()
    controller_manager("resourceclaim-controller")
    scheduler({"profiles": [{"schedulerName": "default-scheduler"}]})
    dra_nodes_with_tenants(api, sim, namespace, THREE_PAIRS, topology=a6000_topology_file)
    api.create(claim_template(namespace, "pair", 2, constraint=None))
    grants = run_rounds(api, namespace, lambda ns, name: claim_pod(ns, name, template="pair"), rounds=5, per_round=3)
    bridged = [g for g in grants if (g[1], tuple(g[2])) in BRIDGED]
    # Only a6000-2's first fit is its bridged pair: at most one pod a round (5 of 15 in two runs).
    assert len(grants) == 15 and len(bridged) <= 5, grants


def test_rounds_of_three_pods_with_three_bridged_pairs_free_all_get_one(
        api, namespace, kubelets, scheduler, controller_manager, gpupair, gpu_device_class):
    """Three bridged pairs free: GPU2+GPU3 where first fit takes GPU1+GPU2, GPU4+GPU5, and GPU6+GPU7
    where first fit takes GPU0+GPU2. Five rounds of three 2-GPU claim pods created together, under
    preferred in a namespace labelled gpupair.io/scope=nvlink: every pod on a bridged pair."""
    free = THREE_PAIRS
    fragmented(api, namespace, kubelets, scheduler, controller_manager, gpupair, free=free, webhook_env=OVERRIDE,
               topology=a6000_topology_file)
    api.patch(f"/api/v1/namespaces/{namespace}", {"metadata": {"labels": {
        INJECT: "enabled", PLACEMENT: "preferred", "gpupair.io/scope": "nvlink"}}})
    nvlink_template(api, namespace, "pair", "preferred", own=False)
    grants = run_rounds(api, namespace, lambda ns, name: claim_pod(ns, name, template="pair"), rounds=5, per_round=3)
    assert len(grants) == 15 and {(node, tuple(devices)) for _, node, devices in grants} == BRIDGED, grants
