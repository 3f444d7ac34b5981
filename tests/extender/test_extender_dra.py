"""The extender's node picture on DRA nodes: ResourceSlices and claims from the API double's
list+watch (real HTTP), beside device-plugin nodes judged by their reports."""

from __future__ import annotations

import copy
import json

import jsonpatch
import pytest

from gpupair.kubeclient import kube
from gpupair.decide.pod.intent import PLACEMENT_KEY, Intent
from gpupair.webhook.claims import ClaimOptions, plan_claim
from gpupair.topology.report import TOPOLOGY_KEY
from tests.dra_support import DRIVER, FRAGMENTED, allocated_claim, first_fit, fragmented_cluster, node_slice, recorded
from tests.extender_support import args_body, eventually, host_scores, kube_extender, pod_object, report_annotations
from tests.kube_double import KubeDouble, kube_client_for, make_node, running_kube_double
from tests.layouts import seed_layout


def dra_node(name: str, annotations: dict[str, str] | None = None) -> dict:
    """A Node whose GPUs only DRA publishes: nvidia.com/gpu is not in its allocatable."""
    node = make_node(name, gpus=0, annotations=annotations)
    node["status"]["allocatable"].pop("nvidia.com/gpu", None)
    node["status"]["capacity"].pop("nvidia.com/gpu", None)
    return node


def seed_fragmented(double) -> tuple[list, list]:
    slices, claims = fragmented_cluster()
    for name in FRAGMENTED:
        double.store.create("nodes", dra_node(name))
    for obj in slices:
        double.store.create("resourceslices", obj)
    for obj in claims:
        double.store.create("resourceclaims", obj, obj["metadata"]["namespace"])
    return slices, claims


async def filter_names(k, names: list[str], gpus: int = 2) -> dict:
    status, body = await k.client.post("filter", args_body(pod_object(gpus), names=names))
    assert status == 200, body
    return body


async def test_fragmented_dra_nodes_pass_only_where_a_close_pair_is_free():
    async with running_kube_double() as double:
        seed_fragmented(double)
        async with kube_extender(double, dra_driver=DRIVER) as k:
            await eventually(k.extender.ready, what="nodes, slices and claims listed")
            body = await filter_names(k, list(FRAGMENTED))
            four = await filter_names(k, list(FRAGMENTED), gpus=4)
    assert body["NodeNames"] == ["dra-node-2", "dra-node-3", "dra-node-4"]
    assert body["FailedNodes"] == {"dra-node-1": "need 2 GPUs on one NUMA node; free: NUMA0=1 NUMA1=1"}
    assert four["NodeNames"] == ["dra-node-4"]


async def test_an_allocation_written_by_the_scheduler_reaches_the_picture():
    async with running_kube_double() as double:
        slices, claims = seed_fragmented(double)
        async with kube_extender(double, dra_driver=DRIVER) as k:
            await eventually(k.extender.ready)
            # kube-scheduler's allocator: the first fit in slice order on dra-node-3 takes gpu-0, gpu-1
            pick = first_fit(slices, claims, "dra-node-3", 2)
            assert pick == [0, 1]
            claim = allocated_claim("team", "train-gpus-x1", "dra-node-3", pick, pod="train")
            double.store.create("resourceclaims", claim, "team")
            cache = k.extender.node_cache
            await eventually(lambda: cache.get("dra-node-3").report.state.free == frozenset(), what="claim seen")
            body = await filter_names(k, ["dra-node-3"])
            ledger = cache.get("dra-node-3").report.ledger
            double.store.delete("resourceclaims", "train-gpus-x1", "team")
            await eventually(lambda: cache.get("dra-node-3").report.state.free == {0, 1}, what="claim gone")
    assert body["FailedNodes"] == {"dra-node-3": "need 2 GPUs on one NUMA node; free: NUMA0=0 NUMA1=0"}
    assert ledger.devices_of("team", "train") == {0, 1}


