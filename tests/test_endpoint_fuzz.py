"""Hostile bodies at every HTTP endpoint gpupair serves, all sent the same way: never a 5xx, and
always an answer in the endpoint's own protocol shape.

The endpoints: the extender's filter, prioritize and bind (over a real loopback socket), the
webhook's /mutate (over real TLS, certificates from trustme) and the reporter's /v1/verify (its
real app, TokenReviews from the kube-apiserver double). Each gets the same seeded generator's
bodies, grown from real bodies recorded from kube-scheduler and kube-apiserver v1.36.2: deep
nesting (bare, and grafted inside a real body) around every limit that matters, numbers no float
holds, invalid UTF-8 and lone surrogates, values of the wrong type, flipped and cut bytes, random
bytes, and one body over the endpoint's size limit.
"""

from __future__ import annotations

import copy
import json
import random
import ssl
from collections import Counter
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import aiohttp
import pytest
import trustme
from aiohttp import web
from prometheus_client import CollectorRegistry

from gpupair.extender.app import build_app as extender_app
from gpupair.extender.http_server import HttpServer
from gpupair.extender.protocol import HOST_PRIORITY_LIST, ExtenderBindingResult, ExtenderFilterResult, PrioritizeError
from gpupair.kubewire.json_body import MAX_DEPTH
from gpupair.reporter.app import MAX_REQUEST_BYTES
from gpupair.reporter.app import build_app as reporter_app
from gpupair.reporter.verification import VerifyService
from tests.extender_support import make_extender
from tests.kube_double import kube_client_for, running_kube_double
from tests.real_k8s import REAL_K8S
from tests.layouts import seed_layout
from gpupair.webhook.admission import InjectOptions
from gpupair.webhook.app import MAX_BODY_BYTES as WEBHOOK_MAX_BODY
from gpupair.webhook.app import create_app as webhook_app
from gpupair.webhook.sidecar import SidecarOptions
from gpupair.command.tls import ReloadingTLS

SEED = 20261130
BODIES_PER_ENDPOINT = 2_000
EXTENDER_MAX_BODY = 1024 * 1024  # the extender's limit is a flag; a small one keeps the oversized body quick

# Depths on both sides of every limit: gpupair's own, orjson's encoder (254) and decoder (1,024),
# and Python's recursion limit (1,000).
DEPTHS = (8, MAX_DEPTH - 1, MAX_DEPTH, MAX_DEPTH + 1, 254, 255, 999, 1000, 1023, 1024, 1025, 50_000)
SHAPES = ("array", "object", "mixed", "unclosed")
HUGE_NUMBERS = (b"1e400", b"-1e400", b"1" + b"0" * 5000, b"-" + b"9" * 400, b"1e-400", b"-0",
                b"18446744073709551616", b"-9223372036854775809", b"9223372036854775807", b"0.1e999999999",
                b"123456789012345678901.5", b"NaN", b"Infinity", b"-Infinity", b"0x10", b"01", b"1.", b".5", b"+1")
BAD_TEXT = (b'"\xff"', b'"\xc3\x28"', b'"\xed\xa0\x80"', b'"\\ud800"', b'"\\udfff\\ud800x"', b'"\x00"',
            b'"\xf4\x90\x80\x80"', b'"\xc0\xaf"', b'"a\\', b'"\\u00"', b'"\t"', b"'single'")
WRONG_TYPES = (b"null", b"true", b"false", b"0", b"-1", b"3.5", b'""', b'"x"', b"[]", b"{}", b"[null]",
               b'{"": null}', b'"2"', b"[[]]")
SENTINEL = "\u0000gpupair-fuzz\u0000"


class Body(NamedTuple):
    kind: str
    raw: bytes


