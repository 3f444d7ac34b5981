"""NodeNames mode: the node cache fed by list+watch from the kube-apiserver double (a real HTTP
server): readiness, watch updates decoded once per change, bookmarks, 410 relist, backoff."""

from __future__ import annotations

from tests.extender_support import (
    recorded_for_double,
    args_body,
    eventually,
    kube_extender,
    pod_object,
    recorded,
    report_annotations,
)
from tests.kube_double import make_node, running_kube_double

SPLIT = {0, 4}
WHOLE = set(range(8))


def seed_nodes(double, **free_by_node) -> None:
    for name, free in free_by_node.items():
        annotations = report_annotations(free, node=name) if free is not None else {}
        double.store.create("nodes", make_node(name, annotations=annotations))


def names_body(names: list[str], gpus: int = 2) -> dict:
    body = recorded_for_double("cache-true-filter-01-gpu2.json")
    return {**args_body(pod_object(gpus), names=names), "Pod": body["Pod"] if gpus == 2 else pod_object(gpus)}


async def test_first_list_makes_ready_and_filter_reads_the_cache():
    async with running_kube_double() as double:
        seed_nodes(double, **{"gpu-node-a": SPLIT, "gpu-node-b": WHOLE, "gpu-node-c": None})
        async with kube_extender(double) as k:
            # Ready once the first node list and the first pod list are in (the pod watch
            # lists beside the node cache, and may come second).
            await eventually(lambda: k.extender.node_cache.ready and k.extender.pod_watch.listed, what="first lists")
            ready, _ = await k.client.get("/readyz")
            # The recorded body, as kube-scheduler sent it, offers gpu-node-a and gpu-node-b.
            status, body = await k.client.post("filter", recorded_for_double("cache-true-filter-01-gpu2.json"))
            _, more = await k.client.post("filter", names_body(["gpu-node-c", "ghost", "gpu-node-b"]))
    assert ready == 200 and status == 200
    assert body == {
        "Nodes": None,
        "NodeNames": ["gpu-node-b"],
        "FailedNodes": {"gpu-node-a": "need 2 GPUs on one NUMA node; free: NUMA0=1 NUMA1=1"},
        "FailedAndUnresolvableNodes": {},
        "Error": "",
    }
    assert more["NodeNames"] == ["gpu-node-b"]
    assert more["FailedNodes"]["gpu-node-c"] == "no gpupair report (gpupair.io/topology missing)"
    assert "not in the extender's node cache" in more["FailedNodes"]["ghost"]


async def test_watch_changes_reach_answers_and_are_decoded_once_per_change():
    async with running_kube_double() as double:
        seed_nodes(double, a=SPLIT)
        async with kube_extender(double) as k:
            cache = k.extender.node_cache
            await eventually(lambda: cache.ready)
            decodes = cache.decodes
            _, before = await k.client.post("filter", names_body(["a"]))
            double.store.patch("nodes", "a", {"metadata": {"annotations": report_annotations({0, 1, 4}, node="a", generation=2)}})
            await eventually(lambda: cache.decodes == decodes + 1, what="report change decoded")
            _, after = await k.client.post("filter", names_body(["a"]))
            # A change that leaves the report alone (labels, heartbeats) is not decoded again.
            double.store.patch("nodes", "a", {"metadata": {"labels": {"x": "y"}}})
            double.store.bookmark_all()
            await eventually(lambda: k.node_watch.resource_version == str(double.store.rv), what="bookmark")
            for _ in range(3):
                await k.client.post("filter", names_body(["a"]))
            assert cache.decodes == decodes + 1
    assert before["NodeNames"] == [] and after["NodeNames"] == ["a"]


async def test_node_added_and_deleted_while_watching():
    async with running_kube_double() as double:
        async with kube_extender(double) as k:
            cache = k.extender.node_cache
            await eventually(lambda: cache.ready)
            double.store.create("nodes", make_node("late", annotations=report_annotations(WHOLE, node="late")))
            await eventually(lambda: "late" in cache)
            _, added = await k.client.post("filter", names_body(["late"]))
            double.store.delete("nodes", "late")
            await eventually(lambda: "late" not in cache)
            _, deleted = await k.client.post("filter", names_body(["late"]))
    assert added["NodeNames"] == ["late"]
    assert deleted["NodeNames"] == [] and "not in the extender's node cache" in deleted["FailedNodes"]["late"]