async def test_each_node_is_judged_by_its_own_source():
    both_layout = seed_layout("GPU-both")
    async with running_kube_double() as double:
        # a device-plugin node: its reporter's report (free 0 and 4: no close pair)
        double.store.create("nodes", make_node("plugin", annotations=report_annotations({0, 4}, node="plugin")))
        # a reporter and a DRA driver: the reporter publishes the topology alone, DRA says what is free
        double.store.create("nodes", dra_node("both", annotations={
            TOPOLOGY_KEY: report_annotations(set(), node="both")[TOPOLOGY_KEY]}))
        double.store.create("resourceslices", node_slice("both"))
        # a DRA driver alone: links inferred from the attributes
        double.store.create("nodes", dra_node("dra-only"))
        double.store.create("resourceslices", node_slice("dra-only"))
        double.store.create("resourceclaims", allocated_claim("t", "c", "dra-only", [0, 1, 2]), "t")
        # neither: no report at all
        double.store.create("nodes", dra_node("bare"))
        async with kube_extender(double, dra_driver=DRIVER) as k:
            await eventually(k.extender.ready)
            body = await filter_names(k, ["plugin", "both", "dra-only", "bare"])
            cache = k.extender.node_cache
            sources = {name: cache.get(name).report.source for name in ("plugin", "both", "dra-only")}
            both, dra_only = cache.get("both").report, cache.get("dra-only").report
    assert body["NodeNames"] == ["both"]
    assert body["FailedNodes"] == {
        "plugin": "need 2 GPUs on one NUMA node; free: NUMA0=1 NUMA1=1",
        # a close pair is free (GPU4..7), but the allocator's first fit in slice order is not it
        "dra-only": "the allocator would take GPU3+GPU4 (SYS); free: NUMA0=1 NUMA1=4",
        "bare": "no gpupair report (gpupair.io/topology missing)",
    }
    assert sources == {"plugin": "reporter", "both": "dra", "dra-only": "dra"}
    assert both.layout == both_layout  # the reporter's measured links
    assert both.state.free == frozenset(range(8))  # not the reporter's: DRA knows the grants
    assert dra_only.state.free == frozenset(range(3, 8))
    assert dra_only.layout.link(0, 1) == "NODE"  # inferred: a root complex per GPU, one NUMA node


async def test_a_slice_replaced_by_a_new_pool_generation_updates_the_picture():
    async with running_kube_double() as double:
        double.store.create("nodes", dra_node("n"))
        double.store.create("resourceslices", node_slice("n"))
        async with kube_extender(double, dra_driver=DRIVER) as k:
            await eventually(k.extender.ready)
            cache = k.extender.node_cache
            assert cache.get("n").report.layout.size == 8
            double.store.create("resourceslices", node_slice("n", name="n-gpu-2", generation=2, devices=range(4)))
            await eventually(lambda: cache.get("n").report.layout.size == 4, what="generation 2")
            double.store.delete("resourceslices", "n-gpu-2")
            double.store.delete("resourceslices", "n-gpu")
            await eventually(lambda: cache.get("n").report is None, what="slices gone")
            problem = cache.get("n").problem
    assert problem == "no gpupair report (gpupair.io/topology missing)"  # back to the annotations


async def test_a_malformed_slice_is_left_out_and_the_rest_still_decides():
    async with running_kube_double() as double:
        seed_fragmented(double)
        bad = node_slice("dra-node-9")
        bad["spec"]["devices"][0]["attributes"]["index"] = {"int": "zero"}
        double.store.create("resourceslices", bad)
        async with kube_extender(double, dra_driver=DRIVER) as k:
            await eventually(k.extender.ready)
            body = await filter_names(k, ["dra-node-3", "dra-node-9"])
            rejected = k.extender.dra.rejected
    assert body["NodeNames"] == ["dra-node-3"]
    assert "not in the extender's node cache" in body["FailedNodes"]["dra-node-9"]
    assert rejected == 1


async def test_readiness_waits_for_the_slices_and_claims():
    async with running_kube_double() as double:
        seed_fragmented(double)
        double.fail_next("/apis/resource.k8s.io/v1/resourceclaims", status=500, times=3)
        async with kube_extender(double, dra_driver=DRIVER) as k:
            await eventually(lambda: k.extender.node_cache.ready and k.extender.dra.slices.listed)
            early = k.extender.ready()
            await eventually(k.extender.ready, what="claims listed after the failures")
    assert early is False


async def test_the_api_without_resource_k8s_io_serves_no_dra_pictures():
    without = KubeDouble(serve_dra=False)
    await without.start()
    try:
        async with kube_client_for(without) as api:
            missing = await kube.serves(api, "resource.k8s.io", "v1")
    finally:
        await without.stop()
    async with running_kube_double() as double:
        async with kube_client_for(double) as api:
            present = await kube.serves(api, "resource.k8s.io", "v1")
    assert (missing, present) == (False, True)


