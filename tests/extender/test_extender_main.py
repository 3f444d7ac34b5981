"""`gpupair extender` as a process: flags, kubeconfig, readiness after the first list, HTTPS
with a trustme certificate, a clean exit on SIGTERM."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import ssl
import sys
from pathlib import Path

import aiohttp
import trustme

from tests.extender_support import eventually, recorded_for_double, report_annotations
from tests.kube_double import make_node, running_kube_double

ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def kubeconfig(path: Path, server: str) -> Path:
    path.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "double",
        "clusters": [{"name": "double", "cluster": {"server": server}}],
        "users": [{"name": "nobody", "user": {}}],
        "contexts": [{"name": "double", "context": {"cluster": "double", "user": "nobody"}}],
    }))
    return path


async def start(*args: str) -> asyncio.subprocess.Process:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return await asyncio.create_subprocess_exec(
        sys.executable, "-m", "gpupair.command.cli", "extender", *args, cwd=ROOT, env=env,
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE)


async def stop(process: asyncio.subprocess.Process) -> tuple[int, str]:
    process.send_signal(signal.SIGTERM)
    _, err = await asyncio.wait_for(process.communicate(), 20)
    return process.returncode, err.decode()


async def answers_ok(session: aiohttp.ClientSession, url: str) -> bool:
    """True once ``url`` answers 200; False while nothing listens yet."""
    try:
        async with session.get(url) as response:
            return response.status == 200
    except aiohttp.ClientConnectionError:
        return False


async def test_serves_after_the_first_list_and_exits_cleanly_on_sigterm(tmp_path):
    async with running_kube_double() as double:
        double.store.create("nodes", make_node("gpu-node-a", annotations=report_annotations({0, 1, 4}, node="a")))
        double.store.create("nodes", make_node("gpu-node-b", annotations=report_annotations({0, 4}, node="b")))
        port = free_port()
        process = await start("--host", "127.0.0.1", "--port", str(port),
                              "--kubeconfig", str(kubeconfig(tmp_path / "kubeconfig", double.url)),
                              "--stale-after", "0")
        base = f"http://127.0.0.1:{port}"
        try:
            async with aiohttp.ClientSession() as session:
                await eventually(lambda: answers_ok(session, f"{base}/readyz"), timeout=30, what="extender ready")
                async with session.post(f"{base}/filter", json=recorded_for_double("cache-true-filter-01-gpu2.json")) as response:
                    answer = await response.json()
        finally:
            code, log = await stop(process)
    assert answer["NodeNames"] == ["gpu-node-a"] and list(answer["FailedNodes"]) == ["gpu-node-b"]
    assert code == 0
    lines = [json.loads(line) for line in log.splitlines() if line.startswith("{")]
    messages = [line["msg"] for line in lines]
    assert "node cache ready" in messages and "shutting down" in messages


async def test_https_with_a_given_certificate_reloaded_when_it_changes(tmp_path):
    """gpupair.command.tls serves the extender as it serves the webhook: a rotated pair is picked up
    by the next connection, without a restart."""
    first, second = trustme.CA(), trustme.CA()

    def install(ca: trustme.CA) -> None:
        cert = ca.issue_cert("127.0.0.1")
        cert.private_key_and_cert_chain_pem.write_to_path(str(tmp_path / "tls.pem.new"))
        cert.private_key_pem.write_to_path(str(tmp_path / "tls.key.new"))
        os.replace(tmp_path / "tls.pem.new", tmp_path / "tls.pem")
        os.replace(tmp_path / "tls.key.new", tmp_path / "tls.key")

    def trusting(ca: trustme.CA) -> aiohttp.TCPConnector:
        context = ssl.create_default_context()
        ca.configure_trust(context)
        return aiohttp.TCPConnector(ssl=context)

    install(first)
    async with running_kube_double() as double:
        port = free_port()
        process = await start("--host", "127.0.0.1", "--port", str(port),
                              "--kubeconfig", str(kubeconfig(tmp_path / "kubeconfig", double.url)),
                              "--tls-cert-file", str(tmp_path / "tls.pem"),
                              "--tls-private-key-file", str(tmp_path / "tls.key"))
        url = f"https://127.0.0.1:{port}/healthz"
        try:
            async with aiohttp.ClientSession(connector=trusting(first)) as session:
                await eventually(lambda: answers_ok(session, url), timeout=30, what="https health")
            install(second)
            async with aiohttp.ClientSession(connector=trusting(second)) as session:
                await eventually(lambda: answers_ok(session, url), timeout=30, what="the rotated certificate")
        finally:
            code, _ = await stop(process)
    assert code == 0


async def test_half_a_tls_pair_is_a_usage_error(tmp_path):
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "gpupair.command.cli", "extender", "--tls-cert-file", str(tmp_path / "tls.pem"), cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)}, stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE)
    _, err = await asyncio.wait_for(process.communicate(), 30)
    assert process.returncode == 2
    assert "gpupair extender: error: --tls-cert-file and --tls-private-key-file go together" in err.decode()


async def test_no_kubernetes_configuration_is_a_clear_error(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("KUBECONFIG", "KUBERNETES_SERVICE_HOST")}
    env.update(PYTHONPATH=str(ROOT), HOME=str(tmp_path))
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "gpupair.command.cli", "extender", "--port", str(free_port()), cwd=ROOT, env=env,
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE)
    _, err = await asyncio.wait_for(process.communicate(), 30)
    assert process.returncode == 2  # an input problem, as in every command (docs/cli.md)
    [line] = err.decode().splitlines()
    assert line.startswith("gpupair extender: error: no Kubernetes configuration") and "--kubeconfig" in line
