"""`gpupair verify`: stays on the standard library, and its --dry-run prints the annotations the
reporter would write. (The live path, against the real reporter, is in test_verification.py.)"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from gpupair.decide.judge import verdict
from gpupair.topology.report import TOPOLOGY_KEY, encode_topology
from tests.layouts import seed_layout
from gpupair.verifier.main import SignalWait, reporter_url

REPO = Path(__file__).resolve().parents[2]
HEAVY = ("aiohttp", "pydantic", "grpc", "kubernetes_asyncio", "kubernetes", "prometheus_client", "google.protobuf",
         "yaml", "cryptography", "gpupair.decide.judge.verdict", "gpupair.topology.report", "reporter", "webhook")


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "gpupair.command.cli", *args], cwd=REPO, capture_output=True, text=True,
                          timeout=60)


def test_the_sidecar_path_imports_only_the_standard_library():
    # Parse the sidecar's command line exactly as `gpupair verify` does, then list what is loaded.
    probe = (
        "import sys, json; from gpupair.command import cli; "
        "args = cli.build_parser('verify').parse_args(['verify', '--host-ip', '10.0.0.1']); "
        "import verifier.main; print(json.dumps(sorted(sys.modules)))"
    )
    result = subprocess.run([sys.executable, "-c", probe], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    loaded = json.loads(result.stdout)
    heavy = [m for m in loaded if any(m == h or m.startswith(h + ".") for h in HEAVY)]
    assert heavy == []
    assert "urllib.request" in loaded and "gpupair.verifier.main" in loaded
    ours = [m for m in loaded if m.split(".")[0] == "gpupair"]
    # the flag and log helpers every command shares, themselves on the standard library
    assert sorted(ours) == ["gpupair", "gpupair.command", "gpupair.command.cli", "gpupair.command.flags",
                            "gpupair.command.service", "gpupair.command.version", "gpupair.kubewire",
                            "gpupair.kubewire.defaults", "gpupair.kubewire.usage_errors", "gpupair.verifier",
                                "gpupair.verifier.main"]


def test_main_dispatch_loads_only_the_chosen_command():
    probe = ("import sys\nfrom gpupair.command import cli\n"
             "try: rc = cli.main(['verify', '--dry-run'])\n"
             "except SystemExit as exit_: rc = exit_.code\n"
             "print(rc, 'gpupair.webhook.main' in sys.modules, 'aiohttp' in sys.modules)")
    result = subprocess.run([sys.executable, "-c", probe], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert result.stdout.split() == ["2", "False", "False"], result.stderr


@pytest.fixture
def topology_file(tmp_path) -> Path:
    path = tmp_path / "topology.json"
    path.write_text(encode_topology(seed_layout()))
    return path


@pytest.mark.parametrize("devices", ["1,2", "GPU1+GPU2", "gpu2 gpu1", "GPU-seed-1,GPU-seed-2", "31:00.0,0000:41:00.0"])
def test_dry_run_prints_the_reporters_annotations(topology_file, devices):
    result = run_cli("verify", "--dry-run", "--topology-file", str(topology_file), "--devices", devices)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == verdict.classify(seed_layout(), (1, 2)).annotations()
    assert json.loads(result.stdout)[verdict.VERDICT_KEY] == "PASS"


def test_dry_run_fail_and_plan(topology_file):
    result = run_cli("verify", "--dry-run", "--topology-file", str(topology_file), "--devices", "3,4", "--planned", "GPU1+GPU2")
    annotations = json.loads(result.stdout)
    assert annotations[verdict.VERDICT_KEY] == "FAIL"
    assert annotations[verdict.NUMA_KEY] == "NUMA0+NUMA1" and annotations[verdict.LINK_KEY] == "SYS"
    assert annotations[verdict.PLAN_MATCH_KEY] == "false"


def test_dry_run_judges_against_the_placement_asked(topology_file):
    result = run_cli("verify", "--dry-run", "--topology-file", str(topology_file), "--devices", "3,4",
                     "--placement", "preferred")
    annotations = json.loads(result.stdout)
    assert (annotations[verdict.VERDICT_KEY], annotations[verdict.VERDICT_PLACEMENT_KEY]) == ("PASS", "preferred")
    bad = run_cli("verify", "--dry-run", "--topology-file", str(topology_file), "--devices", "3,4", "--placement", "maybe")
    assert bad.returncode == 2 and "--placement: 'maybe' is not a placement gpupair knows" in bad.stderr


def test_dry_run_reads_a_node_object_and_nvidia_smi_text(tmp_path):
    node = tmp_path / "node.json"
    node.write_text(json.dumps({"kind": "Node", "metadata": {"name": "n1", "annotations": {
        TOPOLOGY_KEY: encode_topology(seed_layout())}}}))
    assert json.loads(run_cli("verify", "--dry-run", "--topology-file", str(node), "--devices", "4,5,6,7").stdout)[
        verdict.NUMA_KEY] == "NUMA1+NUMA1+NUMA1+NUMA1"
    topo = REPO / "tests/fixtures/topo/seed-5090d.txt"
    annotations = json.loads(run_cli("verify", "--dry-run", "--topology-file", str(topo), "--devices", "3,4").stdout)
    assert (annotations[verdict.LINK_KEY], annotations[verdict.VERDICT_KEY]) == ("SYS", "FAIL")


@pytest.mark.parametrize("args, message", [
    (["--devices", "1,2"], "needs --topology-file"),
    (["--topology-file", "LAYOUT", "--devices", "9"], "GPU9 is not on this node"),
    (["--topology-file", "LAYOUT", "--devices", "GPU-nope"], "GPU-nope"),
    (["--topology-file", "LAYOUT", "--devices", ","], "no devices"),
    (["--topology-file", "/nonexistent/layout.json", "--devices", "1"], "No such file"),
])
def test_dry_run_bad_input_is_a_clear_error(topology_file, args, message):
    args = [str(topology_file) if a == "LAYOUT" else a for a in args]
    result = run_cli("verify", "--dry-run", *args)
    assert result.returncode == 2 and message in result.stderr and result.stdout == ""


def test_without_a_host_ip_the_sidecar_says_what_is_missing():
    result = subprocess.run([sys.executable, "-m", "gpupair.command.cli", "verify"], cwd=REPO, capture_output=True, text=True,
                            timeout=60, env={"PYTHONPATH": str(REPO)})
    assert result.returncode == 2 and "HOST_IP" in result.stderr


@pytest.mark.parametrize("host, url", [
    ("10.0.0.7", "http://10.0.0.7:9400/v1/verify"),
    ("fd00::7", "http://[fd00::7]:9400/v1/verify"),
])
def test_reporter_url(host, url):
    assert reporter_url(host, 9400) == url


def test_a_signal_that_lands_before_the_wait_still_ends_it():
    # The sidecar's SIGTERM race: the signal arrives after the interpreter last looked and before the
    # idle call blocks. raise_signal runs the C-level handler at once, as such a signal would.
    came = []
    previous = signal.signal(signal.SIGUSR1, lambda signum, frame: came.append(signum))
    try:
        with SignalWait() as waiter:
            signal.raise_signal(signal.SIGUSR1)
            assert waiter.wait(30) is True  # signal.pause() here would wait for a second signal
            assert came == [signal.SIGUSR1]
            assert waiter.wait(0) is False  # the wake-up was consumed; an idle wait waits
    finally:
        signal.signal(signal.SIGUSR1, previous)
