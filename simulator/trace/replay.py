"""One replay of a trace: one policy, with or without gpupair, one seed, one device path.

Each pod goes through one scheduling cycle as kube-scheduler runs it:
- filter: NodeResourcesFit and the GPU share filter (``TraceCluster.fits``); on the DRA path
  DynamicResources' own (the allocator must find the devices); with gpupair, the extender's
  filter (``Decider``) for pods asking whole GPUs;
- score: the policy's plugin at its weight, plus gpupair's score as kube-scheduler adds an
  extender's: ``score * weight * (MaxNodeScore / MaxExtenderPriority)``;
- select: the highest total; ties to the first in node order (FGD's random node prefix), or, when
  the extender scored, uniformly among the tied nodes, as kube-scheduler does with an extender.
With ``percentage_of_nodes_to_score`` set, the filter stops as kube-scheduler's does
(``nodes_to_score``): only the feasible nodes it found reach gpupair and the scores; unset, every
node is examined (FGD's protocol, and kube-scheduler at 100).
One node passing is taken unscored. A pod no node takes is dropped (deleted: gpupair's pod watch
forgets its shape, as on the real plane) and counted as arrived.

What is counted per run, beside FGD's allocation curve:
- multi-GPU pods placed, and how many got a set within the fewest NUMA nodes their node's shape
  allows (``numa_local``);
- avoidable SYS grants: a multi-GPU set across sockets while some node that fit the pod had a
  close set free;
- pods stranded by the NUMA rule: refused by gpupair's filter alone, while some node had enough
  GPUs free by count (with the CPU and memory);
- whole NUMA nodes free at the end;
- with ``percentage_of_nodes_to_score``, pods no node the search found took while a node it never
  reached would have (``missed_by_search``): on a live cluster such a pod waits for a retry.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field

import numpy as np

from gpupair.decide.devices.pickers import ALLOCATOR, DEVICE_PLUGIN
from gpupair.simulator.configs import DRA
from gpupair.kubewire.defaults import MAX_EXTENDER_PRIORITY, MAX_NODE_SCORE
from gpupair.simulator.models.schedulers import EXTENDER_WEIGHT
from gpupair.simulator.trace import fgd_protocol
from gpupair.simulator.trace.node_arrays import TraceCluster
from gpupair.simulator.trace.models.devices import Tables, crosses_sockets, gpupair_decider, picker
from gpupair.simulator.trace.files import MILLI, TraceNode, TracePod
from gpupair.simulator.trace.models.gpupair_score import FragmentationScore
from gpupair.simulator.trace.models.nodes_to_score import FeasibleNodeSearch
from gpupair.simulator.trace.move_budget import MoveBudget
from gpupair.simulator.trace.numa import NumaSplits
from gpupair.simulator.trace.models.scoring_policies import FGD_POLICIES, display_name, make_policy

EXTENDER_SCALE = EXTENDER_WEIGHT * (MAX_NODE_SCORE // MAX_EXTENDER_PRIORITY)
FGD_PLUGIN_WEIGHT = 1000  # FGD's published configuration registers its policy plugin at 1000
# gpupair's configurations (``--gpupair-scores``):
# - shipped: what deploy/ ships: --score fragmentation through two entries (the GPU entry filters
#   whole-GPU pods, the every-pod entry scores every pod), the reporters telling each GPU's share
#   taken (time-slicing and MPS replicas, MIG slices, DRA capacity consumed);
# - whole-gpus: the same score where the sharing layer's shares are not reported (a GPU with a
#   share taken looks taken): the comparison row for what seeing shares gains;
# - best-fit: the extender as shipped before the fragmentation score: --score best-fit, GPU pods
#   scored, no other;
# - filter: the GPU entry alone (a filter), beside a plugin that scores GPUs itself.
SHIPPED, WHOLE_GPUS, BEST_FIT, FILTER_ONLY = "shipped", "whole-gpus", "best-fit", "filter"
SCORE_LABELS = {SHIPPED: "gpupair", WHOLE_GPUS: "gpupair-whole-gpus", BEST_FIT: "gpupair-bestfit",
                FILTER_ONLY: "gpupair-filter"}
# The configurations with the fragmentation score (every pod scored), and whether each sees whole
# GPUs only.
WHOLE_GPUS_ONLY = {SHIPPED: False, WHOLE_GPUS: True}


@dataclass(frozen=True)
class ReplayConfig:
    policy: str
    gpupair: bool
    seed: int
    path: str = "device-plugin"
    plugin: str = "aligned"  # the device plugin's policy on the device-plugin path
    tune: float = 1.3
    splits: NumaSplits = field(default_factory=NumaSplits)
    policy_weight: int = FGD_PLUGIN_WEIGHT  # FGD's six; kube-scheduler's profiles keep their own
    score: str = SHIPPED  # gpupair's score: a key of SCORE_LABELS
    percentage_of_nodes_to_score: int | None = None  # kube-scheduler's setting; None: every node
    move_budget: float = 0.0  # moves allowed per pod arrived (simulator/trace/move_budget.py); 0: none


@dataclass
class ReplayResult:
    policy: str
    gpupair: bool
    seed: int
    path: str
    score: str
    allocation: dict[int, float | None]
    arrived_pods: int = 0
    failed_pods: int = 0
    multi_gpu_placed: int = 0
    multi_gpu_numa_local: int = 0
    sys_grants: int = 0
    avoidable_sys: int = 0
    stranded_by_numa_rule: int = 0  # pods
    stranded_gpus: int = 0
    free_numa_nodes: int = 0
    missed_by_search: int = 0  # pods
    moves: int = 0  # pods moved to place a pod that fit nowhere (move_budget)
    gpus_moved: int = 0
    placed_by_moves: int = 0
    moves_by: dict[int, int] = field(default_factory=dict)  # moves spent by each arrival %
    seconds: float = 0.0

    def as_json(self) -> dict:
        """Every field; JSON's keys are strings, and the score is gpupair's, none without it."""
        return {**asdict(self), "score": self.score if self.gpupair else None,
                "allocation": {str(k): v for k, v in self.allocation.items()},
                "moves_by": {str(k): v for k, v in self.moves_by.items()}, "seconds": round(self.seconds, 2)}


def replay(nodes: Sequence[TraceNode], pods: Sequence[TracePod], config: ReplayConfig,
           progress: Callable[[int], None] = lambda n: None) -> ReplayResult:
    started = time.process_time()
    rng = np.random.default_rng(config.seed)
    stream = fgd_protocol.arrivals(pods, nodes, rng, config.tune)
    cluster = TraceCluster(nodes, config.splits, rng.permutation(len(nodes)))
    policy = make_policy(config.policy)
    if config.policy.lower() in FGD_POLICIES:
        policy.weight = config.policy_weight
    policy.bind(cluster, fgd_protocol.typical_pods(pods), np.random.default_rng([config.seed, 1]))
    choose = picker(config.path, config.plugin, config.gpupair)
    decider = gpupair_decider(config.path, config.plugin) if config.gpupair else None
    tables = Tables(cluster.layouts, choose, decider, ALLOCATOR if config.path == DRA else DEVICE_PLUGIN)
    ties = np.random.default_rng([config.seed, 2])
    result = ReplayResult(display_name(config.policy), config.gpupair, config.seed, config.path, config.score, {})
    fragmentation = FragmentationScore(cluster, tables, WHOLE_GPUS_ONLY[config.score]) \
        if config.gpupair and config.score in WHOLE_GPUS_ONLY else None
    search = None if config.percentage_of_nodes_to_score is None else \
        FeasibleNodeSearch(len(nodes), config.percentage_of_nodes_to_score)
    mover = _mover(cluster, policy, (tables, fragmentation), config, ties, result, search)
    arrived, used = 0, 0
    arrivals_log = np.zeros(len(stream), dtype=np.int64)
    used_log = np.zeros(len(stream), dtype=np.int64)
    moves_log = np.zeros(len(stream), dtype=np.int64)
    for index, pod in enumerate(stream):
        arrived += pod.gpu_milli
        if fragmentation is not None:
            fragmentation.seen(pod)
        row = _schedule(cluster, policy, (tables, fragmentation), pod, config, ties, result, search)
        if row is None and mover is not None and (row := mover.rescue(pod, index + 1)) is not None:
            result.failed_pods -= 1
        if mover is not None:
            moves_log[index] = mover.ledger.moves
        if row is not None:
            used += pod.gpu_milli
        elif fragmentation is not None:
            fragmentation.gone(pod)  # deleted, as on the real plane (bench/trace_real.py)
        arrivals_log[index], used_log[index] = arrived, used
        if index % 256 == 255:
            progress(256)
    progress(len(stream) % 256)
    result.arrived_pods = len(stream)
    result.allocation = fgd_protocol.allocation_curve(arrivals_log, used_log, cluster.total_gpus)
    if mover is not None:
        result.moves, result.gpus_moved = mover.ledger.moves, mover.ledger.gpus_moved
        result.placed_by_moves = mover.ledger.plans
        result.moves_by = fgd_protocol.spent_by(arrivals_log, moves_log, cluster.total_gpus)
    result.free_numa_nodes = _free_numa_nodes(cluster)
    result.seconds = time.process_time() - started
    return result


def _mover(cluster: TraceCluster, policy, extender: tuple, config: ReplayConfig, ties: np.random.Generator,
           result: ReplayResult, search: FeasibleNodeSearch | None) -> MoveBudget | None:
    """With a move budget, what replaces a pod's drop by moves; the moved pods' and the rescued
    pod's cycles are counted apart (``failed_pods`` counts each pod once)."""
    if not config.move_budget:
        return None
    apart = ReplayResult(result.policy, result.gpupair, result.seed, result.path, result.score, {})
    return MoveBudget(cluster, config.move_budget,
                      lambda pod: _schedule(cluster, policy, extender, pod, config, ties, apart, search), policy.placed)


