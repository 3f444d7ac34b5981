"""Fragmentation: the GPU a node's free capacity cannot give the workload, vectorised over nodes.

FGD's measure (Weng et al., "Beware of Fragmentation", ATC'23, section 4): a node's
fragmentation F(n) is the GPU milli (1000 a GPU) a workload of pod shapes could not use there,
F(n) = sum over shapes t of p_t * f_t(n), where, with L the node's GPU milli left, f_t(n) is the
milli left on GPUs with less than m_t left when t fits the node (k_t GPUs with m_t left, c_t
CPU left, an allowed model), else L (also for CPU-only shapes). FGD places a pod where F grows
least and scores ``trunc(100 * sigmoid((F(n) - F(n')) / 1000))`` (``fgd_score``).

gpupair's fragmentation score (``grades``) makes it NUMA-aware: a shape of several whole GPUs
fits only where gpupair's rule lets it (the fewest NUMA nodes its size allows, ``whole_fits``),
so GPUs stranded across a socket count as lost, and a shape of whole GPUs fits only where its
memory fits too (a shape's fifth field; FGD's shapes have none), so GPUs left on a node whose
memory is spent count as lost as FGD counts those whose CPU is (bench/RESULTS.md: at or above
FGD on multigpu30 and multigpu50 with memory counted, below it without). Its workload is
learned, the shapes of the pods seen (``Workload``), not handed to it. The 0-10 answer: 10 where the pod adds the least
fragmentation among the nodes asked about, a point less for each further ``QUANTUM`` milli, with
up to ``PACKING`` milli added for the share of its GPUs the node would have left: among nodes that
fragment alike, the fuller one, as FGD's own ties go to a fixed node order and so pack
(kube-scheduler's default profile, left to break them, spreads). The share, not the count: a
count would send every small pod to the nodes with the fewest GPUs, and where pods are pinned to
a GPU model those are the scarce ones. And up to just under a step for the node's place in a
fixed order (``tie_order``): among nodes a step apart or less, the same ones win pod after pod,
as FGD's near-ties go (its integer score is about ``QUANTUM`` milli wide there), so they fill
before the next are broken into (on FGD's gpushare100, seeds 42 and 43, this score alone with
such ties allocates 86.58% and 86.50% at 100% arrival, FGD 86.60% and 86.53%; bench/RESULTS.md).

Pinned shapes weigh by scarcity (``scarcity``): a shape that accepts only some products counts
p_t times the GPU left on the nodes scored over the GPU left on those of its products. FGD's
measure alone already steers flexible pods away from products that pinned shapes need, but in
proportion to their share of pods only; a product that holds a tenth of the free GPUs runs dry
long before its pods stop coming, and the pods pinned to it then fail while other products have
room (on FGD's gpuspec33 workload, seed 42, each GPU's share known: 85.5% allocated at 100%
arrival without the weight, 94.0% with it; FGD publishes 87.8%).

numpy: a prioritize call or a trace replay asks this of every node at once.
"""

from __future__ import annotations

import zlib
from collections import Counter
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np
from cachetools import LRUCache

from gpupair.kubewire.defaults import MAX_EXTENDER_PRIORITY as MAX_SCORE

MILLI = 1000  # one GPU
QUANTUM = 40  # milli of fragmentation a point of gpupair's score stands for
TIE_ORDER = QUANTUM - 0.1  # milli a node's place in the fixed order adds at most (``tie_order``)
PACKING = 160  # milli of fragmentation counted for a node left all free (best fit among near equals)
SHARE_PACKING = 0  # the same for a pod asking a share of one GPU: none (see ``grades``)
TYPICAL_SHARE = 0.95  # FGD's podPopularityThreshold: the target workload covers 95% of the pods
MAX_SHAPES = 256  # gpupair's measure: every shape seen, the most common this many (a bound on its cost)

# cpu milli, milli per GPU, GPUs, models, and for gpupair's measure memory MiB (FGD's shapes end
# at the models: its measure reads CPU and GPU only)
Shape = tuple[int, int, int, tuple[str, ...]] | tuple[int, int, int, tuple[str, ...], int]


