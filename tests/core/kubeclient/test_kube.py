"""gpupair.kubeclient.kube against the kube-apiserver double, with the real kubernetes-asyncio client."""

from __future__ import annotations

import asyncio
import json

import pytest
import trustme
from kubernetes_asyncio import client as k8s
from kubernetes_asyncio import watch as k8s_watch
from kubernetes_asyncio.client.exceptions import ApiException
from kubernetes_asyncio.config import incluster_config

from gpupair.kubeclient import kube
from tests.kube_double import kube_client_for, make_node, make_pod, running_kube_double


def write_kubeconfig(path, server: str, token: str, current: str = "other") -> str:
    """Context "gpu" reaches ``server``; context "other" points at a closed port."""
    # JSON is YAML: no extra dependency to write it.
    path.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": current,
        "clusters": [{"name": "c", "cluster": {"server": server}},
                     {"name": "elsewhere", "cluster": {"server": "http://127.0.0.1:9"}}],
        "users": [{"name": "u", "user": {"token": token}}],
        "contexts": [{"name": "gpu", "context": {"cluster": "c", "user": "u"}},
                     {"name": "other", "context": {"cluster": "elsewhere", "user": "u"}}],
    }))
    return str(path)


async def test_api_client_from_explicit_kubeconfig_and_context_sends_its_token(tmp_path):
    async with running_kube_double() as double:
        double.store.create("nodes", make_node("gpu-a"))
        path = write_kubeconfig(tmp_path / "config", double.url, "s3cret")
        async with await kube.api_client(path, context="gpu") as api:
            nodes = await k8s.CoreV1Api(api).list_node()
        assert [n.metadata.name for n in nodes.items] == ["gpu-a"]
        assert double.requests[-1].headers["Authorization"] == "Bearer s3cret"


async def test_api_client_reads_kubeconfig_env(tmp_path, monkeypatch):
    async with running_kube_double() as double:
        monkeypatch.setenv("KUBECONFIG", write_kubeconfig(tmp_path / "config", double.url, "from-env", "gpu"))
        async with await kube.api_client() as api:  # current-context "gpu"
            await k8s.CoreV1Api(api).list_node()
        assert double.requests[-1].headers["Authorization"] == "Bearer from-env"
        async with await kube.api_client(context="other") as api:
            assert api.configuration.host == "http://127.0.0.1:9"


async def test_api_client_in_cluster(tmp_path, monkeypatch):
    token, ca = tmp_path / "token", tmp_path / "ca.crt"
    token.write_text("sa-token")
    trustme.CA().cert_pem.write_to_path(str(ca))
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.96.0.1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", "443")
    # The service-account mount paths are fixed in a pod; point them at files we own.
    monkeypatch.setattr(incluster_config, "SERVICE_TOKEN_FILENAME", str(token))
    monkeypatch.setattr(incluster_config, "SERVICE_CERT_FILENAME", str(ca))
    async with await kube.api_client() as api:
        assert api.configuration.host == "https://10.96.0.1:443"
        assert api.configuration.ssl_ca_cert == str(ca)
        assert api.configuration.api_key["BearerToken"] == "Bearer sa-token"


async def test_api_client_takes_its_proxy_from_the_environment_once(tmp_path, monkeypatch):
    """HTTP_PROXY/NO_PROXY are read when the client is made (as client-go does), not per request:
    its session no longer consults the environment, so a later change is not seen."""
    async with running_kube_double() as proxy:  # a plain-HTTP proxy gets absolute-form requests
        proxy.store.create("nodes", make_node("via-proxy"))
        for name in ("HTTP_PROXY", "http_proxy", "NO_PROXY", "no_proxy", "HTTPS_PROXY", "https_proxy"):
            monkeypatch.delenv(name, raising=False)
        monkeypatch.setenv("HTTP_PROXY", proxy.url)
        path = write_kubeconfig(tmp_path / "config", "http://apiserver.invalid:6443", "t", "gpu")
        async with await kube.api_client(path) as api:
            monkeypatch.setenv("NO_PROXY", "apiserver.invalid")  # too late: read once already
            nodes = await k8s.CoreV1Api(api).list_node()
            assert api.rest_client.pool_manager.trust_env is False
        assert [n.metadata.name for n in nodes.items] == ["via-proxy"]
        assert proxy.requests[-1].path == "/api/v1/nodes"
        async with await kube.api_client(path) as api:  # NO_PROXY set before: direct
            assert not api.rest_client.proxy


