"""Holds driven by the pod watch and ended by the ledger (kube-apiserver double): pods bound
without the extender's bind verb, pods bound before a restart, pods that finish, pods deleted
while the watch was down, nodes whose reporter predates the ledger; and Nodes mode, where the
request's own reports end holds."""

from __future__ import annotations

from gpupair.decide.judge.reservations import Hold, Reservation
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

ONE_PAIR = {0, 1, 4}  # GPU0+1 the only same-NUMA pair; 2, 3, 5, 6, 7 held by others
OTHERS = {("infra", "a"): {2}, ("infra", "b"): {3}, ("infra", "c"): {5, 6, 7}}


def node_a(free=ONE_PAIR, ledger=OTHERS, generation=1):
    return make_node("gpu-node-a", annotations=report_annotations(free, node="a", ledger=ledger, generation=generation))


async def synced(k) -> None:
    await eventually(lambda: k.extender.ready())


async def test_pod_bound_by_another_binder_holds_its_count_until_the_ledger_lists_it():
    async with running_kube_double() as double:
        double.store.create("nodes", node_a())
        async with kube_extender(double) as k:
            await synced(k)
            created = double.store.create("pods", make_pod("trainer", "ml", gpus=2), "ml")
            uid = created["metadata"]["uid"]
            # Bound by the default binder (kube-scheduler without the bind verb).
            double.store.patch("pods", "trainer", {"spec": {"nodeName": "gpu-node-a"}}, "ml")
            await eventually(lambda: k.extender.reservations.hold("gpu-node-a") == Hold(count=2), what="hold")
            _, refused = await k.client.post("filter", args_body(pod_object(2, uid="next"), names=["gpu-node-a"]))
            # The plugin gave it GPU0 and GPU4 (a SYS pair: not the extender's business here);
            # the next report lists it, and GPU1 is all that is free.
            double.store.patch("nodes", "gpu-node-a", node_a(
                free={1}, ledger={**OTHERS, ("ml", "trainer"): {0, 4}}, generation=2))
            await eventually(lambda: not k.extender.reservations.hold("gpu-node-a"), what="hold ended by the report")
            _, one = await k.client.post("filter", args_body(pod_object(1, uid="one"), names=["gpu-node-a"]))
    assert refused["NodeNames"] == [] and "2 GPUs reserved" in refused["FailedNodes"]["gpu-node-a"]
    assert one["NodeNames"] == ["gpu-node-a"]


async def test_pods_bound_before_a_restart_are_held_unless_the_ledger_lists_them():
    async with running_kube_double() as double:
        double.store.create("nodes", node_a(ledger={**OTHERS}))
        double.store.create("pods", make_pod("running", "infra", gpus=1, node_name="gpu-node-a"), "infra")
        double.store.create("pods", make_pod("b", "infra", gpus=1, node_name="gpu-node-a"), "infra")
        fresh = double.store.create("pods", make_pod("fresh", "ml", gpus=1, node_name="gpu-node-a"), "ml")
        async with kube_extender(double) as k:
            await synced(k)
            # infra/b is in the ledger; infra/running is not (it holds no GPU yet), nor ml/fresh.
            assert k.extender.reservations.hold("gpu-node-a") == Hold(count=2)
            double.store.delete("pods", "fresh", "ml")
            await eventually(lambda: k.extender.reservations.hold("gpu-node-a") == Hold(count=1))
    assert fresh["metadata"]["uid"]


async def test_a_node_whose_reporter_predates_the_ledger_holds_nothing_for_pods_bound_elsewhere():
    async with running_kube_double() as double:
        double.store.create("nodes", node_a(ledger=None))
        async with kube_extender(double) as k:
            await synced(k)
            double.store.create("pods", make_pod("pinned", "ml", gpus=2, node_name="gpu-node-a"), "ml")
            double.store.bookmark_all()
            await eventually(lambda: k.pod_watch.resource_version == str(double.store.rv))
            _, answer = await k.client.post("filter", args_body(pod_object(2, uid="next"), names=["gpu-node-a"]))
    assert len(k.extender.reservations) == 0
    assert answer["NodeNames"] == ["gpu-node-a"]


async def test_pods_asking_no_gpu_are_ignored():
    async with running_kube_double() as double:
        double.store.create("nodes", node_a())
        async with kube_extender(double) as k:
            await synced(k)
            double.store.create("pods", make_pod("web", "ml", gpus=0), "ml")
            double.store.patch("pods", "web", {"spec": {"nodeName": "gpu-node-a"}}, "ml")
            double.store.bookmark_all()
            await eventually(lambda: k.pod_watch.resource_version == str(double.store.rv))
            assert len(k.extender.reservations) == 0