def _schedule(cluster: TraceCluster, policy, extender: tuple, pod: TracePod, config: ReplayConfig,
              ties: np.random.Generator, result: ReplayResult,
              search: FeasibleNodeSearch | None = None) -> int | None:
    tables, fragmentation = extender
    whole = pod.gpus > 0 and pod.milli_per_gpu == MILLI
    fits = cluster.fits(pod)
    if whole and config.path == DRA:  # DynamicResources' Filter: the allocator finds the devices
        fits &= tables.lookup("found", cluster.layout_id, cluster.free_mask, pod.gpus)
    rows = np.flatnonzero(fits) if search is None else search.feasible(fits)
    # The GPU entry (managedResources: nvidia.com/gpu) filters whole-GPU pods; the every-pod
    # entry scores them, and with the fragmentation score every other pod too.
    called = config.gpupair and ((pod.gpus > 0 and pod.milli_per_gpu == MILLI) or fragmentation is not None)
    if called and whole and len(rows):
        passes = tables.lookup("passes", cluster.layout_id[rows], cluster.free_mask[rows], pod.gpus)
        if not passes.any():
            result.stranded_by_numa_rule += 1
            result.stranded_gpus += pod.gpus
        rows = rows[passes]
    if not len(rows):
        result.failed_pods += 1
        if search is not None and _passes_anywhere(cluster, tables, pod, fits, called and whole):
            result.missed_by_search += 1
        return None
    if len(rows) == 1:
        row = int(rows[0])
    else:
        total = policy.scores(pod, rows) * policy.weight
        # An extender that scores gives every node it scored a random tie-breaker
        # (prioritizeNodes' Randomizer); registered without prioritizeVerb, it gives none.
        if called and config.score != FILTER_ONLY:
            if fragmentation is not None:
                extra = fragmentation.scores(pod, rows)
            else:
                extra = tables.lookup("score", cluster.layout_id[rows], cluster.free_mask[rows], max(pod.gpus, 1))
            total = total + extra * EXTENDER_SCALE
            tied = rows[total == total.max()]
            row = int(tied[int(ties.integers(len(tied)))]) if len(tied) > 1 else int(tied[0])
        else:
            tied = rows[total == total.max()]
            row = int(tied[np.argmin(cluster.priority[tied])])
    devices = _devices(cluster, policy, tables, pod, row)
    if whole and pod.gpus >= 2:
        layout = cluster.layouts[int(cluster.layout_id[row])]
        result.multi_gpu_placed += 1
        close = bool(tables.lookup("close", cluster.layout_id[row:row + 1], cluster.free_mask[row:row + 1],
                                   pod.gpus)[0])
        result.multi_gpu_numa_local += close
        if crosses_sockets(layout, devices):
            result.sys_grants += 1
            if not close:
                # Avoidable: some node that fit the pod had a close set free.
                anywhere = np.flatnonzero(cluster.fits(pod))
                if tables.lookup("fits", cluster.layout_id[anywhere], cluster.free_mask[anywhere], pod.gpus).any():
                    result.avoidable_sys += 1
    cluster.place(row, pod, devices)
    policy.placed(row)
    return row


def _passes_anywhere(cluster: TraceCluster, tables: Tables, pod: TracePod, fits: np.ndarray,
                     gpupair_filters: bool) -> bool:
    """Whether some node, searched or not, passes every filter the cycle runs (``fits``:
    kube-scheduler's own, on every node)."""
    rows = np.flatnonzero(fits)
    if gpupair_filters and len(rows):
        rows = rows[tables.lookup("passes", cluster.layout_id[rows], cluster.free_mask[rows], pod.gpus)]
    return bool(len(rows))


def _devices(cluster: TraceCluster, policy, tables: Tables, pod: TracePod, row: int) -> tuple[int, ...]:
    if not pod.gpus:
        return ()
    if pod.milli_per_gpu < MILLI:
        return (policy.share_gpu(pod, row),)
    return tables.pick(int(cluster.layout_id[row]), int(cluster.free_mask[row]), pod.gpus)


def _free_numa_nodes(cluster: TraceCluster) -> int:
    count = 0
    for row in range(len(cluster)):
        layout = cluster.layouts[int(cluster.layout_id[row])]
        mask = int(cluster.free_mask[row])
        count += sum(all(mask >> g & 1 for g in members) for members in layout.numa_nodes.values())
    return count
