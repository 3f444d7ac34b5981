"""The whole verdict path: the reporter's /v1/verify against a real gRPC PodResources server on a
Unix socket (tests/podresources_server.py), the seed node's layout, and a real HTTP kube-apiserver
double (tests/kube_double.py) that answers TokenReviews, pod reads, patches and Events; and the
real `gpupair verify` sidecar, run as a process, calling it."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web

from gpupair.decide.judge import verdict
from gpupair.topology.layout import NodeLayout
from gpupair.reporter.allocations import PodResourcesClient
from gpupair.reporter.identity import NODE_NAME_CLAIM, POD_NAME_CLAIM, POD_UID_CLAIM
from gpupair.reporter.verification import FAIL_REASON, VerifyService
from tests.kube_double import KubeDouble, kube_client_for, make_pod, running_kube_double
from tests.layouts import seed_layout
from tests.podresources_server import FakeContainer, FakeDevice, FakeKubelet, FakePod, running_kubelet

NODE = "gpu-node-1"
OTHER_NODE = "gpu-node-2"
NS = "ml"
GPU = "nvidia.com/gpu"
AUDIENCE = "gpupair-reporter"
REPORTER_TOKEN = "reporter-own-credential"
REPO = Path(__file__).resolve().parents[2]
SEED = seed_layout()


@dataclass
class World:
    double: KubeDouble
    kubelet: FakeKubelet
    service: VerifyService
    url: str
    layout: list[NodeLayout | None] = field(default_factory=lambda: [SEED])

    def add_pod(self, name: str, gpus: tuple[int, ...], *, bound_to: str = NODE, claims: dict | None = None,
                annotations: dict | None = None, on_kubelet: bool = True,
                audiences: tuple[str, ...] = (AUDIENCE,)) -> tuple[dict, str]:
        """A scheduled pod holding ``gpus``, and a projected token for it as the kubelet would mint."""
        pod = make_pod(name, NS, gpus=len(gpus), node_name=bound_to, annotations=annotations)
        pod = self.double.store.create("pods", pod, NS)
        token = f"token-{uuid.uuid4()}"
        extra = {
            POD_NAME_CLAIM: [name],
            POD_UID_CLAIM: [pod["metadata"]["uid"]],
            NODE_NAME_CLAIM: [bound_to],
            "authentication.kubernetes.io/node-uid": [str(uuid.uuid4())],
            "authentication.kubernetes.io/credential-id": [f"JTI={uuid.uuid4()}"],
        }
        extra.update(claims or {})
        extra = {key: value for key, value in extra.items() if value is not None}
        self.double.add_token(token, f"system:serviceaccount:{NS}:default", uid=str(uuid.uuid4()),
                              groups=["system:serviceaccounts", f"system:serviceaccounts:{NS}",
                                      "system:authenticated"],
                              extra=extra, audiences=list(audiences))
        if on_kubelet:
            self.kubelet_knows(name, gpus)
        return pod, token

    def kubelet_knows(self, name: str, gpus: tuple[int, ...]) -> None:
        devices = [FakeDevice(SEED.devices[i].uuid, (SEED.devices[i].numa_node,)) for i in gpus]
        self.kubelet.pods.append(FakePod(NS, name, [FakeContainer("main", {GPU: devices}),
                                                    FakeContainer("gpupair-verify")]))

    def pod(self, name: str) -> dict:
        return self.double.store.pod(NS, name)

    def events(self) -> list[dict]:
        return self.double.store.items("events")

    def pod_requests(self, name: str, method: str):
        return self.double.requests_to(f"/api/v1/namespaces/{NS}/pods/{name}", method)


@pytest.fixture
async def world():
    allocatable = {GPU: [FakeDevice(d.uuid, (d.numa_node,)) for d in SEED.devices]}
    async with running_kubelet(allocatable) as kubelet:
        async with running_kube_double() as double:
            async with kube_client_for(double) as api, PodResourcesClient(kubelet.socket_path) as pod_resources:
                api.configuration.api_key = {"BearerToken": REPORTER_TOKEN}
                api.configuration.api_key_prefix = {"BearerToken": "Bearer"}
                holder: list[NodeLayout | None] = [SEED]
                service = VerifyService(api, pod_resources, lambda: holder[0], NODE, GPU, AUDIENCE)
                app = web.Application()
                app.router.add_post("/v1/verify", service.handle)
                runner = web.AppRunner(app, access_log=None)
                await runner.setup()
                site = web.TCPSite(runner, "127.0.0.1", 0)
                await site.start()
                port = runner.addresses[0][1]
                try:
                    yield World(double, kubelet, service, f"http://127.0.0.1:{port}/v1/verify", holder)
                finally:
                    await runner.cleanup()


async def call(world: World, token: str | None) -> tuple[int, dict, dict]:
    headers = {"Authorization": f"Bearer {token}"} if token is not None else {}
    async with aiohttp.ClientSession() as session:
        async with session.post(world.url, data=b"{}", headers=headers) as response:
            return response.status, await response.json(), dict(response.headers)


def verdict_annotations(pod: dict) -> dict:
    annotations = pod["metadata"].get("annotations") or {}
    return {key: value for key, value in annotations.items() if key.startswith("gpupair.io/")}


# --- verdicts --------------------------------------------------------------------------------------


async def test_pass_gpu1_gpu2_on_the_seed_node(world):
    _, token = world.add_pod("train-pass", (1, 2))
    status, body, _ = await call(world, token)

    assert status == 200, body
    assert body["verdict"]["result"] == "PASS"
    assert body["tsvRow"] == "\t".join(["-", "train-pass", "Running", "GPU1+GPU2",
                                        "00000000:31:00.0+00000000:41:00.0", "NUMA0+NUMA0", "NODE", "PASS"])
    assert body["deviceIds"] == [SEED.devices[1].uuid, SEED.devices[2].uuid]
    assert verdict_annotations(world.pod("train-pass")) == {
        verdict.GRANTED_KEY: "GPU1+GPU2",
        verdict.PCI_KEY: "00000000:31:00.0+00000000:41:00.0",
        verdict.NUMA_KEY: "NUMA0+NUMA0",
        verdict.LINK_KEY: "NODE",
        verdict.P2P_KEY: "unknown",
        verdict.VERDICT_KEY: "PASS",
        verdict.VERDICT_PLACEMENT_KEY: "required",
    }
    assert world.events() == []
    # The review asked for the reporter's audience, and the write used the reporter's credentials.
    [review] = world.double.requests_to("/apis/authentication.k8s.io/v1/tokenreviews", "POST")
    assert review.json()["spec"] == {"token": token, "audiences": [AUDIENCE]}
    [patch] = world.pod_requests("train-pass", "PATCH")
    assert patch.headers["Authorization"] == f"Bearer {REPORTER_TOKEN}"
    assert patch.content_type == "application/merge-patch+json"
    assert token not in json.dumps([dict(r.headers) for r in world.double.requests if r.method == "PATCH"])


async def test_fail_gpu3_gpu4_crosses_numa_and_raises_a_warning_event(world):
    pod, token = world.add_pod("train-fail", (3, 4))
    status, body, _ = await call(world, token)

    assert status == 200, body
    annotations = verdict_annotations(world.pod("train-fail"))
    assert annotations[verdict.GRANTED_KEY] == "GPU3+GPU4"
    assert annotations[verdict.NUMA_KEY] == "NUMA0+NUMA1"
    assert annotations[verdict.LINK_KEY] == "SYS"
    assert annotations[verdict.VERDICT_KEY] == "FAIL"
    [event] = world.events()
    assert event["type"] == "Warning" and event["reason"] == FAIL_REASON
    assert event["regarding"]["name"] == "train-fail" and event["regarding"]["uid"] == pod["metadata"]["uid"]
    assert "GPU3+GPU4" in event["note"] and "SYS" in event["note"]
    assert event["reportingController"] == "gpupair-reporter"


@pytest.mark.parametrize("asked, placement, result, events", [
    ("preferred", "preferred", "PASS", 0),
    ("none", "none", "PASS", 0),
    ("required", "required", "FAIL", 1),
    ("sometimes", "required", "FAIL", 1),  # a bad value (the webhook was down) counts as required
])
async def test_a_sys_grant_is_judged_against_the_pods_placement(world, asked, placement, result, events):
    _, token = world.add_pod("train-sys", (3, 4), annotations={"gpupair.io/placement": asked})
    status, body, _ = await call(world, token)
    assert status == 200, body
    annotations = verdict_annotations(world.pod("train-sys"))
    assert (annotations[verdict.LINK_KEY], annotations[verdict.VERDICT_KEY]) == ("SYS", result)
    assert annotations[verdict.VERDICT_PLACEMENT_KEY] == body["verdict"]["placement"] == placement
    assert len(world.events()) == events


@pytest.mark.parametrize("placement", ["required", "preferred", "none"])
async def test_two_replicas_of_one_gpu_fail_under_every_placement(world, placement):
    """Time-slicing without renameByDefault: a pod asking two nvidia.com/gpu got two replicas of
    GPU3. It did not get two GPUs, whatever it would settle for."""
    _, token = world.add_pod("two-replicas", (3, 3), annotations={"gpupair.io/placement": placement},
                             on_kubelet=False)
    uuid_ = SEED.devices[3].uuid
    world.kubelet.pods.append(FakePod(NS, "two-replicas", [FakeContainer("main", {GPU: [
        FakeDevice(f"{uuid_}::0", (0,)), FakeDevice(f"{uuid_}::1", (0,))]})]))
    status, body, _ = await call(world, token)
    assert status == 200, body
    annotations = verdict_annotations(world.pod("two-replicas"))
    assert (annotations[verdict.GRANTED_KEY], annotations[verdict.VERDICT_KEY]) == ("GPU3+GPU3", "FAIL")
    assert body["deviceIds"] == [f"{uuid_}::0", f"{uuid_}::1"]
    [event] = world.events()
    assert "GPU3+GPU3" in event["note"]


@pytest.mark.parametrize("gpus, numa, link, result", [
    ((4, 5, 6, 7), "NUMA1+NUMA1+NUMA1+NUMA1", "NODE", "PASS"),
    ((2, 3, 4, 5), "NUMA0+NUMA0+NUMA1+NUMA1", "SYS", "FAIL"),
])
async def test_four_gpu_sets(world, gpus, numa, link, result):
    _, token = world.add_pod("train-4", gpus)
    status, body, _ = await call(world, token)
    assert status == 200, body
    annotations = verdict_annotations(world.pod("train-4"))
    assert annotations[verdict.GRANTED_KEY] == "+".join(f"GPU{i}" for i in gpus)
    assert (annotations[verdict.NUMA_KEY], annotations[verdict.LINK_KEY], annotations[verdict.VERDICT_KEY]) == (
        numa, link, result)
    assert len(world.events()) == (result == "FAIL")


@pytest.mark.parametrize("planned, match", [("GPU1+GPU2", "true"), ("GPU0+GPU1", "false")])
async def test_grant_is_compared_with_the_extenders_plan(world, planned, match):
    _, token = world.add_pod("planned", (1, 2), annotations={verdict.PLANNED_KEY: planned})
    status, body, _ = await call(world, token)
    assert status == 200
    assert verdict_annotations(world.pod("planned"))[verdict.PLAN_MATCH_KEY] == match
    assert body["verdict"]["planMatch"] == match


async def test_a_repeated_call_writes_nothing_new(world):
    _, token = world.add_pod("again", (3, 4))
    assert (await call(world, token))[0] == 200
    status, body, _ = await call(world, token)  # a restarted sidecar asks again
    assert status == 200 and body["verdict"]["result"] == "FAIL"
    assert len(world.pod_requests("again", "PATCH")) == 1
    assert len(world.events()) == 1


# --- refusals: forged or foreign callers ---------------------------------------------------------------


async def assert_refused(world: World, token: str | None, status: int, words: str, pod: str | None = None):
    got, body, headers = await call(world, token)
    assert got == status, body
    assert body["kind"] == "Status" and body["code"] == status and words in body["message"]
    if status == 401:
        assert headers["WWW-Authenticate"].startswith("Bearer")
    if pod is not None:
        assert world.pod_requests(pod, "PATCH") == []
        assert verdict_annotations(world.pod(pod)) == {}
    assert world.events() == []


async def test_forged_token_is_refused(world):
    world.add_pod("victim", (3, 4))
    await assert_refused(world, "eyJhbGciOiJSUzI1NiJ9.forged.signature", 401, "token rejected", pod="victim")
    # Nothing about the pod was read for an unproven caller.
    assert world.pod_requests("victim", "GET") == []


async def test_missing_or_malformed_authorization_is_refused(world):
    await assert_refused(world, None, 401, "Authorization")
    async with aiohttp.ClientSession() as session:
        async with session.post(world.url, headers={"Authorization": "Basic dXNlcjpwYXNz"}) as response:
            assert response.status == 401
    assert world.double.requests_to("/apis/authentication.k8s.io/v1/tokenreviews") == []


@pytest.mark.parametrize("body, words", [
    (b"[]", "JSON object, got list"),
    (b"not json", "not JSON"),
    (b"[" * 200 + b"]" * 200, "nested deeper"),
    (b'{"a": "\xff"}', "not JSON"),
    (b"{" + b" " * (1024 * 1024) + b"}", "too large"),
])
async def test_a_body_that_is_not_a_json_object_is_refused_before_any_review(world, body, words):
    _, token = world.add_pod("body", (1, 2))
    async with aiohttp.ClientSession() as session:
        async with session.post(world.url, data=body, headers={"Authorization": f"Bearer {token}"}) as response:
            status, answer = response.status, await response.json()
    assert status == 400 and answer["kind"] == "Status" and answer["reason"] == "BadRequest", answer
    assert words in answer["message"]
    assert world.double.requests_to("/apis/authentication.k8s.io/v1/tokenreviews") == []
    for empty in (b"", b" \n"):  # the body carries nothing: empty is as good as {}
        async with aiohttp.ClientSession() as session:
            async with session.post(world.url, data=empty, headers={"Authorization": f"Bearer {token}"}) as response:
                assert response.status == 200, await response.text()


async def test_token_for_another_audience_is_refused(world):
    # The pod's default API token (audience: the apiserver) must not work here.
    _, token = world.add_pod("wrong-aud", (1, 2), audiences=("https://kubernetes.default.svc.cluster.local",))
    await assert_refused(world, token, 401, "token rejected", pod="wrong-aud")


async def test_pod_on_another_node_is_refused(world):
    _, token = world.add_pod("elsewhere", (1, 2), bound_to=OTHER_NODE)
    await assert_refused(world, token, 403, OTHER_NODE, pod="elsewhere")


async def test_token_claiming_this_node_for_a_pod_bound_elsewhere_is_refused(world):
    _, token = world.add_pod("moved", (1, 2), bound_to=OTHER_NODE, claims={NODE_NAME_CLAIM: [NODE]})
    await assert_refused(world, token, 403, "bound to node", pod="moved")


async def test_token_without_node_claims_is_refused(world):
    _, token = world.add_pod("early", (1, 2), claims={NODE_NAME_CLAIM: None,
                                                      "authentication.kubernetes.io/node-uid": None})
    await assert_refused(world, token, 403, "no node claim", pod="early")


async def test_token_of_a_deleted_pod_does_not_work_for_its_namesake(world):
    # The apiserver's TokenReview rejects it (the bound pod's UID changed): 401, the pod unread.
    _, token = world.add_pod("reused", (1, 2))
    world.double.store.delete("pods", "reused", NS)
    world.double.store.create("pods", make_pod("reused", NS, gpus=2, node_name=NODE), NS)  # new uid
    await assert_refused(world, token, 401, "does not match service account pod ref claim", pod="reused")
    assert world.pod_requests("reused", "GET") == []


async def test_token_of_a_deleted_pod_is_refused(world):
    _, token = world.add_pod("gone", (1, 2))
    world.double.store.delete("pods", "gone", NS)
    await assert_refused(world, token, 401, "token has been invalidated")


async def test_pod_deleted_between_review_and_read_is_refused_like_the_review_would(world):
    _, token = world.add_pod("racing", (1, 2))
    world.double.fail_next(f"/api/v1/namespaces/{NS}/pods/racing", 404, method="GET", reason="NotFound")
    await assert_refused(world, token, 401, "no longer exists", pod="racing")


async def test_non_pod_tokens_are_refused(world):
    world.double.add_token("user-token", "alice", audiences=[AUDIENCE])
    await assert_refused(world, "user-token", 403, "not a service account")
    world.double.add_token("sa-token", f"system:serviceaccount:{NS}:default", audiences=[AUDIENCE])
    await assert_refused(world, "sa-token", 403, "not bound to a pod")


# --- not yet: the sidecar retries --------------------------------------------------------------------


async def test_pod_not_yet_known_to_the_kubelet_is_retryable(world):
    _, token = world.add_pod("young", (1, 2), on_kubelet=False)
    status, body, headers = await call(world, token)
    assert status == 503 and "does not list" in body["message"] and int(headers["Retry-After"]) > 0
    world.kubelet_knows("young", (1, 2))
    status, body, _ = await call(world, token)
    assert status == 200 and body["verdict"]["result"] == "PASS"


async def test_unknown_layout_and_apiserver_trouble_are_retryable(world):
    _, token = world.add_pod("wait", (1, 2))
    world.layout[0] = None
    status, body, _ = await call(world, token)
    assert status == 503 and "layout" in body["message"]
    world.layout[0] = SEED
    world.double.fail_next("/apis/authentication.k8s.io/v1/tokenreviews", 500)
    status, body, _ = await call(world, token)
    assert status == 503 and "500" in body["message"]
    assert (await call(world, token))[0] == 200


async def test_devices_missing_from_the_layout_are_retryable(world):
    _, token = world.add_pod("stale", (1, 2), on_kubelet=False)
    world.kubelet.pods.append(FakePod(NS, "stale", [FakeContainer("main", {GPU: [FakeDevice("GPU-unknown", (0,))]})]))
    status, body, _ = await call(world, token)
    assert status == 503 and "GPU-unknown" in body["message"]


# --- the real sidecar process ---------------------------------------------------------------------------


async def start_sidecar(world: World, token: str, tmp_path: Path, **env: str) -> asyncio.subprocess.Process:
    token_file = tmp_path / "token"
    token_file.write_text(token + "\n")
    port = world.url.split(":")[2].split("/")[0]
    environment = {
        "PATH": os.environ.get("PATH", ""), "PYTHONPATH": str(REPO),
        "HOST_IP": "127.0.0.1", "GPUPAIR_REPORTER_PORT": port, "GPUPAIR_VERIFY_TOKEN_PATH": str(token_file),
        "GPUPAIR_VERIFY_INITIAL_BACKOFF": "0.05", "GPUPAIR_VERIFY_MAX_BACKOFF": "0.2",
        # A cluster-wide proxy must not capture the node-local call.
        "HTTP_PROXY": "http://127.0.0.1:9", "http_proxy": "http://127.0.0.1:9",
        **env,
    }
    return await asyncio.create_subprocess_exec(
        sys.executable, "-m", "gpupair.command.cli", "verify", cwd=str(REPO), env=environment,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


async def stop(process: asyncio.subprocess.Process) -> int:
    process.send_signal(signal.SIGTERM)
    return await asyncio.wait_for(process.wait(), 30)


async def test_sidecar_prints_the_seed_row_and_idles_small_until_sigterm(world, tmp_path):
    _, token = world.add_pod("train-e2e", (1, 2))
    process = await start_sidecar(world, token, tmp_path)
    try:
        line = await asyncio.wait_for(process.stdout.readline(), 30)
        assert line.decode().rstrip("\n").split("\t") == [
            "-", "train-e2e", "Running", "GPU1+GPU2", "00000000:31:00.0+00000000:41:00.0", "NUMA0+NUMA0",
            "NODE", "PASS"]
        assert verdict_annotations(world.pod("train-e2e"))[verdict.VERDICT_KEY] == "PASS"
        assert process.returncode is None  # idles after the verdict
        rss = rss_kib(process.pid)
        assert rss < 30 * 1024, f"sidecar RSS {rss} KiB"
    finally:
        code = await stop(process)
    assert code == 0


async def test_sidecar_retries_until_the_kubelet_shows_the_pods_devices(world, tmp_path):
    _, token = world.add_pod("train-late", (3, 4), on_kubelet=False)
    process = await start_sidecar(world, token, tmp_path)
    try:
        retry = json.loads(await asyncio.wait_for(process.stderr.readline(), 30))
        assert retry["msg"] == "no verdict yet; retrying" and "503" in retry["reason"]
        world.kubelet_knows("train-late", (3, 4))
        line = await asyncio.wait_for(process.stdout.readline(), 30)
        assert line.decode().rstrip("\n").split("\t")[3:] == [
            "GPU3+GPU4", "00000000:61:00.0+00000000:81:00.0", "NUMA0+NUMA1", "SYS", "FAIL"]
        assert len(world.events()) == 1
    finally:
        assert await stop(process) == 0


async def test_sidecar_retries_while_the_reporter_is_unreachable_and_stops_on_sigterm(world, tmp_path):
    _, token = world.add_pod("train-down", (1, 2))
    process = await start_sidecar(world, token, tmp_path, GPUPAIR_REPORTER_PORT="9")  # nothing listens
    try:
        retry = json.loads(await asyncio.wait_for(process.stderr.readline(), 30))
        assert "unreachable" in retry["reason"]
    finally:
        assert await stop(process) == 0
    assert await process.stdout.read() == b""
