"""Faults for the chaos matrix (test_chaos.py), each made the way it happens in a cluster, and
the apiserver's request counts that show what recovering from one cost.

- A process killed with SIGKILL and started again is ``processes.kill`` then ``Process.respawn``
  (the apiserver's own: ``ControlPlane.restart_apiserver``).
- etcd stalling is SIGSTOP then SIGCONT (``stalled``): every apiserver call that reaches etcd
  waits, as on a disk that stops answering.
- Watches expiring is etcd's history compacted past every resourceVersion a client holds
  (``compact_etcd``); a client then resuming a watch from one gets 410 Gone and must list again.
- Replicas behind a Service are ``Balancer``: a TCP relay that hands each new connection to the
  next backend that accepts it, as kube-proxy's round robin over a Service's ready endpoints.
"""

from __future__ import annotations

import base64
import collections
import contextlib
import json
import os
import re
import signal
import socket
import threading
import urllib.request
from collections.abc import Iterator

from tests.controlplane.api import Api
from tests.controlplane.control_plane import ControlPlane
from tests.controlplane.pki import LOOPBACK
from tests.controlplane.processes import Process


def _etcd_url(plane: ControlPlane) -> str:
    argv = plane.etcd.argv
    return argv[argv.index("--listen-client-urls") + 1]


