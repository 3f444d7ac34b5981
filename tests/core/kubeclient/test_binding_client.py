"""gpupair.kubeclient.binding_client: the Binding POST on its own HTTP/1.1 client, against the API double
(plain and over TLS) and, for what a well-behaved apiserver never does, a raw socket server."""

from __future__ import annotations

import asyncio
import base64
import json
import ssl

import pytest
import trustme
from kubernetes_asyncio.client.exceptions import ApiException

from gpupair.kubeclient import kube
from gpupair.kubeclient.binding_client import BindingClient, BindingConnectionError
from tests.kube_double import KubeDouble, kube_client_for, make_pod, running_kube_double


async def test_binds_and_refuses_what_the_apiserver_refuses():
    async with running_kube_double() as double:
        pod = double.store.create("pods", make_pod("p1"), "ml")
        double.store.create("pods", make_pod("p2"), "ml")
        async with kube_client_for(double) as api:
            client = BindingClient.for_api(api)
            assert client is not None
            await client.bind("ml", "p1", "gpu-a", uid=pod["metadata"]["uid"], annotations={"gpupair.io/planned": "0,1"})
            with pytest.raises(ApiException) as again:
                await client.bind("ml", "p1", "gpu-b")
            with pytest.raises(ApiException) as missing:
                await client.bind("ml", "nope", "gpu-b")
            with pytest.raises(ApiException) as other_uid:
                await client.bind("ml", "p2", "gpu-b", uid="not-its-uid")
            await client.close()
    bound = double.store.pod("ml", "p1")
    assert bound["spec"]["nodeName"] == "gpu-a"
    assert bound["metadata"]["annotations"]["gpupair.io/planned"] == "0,1"  # merged by the apiserver
    assert again.value.status == 409 and 'already assigned to node "gpu-a"' in json.loads(again.value.body)["message"]
    assert kube.describe_error(again.value) == (
        'HTTP 409: Operation cannot be fulfilled on pods/binding "p1": pod p1 is already assigned to node "gpu-a"')
    assert missing.value.status == 404 and other_uid.value.status == 409
    assert double.store.pod("ml", "p2")["spec"].get("nodeName") is None
    [sent] = double.requests_to("/api/v1/namespaces/ml/pods/p1/binding")[:1]
    assert sent.json() == {"apiVersion": "v1", "kind": "Binding",
                           "metadata": {"name": "p1", "namespace": "ml", "uid": pod["metadata"]["uid"],
                                        "annotations": {"gpupair.io/planned": "0,1"}},
                           "target": {"apiVersion": "v1", "kind": "Node", "name": "gpu-a"}}
    assert sent.content_type == "application/json"


async def test_over_tls_with_the_kubeconfigs_ca_client_certificate_and_token(tmp_path):
    ca = trustme.CA()
    server = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.1").configure_cert(server)
    ca.configure_trust(server)
    server.verify_mode = ssl.CERT_REQUIRED  # the apiserver's --client-ca-file: no certificate, no handshake
    client_cert = ca.issue_cert("gpupair-extender")
    double = KubeDouble(ssl_context=server)
    await double.start()
    try:
        pod = double.store.create("pods", make_pod("p1"), "ml")
        b64 = lambda data: base64.b64encode(data).decode()  # noqa: E731
        config = tmp_path / "kubeconfig"
        config.write_text(json.dumps({
            "apiVersion": "v1", "kind": "Config", "current-context": "tls",
            "clusters": [{"name": "tls", "cluster": {"server": double.url,
                                                      "certificate-authority-data": b64(ca.cert_pem.bytes())}}],
            "users": [{"name": "x", "user": {"token": "s3cret",
                                             "client-certificate-data": b64(client_cert.cert_chain_pems[0].bytes()),
                                             "client-key-data": b64(client_cert.private_key_pem.bytes())}}],
            "contexts": [{"name": "tls", "context": {"cluster": "tls", "user": "x"}}],
        }))
        api = await kube.api_client(str(config))
        client = BindingClient.for_api(api)
        assert client is not None
        await client.bind("ml", "p1", "gpu-a", uid=pod["metadata"]["uid"])
        await client.close()
        await api.close()
    finally:
        await double.stop()
    assert double.store.pod("ml", "p1")["spec"]["nodeName"] == "gpu-a"
    [sent] = double.requests_to("/api/v1/namespaces/ml/pods/p1/binding")
    assert sent.headers["Authorization"] == "Bearer s3cret"
    assert sent.headers["Host"] == f"127.0.0.1:{double.port}"


async def test_a_server_certificate_the_ca_did_not_sign_is_refused(tmp_path):
    server = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    trustme.CA().issue_cert("127.0.0.1").configure_cert(server)
    double = KubeDouble(ssl_context=server)
    await double.start()
    try:
        double.store.create("pods", make_pod("p1"), "ml")
        config = tmp_path / "kubeconfig"
        config.write_text(json.dumps({
            "apiVersion": "v1", "kind": "Config", "current-context": "tls",
            "clusters": [{"name": "tls", "cluster": {"server": double.url, "certificate-authority-data":
                                                      base64.b64encode(trustme.CA().cert_pem.bytes()).decode()}}],
            "users": [{"name": "x", "user": {"token": "t"}}],
            "contexts": [{"name": "tls", "context": {"cluster": "tls", "user": "x"}}],
        }))
        api = await kube.api_client(str(config))
        client = BindingClient.for_api(api)
        with pytest.raises(ssl.SSLCertVerificationError):
            await client.bind("ml", "p1", "gpu-a")
        await client.close()
        await api.close()
    finally:
        await double.stop()
    assert double.store.pod("ml", "p1")["spec"].get("nodeName") is None
    assert not double.requests_to("/api/v1/namespaces/ml/pods/p1/binding")


