"""The reporter on a node whose GPUs a DRA driver publishes: the topology alone, and verdicts from
claims, against the API double over real HTTP (the recorded pods and claims of a v1.36.2 cluster)."""

from __future__ import annotations

import asyncio
import copy
from datetime import datetime, timezone

import jsonpatch
import pytest

from gpupair.decide.judge import verdict

from gpupair.topology import report
from gpupair.topology.shares import SHARES_KEY
from gpupair.decide.pod.intent import PLACEMENT_KEY, Intent
from gpupair.webhook.claims import ClaimOptions, plan_claim
from gpupair.decide.picture.dra_picture import claim_names
from gpupair.reporter.dra_node import DraNode, serve_verdicts
from gpupair.reporter.main import node_writer
from gpupair.reporter.publisher import Publisher
from gpupair.reporter.scan import ScanResult
from tests.dra_support import DRIVER, allocated_claim, as_list_attributes, node_slice, recorded, recorded_claims
from tests.extender_support import eventually
from tests.kube_double import kube_client_for, make_node, running_kube_double
from tests.layouts import seed_layout

AT = datetime(2026, 12, 1, 9, 32, tzinfo=timezone.utc)


def recorded_pod(name: str) -> dict:
    pod = copy.deepcopy(next(p for p in recorded("pods-with-claims.json")["items"] if p["metadata"]["name"] == name))
    pod["status"]["phase"] = "Running"
    return pod


def seed_recorded(double, node: str) -> None:
    """The recorded pods bound to ``node``, their claims, and the node's slice."""
    double.store.create("nodes", make_node(node, gpus=0))
    double.store.create("resourceslices", node_slice(node))
    for claim in recorded_claims():
        if claim["status"]["allocation"]["devices"]["results"][0]["pool"] == node:
            double.store.create("resourceclaims", copy.deepcopy(claim), claim["metadata"]["namespace"])
    for pod in recorded("pods-with-claims.json")["items"]:
        if pod["spec"]["nodeName"] == node:
            double.store.create("pods", recorded_pod(pod["metadata"]["name"]), "dra-probe")


def test_claim_names_read_templates_direct_claims_and_the_extended_resource_claim():
    assert claim_names(recorded_pod("numa-1")) == ["numa-1-gpus-rn5bf"]
    assert claim_names(recorded_pod("ext-1")) == ["ext-1-extended-resources-mmkzd"]
    direct = recorded_pod("plain-1")
    direct["spec"]["resourceClaims"] = [{"name": "gpus", "resourceClaimName": "shared-pair"}]
    direct["status"].pop("resourceClaimStatuses")
    assert claim_names(direct) == ["shared-pair"]


def test_topology_only_publishes_the_layout_and_removes_free_ledger_and_shares():
    layout = seed_layout("GPU-n")
    scan = ScanResult(layout=layout, free=frozenset({0, 1}), unhealthy=frozenset(), allocated=frozenset(), holders=())
    publisher = Publisher(lambda annotations: None)
    full = publisher.annotations(scan, 1, AT)
    publisher.topology_only = True
    only = publisher.annotations(scan, 1, AT)
    moved = ScanResult(layout=layout, free=frozenset({2}), unhealthy=frozenset(), allocated=frozenset(), holders=())
    assert report.FREE_KEY in full and full[report.FREE_KEY] is not None
    assert only == {report.TOPOLOGY_KEY: full[report.TOPOLOGY_KEY], report.FREE_KEY: None,
                    report.ALLOCATIONS_KEY: None, SHARES_KEY: None}
    assert publisher.key(scan) == publisher.key(moved)  # PodResources churn writes nothing


async def test_a_dra_node_is_found_and_its_report_becomes_the_topology_alone():
    layout = seed_layout("GPU-dra-node-1")
    async with running_kube_double() as double:
        annotations = report.encode_annotations(layout, frozenset(range(8)), 1, AT, holders=())
        double.store.create("nodes", make_node("dra-node-1", annotations=annotations))
        double.store.create("nodes", make_node("plugin-node"))
        double.store.create("resourceslices", node_slice("dra-node-1"))
        async with kube_client_for(double) as api:
            here = DraNode(api, "dra-node-1", DRIVER)
            there = DraNode(api, "plugin-node", DRIVER)
            found = (await here.check(), await there.check())
            publisher = Publisher(node_writer(api, "dra-node-1"))
            publisher.topology_only = here.active
            scan = ScanResult(layout=layout, free=frozenset(range(8)), unhealthy=frozenset(), allocated=frozenset(), holders=())
            await publisher.publish(scan)
        written = double.store.node("dra-node-1")["metadata"]["annotations"]
    assert found == (True, False)
    assert written[report.TOPOLOGY_KEY] == annotations[report.TOPOLOGY_KEY]
    assert report.FREE_KEY not in written and report.ALLOCATIONS_KEY not in written


async def test_a_refused_slice_list_means_device_plugin_mode():
    async with running_kube_double() as double:
        double.fail_next("/apis/resource.k8s.io/v1/resourceslices", status=403)
        async with kube_client_for(double) as api:
            node = DraNode(api, "n", DRIVER)
            assert await node.check() is False