def _etcd_call(plane: ControlPlane, path: str, body: dict) -> dict:
    request = urllib.request.Request(f"{_etcd_url(plane)}/v3/{path}", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.loads(response.read())


def compact_etcd(plane: ControlPlane) -> int:
    """Compact etcd's history up to its current revision (etcd's gRPC gateway); the revision."""
    head = _etcd_call(plane, "kv/range", {"key": base64.b64encode(b"/registry").decode(), "limit": 1})
    revision = int(head["header"]["revision"])
    _etcd_call(plane, "kv/compaction", {"revision": revision, "physical": True})
    return revision


@contextlib.contextmanager
def stalled(process: Process) -> Iterator[None]:
    """The process stopped (SIGSTOP) for the body of the with-block, then continued."""
    os.kill(process.pid, signal.SIGSTOP)
    try:
        yield
    finally:
        os.kill(process.pid, signal.SIGCONT)


class Balancer:
    """A TCP relay on 127.0.0.1 in front of ``backends`` (host, port): each connection goes to
    the next backend in turn that accepts it; one that refuses is skipped, as an endpoint whose
    pod died drops out of a Service.

    ``hold_answers(b"/bind")`` makes it keep back the answer to the next request whose bytes
    contain that path: ``held`` is then set, with the request in ``held_request`` (and the
    backend it went to in ``held_backend``), and the
    answer goes on only after ``release()``, or never after ``release(drop=True)``.
    ``hold_answers(b"/bind", request_too=True)`` keeps back the request itself as well (until
    ``release()``: the backend then gets it, and its answer is not held)."""

    def __init__(self, backends: list[tuple[str, int]] | None = None) -> None:
        self.backends = list(backends or [])
        self._turn = 0
        self._lock = threading.Lock()
        self._listener = socket.create_server((LOOPBACK, 0), backlog=128)
        self.port = self._listener.getsockname()[1]
        self.url = f"http://{LOOPBACK}:{self.port}"
        self.connections: collections.Counter[tuple[str, int]] = collections.Counter()
        self._closed = False
        self._hold: bytes | None = None
        self.held = threading.Event()
        self.held_request = b""
        self.held_backend: tuple[str, int] | None = None  # where the held request went
        self._released = threading.Event()
        self._drop = False
        self._request_too = False
        threading.Thread(target=self._accept, name="balancer", daemon=True).start()

    def hold_answers(self, path: bytes, *, request_too: bool = False) -> None:
        self.held.clear()
        self._released.clear()
        self._drop = False
        self._request_too = request_too
        self._hold = path

    def release(self, *, drop: bool = False) -> None:
        self._drop = drop
        self._hold = None
        self._released.set()

    def _next_backend(self) -> tuple[socket.socket, tuple[str, int]] | None:
        with self._lock:
            order = self.backends[self._turn:] + self.backends[:self._turn]
            self._turn = (self._turn + 1) % max(1, len(self.backends))
        for backend in order:
            with contextlib.suppress(OSError):
                upstream = socket.create_connection(backend, timeout=2)
                upstream.settimeout(None)
                self.connections[backend] += 1
                return upstream, backend
        return None

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            found = self._next_backend()
            if found is None:
                client.close()
                continue
            upstream, backend = found
            holding = threading.Event()  # this connection's next answer is held
            threading.Thread(target=self._requests, args=(client, upstream, backend, holding), daemon=True).start()
            threading.Thread(target=self._answers, args=(upstream, client, holding), daemon=True).start()

    def _requests(self, client: socket.socket, upstream: socket.socket, backend: tuple[str, int],
                  holding: threading.Event) -> None:
        with contextlib.suppress(OSError):
            while data := client.recv(65536):
                if self._hold is not None and self._hold in data and not self.held.is_set():
                    self.held_request, self.held_backend = data, backend
                    self.held.set()
                    if self._request_too:
                        self._released.wait()
                    else:
                        holding.set()
                upstream.sendall(data)
        _close(client, upstream)

    def _answers(self, upstream: socket.socket, client: socket.socket, holding: threading.Event) -> None:
        with contextlib.suppress(OSError):
            while data := upstream.recv(65536):
                if holding.is_set():
                    self._released.wait()
                    holding.clear()
                    if self._drop:
                        break
                client.sendall(data)
        _close(upstream, client)

    def close(self) -> None:
        self._closed = True
        self.release()
        self._listener.close()


def _close(*ends: socket.socket) -> None:
    for end in ends:
        with contextlib.suppress(OSError):
            end.shutdown(socket.SHUT_RDWR)
        end.close()


_REQUEST_LINE = re.compile(r'^apiserver_request_total\{([^}]*)\} ([0-9.e+]+)$')
WRITES = frozenset({"POST", "PUT", "PATCH", "DELETE", "APPLY", "CREATE", "UPDATE"})


def apiserver_requests(api: Api) -> collections.Counter[tuple[str, str]]:
    """apiserver_request_total summed by (verb, resource), as the apiserver counts them since it
    started (``resource/subresource`` for subresources: ``pods/binding``, ``pods/status``)."""
    text = api.request("GET", "/metrics")
    counts: collections.Counter[tuple[str, str]] = collections.Counter()
    for line in text.splitlines():
        match = _REQUEST_LINE.match(line)
        if match is None:
            continue
        labels = dict(re.findall(r'(\w+)="([^"]*)"', match.group(1)))
        resource = labels.get("resource", "") + (f"/{labels['subresource']}" if labels.get("subresource") else "")
        counts[(labels.get("verb", ""), resource)] += int(float(match.group(2)))
    return counts


def requests_between(before: collections.Counter, after: collections.Counter) -> dict[str, int]:
    """Lists, watches and writes from ``before`` to ``after`` (a counter that went down means the
    apiserver restarted in between: then ``after`` counts since its start)."""
    if any(after[key] < count for key, count in before.items()):
        before = collections.Counter()
    delta = after - before
    return {
        "lists": sum(n for (verb, _), n in delta.items() if verb == "LIST"),
        "node_lists": delta[("LIST", "nodes")],
        "watches": sum(n for (verb, _), n in delta.items() if verb == "WATCH"),
        "writes": sum(n for (verb, _), n in delta.items() if verb in WRITES),
        "bindings": delta[("POST", "pods/binding")] + delta[("CREATE", "pods/binding")],
    }


def metric_total(text: str, name: str, **labels: str) -> float:
    """The sum of a Prometheus metric's samples whose labels include ``labels`` (0 when none)."""
    total = 0.0
    for line in text.splitlines():
        if not line.startswith(name):
            continue
        head, _, value = line.rpartition(" ")
        metric, _, rest = head.partition("{")
        if metric != name:
            continue
        found = dict(re.findall(r'(\w+)="([^"]*)"', rest))
        if all(found.get(k) == v for k, v in labels.items()):
            total += float(value)
    return total


def scrape(url: str) -> str:
    with urllib.request.urlopen(f"{url}/metrics", timeout=5) as response:
        return response.read().decode()
