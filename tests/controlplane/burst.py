"""One cluster and one burst for the chaos matrix (test_chaos.py; dra_burst.py on DRA nodes),
shared by every row so the matrix pays for its set-up once.

``BurstCluster`` is gpupair as deploy/ runs it on eight seed-like nodes (GPU0-3 on NUMA node 0,
GPU4-7 on NUMA node 1): the webhook, a reporter per node, the extender behind a ``Balancer``
(one replica, or two for the replica row) and a kube-scheduler of its own that calls it through
both entries deploy/ ships (the GPU entry, and the every-pod entry that scores every pod).
``burst`` creates 40 GPU pods, 8 a second (24 asking one GPU, 16 asking two: 56 of the 64 GPUs,
so that however the singles spread, two of them per NUMA node at most, every NUMA node keeps a
close pair and every pod fits), injects the row's fault once ``after_bound`` of them are bound
(while the rest are created, scheduled and bound), waits for the rest, and measures what the row
reports. ``clear`` deletes the pods and waits
until the reports and the extenders' holds are back to an empty cluster.
"""

from __future__ import annotations

import collections
import contextlib
import datetime
import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpupair.topology.report import ALLOCATIONS_KEY
from tests.controlplane.api import Api, ApiError
from tests.controlplane.control_plane import ControlPlane
from tests.controlplane.faults import Balancer, apiserver_requests, metric_total, requests_between, scrape
from tests.controlplane.gpupair_install import NAMESPACE as GPUPAIR_NAMESPACE
from tests.controlplane.gpupair_install import Install, scheduler_extenders, wait_extender_ready, wait_reporter_ready
from tests.controlplane.dra import remove_claims, remove_slices
from tests.controlplane.kubelet import Grant, Kubelets, SimNode
from tests.controlplane.pki import LOOPBACK
from tests.controlplane.processes import Process, kill
from tests.controlplane.workloads import SEED_TOPO, gpu_pod, scheduling_failures, wait_reported

NODES = 8
PODS, TWO_GPU_EVERY = 40, (0, 2)  # of each five pods, the first and third ask two GPUs: 16 of 40
INJECT = {"gpupair.io/inject": "enabled"}


@dataclass
class Outcome:
    """What one row measured."""

    row: str
    pods: int
    placed: list[str]
    waiting: dict[str, list[str]]  # pod -> its FailedScheduling messages, oldest first
    grants: list[Grant]
    refusals: list[str]  # pods the harness kubelet could not admit: a set promised twice
    fault_s: float  # how long the fault lasted
    next_bind_s: float | None  # from the fault's end to the first bind after it
    all_placed_s: float | None  # from the fault's end to the last pod bound
    requests: dict[str, int]  # the apiserver's, from the fault's end to the last pod bound
    notes: dict[str, Any] = field(default_factory=dict)  # the row's own facts, recorded beside its figures

    @property
    def sys_grants(self) -> list[Grant]:
        return [g for g in self.grants if g.link == "SYS"]


def _bound(api: Api, namespace: str) -> dict[str, str]:
    return {p["metadata"]["name"]: p["spec"]["nodeName"] for p in api.list("v1", "Pod", namespace)
            if p["spec"].get("nodeName")}


def _timestamp(value: str) -> float:
    return datetime.datetime.strptime(value, "%Y-%m-%dT%H:%M:%S.%fZ").replace(
        tzinfo=datetime.timezone.utc).timestamp()


