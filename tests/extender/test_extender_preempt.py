"""The preempt verb over real loopback HTTP, on the bodies a real kube-scheduler v1.36.2 sent in
both node-cache modes (tests/fixtures/real-k8s/preempt-cache-*.json), with node reports whose
allocation ledgers say which GPUs each victim holds."""

from __future__ import annotations

import copy
import json

import pytest

from gpupair.decide.pod.intent import PLACEMENT_KEY
from gpupair.topology.report import PodHolding, encode_annotations
from tests.extender_support import NOW, args_body, make_extender, node_object, serving
from tests.layouts import seed_layout
from tests.real_k8s import load

TRUE = load("preempt-cache-true-high-gpu2.json")["request"]
FALSE = load("preempt-cache-false-high-gpu2.json")["request"]
OTHERS = "others"  # a namespace of pods that are no victims


def meta_uids(node: str, body: dict = TRUE) -> list[str]:
    return [p["UID"] for p in body["NodeNameToMetaVictims"][node]["Pods"]]


def victim_pods(node: str) -> list[tuple[str, str, str]]:
    return [(p["metadata"]["namespace"], p["metadata"]["name"], p["metadata"]["uid"])
            for p in FALSE["NodeNameToVictims"][node]["Pods"]]


def full_node(name: str, victims: list[tuple[str, str, str]], devices: list[set[int]], *,
              ledger: bool = True) -> dict:
    """An 8-GPU seed node with every GPU taken: the victims hold ``devices``, other pods the rest."""
    held = set().union(*devices)
    holders = [PodHolding(ns, pod, frozenset(d), uid) for (ns, pod, uid), d in zip(victims, devices)]
    holders += [PodHolding(OTHERS, f"busy-{name}-{i}", frozenset({i})) for i in range(8) if i not in held]
    annotations = encode_annotations(seed_layout(f"GPU-{name}"), frozenset(), 1, NOW,
                                     holders=holders if ledger else None)
    return node_object(name, annotations)


def meta_victims(uids: list[str]) -> list[tuple[str, str, str]]:
    """Victims known by UID only: the ledger still has their names, as the reporter writes it."""
    return [("pre-true", f"low-{i}", uid) for i, uid in enumerate(uids)]


def answer_uids(body: dict) -> dict[str, list[str]]:
    return {node: [p["UID"] for p in v["Pods"]] for node, v in body["NodeNameToMetaVictims"].items()}


def with_placement(body: dict, placement: str) -> dict:
    body = copy.deepcopy(body)
    body["Pod"]["metadata"]["annotations"] = {PLACEMENT_KEY: placement}
    return body


# pn-1's victims hold GPU3 and GPU4: one per socket, a SYS pair. pn-2's hold GPU2 and GPU3.
PN1, PN2 = [{3}, {4}], [{2}, {3}]


async def post_cached(body: dict, nodes: list[dict]) -> tuple[int, dict]:
    extender = make_extender(node_cache=True)
    extender.node_cache.replace(nodes)
    async with serving(extender) as client:
        return await client.post("preempt", body)


async def test_node_cache_mode_drops_the_node_whose_victims_free_only_a_cross_socket_pair():
    nodes = [full_node("pn-1", meta_victims(meta_uids("pn-1")), PN1),
             full_node("pn-2", meta_victims(meta_uids("pn-2")), PN2)]
    status, body = await post_cached(TRUE, nodes)
    assert status == 200
    assert body == {"NodeNameToMetaVictims": {"pn-2": TRUE["NodeNameToMetaVictims"]["pn-2"]}}


async def test_nodes_mode_judges_whole_pod_victims_on_the_reports_filter_saw():
    """nodeCacheCapable: false: the reports come with filter's Node objects, victims as Pods."""
    nodes = [full_node("pn-1", victim_pods("pn-1"), PN1), full_node("pn-2", victim_pods("pn-2"), PN2)]
    extender = make_extender(node_cache=False)
    async with serving(extender) as client:
        status, _ = await client.post("filter", args_body(FALSE["Pod"], nodes=nodes))
        assert status == 200
        status, body = await client.post("preempt", FALSE)
    assert status == 200
    assert answer_uids(body) == {"pn-2": [uid for _, _, uid in victim_pods("pn-2")]}
    assert body["NodeNameToMetaVictims"]["pn-2"]["NumPDBViolations"] == 0


async def test_a_preferred_pod_may_preempt_for_a_cross_socket_pair():
    nodes = [full_node("pn-1", meta_victims(meta_uids("pn-1")), PN1),
             full_node("pn-2", meta_victims(meta_uids("pn-2")), PN2)]
    status, body = await post_cached(with_placement(TRUE, "preferred"), nodes)
    assert status == 200 and body == {"NodeNameToMetaVictims": TRUE["NodeNameToMetaVictims"]}


async def test_victims_are_trimmed_to_those_that_free_a_close_pair():
    body = copy.deepcopy(TRUE)
    extra = "0b7c1f7e-0000-4000-8000-00000000c0de"
    body["NodeNameToMetaVictims"]["pn-2"]["Pods"].insert(0, {"UID": extra})  # holds GPU6
    uids = [extra, *meta_uids("pn-2")]
    nodes = [full_node("pn-2", meta_victims(uids), [{6}, *PN2])]
    status, answer = await post_cached(body, nodes)
    assert status == 200
    # GPU6's holder is spared; pn-1, of which the extender has no report, is dropped.
    assert answer_uids(answer) == {"pn-2": meta_uids("pn-2")}


