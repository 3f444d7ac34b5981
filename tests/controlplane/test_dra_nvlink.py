"""NVLink pairs on DRA nodes, on the real control plane: three nodes of a recorded 8x RTX A6000
box whose bridges join GPU0+1, 2+3, 4+5 and 6+7 (tests/fixtures/topo/unige-3741-8x-a6000-nvlink.txt),
free {1,2,3} | {4,5} | {0,2,4,6}: two bridged pairs free, and on the first node the allocator's
first fit would take GPU1+GPU2 (NODE) while GPU2+GPU3 is free. A ResourceClaimTemplate asking
gpupair.io/scope: nvlink (its own annotation, then the namespace's label), in an opted-in
namespace, gpupair as the dra component installs it (no --nvlink-pairs): the extender writes the
reporters' measured links into the ConfigMap gpupair-node-links, the webhook reads it through its
mount (the harness's ConfigMapVolume) and writes one firstAvailable subrequest per bridged pair,
selecting its devices by resource.kubernetes.io/pciBusID, kube-scheduler evaluates those
selectors, the extender predicts the pick from the node's measured links, and the reporters
judge the verdict against the scope. On an NVSwitch board (every pair NVLink) the claim is left
unconstrained."""

from __future__ import annotations

import json
import time
from typing import Any

from gpupair.decide.claims.nvlink_classes import selector
from gpupair.topology.node_links import FILE_KEY

from tests.controlplane.api import Api
from tests.controlplane.dra import (
    RESOURCE, a6000_topology_file, allocated_devices, hgx_h100_topology_file, claim_pod, claim_template, dra_nodes_with_tenants, pod_claims,
    run_rounds,
)
from tests.controlplane.gpupair_install import NAMESPACE
from tests.controlplane.test_dra_gpupair import INJECT, PLACEMENT, bound, fragmented, template_under
from tests.controlplane.workloads import wait_gone, wait_verdict

NODE_LINKS = "gpupair-node-links"
FREE = {"a6000-1": {1, 2, 3}, "a6000-2": {4, 5}, "a6000-3": {0, 2, 4, 6}}


# --- the links the reporters measured, as the dra component installs gpupair (no override): the
# extender writes them into the ConfigMap gpupair-node-links, the harness's stand-in for the
# kubelet's ConfigMap volume writes it to the webhook's --node-links-file.

def measured_links(api: Api, install, nodes: list[str]) -> dict[str, Any]:
    """The node-links document once the extender has written every one of ``nodes`` into the
    ConfigMap and the webhook's mounted file says the same."""
    def written() -> dict[str, Any] | None:
        found = api.find("v1", "ConfigMap", NODE_LINKS, NAMESPACE)
        text = ((found or {}).get("data") or {}).get(FILE_KEY)
        return {"text": text, **json.loads(text)} if text and set(json.loads(text)["nodes"]) >= set(nodes) else None

    document = api.wait_for(written, 30, f"the extender's {NODE_LINKS} naming {nodes}", interval=0.2)
    mounted = [v.directory / FILE_KEY for v in install.volumes if v.name == NODE_LINKS]
    assert len(mounted) == 1, "the webhook's Deployment mounts the ConfigMap once"
    api.wait_for(lambda: mounted[0].exists() and mounted[0].read_text() == document["text"], 10,
                 "the webhook's node-links file current", interval=0.1)
    return document


def required_pairs(api: Api, namespace: str, plane, free: dict[str, set[int]], topology, prefix: str,
                   count: int) -> tuple[dict[str, Any], list[str]]:
    """DRA nodes with ``free`` GPUs of the box ``topology`` records, gpupair as installed, the
    links measured; then ``count`` 2-GPU claim pods under required from a template asking nvlink.
    The document and the pods' names."""
    install, _ = fragmented(api, namespace, *plane, free=free, topology=topology)
    document = measured_links(api, install, list(free))
    api.patch(f"/api/v1/namespaces/{namespace}", {"metadata": {"labels": {INJECT: "enabled", PLACEMENT: "required"}}})
    nvlink_template(api, namespace, f"pair-{prefix}", "required")
    names = [f"{prefix}-{i}" for i in range(count)]
    for name in names:
        api.create(claim_pod(namespace, name, template=f"pair-{prefix}"))
    return document, names


def bus(index: int) -> str:
    """GPU ``index``'s pciBusID as the node's slice publishes it (the seed's bus ids, lower-case)."""
    return f"0000:{(0x21, 0x31, 0x41, 0x61, 0x81, 0xa1, 0xc1, 0xe1)[index]:02x}:00.0"