async def test_nodes_mode_judges_dra_nodes_from_the_watched_slices_too():
    from tests.extender_support import make_extender, node_object, serving

    slices, claims = fragmented_cluster()
    extender = make_extender(node_cache=False, dra_driver=DRIVER)
    extender.dra.slices.replace(slices)
    extender.dra.claims.replace(claims)
    nodes = [node_object(name) for name in ("dra-node-1", "dra-node-3")]
    nodes.append(node_object("plugin", report_annotations({0, 1}, node="plugin")))
    async with serving(extender) as client:
        status, body = await client.post("filter", args_body(pod_object(2), nodes=nodes))
    assert status == 200
    assert [n["metadata"]["name"] for n in body["Nodes"]["items"]] == ["dra-node-3", "plugin"]
    assert body["FailedNodes"] == {"dra-node-1": "need 2 GPUs on one NUMA node; free: NUMA0=1 NUMA1=1"}


# ---- the acceptance table: DRA-backed nvidia.com/gpu pods (kube-scheduler writes their claims)


async def allocate_and_bind(k, double, slices, pod: dict, node: str) -> list[int]:
    """What kube-scheduler does once a node is chosen: its allocator takes the first fit in
    slice order there and PreBind writes the claim (allocated, reserved for the pod), then the
    extender's bind verb binds."""
    meta = pod["metadata"]
    pick = first_fit(slices, double.store.items("resourceclaims"), node, 2)
    claim = allocated_claim(meta["namespace"], f"{meta['name']}-extended-resources-x", node, pick,
                            pod=meta["name"], pod_uid=meta["uid"], request="container-0-request-0")
    claim["metadata"]["annotations"] = {"resource.kubernetes.io/extended-resource-claim": "true"}
    double.store.create("resourceclaims", claim, meta["namespace"])
    status, bound = await k.client.post("bind", {"PodName": meta["name"], "PodNamespace": meta["namespace"],
                                                 "PodUID": meta["uid"], "Node": node})
    assert (status, bound) == (200, {"Error": ""})
    return pick


async def test_twenty_extended_resource_pods_on_the_fragmented_dra_nodes_get_no_sys_pair():
    import random

    from tests.kube_double import make_pod
    from tests.ledger_cluster import gpu_pod

    rng = random.Random(5)
    grants: list[tuple[str, list[int]]] = []
    async with running_kube_double() as double:
        slices, _ = seed_fragmented(double)
        async with kube_extender(double, dra_driver=DRIVER) as k:
            await eventually(k.extender.ready)
            layout = k.extender.node_cache.get("dra-node-1").report.layout
            for round_ in range(10):
                pods = [gpu_pod(double.store.create("pods", make_pod(f"r{round_}-{i}", "ml", gpus=2), "ml"), 2)
                        for i in range(2)]
                for pod in pods:  # back to back: the second is decided before the first's claim is watched
                    names = list(FRAGMENTED)
                    rng.shuffle(names)
                    _, filtered = await k.client.post("filter", args_body(pod, names=names))
                    passed = filtered["NodeNames"]
                    _, answer = await k.client.post("prioritize", args_body(pod, names=passed))
                    scores = host_scores(answer, passed)
                    best = max(scores.values())
                    node = rng.choice([name for name, score in scores.items() if score == best])
                    grants.append((node, await allocate_and_bind(k, double, slices, pod, node)))
                await eventually(lambda: not k.extender.reservations.by_node(), what="holds ended by the claims")
                for pod in pods:  # the round's pods finish; their claims go with them
                    double.store.delete("pods", pod["metadata"]["name"], "ml")
                    double.store.delete("resourceclaims", f"{pod['metadata']['name']}-extended-resources-x", "ml")
                # The next round starts once the claim watch has shown the claims gone, as the
                # control-plane rounds wait for the reports: a pod decided on a picture that still
                # holds them is planned around devices the allocator sees free.
                await eventually(lambda: all(k.extender.node_cache.get(n).report.state.free == frozenset(free)
                                             for n, free in FRAGMENTED.items()), what="the round's claims gone")
            registry = k.extender.metrics.registry
            outcomes = {outcome: registry.get_sample_value("gpupair_extender_reservation_outcomes_total",
                                                           {"outcome": outcome})
                        for outcome in ("confirmed", "deviated", "expired", "released")}
    links = [layout.worst_link(pick) for _, pick in grants]
    assert len(grants) == 20 and links.count("SYS") == 0, grants
    # The allocator took what the extender predicted, every time it predicted. Where the claim
    # watch showed a pod's own claim before its bind (the claim is written first, as PreBind
    # does), the bind holds nothing: the claim is the set (seen under load: 19 of 20 held).
    assert outcomes["deviated"] == outcomes["expired"] == outcomes["released"] == 0, outcomes
    assert outcomes["confirmed"] > 0, outcomes
    # The same allocator without the extender, on any node with 2 free: dra-node-1 gives GPU3+GPU4,
    # dra-node-2 GPU2+GPU3: one SYS pair in two nodes' first fits (the recording saw 9 in 20).
    _, claims = fragmented_cluster()
    alone = {node: layout.worst_link(first_fit(slices, claims, node, 2)) for node in FRAGMENTED}
    assert alone == {"dra-node-1": "SYS", "dra-node-2": "NODE", "dra-node-3": "NODE", "dra-node-4": "NODE"}


