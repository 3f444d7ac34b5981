"""A trace's fleet on the real control plane: FGD's protocol run through kube-scheduler v1.36.2
and gpupair as deploy/ ships it, for bench/trace_real.py and tests/controlplane/test_trace_real.py.

The nodes exist only as API objects, as everywhere in this harness, and the stand-ins play what
runs on a node, synchronously with the protocol (one pod at a time, so nothing here races):

- **Nodes.** CPU, memory and pods (1001, FGD's maxPods, as the simulator's) from the trace;
  ``nvidia.com/gpu`` and the share resources below; GPU feature discovery's product label from
  the trace's model. Each GPU node carries the report its reporter would publish, written by the
  reporter's own encoding (``encode_annotations``: layout, free GPUs, the ledger of whole-GPU
  pods), the layout being ``NumaSplits``' (``simulate``'s ``--numa-split``, 8 = 4+4 by default).
  No reporter processes (1,213 would not fit two cores); ``refresh`` re-writes reports older than
  two minutes, as a reporter's heartbeat keeps them fresh for the extender.
- **The device plugin** (aligned: ``gpupair.decide.devices.policies``, as the harness kubelet and the
  simulator pick) hands a bound whole-GPU pod its GPUs among those with nothing taken.
- **The sharing layer.** A share pod asks ``nvidia.com/gpu.shared: 1`` (time-slicing's resource
  and the extender's default ``--shared-resources``: the every-pod entry scores it, and its
  workload counts it as a one-GPU shape, as ``simulate``'s ``whole-gpus`` does) and its share as
  ``harness.gpupair.test/gpu-milli`` (thousandths of a GPU, FGD's ``gpu_milli``), the way
  GPU-sharing schedulers ask a count and a size. The layer puts the share on the GPU with the
  least left that holds it (ties: lowest index), as ``simulate`` does. After every placement the
  node advertises ``nvidia.com/gpu`` = GPUs in use by whole-GPU pods + GPUs with nothing taken,
  and ``gpu-milli`` = milli in use + the most any GPU not held whole has left; so
  NodeResourcesFit's count check is exactly ``simulate``'s GPU share filter (k GPUs with nothing
  taken; one GPU with the share left), and a GPU with a share taken is not free for a whole-GPU
  pod. ``nvidia.com/gpu.shared`` is advertised at 1000 a GPU and never limits. A fixed count, as
  a real time-slicing plugin advertises, would let kube-scheduler place shares no single GPU
  holds, which neither ``simulate`` nor FGD's Open-Gpu-Share does.

Pods: the seed's arrivals (``fgd_protocol.arrivals``), named ``p00000``... in that order, each asking
the trace's CPU and memory (none where the trace says 0), a GPU pod its accepted models as
required node affinity on the product label. Each is created, then waited for on one pod watch:
bound (``spec.nodeName``), or unschedulable (PodScheduled=False, reason Unschedulable), then
deleted and counted as arrived and dropped. Bound pods stay Pending: no container runs, and what
kube-scheduler and gpupair count is the binding.
"""

from __future__ import annotations

import http.client
import json
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

import numpy as np

from gpupair.decide.devices import placement
from gpupair.decide.score.gpu_products import PRODUCT_LABEL
from gpupair.decide.devices.policies import policy_named
from gpupair.kubewire.defaults import SHARED_RESOURCE_NAMES
from gpupair.simulator.trace import fgd_protocol
from gpupair.simulator.trace.files import MILLI, TraceNode, TracePod
from gpupair.simulator.trace.numa import NumaSplits
from gpupair.simulator.trace.models.scoring_policies import best_share_gpu
from gpupair.topology.layout import NodeLayout, NodeState
from gpupair.topology.report import PodHolding, encode_annotations
from tests.controlplane.api import Api, ApiError
from tests.controlplane.kubelet import GPU, GPU_NODE_LABEL, NOT_READY_TAINT

SHARED = SHARED_RESOURCE_NAMES[0]
SHARE_MILLI = "harness.gpupair.test/gpu-milli"
SHARED_PER_GPU = 1000
MAX_PODS = 1001  # FGD's nodes' maxPods, the simulator's (simulator/trace/node_arrays.py)
REFRESH_AFTER = 120.0  # seconds; the extender takes a report as stale after 300
# After a node's resources change, this long before the next pod is created: kube-scheduler's
# node and pod informers are two watches, and without a pause the next pod's cycle can run on the
# node's old allocatable (seen once in 923 pods at 100 nodes: a share bound to a node with no GPU
# share left; the stand-in refuses it and the run counts it in ``refused_pods``).
SETTLE = 0.02
PAUSE_IMAGE = "registry.k8s.io/pause:3.10"


def _now() -> datetime:
    return datetime.now(timezone.utc)


