"""A trace's fleet as arrays, one row per node: what is left of its CPU, memory and of each GPU.

A replay asks, for each of some 10,000 pods, every one of 1,213 nodes whether the pod fits and
how it scores there; rows of numpy arrays let each question be one vector operation. Only the
node a pod lands on changes, so what is derived per node (the free-GPU mask that gpupair's
tables are read with, FGD's fragmentation) is updated for that row alone.

A GPU's ``left`` is its milli not taken (1000: free). A GPU with any share taken is not free
for a whole-GPU pod: that is how GPU sharing (time-slicing, MPS, a sharing DRA driver) hands out
shares, and how FGD's simulator counts them.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from gpupair.kubewire.defaults import DEFAULT_MEMORY_REQUEST_MIB, DEFAULT_MILLI_CPU_REQUEST
from gpupair.simulator.trace.files import MILLI, TraceNode, TracePod
from gpupair.simulator.trace.numa import NumaSplits
from gpupair.topology.layout import NodeLayout

MAX_PODS = 1001  # pods per node, as FGD's nodes (kubelet's maxPods there)


class TraceCluster:
    def __init__(self, nodes: Sequence[TraceNode], splits: NumaSplits, priority: np.ndarray):
        """``priority``: each node's rank when scores tie (FGD's random name prefix)."""
        self.names = [node.name for node in nodes]
        self.models = sorted({node.model for node in nodes})
        model_ids = {model: i for i, model in enumerate(self.models)}
        count = len(nodes)
        self.width = max([1, *(node.gpus for node in nodes)])
        self.gpus = np.array([node.gpus for node in nodes], dtype=np.int64)
        self.cpu_capacity = np.array([node.milli_cpu for node in nodes], dtype=np.int64)
        self.memory_capacity = np.array([node.memory_mib for node in nodes], dtype=np.int64)
        self.model = np.array([model_ids[node.model] for node in nodes], dtype=np.int64)
        self.cpu_left = self.cpu_capacity.copy()
        self.memory_left = self.memory_capacity.copy()
        self.pods = np.zeros(count, dtype=np.int64)
        # NodeResourcesFit scores requests with defaults for containers that ask none.
        self.cpu_scored = np.zeros(count, dtype=np.int64)
        self.memory_scored = np.zeros(count, dtype=np.int64)
        self.left = np.zeros((count, self.width), dtype=np.int64)
        for row, node in enumerate(nodes):
            self.left[row, :node.gpus] = MILLI
        self.layouts: list[NodeLayout] = []
        layout_ids: dict[int, int] = {}
        for size in sorted({node.gpus for node in nodes}):
            layout_ids[size] = len(self.layouts)
            self.layouts.append(splits.layout(size))
        self.layout_id = np.array([layout_ids[node.gpus] for node in nodes], dtype=np.int64)
        self.bits = np.int64(1) << np.arange(self.width, dtype=np.int64)
        self.free_mask = (self.left == MILLI).astype(np.int64) @ self.bits
        self.priority = np.asarray(priority, dtype=np.int64)
        # Per node, how many of its GPU pods carry each GpuClustering label.
        self.labels = np.zeros((count, 2 + self.width), dtype=np.int64)
        self.total_gpus = int(self.gpus.sum())
        # The GPU pods on each node and their GPUs, kept only where pods may move (a move
        # budget): the defrag planner's picture.
        self.gpu_pods: list[dict[str, tuple[TracePod, tuple[int, ...]]]] | None = None

    def keep_gpu_pods(self) -> None:
        self.gpu_pods = [{} for _ in range(len(self))]

    def __len__(self) -> int:
        return len(self.names)

    def allowed(self, pod: TracePod) -> np.ndarray:
        """Nodes whose model the pod may run on (every node when it names none)."""
        if not pod.models:
            return np.ones(len(self), dtype=bool)
        ids = [i for i, model in enumerate(self.models) if model in pod.models]
        return np.isin(self.model, ids)

    def fits(self, pod: TracePod) -> np.ndarray:
        """kube-scheduler's NodeResourcesFit and the GPU share filter (FGD's Open-Gpu-Share): CPU,
        memory and pod count, and k GPUs each with the pod's milli left, of an allowed model."""
        ok = (self.cpu_left >= pod.milli_cpu) & (self.memory_left >= pod.memory_mib) & (self.pods < MAX_PODS)
        if pod.gpus:
            ok &= ((self.left >= pod.milli_per_gpu).sum(axis=1) >= pod.gpus) & self.allowed(pod)
        return ok

    def place(self, row: int, pod: TracePod, devices: Sequence[int]) -> None:
        self.cpu_left[row] -= pod.milli_cpu
        self.memory_left[row] -= pod.memory_mib
        self.cpu_scored[row] += pod.milli_cpu or DEFAULT_MILLI_CPU_REQUEST
        self.memory_scored[row] += pod.memory_mib or DEFAULT_MEMORY_REQUEST_MIB
        self.pods[row] += 1
        for device in devices:
            self.left[row, device] -= pod.milli_per_gpu
        if pod.gpus:
            self.labels[row, label_of(pod)] += 1
            if self.gpu_pods is not None:
                self.gpu_pods[row][pod.name] = (pod, tuple(devices))
        self.free_mask[row] = int((self.left[row] == MILLI).astype(np.int64) @ self.bits)

    def remove(self, row: int, pod: TracePod) -> tuple[int, ...]:
        """The pod gone from ``row`` (moved: evicted, to be recreated), and the GPUs it held."""
        assert self.gpu_pods is not None, "keep_gpu_pods() first"
        _, devices = self.gpu_pods[row].pop(pod.name)
        self.cpu_left[row] += pod.milli_cpu
        self.memory_left[row] += pod.memory_mib
        self.cpu_scored[row] -= pod.milli_cpu or DEFAULT_MILLI_CPU_REQUEST
        self.memory_scored[row] -= pod.memory_mib or DEFAULT_MEMORY_REQUEST_MIB
        self.pods[row] -= 1
        for device in devices:
            self.left[row, device] += pod.milli_per_gpu
        self.labels[row, label_of(pod)] -= 1
        self.free_mask[row] = int((self.left[row] == MILLI).astype(np.int64) @ self.bits)
        return devices

    def free_devices(self, row: int) -> frozenset[int]:
        mask = int(self.free_mask[row])
        return frozenset(g for g in range(int(self.gpus[row])) if mask >> g & 1)


def label_of(pod: TracePod) -> int:
    """GpuClustering's pod label as a column: 0 none (CPU pod), 1 a GPU share, 1+k for k GPUs."""
    if not pod.gpus:
        return 0
    return 1 if pod.milli_per_gpu < MILLI else 1 + pod.gpus
