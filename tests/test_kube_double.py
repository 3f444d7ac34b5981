"""The kube-apiserver double, driven by the real kubernetes-asyncio client over loopback."""

from __future__ import annotations

import asyncio
import json

import aiohttp
import pytest
from kubernetes_asyncio import client as k8s
from kubernetes_asyncio import watch as k8s_watch
from kubernetes_asyncio.client.exceptions import ApiException

from tests.kube_double import Store, kube_client_for, make_node, make_pod, running_kube_double


async def next_event(stream, timeout: float = 5.0) -> dict:
    return await asyncio.wait_for(stream.__anext__(), timeout)


async def raw_watch_lines(url: str, count: int) -> list[dict]:
    """Read ``count`` events of a watch without any client-side interpretation."""
    async with aiohttp.ClientSession() as session, session.get(url) as resp:
        assert resp.status == 200
        return [json.loads(await asyncio.wait_for(resp.content.readline(), 5)) for _ in range(count)]


async def test_list_nodes_carries_resource_version_and_bare_items():
    async with running_kube_double() as double:
        double.store.create("nodes", make_node("gpu-a"))
        double.store.create("nodes", make_node("gpu-b"))
        async with kube_client_for(double) as api:
            nodes = await k8s.CoreV1Api(api).list_node()
        assert [n.metadata.name for n in nodes.items] == ["gpu-a", "gpu-b"]
        assert nodes.metadata.resource_version == str(double.store.rv)
        assert int(nodes.items[1].metadata.resource_version) > int(nodes.items[0].metadata.resource_version)
        assert nodes.items[0].status.allocatable == {"nvidia.com/gpu": "8"}
        listed = double.requests_to("/api/v1/nodes")[0]
        assert listed.method == "GET"
        async with aiohttp.ClientSession() as session, session.get(double.url + "/api/v1/nodes") as resp:
            raw = await resp.json()
        assert raw["kind"] == "NodeList" and "kind" not in raw["items"][0]  # like the real apiserver


async def test_watch_resumes_after_resource_version_and_sends_bookmarks():
    async with running_kube_double() as double:
        double.store.create("nodes", make_node("gpu-a"))
        async with kube_client_for(double) as api:
            core = k8s.CoreV1Api(api)
            listed = await core.list_node()
            double.store.create("nodes", make_node("gpu-b"))  # after the list: must arrive as ADDED
            async with k8s_watch.Watch() as w:
                stream = w.stream(core.list_node, resource_version=listed.metadata.resource_version,
                                  allow_watch_bookmarks=True)
                first = await next_event(stream)
                assert (first["type"], first["object"].metadata.name) == ("ADDED", "gpu-b")
                double.store.patch("nodes", "gpu-a", {"metadata": {"annotations": {"x": "1"}}})
                second = await next_event(stream)
                assert second["type"] == "MODIFIED"
                assert second["object"].metadata.annotations == {"x": "1"}
                double.store.bookmark_all()
                mark = await next_event(stream)
                assert mark["type"] == "BOOKMARK"
                assert mark["raw_object"]["metadata"]["resourceVersion"] == str(double.store.rv)
                assert w.resource_version == str(double.store.rv)
                double.store.delete("nodes", "gpu-b")
                gone = await next_event(stream)
                assert (gone["type"], gone["object"].metadata.name) == ("DELETED", "gpu-b")
        watch_request = double.requests_to("/api/v1/nodes")[-1]
        assert watch_request.query["watch"] == "True"
        assert watch_request.query["allowWatchBookmarks"] == "True"


async def test_watch_without_resource_version_starts_with_current_state():
    async with running_kube_double() as double:
        double.store.create("nodes", make_node("gpu-a"))
        events = await raw_watch_lines(double.url + "/api/v1/nodes?watch=1", 1)
        assert events[0]["type"] == "ADDED"
        assert events[0]["object"]["kind"] == "Node"


async def test_watch_list_ends_initial_events_with_annotated_bookmark():
    async with running_kube_double() as double:
        double.store.create("nodes", make_node("gpu-a"))
        url = (double.url + "/api/v1/nodes?watch=true&sendInitialEvents=true&allowWatchBookmarks=true"
               "&resourceVersionMatch=NotOlderThan")
        added, mark = await raw_watch_lines(url, 2)
        assert added["type"] == "ADDED"
        assert mark["type"] == "BOOKMARK"
        assert mark["object"]["metadata"]["annotations"] == {"k8s.io/initial-events-end": "true"}


