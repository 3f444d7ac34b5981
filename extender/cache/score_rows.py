"""The fragmentation score's per-node inputs as arrays, kept current (extender/fragmentation_score.py).

A prioritize call on a 1,213-node fleet scores about 500 nodes, and reading each one's report,
Lease, CPU left and product in Python cost about 4 microseconds a node: more than the score's own
arithmetic (bench/RESULTS.md). So one row per cached node holds what the score reads: whether
the report and the CPU are known, when the report turns stale, the free GPUs as a bit mask, the
layout, the CPU and memory left, the product and the decision shape (nodes of one shape decide
alike). A change only marks the node (the node cache, the Lease watch, ``ClusterUsage``); marked rows are
read again when the next call needs them, as DecisionTables does with holds. Nodes that owe a
hold are read per call (``fragmentation_score``), since a hold changes what is free. Each row also
keeps the fragmentation measure's per-shape amounts before a pod and with a pod's GPUs taken
(``per_shape``), most of the score's arithmetic, until what they are computed from changes.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from itertools import repeat
from typing import Any

import numpy as np

from gpupair.decide.picture.node_entries import ReportEntry
from gpupair.decide.score.fragmentation import Fragmentation, tie_order
from gpupair.topology.layout import NodeLayout
from gpupair.topology.limits import MAX_GPUS
from gpupair.topology.report import NodeReport

NO_ROW = -1
UNKNOWN_MEMORY = 1 << 50  # MiB: a node whose memory is not known holds any shape's
OUTCOMES_LIMIT = 65536


class ScoreRows:
    """``entry_of``: the node cache's entry for a name; ``alive``: its last Lease renewal;
    ``usage``: ClusterUsage, for its CPU left and product."""

    def __init__(self, entry_of: Callable[[str], ReportEntry | None], alive: Callable[[str], float | None],
                 usage: Any) -> None:
        self._entry_of = entry_of
        self._alive = alive
        self._usage = usage
        self._slots: dict[str, int] = {}
        self._scattered = False  # names added to _slots since its keys were last copied together
        self._free_slots: list[int] = []
        self._marked: set[str] = set()
        self.entries: list[ReportEntry | None] = []  # per row, for decisions and holds
        self.usable = np.zeros(0, dtype=bool)  # a report and a known CPU
        self.stale_at = np.zeros(0, dtype=float)  # epoch seconds after which the report is stale
        self.free_mask = np.zeros(0, dtype=np.int64)
        self.layout = np.zeros(0, dtype=np.int64)  # an index into ``layouts``
        self.cpu_left = np.zeros(0, dtype=np.int64)
        self.memory_left = np.zeros(0, dtype=np.int64)  # MiB
        self.product = np.zeros(0, dtype=np.int64)  # an index into ``products``
        self.shape = np.zeros(0, dtype=np.int64)  # ReportEntry.decision_shape
        self.order = np.zeros(0, dtype=float)  # the node's place in the fixed order (tie_order), set with its row
        # Shared GPUs (gpupair.io/shares): the milli left on each partly taken GPU (0 on the rest),
        # the shares a GPU of the node is split into (0: it shares none), and whether they are
        # offered under the whole-GPU resource
        self.partial = np.zeros((0, MAX_GPUS), dtype=np.int64)
        self.share_of = np.zeros(0, dtype=np.int64)
        self.replicated = np.zeros(0, dtype=bool)
        # DRA consumable capacity: the node's shared GPUs' capacities, an index into ``capacities``
        # (0: none), so a claim asking some of them is sized per node
        self.capacity = np.zeros(0, dtype=np.int64)
        self.capacities: list[tuple] = [()]
        self._capacity_codes: dict[tuple, int] = {(): 0}
        self.layouts: list[NodeLayout] = []
        self._layout_codes: dict[NodeLayout, int] = {}
        self.products: list[str] = []
        self._product_codes: dict[str, int] = {}
        # (decision shape, GPUs, intent) -> (passes with a plan, the plan as a mask, preferred met):
        # the default Decider's answer for a node of that shape without a hold, which never changes
        # (a shape's number is never reused)
        self.outcomes: dict[tuple[int, int, Any], tuple[bool, int, bool]] = {}
        # Per row, the fragmentation measure's per_shape before a pod, and with a pod's GPUs taken
        # (one store per kind of pod), for the shapes of ``_kept_columns``: good while the row's
        # ``version`` is the one it was computed at and the workload's set of shapes holds, so a
        # call computes it only for the rows changed since (most calls: none)
        self.version = np.zeros(0, dtype=np.int64)  # per row, bumped when what per_shape reads changes
        self._kept_columns: Any = None
        self._kept: dict[Any, tuple[np.ndarray, np.ndarray]] = {}  # kind -> (per_shape, version computed at)
        self.per_shape_computed = 0  # rows whose per_shape a call computed, for tests and benches

    # ---- what changes a row: the node cache (a NodeListener), Leases, ClusterUsage

    def changed(self, name: str) -> None:
        self._marked.add(name)

    def node_changed(self, name: str, entry: ReportEntry, now: float) -> None:
        self._marked.add(name)

    def node_gone(self, name: str) -> None:
        self._marked.add(name)

    # ---- readers

    def find(self, names: Sequence[str]) -> np.ndarray:
        """Each name's row, NO_ROW where the node cache has no entry for it."""
        if self._marked:
            self._read_marked()
        if self._scattered:
            self._gather_keys()
        return np.fromiter(map(self._slots.get, names, repeat(NO_ROW)), dtype=np.int64, count=len(names))

    def per_shape(self, measure: Fragmentation, kind: Any, slots: np.ndarray,
                  compute: Callable[[np.ndarray], np.ndarray]) -> np.ndarray:
        """``measure.per_shape`` of ``kind`` (None: before a pod; a pod's GPUs and intent: with
        them taken as the row's decision plans it, before its CPU and memory) for each of
        ``slots`` (rows of ``find``; NO_ROW for a state of the call's own, a node owing a hold),
        the rows' kept where still good; ``compute(positions)`` gives it for the other positions."""
        width = len(measure.share)
        if self._kept_columns is not measure.columns or any(len(kept) < len(self.usable)
                                                            for kept, _ in self._kept.values()):
            self._kept_columns, self._kept = measure.columns, {}
        store = self._kept.get(kind)
        if store is None:
            # float: whole milli, exact, and what the measure's sums read (no cast per call)
            store = self._kept[kind] = (np.zeros((len(self.usable), width), dtype=float),
                                        np.full(len(self.usable), -1, dtype=np.int64))
        kept, at_version = store
        rowed = slots >= 0
        good = np.zeros(len(slots), dtype=bool)
        good[rowed] = at_version[slots[rowed]] == self.version[slots[rowed]]
        if good.all():
            return kept[slots]
        missing = np.flatnonzero(~good)
        fresh = compute(missing)
        self.per_shape_computed += len(missing)
        out = np.empty((len(slots), width), dtype=kept.dtype)
        out[good] = kept[slots[good]]
        out[missing] = fresh
        rowed_missing = slots[missing] >= 0
        stored = slots[missing][rowed_missing]
        kept[stored] = fresh[rowed_missing]
        at_version[stored] = self.version[stored]
        return out

    def remember(self, shape: int, gpus: int, intent: Any, outcome: tuple[bool, int, bool]) -> None:
        if len(self.outcomes) >= OUTCOMES_LIMIT:
            self.outcomes.clear()
        self.outcomes[(shape, gpus, intent)] = outcome

    def layout_code(self, layout: NodeLayout) -> int:
        return _code(self._layout_codes, self.layouts, layout)

    def product_code(self, product: str) -> int:
        return _code(self._product_codes, self.products, product)

    def capacity_code(self, capacities: tuple) -> int:
        return _code(self._capacity_codes, self.capacities, capacities)

    # ---- internals

    def _gather_keys(self) -> None:
        """Copy the names into adjacent memory: a call looks up ~500 of them, and names kept as
        each node's watch event brought them lie scattered across the heap, a cache miss each
        on a machine that ran other work since the last call (bench/RESULTS.md)."""
        self._slots = {name.encode().decode(): slot for name, slot in self._slots.items()}
        self._scattered = False

    def _read_marked(self) -> None:
        marked, self._marked = self._marked, set()
        for name in marked:
            self._read(name)

    def _read(self, name: str) -> None:
        slot = self._slots.get(name)
        read = self._per_shape_inputs(slot) if slot is not None and self.usable[slot] else None
        self._fill(name)
        now = self._slots.get(name)
        if now != slot and slot is not None:
            self.version[slot] += 1  # a slot freed: whoever takes it next starts afresh
        # what the measure reads changed; a report re-written as it was (a reporter's heartbeat)
        # keeps the row's version, and so its kept per_shape
        if now is not None and (read is None or not self.usable[now] or self._per_shape_inputs(now) != read):
            self.version[now] += 1

    def _fill(self, name: str) -> None:
        entry = self._entry_of(name)
        slot = self._slots.get(name)
        if entry is None:
            if slot is not None:
                del self._slots[name]
                self.entries[slot] = None
                self.usable[slot] = False
                self._free_slots.append(slot)
            return
        if slot is None:
            slot = self._slots[name] = self._free_slots.pop() if self._free_slots else self._grow()
            self._scattered = True
            self.order[slot] = tie_order([name])[0]
        self.entries[slot] = entry
        report, cpu_left = entry.report, self._usage.cpu_left(name)
        self.usable[slot] = report is not None and cpu_left is not None
        if report is None or cpu_left is None:
            return
        stale_at = entry.stale_at_with(self._alive(name))
        self.stale_at[slot] = math.inf if stale_at is None else stale_at
        self.free_mask[slot] = report.state.free_mask
        self.layout[slot] = self.layout_code(report.state.layout)
        self.cpu_left[slot] = cpu_left
        self.memory_left[slot] = memory_left_of(self._usage, name)
        self.product[slot] = self.product_code(self._usage.product(name, report.product))
        self.shape[slot] = entry.decision_shape
        self.partial[slot], self.share_of[slot], self.replicated[slot], capacities = share_columns(report)
        self.capacity[slot] = self.capacity_code(capacities)

    def _per_shape_inputs(self, slot: int) -> tuple:
        """What a row's per_shape is computed from (fragmentation_score.py): its GPUs, CPU,
        memory and product, and its decision shape, which plans a pod's GPUs there."""
        return (int(self.free_mask[slot]), int(self.layout[slot]), int(self.cpu_left[slot]),
                int(self.memory_left[slot]), int(self.product[slot]), self.partial[slot].tobytes(),
                int(self.shape[slot]))

    def _grow(self) -> int:
        slot = len(self.entries)
        self.entries.append(None)
        if slot >= len(self.usable):
            size = max(1024, 2 * len(self.usable))
            for field in ("usable", "stale_at", "free_mask", "layout", "cpu_left", "memory_left", "product", "shape",
                          "order", "partial", "share_of", "replicated", "capacity", "version"):
                old = getattr(self, field)
                new = np.zeros((size, *old.shape[1:]), dtype=old.dtype)
                new[:len(old)] = old
                setattr(self, field, new)
        return slot