async def test_dra_pods_get_verdicts_from_their_claims_and_a_cross_numa_pair_fails_with_an_event():
    async with running_kube_double() as double:
        seed_recorded(double, "dra-node-1")  # plain-1: gpu-3 + gpu-4, NUMA0 + NUMA1
        seed_recorded(double, "dra-node-2")  # numa-1: gpu-0 + gpu-1; ext-1: gpu-2 + gpu-3
        async with kube_client_for(double) as api:
            stop = asyncio.Event()
            nodes = {}
            tasks = []
            for name in ("dra-node-1", "dra-node-2"):
                layout = seed_layout(f"GPU-{name}")
                nodes[name] = DraNode(api, name, DRIVER, lambda layout=layout: layout)
                await nodes[name].check()
                tasks.append(asyncio.create_task(serve_verdicts(nodes[name], stop)))

            def verdicts():
                return {p["metadata"]["name"]: (p["metadata"].get("annotations") or {}).get(verdict.VERDICT_KEY)
                        for p in double.store.items("pods")}

            await eventually(lambda: None not in verdicts().values(), what="verdicts on every multi-GPU DRA pod")
            stop.set()
            await asyncio.gather(*tasks)
        pods = {p["metadata"]["name"]: p["metadata"]["annotations"] for p in double.store.items("pods")}
        events = double.store.items("events")
    assert pods["plain-1"][verdict.VERDICT_KEY] == "FAIL"
    assert pods["plain-1"][verdict.GRANTED_KEY] == "GPU3+GPU4"
    assert pods["plain-1"][verdict.NUMA_KEY] == "NUMA0+NUMA1" and pods["plain-1"][verdict.LINK_KEY] == "SYS"
    assert pods["plain-1"][verdict.PCI_KEY] == "00000000:61:00.0+00000000:81:00.0"
    assert pods["numa-1"][verdict.VERDICT_KEY] == "PASS" and pods["numa-1"][verdict.GRANTED_KEY] == "GPU0+GPU1"
    assert pods["ext-1"][verdict.VERDICT_KEY] == "PASS" and pods["ext-1"][verdict.GRANTED_KEY] == "GPU2+GPU3"
    [event] = events
    assert event["regarding"]["name"] == "plain-1" and event["type"] == "Warning"
    assert event["reason"] == "GPUPlacementFailed"


async def test_one_gpu_pods_get_no_verdict_and_a_missing_claim_is_retried():
    async with running_kube_double() as double:
        double.store.create("resourceslices", node_slice("n"))
        one = recorded_pod("plain-1")
        one["spec"]["nodeName"] = "n"
        one["metadata"].update(name="one", uid="uid-one")
        one["status"]["resourceClaimStatuses"] = [{"name": "gpus", "resourceClaimName": "one-gpus"}]
        double.store.create("resourceclaims", allocated_claim("dra-probe", "one-gpus", "n", [5], pod="one"),
                            "dra-probe")
        late = copy.deepcopy(one)
        late["metadata"].update(name="late", uid="uid-late")
        late["status"]["resourceClaimStatuses"] = [{"name": "gpus", "resourceClaimName": "late-gpus"}]
        async with kube_client_for(double) as api:
            layout = seed_layout("GPU-n")
            node = DraNode(api, "n", DRIVER, lambda: layout)
            await node.check()
            assert await node.judge(one) is True  # done: one GPU needs no verdict
            assert await node.judge(late) is False  # its claim is not there yet
            double.store.create("resourceclaims", allocated_claim("dra-probe", "late-gpus", "n", [4, 5],
                                                                  pod="late"), "dra-probe")
            double.store.create("pods", late, "dra-probe")
            assert await node.judge(double.store.pod("dra-probe", "late")) is True
        written = double.store.pod("dra-probe", "late")["metadata"]["annotations"]
    assert written[verdict.GRANTED_KEY] == "GPU4+GPU5" and written[verdict.VERDICT_KEY] == "PASS"


def claim_pod(name: str, node: str = "n", annotations: dict | None = None) -> dict:
    """A claim pod as the recorded plain-1, bound to ``node``, its one claim ``<name>-gpus``."""
    pod = recorded_pod("plain-1")
    pod["spec"]["nodeName"] = node
    pod["metadata"].update(name=name, uid=f"uid-{name}", annotations=annotations or {})
    pod["status"]["resourceClaimStatuses"] = [{"name": "gpus", "resourceClaimName": f"{name}-gpus"}]
    return pod


def admitted_claim(pod: str, intent: Intent, devices=(3, 4), *, keep_annotation: bool = True,
                   node: str = "n") -> dict:
    """The pod's claim as the claim webhook stores it in a namespace defaulting to ``intent`` (its
    real patch), then allocated on ``devices``; without ``keep_annotation``, the shape alone."""
    claim = allocated_claim("dra-probe", f"{pod}-gpus", node, devices, pod=pod, pod_uid=f"uid-{pod}")
    status = claim.pop("status")
    claim = jsonpatch.apply_patch(claim, plan_claim(claim, "ResourceClaim", ClaimOptions(), Intent.REQUIRED,
                                                    intent).ops)
    if not keep_annotation:
        claim["metadata"]["annotations"].pop(PLACEMENT_KEY)
    if intent is Intent.PREFERRED:  # a cross-NUMA pair came from the unconstrained subrequest
        for result in status["allocation"]["devices"]["results"]:
            result["request"] = "gpus/any"
    claim["status"] = status
    return claim


