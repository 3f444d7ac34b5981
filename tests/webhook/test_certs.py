"""`gpupair certs`: the certificate math directly, a real TLS handshake with what it makes, and the
API part against a small apiserver double (real aiohttp server on loopback) that stores Secrets and
MutatingWebhookConfigurations the way the apiserver does: resourceVersion checks on update,
AlreadyExists on create, strategic merge of webhooks by name, Status bodies for errors.
(tests/kube_double.py serves nodes, pods and events only.)"""

from __future__ import annotations

import asyncio
import base64
import copy
import datetime as dt
import json
import os
import ssl
import sys
from pathlib import Path

import pytest
import yaml
from aiohttp import web
from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID

from gpupair.kubeclient.kube import api_client
from gpupair.webhook import certs

REPO = Path(__file__).resolve().parents[2]
NS, SERVICE, SECRET, CONFIG = "gpupair-system", "gpupair-webhook", "gpupair-webhook-tls", "gpupair-webhook"
NAMES = certs.service_dns_names(SERVICE, NS)
NOW = dt.datetime(2026, 11, 30, 12, 0, tzinfo=dt.timezone.utc)
MONTH = dt.timedelta(days=30)


def pems(bundle: bytes) -> list[x509.Certificate]:
    return x509.load_pem_x509_certificates(bundle)


# --------------------------------------------------------------------------- pure part


def test_service_names_cover_every_form_the_apiserver_may_use():
    assert NAMES == ["gpupair-webhook", "gpupair-webhook.gpupair-system", "gpupair-webhook.gpupair-system.svc",
                     "gpupair-webhook.gpupair-system.svc.cluster.local"]


def test_ca_is_a_ca_that_signs_only_leaves():
    ca = certs.make_ca("test-ca", 365, NOW)
    constraints = ca.cert.extensions.get_extension_for_class(x509.BasicConstraints)
    assert constraints.critical and constraints.value.ca and constraints.value.path_length == 0
    usage = ca.cert.extensions.get_extension_for_class(x509.KeyUsage).value
    assert usage.key_cert_sign and usage.crl_sign
    ca.cert.verify_directly_issued_by(ca.cert)  # self-signed
    assert ca.cert.not_valid_after_utc == NOW + dt.timedelta(days=365)
    assert ca.cert.not_valid_before_utc < NOW


def test_serving_certificate_for_the_service():
    ca = certs.make_ca("test-ca", 365, NOW)
    leaf = certs.make_serving_cert(ca, NAMES, 90, NOW)
    leaf.cert.verify_directly_issued_by(ca.cert)
    sans = leaf.cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert sans.get_values_for_type(x509.DNSName) == NAMES
    assert leaf.cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca is False
    assert leaf.cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value == \
        x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH])
    assert leaf.cert.not_valid_after_utc == NOW + dt.timedelta(days=90)
    # never outlives its CA
    short_ca = certs.make_ca("short", 10, NOW)
    assert certs.make_serving_cert(short_ca, NAMES, 365, NOW).cert.not_valid_after_utc == \
        short_ca.cert.not_valid_after_utc


@pytest.mark.parametrize("bad", [{"days": 0}, {"names": []}])
def test_bad_arguments_are_refused(bad):
    ca = certs.make_ca("test-ca", 30, NOW)
    with pytest.raises(ValueError):
        certs.make_serving_cert(ca, bad.get("names", NAMES), bad.get("days", 30), NOW)


async def test_a_client_that_trusts_the_ca_accepts_every_service_name(tmp_path):
    ca = certs.make_ca("test-ca", 30)
    leaf = certs.make_serving_cert(ca, NAMES, 30)
    (tmp_path / "tls.crt").write_bytes(leaf.cert_pem)
    (tmp_path / "tls.key").write_bytes(leaf.key_pem)
    server_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_ctx.load_cert_chain(tmp_path / "tls.crt", tmp_path / "tls.key")

    async def answer(reader, writer):
        writer.write(b"ok")
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(answer, "127.0.0.1", 0, ssl=server_ctx)
    port = server.sockets[0].getsockname()[1]
    client_ctx = ssl.create_default_context(cadata=ca.cert_pem.decode())
    try:
        for name in NAMES:
            reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=client_ctx, server_hostname=name)
            assert await reader.read() == b"ok"
            writer.close()
        with pytest.raises(ssl.SSLCertVerificationError):
            await asyncio.open_connection("127.0.0.1", port, ssl=client_ctx,
                                          server_hostname="other.gpupair-system.svc")
        stranger = ssl.create_default_context(cadata=certs.make_ca("other-ca", 30).cert_pem.decode())
        with pytest.raises(ssl.SSLCertVerificationError):
            await asyncio.open_connection("127.0.0.1", port, ssl=stranger, server_hostname=NAMES[2])
    finally:
        server.close()
        await server.wait_closed()