def memory_left_of(usage: Any, name: str) -> int:
    """The node's memory left in MiB (ClusterUsage), UNKNOWN_MEMORY where its allocatable is not
    known: memory then limits no shape there, as before it was counted."""
    left = usage.memory_left(name)
    return UNKNOWN_MEMORY if left is None else left


def share_columns(report: NodeReport) -> tuple[np.ndarray, int, bool, tuple]:
    """A report's shared GPUs as the rows keep them: the milli left on each partly taken GPU,
    the most shares a GPU is split into (0: none shared; a MIG GPU's slices in all, those its
    devices leave out included), whether they are replicas of the
    whole-GPU resource, and the distinct capacities of its GPUs shared by DRA consumable capacity
    (``()``: none)."""
    partial = np.zeros(MAX_GPUS, dtype=np.int64)
    shares = report.shares
    if shares is None:
        return partial, 0, False, ()
    for index in range(len(shares.of)):
        if shares.partly_taken(index):
            partial[index] = shares.milli_left(index)
    capacities = tuple(sorted({each for each in shares.capacity if each is not None}))
    return partial, max(map(shares.size, range(len(shares.of)))), shares.replicated, capacities


def _code(codes: dict, values: list, value: Any) -> int:
    """``value``'s index in ``values``, appended the first time (layouts and products are few)."""
    code = codes.get(value)
    if code is None:
        code = codes[value] = len(values)
        values.append(value)
    return code