async def test_410_gone_relists_and_catches_up_with_changes_missed():
    async with running_kube_double() as double:
        seed_nodes(double, a=SPLIT, b=WHOLE)
        async with kube_extender(double) as k:
            cache = k.extender.node_cache
            await eventually(lambda: cache.ready)
            assert k.node_watch.lists == 1
            await double.stop()  # the apiserver vanishes; changes happen meanwhile
            double.store.patch("nodes", "a", {"metadata": {"annotations": report_annotations(WHOLE, node="a", generation=2)}})
            double.store.delete("nodes", "b")
            double.store.compact()  # the resourceVersion the watch holds is gone
            await double.start()
            await eventually(lambda: k.node_watch.lists == 2, what="relist after 410")
            _, body = await k.client.post("filter", names_body(["a", "b"]))
            _, metrics = await k.client.get("/metrics")
    assert body["NodeNames"] == ["a"]
    assert "not in the extender's node cache" in body["FailedNodes"]["b"]
    assert 'gpupair_extender_watch_restarts_total{reason="gone",resource="nodes"}' in metrics


async def test_list_errors_back_off_then_recover():
    async with running_kube_double() as double:
        seed_nodes(double, a=WHOLE)
        double.fail_next("/api/v1/nodes", 500, times=2, method="GET", message="etcdserver: leader changed")
        async with kube_extender(double) as k:
            await eventually(lambda: k.extender.node_cache.ready, what="ready after errors")
            _, metrics = await k.client.get("/metrics")
            _, body = await k.client.post("filter", names_body(["a"]))
    assert 'gpupair_extender_watch_restarts_total{reason="error",resource="nodes"} 2.0' in metrics
    assert body["NodeNames"] == ["a"]


async def test_node_states_and_report_age_in_metrics():
    async with running_kube_double() as double:
        seed_nodes(double, a=WHOLE, b=None)
        double.store.create("nodes", make_node("c", annotations={"gpupair.io/topology": "{", "gpupair.io/free": "{}"}))
        async with kube_extender(double) as k:
            await eventually(lambda: k.extender.node_cache.ready)
            _, metrics = await k.client.get("/metrics")
    assert 'gpupair_extender_nodes{state="ok"} 1.0' in metrics
    assert 'gpupair_extender_nodes{state="missing"} 1.0' in metrics
    assert 'gpupair_extender_nodes{state="invalid"} 1.0' in metrics
    assert 'gpupair_extender_report_age_seconds{stat="max"} 0.0' in metrics  # clock fixed at the report time


async def test_cached_report_turns_stale_with_time_and_fresh_again_with_a_new_report():
    from tests.extender_support import NOW, later

    clock = [NOW.timestamp()]
    async with running_kube_double() as double:
        seed_nodes(double, a=WHOLE)
        async with kube_extender(double, clock=lambda: clock[0]) as k:
            await eventually(lambda: k.extender.node_cache.ready)
            _, fresh = await k.client.post("filter", names_body(["a"]))
            clock[0] = later(301).timestamp()  # --stale-after 300, no new report
            _, stale = await k.client.post("filter", names_body(["a"]))
            _, one_gpu = await k.client.post("filter", names_body(["a"], gpus=1))
            double.store.patch("nodes", "a", {"metadata": {"annotations": report_annotations(
                WHOLE, node="a", generation=2, reported_at=later(300))}})
            await eventually(lambda: k.extender.node_cache.get("a").report.generation == 2)
            _, renewed = await k.client.post("filter", names_body(["a"]))
    assert fresh["NodeNames"] == ["a"]
    assert stale["NodeNames"] == [] and "is older than 300s" in stale["FailedNodes"]["a"]
    assert one_gpu["NodeNames"] == ["a"]
    assert renewed["NodeNames"] == ["a"]


def test_reports_arriving_while_no_request_comes_do_not_pile_up():
    """Reporters write a heartbeat every 30 s; with no filter or prioritize call for hours, the
    tables' staleness queue must hold only reports not yet stale, not every one ever seen."""
    from datetime import timedelta

    from tests.extender_support import NOW, make_extender

    now = [NOW.timestamp()]
    extender = make_extender(node_cache=True, stale_after=300.0, clock=lambda: now[0])
    cache, tables = extender.node_cache, extender.evaluator.tables
    cache.replace([])
    tables.table(2, now[0])  # a table exists, as after the first request
    for beat in range(240):  # two hours of 30 s heartbeats, no request
        now[0] = NOW.timestamp() + 30 * beat
        reported = (NOW + timedelta(seconds=30 * beat)).replace(microsecond=0)
        cache.apply("MODIFIED", {"metadata": {"name": "gpu-node-a", "annotations": report_annotations(
            {0, 1}, node="a", generation=beat + 1, reported_at=reported)}})
    assert len(tables._stale_heap) <= 300 // 30 + 1
    assert tables.table(2, now[0]).passing == {"gpu-node-a"}
