"""The bind verb against the kube-apiserver double: Binding creation, the planned set on the
pod, rollback and Events when the Binding fails or the API server is gone."""

from __future__ import annotations

import json

from tests.extender_support import (
    host_scores,
    recorded_for_double,
    args_body,
    eventually,
    kube_extender,
    make_extender,
    pod_object,
    recorded,
    report_annotations,
    serving,
)
from tests.kube_double import make_node, running_kube_double

UID = "5fd8153a-1b23-448d-8a4b-c930ac341648"
BINDING_PATH = "/api/v1/namespaces/gpupair-test/pods/gpu2/binding"


def create_pod(double, gpus: int = 2, *, name: str = "gpu2", uid: str = UID) -> dict:
    pod = pod_object(gpus, name=name, uid=uid)
    for key in ("resourceVersion", "creationTimestamp", "generation"):
        pod["metadata"].pop(key, None)
    return double.store.create("pods", pod, "gpupair-test")


def bind_body(name: str = "gpu2", uid: str = UID, node: str = "gpu-node-a") -> dict:
    return {"PodName": name, "PodNamespace": "gpupair-test", "PodUID": uid, "Node": node}


async def ready(k) -> None:
    await eventually(lambda: k.extender.node_cache.ready and k.pod_watch.lists >= 1, what="caches synced")


async def test_recorded_bind_creates_the_binding_and_reserves_the_plan():
    async with running_kube_double() as double:
        double.store.create("nodes", make_node("gpu-node-a", annotations=report_annotations({0, 1, 4}, node="a")))
        double.store.create("nodes", make_node("gpu-node-b", annotations=report_annotations({0, 4}, node="b")))
        create_pod(double)
        async with kube_extender(double) as k:
            await ready(k)
            await k.client.post("filter", recorded_for_double("cache-true-filter-01-gpu2.json"))
            status, answer = await k.client.post("bind", recorded("bind-cache-true-01-gpu2.json"))
            held = k.extender.reservations.get(UID)
    assert (status, answer) == (200, {"Error": ""})
    assert double.store.pod("gpupair-test", "gpu2")["spec"]["nodeName"] == "gpu-node-a"
    sent = double.requests_to(BINDING_PATH, "POST")[0].json()
    assert sent["target"] == {"apiVersion": "v1", "kind": "Node", "name": "gpu-node-a"}
    assert sent["metadata"]["uid"] == UID and "annotations" not in sent["metadata"]
    assert held is not None and held.node == "gpu-node-a" and held.devices == {0, 1}


async def test_annotate_plan_puts_the_planned_set_on_the_pod_with_the_binding():
    async with running_kube_double() as double:
        double.store.create("nodes", make_node("gpu-node-a", annotations=report_annotations({2, 3, 5, 6, 7}, node="a")))
        create_pod(double)
        async with kube_extender(double, annotate_plan=True) as k:
            await ready(k)
            await k.client.post("filter", args_body(pod_object(2), names=["gpu-node-a"]))
            status, answer = await k.client.post("bind", bind_body())
    assert (status, answer) == (200, {"Error": ""})
    pod = double.store.pod("gpupair-test", "gpu2")
    # The best-effort policy pairs within NUMA nodes and hands out the first best pair.
    assert pod["metadata"]["annotations"]["gpupair.io/planned"] == "GPU2+GPU3"
    assert len(double.requests_to(BINDING_PATH, "POST")) == 1
    assert not [r for r in double.requests if r.method == "PATCH"]  # no second request


async def test_bind_without_a_prior_filter_plans_from_the_pod_watch():
    """Another replica filtered the pod: its GPU request comes from this replica's pod watch."""
    async with running_kube_double() as double:
        double.store.create("nodes", make_node("gpu-node-a", annotations=report_annotations({0, 1, 4, 5}, node="a")))
        create_pod(double, gpus=2)
        async with kube_extender(double) as k:
            await ready(k)
            status, answer = await k.client.post("bind", bind_body())
            held = k.extender.reservations.get(UID)
    assert (status, answer) == (200, {"Error": ""})
    assert not double.requests_to("/api/v1/namespaces/gpupair-test/pods/gpu2", "GET")
    assert held is not None and len(held.devices) == 2