async def test_watch_from_compacted_resource_version_gets_410_error_event():
    async with running_kube_double() as double:
        double.store.create("nodes", make_node("gpu-a"))
        stale = double.store.rv
        double.store.patch("nodes", "gpu-a", {"metadata": {"labels": {"a": "b"}}})
        double.store.compact()
        [error] = await raw_watch_lines(double.url + f"/api/v1/nodes?watch=1&resourceVersion={stale}", 1)
        assert error["type"] == "ERROR"
        assert error["object"]["code"] == 410 and error["object"]["reason"] == "Expired"
        assert error["object"]["kind"] == "Status" and error["object"]["status"] == "Failure"
        async with kube_client_for(double) as api:
            core = k8s.CoreV1Api(api)
            async with k8s_watch.Watch() as w:
                # timeout_seconds makes the client raise the 410 instead of retrying it once
                stream = w.stream(core.list_node, resource_version=str(stale), timeout_seconds=5)
                with pytest.raises(ApiException) as caught:
                    await next_event(stream)
            assert caught.value.status == 410
            with pytest.raises(ApiException) as listed:
                await core.list_node(resource_version=str(stale), resource_version_match="Exact")
            assert listed.value.status == 410


async def test_compaction_that_keeps_a_window_still_resumes_inside_it():
    async with running_kube_double() as double:
        double.store.create("nodes", make_node("gpu-a"))
        too_old = double.store.rv
        double.store.patch("nodes", "gpu-a", {"metadata": {"labels": {"a": "1"}}})
        inside = double.store.rv
        double.store.patch("nodes", "gpu-a", {"metadata": {"labels": {"a": "2"}}})
        double.store.compact(keep=1)
        [modified] = await raw_watch_lines(double.url + f"/api/v1/nodes?watch=1&resourceVersion={inside}", 1)
        assert modified["type"] == "MODIFIED" and modified["object"]["metadata"]["labels"]["a"] == "2"
        [error] = await raw_watch_lines(double.url + f"/api/v1/nodes?watch=1&resourceVersion={too_old}", 1)
        assert error["type"] == "ERROR" and error["object"]["code"] == 410


async def test_watch_server_timeout_ends_stream():
    async with running_kube_double() as double:
        async with kube_client_for(double) as api:
            async with k8s_watch.Watch() as w:
                events = [e async for e in w.stream(k8s.CoreV1Api(api).list_node, timeout_seconds=0)]
        assert events == []


async def test_node_get_404_is_a_status():
    async with running_kube_double() as double:
        async with kube_client_for(double) as api:
            with pytest.raises(ApiException) as caught:
                await k8s.CoreV1Api(api).read_node("nope")
        status = json.loads(caught.value.body)
        assert caught.value.status == 404
        assert status == {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                          "message": 'nodes "nope" not found', "reason": "NotFound",
                          "details": {"name": "nope", "kind": "nodes"}, "code": 404}


async def test_strategic_merge_patch_is_the_client_default_and_merges_annotations():
    async with running_kube_double() as double:
        double.store.create("nodes", make_node("gpu-a", annotations={"keep": "me"}))
        async with kube_client_for(double) as api:
            node = await k8s.CoreV1Api(api).patch_node("gpu-a", {"metadata": {"annotations": {"new": "v"}}})
        assert node.metadata.annotations == {"keep": "me", "new": "v"}
        assert double.requests_to("/api/v1/nodes/gpu-a", "PATCH")[0].content_type == \
            "application/strategic-merge-patch+json"


async def test_noop_patch_writes_nothing_and_stale_resource_version_conflicts():
    async with running_kube_double() as double:
        double.store.create("nodes", make_node("gpu-a", annotations={"a": "1"}))
        rv = double.store.rv
        async with kube_client_for(double) as api:
            core = k8s.CoreV1Api(api)
            await core.patch_node("gpu-a", {"metadata": {"annotations": {"a": "1"}}})
            assert double.store.rv == rv
            with pytest.raises(ApiException) as caught:
                await core.patch_node("gpu-a", {"metadata": {"resourceVersion": "1", "annotations": {"a": "2"}}})
        assert caught.value.status == 409
        assert json.loads(caught.value.body)["reason"] == "Conflict"


