"""The extender on kube-scheduler's DRA binding cycle: Reserve, Permit, PreBind, then Bind.

The DynamicResources plugin writes a pod's claim allocations (and ``reservedFor``) in PreBind,
so by the time the extender's bind verb is called the claim watch may already show the pod's
devices taken. These tests deliver the claim before bind, as a prompt watch on the real control
plane does, and check that the devices count as the pod's own in every verb."""

from __future__ import annotations

import contextlib

from gpupair.kubewire.dra import EXTENDED_RESOURCE_CLAIM_KEY
from gpupair.decide.judge.verdict import PLANNED_KEY
from tests.dra_support import DRIVER, FRAGMENTED, allocated_claim, node_slice
from tests.extender.test_extender_dra import claim_pod, dra_node, gpu_claim, seed_fragmented, watched
from tests.extender_support import args_body, eventually, kube_extender
from tests.kube_double import make_pod, running_kube_double


def extended_pod(double, name: str, gpus: int = 2) -> dict:
    """A pod asking nvidia.com/gpu, served from DRA devices (DeviceClass extendedResourceName)."""
    created = double.store.create("pods", make_pod(name, "ml", gpus=gpus), "ml")
    return {**created, "kind": "Pod", "apiVersion": "v1"}


async def prebind(double, k, pod: dict, node: str, devices: list[int], *, reserved: bool = True) -> str:
    """kube-scheduler's PreBind for an extended-resource pod: the claim it makes itself (owned by
    the pod), allocated on ``node`` and reserved for the pod; returned once the extender's claim
    watch holds it, which is the order that refused pods at bind."""
    meta = pod["metadata"]
    name = f"{meta['name']}-extended-resources-x"
    claim = allocated_claim("ml", name, node, devices, pod=meta["name"] if reserved else None,
                            pod_uid=meta["uid"], request="container-0-request-0")
    claim["metadata"]["annotations"] = {EXTENDED_RESOURCE_CLAIM_KEY: "true"}
    claim["metadata"]["ownerReferences"] = [{"apiVersion": "v1", "kind": "Pod", "name": meta["name"],
                                             "uid": meta["uid"], "controller": True}]
    double.store.create("resourceclaims", claim, "ml")
    await eventually(lambda: k.extender.dra.owned(meta["uid"]).get(node) == frozenset(devices),
                     what="the pod's claim watched")
    return name


async def bind(k, pod: dict, node: str) -> dict:
    meta = pod["metadata"]
    status, body = await k.client.post("bind", {"PodName": meta["name"], "PodNamespace": meta["namespace"],
                                                "PodUID": meta["uid"], "Node": node})
    assert status == 200, body
    return body


async def filter_pod(k, pod: dict, names: list[str]) -> dict:
    status, body = await k.client.post("filter", args_body(pod, names=names))
    assert status == 200, body
    return body


async def test_bind_takes_the_last_close_pair_that_prebind_allocated_to_the_pod():
    async with running() as (double, k):
        pod = extended_pod(double, "ext-1")
        assert (await filter_pod(k, pod, ["dra-node-3"]))["NodeNames"] == ["dra-node-3"]
        await prebind(double, k, pod, "dra-node-3", [0, 1])  # the node's only free pair, now the pod's
        assert k.extender.node_cache.get("dra-node-3").report.state.free == frozenset()
        answer = await bind(k, pod, "dra-node-3")
        held = k.extender.reservations.by_node()
        stored = double.store.get("pods", "ext-1", "ml")
    assert answer == {"Error": ""}
    assert stored["spec"]["nodeName"] == "dra-node-3"
    # the allocation is in the picture already: nothing to hold, and nothing held for a TTL
    assert held == {}
    assert stored["metadata"]["annotations"][PLANNED_KEY] == "GPU0+GPU1"  # the plan is the allocation


async def test_the_bind_plan_is_the_allocation_not_a_prediction_over_the_rest():
    async with running() as (double, k):
        pod = extended_pod(double, "ext-2")
        # dra-node-2 has GPU2-5 free; the allocator took gpu-2 and gpu-3. Counting them as
        # another pod's, the prediction over what is left would have been GPU4+GPU5.
        await prebind(double, k, pod, "dra-node-2", [2, 3])
        answer = await bind(k, pod, "dra-node-2")
        stored = double.store.get("pods", "ext-2", "ml")
        free = k.extender.node_cache.get("dra-node-2").report.state.free
    assert answer == {"Error": ""}
    assert stored["metadata"]["annotations"][PLANNED_KEY] == "GPU2+GPU3"
    assert free == {4, 5}


async def test_a_retried_pod_whose_claim_is_still_allocated_passes_where_it_holds_its_devices():
    async with running() as (double, k):
        pod = extended_pod(double, "ext-3")
        # Unreserve took the pod out of reservedFor; the claim is still allocated (the controller
        # deallocates it a moment later) and still owned by the pod.
        await prebind(double, k, pod, "dra-node-3", [0, 1], reserved=False)
        body = await filter_pod(k, pod, list(FRAGMENTED))
        _, scores = await k.client.post("prioritize", args_body(pod, names=["dra-node-3"]))
        other = extended_pod(double, "other")
        theirs = await filter_pod(k, other, ["dra-node-3"])
    assert "dra-node-3" in body["NodeNames"]
    assert scores[0]["Score"] > 0
    # for any other pod those devices are taken
    assert theirs["FailedNodes"] == {"dra-node-3": "need 2 GPUs on one NUMA node; free: NUMA0=0 NUMA1=0"}