# ---- claim pods (the extender registered without managedResources)


def claim_pod(double, name: str, claim: str) -> dict:
    """A pod using one claim by name, as the resourceclaim controller leaves a template pod."""
    from tests.kube_double import make_pod

    pod = make_pod(name, "ml", gpus=0)
    pod["spec"]["resourceClaims"] = [{"name": "gpus", "resourceClaimName": claim}]
    pod["spec"]["containers"][0]["resources"] = {"claims": [{"name": "gpus"}]}
    return double.store.create("pods", pod, "ml")


def gpu_claim(name: str, count: int, numa: bool) -> dict:
    """A claim as a user (or the webhook's ``required``) writes it, not allocated yet."""
    obj = copy.deepcopy(recorded("resourceclaimtemplate-pair-numa.json")["spec"]["spec"])
    obj["devices"]["requests"][0]["exactly"]["count"] = count
    if not numa:
        obj["devices"].pop("constraints")
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
            "metadata": {"name": name, "namespace": "ml"}, "spec": obj}


async def place_claim_pods(double, k, pods: list[tuple[str, int, bool]], choose) -> dict[str, list[int]]:
    """kube-scheduler for claim pods: the extender's filter and prioritize (when ``k``), a node
    chosen by ``choose`` among those where the allocator finds devices, the allocator's pick
    written into the claim, then bind. Returns pod -> devices for the pods placed."""
    placed = {}
    slices = double.store.items("resourceslices")
    for name, count, numa in pods:
        double.store.create("resourceclaims", gpu_claim(f"{name}-gpus", count, numa), "ml")
        created = claim_pod(double, name, f"{name}-gpus")
        pod = {**created, "kind": "Pod", "apiVersion": "v1"}
        feasible = [n for n in FRAGMENTED if first_fit(slices, double.store.items("resourceclaims"), n, count,
                                                       same_numa=numa) is not None]
        scores = {n: 0 for n in feasible}
        if k is not None and feasible:
            await eventually(lambda: watched(k.extender.dra, pod), what="the claim watched")
            _, filtered = await k.client.post("filter", args_body(pod, names=feasible))
            _, ranked = await k.client.post("prioritize", args_body(pod, names=filtered["NodeNames"]))
            scores = host_scores(ranked, filtered["NodeNames"])
        if not scores:
            continue
        node = choose(scores, double)
        pick = first_fit(slices, double.store.items("resourceclaims"), node, count, same_numa=numa)
        allocated = allocated_claim("ml", f"{name}-gpus", node, pick, pod=name, pod_uid=created["metadata"]["uid"],
                                    constraint="resource.kubernetes.io/numaNode" if numa else None)
        double.store.update("resourceclaims", f"{name}-gpus", "ml", allocated)
        if k is not None:
            meta = created["metadata"]
            _, bound = await k.client.post("bind", {"PodName": name, "PodNamespace": "ml", "PodUID": meta["uid"],
                                                    "Node": node})
            assert bound == {"Error": ""}
            await eventually(lambda: not k.extender.reservations.by_node(), what="the claim seen")
        placed[name] = pick
    return placed


def watched(dra, pod) -> bool:
    from gpupair.decide.pod.pod_request import PodRequestError

    try:
        return dra.pod_demand(pod) is not None
    except PodRequestError:
        return False