class Fragmentation:
    def __init__(self, workload: Sequence[tuple[Shape, float]], models: Sequence[str],
                 columns: _ShapeColumns | None = None):
        """``columns``: an earlier measure's ``columns``, of the same shapes in the same order and
        the same models, from a caller that knows they held (finding them hashes every shape)."""
        gpu_shapes = [(shape, p) for shape, p in workload if shape[2] > 0]
        self.cpu_only_share = sum(p for shape, p in workload if shape[2] == 0)
        if columns is None:
            key = (tuple(shape for shape, _ in gpu_shapes), tuple(models))
            columns = _SHAPE_COLUMNS.get(key)
            if columns is None:
                columns = _SHAPE_COLUMNS[key] = _ShapeColumns(key[0], key[1])
        self.thresholds, self.which, self.need_gpus = columns.thresholds, columns.which, columns.need_gpus
        self.need_cpu, self.allowed, self.whole_sizes = columns.need_cpu, columns.allowed, columns.whole_sizes
        self.need_memory = columns.need_memory
        self.columns = columns  # what a per-row cache of ``per_shape`` is good for (extender/cache/score_rows.py)
        self.share = np.array([p for _, p in gpu_shapes], dtype=float)

    def scarcity(self, left: np.ndarray, model: np.ndarray) -> np.ndarray:
        """Per GPU shape, the GPU milli left on all rows over that left on the rows of a product
        it accepts: 1 for a shape that accepts any product, more the scarcer its products' GPUs
        (1 too where none of its products is among the rows: it weighs every row alike there)."""
        per_row = left.sum(axis=-1).astype(float)
        # summed per product first: whole milli, so exact in any order, and no [rows, shapes] table
        usable = np.bincount(model, weights=per_row, minlength=len(self.allowed)) @ self.allowed
        return np.where(usable > 0, per_row.sum() / np.maximum(usable, 1.0), 1.0)

    def amount(self, cpu_left: np.ndarray, left: np.ndarray, model: np.ndarray,
               whole_fits: dict[int, np.ndarray] | None = None, weight: np.ndarray | None = None,
               memory_left: np.ndarray | None = None) -> np.ndarray:
        """F for each row of (CPU left, GPUs' milli left, model id). ``whole_fits``: per size of
        the shapes asking several whole GPUs, whether each row holds them as close as gpupair
        requires (on the fewest NUMA nodes); without it, any k free GPUs do, as in FGD.
        ``weight``: per GPU shape, a factor on its share (``scarcity``); FGD's own has none.
        ``memory_left``: each row's memory left in MiB, against the shapes' memory; without it,
        memory is not counted, as in FGD."""
        return self.amount_of(cpu_left, model, self.gpu_side(left, whole_fits), weight, memory_left)

    def gpu_side(self, left: np.ndarray, whole_fits: dict[int, np.ndarray] | None = None) -> GpuSide:
        """What ``amount`` reads of the rows' GPUs, apart from their CPU: a pod that takes no GPU
        leaves it as it was, and its score reads it once for before and after."""
        total = left.sum(axis=-1)
        enough = left[..., None] >= self.thresholds  # [..., G, M]
        counts = enough.sum(axis=-2)  # GPUs with at least m left
        stranded = (left[..., None] * ~enough).sum(axis=-2)  # milli on GPUs with less than m left
        gpu_fits = counts[..., self.which] >= self.need_gpus
        for k, rows_fit in (whole_fits or {}).items():
            shapes = (self.need_gpus == k) & (self.thresholds[self.which] == MILLI)
            gpu_fits = np.where(shapes, rows_fit[..., None], gpu_fits)
        return GpuSide(total, stranded[..., self.which], gpu_fits)

    def amount_of(self, cpu_left: np.ndarray, model: np.ndarray, side: GpuSide,
                  weight: np.ndarray | None = None, memory_left: np.ndarray | None = None) -> np.ndarray:
        """``amount`` from the rows' CPU left, models and ``gpu_side``."""
        return self.amount_from(self.per_shape(cpu_left, model, side, memory_left), side.total, weight)

    def per_shape(self, cpu_left: np.ndarray, model: np.ndarray, side: GpuSide,
                  memory_left: np.ndarray | None = None) -> np.ndarray:
        """[..., T] per GPU shape, the GPU milli it could not use on each row: the milli stranded
        below what it asks where it fits, all the row has left where it does not. It depends on
        the rows and the shapes, not on their shares, so a row's stays good until either changes."""
        fits = side.gpu_fits & (cpu_left[..., None] >= self.need_cpu) & self.allowed[model]
        if memory_left is not None:
            fits &= memory_left[..., None] >= self.need_memory
        return np.where(fits, side.stranded, side.total[..., None])

    def with_less(self, per_shape: np.ndarray, total: np.ndarray, cpu_left: np.ndarray,
                  memory_left: np.ndarray | None = None) -> np.ndarray:
        """``per_shape`` of the same rows with only ``cpu_left`` (and ``memory_left``) left, their
        GPUs as they were in it: what a pod's CPU and memory take. A shape that fitted fits still
        where its CPU and memory do; one that did not, does not."""
        still = cpu_left[..., None] >= self.need_cpu
        if memory_left is not None:
            still &= memory_left[..., None] >= self.need_memory
        return np.where(still, per_shape, total[..., None])

    def amount_from(self, per_shape: np.ndarray, total: np.ndarray, weight: np.ndarray | None = None) -> np.ndarray:
        """F from ``per_shape`` and the rows' GPU milli left, each shape by its share (times
        ``weight``)."""
        share = self.share if weight is None else self.share * weight
        return per_shape @ share + total * self.cpu_only_share