async def judged(pods: list[dict], claims: list[dict], slice_obj: dict | None = None) -> tuple[dict, list]:
    """Each pod judged once by the node's reporter: its annotations by name, and the Events."""
    async with running_kube_double() as double:
        double.store.create("resourceslices", slice_obj or node_slice("n"))
        for claim in claims:
            double.store.create("resourceclaims", claim, "dra-probe")
        for pod in pods:
            double.store.create("pods", pod, "dra-probe")
        async with kube_client_for(double) as api:
            layout = seed_layout("GPU-n")
            node = DraNode(api, "n", DRIVER, lambda: layout)
            await node.check()
            for pod in pods:
                assert await node.judge(double.store.pod("dra-probe", pod["metadata"]["name"])) is True
        written = {p["metadata"]["name"]: p["metadata"].get("annotations") or {} for p in double.store.items("pods")}
        return written, double.store.items("events")


@pytest.mark.parametrize("keep_annotation", [True, False], ids=["annotation", "shape"])
async def test_a_sys_grant_is_judged_under_the_intent_its_claim_asked(keep_annotation):
    """GPU3+GPU4 (NUMA0+NUMA1, SYS) for three claim pods: PASS under preferred and none, with the
    intent named and no Warning; FAIL with the Warning only under required."""
    pods = [claim_pod(intent.value) for intent in Intent]
    claims = [admitted_claim(intent.value, intent, keep_annotation=keep_annotation) for intent in Intent]
    written, events = await judged(pods, claims)
    for intent in Intent:
        notes = written[intent.value]
        assert (notes[verdict.GRANTED_KEY], notes[verdict.LINK_KEY]) == ("GPU3+GPU4", "SYS")
    assert written["required"][verdict.VERDICT_KEY] == "FAIL"
    assert written["required"][verdict.VERDICT_PLACEMENT_KEY] == "required"
    assert written["preferred"][verdict.VERDICT_KEY] == "PASS"
    assert written["preferred"][verdict.VERDICT_PLACEMENT_KEY] == "preferred"
    if keep_annotation:  # a none claim without its annotation is as a user writes it: nothing asked
        assert written["none"][verdict.VERDICT_KEY] == "PASS"
        assert written["none"][verdict.VERDICT_PLACEMENT_KEY] == "none"
    else:
        assert written["none"][verdict.VERDICT_PLACEMENT_KEY] == "required"  # the reporter's default
    assert sorted(e["regarding"]["name"] for e in events) == (["required"] if keep_annotation else ["none", "required"])


async def test_a_claim_that_asks_nothing_leaves_the_pods_own_annotation_then_required():
    pods = [claim_pod("asks-none", annotations={PLACEMENT_KEY: "none"}), claim_pod("asks-nothing")]
    claims = [allocated_claim("dra-probe", f"{p['metadata']['name']}-gpus", "n", [3, 4], pod=p["metadata"]["name"],
                              pod_uid=p["metadata"]["uid"]) for p in pods]
    written, events = await judged(pods, claims)
    assert (written["asks-none"][verdict.VERDICT_KEY], written["asks-none"][verdict.VERDICT_PLACEMENT_KEY]) == (
        "PASS", "none")
    assert (written["asks-nothing"][verdict.VERDICT_KEY],
            written["asks-nothing"][verdict.VERDICT_PLACEMENT_KEY]) == ("FAIL", "required")
    assert [e["regarding"]["name"] for e in events] == ["asks-nothing"]


async def test_the_claims_intent_wins_over_the_pods_annotation():
    pod = claim_pod("p", annotations={PLACEMENT_KEY: "none"})
    written, events = await judged([pod], [admitted_claim("p", Intent.REQUIRED)])
    assert (written["p"][verdict.VERDICT_KEY], written["p"][verdict.VERDICT_PLACEMENT_KEY]) == ("FAIL", "required")
    assert len(events) == 1


async def test_verdicts_read_a_slice_in_the_list_form_as_in_the_scalar_form():
    """numaNode as ``ints: [n]`` (DRAListTypeAttributes): the same layout, the same verdicts."""
    pods = [claim_pod("cross"), claim_pod("close")]
    claims = [admitted_claim("cross", Intent.REQUIRED, (3, 4)), admitted_claim("close", Intent.REQUIRED, (0, 1))]
    listed = as_list_attributes(node_slice("n"))
    assert listed["spec"]["devices"][4]["attributes"]["resource.kubernetes.io/numaNode"] == {"ints": [1]}
    scalar, _ = await judged(copy.deepcopy(pods), copy.deepcopy(claims))
    written, _ = await judged(pods, claims, listed)
    assert written == scalar
    assert written["cross"][verdict.VERDICT_KEY] == "FAIL" and written["close"][verdict.VERDICT_KEY] == "PASS"
