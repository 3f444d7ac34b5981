"""The race from the field report's test: two 2-GPU pods scheduled back to back onto a node
with exactly one free same-NUMA pair. Only one may be promised the pair; the other gets the
node once the reservation is released (pod deleted, or a report shows the devices taken).
Everything runs over real sockets: kube-scheduler's calls to the extender, the extender's
list+watch and Bindings against the kube-apiserver double."""

from __future__ import annotations

from tests.extender_support import args_body, eventually, kube_extender, make_extender, pod_object, report_annotations
from tests.kube_double import make_node, running_kube_double

ONE_PAIR = {0, 1, 4}  # NUMA0: GPU0+GPU1 free; NUMA1: GPU4 alone
A_UID, B_UID = "uid-pod-a", "uid-pod-b"


def setup(double) -> None:
    double.store.create("nodes", make_node("gpu-node-a", annotations=report_annotations(ONE_PAIR, node="a")))
    double.store.create("nodes", make_node("gpu-node-b", annotations=report_annotations({0, 4}, node="b")))
    for name, uid in (("pod-a", A_UID), ("pod-b", B_UID)):
        double.store.create("pods", pod_object(2, name=name, uid=uid), "gpupair-test")


def pod(name: str, uid: str) -> dict:
    return pod_object(2, name=name, uid=uid)


def bind(name: str, uid: str) -> dict:
    return {"PodName": name, "PodNamespace": "gpupair-test", "PodUID": uid, "Node": "gpu-node-a"}


NAMES = ["gpu-node-b", "gpu-node-a"]


async def synced(k) -> None:
    await eventually(lambda: k.extender.node_cache.ready and k.pod_watch.lists >= 1)


async def schedule_a(k) -> None:
    _, filtered = await k.client.post("filter", args_body(pod("pod-a", A_UID), names=NAMES))
    assert filtered["NodeNames"] == ["gpu-node-a"]
    _, answer = await k.client.post("bind", bind("pod-a", A_UID))
    assert answer == {"Error": ""}


async def test_second_pod_is_refused_while_the_pair_is_reserved_and_gets_it_after_deletion():
    async with running_kube_double() as double:
        setup(double)
        async with kube_extender(double) as k:
            await synced(k)
            await schedule_a(k)
            _, refused = await k.client.post("filter", args_body(pod("pod-b", B_UID), names=NAMES))
            _, scores = await k.client.post("prioritize", args_body(pod("pod-b", B_UID), names=NAMES))
            double.store.delete("pods", "pod-a", "gpupair-test")
            await eventually(lambda: len(k.extender.reservations) == 0, what="release on deletion")
            _, allowed = await k.client.post("filter", args_body(pod("pod-b", B_UID), names=NAMES))
            _, bound = await k.client.post("bind", bind("pod-b", B_UID))
    assert refused["NodeNames"] == []
    assert refused["FailedNodes"]["gpu-node-a"] == (
        "need 2 GPUs on one NUMA node; free: NUMA0=0 NUMA1=1 (2 GPUs reserved for pods just bound here)")
    assert scores == []  # neither node takes pod-b now: 0 on both, none listed
    assert allowed["NodeNames"] == ["gpu-node-a"] and bound == {"Error": ""}
    assert double.store.pod("gpupair-test", "pod-b")["spec"]["nodeName"] == "gpu-node-a"