def nested(depth: int, shape: str) -> bytes:
    if shape == "array":
        return b"[" * depth + b"]" * depth
    if shape == "object":
        return b'{"a":' * depth + b"1" + b"}" * depth
    if shape == "mixed":
        return b'[{"k":' * (depth // 2) + b"null" + b"}]" * (depth // 2)
    return b"[" * depth  # never closed


def _paths(value: Any, prefix: tuple = ()) -> list[tuple]:
    found = [prefix]
    if isinstance(value, dict):
        for key, child in value.items():
            found += _paths(child, prefix + (key,))
    elif isinstance(value, list):
        for index, child in enumerate(value):
            found += _paths(child, prefix + (index,))
    return found


def graft(doc: Any, fragment: bytes, rng: random.Random) -> bytes:
    """``doc`` as JSON with ``fragment``, raw bytes, in place of one of its values (or as a new key)."""
    doc = copy.deepcopy(doc)
    path = rng.choice(_paths(doc)[1:] or [()])  # the bare fragment is sent on its own already
    if not path:
        return fragment
    parent = doc
    for key in path[:-1]:
        parent = parent[key]
    if isinstance(parent, dict) and rng.random() < 0.2:
        parent["gpupair-fuzz"] = SENTINEL
    else:
        parent[path[-1]] = SENTINEL
    return json.dumps(doc).encode().replace(json.dumps(SENTINEL).encode(), fragment, 1)


def mutate(raw: bytes, rng: random.Random) -> bytes:
    data = bytearray(raw)
    for _ in range(rng.randint(1, 4)):
        if not data:
            break
        at = rng.randrange(len(data))
        action = rng.choice(("flip", "insert", "delete", "cut"))
        if action == "flip":
            data[at] = rng.randrange(256)
        elif action == "insert":
            data[at:at] = bytes([rng.choice(b'[]{}",:\\0e-\xff')])
        elif action == "delete":
            del data[at]
        else:
            del data[at:]
    return bytes(data)


def hostile_bodies(seeds: list[bytes], count: int, seed: int) -> list[Body]:
    rng = random.Random(seed)
    docs = [json.loads(raw) for raw in seeds]
    bodies = [Body("deep", nested(depth, shape)) for depth in DEPTHS for shape in SHAPES]
    while len(bodies) < count:
        kind = rng.choice(("deep", "number", "text", "type", "bytes", "junk"))
        if kind == "bytes":
            raw = mutate(json.dumps(rng.choice(docs)).encode(), rng)
        elif kind == "junk":
            raw = rng.randbytes(rng.randint(0, 64))
        else:
            # One hostile value, in a body changed in another place too (a wrong type, or a
            # plausible random value), so that small bodies still make thousands of cases.
            other = rng.choice(WRONG_TYPES + (json.dumps(rng.randint(-10, 10**6)).encode(),
                                              json.dumps(rng.randbytes(4).hex()).encode()))
            raw = graft(json.loads(graft(rng.choice(docs), other, rng)), _fragment(kind, rng), rng)
        bodies.append(Body(kind, raw))
    return bodies


def _fragment(kind: str, rng: random.Random) -> bytes:
    if kind == "deep":
        return nested(rng.choice(DEPTHS), rng.choice(SHAPES))
    return rng.choice({"number": HUGE_NUMBERS, "text": BAD_TEXT, "type": WRONG_TYPES}[kind])


def test_the_generator_sends_every_kind_of_hostile_body():
    # The smallest seed (bind's four fields) gives the fewest places to graft into.
    bodies = hostile_bodies([(REAL_K8S / "bind-cache-true-01-gpu2.json").read_bytes()], BODIES_PER_ENDPOINT, SEED)
    kinds = Counter(body.kind for body in bodies)
    assert len(bodies) == BODIES_PER_ENDPOINT and len(set(bodies)) > 0.8 * len(bodies)
    assert set(kinds) == {"deep", "number", "text", "type", "bytes", "junk"}
    assert kinds["deep"] >= len(DEPTHS) * len(SHAPES) + 200
    deepest = [body for body in bodies if body.raw.count(b"[") + body.raw.count(b"{") > 1025]
    assert len(deepest) >= 50  # past orjson's own limit, not only past gpupair's


# --------------------------------------------------------------------------- the endpoints


@dataclass
class Endpoint:
    url: str
    check: Callable[[int, Any], None]  # raises AssertionError on an answer outside the protocol
    seeds: list[bytes]
    limit: int
    headers: dict[str, str] = field(default_factory=dict)
    request_options: dict[str, Any] = field(default_factory=dict)
    crashes: Callable[[], float] = lambda: 0.0  # the server's own count of handler failures


def _internal(error: str) -> bool:
    return "internal error" in error


def check_filter(status: int, answer: Any) -> None:
    assert status in (200, 400)
    result = ExtenderFilterResult.model_validate(answer)
    assert bool(result.Error) == (status == 400) and not _internal(result.Error)


def check_prioritize(status: int, answer: Any) -> None:
    assert status in (200, 400)
    if status == 200:
        HOST_PRIORITY_LIST.validate_python(answer)
    else:
        assert PrioritizeError.model_validate(answer).Error


def check_bind(status: int, answer: Any) -> None:
    assert status in (200, 400)
    error = ExtenderBindingResult.model_validate(answer).Error
    assert error and not _internal(error)  # no API here: never a silent success


def check_mutate(status: int, answer: Any) -> None:
    assert status in (200, 400)
    assert answer["apiVersion"] == "admission.k8s.io/v1" and answer["kind"] == "AdmissionReview"
    response = answer["response"]
    if status == 200:
        assert response["allowed"] is True and response["uid"]
    else:
        assert response["allowed"] is False and response["status"]["code"] == 400 and response["status"]["message"]


def check_verify(status: int, answer: Any) -> None:
    assert status in (400, 401)  # a JSON object passes the body check and meets the forged token
    assert answer["kind"] == "Status" and answer["code"] == status and answer["message"]


def _sample(registry: CollectorRegistry, name: str, **labels: str) -> Callable[[], float]:
    return lambda: registry.get_sample_value(name, labels) or 0.0


@asynccontextmanager
async def _site(app: web.Application, ssl_context: ssl.SSLContext | None = None) -> AsyncIterator[int]:
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=ssl_context)
    await site.start()
    try:
        yield runner.addresses[0][1]
    finally:
        await runner.cleanup()


