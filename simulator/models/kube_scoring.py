"""kube-scheduler v1.36's resource scoring, transcribed: NodeResourcesFit and BalancedAllocation.

Only these two score plugins tell nodes apart in the simulator's clusters: the other plugins of
the default profile (TaintToleration, NodeAffinity, PodTopologySpread, InterPodAffinity,
ImageLocality) give every node the same score or skip, since the simulated pods carry no
affinity, spread constraints or tolerations and the nodes no taints.

Sources (kubernetes/kubernetes, pkg/scheduler/):
- framework/plugins/noderesources/resource_allocation.go: NodeResourcesFit scores
  ``NonZeroRequested`` cpu/memory (containers that request none count as 100m CPU and 200Mi
  memory) and the pod's request with the same defaults; BalancedAllocation (``useRequested``)
  scores the real requests. An extended resource (``nvidia.com/gpu``) is scored only when the pod
  requests it, as node ``Requested`` plus the pod's request.
- least_allocated.go / most_allocated.go: per resource ``(capacity-requested)*100/capacity`` or
  ``requested*100/capacity`` (MostAllocated caps requested at capacity, LeastAllocated scores 0
  past it), then the weighted mean, all in int64 arithmetic.
- balanced_allocation.go: skipped for a pod that requests no cpu and no memory (best-effort,
  kubernetes#129138); v1.36 scores the change in balance (kubernetes#135573): with ``b(x) =
  int((1 - std(fractions of x)) * 100)``, score = 50 + (50 + b(with pod) - b(without pod)) / 2.
- apis/config/v1/default_plugins.go: weights NodeResourcesFit 1, BalancedAllocation 1;
  defaults.go: NodeResourcesFit's strategy LeastAllocated over cpu and memory, weight 1 each.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from gpupair.kubewire.defaults import DEFAULT_MEMORY_REQUEST_MIB, DEFAULT_MILLI_CPU_REQUEST, MAX_NODE_SCORE

DEFAULT_MEMORY_REQUEST = DEFAULT_MEMORY_REQUEST_MIB * 1024 * 1024  # bytes
GPU = "nvidia.com/gpu"


_FIELD = {"cpu": "milli_cpu", "memory": "memory", GPU: "gpus"}


@dataclass(frozen=True)
class PodRequest:
    """What one pod (one container) requests; 0 means the container requests none."""

    gpus: int
    milli_cpu: int = 0
    memory: int = 0  # bytes

    def non_zero(self) -> "PodRequest":
        """The request as NodeResourcesFit scores it: missing cpu/memory become the defaults."""
        return PodRequest(
            self.gpus,
            self.milli_cpu or DEFAULT_MILLI_CPU_REQUEST,
            self.memory or DEFAULT_MEMORY_REQUEST,
        )

    def amount(self, resource: str) -> int:
        return getattr(self, _FIELD[resource])


@dataclass(frozen=True)
class PerGpu:
    """A workload's cpu and memory requests per GPU it asks for (0: none, as the seed's pods)."""

    milli_cpu: int = 0
    memory: int = 0  # bytes

    def request(self, gpus: int) -> PodRequest:
        return PodRequest(gpus, self.milli_cpu * gpus, self.memory * gpus)


@dataclass(frozen=True)
class NodeAllocatable:
    milli_cpu: int
    memory: int  # bytes
    gpus: int

    def amount(self, resource: str) -> int:
        return getattr(self, _FIELD[resource])


@dataclass(frozen=True)
class NodeUsage:
    """A node's allocatable and the sums over the pods counted against it (bound or assumed)."""

    allocatable: NodeAllocatable
    requested: PodRequest  # real requests: the fit check, BalancedAllocation, extended resources
    non_zero_requested: PodRequest  # cpu/memory with the defaults: NodeResourcesFit's score

    @classmethod
    def of(cls, allocatable: NodeAllocatable, pods: Iterable[PodRequest]) -> "NodeUsage":
        gpus = cpu = memory = cpu_non_zero = memory_non_zero = 0
        for pod in pods:
            gpus += pod.gpus
            cpu += pod.milli_cpu
            memory += pod.memory
            cpu_non_zero += pod.milli_cpu or DEFAULT_MILLI_CPU_REQUEST
            memory_non_zero += pod.memory or DEFAULT_MEMORY_REQUEST
        return cls(allocatable, PodRequest(gpus, cpu, memory), PodRequest(gpus, cpu_non_zero, memory_non_zero))

    def fits(self, pod: PodRequest) -> bool:
        """NodeResourcesFit's filter: real requests against what is left of allocatable."""
        free, used = self.allocatable, self.requested
        return (
            (pod.gpus == 0 or pod.gpus <= free.gpus - used.gpus)
            and (pod.milli_cpu == 0 or pod.milli_cpu <= free.milli_cpu - used.milli_cpu)
            and (pod.memory == 0 or pod.memory <= free.memory - used.memory)
        )


