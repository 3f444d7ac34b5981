"""Reservations driven by the pod watch (kube-apiserver double): pods bound without the
extender's bind verb, pods that finish, pods deleted while the watch was down; and Nodes
mode, where the request's own reports release reservations."""

from __future__ import annotations

from extender.reservations import Reservation
from tests.extender_support import (
    args_body,
    eventually,
    kube_extender,
    make_extender,
    node_object,
    pod_object,
    report_annotations,
    serving,
)
from tests.kube_double import make_node, make_pod, running_kube_double

ONE_PAIR = {0, 1, 4}


async def synced(k) -> None:
    await eventually(lambda: k.extender.node_cache.ready and k.pod_watch.lists >= 1)


async def test_pod_bound_by_another_binder_reserves_its_plan_and_releases_when_it_finishes():
    async with running_kube_double() as double:
        double.store.create("nodes", make_node("gpu-node-a", annotations=report_annotations(ONE_PAIR, node="a")))
        async with kube_extender(double) as k:
            await synced(k)
            created = double.store.create("pods", make_pod("trainer", "ml", gpus=2), "ml")
            uid = created["metadata"]["uid"]
            # Bound by the default binder (kube-scheduler without the bind verb).
            double.store.patch("pods", "trainer", {"spec": {"nodeName": "gpu-node-a"}}, "ml")
            await eventually(lambda: k.extender.reservations.get(uid) is not None, what="reservation")
            held = k.extender.reservations.get(uid)
            _, refused = await k.client.post("filter", args_body(pod_object(2, uid="next"), names=["gpu-node-a"]))
            double.store.patch("pods", "trainer", {"status": {"phase": "Succeeded"}}, "ml")
            await eventually(lambda: k.extender.reservations.get(uid) is None, what="release on finish")
    assert held.node == "gpu-node-a" and held.devices == {0, 1}
    assert refused["NodeNames"] == []


async def test_pods_already_bound_at_the_first_list_reserve_nothing():
    async with running_kube_double() as double:
        double.store.create("nodes", make_node("gpu-node-a", annotations=report_annotations(ONE_PAIR, node="a")))
        double.store.create("pods", make_pod("old", "ml", gpus=2, node_name="gpu-node-a"), "ml")
        async with kube_extender(double) as k:
            await synced(k)
            double.store.bookmark_all()
            await eventually(lambda: k.pod_watch.resource_version == str(double.store.rv))
            assert len(k.extender.reservations) == 0


async def test_pods_asking_no_gpu_are_ignored():
    async with running_kube_double() as double:
        double.store.create("nodes", make_node("gpu-node-a", annotations=report_annotations(ONE_PAIR, node="a")))
        async with kube_extender(double) as k:
            await synced(k)
            double.store.create("pods", make_pod("web", "ml", gpus=0), "ml")
            double.store.patch("pods", "web", {"spec": {"nodeName": "gpu-node-a"}}, "ml")
            double.store.bookmark_all()
            await eventually(lambda: k.pod_watch.resource_version == str(double.store.rv))
            assert len(k.extender.reservations) == 0


async def test_deletion_missed_while_the_watch_was_down_is_caught_by_the_relist():
    async with running_kube_double() as double:
        double.store.create("nodes", make_node("gpu-node-a", annotations=report_annotations(ONE_PAIR, node="a")))
        created = double.store.create("pods", make_pod("p", "ml", gpus=2), "ml")
        uid = created["metadata"]["uid"]
        async with kube_extender(double) as k:
            await synced(k)
            _, answer = await k.client.post("bind", {"PodName": "p", "PodNamespace": "ml", "PodUID": uid, "Node": "gpu-node-a"})
            assert answer == {"Error": ""} and k.extender.reservations.get(uid) is not None
            await double.stop()
            double.store.delete("pods", "p", "ml")
            double.store.compact()
            await double.start()
            await eventually(lambda: k.pod_watch.lists == 2, what="pod relist")
            assert k.extender.reservations.get(uid) is None


async def test_nodes_mode_requests_release_reservations_their_reports_show_taken():
    extender = make_extender()
    extender.reservations.reserve(Reservation("a", "gpu-node-a", frozenset({0, 1})))
    taken = node_object("gpu-node-a", report_annotations({4}, node="a", generation=2))
    async with serving(extender) as client:
        await client.post("filter", args_body(pod_object(1), nodes=[taken]))
    assert len(extender.reservations) == 0