async def test_an_allocation_that_breaks_required_is_refused_once_and_the_pod_stays_off_that_node():
    async with running() as (double, k):
        pod = extended_pod(double, "ext-4")
        assert "dra-node-1" not in (await filter_pod(k, pod, list(FRAGMENTED)))["NodeNames"]
        # Say the allocator took GPU3+GPU4 on dra-node-1 anyway (a pool order gpupair did not
        # model): the set crosses the sockets, and the pod asked for required placement.
        await prebind(double, k, pod, "dra-node-1", [3, 4])
        refused = await bind(k, pod, "dra-node-1")
        # The scheduler unreserves and deallocates, then tries the pod again.
        double.store.delete("resourceclaims", "ext-4-extended-resources-x", "ml")
        await eventually(lambda: not k.extender.dra.owned(pod["metadata"]["uid"]), what="the claim gone")
        again = await filter_pod(k, pod, list(FRAGMENTED))
        other = await filter_pod(k, extended_pod(double, "other", gpus=1), ["dra-node-1"])
        stored = double.store.get("pods", "ext-4", "ml")
    reason = "the allocator took GPU3+GPU4 (SYS) for this pod's claims here, not a close set"
    assert refused == {"Error": f"node dra-node-1 can no longer take this pod: {reason}"}
    assert not stored["spec"].get("nodeName")
    # it goes where a close pair is free, and is told why not dra-node-1: no loop on that node
    assert again["FailedNodes"]["dra-node-1"] == f"at bind, {reason}"
    assert again["NodeNames"] == ["dra-node-2", "dra-node-3", "dra-node-4"]
    assert other["NodeNames"] == ["dra-node-1"]  # only that pod is kept off the node


async def test_a_preferred_pod_keeps_a_cross_numa_allocation():
    async with running() as (double, k):
        created = make_pod("ext-5", "ml", gpus=2, annotations={"gpupair.io/placement": "preferred"})
        pod = {**double.store.create("pods", created, "ml"), "kind": "Pod", "apiVersion": "v1"}
        await filter_pod(k, pod, ["dra-node-1"])  # bind reads the intent its filter was decided under
        await prebind(double, k, pod, "dra-node-1", [3, 4])
        answer = await bind(k, pod, "dra-node-1")
        stored = double.store.get("pods", "ext-5", "ml")
    assert answer == {"Error": ""}
    assert stored["metadata"]["annotations"][PLANNED_KEY] == "GPU3+GPU4"


async def test_a_claim_pod_bound_after_its_claim_is_watched_holds_nothing():
    async with running(every_node_empty=True) as (double, k):
        double.store.create("resourceclaims", gpu_claim("one-gpus", 1, False), "ml")
        created = claim_pod(double, "one", "one-gpus")
        pod = {**created, "kind": "Pod", "apiVersion": "v1"}
        await eventually(lambda: watched(k.extender.dra, pod), what="the claim watched")
        await filter_pod(k, pod, ["dra-node-1"])
        allocated = allocated_claim("ml", "one-gpus", "dra-node-1", [7], pod="one", pod_uid=created["metadata"]["uid"])
        double.store.update("resourceclaims", "one-gpus", "ml", allocated)
        await eventually(lambda: k.extender.dra.owned(created["metadata"]["uid"]), what="the allocation watched")
        answer = await bind(k, pod, "dra-node-1")
        held = k.extender.reservations.by_node()
        four = await filter_pod(k, {**pod, "metadata": {**pod["metadata"], "uid": "x"}}, ["dra-node-1"])
    assert answer == {"Error": ""}
    # The extender's own prediction was GPU0 (slice order); the claim holds gpu-7. A plan for
    # GPU0 would have been held for the reservation TTL and shown as "reserved for pods just
    # bound here"; nothing is held, and the node is judged by its claims alone.
    assert held == {}
    assert "reserved for pods just bound here" not in str(four)


@contextlib.asynccontextmanager
async def running(every_node_empty: bool = False):
    """The four fragmented DRA nodes (free {3,4} | {2,3,4,5} | {0,1} | {4,5,6,7}), or four empty
    ones, and the extender watching them, annotating its plans."""
    async with running_kube_double() as double:
        if every_node_empty:
            for name in FRAGMENTED:
                double.store.create("nodes", dra_node(name))
                double.store.create("resourceslices", node_slice(name))
        else:
            seed_fragmented(double)
        async with kube_extender(double, dra_driver=DRIVER, annotate_plan=True) as k:
            await eventually(k.extender.ready, what="nodes, slices and claims listed")
            yield double, k


async def test_a_claim_the_watch_has_not_delivered_is_read_from_the_api():
    # kube-scheduler schedules a claim pod once its own informer has the claim the resourceclaim
    # controller made; the extender's claim watch may still be behind.
    async with running(every_node_empty=True) as (double, k):
        double.watch_delay["resourceclaims"] = 5.0  # longer than the test
        double.store.create("resourceclaims", gpu_claim("late-gpus", 2, True), "ml")
        pod = {**claim_pod(double, "late", "late-gpus"), "kind": "Pod", "apiVersion": "v1"}
        assert not watched(k.extender.dra, pod)
        body = await filter_pod(k, pod, ["dra-node-1"])
        _, scores = await k.client.post("prioritize", args_body(pod, names=["dra-node-1"]))
        _, missing = await k.client.post("filter", args_body(
            {**pod, "spec": {**pod["spec"], "resourceClaims": [{"name": "gpus", "resourceClaimName": "gone"}]}},
            names=["dra-node-1"]))
    assert body["NodeNames"] == ["dra-node-1"] and body["Error"] == ""
    assert scores[0]["Score"] > 0  # decided as a 2-GPU claim under its numaNode constraint
    assert missing["Error"] == ("Pod: ResourceClaim ml/gone not seen by the extender yet; "
                                "the API server answered HTTP 404 for it")