@asynccontextmanager
async def _listening(server: HttpServer) -> AsyncIterator[int]:
    await server.start("127.0.0.1", 0)
    try:
        yield server.port
    finally:
        await server.close()


@asynccontextmanager
async def extender_endpoint(verb: str) -> AsyncIterator[Endpoint]:
    extender = make_extender()
    check = {"filter": check_filter, "prioritize": check_prioritize, "bind": check_bind}[verb]
    fixtures = {"bind": ["bind-cache-true-01-gpu2.json"]}.get(verb, [
        "cache-true-filter-01-gpu2.json", "cache-true-prioritize-01-gpu2.json", "cache-false-filter-02-init1-app2.json"])
    async with _listening(extender_app(extender, max_body=EXTENDER_MAX_BODY)) as port:
        yield Endpoint(f"http://127.0.0.1:{port}/{verb}", check, [(REAL_K8S / f).read_bytes() for f in fixtures],
                       EXTENDER_MAX_BODY,
                       crashes=_sample(extender.metrics.registry, "gpupair_extender_requests_total",
                                       verb=verb, outcome="error"))
    await extender.binder.drain()


@asynccontextmanager
async def webhook_endpoint(tmp_path) -> AsyncIterator[Endpoint]:
    ca = trustme.CA()
    service = "gpupair-webhook.gpupair-system.svc"
    leaf = ca.issue_cert(service)
    cert, key = tmp_path / "tls.crt", tmp_path / "tls.key"
    leaf.cert_chain_pems[0].write_to_path(str(cert))
    leaf.private_key_pem.write_to_path(str(key))
    client = ssl.create_default_context()
    ca.configure_trust(client)
    registry = CollectorRegistry()
    app = webhook_app(InjectOptions(sidecar=SidecarOptions(image="registry.example/gpupair:test")), registry)
    async with _site(app, ReloadingTLS(str(cert), str(key)).context) as port:
        yield Endpoint(f"https://127.0.0.1:{port}/mutate?timeout=5s", check_mutate,
                       [(REAL_K8S / "admission-pod-create-p1-05-job-generatename.json").read_bytes()],
                       WEBHOOK_MAX_BODY, request_options={"ssl": client, "server_hostname": service},
                       crashes=_sample(registry, "gpupair_webhook_reviews_total", outcome="error"))


@asynccontextmanager
async def verify_endpoint() -> AsyncIterator[Endpoint]:
    layout = seed_layout()
    async with running_kube_double() as double, kube_client_for(double) as api:
        registry = CollectorRegistry()
        service = VerifyService(api, pod_resources=None, layout=lambda: layout, node_name="gpu-node-1",
                                registry=registry)
        async with _site(reporter_app(registry, extra_routes=[web.post("/v1/verify", service.handle)])) as port:
            # Any JSON object is a valid body here, so real protocol bodies make good seeds too.
            seeds = [b"{}", (REAL_K8S / "bind-cache-true-01-gpu2.json").read_bytes(),
                     (REAL_K8S / "admission-pod-create-p1-05-job-generatename.json").read_bytes()]
            yield Endpoint(f"http://127.0.0.1:{port}/v1/verify", check_verify, seeds, MAX_REQUEST_BYTES,
                           headers={"Authorization": "Bearer forged-token"},
                           crashes=_sample(registry, "gpupair_reporter_verifications_total", outcome="500"))


@asynccontextmanager
async def endpoint(name: str, tmp_path) -> AsyncIterator[Endpoint]:
    if name == "webhook-mutate":
        context = webhook_endpoint(tmp_path)
    elif name == "reporter-verify":
        context = verify_endpoint()
    else:
        context = extender_endpoint(name.removeprefix("extender-"))
    async with context as running:
        yield running


@pytest.mark.parametrize("name", ["extender-filter", "extender-prioritize", "extender-bind", "webhook-mutate",
                                  "reporter-verify"])
async def test_hostile_bodies_never_get_a_5xx(name, tmp_path):
    async with endpoint(name, tmp_path) as target:
        bodies = hostile_bodies(target.seeds, BODIES_PER_ENDPOINT, SEED)
        bodies.append(Body("oversized", b'{"a": "' + b"x" * target.limit + b'"}'))
        statuses: Counter[int] = Counter()
        wrong: list[str] = []
        headers = {"Content-Type": "application/json", **target.headers}
        async with aiohttp.ClientSession() as session:
            for body in bodies:
                async with session.post(target.url, data=body.raw, headers=headers,
                                        **target.request_options) as response:
                    status, text = response.status, await response.text()
                statuses[status] += 1
                try:
                    target.check(status, json.loads(text))
                except (AssertionError, ValueError, KeyError, TypeError) as exc:
                    wrong.append(f"{body.kind} {body.raw[:80]!r}... -> {status} {text[:160]!r} ({exc!r})")
        assert not wrong, f"{len(wrong)} of {len(bodies)} answers outside the protocol:\n" + "\n".join(wrong[:10])
        assert not [s for s in statuses if s >= 500], statuses
        assert target.crashes() == 0
        assert len(bodies) > BODIES_PER_ENDPOINT and len(statuses) >= 1
