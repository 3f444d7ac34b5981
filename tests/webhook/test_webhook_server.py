"""The webhook over real TLS on a loopback port, fed real AdmissionReview v1 bodies.

The server runs in a thread with its own event loop, so the tests (including hypothesis) talk to
it with a plain blocking HTTPS client, as the apiserver would.
"""

from __future__ import annotations

import asyncio
import base64
import copy
import http.client
import json
import os
import signal
import socket
import ssl
import subprocess
import sys
import threading
import time
from pathlib import Path

import jsonpatch
import pytest
import trustme
from aiohttp import web
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpupair.webhook import sidecar
from gpupair.webhook.admission import VERIFY_KEY, InjectOptions
from gpupair.webhook.app import create_app
from gpupair.webhook.sidecar import SidecarOptions
from gpupair.command.tls import ReloadingTLS
from tests.real_k8s import REAL_K8S

FIXTURE = REAL_K8S / "admission-pod-create-p1-05-job-generatename.json"
SERVICE_NAME = "gpupair-webhook.gpupair-system.svc"
OPTIONS = InjectOptions(sidecar=SidecarOptions(image="registry.example/gpupair:test"))


class ThreadedServer:
    def __init__(self, app: web.Application, ssl_context: ssl.SSLContext) -> None:
        self.app, self.ssl_context = app, ssl_context
        self.loop = asyncio.new_event_loop()
        self.port = 0
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.runner = web.AppRunner(self.app, access_log=None)
        self.loop.run_until_complete(self.runner.setup())
        site = web.TCPSite(self.runner, "127.0.0.1", 0, ssl_context=self.ssl_context)
        self.loop.run_until_complete(site.start())
        self.port = self.runner.addresses[0][1]
        self._ready.set()
        self.loop.run_forever()
        self.loop.run_until_complete(self.runner.cleanup())
        self.loop.close()

    def __enter__(self) -> "ThreadedServer":
        self._thread.start()
        assert self._ready.wait(30), "server did not start"
        return self

    def __exit__(self, *exc) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(30)


def write_pair(cert: trustme.LeafCert, directory: Path) -> tuple[Path, Path]:
    """Write cert and key the way a Secret volume update lands: new files renamed into place."""
    cert_path, key_path = directory / "tls.crt", directory / "tls.key"
    for path, blob in ((cert_path, cert.cert_chain_pems[0]), (key_path, cert.private_key_pem)):
        tmp = path.with_suffix(".tmp")
        blob.write_to_path(str(tmp))
        os.replace(tmp, path)
    return cert_path, key_path


@pytest.fixture(scope="module")
def ca() -> trustme.CA:
    return trustme.CA()


@pytest.fixture(scope="module")
def server(ca, tmp_path_factory):
    directory = tmp_path_factory.mktemp("tls")
    cert_path, key_path = write_pair(ca.issue_cert("127.0.0.1", SERVICE_NAME), directory)
    tls = ReloadingTLS(str(cert_path), str(key_path))
    with ThreadedServer(create_app(OPTIONS), tls.context) as running:
        yield running


_client_contexts: dict[int, ssl.SSLContext] = {}


def client_context(ca: trustme.CA) -> ssl.SSLContext:
    """A client that trusts only the test CA (made once per CA: loading trust is the slow part)."""
    if id(ca) not in _client_contexts:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        ca.configure_trust(context)
        _client_contexts[id(ca)] = context
    return _client_contexts[id(ca)]


def post(server: ThreadedServer, ca, body: bytes, path: str = "/mutate?timeout=5s",
         host: str = SERVICE_NAME) -> tuple[int, bytes]:
    """POST over a fresh TLS connection. The apiserver dials the Service's DNS name, so SNI is
    set and the certificate checked for that name; ``host`` an IP sends no SNI."""
    raw = socket.create_connection(("127.0.0.1", server.port), timeout=30)
    raw.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # as Go's net/http client does
    connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
    connection.sock = client_context(ca).wrap_socket(raw, server_hostname=host)
    try:
        connection.request("POST", path, body=body, headers={"Content-Type": "application/json"})
        response = connection.getresponse()
        return response.status, response.read()
    finally:
        connection.close()