class GpuSide(NamedTuple):
    """What the measure reads of rows' GPUs (``Fragmentation.gpu_side``)."""

    total: np.ndarray  # [...] GPU milli left
    stranded: np.ndarray  # [..., T] per GPU shape, the milli left on GPUs with less than it asks
    gpu_fits: np.ndarray  # [..., T] per GPU shape, whether its GPUs fit (CPU and product aside)


class _ShapeColumns:
    """A measure's arrays that depend on its shapes and models, not on their shares: the same
    while the workload's set of shapes holds, so a measure built per call reuses them."""

    def __init__(self, shapes: tuple[Shape, ...], models: tuple[str, ...]):
        self.thresholds = np.array(sorted({shape[1] for shape in shapes}) or [MILLI], dtype=np.int64)
        index = {int(m): i for i, m in enumerate(self.thresholds)}
        self.which = np.array([index[shape[1]] for shape in shapes], dtype=np.int64)
        self.need_gpus = np.array([shape[2] for shape in shapes], dtype=np.int64)
        self.need_cpu = np.array([shape[0] for shape in shapes], dtype=np.int64)
        # memory MiB a shape of whole GPUs needs; a share's is not counted (counted, gpushare100
        # lost 0.07 points at 100% arrival and default 0.02 over ten seeds; bench/RESULTS.md)
        self.need_memory = np.array([shape[4] if len(shape) > 4 and shape[1] == MILLI else 0 for shape in shapes],
                                    dtype=np.int64)
        # allowed[model, t]: shape t may run on that model
        self.allowed = np.array([[not shape[3] or model in shape[3] for shape in shapes] for model in models],
                                dtype=bool).reshape(len(models), len(shapes))
        # the sizes of the shapes asking two or more whole GPUs
        self.whole_sizes = sorted({int(k) for k, m in zip(self.need_gpus, self.thresholds[self.which])
                                   if k >= 2 and m == MILLI})
        for shared in (self.thresholds, self.which, self.need_gpus, self.need_cpu, self.need_memory, self.allowed):
            shared.flags.writeable = False  # every measure of these shapes holds them


_SHAPE_COLUMNS: LRUCache = LRUCache(maxsize=64)  # (shapes, models) -> _ShapeColumns