def issued(days: int = 365, names: list[str] = NAMES, now: dt.datetime = NOW) -> dict[str, str]:
    ca = certs.make_ca("test-ca", days, now)
    return certs.secret_data(ca, certs.make_serving_cert(ca, names, days, now))


def test_a_good_secret_is_kept():
    assert certs.check_secret(issued(), "kubernetes.io/tls", NAMES, MONTH, NOW) is None


def test_renewal_starts_thirty_days_ahead():
    data = issued(days=365)
    assert certs.check_secret(data, "kubernetes.io/tls", NAMES, MONTH, NOW + dt.timedelta(days=334)) is None
    reason = certs.check_secret(data, "kubernetes.io/tls", NAMES, MONTH, NOW + dt.timedelta(days=336))
    assert reason and "expires" in reason


def test_bad_secrets_are_reissued():
    good = issued()
    other = issued()
    cases = {
        "type": (good, "Opaque"),
        "names": (issued(names=["gpupair-webhook.other.svc"]), "kubernetes.io/tls"),
        "key": ({**good, "tls.key": other["tls.key"]}, "kubernetes.io/tls"),
        "chain": ({**good, "ca.crt": other["ca.crt"]}, "kubernetes.io/tls"),
        "garbage": ({**good, "tls.crt": base64.b64encode(b"not a certificate").decode()}, "kubernetes.io/tls"),
        "missing": ({"tls.crt": good["tls.crt"]}, "kubernetes.io/tls"),
        "future": (issued(now=NOW + dt.timedelta(days=2)), "kubernetes.io/tls"),
    }
    reasons = {k: certs.check_secret(d, t, NAMES, MONTH, NOW) for k, (d, t) in cases.items()}
    assert all(reasons.values()), reasons
    assert "does not name" in reasons["names"] and "does not belong" in reasons["key"]
    assert "not signed by ca.crt" in reasons["chain"] and "unreadable" in reasons["garbage"]


# --------------------------------------------------------------------------- API double


