"""kube-scheduler's resource scoring as the simulator transcribes it, on upstream's own cases."""

from gpupair.simulator.models.kube_scoring import (
    DEFAULT_MEMORY_REQUEST,
    GPU,
    PROFILES,
    FitStrategy,
    NodeAllocatable,
    NodeUsage,
    PodRequest,
    balanced_allocation_score,
)

CPU_MEMORY = (("cpu", 1), ("memory", 1))


def node(milli_cpu, memory, gpus=8, pods=()):
    return NodeUsage.of(NodeAllocatable(milli_cpu, memory, gpus), pods)


def test_least_and_most_allocated_match_upstream_cases():
    # least_allocated_test.go / most_allocated_test.go: "nothing scheduled, resources requested,
    # differently sized nodes": nodes 4000m/10000 and 6000m/10000, pod 3000m/5000.
    pod = PodRequest(0, 3000, 5000)
    least, most = FitStrategy("LeastAllocated", CPU_MEMORY), FitStrategy("MostAllocated", CPU_MEMORY)
    assert [least.score(pod, node(c, 10000)) for c in (4000, 6000)] == [37, 50]
    assert [most.score(pod, node(c, 10000)) for c in (4000, 6000)] == [62, 50]


def test_containers_without_requests_count_as_100m_and_200mi_in_the_fit_score():
    # The recorded run: 6 busy pods, no requests, on 32 CPU / 256Gi; the pod asks 2 GPUs only.
    busy = node(32_000, 256 * 1024**3, pods=[PodRequest(1)] * 6)
    assert busy.non_zero_requested.milli_cpu == 600
    assert busy.non_zero_requested.memory == 6 * DEFAULT_MEMORY_REQUEST
    # cpu (32000-700)*100/32000 = 97, memory 99: (97 + 99) // 2 = 98, as recorded on every node
    assert PROFILES["default"].fit.score(PodRequest(2), busy) == 98


def test_balanced_allocation_scores_the_change_in_balance_and_skips_best_effort_pods():
    # kubernetes#135573's case: node1 3000m/5000 full of cpu, node2 empty; a memory-only pod.
    pod = PodRequest(0, 0, 5000)
    node1 = node(3000, 5000, pods=[PodRequest(0, 3000, 0)])
    node2 = node(3000, 5000)
    assert balanced_allocation_score(pod, node1) == 100  # imbalanced -> balanced
    assert balanced_allocation_score(pod, node2) == 50  # balanced -> imbalanced
    assert balanced_allocation_score(PodRequest(0, 1000, 1000), node(4000, 4000)) == 75  # no change
    assert balanced_allocation_score(PodRequest(2), node1) is None  # no cpu, no memory: skipped


def test_gpus_count_only_in_the_gpu_profiles_and_only_for_pods_asking_gpus():
    fuller = node(32_000, 256 * 1024**3, pods=[PodRequest(1)] * 6)
    emptier = node(32_000, 256 * 1024**3, pods=[PodRequest(1)] * 4 + [PodRequest(0)] * 2)
    pod = PodRequest(2)
    # Six pods without requests on each: equal for the default profile; 6 GPUs taken against 4.
    assert PROFILES["default"].score(pod, fuller) == PROFILES["default"].score(pod, emptier)
    assert PROFILES["gpu-spread"].score(pod, emptier) > PROFILES["gpu-spread"].score(pod, fuller)
    assert PROFILES["gpu-binpack"].score(pod, fuller) > PROFILES["gpu-binpack"].score(pod, emptier)
    # A pod that asks no GPU is scored on cpu and memory alone, even with nvidia.com/gpu configured.
    no_gpu = PodRequest(0, 1000, 0)
    assert PROFILES["gpu-spread"].fit.score(no_gpu, fuller) == FitStrategy("LeastAllocated", CPU_MEMORY).score(no_gpu, fuller)


def test_fit_check_counts_gpus_cpu_and_memory_by_real_request():
    full_cpu = node(8000, 1024**3, pods=[PodRequest(1, 6000)])
    assert full_cpu.fits(PodRequest(2, 2000))
    assert not full_cpu.fits(PodRequest(2, 2001))
    assert not node(8000, 1024**3, pods=[PodRequest(7)]).fits(PodRequest(2))
    assert node(8000, 1024**3, pods=[PodRequest(0)] * 200).fits(PodRequest(0))  # no request: defaults not counted
    assert GPU == "nvidia.com/gpu"
