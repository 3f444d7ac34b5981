"""Child processes that never outlive the test session.

Each child runs in a process group of its own (``start_new_session``) and is stopped by that
group's id: SIGTERM, then SIGKILL after a grace period. Three nets catch what a failing test
leaves: the fixture finalizers stop what they started, an ``atexit`` hook stops whatever is
still running, and SIGTERM/SIGHUP are raised as KeyboardInterrupt, as Ctrl-C is, so pytest
ends the session and both of those run. Should the test process itself be killed with
SIGKILL, the kernel sends every child SIGKILL (PR_SET_PDEATHSIG, set by setpriv), so nothing
lingers then either.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import shutil
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

_live: dict[int, "Process"] = {}
_lock = threading.Lock()
_handlers_installed = False


def free_port() -> int:
    """A TCP port on 127.0.0.1 nobody listens on now (the kernel's pick)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _dying_with_parent(argv: list[str]) -> list[str]:
    """``argv`` run through util-linux's setpriv, which sets PR_SET_PDEATHSIG and execs it.

    Not a preexec_fn: with one, subprocess must fork() instead of vfork(), and fork() runs
    gRPC's atfork handlers in the child, which abort it while the harness's own gRPC servers
    (the PodResources sockets) are busy ("epoll_wait error: Bad file descriptor")."""
    setpriv = shutil.which("setpriv")
    return [setpriv, "--pdeathsig", "KILL", "--", *argv] if setpriv else argv


class Process:
    """One child, its output in ``log`` (stdout and stderr together)."""

    def __init__(self, name: str, argv: Sequence[str], log: Path, env: Mapping[str, str] | None = None,
                 cwd: Path | None = None) -> None:
        install_handlers()
        self.name = name
        self.argv = list(argv)
        self.log = log
        self.env = dict(env) if env is not None else None
        self.cwd = cwd
        with open(log, "ab") as out:
            self.popen = subprocess.Popen(_dying_with_parent(self.argv), stdin=subprocess.DEVNULL, stdout=out,
                                          stderr=subprocess.STDOUT, env=dict(env) if env is not None else None,
                                          cwd=cwd, start_new_session=True)
        self.pid = self.popen.pid
        self.url = ""  # where it serves, for the callers that start a server and set it
        with _lock:
            _live[self.pid] = self

    def respawn(self) -> "Process":
        """The same command started again, its output appended to the same log (a restart)."""
        return Process(self.name, self.argv, self.log, env=self.env, cwd=self.cwd)

    def alive(self) -> bool:
        return self.popen.poll() is None

    def tail(self, lines: int = 40) -> str:
        try:
            text = self.log.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def describe_exit(self) -> str:
        return f"{self.name} (pid {self.pid}) exited with {self.popen.returncode}; last lines of {self.log}:\n{self.tail()}"

    def stop(self, grace: float = 5.0) -> None:
        """SIGTERM to the process group, SIGKILL after ``grace`` seconds; reaped either way."""
        try:
            if self.popen.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.pid, signal.SIGTERM)
                try:
                    self.popen.wait(grace)
                except subprocess.TimeoutExpired:
                    with contextlib.suppress(ProcessLookupError):
                        os.killpg(self.pid, signal.SIGKILL)
                    self.popen.wait(5)
            # the leader is gone; anything it left in its group goes too
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.pid, signal.SIGKILL)
        finally:
            with _lock:
                _live.pop(self.pid, None)


def kill(process: Process) -> None:
    """SIGKILL to the process's group, as the OOM killer or a node failure ends it: no drain."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    process.stop()


def terminate(process: Process, grace: float = 20.0, *, signalled: bool = False) -> int:
    """SIGTERM, once, as the kubelet stops a container (``signalled``: it was sent already),
    and the exit code once the process has drained (subprocess.TimeoutExpired if it takes
    longer than ``grace``)."""
    if not signalled:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
    code = process.popen.wait(grace)
    process.stop()
    return code


def wait_until(check: Callable[[], bool], timeout: float, what: str, process: Process | None = None,
               interval: float = 0.05) -> None:
    """Poll ``check`` until it holds; TimeoutError naming ``what`` (and the child's log if it died)."""
    deadline = time.monotonic() + timeout
    while True:
        if process is not None and not process.alive():
            raise RuntimeError(f"{what}: {process.describe_exit()}")
        with contextlib.suppress(Exception):
            if check():
                return
        if time.monotonic() > deadline:
            tail = f"\nlast lines of {process.log}:\n{process.tail()}" if process is not None else ""
            raise TimeoutError(f"{what}: not within {timeout:g} s{tail}")
        time.sleep(interval)


def stop_all() -> None:
    with _lock:
        processes = list(_live.values())
    for process in reversed(processes):  # the newest first: clients before the apiserver, etcd last
        process.stop(grace=3.0)


def _interrupt_on_signal(signum, frame) -> None:
    # as Ctrl-C: pytest stops the session and still runs every finalizer
    raise KeyboardInterrupt(f"signal {signal.Signals(signum).name}")


def install_handlers() -> None:
    global _handlers_installed
    if _handlers_installed:
        return
    _handlers_installed = True
    atexit.register(stop_all)
    if threading.current_thread() is threading.main_thread():
        for signum in (signal.SIGTERM, signal.SIGHUP):
            if signal.getsignal(signum) in (signal.SIG_DFL, None):
                signal.signal(signum, _interrupt_on_signal)