async def test_unsupported_patch_type_is_415():
    async with running_kube_double() as double:
        double.store.create("nodes", make_node("gpu-a"))
        async with aiohttp.ClientSession() as session:
            async with session.patch(double.url + "/api/v1/nodes/gpu-a", data=b"{}",
                                     headers={"Content-Type": "application/apply-patch+yaml"}) as resp:
                assert resp.status == 415
                assert (await resp.json())["reason"] == "UnsupportedMediaType"


async def test_pod_create_with_generate_name_and_field_selected_list():
    async with running_kube_double() as double:
        async with kube_client_for(double) as api:
            core = k8s.CoreV1Api(api)
            made = await core.create_namespaced_pod("gpu-test", make_pod(generate_name="test-01-"))
            assert made.metadata.name.startswith("test-01-") and len(made.metadata.name) == len("test-01-") + 5
            assert made.metadata.uid and made.status.phase == "Pending"
            await core.create_namespaced_pod("gpu-test", make_pod("on-node", node_name="gpu-a"))
            with pytest.raises(ApiException) as dup:
                await core.create_namespaced_pod("gpu-test", make_pod("on-node"))
            assert dup.value.status == 409 and json.loads(dup.value.body)["reason"] == "AlreadyExists"
            on_a = await core.list_namespaced_pod("gpu-test", field_selector="spec.nodeName=gpu-a")
            assert [p.metadata.name for p in on_a.items] == ["on-node"]
            everywhere = await core.list_pod_for_all_namespaces(field_selector="spec.nodeName!=gpu-a")
            assert [p.metadata.name for p in everywhere.items] == [made.metadata.name]
            with pytest.raises(ApiException) as bad:
                await core.list_namespaced_pod("gpu-test", field_selector="spec.bogus=x")
            assert bad.value.status == 400
            with pytest.raises(ApiException) as nameless:
                await core.create_namespaced_pod("gpu-test", make_pod())
            assert nameless.value.status == 422 and json.loads(nameless.value.body)["reason"] == "Invalid"


async def test_label_selector():
    async with running_kube_double() as double:
        double.store.create("nodes", make_node("a", labels={"gpu": "5090d"}))
        double.store.create("nodes", make_node("b", labels={"gpu": "h200"}))
        double.store.create("nodes", make_node("c"))
        async with kube_client_for(double) as api:
            core = k8s.CoreV1Api(api)
            names = lambda listed: [n.metadata.name for n in listed.items]  # noqa: E731
            assert names(await core.list_node(label_selector="gpu=5090d")) == ["a"]
            assert names(await core.list_node(label_selector="gpu in (h200, 5090d)")) == ["a", "b"]
            assert names(await core.list_node(label_selector="!gpu")) == ["c"]
            assert names(await core.list_node(label_selector="gpu,gpu!=h200")) == ["a"]


async def test_field_selected_watch_sees_binding_as_added():
    async with running_kube_double() as double:
        double.store.create("pods", make_pod("p1"), "default")
        async with kube_client_for(double) as api:
            core = k8s.CoreV1Api(api)
            listed = await core.list_pod_for_all_namespaces(field_selector="spec.nodeName=gpu-a")
            assert listed.items == []
            async with k8s_watch.Watch() as w:
                stream = w.stream(core.list_pod_for_all_namespaces, field_selector="spec.nodeName=gpu-a",
                                  resource_version=listed.metadata.resource_version)
                await core.create_namespaced_pod_binding("p1", "default", {
                    "apiVersion": "v1", "kind": "Binding", "metadata": {"name": "p1"},
                    "target": {"kind": "Node", "name": "gpu-a"}}, _preload_content=False)
                event = await next_event(stream)
                assert (event["type"], event["object"].spec.node_name) == ("ADDED", "gpu-a")
                double.store.delete("pods", "p1", "default")
                gone = await next_event(stream)
                assert gone["type"] == "DELETED"