def fixture_review() -> dict:
    return json.loads(FIXTURE.read_text())


def decode_patch(answer: dict) -> list[dict]:
    return json.loads(base64.b64decode(answer["response"]["patch"]))


def test_real_job_review_gets_a_patch_that_injects_the_verifier(server, ca):
    review = fixture_review()
    status, body = post(server, ca, json.dumps(review).encode())
    assert status == 200
    answer = json.loads(body)
    assert answer["apiVersion"] == "admission.k8s.io/v1" and answer["kind"] == "AdmissionReview"
    response = answer["response"]
    assert response["uid"] == review["request"]["uid"]
    assert response["allowed"] is True and response["patchType"] == "JSONPatch"
    assert "status" not in response  # allowed responses carry no Status

    pod = review["request"]["object"]
    after = jsonpatch.apply_patch(pod, decode_patch(answer))
    names = [c["name"] for c in after["spec"]["initContainers"]]
    assert names == [sidecar.CONTAINER_NAME]
    assert after["spec"]["containers"] == pod["spec"]["containers"]
    assert [v["name"] for v in after["spec"]["volumes"]] == ["kube-api-access-dsrmc", sidecar.TOKEN_VOLUME]


def test_connection_without_sni_by_ip(server, ca):
    status, _ = post(server, ca, json.dumps(fixture_review()).encode(), host="127.0.0.1")
    assert status == 200


def review_with_pod(mutate) -> dict:
    review = fixture_review()
    mutate(review["request"]["object"])
    return review


@pytest.mark.parametrize("name, mutate, injected", [
    ("0 GPUs", lambda p: p["spec"]["containers"][0].pop("resources"), False),
    ("1 GPU", lambda p: p["spec"]["containers"][0]["resources"].update(
        limits={"nvidia.com/gpu": "1"}, requests={"nvidia.com/gpu": "1"}), False),
    ("8 GPUs", lambda p: p["spec"]["containers"][0]["resources"].update(
        limits={"nvidia.com/gpu": "8"}, requests={"nvidia.com/gpu": "8"}), True),
    ("init only", lambda p: (p["spec"].update(initContainers=[{
        "name": "prep", "image": "x", "resources": {"limits": {"nvidia.com/gpu": "2"}}}]),
        p["spec"]["containers"][0].pop("resources")), True),
    ("opted out", lambda p: p["metadata"].update(annotations={VERIFY_KEY: "false"}), False),
])
def test_pod_shapes_over_the_wire(server, ca, name, mutate, injected):
    review = review_with_pod(mutate)
    status, body = post(server, ca, json.dumps(review).encode())
    assert status == 200, name
    response = json.loads(body)["response"]
    assert response["allowed"] is True and response["uid"] == review["request"]["uid"]
    assert ("patch" in response) is injected
    if injected:
        after = jsonpatch.apply_patch(review["request"]["object"], decode_patch(json.loads(body)))
        assert [c["name"] for c in after["spec"]["initContainers"]][-1] == sidecar.CONTAINER_NAME
        # The apiserver reinvokes webhooks (reinvocationPolicy IfNeeded): the second answer is empty.
        again = copy.deepcopy(review)
        again["request"]["object"] = after
        status, body = post(server, ca, json.dumps(again).encode())
        assert status == 200 and "patch" not in json.loads(body)["response"]


@pytest.mark.parametrize("mutate", [
    lambda r: r["request"].update(operation="UPDATE"),
    lambda r: r["request"].update(subResource="status"),
    lambda r: r["request"].update(kind={"group": "", "version": "v1", "kind": "ConfigMap"},
                                  resource={"group": "", "version": "v1", "resource": "configmaps"}),
])
def test_anything_but_a_pod_create_is_allowed_untouched(server, ca, mutate):
    review = fixture_review()
    mutate(review)
    status, body = post(server, ca, json.dumps(review).encode())
    assert status == 200
    assert json.loads(body)["response"] == {"uid": review["request"]["uid"], "allowed": True}