class ApiDouble:
    """Secrets in namespaces and MutatingWebhookConfigurations, as the apiserver serves them."""

    def __init__(self) -> None:
        self.secrets: dict[tuple[str, str], dict] = {}
        self.configs: dict[str, dict] = {}
        self.requests: list[tuple[str, str, str, dict | None]] = []  # method, path, content type, body
        self.conflict_next_update = 0
        self.rv = 100
        self.port = 0
        self._runner: web.AppRunner | None = None

    def _bump(self, obj: dict) -> dict:
        self.rv += 1
        obj["metadata"]["resourceVersion"] = str(self.rv)
        return obj

    @staticmethod
    def status(code: int, reason: str, message: str) -> web.Response:
        return web.json_response({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                                  "message": message, "reason": reason, "code": code}, status=code)

    @web.middleware
    async def record(self, request: web.Request, handler):
        raw = await request.read()
        self.requests.append((request.method, request.path, request.content_type, json.loads(raw) if raw else None))
        return await handler(request)

    async def start(self) -> None:
        app = web.Application(middlewares=[self.record])
        r = app.router
        r.add_post("/api/v1/namespaces/{ns}/secrets", self.create_secret)
        r.add_get("/api/v1/namespaces/{ns}/secrets/{name}", self.get_secret)
        r.add_put("/api/v1/namespaces/{ns}/secrets/{name}", self.replace_secret)
        base = "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/{name}"
        r.add_get(base, self.get_config)
        r.add_patch(base, self.patch_config)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.port = self._runner.addresses[0][1]

    async def stop(self) -> None:
        await self._runner.cleanup()

    def kubeconfig(self, path: Path) -> Path:
        path.write_text(yaml.safe_dump({
            "apiVersion": "v1", "kind": "Config", "current-context": "double",
            "clusters": [{"name": "double", "cluster": {"server": f"http://127.0.0.1:{self.port}"}}],
            "users": [{"name": "certs", "user": {"token": "test-token"}}],
            "contexts": [{"name": "double", "context": {"cluster": "double", "user": "certs"}}],
        }))
        return path

    def writes(self) -> list[tuple[str, str]]:
        return [(m, p) for m, p, _, _ in self.requests if m != "GET"]

    async def get_secret(self, request: web.Request) -> web.Response:
        key = (request.match_info["ns"], request.match_info["name"])
        if key not in self.secrets:
            return self.status(404, "NotFound", f'secrets "{key[1]}" not found')
        return web.json_response(self.secrets[key])

    async def create_secret(self, request: web.Request) -> web.Response:
        body = await request.json()
        key = (request.match_info["ns"], body["metadata"]["name"])
        if key in self.secrets:
            return self.status(409, "AlreadyExists", f'secrets "{key[1]}" already exists')
        if body.get("type") == "kubernetes.io/tls" and not {"tls.crt", "tls.key"} <= set(body.get("data") or {}):
            return self.status(422, "Invalid", "tls.crt and tls.key are required")
        body["metadata"].update(namespace=key[0], uid="s-1", creationTimestamp="2026-11-30T12:00:00Z")
        self.secrets[key] = self._bump(body)
        return web.json_response(body, status=201)

    async def replace_secret(self, request: web.Request) -> web.Response:
        body = await request.json()
        key = (request.match_info["ns"], request.match_info["name"])
        old = self.secrets.get(key)
        if old is None:
            return self.status(404, "NotFound", f'secrets "{key[1]}" not found')
        if self.conflict_next_update:  # someone else wrote it first
            self.conflict_next_update -= 1
            self._bump(old)
        if body["metadata"].get("resourceVersion") != old["metadata"]["resourceVersion"]:
            return self.status(409, "Conflict", f'Operation cannot be fulfilled on secrets "{key[1]}": '
                                                "the object has been modified; please apply your changes "
                                                "to the latest version and try again")
        if body.get("type") != old.get("type"):
            return self.status(422, "Invalid", "type: Invalid value: field is immutable")
        body["metadata"].update(uid=old["metadata"]["uid"], creationTimestamp=old["metadata"]["creationTimestamp"])
        self.secrets[key] = self._bump(body)
        return web.json_response(body)

    async def get_config(self, request: web.Request) -> web.Response:
        name = request.match_info["name"]
        if name not in self.configs:
            return self.status(404, "NotFound", f'mutatingwebhookconfigurations.admissionregistration.k8s.io '
                                                f'"{name}" not found')
        return web.json_response(self.configs[name])

    async def patch_config(self, request: web.Request) -> web.Response:
        name = request.match_info["name"]
        if name not in self.configs:
            return self.status(404, "NotFound", f'"{name}" not found')
        if request.content_type != "application/strategic-merge-patch+json":
            return self.status(415, "UnsupportedMediaType", f"unsupported {request.content_type}")
        patch = await request.json()
        new = copy.deepcopy(self.configs[name])
        for entry in patch.get("webhooks", []):  # patchMergeKey: name
            target = next((w for w in new["webhooks"] if w["name"] == entry["name"]), None)
            if target is None:
                return self.status(422, "Invalid", f"webhooks[{entry['name']}]: sideEffects: Required value")
            for key, value in entry.items():
                if isinstance(value, dict):
                    target.setdefault(key, {}).update(value)
                else:
                    target[key] = value
        self.configs[name] = self._bump(new)
        return web.json_response(new)

    def add_config(self, webhooks: int = 2) -> dict:
        shipped = yaml.safe_load((REPO / "deploy/base/webhook/mutatingwebhookconfiguration.yaml").read_text())
        hooks = [copy.deepcopy(shipped["webhooks"][0]) for _ in range(webhooks)]
        for i, hook in enumerate(hooks[1:], 1):
            hook["name"] = f"extra{i}.gpupair.io"
        shipped["webhooks"] = hooks
        shipped["metadata"].update(uid="m-1", generation=1, creationTimestamp="2026-11-30T12:00:00Z")
        self.configs[shipped["metadata"]["name"]] = self._bump(shipped)
        return shipped

    def bundle(self) -> list[bytes]:
        return [base64.b64decode(w["clientConfig"].get("caBundle", "")) for w in self.configs[CONFIG]["webhooks"]]


@pytest.fixture
async def double():
    d = ApiDouble()
    await d.start()
    try:
        yield d
    finally:
        await d.stop()


async def run_ensure(double: ApiDouble, tmp_path: Path, now: dt.datetime | None = None) -> certs.CertOutcome:
    api = await api_client(str(double.kubeconfig(tmp_path / "kubeconfig")))
    async with api:
        return await certs.ensure(api, namespace=NS, service=SERVICE, secret=SECRET, webhook_config=CONFIG,
                                  days=365, renew_within=MONTH, now=now)