def spread(scores: dict[str, int], double) -> str:
    """kube-scheduler alone: every feasible node ties on GPUs; its default profile spreads by
    requests, and pods that asked nothing else go to the least loaded node."""
    load = {n: sum(len(((c.get("status") or {}).get("allocation") or {}).get("devices", {}).get("results", []))
                   for c in double.store.items("resourceclaims")
                   if n in json.dumps((c.get("status") or {}).get("allocation", {}).get("nodeSelector", {})))
            for n in scores}
    return min(scores, key=lambda n: (load[n], n))


def best_score(scores: dict[str, int], double) -> str:
    """With gpupair's prioritize at weight 5 over scores that tie otherwise."""
    return max(sorted(scores), key=lambda n: scores[n])


ONE_THEN_FOUR = [(f"one-{i}", 1, False) for i in range(4)] + [(f"four-{i}", 4, True) for i in range(8)]


async def test_one_gpu_then_four_gpu_claims_best_fit_keeps_whole_numa_nodes_free():
    async with running_kube_double() as double:
        for name in FRAGMENTED:
            double.store.create("nodes", dra_node(name))
            double.store.create("resourceslices", node_slice(name))
        alone = await place_claim_pods(double, None, ONE_THEN_FOUR, spread)
    async with running_kube_double() as double:
        for name in FRAGMENTED:
            double.store.create("nodes", dra_node(name))
            double.store.create("resourceslices", node_slice(name))
        async with kube_extender(double, dra_driver=DRIVER) as k:
            await eventually(k.extender.ready)
            with_gpupair = await place_claim_pods(double, k, ONE_THEN_FOUR, best_score)
    fours = [name for name in with_gpupair if name.startswith("four")]
    assert sum(name.startswith("four") for name in alone) == 4  # the spread one-GPU claims broke NUMA0 everywhere
    assert len(fours) == 7  # all four one-GPU claims packed into one NUMA node: 7 of the 8 fit


async def test_the_preempt_verb_reads_a_dra_victims_devices_from_its_claim():
    from tests.dra_support import busy_claims
    from tests.extender_support import make_extender, serving
    from tests.real_k8s import load

    body = load("preempt-cache-true-high-gpu2.json")["request"]
    victims = {node: [p["UID"] for p in body["NodeNameToMetaVictims"][node]["Pods"]] for node in ("pn-1", "pn-2")}
    held = {"pn-1": [3, 4], "pn-2": [2, 3]}  # pn-1's victims hold one GPU per socket
    slices, claims = [], []
    for node in ("pn-1", "pn-2"):
        slices.append(node_slice(node))
        for uid, device in zip(victims[node], held[node]):
            claims.append(allocated_claim("pre-true", f"low-{uid[:4]}-gpus", node, [device], pod=f"low-{uid[:4]}",
                                          pod_uid=uid))
        claims += busy_claims(node, set(range(8)) - set(held[node]), namespace="others")
    extender = make_extender(node_cache=True, dra_driver=DRIVER)
    extender.dra.slices.replace(slices)
    extender.dra.claims.replace(claims)
    extender.node_cache.replace([dra_node("pn-1"), dra_node("pn-2")])
    async with serving(extender) as client:
        status, answer = await client.post("preempt", body)
    assert status == 200
    assert answer == {"NodeNameToMetaVictims": {"pn-2": body["NodeNameToMetaVictims"]["pn-2"]}}


def admitted_gpu_claim(name: str, intent: Intent, keep_annotation: bool = True) -> dict:
    """A two-GPU claim as the claim webhook stores it in a namespace defaulting to ``intent``
    (its real patch); without ``keep_annotation``, the shape alone."""
    claim = gpu_claim(name, 2, numa=False)
    claim = jsonpatch.apply_patch(claim, plan_claim(claim, "ResourceClaim", ClaimOptions(), Intent.REQUIRED,
                                                    intent).ops)
    if not keep_annotation:
        claim["metadata"]["annotations"].pop(PLACEMENT_KEY)
    return claim


