"""Many replays of one trace, spread over the machine's cores.

Each replay is independent (its own cluster and seed), so runs go to a process pool; the
results come back in the order the configurations were listed, whatever order they finish in.
"""

from __future__ import annotations

import multiprocessing
import os
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed

from gpupair.simulator.trace.files import TraceNode, TracePod
from gpupair.simulator.trace.replay import ReplayConfig, ReplayResult, replay


def parse_seeds(text: str) -> list[int]:
    """``42-51`` or ``42,45,50-51``: ValueError naming what is wrong."""
    seeds: list[int] = []
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        low, sep, high = part.partition("-")
        try:
            first, last = int(low), int(high) if sep else int(low)
        except ValueError:
            raise ValueError(f"--seeds: {part!r} is not a seed or a range like 42-51") from None
        if first < 0 or last < first:
            raise ValueError(f"--seeds: {part!r}: seeds are non-negative and a range goes upward")
        if last - first >= 1000:
            raise ValueError(f"--seeds: {part!r}: at most 1000 seeds")
        seeds.extend(range(first, last + 1))
    if not seeds:
        raise ValueError("--seeds: name at least one seed")
    return list(dict.fromkeys(seeds))


def _one(nodes: Sequence[TraceNode], pods: Sequence[TracePod], config: ReplayConfig) -> ReplayResult:
    return replay(nodes, pods, config)


def run_all(nodes: Sequence[TraceNode], pods: Sequence[TracePod], configs: Sequence[ReplayConfig],
            workers: int = 0, progress: Callable[[int], None] = lambda n: None) -> list[ReplayResult]:
    """Every configuration's replay; ``workers`` 0: one per core, at most one per run.
    ``progress`` hears pods replayed (one worker) or whole runs (several)."""
    workers = min(workers or os.cpu_count() or 1, len(configs))
    if workers <= 1:
        return [replay(nodes, pods, config, progress) for config in configs]
    results: list[ReplayResult | None] = [None] * len(configs)
    # Spawned, not forked: a fork copies whatever the caller holds (a gRPC channel's objects
    # collected in a forked child spun there for minutes, in the test suite) for an import each.
    with ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context("spawn")) as pool:
        futures = {pool.submit(_one, nodes, pods, config): index for index, config in enumerate(configs)}
        for future in as_completed(futures):
            results[futures[future]] = future.result()
            progress(1)
    return [result for result in results if result is not None]