def stored(double: ApiDouble) -> dict[str, bytes]:
    return {k: base64.b64decode(v) for k, v in double.secrets[(NS, SECRET)]["data"].items()}


async def test_first_run_creates_the_secret_and_fills_every_ca_bundle(double, tmp_path):
    double.add_config(webhooks=2)
    outcome = await run_ensure(double, tmp_path)
    assert outcome == certs.CertOutcome(True, "missing", True)
    secret = double.secrets[(NS, SECRET)]
    assert secret["type"] == "kubernetes.io/tls"
    assert secret["metadata"]["labels"] == {"app.kubernetes.io/managed-by": "gpupair-certs"}
    data = stored(double)
    assert set(data) == {"tls.crt", "tls.key", "ca.crt"}
    assert certs.check_secret(secret["data"], secret["type"], NAMES, MONTH) is None
    assert double.bundle() == [data["ca.crt"], data["ca.crt"]]
    # the caBundle is written before the Secret, as a strategic merge patch keyed by webhook name
    assert double.writes() == [
        ("PATCH", f"/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/{CONFIG}"),
        ("POST", f"/api/v1/namespaces/{NS}/secrets"),
    ]
    patch = next(r for r in double.requests if r[0] == "PATCH")
    assert patch[2] == "application/strategic-merge-patch+json"
    assert [w["name"] for w in patch[3]["webhooks"]] == ["verifier.gpupair.io", "extra1.gpupair.io"]
    assert set(patch[3]["webhooks"][0]) == {"name", "clientConfig"}
    hook = double.configs[CONFIG]["webhooks"][0]
    assert hook["clientConfig"]["service"]["path"] == "/mutate", "the rest of the webhook is untouched"


async def test_second_run_changes_nothing(double, tmp_path):
    double.add_config()
    await run_ensure(double, tmp_path)
    before = copy.deepcopy(double.secrets[(NS, SECRET)])
    double.requests.clear()
    assert await run_ensure(double, tmp_path) == certs.CertOutcome(False, "kept", False)
    assert double.writes() == []
    assert double.secrets[(NS, SECRET)] == before


OWNER = {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingWebhookConfiguration",
         "name": CONFIG, "uid": "m-1"}


async def test_the_secret_is_owned_by_its_webhook_configuration(double, tmp_path):
    # so the garbage collector removes it once gpupair is uninstalled
    double.add_config()
    await run_ensure(double, tmp_path)
    assert double.secrets[(NS, SECRET)]["metadata"]["ownerReferences"] == [OWNER]


async def test_a_secret_without_an_owner_is_adopted_and_kept(double, tmp_path):
    double.add_config()
    await run_ensure(double, tmp_path)
    before = copy.deepcopy(double.secrets[(NS, SECRET)])
    del double.secrets[(NS, SECRET)]["metadata"]["ownerReferences"]  # as written before owners were set
    double.requests.clear()
    assert await run_ensure(double, tmp_path) == certs.CertOutcome(False, "kept", False)
    assert double.writes() == [("PUT", f"/api/v1/namespaces/{NS}/secrets/{SECRET}")]
    after = double.secrets[(NS, SECRET)]
    assert after["metadata"]["ownerReferences"] == [OWNER]
    assert after["data"] == before["data"], "adoption changes no certificate"


async def test_a_recreated_configuration_becomes_the_owner(double, tmp_path):
    double.add_config()
    await run_ensure(double, tmp_path)
    double.add_config()["metadata"]["uid"] = "m-2"  # deleted and re-applied
    await run_ensure(double, tmp_path)
    assert double.secrets[(NS, SECRET)]["metadata"]["ownerReferences"] == [{**OWNER, "uid": "m-2"}]


async def test_a_recreated_webhook_configuration_gets_the_ca_back(double, tmp_path):
    double.add_config()
    await run_ensure(double, tmp_path)
    double.add_config()  # e.g. deleted and re-applied: no caBundle
    double.requests.clear()
    assert await run_ensure(double, tmp_path) == certs.CertOutcome(False, "kept", True)
    assert [m for m, _ in double.writes()] == ["PATCH"]
    assert set(double.bundle()) == {stored(double)["ca.crt"]}