async def test_binding_sets_node_and_condition_and_refuses_a_second():
    async with running_kube_double() as double:
        pod = double.store.create("pods", make_pod("p1"), "ns")
        binding = {"apiVersion": "v1", "kind": "Binding",
                   "metadata": {"name": "p1", "uid": pod["metadata"]["uid"]},
                   "target": {"apiVersion": "v1", "kind": "Node", "name": "gpu-a"}}
        async with aiohttp.ClientSession() as session:
            url = double.url + "/api/v1/namespaces/ns/pods/p1/binding"
            async with session.post(url, json=binding) as resp:
                assert resp.status == 201
                assert await resp.json() == {"kind": "Status", "apiVersion": "v1", "metadata": {},
                                             "status": "Success", "code": 201}
            bound = double.store.pod("ns", "p1")
            assert bound["spec"]["nodeName"] == "gpu-a"
            assert [c["type"] for c in bound["status"]["conditions"]] == ["PodScheduled"]
            async with session.post(url, json={**binding, "target": {"kind": "Node", "name": "gpu-b"}}) as resp:
                assert resp.status == 409
                status = await resp.json()
            assert status["message"] == \
                'Operation cannot be fulfilled on pods/binding "p1": pod p1 is already assigned to node "gpu-a"'
            assert double.store.pod("ns", "p1")["spec"]["nodeName"] == "gpu-a"
            wrong_uid = {**binding, "metadata": {"name": "p1", "uid": "other"}}
            double.store.create("pods", make_pod("p2"), "ns")
            async with session.post(url.replace("p1", "p2"), json={**wrong_uid, "metadata": {
                    "name": "p2", "uid": "other"}}) as resp:
                assert resp.status == 409
            async with session.post(url.replace("p1", "missing"), json={**binding, "metadata": {
                    "name": "missing"}}) as resp:
                assert resp.status == 404


async def test_a_delayed_binding_is_still_checked_and_applied_once():
    """With binding_delay two concurrent Bindings of one pod both wait, then exactly one wins."""
    async with running_kube_double() as double:
        double.binding_delay = 0.02
        double.store.create("pods", make_pod("p1"), "ns")
        url = double.url + "/api/v1/namespaces/ns/pods/p1/binding"

        async def bind(node: str) -> int:
            body = {"metadata": {"name": "p1"}, "target": {"kind": "Node", "name": node}}
            async with session.post(url, json=body) as resp:
                return resp.status

        async with aiohttp.ClientSession() as session:
            loop = asyncio.get_running_loop()
            started = loop.time()
            statuses = sorted(await asyncio.gather(bind("gpu-a"), bind("gpu-b")))
            waited = loop.time() - started
    assert statuses == [201, 409]
    assert waited >= 0.02
    assert double.store.pod("ns", "p1")["spec"]["nodeName"] in ("gpu-a", "gpu-b")


async def test_pod_log_get_and_delete():
    async with running_kube_double() as double:
        double.store.create("pods", make_pod("gpu-probe", containers=["probe", "sidecar"]), "audit")
        async with kube_client_for(double) as api:
            core = k8s.CoreV1Api(api)
            with pytest.raises(ApiException) as waiting:
                await core.read_namespaced_pod_log("gpu-probe", "audit", container="probe")
            assert waiting.value.status == 400  # container not started: no log yet
            double.store.set_log("audit", "gpu-probe", "index, uuid\n0, GPU-a\n1, GPU-b\n", container="probe")
            text = await core.read_namespaced_pod_log("gpu-probe", "audit", container="probe")
            assert text == "index, uuid\n0, GPU-a\n1, GPU-b\n"
            tail = await core.read_namespaced_pod_log("gpu-probe", "audit", container="probe", tail_lines=1)
            assert tail == "1, GPU-b\n"
            with pytest.raises(ApiException) as ambiguous:
                await core.read_namespaced_pod_log("gpu-probe", "audit")
            assert "choose one of: [probe sidecar]" in json.loads(ambiguous.value.body)["message"]
            got = await core.read_namespaced_pod("gpu-probe", "audit")
            deleted = await core.delete_namespaced_pod("gpu-probe", "audit")
            assert deleted.metadata.uid == got.metadata.uid
            with pytest.raises(ApiException) as gone:
                await core.read_namespaced_pod("gpu-probe", "audit")
            assert gone.value.status == 404


