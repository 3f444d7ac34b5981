"""The harness's kubelet and device plugin, for nodes that exist only as API objects.

For each simulated node it creates the Node (labels as NVIDIA's GPU feature discovery sets
them), patches its status as a kubelet does (capacity and allocatable with ``nvidia.com/gpu``,
Ready, an address of its own on the loopback net 127.0.1.0/24) and removes the
``node.kubernetes.io/not-ready`` taint the apiserver adds to a new Node. It serves the node's
PodResources API on a real gRPC Unix socket (tests/podresources_server.FakeKubelet, in an asyncio
loop on a thread of its own) and rewrites the node's device checkpoint file whenever devices
change hands, as the kubelet's device manager does (the reporter rescans on that).

A watcher thread reads the pods every ``poll`` seconds. A pod newly bound to one of the nodes
is admitted: each container asking the GPU resource is handed devices the way a device plugin
would pick them (``gpupair.decide.devices.policies``: ``aligned`` is NVIDIA's best-effort policy, ``naive`` the
first free ones), the PodResources answer shows them, and the pod's status says Running. A pod
marked for deletion gives its devices back and is removed (the kubelet's part of a graceful
delete). Every grant is kept in ``grants``, in order, for the test to judge. Of the pod's
containers only gpupair's own run, as processes here: the verifier sidecar the webhook injects
(so the node's reporter is asked for the pod's verdict exactly as in a cluster).

A node may be time-sliced (``add_node(replicas=R)``): its device plugin offers each GPU R times as
``<index>::<n>`` under ``nvidia.com/gpu`` (or, renamed, under ``nvidia.com/gpu.shared`` alone),
and hands replicas out as NVIDIA's device plugin does (``distributedAlloc``: one at a time from
the GPU with the fewest taken).

One test-only knob: a pod annotated ``harness.gpupair.test/devices: "0,5"`` is given exactly
those devices (on a time-sliced node an index per replica: ``"0,0,1"`` holds two of GPU0's). Tests use it for other tenants' pods that hold known GPUs; nothing of gpupair's
reads it.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import os
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpupair.topology.layout import NodeLayout
from gpupair.decide.devices.policies import policy_named
from gpupair.topology.report import decode_layout
from gpupair.topology.smi_topo import parse_topo_matrix
from tests.controlplane.api import Api, ApiError
from tests.controlplane.containers import base_env, gpupair_argv, resolved_env
from tests.controlplane.processes import Process
from tests.podresources_server import FakeContainer, FakeDevice, FakeKubelet, FakePod

GPU = "nvidia.com/gpu"
SHARED = "nvidia.com/gpu.shared"  # time-slicing's resource under renameByDefault
DEVICES_HINT = "harness.gpupair.test/devices"
GPU_NODE_LABEL = "nvidia.com/gpu.present"
NOT_READY_TAINT = "node.kubernetes.io/not-ready"


def load_layout(topology_file: Path) -> NodeLayout:
    """The layout in ``topology_file``: `nvidia-smi topo -m` output, or topology JSON (the
    gpupair.io/topology annotation's format, which the reporter's --topology-file reads too)."""
    text = topology_file.read_text()
    if text.lstrip().startswith("{"):
        return decode_layout(text)
    return parse_topo_matrix(text).to_layout()


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def gpu_ask(container: dict[str, Any], resource: str = GPU) -> int:
    limits = (container.get("resources") or {}).get("limits") or {}
    requests = (container.get("resources") or {}).get("requests") or {}
    return int(limits.get(resource, requests.get(resource, 0)))


@dataclass(frozen=True)
class Grant:
    namespace: str
    pod: str
    node: str
    devices: tuple[int, ...]
    link: str | None  # the worst link among the devices (None for one device)


@dataclass
class SimNode:
    name: str
    ip: str
    layout: NodeLayout
    topology_file: Path
    directory: Path
    gpus: int | None  # nvidia.com/gpu in allocatable; None: the device plugin is absent (DRA nodes)
    kubelet: FakeKubelet | None = None
    # Per pod, each container's devices: GPU indices, one per replica on a time-sliced node.
    held: dict[tuple[str, str], list[tuple[str, tuple[int, ...]]]] = field(default_factory=dict)
    replicas: int = 0  # time-sliced: replicas a GPU; 0: whole GPUs
    resource: str = GPU  # what pods ask here

    def device_ids(self, devices: tuple[int, ...], numbering: dict[int, int]) -> list[FakeDevice]:
        """The ids of ``devices``: indices, or on a time-sliced node the next replicas of each."""
        ids = []
        for i in devices:
            if self.replicas:
                n = numbering[i] = numbering.get(i, -1) + 1
                ids.append(FakeDevice(f"{i}::{n}", (self.layout.numa_of(i),)))
            else:
                ids.append(FakeDevice(str(i), (self.layout.numa_of(i),)))
        return ids

    @property
    def socket(self) -> str:
        return str(self.directory / "kubelet.sock")

    @property
    def checkpoint(self) -> Path:
        return self.directory / "kubelet_internal_checkpoint"

    def taken(self) -> set[int]:
        return {i for containers in self.held.values() for _, devices in containers for i in devices}

    def free(self) -> frozenset[int]:
        return frozenset(range(self.layout.size)) - self.taken()


class Kubelets:
    """The simulated nodes of one test, and the thread that plays their kubelets."""

    def __init__(self, api: Api, directory: Path, *, policy: str = "aligned", resource: str = GPU,
                 poll: float = 0.1) -> None:
        self.api = api
        self.directory = directory
        directory.mkdir(parents=True, exist_ok=True)
        self.policy = policy_named(policy)
        self.resource = resource
        self.poll = poll
        self.nodes: dict[str, SimNode] = {}
        self.grants: list[Grant] = []
        self.containers: dict[tuple[str, str], list[Process]] = {}  # the gpupair containers running, by pod
        self.errors: list[str] = []
        self._loop = asyncio.new_event_loop()
        self._loop_thread = threading.Thread(target=self._loop.run_forever, name="podresources", daemon=True)
        self._loop_thread.start()
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._watcher = threading.Thread(target=self._watch, name="kubelets", daemon=True)
        self._watcher.start()

    # --- nodes

    def add_node(self, name: str, topology_file: Path, *, gpus: int | None = 8, cpu: str = "32",
                 memory: str = "256Gi", labels: dict[str, str] | None = None, replicas: int = 0,
                 renamed: bool = False) -> SimNode:
        """A Ready node with the layout of ``topology_file`` (``nvidia-smi topo -m`` output) and a
        PodResources socket; ``gpus=None``: no device plugin (the GPUs come from DRA);
        ``replicas``: time-sliced, each GPU offered that many times (``renamed``: as
        nvidia.com/gpu.shared)."""
        index = len(self.nodes) + 1
        directory = self.directory / name
        directory.mkdir()
        node = SimNode(name, f"127.0.1.{index}", load_layout(topology_file), topology_file, directory, gpus,
                       replicas=replicas, resource=SHARED if replicas and renamed else self.resource)
        obj = {"apiVersion": "v1", "kind": "Node",
               "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux",
                                                     GPU_NODE_LABEL: "true", **(labels or {})}}}
        self.api.create(obj)
        capacity = {"cpu": cpu, "memory": memory, "pods": "110", "ephemeral-storage": "100Gi"}
        if gpus is not None:
            capacity[node.resource] = str(gpus * max(replicas, 1))
        now = _now()
        status = {"status": {
            "capacity": capacity, "allocatable": capacity,
            "addresses": [{"type": "InternalIP", "address": node.ip}, {"type": "Hostname", "address": name}],
            "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                            "message": "harness kubelet", "lastHeartbeatTime": now, "lastTransitionTime": now}],
            "nodeInfo": {"kubeletVersion": "v1.36.2", "architecture": "amd64", "operatingSystem": "linux",
                         "machineID": "", "systemUUID": "", "bootID": "", "kernelVersion": "",
                         "osImage": "harness", "containerRuntimeVersion": "harness://1",
                         "kubeProxyVersion": ""},
        }}
        self.api.patch(obj, status, sub="status")
        current = self.api.get("v1", "Node", name)
        taints = [t for t in (current["spec"].get("taints") or []) if t["key"] != NOT_READY_TAINT]
        self.api.patch(obj, {"spec": {"taints": taints or None}})
        node.kubelet = FakeKubelet(node.socket)
        every = tuple(i for i in range(node.layout.size) for _ in range(max(replicas, 1)))
        node.kubelet.allocatable = {node.resource: node.device_ids(every, {})} if gpus is not None else {}
        self._run(node.kubelet.start())
        node.checkpoint.write_text("{}")
        with self._lock:
            self.nodes[name] = node
        return node

    def _run(self, coroutine) -> Any:
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result(30)

    # --- the kubelets' work

    def _watch(self) -> None:
        while not self._stop.wait(self.poll):
            try:
                pods = self.api.list("v1", "Pod")
            except Exception as exc:  # the apiserver going away at the end of a session
                self.errors.append(f"list pods: {exc}")
                continue
            for pod in pods:  # items of a list carry no kind of their own
                pod.update(apiVersion="v1", kind="Pod")
            with self._lock:
                try:
                    self._sync(pods)
                except Exception as exc:  # a harness bug: fail the test, do not stop playing the kubelet
                    self.errors.append(f"kubelet sync: {exc!r}")

    def _sync(self, pods: list[dict[str, Any]]) -> None:
        live: dict[tuple[str, str, str], dict[str, Any]] = {}
        for pod in pods:
            node = self.nodes.get(pod["spec"].get("nodeName") or "")
            if node is None:
                continue
            if pod["metadata"].get("deletionTimestamp"):
                self._remove(pod)  # kill the containers, then confirm the delete
                continue
            live[(node.name, pod["metadata"]["namespace"], pod["metadata"]["name"])] = pod
        # Devices of pods that are gone come back first: the device manager frees a dead pod's
        # devices before it admits a new one.
        for node in self.nodes.values():
            gone = [k for k in node.held if (node.name, *k) not in live]
            for key in gone:
                del node.held[key]
                self._stop_containers(key)
            if gone:
                self._publish(node)
        # In the order a kubelet's watch would deliver them: by the resourceVersion of the write
        # that put them on the node (their creation if pinned, their Binding otherwise).
        for (name, namespace, pod_name), pod in sorted(live.items(), key=lambda kv: int(kv[1]["metadata"]["resourceVersion"])):
            node = self.nodes[name]
            if (namespace, pod_name) not in node.held:
                self._admit(node, pod)

    def _admit(self, node: SimNode, pod: dict[str, Any]) -> None:
        meta = pod["metadata"]
        key = (meta["namespace"], meta["name"])
        hint = (meta.get("annotations") or {}).get(DEVICES_HINT)
        containers: list[tuple[str, tuple[int, ...]]] = []
        for container in pod["spec"]["containers"]:
            ask = gpu_ask(container, node.resource) if node.gpus is not None else 0
            if not ask:
                continue
            free = node.free() - {i for _, d in containers for i in d}
            if hint is not None:
                devices: tuple[int, ...] | None = tuple(int(i) for i in hint.split(","))
                if len(devices) != ask or not self._room(node, [d for _, d in containers], devices, free):
                    devices = None
            elif node.replicas:
                devices = self._replicas(node, [d for _, d in containers], ask)
            else:
                devices = self.policy.pick(node.layout, free, ask)
            if devices is None:
                self.errors.append(f"{key[0]}/{key[1]} on {node.name}: asked {ask} of {sorted(free)} "
                                   f"(hint {hint!r}): the kubelet would refuse it (UnexpectedAdmissionError)")
                node.held[key] = []
                self._set_phase(pod, node, "Failed")
                return
            containers.append((container["name"], tuple(sorted(devices))))
        node.held[key] = containers
        for _, devices in containers:
            link = node.layout.worst_link(sorted(set(devices))) if len(set(devices)) > 1 else None
            self.grants.append(Grant(key[0], key[1], node.name, devices, link))
        if containers:
            self._publish(node)
        self._set_phase(pod, node, "Running")
        self._start_gpupair_containers(node, pod)

    @staticmethod
    def _room(node: SimNode, admitting: list[tuple[int, ...]], devices: tuple[int, ...], free: frozenset[int]) -> bool:
        """Whether ``devices`` (on a time-sliced node, an index per replica) are there to hand out."""
        if not node.replicas:
            return set(devices) <= free and len(set(devices)) == len(devices)
        taken = Counter(i for containers in node.held.values() for _, held in containers for i in held)
        taken.update(i for held in admitting for i in held)
        taken.update(devices)
        return all(0 <= i < node.layout.size and count <= node.replicas for i, count in taken.items())

    @staticmethod
    def _replicas(node: SimNode, admitting: list[tuple[int, ...]], ask: int) -> tuple[int, ...] | None:
        """``ask`` replicas as NVIDIA's device plugin hands them out (distributedAlloc): each
        from the GPU with the fewest replicas taken, the lowest index on ties."""
        taken = Counter(i for containers in node.held.values() for _, devices in containers for i in devices)
        taken.update(i for devices in admitting for i in devices)
        picked = []
        for _ in range(ask):
            left = [i for i in range(node.layout.size) if taken[i] < node.replicas]
            if not left:
                return None
            chosen = min(left, key=lambda i: (taken[i], i))
            taken[chosen] += 1
            picked.append(chosen)
        return tuple(picked)

    def _start_gpupair_containers(self, node: SimNode, pod: dict[str, Any]) -> None:
        """Run the pod's gpupair containers (the injected verifier sidecar: args ``verify``) as a
        kubelet would: downward-API env, and each projected service-account token it mounts
        minted with TokenRequest (bound to the pod, for the volume's audience) into a file
        where its mount path names one."""
        meta = pod["metadata"]
        key = (meta["namespace"], meta["name"])
        for spec in (pod["spec"].get("initContainers") or []) + pod["spec"]["containers"]:
            if (spec.get("args") or [])[:1] != ["verify"]:
                continue
            pod_dir = node.directory / "pods" / f"{key[0]}_{key[1]}"
            env = resolved_env(spec, {"metadata.name": meta["name"], "metadata.namespace": meta["namespace"],
                                      "metadata.uid": meta["uid"], "spec.nodeName": node.name,
                                      "status.hostIP": node.ip})
            volumes = {v["name"]: v for v in pod["spec"].get("volumes") or []}
            for mount in spec.get("volumeMounts") or []:
                here = pod_dir / mount["name"]
                for source in (volumes.get(mount["name"], {}).get("projected") or {}).get("sources") or []:
                    wanted = source.get("serviceAccountToken")
                    if wanted is None:
                        continue
                    token = self.api.request_token(
                        meta["namespace"], pod["spec"].get("serviceAccountName") or "default",
                        audiences=[wanted["audience"]] if wanted.get("audience") else None, bound_pod=pod,
                        seconds=int(wanted.get("expirationSeconds", 3600)))
                    here.mkdir(parents=True, exist_ok=True)
                    (here / wanted["path"]).write_text(token)
                env = {k: v.replace(mount["mountPath"], str(here)) for k, v in env.items()}
            pod_dir.mkdir(parents=True, exist_ok=True)
            process = Process(f"{key[1]}/{spec['name']}", gpupair_argv(list(spec["args"])),
                              pod_dir / f"{spec['name']}.log", env={**base_env(), **env})
            self.containers.setdefault(key, []).append(process)

    def _stop_containers(self, key: tuple[str, str]) -> None:
        for process in self.containers.pop(key, []):
            process.stop(grace=2.0)

    def _publish(self, node: SimNode) -> None:
        """What the kubelet would answer now, and a rewritten checkpoint (the reporter's cue)."""
        assert node.kubelet is not None
        pods, numbering = [], {}
        for (namespace, name), containers in node.held.items():
            pods.append(FakePod(namespace, name, [
                FakeContainer(cname, {node.resource: node.device_ids(devices, numbering)})
                for cname, devices in containers]))
        node.kubelet.pods = pods  # one reference swap; the gRPC handlers read it whole
        node.checkpoint.write_text(f'{{"harness": {time.monotonic_ns()}}}')

    def _set_phase(self, pod: dict[str, Any], node: SimNode, phase: str) -> None:
        now = _now()
        ready = "True" if phase == "Running" else "False"
        status = {"status": {
            "phase": phase, "hostIP": node.ip, "hostIPs": [{"ip": node.ip}], "podIP": node.ip,
            "podIPs": [{"ip": node.ip}], "startTime": now,
            "conditions": [{"type": t, "status": ready if t != "PodScheduled" else "True", "lastTransitionTime": now}
                           for t in ("PodScheduled", "Initialized", "ContainersReady", "Ready")],
        }}
        try:
            self.api.patch(pod, status, sub="status")
        except ApiError as exc:
            if exc.status != 404:
                self.errors.append(f"status of {pod['metadata']['name']}: {exc}")

    def _remove(self, pod: dict[str, Any]) -> None:
        with contextlib.suppress(ApiError):
            self.api.delete(pod, grace=0)

    # --- what tests read

    def free(self, node: str) -> frozenset[int]:
        with self._lock:
            return self.nodes[node].free()

    def wait_admitted(self, namespace: str, names: list[str], timeout: float) -> list[Grant]:
        """The grants of these pods once the kubelet admitted all of them (pods that asked no GPU
        count once Running)."""
        deadline = time.monotonic() + timeout
        while True:
            with self._lock:
                held = {name: node.name for node in self.nodes.values() for (ns, name) in node.held if ns == namespace}
                grants = [g for g in self.grants if g.namespace == namespace and g.pod in names]
            if all(name in held for name in names):
                return grants
            if time.monotonic() > deadline:
                missing = [name for name in names if name not in held]
                raise TimeoutError(f"pods not admitted on any node within {timeout:g} s: {missing}; "
                                   f"kubelet errors: {self.errors[-3:]}")
            time.sleep(self.poll / 2)

    def close(self) -> None:
        self._stop.set()
        self._watcher.join(10)
        for key in list(self.containers):
            self._stop_containers(key)
        for node in self.nodes.values():
            if node.kubelet is not None:
                with contextlib.suppress(Exception):
                    self._run(node.kubelet.stop())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._loop_thread.join(10)
        self._loop.close()
        with contextlib.suppress(OSError):
            for node in self.nodes.values():
                os.unlink(node.checkpoint)
