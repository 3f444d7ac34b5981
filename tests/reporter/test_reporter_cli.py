"""`gpupair reporter` as a real process: dry runs, bad input, and the service until SIGTERM."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import aiohttp
import pytest

from gpupair.topology import report
from tests.kube_double import make_node, running_kube_double
from tests.reporter_support import NODE, SEED_UUIDS, seed_layout

ROOT = Path(__file__).resolve().parents[2]
SEED_TOPO = "tests/fixtures/topo/seed-5090d.txt"


def gpupair(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "gpupair.command.cli", "reporter", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, **(env or {})},
    )


def test_dry_run_on_the_seed_topology_with_gpu0_and_gpu4_allocated():
    done = gpupair("--topology-file", SEED_TOPO, "--allocated", "0,4", "--once", "--dry-run")
    assert done.returncode == 0, done.stderr
    annotations = json.loads(done.stdout)
    assert set(annotations) == {report.TOPOLOGY_KEY, report.FREE_KEY}
    decoded = report.decode_annotations(annotations)
    assert decoded.state.free_by_numa() == {0: (1, 2, 3), 1: (5, 6, 7)}
    assert decoded.unhealthy == frozenset()
    assert decoded.layout.worst_link([3, 4]) == "SYS"


def test_dry_run_with_uuids_on_a_core_json_layout(tmp_path):
    layout = seed_layout(tmp_path).layout
    topology = tmp_path / "topology.json"
    topology.write_text(report.encode_topology(layout))
    done = gpupair("--topology-file", str(topology), "--dry-run", env={"GPUPAIR_REPORTER_ALLOCATED": f"{SEED_UUIDS[2]},7"})
    assert done.returncode == 0, done.stderr
    decoded = report.decode_annotations(json.loads(done.stdout))
    assert decoded.state.free == {0, 1, 3, 4, 5, 6}
    assert decoded.layout == layout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--topology-file", "tests/fixtures/topo/nope.txt", "--allocated", "0", "--dry-run"],
         "cannot read layout file"),
        (["--topology-file", "README.md", "--allocated", "0", "--dry-run"], "no nvidia-smi topo -m matrix"),
        (["--topology-file", SEED_TOPO, "--allocated", "0,9", "--dry-run"], "does not have: 9"),
        (["--topology-file", SEED_TOPO, "--allocated", SEED_UUIDS[0], "--dry-run"], "use device indices"),
        (["--topology-file", SEED_TOPO, "--allocated", "0", "--once"], "--node-name"),
        (["--topology-file", SEED_TOPO, "--scan-interval", "0", "--dry-run"], "--scan-interval: must be above 0"),
        (["--topology-file", SEED_TOPO, "--annotation-refresh", "-1", "--dry-run"], "--annotation-refresh: must be between 0 and"),
        (["--topology-file", SEED_TOPO, "--allocated", "0", "--once", "--node-name", "n", "--kubeconfig",
          "/nonexistent"], "kubeconfig /nonexistent: no such file"),
    ],
)
def test_bad_input_is_a_clear_usage_error(args, message):
    done = gpupair(*args, env={"NODE_NAME": "", "GPUPAIR_REPORTER_NODE_NAME": ""})
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert message in done.stderr
    assert "Traceback" not in done.stderr
    assert done.stdout == ""


def parse(*args: str):
    from gpupair.command.cli import build_parser

    return build_parser("reporter").parse_args(["reporter", *args])


async def test_once_writes_one_report_and_exits(tmp_path, capsys):
    from gpupair.reporter.main import run_once

    async with running_kube_double() as double:
        double.store.create("nodes", make_node(NODE))
        config = str(kubeconfig(tmp_path / "kubeconfig", double.url))
        args = parse("--topology-file", SEED_TOPO, "--allocated", "0,4", "--once", "--node-name", NODE,
                     "--kubeconfig", config, "--no-admission-probe")  # the double enforces no policies
        assert await run_once(args) == 0
        assert len(double.requests_to(f"/api/v1/nodes/{NODE}", "PATCH")) == 1
        decoded = report.decode_annotations(double.store.node(NODE)["metadata"]["annotations"])
        assert decoded.state.free == {1, 2, 3, 5, 6, 7}
        # the liveness Lease, in --lease-namespace (default: the pod's; here no pod: gpupair-system)
        assert double.store.get("leases", NODE, "gpupair-system")["spec"]["holderIdentity"] == NODE

        args = parse("--topology-file", SEED_TOPO, "--once", "--node-name", "gpu-node-9", "--allocated", "",
                     "--kubeconfig", config, "--no-admission-probe")
        assert await run_once(args) == 1
        assert "HTTP 404" in capsys.readouterr().err


async def test_without_a_lease_namespace_annotation_writes_are_the_heartbeat(tmp_path):
    from gpupair.reporter.main import lease_keeper, publisher_for

    args = parse("--node-name", NODE, "--lease-namespace", "", "--heartbeat", "20", "--annotation-refresh", "0")
    assert lease_keeper(args, None) is None and publisher_for(args, None).heartbeat == 20
    args = parse("--node-name", NODE, "--lease-namespace", "ops", "--annotation-refresh", "0")
    assert publisher_for(args, None).heartbeat is None
    args = parse("--node-name", NODE, "--lease-namespace", "ops")
    assert publisher_for(args, None).heartbeat == 90.0  # for extenders older than the Lease


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def kubeconfig(path: Path, server: str) -> Path:
    path.write_text(
        "apiVersion: v1\nkind: Config\n"
        f"clusters:\n- name: double\n  cluster:\n    server: {server}\n"
        "users:\n- name: reporter\n  user: {}\n"
        "contexts:\n- name: double\n  context:\n    cluster: double\n    user: reporter\n"
        "current-context: double\n"
    )
    return path


async def wait_for(predicate, timeout: float = 30.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not predicate():
        if loop.time() > deadline:
            raise AssertionError("condition not reached in time")
        await asyncio.sleep(0.05)


async def test_service_publishes_serves_metrics_and_stops_on_sigterm(tmp_path):
    port = free_port()
    async with running_kube_double() as double:
        double.store.create("nodes", make_node(NODE))
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "gpupair.command.cli", "reporter",
            "--topology-file", SEED_TOPO, "--allocated", "0,4",
            "--kubeconfig", str(kubeconfig(tmp_path / "kubeconfig", double.url)),
            "--host", "127.0.0.1", "--port", str(port), "--checkpoint-file", "",
            "--layout-file", str(tmp_path / "layout.json"),
            "--no-admission-probe",  # the double runs no admission policies (the next test)
            cwd=ROOT, env={**os.environ, "NODE_NAME": NODE},
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )
        try:
            def annotated() -> bool:
                return report.FREE_KEY in (double.store.node(NODE)["metadata"].get("annotations") or {})

            await wait_for(annotated)
            decoded = report.decode_annotations(double.store.node(NODE)["metadata"]["annotations"])
            assert decoded.state.free_by_numa() == {0: (1, 2, 3), 1: (5, 6, 7)}
            assert report.decode_layout((tmp_path / "layout.json").read_text().strip()) == decoded.layout

            async with aiohttp.ClientSession(f"http://127.0.0.1:{port}") as http:
                await wait_for_http(http)
                assert (await http.get("/readyz")).status == 200
                # the verdict endpoint is wired in: a call without a token is refused, not 404
                refused = await http.post("/v1/verify")
                assert refused.status == 401 and (await refused.json())["kind"] == "Status"
                metrics = await (await http.get("/metrics")).text()
                assert 'gpupair_reporter_writes_total{outcome="changed"} 1.0' in metrics
                assert 'gpupair_reporter_verifications_total{outcome="401"} 1.0' in metrics

            process.send_signal(signal.SIGTERM)
            code = await asyncio.wait_for(process.wait(), 20)
            stderr = (await process.stderr.read()).decode()
            assert code == 0, stderr
            assert "shutting down" in stderr and "Traceback" not in stderr
        finally:
            if process.returncode is None:
                process.kill()
                await process.wait()


async def test_service_writes_nothing_while_its_admission_policies_are_not_enforced(tmp_path):
    """The double admits every dry run, as an apiserver does in the second or so before it
    enforces newly applied policies: the reporter must write nothing (no report, no Lease) and
    say why, until a probe is refused (tests/controlplane/test_admission_window.py on the real
    apiserver)."""
    port = free_port()
    async with running_kube_double() as double:
        double.store.create("nodes", make_node(NODE))
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "gpupair.command.cli", "reporter",
            "--topology-file", SEED_TOPO, "--allocated", "0,4", "--lease-namespace", "gpupair-system",
            "--kubeconfig", str(kubeconfig(tmp_path / "kubeconfig", double.url)),
            "--host", "127.0.0.1", "--port", str(port), "--checkpoint-file", "",
            cwd=ROOT, env={**os.environ, "NODE_NAME": NODE},
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )
        try:
            async with aiohttp.ClientSession(f"http://127.0.0.1:{port}") as http:
                await wait_for_http(http)
                await asyncio.sleep(2)  # several probes, and scans' worth of time
                assert (await http.get("/readyz")).status == 503
            assert not (double.store.node(NODE)["metadata"].get("annotations") or {})
            assert double.store.get("leases", NODE, "gpupair-system") is None
            process.send_signal(signal.SIGTERM)
            code = await asyncio.wait_for(process.wait(), 20)
            stderr = (await process.stderr.read()).decode()
            assert code == 0, stderr
            assert "writing nothing until the admission policies are enforced" in stderr
            assert "gpupair-reporter-nodes is not enforced yet" in stderr
        finally:
            if process.returncode is None:
                process.kill()
                await process.wait()


async def wait_for_http(http: aiohttp.ClientSession, timeout: float = 30.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        try:
            if (await http.get("/healthz")).status == 200:
                return
        except aiohttp.ClientConnectionError:
            pass
        if loop.time() > deadline:
            raise AssertionError("reporter did not start serving")
        await asyncio.sleep(0.05)