async def test_token_review_authenticated_and_unknown():
    async with running_kube_double() as double:
        probe = double.store.create("pods", make_pod("probe-1", "gpu"), "gpu")
        extra = {"authentication.kubernetes.io/pod-name": ["probe-1"],
                 "authentication.kubernetes.io/pod-uid": [probe["metadata"]["uid"]],
                 "authentication.kubernetes.io/node-name": ["gpu-a"]}
        double.add_token("good", "system:serviceaccount:gpu:verifier", uid="u-1",
                         groups=["system:serviceaccounts", "system:authenticated"], extra=extra,
                         audiences=["gpupair"])
        async with kube_client_for(double) as api:
            auth = k8s.AuthenticationV1Api(api)
            ok = await auth.create_token_review({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview",
                                                 "spec": {"token": "good", "audiences": ["gpupair"]}})
            assert ok.status.authenticated is True
            assert ok.status.user.username == "system:serviceaccount:gpu:verifier"
            assert ok.status.user.extra == extra
            assert ok.status.audiences == ["gpupair"]
            wrong_audience = await auth.create_token_review({"spec": {"token": "good", "audiences": ["other"]}})
            assert wrong_audience.status.authenticated is None
        async with aiohttp.ClientSession() as session:
            async with session.post(double.url + "/apis/authentication.k8s.io/v1/tokenreviews",
                                    json={"spec": {"token": "forged"}}) as resp:
                assert resp.status == 201  # a failed review is still a created review
                body = await resp.json()
        assert "authenticated" not in body["status"]
        assert body["status"]["user"] == {}
        # The bound pod replaced by a namesake, then gone: the token stops authenticating.
        async with kube_client_for(double) as api:
            auth = k8s.AuthenticationV1Api(api)
            review = {"spec": {"token": "good", "audiences": ["gpupair"]}}
            double.store.delete("pods", "probe-1", "gpu")
            namesake = double.store.create("pods", make_pod("probe-1", "gpu"), "gpu")
            replaced = await auth.create_token_review(review)
            assert replaced.status.authenticated is None
            assert replaced.status.error == (f"[invalid bearer token, pod UID ({namesake['metadata']['uid']}) does not "
                                             f"match service account pod ref claim ({probe['metadata']['uid']})]")
            double.store.delete("pods", "probe-1", "gpu")
            gone = await auth.create_token_review(review)
            assert gone.status.error == "[invalid bearer token, service account token has been invalidated]"


async def test_events_both_apis_are_validated():
    async with running_kube_double() as double:
        async with aiohttp.ClientSession() as session:
            url = double.url + "/apis/events.k8s.io/v1/namespaces/ns/events"
            async with session.post(url, json={"metadata": {"name": "e"}, "type": "Normal",
                                               "regarding": {"kind": "Pod", "name": "p", "namespace": "ns"}}) as resp:
                assert resp.status == 422
                fields = {c["field"] for c in (await resp.json())["details"]["causes"]}
            assert fields == {"eventTime", "reportingController", "reportingInstance", "action", "reason"}
            core_url = double.url + "/api/v1/namespaces/default/events"
            async with session.post(core_url, json={
                    "metadata": {"generateName": "gpu-a."}, "type": "Warning", "reason": "SysPair",
                    "involvedObject": {"kind": "Node", "name": "gpu-a"}}) as resp:
                assert resp.status == 201
        [event] = double.store.items("events", "default")
        assert event["reason"] == "SysPair" and event["metadata"]["name"].startswith("gpu-a.")


async def test_fail_next_answers_status_then_recovers():
    async with running_kube_double() as double:
        double.store.create("nodes", make_node("gpu-a"))
        double.fail_next("/api/v1/nodes/gpu-a", 503, times=2, method="GET", message="etcd leader changed")
        async with kube_client_for(double) as api:
            core = k8s.CoreV1Api(api)
            for _ in range(2):
                with pytest.raises(ApiException) as caught:
                    await core.read_node("gpu-a")
                assert caught.value.status == 503
                assert json.loads(caught.value.body)["reason"] == "ServiceUnavailable"
            assert (await core.read_node("gpu-a")).metadata.name == "gpu-a"
        assert len(double.requests_to("/api/v1/nodes/gpu-a", "GET")) == 3