async def test_bind_reads_the_pod_when_nothing_else_knows_its_request():
    from tests.extender_support import make_extender, node_object, serving
    from tests.kube_double import kube_client_for

    async with running_kube_double() as double:
        create_pod(double, gpus=2)
        async with kube_client_for(double) as api:
            extender = make_extender(api=api)  # Nodes mode, no watches running
            node = node_object("gpu-node-a", report_annotations({0, 1, 4, 5}, node="a"))
            async with serving(extender) as client:
                # Another pod's filter shows the node's report; nothing is known about gpu2.
                await client.post("filter", args_body(pod_object(1, uid="someone-else"), nodes=[node]))
                status, answer = await client.post("bind", bind_body())
            held = extender.reservations.get(UID)
    assert (status, answer) == (200, {"Error": ""})
    assert double.requests_to("/api/v1/namespaces/gpupair-test/pods/gpu2", "GET")
    assert held is not None and len(held.devices) == 2


async def test_api_server_vanished_during_bind_fills_error_and_rolls_back():
    async with running_kube_double() as double:
        double.store.create("nodes", make_node("gpu-node-a", annotations=report_annotations({0, 1, 4}, node="a")))
        create_pod(double)
        async with kube_extender(double) as k:
            await ready(k)
            await k.client.post("filter", args_body(pod_object(2), names=["gpu-node-a"]))
            await double.stop()
            status, answer = await k.client.post("bind", bind_body())
            reservations = len(k.extender.reservations)
            await k.extender.binder.drain()  # the Event attempt fails too, without hanging
            await double.start()
            # Nothing is held back: the pair is still offered to the next pod.
            _, after = await k.client.post("filter", args_body(pod_object(2, uid="other"), names=["gpu-node-a"]))
    assert status == 200
    assert answer["Error"].startswith("binding pod gpupair-test/gpu2 to gpu-node-a failed")
    assert reservations == 0
    assert after["NodeNames"] == ["gpu-node-a"]
    assert double.store.pod("gpupair-test", "gpu2")["spec"].get("nodeName") is None


async def test_refused_binding_rolls_back_and_leaves_an_event_on_the_pod():
    async with running_kube_double() as double:
        double.store.create("nodes", make_node("gpu-node-a", annotations=report_annotations({0, 1, 4}, node="a")))
        create_pod(double)
        double.fail_next(BINDING_PATH, 500, method="POST", message="etcdserver: request timed out")
        async with kube_extender(double) as k:
            await ready(k)
            await k.client.post("filter", args_body(pod_object(2), names=["gpu-node-a"]))
            status, answer = await k.client.post("bind", bind_body())
            await k.extender.binder.drain()
            reservations = len(k.extender.reservations)
            _, metrics = await k.client.get("/metrics")
    assert status == 200 and "HTTP 500: etcdserver: request timed out" in answer["Error"]
    assert reservations == 0
    events = double.store.items("events", "gpupair-test")
    assert len(events) == 1
    event = events[0]
    assert event["type"] == "Warning" and event["reason"] == "FailedBinding"
    assert event["regarding"]["name"] == "gpu2" and event["regarding"]["uid"] == UID
    assert "etcdserver: request timed out" in event["note"]
    assert 'gpupair_extender_decisions_total{outcome="failed",verb="bind"} 1.0' in metrics


async def test_binding_a_pod_that_is_gone_is_an_error_not_a_crash():
    async with running_kube_double() as double:
        double.store.create("nodes", make_node("gpu-node-a", annotations=report_annotations({0, 1}, node="a")))
        async with kube_extender(double) as k:
            await ready(k)
            await k.client.post("filter", args_body(pod_object(2), names=["gpu-node-a"]))
            status, answer = await k.client.post("bind", bind_body())
    assert status == 200 and "HTTP 404" in answer["Error"] and 'pods "gpu2" not found' in answer["Error"]


async def test_bind_answers_its_error_shape_without_api_access():
    from tests.extender_support import make_extender, serving

    async with serving(make_extender()) as client:
        status, answer = await client.post("bind", json.dumps(bind_body()))
    assert status == 200 and "no Kubernetes API access" in answer["Error"]


