"""Placement decisions per second on 8- and 16-GPU nodes.

A decision is what the extender computes for one node and one pod: fit, the device plugin's
expected set (the best-effort model) and the score. Figures:
- cold: every decision on a new free set (the policy's memo cleared), the worst case;
- warm: free sets repeat, as they do across a fleet of identical nodes;
- baseline: the plugin's literal algorithm (enumerate every partition), same inputs, same run,
  on 8-GPU nodes (on 16 GPUs it enumerates up to 2 million partitions per decision);
- worst case at the largest node gpupair accepts (gpupair.topology.limits.MAX_GPUS): every GPU free,
  nothing cached, one decision per pod size.

Run: .venv/bin/python bench/placement.py
"""

from __future__ import annotations

import random
import sys
import time
from itertools import combinations
from pathlib import Path

# After the installed packages: gpupair comes from the install (the checkout's gpupair/ holds
# the core alone), tests/ and bench/ from the checkout.
sys.path.append(str(Path(__file__).resolve().parents[1]))

from gpupair.decide.judge.decisions import Decider, NodeView  # noqa: E402
from gpupair.decide.devices import policies  # noqa: E402
from gpupair.topology.limits import MAX_GPUS  # noqa: E402
from gpupair.topology.layout import Device, NodeLayout, NodeState  # noqa: E402
from gpupair.simulator.shapes import seed_layout  # noqa: E402


def sixteen_gpu_layout() -> NodeLayout:
    """16 GPUs, 2 NUMA nodes, PCIe switches of 2 GPUs (PIX), PXB within a NUMA node half."""
    def label(i: int, j: int) -> str:
        if i == j:
            return "X"
        if i // 2 == j // 2:
            return "PIX"
        if i // 4 == j // 4:
            return "PXB"
        return "NODE" if i // 8 == j // 8 else "SYS"

    return NodeLayout(
        tuple(Device(i, numa_node=i // 8) for i in range(16)),
        tuple(tuple(label(i, j) for j in range(16)) for i in range(16)),
    )


def literal_plugin_pick(layout: NodeLayout, free: frozenset[int], k: int):
    """go-gpuallocator's exhaustive partition enumeration, for the baseline."""
    devices: list[int | None] = sorted(free)
    while len(devices) % k:
        devices.append(None)
    w = layout.pair_weights

    def score(s):
        real = [d for d in s if d is not None]
        return sum(w[a][b] for a, b in combinations(real, 2))

    best = [None, -1]

    def walk(remaining, accum, total):
        if len(remaining) == k:
            t = total + score(remaining)
            if t > best[1]:
                best[0], best[1] = accum + [tuple(remaining)], t
            return
        for others in combinations(remaining[1:], k - 1):
            chosen = (remaining[0], *others)
            walk([d for d in remaining if d not in chosen], accum + [chosen], total + score(chosen))

    walk(devices, [], 0)
    return max((s for s in best[0] if None not in s), key=score)


def workload(layout: NodeLayout, count: int, seed: int):
    rng = random.Random(seed)
    cases = []
    for _ in range(count):
        free = frozenset(i for i in range(layout.size) if rng.random() < 0.6)
        k = rng.choice([2, 2, 2, 4])
        cases.append((NodeState(layout, free), k))
    return cases


def rate(fn, cases) -> tuple[float, float]:
    start = time.perf_counter()
    for state, k in cases:
        fn(state, k)
    elapsed = time.perf_counter() - start
    return len(cases) / elapsed, elapsed


def main() -> None:
    decider = Decider()
    decide = lambda state, k: decider.decide(k, NodeView("n", state))  # noqa: E731
    print(f"{'node':<8} {'mode':<22} {'decisions/s':>12} {'x baseline':>11}")
    for name, layout, count in (("8 GPU", seed_layout(), 3000), ("16 GPU", sixteen_gpu_layout(), 300)):
        cases = workload(layout, count, seed=1)
        policies._best_set.cache_clear()
        cold, _ = rate(decide, cases)
        warm, _ = rate(decide, cases)
        baseline = None
        if layout.size <= 8:
            baseline, _ = rate(lambda s, k: literal_plugin_pick(layout, s.free, k) if len(s.free) >= k else None,
                               cases)
        for mode, value in (("cold (new free sets)", cold), ("warm (repeated sets)", warm)):
            ratio = f"{value / baseline:>10.1f}x" if baseline else f"{'-':>11}"
            print(f"{name:<8} {mode:<22} {value:>12,.0f} {ratio}")
        if baseline:
            print(f"{name:<8} {'baseline: literal plugin':<22} {baseline:>12,.0f} {'1.0x':>11}")
    print()
    print(f"worst case at the largest node accepted ({MAX_GPUS} GPUs, all free, cold):")
    largest = sixteen_gpu_layout()
    assert largest.size == MAX_GPUS
    everything = NodeState(largest, frozenset(range(largest.size)))
    for k in range(2, MAX_GPUS + 1):
        policies._best_set.cache_clear()
        start = time.perf_counter()
        decide(everything, k)
        print(f"  {k:>2}-GPU pod: {1000 * (time.perf_counter() - start):8.1f} ms per decision")


if __name__ == "__main__":
    main()