class BurstCluster:
    def __init__(self, plane: ControlPlane, objects: list[dict[str, Any]], directory: Path, *,
                 namespace: str = "chaos") -> None:
        self.namespace = namespace  # where the bursts' pods go; its name is also the nodes' prefix
        self.plane = plane
        self.api = plane.admin
        self.directory = directory
        self.install = Install(plane, objects, directory)
        self.sim: Kubelets | None = None
        self.reporters: dict[str, Process] = {}
        self.extenders: dict[str, tuple[Process, str]] = {}
        self.balancer = Balancer()
        self.scheduler: Process | None = None
        self.webhook: Process | None = None
        self._replicas = 0

    # --- set-up and tear-down

    def start(self) -> None:
        self.api.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": self.namespace, "labels": INJECT}})
        self.api.create({"apiVersion": "v1", "kind": "ServiceAccount",
                         "metadata": {"name": "default", "namespace": self.namespace}})
        self.install.apply()
        self.webhook = self.install.webhook()
        self.sim = Kubelets(self.api, self.directory / "nodes")
        for index in range(1, NODES + 1):
            node = self.add_node(f"{self.namespace}-{index}")
            self.reporters[node.name] = self.install.reporter(node)
        self.add_extender()
        self.scheduler = self.plane.scheduler(
            {"profiles": [{"schedulerName": "default-scheduler"}],
             "extenders": scheduler_extenders(self.balancer.url)}, name="kube-scheduler-chaos")
        self.wait_empty()

    def add_node(self, name: str) -> SimNode:
        """A GPU node as the burst's pods find it (here: the device plugin's 8 nvidia.com/gpu)."""
        assert self.sim is not None
        return self.sim.add_node(name, SEED_TOPO)

    def close(self) -> None:
        from tests.controlplane.conftest import delete_pods

        if self.scheduler is not None:
            self.scheduler.stop()
        self.install.stop()
        self.install.remove_webhook_configuration()
        self.balancer.close()
        with contextlib.suppress(Exception):
            delete_pods(self.api, self.namespace)
        if self.sim is not None:
            self.sim.close()
            for name in self.sim.nodes:
                delete_pods(self.api, field_selector=f"spec.nodeName={name}")
                remove_slices(self.api, name)
                self.api.delete(f"/apis/coordination.k8s.io/v1/namespaces/{GPUPAIR_NAMESPACE}/leases/{name}")
                self.api.delete(f"/api/v1/nodes/{name}")
        remove_claims(self.api, self.namespace)
        self.api.delete(f"/api/v1/namespaces/{self.namespace}")

    # --- gpupair's processes

    def add_extender(self) -> str:
        """One more extender replica behind the balancer; its name."""
        self._replicas += 1
        name = f"extender-{self._replicas}"
        process, url = self.install.extender(name=name)
        self.extenders[name] = (process, url)
        self.balancer.backends.append((LOOPBACK, int(url.rsplit(":", 1)[1])))
        return name

    def remove_extender(self, name: str) -> None:
        process, url = self.extenders.pop(name)
        process.stop()
        self.balancer.backends.remove((LOOPBACK, int(url.rsplit(":", 1)[1])))

    def restart_extender(self, name: str, while_down: Callable[[], None] = lambda: None,
                         stop: Callable[[Process], Any] = kill) -> None:
        """Stop the replica (SIGKILL), run ``while_down``, and start it again (same port, token,
        flags), as its Deployment would."""
        process, url = self.extenders[name]
        stop(process)
        while_down()
        again = process.respawn()
        self.install.processes[self.install.processes.index(process)] = again
        self.extenders[name] = (again, url)
        wait_extender_ready(again, url)

    def restart_reporter(self, node: str, while_down: Callable[[], None] = lambda: None,
                         stop: Callable[[Process], Any] = kill) -> None:
        """The same for the node's reporter, as its DaemonSet would."""
        process = self.reporters[node]
        stop(process)
        while_down()
        again = process.respawn()
        self.install.processes[self.install.processes.index(process)] = again
        self.reporters[node] = again
        assert self.sim is not None
        wait_reporter_ready(again, self.sim.nodes[node], self.install.reporter_port)

    def restart_webhook(self, down: float) -> None:
        """SIGKILL the webhook, and start it again ``down`` seconds later."""
        assert self.webhook is not None
        kill(self.webhook)
        time.sleep(down)
        self.install.processes.remove(self.webhook)
        self.webhook = self.install.webhook()

    def failed_scheduling(self, row: str) -> list[str]:
        """The FailedScheduling messages of the row's pods."""
        events = self.api.list("events.k8s.io/v1", "Event", self.namespace)
        return [e.get("note") or "" for e in events
                if e.get("reason") == "FailedScheduling" and e["regarding"]["name"].startswith(f"{row}-")]

    def extender_metrics(self) -> dict[str, str]:
        return {name: scrape(url) for name, (process, url) in self.extenders.items() if process.alive()}

    # --- the burst

    def pod_names(self, row: str) -> list[str]:
        return [f"{row}-{i:02d}" for i in range(PODS)]

    def create_pods(self, names: list[str]) -> None:
        for name in names:
            gpus = 2 if int(name.rsplit("-", 1)[1]) % 5 in TWO_GPU_EVERY else 1
            self.api.create(gpu_pod(self.namespace, name, gpus))

    def burst(self, row: str, fault: Callable[[], None], *, rate: float = 8.0, after_bound: int = 8,
              timeout: float = 180.0, settle: float = 0.0) -> Outcome:
        """The row's burst: its pods created ``rate`` a second (as a Job controller creates them;
        a create the apiserver cannot take is tried again), and ``fault()`` run once
        ``after_bound`` are bound, while the rest are being created and scheduled. Then every
        pod is waited for, up to ``timeout`` s, and ``settle`` s more where some still wait."""
        assert self.sim is not None
        names = self.pod_names(row)
        creator = threading.Thread(target=self._create_paced, args=(names, rate), name="burst", daemon=True)
        creator.start()
        self.api.wait_for(lambda: len(self._bound_quietly(names)) >= after_bound, 120,
                          f"{after_bound} pods of {row} bound", interval=0.05)
        bound_at_fault = len(self._bound_quietly(names))
        began = time.time()
        fault()
        ended = time.time()
        before = self._requests()
        deadline = time.monotonic() + timeout
        bound: dict[str, str] = {}
        while time.monotonic() < deadline:
            bound = self._bound_quietly(names) or bound
            if len(bound) == len(names):
                break
            time.sleep(0.25)
        all_placed = time.time() - ended if len(bound) == len(names) else None
        creator.join(60)
        if len(bound) < len(names) and settle:
            time.sleep(settle)
            bound = self._bound_quietly(names)
        after = self._requests()
        placed = [n for n in names if n in bound]
        grants = self.grants(placed)
        waiting = {n: scheduling_failures(self.api, self.namespace, n) for n in names if n not in bound}
        return Outcome(
            row=row, pods=len(names), placed=placed, waiting=waiting, grants=grants,
            refusals=[e for e in self.sim.errors if "would refuse" in e],
            fault_s=round(ended - began, 2), next_bind_s=self._next_bind(ended),
            all_placed_s=None if all_placed is None else round(all_placed, 2),
            requests=requests_between(before, after), notes={"bound_at_fault": bound_at_fault})

    def _create_paced(self, names: list[str], rate: float) -> None:
        for name in names:
            began = time.monotonic()
            self._create_until_taken(name)
            time.sleep(max(0.0, 1 / rate - (time.monotonic() - began)))

    def _create_until_taken(self, name: str, timeout: float = 90.0) -> None:
        deadline = time.monotonic() + timeout
        while True:
            try:
                self.create_pods([name])
                return
            except ApiError as exc:
                if exc.status == 409:  # taken by an earlier try whose answer was lost
                    return
                if time.monotonic() > deadline:
                    raise
            except OSError:
                if time.monotonic() > deadline:
                    raise
            time.sleep(0.2)

    def _bound_quietly(self, names: list[str]) -> dict[str, str]:
        """The burst's pods bound (not other pods a row makes beside them), by name."""
        try:
            bound = _bound(self.api, self.namespace)
        except Exception:  # noqa: BLE001 - the apiserver down for the row's fault
            return {}
        return {name: bound[name] for name in names if name in bound}

    def _requests(self) -> collections.Counter:
        try:
            return apiserver_requests(self.api)
        except Exception:  # noqa: BLE001 - the apiserver still down: counts start again with it
            return collections.Counter()

    def _next_bind(self, since: float) -> float | None:
        """Seconds from ``since`` to the first `bound` line any extender replica logged after it."""
        times = []
        for log in self.directory.glob("extender-*.log"):
            for line in log.read_text(errors="replace").splitlines():
                if '"msg":"bound"' not in line:
                    continue
                with contextlib.suppress(ValueError, KeyError):
                    entry = json.loads(line)
                    moment = _timestamp(entry["ts"])
                    if moment >= since and entry.get("pod", "").startswith(f"{self.namespace}/"):
                        times.append(moment)
        return round(min(times) - since, 2) if times else None

    # --- what is checked after each burst

    def grants(self, placed: list[str]) -> list[Grant]:
        """What each placed pod was given (here: by the harness's device plugin)."""
        assert self.sim is not None
        return self.sim.wait_admitted(self.namespace, placed, timeout=60)

    def ledgers(self) -> dict[str, dict[tuple[str, str], list[int]]]:
        """Every node's allocation ledger as its reporter published it: (namespace, pod) -> devices."""
        assert self.sim is not None
        found = {}
        for name in self.sim.nodes:
            annotations = self.api.get("v1", "Node", name)["metadata"].get("annotations") or {}
            raw = annotations.get(ALLOCATIONS_KEY)
            pods = json.loads(raw)["pods"] if raw else []
            found[name] = {(p["namespace"], p["name"]): sorted(p["devices"]) for p in pods}
        return found

    def held(self) -> dict[str, dict[tuple[str, str], list[int]]]:
        """What the harness kubelet has handed out, in the ledger's shape."""
        assert self.sim is not None
        with self.sim._lock:
            return {name: {key: sorted(i for _, devices in containers for i in devices)
                           for key, containers in node.held.items() if containers}
                    for name, node in self.sim.nodes.items()}

    def holdings(self, timeout: float = 60.0) -> dict[str, dict[tuple[str, str], list[int]]]:
        """Who holds which GPUs on every node, once the record gpupair decides by agrees with
        the node: here, every node's allocation ledger equal to what its kubelet handed out."""
        return self.api.wait_for(lambda: (lambda mine: mine if mine == self.held() else None)(self.ledgers()),
                                 timeout, "every node's allocation ledger matching its kubelet's grants", interval=0.3)

    def wait_empty(self, timeout: float = 90.0) -> None:
        assert self.sim is not None
        wait_reported(self.api, {name: set(range(8)) for name in self.sim.nodes}, timeout)
        self.wait_no_holds(timeout)

    def wait_no_holds(self, timeout: float = 90.0) -> None:
        self.api.wait_for(lambda: self.reservations() == 0, timeout, "the extenders' holds all ended", interval=0.3)

    def reservations(self) -> float:
        return sum(metric_total(text, "gpupair_extender_reservations") for text in self.extender_metrics().values())

    def clear(self) -> None:
        """Every pod of the namespace gone, the reports and holds back to an empty cluster."""
        for pod in self.api.list("v1", "Pod", self.namespace):
            self.api.delete(f"/api/v1/namespaces/{self.namespace}/pods/{pod['metadata']['name']}", grace=0)
        self.api.wait_for(lambda: not self.api.list("v1", "Pod", self.namespace), 60, "the burst's pods deleted")
        self.wait_empty()