async def test_api_client_keeps_no_cookies(tmp_path):
    """client-go has no cookie jar: a Set-Cookie from the server (or a proxy before it) is never
    sent back."""
    from aiohttp import web

    seen: list[str | None] = []

    async def nodes(request: web.Request) -> web.Response:
        seen.append(request.headers.get("Cookie"))
        response = web.json_response({"kind": "NodeList", "apiVersion": "v1", "metadata": {}, "items": []})
        response.set_cookie("session", "abc")
        return response

    app = web.Application()
    app.router.add_get("/api/v1/nodes", nodes)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        port = runner.addresses[0][1]
        path = write_kubeconfig(tmp_path / "config", f"http://localhost:{port}", "t", "gpu")  # a jar keeps no IP's cookies
        async with await kube.api_client(path) as api:
            for _ in range(2):
                await k8s.CoreV1Api(api).list_node()
    finally:
        await runner.cleanup()
    assert seen == [None, None]


async def test_api_client_without_any_config_says_what_it_tried(tmp_path, monkeypatch):
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setattr(kube, "DEFAULT_KUBECONFIG", str(tmp_path / "absent"))
    with pytest.raises(kube.KubeConfigError, match="KUBECONFIG"):
        await kube.api_client()
    broken = tmp_path / "broken"
    broken.write_text("{}")
    with pytest.raises(kube.KubeConfigError, match="broken"):
        await kube.api_client(str(broken))


async def test_patch_annotations_sends_a_merge_patch_that_touches_only_annotations():
    async with running_kube_double() as double:
        double.store.create("nodes", make_node("gpu-a", annotations={"foreign": "x", "gpupair.io/old": "1"}))
        async with kube_client_for(double) as api:
            node = await kube.patch_annotations(api, "node", "gpu-a", None,
                                                {"gpupair.io/report": "{}", "gpupair.io/old": None})
        assert node.metadata.annotations == {"foreign": "x", "gpupair.io/report": "{}"}
        [sent] = double.requests_to("/api/v1/nodes/gpu-a", "PATCH")
        assert sent.content_type == "application/merge-patch+json"
        assert sent.json() == {"metadata": {"annotations": {"gpupair.io/report": "{}", "gpupair.io/old": None}}}
        assert double.store.node("gpu-a")["status"]["allocatable"] == {"nvidia.com/gpu": "8"}


async def test_patch_annotations_on_a_pod_and_bad_arguments():
    async with running_kube_double() as double:
        double.store.create("pods", make_pod("p1"), "ml")
        async with kube_client_for(double) as api:
            pod = await kube.patch_annotations(api, "pod", "p1", "ml", {"gpupair.io/gpus": "0,1"})
            assert pod.metadata.annotations == {"gpupair.io/gpus": "0,1"}
            assert double.requests_to("/api/v1/namespaces/ml/pods/p1")[0].content_type == \
                "application/merge-patch+json"
            with pytest.raises(ValueError, match="kind"):
                await kube.patch_annotations(api, "deployment", "d", "ml", {"a": "b"})
            with pytest.raises(ValueError, match="namespace"):
                await kube.patch_annotations(api, "pod", "p1", None, {"a": "b"})
            with pytest.raises(ValueError, match="string"):
                await kube.patch_annotations(api, "pod", "p1", "ml", {"a": 1})
            with pytest.raises(ApiException) as missing:
                await kube.patch_annotations(api, "pod", "nope", "ml", {"a": "b"})
            assert missing.value.status == 404
        assert len(double.requests_to("/api/v1/namespaces/ml/pods/p1")) == 1  # bad input never sent