@dataclass
class FleetNode:
    trace: TraceNode
    layout: NodeLayout
    left: list[int]  # milli left per GPU (1000: nothing taken)
    whole: dict[tuple[str, str], PodHolding] = field(default_factory=dict)  # whole-GPU pods
    milli_used: int = 0  # by share pods
    generation: int = 0
    published: float = 0.0
    advertised: dict[str, str] = field(default_factory=dict)

    def free(self) -> frozenset[int]:
        return frozenset(g for g, left in enumerate(self.left) if left == MILLI)

    def held_whole(self) -> frozenset[int]:
        return frozenset(g for holding in self.whole.values() for g in holding.devices)

    def resources(self) -> dict[str, str]:
        """What the node advertises (capacity and allocatable alike)."""
        t = self.trace
        out = {"cpu": f"{t.milli_cpu}m", "memory": f"{t.memory_mib}Mi", "pods": str(MAX_PODS),
               "ephemeral-storage": "100Gi"}
        if t.gpus:
            held = self.held_whole()
            shareable = [left for g, left in enumerate(self.left) if g not in held]
            out[GPU] = str(len(held) + len(self.free()))
            out[SHARE_MILLI] = str(self.milli_used + max(shareable, default=0))
            out[SHARED] = str(SHARED_PER_GPU * t.gpus)
        return out


class TraceFleet:
    """The trace's nodes on ``api``, and the stand-ins that play their device plugin, sharing
    layer and reporter."""

    def __init__(self, api: Api, nodes: Sequence[TraceNode], splits: NumaSplits | None = None,
                 plugin: str = "aligned") -> None:
        self.api = api
        self.splits = splits or NumaSplits()
        self.policy = policy_named(plugin)
        self.nodes: dict[str, FleetNode] = {}
        self.changed = False  # a node's resources changed since the last ``settle``
        for node in nodes:
            self.nodes[node.name] = FleetNode(node, self.splits.layout(node.gpus), [MILLI] * node.gpus)

    # --- nodes

    def create(self) -> None:
        for name, node in self.nodes.items():
            labels = {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux"}
            if node.trace.gpus:
                labels[GPU_NODE_LABEL] = "true"
                if node.trace.model:
                    labels[PRODUCT_LABEL] = node.trace.model
            obj = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels}}
            if node.trace.gpus:
                obj["metadata"]["annotations"] = self._report(node)
            self.api.create(obj)
            self._advertise(node, ready=True)
            current = self.api.get("v1", "Node", name)
            taints = [t for t in (current["spec"].get("taints") or []) if t["key"] != NOT_READY_TAINT]
            if len(taints) != len(current["spec"].get("taints") or []):
                self.api.patch(obj, {"spec": {"taints": taints or None}})

    def delete(self) -> None:
        for name in self.nodes:
            self.api.delete(f"/api/v1/nodes/{name}")

    def _report(self, node: FleetNode) -> dict[str, str]:
        node.generation += 1
        node.published = time.monotonic()
        return encode_annotations(node.layout, node.free(), node.generation, _now(), holders=node.whole.values())

    def _publish(self, node: FleetNode) -> None:
        self.api.patch(f"/api/v1/nodes/{node.trace.name}", {"metadata": {"annotations": self._report(node)}})

    def _advertise(self, node: FleetNode, ready: bool = False) -> None:
        resources = node.resources()
        if resources == node.advertised and not ready:
            return
        self.changed = True
        status: dict[str, Any] = {"capacity": resources, "allocatable": resources}
        if ready:
            stamp = _now().strftime("%Y-%m-%dT%H:%M:%SZ")
            status["conditions"] = [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                                     "message": "trace stand-in", "lastHeartbeatTime": stamp,
                                     "lastTransitionTime": stamp}]
        self.api.patch(f"/api/v1/nodes/{node.trace.name}/status", {"status": status})
        node.advertised = resources

    def settle(self) -> None:
        """Give kube-scheduler's node informer SETTLE seconds where a node's resources changed."""
        if self.changed:
            time.sleep(SETTLE)
            self.changed = False

    def refresh(self, limit: int = 8) -> None:
        """Re-write up to ``limit`` of the oldest reports older than REFRESH_AFTER."""
        old = time.monotonic() - REFRESH_AFTER
        due = sorted((n for n in self.nodes.values() if n.trace.gpus and n.published < old), key=lambda n: n.published)
        for node in due[:limit]:
            self._publish(node)

    # --- a bound pod on its node

    def admit(self, node_name: str, namespace: str, name: str, uid: str, pod: TracePod) -> tuple[int, ...] | None:
        """The devices the pod gets on its node (() for a CPU pod), the node's report and
        resources updated; None where the device plugin or sharing layer has nothing for it."""
        node = self.nodes[node_name]
        if not pod.gpus:
            return ()
        if pod.milli_per_gpu < MILLI:
            held = node.held_whole()
            left = np.array([-1 if g in held else v for g, v in enumerate(node.left)])
            gpu = best_share_gpu(left, pod.milli_per_gpu)
            if left[gpu] < pod.milli_per_gpu:
                return None
            was_free = node.left[gpu] == MILLI
            node.left[gpu] -= pod.milli_per_gpu
            node.milli_used += pod.milli_per_gpu
            if was_free:  # the report shows whole GPUs: this one is no longer free
                self._publish(node)
            self._advertise(node)
            return (gpu,)
        devices = self.policy.pick(node.layout, node.free(), pod.gpus)
        if devices is None:
            return None
        for g in devices:
            node.left[g] = 0
        node.whole[(namespace, name)] = PodHolding(namespace, name, frozenset(devices), uid)
        self._publish(node)
        self._advertise(node)
        return tuple(sorted(devices))

    def is_close(self, node_name: str, free_before: frozenset[int], devices: tuple[int, ...]) -> bool:
        """Within the fewest NUMA nodes the node's shape allows, as ``simulate`` counts it."""
        node = self.nodes[node_name]
        return len(devices) < 2 or placement.is_close(NodeState(node.layout, free_before), devices)