@pytest.mark.parametrize("keep_annotation", [True, False], ids=["annotation", "shape"])
async def test_a_claim_pods_intent_is_read_from_its_claims(keep_annotation):
    """dra-node-1 has only GPU3+GPU4 free (SYS): a claim pod asking preferred or none in its
    claim passes there, one asking required does not; a claim pod carries no annotation."""
    async with running_kube_double() as double:
        seed_fragmented(double)
        async with kube_extender(double, dra_driver=DRIVER) as k:
            await eventually(k.extender.ready)
            passed = {}
            for intent in Intent:
                double.store.create("resourceclaims", admitted_gpu_claim(f"{intent.value}-gpus", intent,
                                                                         keep_annotation), "ml")
                pod = {**claim_pod(double, intent.value, f"{intent.value}-gpus"), "kind": "Pod", "apiVersion": "v1"}
                assert PLACEMENT_KEY not in (pod["metadata"].get("annotations") or {})
                await eventually(lambda: watched(k.extender.dra, pod), what="the claim watched")
                status, body = await k.client.post("filter", args_body(pod, names=list(FRAGMENTED)))
                assert status == 200, body
                passed[intent.value] = body["NodeNames"]
    assert "dra-node-1" not in passed["required"]
    assert "dra-node-1" in passed["preferred"]
    # none's claim is left as written: without its annotation it says nothing, and the default is required
    assert ("dra-node-1" in passed["none"]) is keep_annotation


async def test_the_claims_intent_comes_before_the_pods_annotation_and_disagreeing_claims_count_the_strictest(
        caplog):
    async with running_kube_double() as double:
        seed_fragmented(double)
        async with kube_extender(double, dra_driver=DRIVER) as k:
            await eventually(k.extender.ready)
            double.store.create("resourceclaims", admitted_gpu_claim("a-gpus", Intent.PREFERRED), "ml")
            double.store.create("resourceclaims", admitted_gpu_claim("b-gpus", Intent.REQUIRED), "ml")
            pod = {**claim_pod(double, "two", "a-gpus"), "kind": "Pod", "apiVersion": "v1"}
            pod["metadata"]["annotations"] = {PLACEMENT_KEY: "none"}
            await eventually(lambda: watched(k.extender.dra, pod), what="the claim watched")
            assert k.extender.evaluator.intent_of(pod) is Intent.PREFERRED
            pod["spec"]["resourceClaims"].append({"name": "more", "resourceClaimName": "b-gpus"})
            await eventually(lambda: watched(k.extender.dra, pod), what="the claim watched")
            with caplog.at_level("WARNING", logger="gpupair.extender"):
                assert k.extender.evaluator.intent_of(pod) is Intent.REQUIRED
            plain = {**claim_pod(double, "plain", "b-gpus"), "kind": "Pod", "apiVersion": "v1"}
            plain["spec"]["resourceClaims"] = []
            plain["metadata"]["annotations"] = {PLACEMENT_KEY: "none"}
            assert k.extender.evaluator.intent_of(plain) is Intent.NONE  # no claims: its own annotation
            double.store.delete("resourceclaims", "a-gpus", "ml")
            await eventually(lambda: not k.extender.dra.pod_claim_intents(
                {"metadata": {"namespace": "ml"}, "spec": {"resourceClaims": [{"resourceClaimName": "a-gpus"}]}}),
                what="the deleted claim's intent gone")
    assert any("ml/a-gpus: preferred, ml/b-gpus: required" in r.getMessage() + str(getattr(r, "error", ""))
               for r in caplog.records)


@pytest.mark.parametrize("intent, kept", [(Intent.PREFERRED, True), (Intent.NONE, True), (Intent.REQUIRED, False)])
async def test_bind_reads_the_intent_of_a_pod_it_never_filtered_from_its_allocated_claims(intent, kept):
    """Filtered by another replica, or before a restart: bind knows the pod by UID only, and
    its claims, allocated in PreBind, say what it asked. A cross-NUMA allocation is kept under
    preferred and none, refused under required."""
    from tests.extender.test_extender_dra_binding_cycle import bind, running

    async with running() as (double, k):
        double.store.create("resourceclaims", admitted_gpu_claim("p-gpus", intent), "ml")
        created = claim_pod(double, "p", "p-gpus")
        uid = created["metadata"]["uid"]
        allocated = allocated_claim("ml", "p-gpus", "dra-node-1", [3, 4], pod="p", pod_uid=uid,
                                    request="gpus/any" if intent is Intent.PREFERRED else "gpus")
        stored = double.store.get("resourceclaims", "p-gpus", "ml")
        double.store.update("resourceclaims", "p-gpus", "ml", {**stored, "status": allocated["status"]})
        await eventually(lambda: k.extender.dra.owned(uid).get("dra-node-1") == {3, 4}, what="the allocation watched")
        assert k.extender.requests.asked(uid)[1] is None  # never filtered here
        answer = await bind(k, {**created, "kind": "Pod"}, "dra-node-1")
    assert (answer == {"Error": ""}) is kept, answer