def fgd_score(before: np.ndarray, after: np.ndarray) -> np.ndarray:
    """FGD's integer score: high where the placement adds the least fragmentation."""
    return np.floor(100.0 / (1.0 + np.exp(-(before - after) / 1000.0))).astype(np.int64)


def grades(grown: np.ndarray, left_after: np.ndarray, capacity: np.ndarray, packing: float = PACKING,
           order: np.ndarray | None = None) -> np.ndarray:
    """gpupair's 0-10 score from each node's growth of F, the GPU milli it would have left and its
    GPU milli in all: 10 at the least, a point less for each further QUANTUM milli, ``packing``
    milli added for a node left all free, and ``order`` (``tie_order``; None: no order) for its
    place in the fixed order. A share pod is graded with no packing (``SHARE_PACKING``):
    where it lands on a GPU already shared F falls, and packing by the GPU left would send it to
    the fullest nodes, onto their last whole GPUs (on a quarter of the openb fleet, seeds 1-3, FGD
    less gpupair shrank by 0.09-0.33 points on default, gpushare40 and cpu100; bench/RESULTS.md)."""
    if not len(grown):
        return np.zeros(0, dtype=np.int64)
    cost = grown + packing * left_after / np.maximum(capacity, 1)
    if order is not None:
        cost = cost + order
    steps = np.ceil((cost - cost.min()) / QUANTUM - 1e-9)
    return np.clip(MAX_SCORE - steps, 0, MAX_SCORE).astype(np.int64)


def tie_order(names: Sequence[str]) -> np.ndarray:
    """Each named node's place in a fixed order, as milli below ``TIE_ORDER``: from the CRC-32 of
    its name, so the extender (any replica, any restart) and the simulator order a fleet alike."""
    return np.array([zlib.crc32(name.encode()) for name in names], dtype=float) * (TIE_ORDER / 2**32)


class Workload:
    """The pod shapes seen so far, each counted once per pod: the workload F is measured
    against, learned from the pods rather than given (FGD takes the trace's most common shapes
    up front)."""

    def __init__(self) -> None:
        self.shapes: Counter = Counter()
        self.version = 0  # bumped when the set of shapes changes, and so the order ``learned`` gives them in

    def add(self, shape: Shape) -> None:
        if shape not in self.shapes:
            self.version += 1
        self.shapes[shape] += 1

    def remove(self, shape: Shape) -> None:
        self.shapes[shape] -= 1
        if self.shapes[shape] <= 0:
            del self.shapes[shape]
            self.version += 1

    def __bool__(self) -> bool:
        return bool(self.shapes)

    def typical(self, coverage: float = TYPICAL_SHARE, limit: int | None = None) -> list[tuple[Shape, float]]:
        """The most common shapes, up to ``coverage`` of the pods (and ``limit`` shapes), each
        with its share among them, as FGD picks its target workload (ties: the larger shape
        first)."""
        ranked = sorted(self.shapes.items(), key=lambda item: (item[1], item[0]), reverse=True)
        total, kept, covered = sum(self.shapes.values()), [], 0
        for shape, count in ranked[:limit]:
            kept.append((shape, count))
            covered += count
            if covered >= coverage * total:
                break
        return [(shape, count / covered) for shape, count in kept]

    def learned(self) -> list[tuple[Shape, float]]:
        """gpupair's target workload: every shape seen, up to MAX_SHAPES. FGD's 95% cut drops
        the long tail, and pods pinned to a GPU product are that tail (each product list a
        shape of its own): cut, their products looked free to all (gpuspec25 at 100% arrival:
        92.6% allocated with the cut, 94.3% without). Up to MAX_SHAPES, in the order first seen:
        the order then changes only with the set of shapes, so a measure's shape arrays, and a
        row's ``per_shape``, are kept while the counts move."""
        if len(self.shapes) > MAX_SHAPES:
            return self.typical(1.0, MAX_SHAPES)
        total = sum(self.shapes.values())
        return [(shape, count / total) for shape, count in self.shapes.items()]

    def measure(self, models: Sequence[str]) -> Fragmentation:
        return Fragmentation(self.learned(), models)