async def test_without_a_ledger_the_schedulers_choice_stands_and_says_why(caplog):
    nodes = [full_node("pn-1", meta_victims(meta_uids("pn-1")), PN1, ledger=False)]
    with caplog.at_level("INFO", logger="gpupair.extender.preempt"):
        status, body = await post_cached(TRUE, nodes)
    assert status == 200
    assert answer_uids(body)["pn-1"] == meta_uids("pn-1")
    (record,) = [r for r in caplog.records if getattr(r, "node", "") == "pn-1"]
    assert record.outcome == "unknown" and "no allocation ledger" in record.reason


async def test_a_node_the_extender_has_no_report_for_is_dropped_for_a_required_pod():
    status, body = await post_cached(TRUE, [])
    assert status == 200 and body == {"NodeNameToMetaVictims": {}}


@pytest.mark.parametrize("body, says", [
    (b"{", "body is not JSON"),
    (json.dumps({**TRUE, "Pod": None}), "Pod is required"),
    (json.dumps({**TRUE, "NodeNameToVictims": FALSE["NodeNameToVictims"]}), "not both"),
    (json.dumps({**TRUE, "NodeNameToMetaVictims": None}), "neither"),
    (json.dumps({**TRUE, "NodeNameToMetaVictims": {"pn-1": {"Pods": [{"UID": 7}]}}}), "UID"),
    (json.dumps({**TRUE, "NodeNameToMetaVictims": {"pn-1": {"Pods": {}}}}), "Pods"),
    (json.dumps({**TRUE, "NodeNameToMetaVictims": {"pn-1": {"Pods": [], "NumPDBViolations": "0"}}}),
     "NumPDBViolations"),
    (json.dumps({**FALSE, "NodeNameToVictims": {"pn-1": {"Pods": [{"metadata": {"name": "x"}}]}}}),
     "metadata.uid must be a non-empty string"),
    (json.dumps({**TRUE, "Pod": {"spec": {"containers": [{"resources": {"limits": {"nvidia.com/gpu": "x"}}}]}}}),
     "Pod: spec.containers[0]"),
])
async def test_malformed_bodies_get_a_400_with_the_error_never_a_5xx(body, says):
    extender = make_extender(node_cache=True)
    extender.node_cache.replace([])
    async with serving(extender) as client:
        status, answer = await client.post("preempt", body)
        metrics = (await client.get("/metrics"))[1]
    assert status == 400 and says in answer["Error"]
    assert 'gpupair_extender_requests_total{outcome="bad_request",verb="preempt"} 1.0' in metrics


async def test_go_key_folding_applies_inside_victims_too():
    body = {"pod": TRUE["Pod"], "nodenametometavictims": {"pn-2": {"pods": [{"uid": meta_uids("pn-2")[0]}],
                                                                  "numpdbviolations": 0}},
            "NodeNameToVictims": None}
    nodes = [full_node("pn-2", meta_victims(meta_uids("pn-2")[:1]), [{2}])]
    status, answer = await post_cached(body, nodes)
    # GPU2 alone next to nothing free: no pair, so the node is dropped; the body was read.
    assert status == 200 and answer == {"NodeNameToMetaVictims": {}}


async def test_a_defrag_hold_counts_as_taken_for_every_preemptor_but_its_own():
    from gpupair.extender.cache.defrag_holds import DefragHolds
    from gpupair.kubewire.defrag_plans import PLANS_CONFIGMAP, PlanInFlight

    nodes = [full_node("pn-1", meta_victims(meta_uids("pn-1")), PN1),
             full_node("pn-2", meta_victims(meta_uids("pn-2")), PN2)]

    async def answer(preemptor_uid: str) -> dict:
        extender = make_extender(node_cache=True)
        extender.node_cache.replace(nodes)
        holds = extender.evaluator.defrag = DefragHolds(extender.reservations, lambda: NOW.timestamp())
        # pn-2's GPU2 and GPU3, which its victims would free, are held for the pod "uid-waiting".
        plan = PlanInFlight(namespace="ml", name="big", uid="uid-waiting", node="pn-2", devices=[2, 3], moves=[],
                            startedAt=NOW.timestamp(), heldUntil=NOW.timestamp() + 60)
        holds.replace([{"metadata": {"name": PLANS_CONFIGMAP}, "data": {"uid-waiting": plan.model_dump_json()}}])
        body = copy.deepcopy(TRUE)
        body["Pod"]["metadata"]["uid"] = preemptor_uid
        async with serving(extender) as client:
            status, answered = await client.post("preempt", body)
        assert status == 200
        return answered

    assert await answer("uid-someone") == {"NodeNameToMetaVictims": {}}
    assert await answer("uid-waiting") == {"NodeNameToMetaVictims": {"pn-2": TRUE["NodeNameToMetaVictims"]["pn-2"]}}