# ---------------------------------------------------------------- a raw server, for the unhappy paths


class RawServer:
    """Answers each request with the next of ``answers`` (bytes, or None: close without answering),
    counting connections and requests."""

    def __init__(self, answers: list[bytes | None]):
        self.answers, self.connections, self.requests = list(answers), 0, []

    async def __aenter__(self) -> "RawServer":
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.url = f"http://127.0.0.1:{self.server.sockets[0].getsockname()[1]}"
        return self

    async def __aexit__(self, *exc) -> None:
        self.server.close()
        await self.server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n")
                              if line.lower().startswith(b"content-length:"))
                self.requests.append(head + await reader.readexactly(length))
                answer = self.answers.pop(0) if self.answers else None
                if answer is None:
                    break
                writer.write(answer)
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        writer.close()


def _client(url: str) -> tuple:
    from kubernetes_asyncio import client as k8s

    config = type.__call__(k8s.Configuration)
    config.host = url
    api = k8s.ApiClient(configuration=config)
    return api, BindingClient(api)


CREATED = b'HTTP/1.1 201 Created\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}'
CHUNKED = (b"HTTP/1.1 409 Conflict\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
           b'9\r\n{"message\r\n13\r\n":"taken, chunked"}\r\n0\r\n\r\n')


async def test_keep_alive_reuses_one_connection_and_reads_chunked_bodies():
    async with RawServer([CREATED, CHUNKED, CREATED]) as server:
        api, client = _client(server.url)
        await client.bind("ml", "p1", "n")
        with pytest.raises(ApiException) as conflict:
            await client.bind("ml", "p2", "n")
        await client.bind("ml", "p3", "n")
        await client.close()
        await api.close()
    assert server.connections == 1 and len(server.requests) == 3
    assert conflict.value.status == 409 and kube.describe_error(conflict.value) == "HTTP 409: taken, chunked"
    assert server.requests[0].startswith(b"POST /api/v1/namespaces/ml/pods/p1/binding HTTP/1.1\r\n")


async def test_a_burst_of_bindings_shares_a_few_connections():
    # kube-scheduler runs every binding cycle of a burst at once: 40 Bindings in flight open
    # BURST_CONNECTIONS connections (TLS handshakes cost both ends), not one each.
    from gpupair.kubeclient.binding_client import BURST_CONNECTIONS

    async with RawServer([CREATED] * 40) as server:
        api, client = _client(server.url)
        await asyncio.gather(*(client.bind("ml", f"p{i}", "n") for i in range(40)))
        await client.close()
        await api.close()
    assert len(server.requests) == 40
    assert server.connections == BURST_CONNECTIONS == 8


async def test_a_connection_the_server_closes_is_never_reused():
    closing = CREATED.replace(b"Content-Length", b"Connection: close\r\nContent-Length")
    async with RawServer([closing, CREATED]) as server:
        api, client = _client(server.url)
        await client.bind("ml", "p1", "n")
        await client.bind("ml", "p2", "n")  # a fresh connection, not the one told to close
        await client.close()
        await api.close()
    assert server.connections == 2 and len(server.requests) == 2


async def test_a_server_that_hangs_up_or_talks_nonsense_fails_that_bind_only():
    async with RawServer([None, b"SPDY/9 what\r\n\r\n", CREATED]) as server:
        api, client = _client(server.url)
        with pytest.raises(BindingConnectionError, match="closed the connection before answering"):
            await client.bind("ml", "p1", "n")
        with pytest.raises(BindingConnectionError, match="unparsable response"):
            await client.bind("ml", "p2", "n")
        await client.bind("ml", "p3", "n")
        await client.close()
        await api.close()
    assert server.connections == 3  # each failed connection closed, never handed out again


async def test_a_bind_cancelled_mid_request_closes_its_connection():
    async with RawServer([b"HTTP/1.1 201 Created\r\nContent-Length: 2\r\n\r\n", CREATED]) as server:  # body never comes
        api, client = _client(server.url)
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(0.2):
                await client.bind("ml", "p1", "n")
        await client.bind("ml", "p2", "n")  # not the half-read stream of the first
        await client.close()
        await api.close()
    assert server.connections == 2


async def test_nothing_listening_is_a_clear_connection_error():
    async with RawServer([]) as server:
        url = server.url
    api, client = _client(url)
    with pytest.raises(BindingConnectionError, match="cannot connect to the API server at 127.0.0.1:"):
        await client.bind("ml", "p1", "n")
    await api.close()


async def test_a_token_with_a_line_break_is_never_sent():
    async with RawServer([CREATED]) as server:
        api, client = _client(server.url)
        api.configuration.api_key = {"BearerToken": "Bearer x\r\nX-Forged: 1"}
        with pytest.raises(ValueError, match="line break"):
            await client.bind("ml", "p1", "n")
        await api.close()
    assert not server.requests


async def test_a_proxy_is_left_to_the_api_clients_session(monkeypatch):
    async with running_kube_double() as double:
        async with kube_client_for(double) as api:
            api.rest_client.proxy = "http://proxy.example:3128"
            assert BindingClient.for_api(api) is None
        monkeypatch.setenv("HTTP_PROXY", "http://proxy.example:3128")
        monkeypatch.delenv("NO_PROXY", raising=False)
        monkeypatch.delenv("no_proxy", raising=False)
        async with kube_client_for(double) as api:  # its session reads the environment per request
            assert BindingClient.for_api(api) is None
