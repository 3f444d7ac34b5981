"""The harness's own promises, checked without Kubernetes binaries: children stop with their
whole process group, and die with the test process even when it is killed outright; a missing
binary is named in one line."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

from tests.controlplane.control_plane import BIN_ENV, find_binaries
from tests.controlplane.processes import Process, wait_until

REPO = Path(__file__).resolve().parents[2]


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie is gone for our purposes: it holds no port and no file
    with open(f"/proc/{pid}/stat") as stat:
        return stat.read().split(") ", 1)[1][0] != "Z"


def test_stop_ends_the_child_and_what_it_started(tmp_path):
    pidfile = tmp_path / "grandchild"
    child = Process("shell", ["sh", "-c", f"sleep 300 & echo $! > {pidfile}; wait"], tmp_path / "shell.log")
    wait_until(lambda: pidfile.read_text().strip() != "", 10, "the grandchild's pid written")
    grandchild = int(pidfile.read_text())
    assert alive(child.pid) and alive(grandchild)

    child.stop(grace=2)

    assert not alive(child.pid)
    wait_until(lambda: not alive(grandchild), 5, "the grandchild gone with its group")


def test_children_die_with_a_test_process_killed_outright(tmp_path):
    pidfile = tmp_path / "child"
    script = textwrap.dedent(f"""
        import time
        from pathlib import Path
        from tests.controlplane.processes import Process
        child = Process("sleeper", ["sleep", "300"], Path({str(tmp_path / "sleeper.log")!r}))
        Path({str(pidfile)!r}).write_text(str(child.pid))
        time.sleep(300)
    """)
    parent = subprocess.Popen([sys.executable, "-c", script], cwd=REPO)
    try:
        wait_until(lambda: pidfile.read_text().strip() != "", 20, "the child's pid written")
        child = int(pidfile.read_text())
        assert alive(child)
        os.kill(parent.pid, signal.SIGKILL)  # no finalizer, no atexit: only the kernel can help
        parent.wait(10)
        wait_until(lambda: not alive(child), 5, "the child gone with its parent")
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait()


def test_a_missing_binary_is_named(tmp_path, monkeypatch):
    monkeypatch.delenv(BIN_ENV, raising=False)
    assert find_binaries() == ({}, f"{BIN_ENV} is not set")
    (tmp_path / "kube-apiserver").write_text("#!/bin/sh\n")
    (tmp_path / "kube-apiserver").chmod(0o755)
    monkeypatch.setenv(BIN_ENV, str(tmp_path))
    found, why = find_binaries()
    assert found == {} and why == f"{BIN_ENV}={tmp_path} has no executable kube-scheduler"
