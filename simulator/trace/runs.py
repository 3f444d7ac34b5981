"""Many replays of one trace, spread over the machine's cores.

Each replay is independent (its own cluster and seed), so runs go to a process pool; the
results come back in the order the configurations were listed, whatever order they finish in.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
from collections.abc import Callable, Sequence

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


def _indexed(job: tuple[int, Sequence[TraceNode], Sequence[TracePod], ReplayConfig]) -> tuple[int, ReplayResult]:
    index, nodes, pods, config = job
    return index, replay(nodes, pods, config)


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
    # Workers ignore Ctrl-C; the caller stops them (terminate), not after their runs finish.
    pool = multiprocessing.get_context("spawn").Pool(workers, initializer=signal.signal,
                                                      initargs=(signal.SIGINT, signal.SIG_IGN))
    try:
        jobs = [(index, nodes, pods, config) for index, config in enumerate(configs)]
        for index, result in pool.imap_unordered(_indexed, jobs):
            results[index] = result
            progress(1)
        pool.close()
    finally:
        pool.terminate()
        pool.join()
    return [result for result in results if result is not None]
