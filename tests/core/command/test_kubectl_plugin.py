"""`kubectl gpupair`: the wheel's kubectl-gpupair entry point, run by the real kubectl 1.35 (from
the npm package scripts/fetch-k8s-tools.sh unpacks; tests/k8s_tools.py finds it) as kubectl runs
any plugin: found on the PATH, given the arguments after `gpupair` and kubectl's environment. It
reads the kubeconfig's current context, as `gpupair status` does, and says `kubectl gpupair` in
its help and errors."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import sys
from importlib.metadata import entry_points
from pathlib import Path

import pytest

from tests.k8s_tools import kubectl_path, require
from tests.kube_double import Store, running_kube_double
from tests.status_fleet import NOW, rfc3339, small_fleet

REPO = Path(__file__).resolve().parents[3]
GOLDEN = REPO / "tests" / "fixtures" / "status" / "fleet.txt"
VENV_BIN = Path(sys.executable).parent


@pytest.fixture
def kubectl() -> str:
    return require("kubectl 1.35+", kubectl_path())


@pytest.fixture
def plugin_env(tmp_path) -> dict[str, str]:
    """kubectl's environment: the venv's bin (where the wheel put kubectl-gpupair) on the PATH,
    no GPUPAIR_* settings, a kubeconfig of the test's own."""
    if not (VENV_BIN / "kubectl-gpupair").exists():
        pytest.fail(f"{VENV_BIN / 'kubectl-gpupair'} is missing: the package is installed without its "
                    "kubectl-gpupair entry point (reinstall: pip install -e .)")
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUPAIR_")}
    env["PATH"] = f"{VENV_BIN}{os.pathsep}/usr/bin{os.pathsep}/bin"
    env["KUBECONFIG"] = str(tmp_path / "kubeconfig")
    env["HOME"] = str(tmp_path)  # no ~/.kube of the machine's
    return env


async def run(kubectl: str, env: dict[str, str], *args: str) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(kubectl, *args, env=env, stdout=asyncio.subprocess.PIPE,
                                                stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    return proc.returncode, out.decode(), err.decode()


def test_the_wheel_declares_the_entry_point():
    (point,) = entry_points(group="console_scripts", name="kubectl-gpupair")
    assert point.value == "gpupair.command.cli:kubectl_main"


async def test_kubectl_lists_and_runs_the_plugin(kubectl, plugin_env):
    code, out, err = await run(kubectl, plugin_env, "plugin", "list", "--name-only")
    assert code == 0, err
    assert "kubectl-gpupair" in out.split()
    code, out, err = await run(kubectl, plugin_env, "gpupair", "status", "--help")
    assert (code, err) == (0, "")
    assert out.startswith("usage: kubectl gpupair status ")
    assert "--context" in out and "--kubeconfig" in out
    code, out, err = await run(kubectl, plugin_env, "gpupair", "--help")
    assert code == 0 and out.startswith("usage: kubectl gpupair ") and "status" in out


async def test_errors_name_the_kubectl_spelling(kubectl, plugin_env):
    code, out, err = await run(kubectl, plugin_env, "gpupair", "status", "--output", "yaml")
    assert code == 2 and out == ""
    assert err.startswith("kubectl gpupair status: error: --output: ") and err.count("\n") == 1


def dead_server() -> str:
    with socket.socket() as s:  # a port nothing listens on once this closes
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}"


async def test_status_reads_kubectls_current_context(kubectl, plugin_env):
    store = Store()
    small_fleet(store)
    async with running_kube_double(store) as double:
        kubeconfig = json.loads(double.write_kubeconfig(Path(plugin_env["KUBECONFIG"])).read_text())
        kubeconfig["clusters"].append({"name": "elsewhere", "cluster": {"server": dead_server()}})
        kubeconfig["contexts"].append({"name": "elsewhere", "context": {"cluster": "elsewhere", "user": "tester"}})
        Path(plugin_env["KUBECONFIG"]).write_text(json.dumps(kubeconfig))
        now = ("--now", rfc3339(NOW))

        code, out, err = await run(kubectl, plugin_env, "gpupair", "status", *now)
        assert (code, err) == (0, "")
        assert out == GOLDEN.read_text(), "the same output as `gpupair status` (tests/status/test_status.py)"

        # kubectl itself switches the current context; the plugin follows it
        code, _, err = await run(kubectl, plugin_env, "config", "use-context", "elsewhere")
        assert code == 0, err
        code, out, err = await run(kubectl, plugin_env, "gpupair", "status", *now)
        assert code == 1 and out == ""
        assert err.startswith("kubectl gpupair status: ") and "127.0.0.1" in err and err.count("\n") == 1
        code, out, err = await run(kubectl, plugin_env, "gpupair", "status", "--context", "double", *now)
        assert (code, err) == (0, "") and out == GOLDEN.read_text()
