"""FGD's experiment protocol ("Beware of Fragmentation", ATC'23), as its simulator
(hkust-adsl/kubernetes-scheduler-simulator) runs it, with facts only carried over:

- pods are shuffled with the run's seed, then sampled until the GPU demand reaches ``tune`` x the
  cluster's GPUs (up: clones of random originals, the first draw that would overshoot ends it;
  down: random pods dropped until under);
- pods only arrive, one at a time; one that fits no node is dropped, never retried;
- after every pod the GPU milli in use and the GPU milli arrived are recorded, and allocation is
  read at each whole arrival percentage as FGD's analysis script bins it (``allocation_curve``).

Seeds are statistical replicas, not FGD's exact draws: its Go runtime's random source is not
reproduced, and could not be (its informers and scheduler draw from it too).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from gpupair.decide.score.fragmentation import Workload
from gpupair.simulator.trace.files import MILLI, TraceNode, TracePod



def arrivals(pods: Sequence[TracePod], nodes: Sequence[TraceNode], rng: np.random.Generator,
             tune: float = 1.3) -> list[TracePod]:
    """The pods in the order they arrive: shuffled, then sampled to ``tune`` x capacity."""
    originals = sorted(pods, key=lambda pod: pod.name)
    order = rng.permutation(len(originals))
    stream = [originals[i] for i in order]
    target = tune * MILLI * sum(node.gpus for node in nodes)
    demand = sum(pod.gpu_milli for pod in stream)
    if demand < target:
        draws = 0
        asks_gpus = any(pod.gpu_milli for pod in originals)  # a CPU-only trace never reaches the target
        while asks_gpus:
            pod = originals[int(rng.integers(len(originals)))]
            if demand + pod.milli_per_gpu > target:  # FGD checks the per-GPU milli, not the total
                break
            demand += pod.gpu_milli
            stream.append(TracePod(f"{pod.name}-tuned-{draws}", pod.milli_cpu, pod.memory_mib, pod.gpus,
                                   pod.milli_per_gpu, pod.models))
            draws += 1
    else:
        while demand > target and stream:
            gone = stream.pop(int(rng.integers(len(stream))))
            demand -= gone.gpu_milli
    return stream


def typical_pods(pods: Sequence[TracePod]) -> list[tuple[tuple[int, int, int, tuple[str, ...]], float]]:
    """FGD's target workload: the most common pod shapes (cpu, milli per GPU, GPUs, models) of
    the trace as given, up to 95% of its pods, each with its share among them."""
    workload = Workload()
    for pod in pods:
        workload.add(pod.shape)
    return workload.typical()


def allocation_curve(arrived: Sequence[int], used: Sequence[int], total_gpus: int,
                     points: range = range(0, 131)) -> dict[int, float | None]:
    """Allocation % at each arrival %, as FGD's ``merge_alloc_discrete.py`` reads its log: every
    event's arrival rounded to a whole % (half to even), its allocation to 0.01; per point the mean
    of the events in that bin, else of the bins one either side, else none."""
    arrive = np.rint(np.asarray(arrived, dtype=float) / total_gpus / 10)
    alloc = np.round(np.asarray(used, dtype=float) / total_gpus / 10, 2)
    curve: dict[int, float | None] = {}
    for point in points:
        here = alloc[arrive == point]
        if not here.size:
            here = alloc[(arrive >= point - 1) & (arrive <= point + 1)]
        curve[point] = round(float(here.mean()), 2) if here.size else None
    return curve


def spent_by(arrived: Sequence[int], spent: Sequence[int], total_gpus: int,
             points: range = range(0, 131)) -> dict[int, int]:
    """A running count (moves spent) at each arrival %: its value at the last event whose
    arrival, binned as ``allocation_curve`` bins it, is at or below the point."""
    arrive = np.rint(np.asarray(arrived, dtype=float) / total_gpus / 10)
    counts = np.asarray(spent, dtype=np.int64)
    curve: dict[int, int] = {}
    for point in points:
        upto = np.flatnonzero(arrive <= point)
        curve[point] = int(counts[upto[-1]]) if upto.size else 0
    return curve