async def test_report_showing_the_devices_taken_releases_the_reservation():
    async with running_kube_double() as double:
        setup(double)
        async with kube_extender(double) as k:
            await synced(k)
            await schedule_a(k)
            # The device plugin gave pod-a GPU0+GPU1; the reporter says so.
            double.store.patch("nodes", "gpu-node-a", {"metadata": {"annotations": report_annotations({4}, node="a", generation=2)}})
            await eventually(lambda: len(k.extender.reservations) == 0, what="release on report")
            _, while_running = await k.client.post("filter", args_body(pod("pod-b", B_UID), names=NAMES))
            # pod-a finishes; its pair is free again in the next report.
            double.store.patch("nodes", "gpu-node-a", {"metadata": {"annotations": report_annotations(ONE_PAIR, node="a", generation=3)}})
            await eventually(lambda: k.extender.node_cache.get("gpu-node-a").report.generation == 3)
            _, after = await k.client.post("filter", args_body(pod("pod-b", B_UID), names=NAMES))
    # Refused by the report alone now, and the reason no longer mentions a reservation.
    assert while_running["FailedNodes"]["gpu-node-a"] == "need 2 GPUs on one NUMA node; free: NUMA0=0 NUMA1=1"
    assert after["NodeNames"] == ["gpu-node-a"]


async def test_both_filtered_before_either_bind_the_second_bind_is_refused():
    """kube-scheduler binds asynchronously: pod-b can be filtered before pod-a's bind arrives.
    The bind verb's check-and-reserve is what keeps the pair for one pod."""
    async with running_kube_double() as double:
        setup(double)
        async with kube_extender(double) as k:
            await synced(k)
            _, fa = await k.client.post("filter", args_body(pod("pod-a", A_UID), names=NAMES))
            _, fb = await k.client.post("filter", args_body(pod("pod-b", B_UID), names=NAMES))
            _, ba = await k.client.post("bind", bind("pod-a", A_UID))
            _, bb = await k.client.post("bind", bind("pod-b", B_UID))
            await k.extender.binder.drain()
    assert fa["NodeNames"] == fb["NodeNames"] == ["gpu-node-a"]
    assert ba == {"Error": ""}
    assert bb["Error"].startswith("node gpu-node-a can no longer take this pod: need 2 GPUs on one NUMA node")
    assert double.store.pod("gpupair-test", "pod-b")["spec"].get("nodeName") is None
    assert not double.requests_to("/api/v1/namespaces/gpupair-test/pods/pod-b/binding")
    assert [e["reason"] for e in double.store.items("events", "gpupair-test")] == ["FailedBinding"]


async def test_concurrent_binds_promise_the_pair_once():
    import asyncio

    async with running_kube_double() as double:
        setup(double)
        async with kube_extender(double) as k:
            await synced(k)
            for name, uid in (("pod-a", A_UID), ("pod-b", B_UID)):
                await k.client.post("filter", args_body(pod(name, uid), names=NAMES))
            answers = await asyncio.gather(k.client.post("bind", bind("pod-a", A_UID)),
                                           k.client.post("bind", bind("pod-b", B_UID)))
            await k.extender.binder.drain()
    errors = sorted(bool(body["Error"]) for _, body in answers)
    assert errors == [False, True]
    bound = [p["metadata"]["name"] for p in double.store.items("pods", "gpupair-test") if p["spec"].get("nodeName")]
    assert len(bound) == 1


async def test_a_plan_the_plugin_did_not_follow_expires_with_the_ttl():
    """Nodes mode, no watch: the reservation's TTL frees the node if no report ever shows the
    planned devices taken."""
    now = [0.0]
    extender = make_extender(reservation_ttl=60.0, reservation_timer=lambda: now[0])
    from gpupair.decide.judge.reservations import Reservation
    from tests.extender_support import node_object, serving

    node = node_object("gpu-node-a", report_annotations(ONE_PAIR, node="a"))
    extender.reservations.reserve(Reservation(A_UID, "gpu-node-a", frozenset({0, 1})))
    async with serving(extender) as client:
        _, held = await client.post("filter", args_body(pod("pod-b", B_UID), nodes=[node]))
        now[0] = 61.0
        _, expired = await client.post("filter", args_body(pod("pod-b", B_UID), nodes=[node]))
    assert held["Nodes"]["items"] == [] and [n["metadata"]["name"] for n in expired["Nodes"]["items"]] == ["gpu-node-a"]