def pod_manifest(namespace: str, name: str, pod: TracePod) -> dict[str, Any]:
    requests: dict[str, str] = {}
    if pod.milli_cpu:
        requests["cpu"] = f"{pod.milli_cpu}m"
    if pod.memory_mib:
        requests["memory"] = f"{pod.memory_mib}Mi"
    limits: dict[str, str] = {}
    if pod.gpus and pod.milli_per_gpu < MILLI:
        limits = {SHARED: "1", SHARE_MILLI: str(pod.milli_per_gpu)}
    elif pod.gpus:
        limits = {GPU: str(pod.gpus)}
    resources = {k: v for k, v in (("requests", requests), ("limits", limits)) if v}
    spec: dict[str, Any] = {"containers": [{"name": "main", "image": PAUSE_IMAGE, "resources": resources}],
                            "terminationGracePeriodSeconds": 0}
    if pod.gpus and pod.models:
        spec["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": PRODUCT_LABEL, "operator": "In", "values": list(pod.models)}]}]}}}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": namespace}, "spec": spec}


# --- waiting for kube-scheduler's answer

BOUND, UNSCHEDULABLE = "bound", "unschedulable"


@dataclass(frozen=True)
class Outcome:
    kind: str  # BOUND or UNSCHEDULABLE
    node: str = ""
    uid: str = ""
    message: str = ""
    at: float = 0.0  # time.perf_counter() when the watch saw it