async def test_rotation_trusts_old_and_new_ca_until_the_next_run(double, tmp_path):
    double.add_config()
    await run_ensure(double, tmp_path, now=NOW - dt.timedelta(days=340))  # expires in 25 days
    old = stored(double)
    rv = double.secrets[(NS, SECRET)]["metadata"]["resourceVersion"]
    double.requests.clear()
    outcome = await run_ensure(double, tmp_path, now=NOW)
    assert outcome.issued and "expires" in outcome.reason
    put = next(r for r in double.requests if r[0] == "PUT")
    assert put[3]["metadata"]["resourceVersion"] == rv, "optimistic concurrency on replace"
    new = stored(double)
    assert new["ca.crt"] != old["ca.crt"]
    assert pems(double.bundle()[0]) == pems(new["ca.crt"] + old["ca.crt"])
    # the next run keeps the new Secret and drops the old CA from the bundle
    assert await run_ensure(double, tmp_path, now=NOW) == certs.CertOutcome(False, "kept", True)
    assert double.bundle() == [new["ca.crt"], new["ca.crt"]]


async def test_a_concurrent_writer_makes_it_start_over(double, tmp_path):
    double.add_config()
    await run_ensure(double, tmp_path, now=NOW - dt.timedelta(days=340))
    double.conflict_next_update = 1
    double.requests.clear()
    outcome = await run_ensure(double, tmp_path, now=NOW)
    assert outcome.issued
    assert [m for m, _, _, _ in double.requests if m == "PUT"] == ["PUT", "PUT"]
    secret = double.secrets[(NS, SECRET)]
    assert certs.check_secret(secret["data"], secret["type"], NAMES, MONTH, NOW) is None
    assert stored(double)["ca.crt"] in double.bundle()[0]


async def test_missing_webhook_configuration_is_an_error_and_writes_nothing(double, tmp_path):
    with pytest.raises(certs.CertsError, match="MutatingWebhookConfiguration gpupair-webhook not found"):
        await run_ensure(double, tmp_path)
    assert double.writes() == []


async def test_a_foreign_secret_of_another_type_is_left_alone(double, tmp_path):
    double.add_config()
    double.secrets[(NS, SECRET)] = {"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
                                    "metadata": {"name": SECRET, "namespace": NS, "resourceVersion": "7", "uid": "x",
                                                 "creationTimestamp": "2026-11-30T12:00:00Z"},
                                    "data": {"password": base64.b64encode(b"hunter2").decode()}}
    with pytest.raises(certs.CertsError, match="has type 'Opaque'; delete it"):
        await run_ensure(double, tmp_path)
    assert double.writes() == []


async def command(double: ApiDouble, tmp_path: Path, *extra: str) -> tuple[int, list[dict]]:
    """`gpupair certs` as the Job runs it: a separate process, configured through GPUPAIR_* env."""
    env = {**os.environ, "GPUPAIR_KUBECONFIG": str(double.kubeconfig(tmp_path / "kubeconfig")),
           "GPUPAIR_CERTS_NAMESPACE": NS, "GPUPAIR_CERTS_SERVICE": SERVICE, "GPUPAIR_CERTS_SECRET": SECRET,
           "GPUPAIR_CERTS_WEBHOOK_CONFIG": CONFIG, "GPUPAIR_CERTS_DAYS": "90"}
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "gpupair.command.cli", "certs", *extra, cwd=REPO, env=env,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    _, err = await asyncio.wait_for(proc.communicate(), timeout=60)
    return proc.returncode, [json.loads(line) for line in err.decode().splitlines() if line.startswith("{")]


async def test_the_command_as_the_job_runs_it(double, tmp_path):
    double.add_config()
    code, logs = await command(double, tmp_path)
    assert code == 0, logs
    assert any(entry["msg"] == "certificate issued" and entry["reason"] == "missing" for entry in logs)
    leaf = x509.load_pem_x509_certificate(stored(double)["tls.crt"])
    assert leaf.not_valid_after_utc - leaf.not_valid_before_utc == dt.timedelta(days=90, minutes=5)
    code, logs = await command(double, tmp_path)
    assert code == 0 and any(entry["msg"] == "certificate kept" for entry in logs)


async def test_the_command_fails_clearly_without_the_webhook_configuration(double, tmp_path):
    code, logs = await command(double, tmp_path)
    assert code == 1
    assert [e["msg"] for e in logs if e["level"] == "error"] == [
        "MutatingWebhookConfiguration gpupair-webhook not found; apply the gpupair manifests first (the Job retries)"]


async def test_the_command_refuses_nonsense_flags(double, tmp_path):
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "gpupair.command.cli", "certs", "--days", "10", "--renew-within-days", "30",
        cwd=REPO, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    _, err = await proc.communicate()
    assert proc.returncode != 0 and b"--renew-within-days" in err