async def test_vanish_cuts_watches_refuses_connections_and_restarts_on_same_port():
    store = Store()
    async with running_kube_double(store) as double:
        store.create("nodes", make_node("gpu-a"))
        url = double.url
        async with kube_client_for(double) as api:
            core = k8s.CoreV1Api(api)
            listed = await core.list_node()
            resp = await core.list_node(watch=True, resource_version=listed.metadata.resource_version,
                                        _preload_content=False)
            await double.stop()
            with pytest.raises(aiohttp.ClientPayloadError):  # cut mid-stream, not a clean end
                while await asyncio.wait_for(resp.content.readline(), 5):
                    pass
            resp.close()
            with pytest.raises(aiohttp.ClientConnectionError):
                await core.list_node()
            store.create("nodes", make_node("gpu-b"))  # written "while the apiserver was away"
            await double.start()
            assert double.url == url
            async with k8s_watch.Watch() as w:
                stream = w.stream(core.list_node, resource_version=listed.metadata.resource_version)
                event = await next_event(stream)
            assert (event["type"], event["object"].metadata.name) == ("ADDED", "gpu-b")


async def test_json_patch_and_strategic_merge_of_keyed_lists():
    async with running_kube_double() as double:
        pod = make_pod("p1")
        pod["status"] = {"phase": "Running", "conditions": [{"type": "Ready", "status": "False"},
                                                            {"type": "PodScheduled", "status": "True"}]}
        double.store.create("pods", pod, "ns")
        async with kube_client_for(double) as api:
            core = k8s.CoreV1Api(api)
            patched = await core.patch_namespaced_pod(
                "p1", "ns", {"status": {"conditions": [{"type": "Ready", "status": "True"}]}})
            assert [(c.type, c.status) for c in patched.status.conditions] == \
                [("Ready", "True"), ("PodScheduled", "True")]  # merged by type, not replaced
            patched = await core.patch_namespaced_pod(
                "p1", "ns", [{"op": "add", "path": "/metadata/labels", "value": {"a": "b"}}])
            assert patched.metadata.labels == {"a": "b"}
            with pytest.raises(ApiException) as bad:
                await core.patch_namespaced_pod("p1", "ns", [{"op": "remove", "path": "/nope"}])
            assert bad.value.status == 422
        types = [r.content_type for r in double.requests_to("/api/v1/namespaces/ns/pods/p1", "PATCH")]
        assert types == ["application/strategic-merge-patch+json", "application/json-patch+json",
                         "application/json-patch+json"]


async def test_leases_create_get_list_and_replace_with_optimistic_concurrency():
    import datetime

    async with running_kube_double() as double, kube_client_for(double) as api:
        coord = k8s.CoordinationV1Api(api)
        body = {"metadata": {"name": "gpu-1", "namespace": "gpupair-system"},
                "spec": {"holderIdentity": "gpu-1", "leaseDurationSeconds": 40}}
        created = await coord.create_namespaced_lease("gpupair-system", body)
        got = await coord.read_namespaced_lease("gpu-1", "gpupair-system")
        got.spec.renew_time = datetime.datetime(2026, 11, 30, 8, 0, 0, 123456, tzinfo=datetime.timezone.utc)
        renewed = await coord.replace_namespaced_lease("gpu-1", "gpupair-system", got)
        stale = created  # an old resourceVersion: someone else renewed since
        stale.spec.holder_identity = "intruder"
        with pytest.raises(ApiException) as caught:
            await coord.replace_namespaced_lease("gpu-1", "gpupair-system", stale)
        listed = await coord.list_namespaced_lease("gpupair-system")
    assert caught.value.status == 409
    assert renewed.spec.renew_time == got.spec.renew_time
    assert [item.metadata.name for item in listed.items] == ["gpu-1"]
    assert double.store.get("leases", "gpu-1", "gpupair-system")["spec"]["holderIdentity"] == "gpu-1"