async def test_deletion_missed_while_the_watch_was_down_is_caught_by_the_relist():
    async with running_kube_double() as double:
        double.store.create("nodes", node_a())
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
            assert not k.extender.reservations.hold("gpu-node-a")
    released = k.extender.metrics.registry.get_sample_value(
        "gpupair_extender_reservation_outcomes_total", {"outcome": "released"})
    assert released == 1


async def test_nodes_mode_requests_end_holds_their_reports_list():
    extender = make_extender()
    extender.reservations.reserve(Reservation("a", "gpu-node-a", frozenset({0, 1}), "ml", "p"))
    listed = node_object("gpu-node-a", report_annotations({4}, node="a", generation=2, ledger={("ml", "p"): {2, 3}}))
    async with serving(extender) as client:
        await client.post("filter", args_body(pod_object(1), nodes=[listed]))
    assert len(extender.reservations) == 0
    assert extender.metrics.registry.get_sample_value(
        "gpupair_extender_reservation_outcomes_total", {"outcome": "deviated"}) == 1
    assert extender.metrics.registry.get_sample_value("gpupair_extender_plan_follow_ratio") == 0.0


async def pod_watch_lagging(k, double, seconds: float) -> None:
    """The pod watch's stream open, then each pod event delayed by ``seconds`` (a stream opened
    later would replay the history at once)."""
    await synced(k)
    await eventually(lambda: any(w.selector.resource == "pods" for w in double.store.watchers), what="pod watch")
    double.watch_delay["pods"] = seconds


def _waits(k, outcome: str) -> float:
    return k.extender.metrics.registry.get_sample_value("gpupair_extender_pod_watch_waits_total", {"outcome": outcome})


async def test_filter_waits_until_the_pod_watch_has_read_the_pod_it_is_asked_about():
    """kube-scheduler's informer can be ahead of the extender's pod watch: a pod pinned to the
    node just before the scheduled one is counted by the scheduler and, unless filter waits for
    the watch to read the scheduled pod's resourceVersion, not held here (a pair promised twice)."""
    async with running_kube_double() as double:
        double.store.create("nodes", node_a())
        async with kube_extender(double) as k:
            await pod_watch_lagging(k, double, 0.3)
            double.store.create("pods", make_pod("pinned", "infra", gpus=1, node_name="gpu-node-a"), "infra")
            pod = double.store.create("pods", make_pod("next", "ml", gpus=2), "ml")
            unseen = k.extender.reservations.hold("gpu-node-a")
            _, answer = await k.client.post("filter", args_body(pod, names=["gpu-node-a"]))
            held = k.extender.reservations.hold("gpu-node-a")
            waits = _waits(k, "caught_up"), _waits(k, "timed_out")
    assert not unseen, "the double's watch delay did not put the pod watch behind"
    assert held == Hold(count=1)
    # GPU0+1 was the one same-NUMA pair; the pinned pod may have taken either.
    assert answer["NodeNames"] == [] and "1 GPU reserved" in answer["FailedNodes"]["gpu-node-a"], answer
    assert waits == (1.0, 0.0)


async def test_a_pod_watch_too_far_behind_is_not_waited_for_beyond_the_limit():
    async with running_kube_double() as double:
        double.store.create("nodes", node_a())
        async with kube_extender(double, pod_watch_wait=0.05) as k:
            await pod_watch_lagging(k, double, 1.0)
            double.store.create("pods", make_pod("pinned", "infra", gpus=1, node_name="gpu-node-a"), "infra")
            pod = double.store.create("pods", make_pod("next", "ml", gpus=2), "ml")
            status, answer = await k.client.post("filter", args_body(pod, names=["gpu-node-a"]))
            waits = _waits(k, "caught_up"), _waits(k, "timed_out")
    # Decided on what the watch had read: the pinned pod was not in it yet.
    assert status == 200 and answer["NodeNames"] == ["gpu-node-a"] and answer["Error"] == "", answer
    assert waits == (0.0, 1.0)


async def test_a_pod_without_a_comparable_resource_version_is_decided_at_once():
    async with running_kube_double() as double:
        double.store.create("nodes", node_a())
        async with kube_extender(double) as k:
            await synced(k)
            for version in ("", "abc", "-3", None):
                pod = pod_object(2, uid=f"v-{version}")
                if version is not None:
                    pod["metadata"]["resourceVersion"] = version
                status, answer = await k.client.post("filter", args_body(pod, names=["gpu-node-a"]))
                assert status == 200 and answer["NodeNames"] == ["gpu-node-a"], (version, answer)
            assert _waits(k, "caught_up") == _waits(k, "timed_out") == 0.0