def test_unreadable_pod_is_allowed_with_a_warning(server, ca):
    review = review_with_pod(lambda p: p["spec"]["containers"][0]["resources"].update(
        limits={"nvidia.com/gpu": "lots"}, requests={"nvidia.com/gpu": "lots"}))
    status, body = post(server, ca, json.dumps(review).encode())
    response = json.loads(body)["response"]
    assert status == 200 and response["allowed"] is True and "patch" not in response
    assert "lots" in response["warnings"][0]


@pytest.mark.parametrize("body, reason", [
    (b"not json", "not JSON"),
    (b"[]", "JSON object"),
    (b'{"apiVersion": "admission.k8s.io/v1beta1", "kind": "AdmissionReview", "request": {}}', "apiVersion"),
    (b'{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"}', "no request"),
    (json.dumps({**fixture_review(), "request": {**fixture_review()["request"], "uid": ""}}).encode(), "uid"),
    (json.dumps({**fixture_review(), "request": {**fixture_review()["request"], "uid": 7}}).encode(), "uid"),
])
def test_malformed_reviews_get_400_with_a_reason(server, ca, body, reason):
    status, answer = post(server, ca, body)
    assert status == 400
    assert_refusal(json.loads(answer), reason)


def assert_refusal(answer: dict, reason: str = "") -> None:
    """The AdmissionReview a malformed body gets: not allowed, a metav1.Status 400 saying why."""
    assert answer["apiVersion"] == "admission.k8s.io/v1" and answer["kind"] == "AdmissionReview"
    response = answer["response"]
    assert response["allowed"] is False and response["uid"] == ""
    assert response["status"]["code"] == 400 and response["status"]["reason"] == "BadRequest"
    assert reason in response["status"]["message"] and response["status"]["message"]


def test_health_and_metrics(server, ca):
    connection = http.client.HTTPSConnection("127.0.0.1", server.port, context=client_context(ca))
    for path, expected in (("/healthz", b"ok"), ("/readyz", b"ok")):
        connection.request("GET", path)
        response = connection.getresponse()
        assert (response.status, response.read()) == (200, expected)
    connection.request("GET", "/metrics")
    response = connection.getresponse()
    text = response.read().decode()
    assert response.status == 200 and 'gpupair_webhook_reviews_total{outcome="injected"}' in text


# --- random and malformed bodies: never a 5xx --------------------------------------------------------

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=12), children, max_size=4),
    max_leaves=20,
)
REVIEW_PATHS = [
    ("request",), ("request", "uid"), ("request", "kind"), ("request", "operation"), ("request", "object"),
    ("request", "object", "metadata"), ("request", "object", "metadata", "annotations"),
    ("request", "object", "spec"), ("request", "object", "spec", "containers"),
    ("request", "object", "spec", "initContainers"), ("request", "object", "spec", "volumes"),
    ("request", "object", "spec", "schedulerName"), ("apiVersion",), ("kind",), ("request", "resource"),
]


@st.composite
def mutated_reviews(draw) -> bytes:
    review = fixture_review()
    for _ in range(draw(st.integers(1, 3))):
        path = draw(st.sampled_from(REVIEW_PATHS))
        target = review
        for key in path[:-1]:
            if not isinstance(target, dict):
                break
            target = target.setdefault(key, {})
        if isinstance(target, dict):
            if draw(st.booleans()):
                target.pop(path[-1], None)
            else:
                target[path[-1]] = draw(json_values)
    return json.dumps(review).encode()