async def test_bind_pod_and_conflict():
    async with running_kube_double() as double:
        pod = double.store.create("pods", make_pod("p1"), "ml")
        async with kube_client_for(double) as api:
            await kube.bind_pod(api, "ml", "p1", "gpu-a", uid=pod["metadata"]["uid"])
            assert double.store.pod("ml", "p1")["spec"]["nodeName"] == "gpu-a"
            with pytest.raises(ApiException) as again:
                await kube.bind_pod(api, "ml", "p1", "gpu-b")
        assert again.value.status == 409
        assert "already assigned to node \"gpu-a\"" in json.loads(again.value.body)["message"]
        sent = double.requests_to("/api/v1/namespaces/ml/pods/p1/binding")[0].json()
        assert sent["target"] == {"apiVersion": "v1", "kind": "Node", "name": "gpu-a"}
        assert sent["metadata"]["uid"] == pod["metadata"]["uid"]


async def test_create_event_for_pod_and_node_passes_apiserver_validation():
    async with running_kube_double() as double:
        double.store.create("pods", make_pod("p1"), "ml")
        double.store.create("nodes", make_node("gpu-a"))
        async with kube_client_for(double) as api:
            core = k8s.CoreV1Api(api)
            pod = (await core.list_namespaced_pod("ml")).items[0]  # list items have no kind
            await kube.create_event(api, pod, "CrossNumaPair", "GPU0+GPU4 is SYS", type="Warning",
                                    component="gpupair-verifier", instance="verifier-0")
            await kube.create_event(api, await core.read_node("gpu-a"), "ReportPublished", "x" * 2000,
                                    component="gpupair-reporter")
        [pod_event] = double.store.items("events", "ml")
        assert pod_event["apiVersion"] == "events.k8s.io/v1"
        assert pod_event["regarding"] == {"apiVersion": "v1", "kind": "Pod", "name": "p1", "namespace": "ml",
                                          "uid": pod.metadata.uid,
                                          "resourceVersion": pod.metadata.resource_version}
        assert (pod_event["type"], pod_event["reason"], pod_event["action"]) == \
            ("Warning", "CrossNumaPair", "CrossNumaPair")
        assert pod_event["reportingController"] == "gpupair-verifier"
        assert pod_event["reportingInstance"] == "verifier-0"
        assert pod_event["metadata"]["name"].startswith("p1.")
        [node_event] = double.store.items("events", "default")  # cluster-scoped objects: "default"
        assert node_event["regarding"]["kind"] == "Node" and "namespace" not in node_event["regarding"]
        assert len(node_event["note"]) == kube.EVENT_NOTE_LIMIT


def test_event_body_is_pure_and_checks_input():
    body = kube.event_body({"kind": "Pod", "metadata": {"name": "p", "namespace": "n"}}, "R", "m",
                           type="Normal", component="c", instance="i", now_ns=1_700_000_000_000_001_000)
    assert body["eventTime"] == "2023-11-14T22:13:20.000001Z"
    assert body["metadata"] == {"name": "p.17979cfe362a03e8", "namespace": "n"}
    with pytest.raises(ValueError, match="type"):
        kube.event_body({"kind": "Pod", "metadata": {"name": "p"}}, "R", "m", type="Error", component="c")
    with pytest.raises(ValueError, match="Pods and Nodes"):
        kube.event_body({"kind": "Secret", "metadata": {"name": "s"}}, "R", "m", type="Normal", component="c")


async def test_a_compacted_resource_version_is_gone_on_watch_and_list():
    """As the apiserver does: HTTP 410, from a watch's ERROR event and from a list."""
    async with running_kube_double() as double:
        double.store.create("nodes", make_node("gpu-a"))
        stale = str(double.store.rv)
        double.store.patch("nodes", "gpu-a", {"metadata": {"labels": {"x": "y"}}})
        double.store.compact()
        async with kube_client_for(double) as api:
            core = k8s.CoreV1Api(api)
            async with k8s_watch.Watch() as w:
                stream = w.stream(core.list_node, resource_version=stale, timeout_seconds=5)
                with pytest.raises(ApiException) as from_watch:
                    await asyncio.wait_for(stream.__anext__(), 5)
            with pytest.raises(ApiException) as from_list:
                await core.list_node(resource_version=stale, resource_version_match="Exact")
            with pytest.raises(ApiException) as not_found:
                await core.read_node("nope")
        assert (from_watch.value.status, from_list.value.status, not_found.value.status) == (410, 410, 404)