class PodWatch:
    """One watch on the namespace's pods, on a thread of its own: each pod's first answer from
    kube-scheduler (bound, or unschedulable). Reconnects from the last resourceVersion seen."""

    def __init__(self, api: Api, namespace: str) -> None:
        self.api, self.namespace = api, namespace
        self.outcomes: dict[str, Outcome] = {}
        self.errors: list[str] = []
        self._changed = threading.Condition()
        self._stop = False
        self._version = ""
        self._connection: http.client.HTTPSConnection | None = None
        self._thread = threading.Thread(target=self._run, name="pod-watch", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop:
            try:
                self._stream()
            except Exception as exc:  # a dropped connection: watch again from where it was
                if not self._stop:
                    self.errors.append(repr(exc))
                    time.sleep(0.2)

    def _stream(self) -> None:
        connection = http.client.HTTPSConnection(self.api.host, self.api.port, context=self.api._context)
        self._connection = connection
        path = f"/api/v1/namespaces/{self.namespace}/pods?watch=1&timeoutSeconds=3600"
        if self._version:
            path += f"&resourceVersion={self._version}"
        headers = {"Accept": "application/json"}
        if self.api.token:
            headers["Authorization"] = f"Bearer {self.api.token}"
        connection.request("GET", path, headers=headers)
        response = connection.getresponse()
        if response.status != 200:
            raise RuntimeError(f"pod watch: HTTP {response.status}")
        while not self._stop:
            line = response.readline()
            if not line:
                return
            event = json.loads(line)
            obj = event.get("object") or {}
            if event.get("type") == "ERROR":  # too old a resourceVersion: start over
                self._version = ""
                return
            self._version = (obj.get("metadata") or {}).get("resourceVersion", self._version)
            if event.get("type") in ("ADDED", "MODIFIED"):
                self._seen(obj, time.perf_counter())

    def _seen(self, pod: dict[str, Any], at: float) -> None:
        meta = pod["metadata"]
        name = meta["name"]
        if name in self.outcomes or meta.get("deletionTimestamp"):
            return
        outcome = None
        if pod["spec"].get("nodeName"):
            outcome = Outcome(BOUND, pod["spec"]["nodeName"], meta.get("uid", ""), at=at)
        else:
            for condition in (pod.get("status") or {}).get("conditions") or []:
                if condition.get("type") == "PodScheduled" and condition.get("status") == "False" \
                        and condition.get("reason") == "Unschedulable":
                    outcome = Outcome(UNSCHEDULABLE, uid=meta.get("uid", ""), message=condition.get("message", ""),
                                      at=at)
        if outcome is not None:
            with self._changed:
                self.outcomes[name] = outcome
                self._changed.notify_all()

    def wait(self, name: str, timeout: float) -> Outcome:
        with self._changed:
            if not self._changed.wait_for(lambda: name in self.outcomes, timeout):
                raise TimeoutError(f"pod {self.namespace}/{name}: neither bound nor unschedulable within "
                                   f"{timeout:g} s (watch errors: {self.errors[-3:]})")
            return self.outcomes.pop(name)

    def close(self) -> None:
        self._stop = True
        if self._connection is not None:
            try:
                self._connection.sock.shutdown(2)  # type: ignore[union-attr]
            except (OSError, AttributeError):
                pass
        self._thread.join(5)


# --- the replay

@dataclass
class RealResult:
    allocation: dict[int, float | None]
    arrived_pods: int = 0
    failed_pods: int = 0  # unschedulable, deleted
    refused_pods: int = 0  # bound, but the device plugin or sharing layer had nothing: deleted
    refusals: list[str] = field(default_factory=list)  # which, and what the node had
    multi_gpu_placed: int = 0
    multi_gpu_numa_local: int = 0
    latencies: list[float] = field(default_factory=list)  # seconds, created to bound or given up
    seconds: float = 0.0

    def percentile(self, q: float) -> float | None:
        return float(np.percentile(self.latencies, q)) if self.latencies else None


def replay_real(api: Api, fleet: TraceFleet, pods: Sequence[TracePod], seed: int, namespace: str,
                tune: float = 1.3, timeout: float = 60.0,
                progress: Callable[[int, int], None] = lambda done, total: None,
                limit: int | None = None) -> RealResult:
    """FGD's protocol on the real control plane: ``fleet`` created, kube-scheduler (with gpupair
    or not) running and watching; pods of ``seed`` in order, one at a time; the first ``limit``
    arrivals only where given."""
    nodes = [node.trace for node in fleet.nodes.values()]
    stream = fgd_protocol.arrivals(pods, nodes, np.random.default_rng(seed), tune)[:limit]
    total_gpus = sum(node.gpus for node in nodes)
    result = RealResult({})
    arrived_log = np.zeros(len(stream), dtype=np.int64)
    used_log = np.zeros(len(stream), dtype=np.int64)
    arrived = used = 0
    watch = PodWatch(api, namespace)
    started = time.perf_counter()
    try:
        for index, pod in enumerate(stream):
            name = f"p{index:05d}"
            created = time.perf_counter()
            api.create(pod_manifest(namespace, name, pod))
            outcome = watch.wait(name, timeout)
            result.latencies.append(outcome.at - created)
            arrived += pod.gpu_milli
            placed = False
            if outcome.kind == BOUND:
                node = fleet.nodes[outcome.node]
                free_before = node.free()
                devices = fleet.admit(outcome.node, namespace, name, outcome.uid, pod)
                if devices is None:
                    result.refused_pods += 1
                    result.refusals.append(f"{name} ({pod.gpus} GPU at {pod.milli_per_gpu} milli) on {outcome.node}: "
                                           f"left {node.left}, advertised {node.advertised}")
                else:
                    placed = True
                    if pod.gpus >= 2:
                        result.multi_gpu_placed += 1
                        result.multi_gpu_numa_local += fleet.is_close(outcome.node, free_before, devices)
            if placed:
                used += pod.gpu_milli
            else:
                result.failed_pods += outcome.kind != BOUND
                api.delete(f"/api/v1/namespaces/{namespace}/pods/{name}")
            arrived_log[index], used_log[index] = arrived, used
            fleet.refresh()
            fleet.settle()
            progress(index + 1, len(stream))
    finally:
        watch.close()
    result.arrived_pods = len(stream)
    result.allocation = fgd_protocol.allocation_curve(arrived_log, used_log, total_gpus)
    result.seconds = time.perf_counter() - started
    return result


def delete_pods(api: Api, namespace: str) -> None:
    try:
        api.request("DELETE", f"/api/v1/namespaces/{namespace}/pods",
                    {"kind": "DeleteOptions", "apiVersion": "v1", "gracePeriodSeconds": 0}, ok=(200, 202, 404))
    except ApiError:
        pass