bodies = st.one_of(
    st.binary(max_size=200),
    json_values.map(lambda v: json.dumps(v).encode()),
    mutated_reviews(),
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(body=bodies)
def test_random_bodies_never_get_a_5xx(server, ca, body):
    status, answer = post(server, ca, body)
    assert status in (200, 400), (status, answer[:200])
    decoded = json.loads(answer)
    if status == 200:
        assert decoded["response"]["allowed"] is True
        if "patch" in decoded["response"]:
            patch = json.loads(base64.b64decode(decoded["response"]["patch"]))
            jsonpatch.apply_patch(json.loads(body)["request"]["object"], patch)  # applies cleanly
    else:
        assert_refusal(decoded)


# --- certificate rotation -------------------------------------------------------------------------


def peer_certificate(port: int, ca: trustme.CA, host: str = SERVICE_NAME) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=30) as raw:
        with client_context(ca).wrap_socket(raw, server_hostname=host) as tls:
            return tls.getpeercert(binary_form=True)


def der(cert: trustme.LeafCert) -> bytes:
    return ssl.PEM_cert_to_DER_cert(cert.cert_chain_pems[0].bytes().decode())


def test_rotated_certificate_is_served_to_new_connections(ca, tmp_path):
    first, second = ca.issue_cert(SERVICE_NAME), ca.issue_cert(SERVICE_NAME, "127.0.0.1")
    cert_path, key_path = write_pair(first, tmp_path)
    tls = ReloadingTLS(str(cert_path), str(key_path))
    with ThreadedServer(create_app(OPTIONS), tls.context) as running:
        assert peer_certificate(running.port, ca) == der(first)
        write_pair(second, tmp_path)
        assert peer_certificate(running.port, ca) == der(second)
        assert peer_certificate(running.port, ca, host="127.0.0.1") == der(second)
        assert tls.reloads == 1


def test_a_broken_rotation_keeps_the_previous_certificate(ca, tmp_path):
    good, other = ca.issue_cert(SERVICE_NAME), ca.issue_cert(SERVICE_NAME)
    cert_path, key_path = write_pair(good, tmp_path)
    tls = ReloadingTLS(str(cert_path), str(key_path))
    with ThreadedServer(create_app(OPTIONS), tls.context) as running:
        # Half a rotation: the new certificate is there, its key not yet.
        other.cert_chain_pems[0].write_to_path(str(tmp_path / "new.crt"))
        os.replace(tmp_path / "new.crt", cert_path)
        assert peer_certificate(running.port, ca) == der(good)
        assert tls.reloads == 0
        # The key arrives: the pair loads on the next connection.
        write_pair(other, tmp_path)
        assert peer_certificate(running.port, ca) == der(other)
        assert tls.reloads == 1


def test_bad_files_at_start_fail_loudly(tmp_path):
    (tmp_path / "tls.crt").write_text("not a certificate")
    (tmp_path / "tls.key").write_text("not a key")
    with pytest.raises(ssl.SSLError):
        ReloadingTLS(str(tmp_path / "tls.crt"), str(tmp_path / "tls.key"))