def least_requested_score(requested: int, capacity: int) -> int:
    if capacity == 0 or requested > capacity:
        return 0
    return (capacity - requested) * MAX_NODE_SCORE // capacity


def most_requested_score(requested: int, capacity: int) -> int:
    if capacity == 0:
        return 0
    requested = min(requested, capacity)  # pods with no requests get minimum values
    return requested * MAX_NODE_SCORE // capacity


@dataclass(frozen=True)
class FitStrategy:
    """NodeResourcesFit's scoringStrategy: its type and ``resources`` with their weights."""

    kind: str  # "LeastAllocated" | "MostAllocated"
    resources: tuple[tuple[str, int], ...]

    def score(self, pod: PodRequest, node: NodeUsage) -> int:
        per_resource = least_requested_score if self.kind == "LeastAllocated" else most_requested_score
        scored = weights = 0
        for resource, weight in self.resources:
            requested_by_pod = pod.non_zero().amount(resource) if resource != GPU else pod.gpus
            if resource == GPU and requested_by_pod == 0:
                continue  # an extended resource the pod does not request is not scored
            capacity = node.allocatable.amount(resource)
            if capacity == 0:
                continue
            on_node = node.requested.gpus if resource == GPU else node.non_zero_requested.amount(resource)
            scored += per_resource(on_node + requested_by_pod, capacity) * weight
            weights += weight
        return scored // weights if weights else 0


def _balance(requested: list[int], allocatable: list[int]) -> int:
    fractions = [min(req / alloc, 1.0) for req, alloc in zip(requested, allocatable) if alloc]
    std = 0.0
    if len(fractions) == 2:
        std = abs((fractions[0] - fractions[1]) / 2)
    elif len(fractions) > 2:
        mean = sum(fractions) / len(fractions)
        std = (sum((f - mean) * (f - mean) for f in fractions) / len(fractions)) ** 0.5
    return int((1 - std) * float(MAX_NODE_SCORE))


BALANCED_RESOURCES = ("cpu", "memory")  # NodeResourcesBalancedAllocationArgs' default


def balanced_allocation_score(pod: PodRequest, node: NodeUsage) -> int | None:
    """None when the plugin skips the pod (it requests no cpu and no memory)."""
    if all(pod.amount(r) == 0 for r in BALANCED_RESOURCES):
        return None
    allocatable = [node.allocatable.amount(r) for r in BALANCED_RESOURCES]
    without = [node.requested.amount(r) for r in BALANCED_RESOURCES]
    with_pod = [w + pod.amount(r) for w, r in zip(without, BALANCED_RESOURCES)]
    half = MAX_NODE_SCORE // 2
    return half + (half + _balance(with_pod, allocatable) - _balance(without, allocatable)) // 2


@dataclass(frozen=True)
class Profile:
    """A kube-scheduler profile as far as resource scoring goes."""

    name: str
    fit: FitStrategy
    fit_weight: int = 1
    balanced_weight: int = 1
    summary: str = ""

    def score(self, pod: PodRequest, node: NodeUsage) -> int:
        total = self.fit.score(pod, node) * self.fit_weight
        balanced = balanced_allocation_score(pod, node)
        if balanced is not None:
            total += balanced * self.balanced_weight
        return total


CPU_MEMORY = (("cpu", 1), ("memory", 1))
# The weight 3 for the extended resource is the one in Kubernetes' own bin-packing example
# (docs: "Resource Bin Packing"), the configuration GPU clusters commonly copy.
WITH_GPUS = CPU_MEMORY + ((GPU, 3),)

PROFILES = {
    "default": Profile(
        "default", FitStrategy("LeastAllocated", CPU_MEMORY),
        summary="kube-scheduler's default profile: LeastAllocated over cpu and memory; GPUs are not scored",
    ),
    "gpu-binpack": Profile(
        "gpu-binpack", FitStrategy("MostAllocated", WITH_GPUS),
        summary="NodeResourcesFit MostAllocated with nvidia.com/gpu (weight 3) in scoringStrategy.resources",
    ),
    "gpu-spread": Profile(
        "gpu-spread", FitStrategy("LeastAllocated", WITH_GPUS),
        summary="NodeResourcesFit LeastAllocated with nvidia.com/gpu (weight 3) in scoringStrategy.resources",
    ),
}
