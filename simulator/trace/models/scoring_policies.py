"""The scheduler's own scoring in a trace replay: FGD's six policies and kube-scheduler's profiles.

FGD's six (its simulator's score plugins, from their published definitions; FGD's repository
``pkg/simulator/plugin``): Random, DotProd, GpuClustering, GpuPacking, BestFit and FGD, each the
profile's only score plugin. kube-scheduler's profiles are those ``simulate`` models elsewhere
(simulator/models/kube_scoring.py): NodeResourcesFit and BalancedAllocation, here vectorised. A GPU
share is scored as ``nvidia.com/gpu`` in milli: a time-sliced GPU's replicas, or a sharing DRA
driver's capacity, as kube-scheduler counts them.

Each policy scores the nodes that passed the filters, and picks the GPU a share goes on (the
sharing layer's choice; whole GPUs are the device plugin's or the DRA allocator's).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gpupair.kubewire.defaults import DEFAULT_MEMORY_REQUEST_MIB, DEFAULT_MILLI_CPU_REQUEST, MAX_NODE_SCORE
from gpupair.simulator.models.kube_scoring import PROFILES, Profile
from gpupair.decide.score import fragmentation
from gpupair.simulator.trace.node_arrays import TraceCluster
from gpupair.simulator.trace.files import MILLI, TracePod


def after_whole(left: np.ndarray, gpus: int) -> np.ndarray:
    """Each row's GPUs once ``gpus`` whole ones are taken, the lowest-indexed free ones first."""
    free = left == MILLI
    taken = free & (np.cumsum(free, axis=-1) <= gpus)
    return np.where(taken, 0, left)


def best_share_gpu(left: np.ndarray, milli: int) -> int:
    """The GPU with the least milli left that still holds the share (ties: lowest index)."""
    fitting = np.where(left >= milli, left, MILLI + 1)
    return int(np.argmin(fitting))