# --- the command ---------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_gpupair_webhook_command_serves_mutate_and_drains_on_sigterm(ca, tmp_path):
    cert_path, key_path = write_pair(ca.issue_cert(SERVICE_NAME, "127.0.0.1"), tmp_path)
    port = free_port()
    repo = Path(__file__).resolve().parents[2]
    process = subprocess.Popen(
        [sys.executable, "-m", "gpupair.command.cli", "webhook", "--host", "127.0.0.1", "--port", str(port),
         "--tls-cert-file", str(cert_path), "--tls-private-key-file", str(key_path),
         "--verifier-image", "registry.example/v:1"],
        cwd=repo, env={"PYTHONPATH": str(repo), "GPUPAIR_WEBHOOK_SCHEDULER_NAME": "gpupair-scheduler"},
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        running = type("Running", (), {"port": port})()
        while True:  # wait for the listener (a startup deadline, not a timing assertion)
            try:
                status, body = post(running, ca, json.dumps(fixture_review()).encode())
                break
            except OSError:
                assert process.poll() is None, process.communicate()[1]
                assert time.monotonic() < deadline, "webhook did not start"
                time.sleep(0.1)
        assert status == 200
        patch = decode_patch(json.loads(body))
        assert {"op": "add", "path": "/spec/schedulerName", "value": "gpupair-scheduler"} in patch
        injected = [op["value"] for op in patch if op["path"] == "/spec/initContainers"][0][0]
        assert injected["image"] == "registry.example/v:1"
    finally:
        process.send_signal(signal.SIGTERM)
        _, stderr = process.communicate(timeout=60)
    assert process.returncode == 0, stderr
    logged = [json.loads(line) for line in stderr.splitlines() if line.startswith("{")]
    assert any(entry["msg"] == "admission review" and entry["outcome"] == "injected" for entry in logged)


def test_gpupair_webhook_command_refuses_missing_certificates(tmp_path):
    repo = Path(__file__).resolve().parents[2]
    result = subprocess.run(
        [sys.executable, "-m", "gpupair.command.cli", "webhook", "--tls-cert-file", str(tmp_path / "no.crt"),
         "--tls-private-key-file", str(tmp_path / "no.key")],
        cwd=repo, env={"PYTHONPATH": str(repo)}, capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    assert "gpupair webhook: error: cannot load TLS certificate" in result.stderr


# --------------------------------------------------------------------------- placement intent


def placement_after(server, ca, review: dict, path: str) -> str | None:
    status, body = post(server, ca, json.dumps(review).encode(), path=path)
    assert status == 200
    answer = json.loads(body)
    assert answer["response"]["allowed"] is True
    after = jsonpatch.apply_patch(review["request"]["object"], decode_patch(answer))
    return after["metadata"]["annotations"].get("gpupair.io/placement")


@pytest.mark.parametrize("path, written", [
    ("/mutate?timeout=5s", "required"),  # no namespace default: the webhook's cluster default
    ("/mutate/placement/preferred?timeout=5s", "preferred"),  # the entry for preferred namespaces
    ("/mutate/placement/none?timeout=5s", "none"),
    ("/mutate/placement/bogus?timeout=5s", "required"),  # a config mistake: logged, cluster default
])
def test_the_namespace_default_arrives_in_the_path(server, ca, path, written):
    assert placement_after(server, ca, fixture_review(), path) == written


def test_the_pods_own_placement_is_kept(server, ca):
    review = review_with_pod(lambda p: p["metadata"].update(annotations={"gpupair.io/placement": "none"}))
    assert placement_after(server, ca, review, "/mutate/placement/preferred?timeout=5s") == "none"


def test_a_bad_placement_is_refused_with_the_allowed_values(server, ca):
    review = review_with_pod(lambda p: p["metadata"].update(annotations={"gpupair.io/placement": "prefered"}))
    status, body = post(server, ca, json.dumps(review).encode())
    assert status == 200
    response = json.loads(body)["response"]
    assert response["allowed"] is False and response["uid"] == review["request"]["uid"]
    assert "patch" not in response
    assert response["status"] == {
        "metadata": {}, "status": "Failure", "code": 400, "reason": "BadRequest",
        "message": "gpupair: gpupair.io/placement: 'prefered' is not a placement gpupair knows "
                   "(one of required, preferred, none)"}


@pytest.mark.parametrize("path, written", [
    ("/mutate/scope/nvlink?timeout=5s", "nvlink"),  # the entry for namespaces labelled gpupair.io/scope=nvlink
    ("/mutate/scope/bogus?timeout=5s", None),  # a config mistake: logged; the pod is planned as on /mutate
])
def test_the_namespace_scope_arrives_in_the_path(server, ca, path, written):
    status, body = post(server, ca, json.dumps(fixture_review()).encode(), path=path)
    answer = json.loads(body)
    after = jsonpatch.apply_patch(fixture_review()["request"]["object"], decode_patch(answer))
    assert status == 200 and answer["response"]["allowed"] is True
    assert after["metadata"].get("annotations", {}).get("gpupair.io/scope") == written
