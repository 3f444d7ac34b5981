"""The webhook's certificate expiry metric: read from the certificate file at scrape time, so it
follows a rotation; and served by the running `gpupair webhook` on /metrics over its own TLS."""

from __future__ import annotations

import datetime as dt
import http.client
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import trustme
from cryptography import x509
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

from tests.webhook.test_webhook_server import SERVICE_NAME, client_context, free_port, write_pair
from gpupair.webhook.cert_expiry import NAME, CertificateExpiry
from gpupair.webhook.certs import make_ca

NOW = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)
REPO = Path(__file__).resolve().parents[2]


def test_expiry_follows_the_file_and_is_absent_when_unreadable(tmp_path):
    path = tmp_path / "tls.crt"
    registry = CollectorRegistry()
    registry.register(CertificateExpiry(str(path)))
    assert registry.get_sample_value(NAME) is None  # no file: no sample, no error
    path.write_bytes(make_ca("first", days=10, now=NOW).cert_pem)
    assert registry.get_sample_value(NAME) == (NOW + dt.timedelta(days=10)).timestamp()
    path.write_bytes(make_ca("rotated", days=90, now=NOW).cert_pem)
    assert registry.get_sample_value(NAME) == (NOW + dt.timedelta(days=90)).timestamp()
    path.write_text("-----BEGIN CERTIFICATE-----\nnot base64\n-----END CERTIFICATE-----\n")
    assert registry.get_sample_value(NAME) is None


def scrape(port: int, ca: trustme.CA) -> str:
    raw = socket.create_connection(("127.0.0.1", port), timeout=30)
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    connection.sock = client_context(ca).wrap_socket(raw, server_hostname=SERVICE_NAME)
    try:
        connection.request("GET", "/metrics")
        response = connection.getresponse()
        assert response.status == 200
        return response.read().decode()
    finally:
        connection.close()


def test_gpupair_webhook_serves_its_certificate_expiry(tmp_path):
    ca = trustme.CA()
    leaf = ca.issue_cert(SERVICE_NAME)
    cert_path, key_path = write_pair(leaf, tmp_path)
    expected = x509.load_pem_x509_certificate(leaf.cert_chain_pems[0].bytes()).not_valid_after_utc.timestamp()
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "gpupair.command.cli", "webhook", "--host", "127.0.0.1", "--port", str(port),
         "--tls-cert-file", str(cert_path), "--tls-private-key-file", str(key_path),
         "--verifier-image", "registry.example/v:1"],
        cwd=REPO, env={"PYTHONPATH": str(REPO)}, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while True:  # wait for the listener (a startup deadline, not a timing assertion)
            try:
                text = scrape(port, ca)
                break
            except OSError:
                assert process.poll() is None, process.communicate()[1]
                assert time.monotonic() < deadline, "webhook did not start"
                time.sleep(0.1)
    finally:
        process.send_signal(signal.SIGTERM)
        process.communicate(timeout=60)
    values = [sample.value for family in text_string_to_metric_families(text) for sample in family.samples
              if sample.name == NAME]
    assert values == [expected]