async def test_prioritize_reuses_its_filters_decisions_only_while_nothing_changed():
    """The decisions filter takes afresh (nodes holding reservations) serve the same pod's
    prioritize; a bind or a report between the two is seen, never answered from before it."""
    async with running_kube_double() as double:
        double.store.create("nodes", make_node("gpu-node-a", annotations=report_annotations(set(range(8)), node="a")))
        double.store.create("nodes", make_node("gpu-node-b", annotations=report_annotations(set(range(8)), node="b")))
        for index in range(4):
            create_pod(double, gpus=4 if index else 2, name=f"p{index}", uid=f"uid-{index}")
        asker = args_body(pod_object(2, name="p0", uid="uid-0"), names=["gpu-node-a", "gpu-node-b"])

        async def scores(k) -> dict[str, int]:
            _, answer = await k.client.post("prioritize", asker)
            return host_scores(answer, ["gpu-node-a", "gpu-node-b"])

        async with kube_extender(double) as k:
            await ready(k)
            for index, node in ((1, "gpu-node-a"), (2, "gpu-node-b")):  # a hold on each node
                await k.client.post("filter", args_body(pod_object(4, name=f"p{index}", uid=f"uid-{index}"),
                                                        names=[node]))
                assert (await k.client.post("bind", bind_body(f"p{index}", f"uid-{index}", node)))[1] == {"Error": ""}
            _, passed = await k.client.post("filter", asker)
            before = await scores(k)
            # Between p0's filter and its prioritize, p3 takes gpu-node-a's other NUMA node ...
            await k.client.post("filter", asker)
            await k.client.post("filter", args_body(pod_object(4, name="p3", uid="uid-3"), names=["gpu-node-a"]))
            assert (await k.client.post("bind", bind_body("p3", "uid-3", "gpu-node-a")))[1] == {"Error": ""}
            after_bind = await scores(k)
            # ... and gpu-node-b's report stops being usable.
            await k.client.post("filter", asker)
            double.store.patch("nodes", "gpu-node-b", {"metadata": {"annotations": {"gpupair.io/topology": None}}})
            await eventually(lambda: k.extender.node_cache.get("gpu-node-b").report is None, what="report gone")
            after_report = await scores(k)
    assert sorted(passed["NodeNames"]) == ["gpu-node-a", "gpu-node-b"]
    assert before["gpu-node-a"] > 0 and before["gpu-node-b"] > 0
    assert after_bind == {"gpu-node-a": 0, "gpu-node-b": before["gpu-node-b"]}
    assert after_report == {"gpu-node-a": 0, "gpu-node-b": 0}


async def test_behind_a_proxy_the_binding_goes_through_it(tmp_path, monkeypatch):
    """HTTP_PROXY names a proxy for the API server: the Binding takes the API client's session,
    which sends it there, not the extender's own Binding connections (which speak no proxy)."""
    from gpupair.kubeclient import kube

    async with running_kube_double() as proxy:  # a plain-HTTP proxy gets absolute-form requests
        proxy.store.create("nodes", make_node("gpu-node-a", annotations=report_annotations({0, 1, 4}, node="a")))
        create_pod(proxy)
        for name in ("HTTP_PROXY", "http_proxy", "NO_PROXY", "no_proxy", "HTTPS_PROXY", "https_proxy"):
            monkeypatch.delenv(name, raising=False)
        monkeypatch.setenv("HTTP_PROXY", proxy.url)
        config = tmp_path / "kubeconfig"
        config.write_text(json.dumps({
            "apiVersion": "v1", "kind": "Config", "current-context": "c",
            "clusters": [{"name": "c", "cluster": {"server": "http://apiserver.invalid:6443"}}],
            "users": [{"name": "u", "user": {"token": "t"}}],
            "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
        }))
        api = await kube.api_client(str(config))
        try:
            extender = make_extender(api=api, node_cache=True)
            extender.node_cache.replace(proxy.store.items("nodes"))
            async with serving(extender) as client:
                await client.post("filter", args_body(pod_object(2), names=["gpu-node-a"]))
                status, answer = await client.post("bind", bind_body())
        finally:
            await api.close()
    assert (status, answer) == (200, {"Error": ""})
    assert proxy.store.pod("gpupair-test", "gpu2")["spec"]["nodeName"] == "gpu-node-a"
    assert len(proxy.requests_to(BINDING_PATH, "POST")) == 1