def nvlink_template(api: Api, namespace: str, name: str, intent: str, *, own: bool = True) -> dict[str, Any]:
    """A template asking 2 GPUs under gpupair.io/scope: nvlink (its own annotation, or with
    ``own=False`` the namespace's label), created once the webhook admits claims there under
    ``intent`` (and the namespace's scope)."""
    return template_under(api, namespace, name, intent, "" if own else "nvlink",
                          {"gpupair.io/scope": "nvlink"} if own else {})


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
    # required: as many placed as there are free bridged pairs, each on one.
    document, names = required_pairs(api, namespace, (kubelets, scheduler, controller_manager, gpupair), FREE,
                                     a6000_topology_file, "required", 3)
    api.wait_for(lambda: len([n for n in names if api.get("v1", "Pod", n, namespace)["spec"].get("nodeName")]) >= 2,
                 60, "two pods bound")
    time.sleep(8)  # the third has had its chances
    required = placed(api, namespace, names)
    (claim,) = pod_claims(api, api.get("v1", "Pod", next(iter(required)), namespace))
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

    assert set(document["nodes"]) == set(FREE), document
    subrequests = claim["spec"]["devices"]["requests"][0]["firstAvailable"]
    assert [(s["name"], [x["cel"]["expression"] for x in s.get("selectors") or []]) for s in subrequests] == [
        (f"nvlink-{n}", [selector("pciBusID", [bus(a), bus(b)])])
        for n, (a, b) in enumerate([(0, 1), (2, 3), (4, 5), (6, 7)])], subrequests
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
    install, _ = fragmented(api, namespace, kubelets, scheduler, controller_manager, gpupair, free=free,
                            topology=a6000_topology_file)
    measured_links(api, install, list(free))
    api.patch(f"/api/v1/namespaces/{namespace}", {"metadata": {"labels": {
        INJECT: "enabled", PLACEMENT: "preferred", "gpupair.io/scope": "nvlink"}}})
    nvlink_template(api, namespace, "pair", "preferred", own=False)
    grants = run_rounds(api, namespace, lambda ns, name: claim_pod(ns, name, template="pair"), rounds=5, per_round=3)
    assert len(grants) == 15 and {(node, tuple(devices)) for _, node, devices in grants} == BRIDGED, grants


def test_a_pods_own_ask_reaches_the_claims_made_for_it(api, namespace, kubelets, scheduler, controller_manager,
                                                      gpupair, gpu_device_class):
    """gpupair#47 item 1. The same nodes and rounds as above, ten rounds, under required; the ask
    on the pod only (gpupair.io/scope: nvlink, gpupair.io/placement: required), the template as
    users write it, the namespace only opted in. The webhook reads each claim's pod from the API
    (the dra component's token and get-pods right) and pairs its request: every pod on a bridged
    pair, 30 of 30 (20 of 30 when the pod's ask did not reach its claims: the third waited)."""
    install, _ = fragmented(api, namespace, kubelets, scheduler, controller_manager, gpupair, free=THREE_PAIRS,
                            topology=a6000_topology_file)
    measured_links(api, install, list(THREE_PAIRS))
    api.patch(f"/api/v1/namespaces/{namespace}", {"metadata": {"labels": {INJECT: "enabled"}}})
    template_under(api, namespace, "pair", "required")  # the cluster default, in a namespace only opted in
    ask = {"gpupair.io/scope": "nvlink", PLACEMENT: "required"}
    seen: list[dict[str, Any]] = []
    grants = run_rounds(api, namespace, lambda ns, name: claim_pod(ns, name, template="pair", annotations=ask),
                        rounds=10, per_round=3, on_bound=lambda pod: seen.extend(pod_claims(api, pod)))

    assert "firstAvailable" not in api.get(RESOURCE, "ResourceClaimTemplate", "pair", namespace)["spec"]["spec"]["devices"]["requests"][0], \
        "a template that asks nothing is left as written"
    assert {(c["metadata"]["annotations"][PLACEMENT], c["metadata"]["annotations"]["gpupair.io/scope"],
             tuple(s["name"] for s in c["spec"]["devices"]["requests"][0]["firstAvailable"])) for c in seen} \
        == {("required", "nvlink", ("nvlink-0", "nvlink-1", "nvlink-2", "nvlink-3"))}
    assert len(grants) == 30 and {(node, tuple(devices)) for _, node, devices in grants} == BRIDGED, grants


HGX_FREE = {"hgx-1": {1, 2, 3}, "hgx-2": {4, 6}}


def test_measured_links_nvswitch_box_unconstrained(api, namespace, kubelets, scheduler, controller_manager,
                                                   gpupair, gpu_device_class):
    """The recorded HGX H100 board (every pair NV18), no --nvlink-pairs: an nvlink claim under
    required gets one subrequest without a selector (any two GPUs), and every pod is placed."""
    document, names = required_pairs(api, namespace, (kubelets, scheduler, controller_manager, gpupair), HGX_FREE,
                                     hgx_h100_topology_file, "any", 2)
    bound(api, namespace, names)
    found = placed(api, namespace, names)
    (claim,) = pod_claims(api, api.get("v1", "Pod", names[0], namespace))

    assert set(document["nodes"]) == set(HGX_FREE), document
    subrequests = claim["spec"]["devices"]["requests"][0]["firstAvailable"]
    assert [s["name"] for s in subrequests] == ["nvlink-0"] and "selectors" not in subrequests[0], subrequests
    assert sorted((node, devices) for node, devices, _ in found.values()) == [("hgx-1", [1, 2]),
                                                                                ("hgx-2", [4, 6])], found
    assert {(v["gpupair.io/link"], v["gpupair.io/verdict"]) for _, _, v in found.values()} == {("NV18", "PASS")}