class ScoringPolicy:
    name = ""
    weight = 1  # the score plugin's weight in the profile

    def bind(self, cluster: TraceCluster, workload, rng: np.random.Generator) -> None:
        self.cluster, self.rng = cluster, rng

    def scores(self, pod: TracePod, rows: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def share_gpu(self, pod: TracePod, row: int) -> int:
        return best_share_gpu(self.cluster.left[row], pod.milli_per_gpu)

    def placed(self, row: int) -> None:
        """The cluster changed at ``row``."""


class RandomPolicy(ScoringPolicy):
    """PreScore draws one feasible node uniformly; it scores 100, the rest 0."""

    name = "Random"

    def scores(self, pod, rows):
        out = np.zeros(len(rows), dtype=np.int64)
        out[int(self.rng.integers(len(rows)))] = MAX_NODE_SCORE
        return out

    def share_gpu(self, pod, row):
        fitting = np.flatnonzero(self.cluster.left[row] >= pod.milli_per_gpu)
        return int(fitting[int(self.rng.integers(len(fitting)))])


class DotProdPolicy(ScoringPolicy):
    """The dot product of the node's CPU and GPU left with the pod's ask, each over the largest
    node's, averaged: the pod goes where the product is smallest."""

    name = "DotProd"

    def scores(self, pod, rows):
        c = self.cluster
        cpu_max, gpu_max = float(c.cpu_capacity.max()), float(MILLI * c.width)
        product = (c.cpu_left[rows] / cpu_max) * (pod.milli_cpu / cpu_max) \
            + (c.left[rows].sum(axis=1) / gpu_max) * (pod.gpu_milli / gpu_max)
        return np.trunc(MAX_NODE_SCORE * (1 - product / 2)).astype(np.int64)


class GpuClusteringPolicy(ScoringPolicy):
    """Pods of one kind (a share, or k whole GPUs) together: a node holding only this kind scores
    75 and up, holding it among others 50, holding no GPU pod 25, plus a quarter by GPU use."""

    name = "GpuClustering"

    def scores(self, pod, rows):
        from gpupair.simulator.trace.node_arrays import label_of

        c = self.cluster
        if not pod.gpus:
            return np.zeros(len(rows), dtype=np.int64)
        gpu_max = MILLI * c.width
        base = (MAX_NODE_SCORE // 4) * (gpu_max - c.left[rows].sum(axis=1)) // gpu_max
        labels = c.labels[rows]
        own = labels[:, label_of(pod)] > 0
        kinds = (labels[:, 1:] > 0).sum(axis=1)
        bonus = np.where(own & (kinds == 1), 75, np.where(own, 50, np.where(kinds == 0, 25, 0)))
        return base + bonus


class GpuPackingPolicy(ScoringPolicy):
    """Shares onto GPUs already shared, whole GPUs onto nodes already in use, empty nodes last."""

    name = "GpuPacking"

    def scores(self, pod, rows):
        c = self.cluster
        if not pod.gpus:
            return np.zeros(len(rows), dtype=np.int64)
        left = c.left[rows]
        gpus = c.gpus[rows]
        free = (left == MILLI).sum(axis=1)
        empty = np.maximum(33 - free, free)
        ordered = np.sort(np.where(np.arange(c.width) < gpus[:, None], left, -1), axis=1)
        holds = ordered >= pod.milli_per_gpu
        taken = holds & (np.cumsum(holds, axis=1) <= pod.gpus)
        whole = (taken & (ordered == MILLI)).sum(axis=1)
        percent = (np.where(taken, ordered, 0) * 100 // MILLI).sum(axis=1)
        partial = np.where(whole > 0, np.maximum(50 - whole, 33), np.maximum(100 - percent // 10, 50))
        return np.where(free == gpus, empty, partial)


class BestFitPolicy(ScoringPolicy):
    """Least left after the pod, CPU and GPU weighed alike; normalised to 0-100 over the nodes."""

    name = "BestFit"

    def scores(self, pod, rows):
        c = self.cluster
        cpu_max, gpu_max = float(c.cpu_capacity.max()), float(MILLI * c.width)
        left = 0.5 * (c.cpu_left[rows] - pod.milli_cpu) / cpu_max \
            + 0.5 * (c.left[rows].sum(axis=1) - pod.gpu_milli) / gpu_max
        raw = np.trunc(MAX_NODE_SCORE * (1 - left)).astype(np.int64)
        low, high = raw.min(), raw.max()
        if high == low:
            return np.zeros(len(rows), dtype=np.int64)
        return (raw - low) * MAX_NODE_SCORE // (high - low)


class FgdPolicy(ScoringPolicy):
    """Fragmentation gradient descent: where the target workload loses the least."""

    name = "FGD"

    def bind(self, cluster, workload, rng):
        super().bind(cluster, workload, rng)
        self.measure = fragmentation.Fragmentation(workload, cluster.models)
        self.now = self.measure.amount(cluster.cpu_left, cluster.left, cluster.model)
        self.choice: tuple[TracePod | None, dict[int, int]] = (None, {})  # a share pod's GPU per node

    def placed(self, row):
        c = self.cluster
        self.now[row] = self.measure.amount(c.cpu_left[row:row + 1], c.left[row:row + 1], c.model[row:row + 1])[0]

    def scores(self, pod, rows):
        c = self.cluster
        cpu_after = c.cpu_left[rows] - pod.milli_cpu
        left = c.left[rows]
        if pod.gpus and pod.milli_per_gpu < MILLI:
            # A share: each GPU that holds it is a candidate; the node scores its best one.
            width = c.width
            after = np.repeat(left[:, None, :], width, axis=1)
            candidates = np.arange(width)
            after[:, candidates, candidates] -= pod.milli_per_gpu
            holds = left >= pod.milli_per_gpu
            amounts = self.measure.amount(np.repeat(cpu_after[:, None], width, axis=1), after,
                                          np.repeat(c.model[rows][:, None], width, axis=1))
            each = np.where(holds, fragmentation.fgd_score(self.now[rows][:, None], amounts), -1)
            best = each.argmax(axis=1)
            self.choice = (pod, dict(zip(rows.tolist(), best.tolist())))
            return each[np.arange(len(rows)), best]
        after = after_whole(left, pod.gpus) if pod.gpus else left
        return fragmentation.fgd_score(self.now[rows], self.measure.amount(cpu_after, after, c.model[rows]))

    def share_gpu(self, pod, row):
        """The GPU this pod's own scoring chose; scored afresh where it was not (one node
        passed, and kube-scheduler took it unscored)."""
        chosen_for, choice = self.choice
        if chosen_for is not pod or row not in choice:
            self.scores(pod, np.array([row]))
            chosen_for, choice = self.choice
        return choice[row]


@dataclass
class KubeProfilePolicy(ScoringPolicy):
    """A kube-scheduler profile's NodeResourcesFit and BalancedAllocation scores."""

    profile: Profile
    name: str = ""
    weight: int = 1

    def scores(self, pod, rows):
        c = self.cluster
        fit = self.profile.fit
        most = fit.kind == "MostAllocated"
        total = np.zeros(len(rows), dtype=np.int64)
        weights = np.zeros(len(rows), dtype=np.int64)  # per node: a resource it has none of is skipped, weight too
        for resource, weight in fit.resources:
            if resource == "cpu":
                capacity, requested = c.cpu_capacity[rows], c.cpu_scored[rows] + (pod.milli_cpu or DEFAULT_MILLI_CPU_REQUEST)
            elif resource == "memory":
                capacity, requested = c.memory_capacity[rows], c.memory_scored[rows] + (pod.memory_mib or DEFAULT_MEMORY_REQUEST_MIB)
            else:
                if not pod.gpus:
                    continue  # an extended resource the pod does not ask is not scored
                capacity = c.gpus[rows] * MILLI
                requested = capacity - c.left[rows].sum(axis=1) + pod.gpu_milli
            safe = np.maximum(capacity, 1)
            if most:
                part = np.minimum(requested, capacity) * MAX_NODE_SCORE // safe
            else:
                part = np.where(requested > capacity, 0, (capacity - requested) * MAX_NODE_SCORE // safe)
            total += np.where(capacity == 0, 0, part * weight)
            weights += np.where(capacity == 0, 0, weight)
        score = np.where(weights > 0, total // np.maximum(weights, 1), 0) * self.profile.fit_weight
        if pod.milli_cpu or pod.memory_mib:
            score = score + self._balanced(pod, rows) * self.profile.balanced_weight
        return score

    def _balanced(self, pod, rows):
        c = self.cluster
        cpu_cap, mem_cap = c.cpu_capacity[rows], c.memory_capacity[rows]
        cpu_used, mem_used = cpu_cap - c.cpu_left[rows], mem_cap - c.memory_left[rows]

        both = (cpu_cap > 0) & (mem_cap > 0)  # with one resource of the two, its spread is 0

        def balance(cpu, mem):
            fractions = (np.minimum(cpu / np.maximum(cpu_cap, 1), 1.0), np.minimum(mem / np.maximum(mem_cap, 1), 1.0))
            spread = np.where(both, np.abs((fractions[0] - fractions[1]) / 2), 0.0)
            return np.trunc((1 - spread) * MAX_NODE_SCORE).astype(np.int64)

        half = MAX_NODE_SCORE // 2
        return half + (half + balance(cpu_used + pod.milli_cpu, mem_used + pod.memory_mib)
                       - balance(cpu_used, mem_used)) // 2


FGD_POLICIES = {"random": RandomPolicy, "dotprod": DotProdPolicy, "gpuclustering": GpuClusteringPolicy,
                "gpupacking": GpuPackingPolicy, "bestfit": BestFitPolicy, "fgd": FgdPolicy}
KUBE_POLICIES = {"kube-default": "default", "kube-gpu-binpack": "gpu-binpack", "kube-gpu-spread": "gpu-spread"}
POLICY_NAMES = (*FGD_POLICIES, *KUBE_POLICIES)


def make_policy(name: str) -> ScoringPolicy:
    key = name.lower()
    if key in FGD_POLICIES:
        return FGD_POLICIES[key]()
    if key in KUBE_POLICIES:
        return KubeProfilePolicy(PROFILES[KUBE_POLICIES[key]], key)
    raise ValueError(f"--policies: unknown policy {name!r}; known: {', '.join(POLICY_NAMES)}")


def display_name(name: str) -> str:
    """FGD's spelling for its six (``GpuPacking``), the profile's name for kube-scheduler's."""
    key = name.lower()
    return FGD_POLICIES[key].name if key in FGD_POLICIES else key
