"""The prioritize verb under ``--score fragmentation`` (``LeastFragmentation``, a ``Score`` of
extender/prioritize.py): gpupair's fragmentation score (gpupair/decide/score/fragmentation.py) for
every offered node, CPU-only pods included.

Per node it takes what the extender already knows (the report's free GPUs less what bound pods
hold, the set the device plugin or allocator is expected to take) plus what ``ClusterUsage``
keeps: the node's CPU and memory left, its GPU product (its report's, else its GFD label) and
the shapes of the cluster's pods with the products each accepts. A node the pod cannot go to, or one without a
usable report or a known CPU, gets 0: no opinion, and no part in the grading. The grades are
``fragmentation_grades``'s, the simulator's trace score's too.

A request naming nodes of the node cache is read from the rows ``ScoreRows`` keeps
(extender/cache/score_rows.py), one decision per shape of node, with each row's per-shape amounts
before the pod and with a whole-GPU pod's GPUs taken kept there; any other (a request's Nodes, a pod
with a Decider or devices of its own) node by node. Both give the same grades
(tests/extender/test_score_rows.py).

Registered for every pod (no ``managedResources``): a CPU pod placed where it strands GPUs costs
as much as a badly placed GPU pod (docs/extender.md, docs/simulate.md).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from cachetools import LRUCache

from gpupair.decide.devices import placement
from gpupair.decide.picture.dra_capacity import Asked, share_milli
from gpupair.decide.judge.decisions import preferred_band
from gpupair.decide.score.fragmentation import MILLI, tie_order
from gpupair.decide.score.fragmentation_grades import NodeRows, fragmentation_grades, shapes_of
from gpupair.decide.score.share_pick import packed_after
from gpupair.decide.pod.intent import Intent
from gpupair.decide.pod.mig_ask import slices_milli
from gpupair.decide.pod.pod_request import PodRequestError, cpu_request
from gpupair.decide.judge.reservations import NO_HOLD
from gpupair.extender.cache.cluster_usage import CapacityShares, ClusterUsage, memory_mib
from gpupair.extender.cache.decision_tables import host_priorities_json
from gpupair.extender.evaluation import Evaluator, Offer
from gpupair.extender.cache.score_rows import NO_ROW, ScoreRows, memory_left_of, share_columns
from gpupair.extender.prioritize import NO_OPINION, scores_json
from gpupair.extender.protocol import ExtenderArgs
from gpupair.topology.layout import NodeLayout, NodeState
from gpupair.topology.limits import MAX_GPUS


_FIT_TABLES: LRUCache = LRUCache(maxsize=256)  # (layout, k) -> per free mask: 1 fits, 0 not, -1 not asked yet


def _fits(layout: NodeLayout, free_masks: np.ndarray, k: int) -> np.ndarray:
    """Whether each free mask on ``layout`` holds ``k`` GPUs as gpupair places them (the
    placement rule asked once per mask and layout, ever)."""
    table = _FIT_TABLES.get((layout, k))
    if table is None:
        table = _FIT_TABLES[(layout, k)] = np.full(1 << layout.size, -1, dtype=np.int8)
    answers = table[free_masks]
    if (answers < 0).any():
        for mask in np.unique(free_masks[answers < 0]).tolist():
            free = frozenset(i for i in range(layout.size) if mask >> i & 1)
            table[mask] = k <= layout.size and placement.fit(NodeState(layout, free), k).feasible
        answers = table[free_masks]
    return answers == 1


@dataclass
class Scored:
    """The offered nodes the score grades, one entry per node: its place in the offer, its
    layout (an index into ``layouts``), its GPUs available and planned for the pod as bit masks,
    its CPU and memory (MiB) left, its product (an index into ``products``) and whether its set
    is the one a ``preferred`` pod prefers."""

    index: np.ndarray
    layout: np.ndarray
    free_mask: np.ndarray
    plan_mask: np.ndarray
    cpu_left: np.ndarray
    memory_left: np.ndarray
    product: np.ndarray
    preferred_met: np.ndarray
    partial: np.ndarray  # [n, MAX_GPUS]: milli left on each partly taken shared GPU
    share_of: np.ndarray  # the shares a GPU of the node is split into; 0: it shares none
    replicated: np.ndarray  # its shares are replicas of the whole-GPU resource
    capacity: np.ndarray  # its GPUs' consumable capacities (DRA), an index into ``capacities``; 0: none
    row: np.ndarray  # its row of ScoreRows where the state is the row's; NO_ROW where the call's own
    layouts: list[NodeLayout]
    products: list[str]
    capacities: list[tuple]

    def take(self, keep: np.ndarray) -> Scored:
        return Scored(*(getattr(self, name)[keep] for name in _COLUMNS), self.layouts, self.products, self.capacities)

    def joined(self, other: Scored) -> Scored:
        return Scored(*(np.concatenate([getattr(self, name), getattr(other, name)]) for name in _COLUMNS),
                      self.layouts, self.products, self.capacities)


_COLUMNS = ("index", "layout", "free_mask", "plan_mask", "cpu_left", "memory_left", "product", "preferred_met",
            "partial", "share_of", "replicated", "capacity", "row")


class LeastFragmentation:
    """``usage``: what the node cache and the pod watch tell of the cluster (ClusterUsage);
    ``rows``: the score's inputs kept per cached node (ScoreRows); None without a node cache."""

    def __init__(self, evaluator: Evaluator, usage: ClusterUsage, rows: ScoreRows | None):
        self.evaluator = evaluator
        self.usage = usage
        self.rows = rows

    def answer(self, args: ExtenderArgs, gpus: int, intent: Intent = Intent.REQUIRED) -> str:
        offer = self.evaluator.offer(args)
        try:
            cpu = cpu_request(args.Pod)
        except PodRequestError:
            cpu = 0
        try:
            memory = memory_mib(args.Pod)
        except PodRequestError:
            memory = 0
        shares = self.usage.shares_asked(args.Pod)
        scores = fragmentation_scores(self.evaluator, self.usage, offer, max(gpus, 0), cpu, intent, shares,
                                      rows=self.rows, capacity=self.usage.capacity_asked(args.Pod),
                                      slices=self.usage.mig_asked(args.Pod) if gpus <= 0 and not shares else 0,
                                      memory=memory)
        if scores is not None:
            return host_priorities_json(offer.names, scores)
        # Nothing to grade yet (no workload, or no node's CPU known): best fit, as --score best-fit.
        if gpus <= 0:
            return NO_OPINION
        return scores_json(self.evaluator, gpus, offer, intent)


def fragmentation_scores(evaluator: Evaluator, usage: ClusterUsage, offer: Offer, gpus: int, cpu: int,
                         intent: Intent = Intent.REQUIRED, shares: int = 0,
                         rows: ScoreRows | None = None, capacity: CapacityShares | None = None,
                         slices: int = 0, memory: int = 0) -> list[int] | None:
    """0-10 per offered name, in order; None where it grades no node: no workload learned yet,
    or no offered node with a usable report and a known CPU (Nodes mode, whose nodes the node
    cache does not hold). The caller then scores by best fit, so a ``preferred`` pod keeps its
    tiers. ``shares``: GPU shares the pod asks (``--shared-resources``); a pod asking whole
    GPUs of a node whose GPUs are replicated (time-slicing without renameByDefault) takes shares
    there too. ``capacity``: the shares the pod's DRA claims ask by consumable capacity, and what
    each asks, sized per node on its GPUs' capacities (dra_capacity.share_milli). ``slices``: the
    MIG compute slices the pod asks (mixed strategy's ``nvidia.com/mig-*``), one share sized per
    node on its GPUs' slices (mig_ask.slices_milli). ``memory``: the pod's memory request in MiB.
    A share is graded on the GPU it is foreseen to land on (share_pick.py). ``rows``: read a
    cached offer from them; None, node by node (both give the same grades)."""
    names = offer.names
    if not usage.workload or not names:
        return None
    from_rows = rows is not None and offer.cached and not evaluator.own_cases(offer)
    scored = _from_rows(evaluator, rows, offer, gpus, intent) if from_rows else _per_node(evaluator, usage, offer, gpus,
                                                                                       intent)
    if not len(scored.index):
        return None
    scores = np.zeros(len(names), dtype=np.int64)
    # Every product the rows know, present in the offer or not: the same measure, call after call,
    # for the rows' kept per_shape (a product absent here weighs nothing in it)
    models = sorted(scored.products)
    rank = np.array([models.index(product) for product in scored.products], dtype=np.int64)
    model = rank[scored.product]
    sharing = scored.share_of[(scored.share_of > 0) & (scored.capacity == 0)]
    shares_per_gpu = int(np.bincount(sharing).argmax()) if len(sharing) else 0
    sized = scored.capacity[scored.capacity > 0]
    typical = scored.capacities[int(np.bincount(sized).argmax())] if len(sized) else ()
    measure = usage.measure(models, shares_per_gpu, (lambda asked: sized_share(typical, asked)) if typical else None)
    asks = _share_asks(scored, gpus, shares, capacity, slices)
    graded_rows = node_rows(scored.layouts, scored.layout, scored.free_mask, scored.plan_mask, scored.cpu_left, model,
                            scored.partial, asks, scored.memory_left, _order(rows if from_rows else None, names, scored))
    before_shapes = after_shapes = None
    if from_rows:
        assert rows is not None

        def part(at: np.ndarray, planned: bool) -> NodeRows:
            return node_rows(scored.layouts, scored.layout[at], scored.free_mask[at],
                             scored.plan_mask[at] if planned else np.zeros(len(at), dtype=np.int64),
                             scored.cpu_left[at], model[at], scored.partial[at], memory_left=scored.memory_left[at])

        before_shapes = rows.per_shape(measure, None, scored.row,
                                       lambda at: shapes_of(measure, part(at, False)))
        if gpus > 0 and asks is None:  # whole GPUs where each row's decision shape plans them
            shaped = (scored.row >= 0) & (rows.shape[np.maximum(scored.row, 0)] >= 0)
            after_shapes = rows.per_shape(measure, (gpus, intent), np.where(shaped, scored.row, NO_ROW),
                                          lambda at: shapes_of(measure, part(at, True), True))
    graded = fragmentation_grades(measure, graded_rows, cpu, memory, before_shapes, after_shapes)
    if gpus > 0 and not scored.preferred_met.all():
        # A preferred pod: the nodes with the set it prefers first, fragmentation within each tier.
        graded = np.array([preferred_band(grade, met) for grade, met
                           in zip(graded.tolist(), scored.preferred_met.tolist())], dtype=np.int64)
    scores[scored.index] = graded
    return scores.tolist()


def _order(rows: ScoreRows | None, names: list[str], scored: Scored) -> np.ndarray:
    """Each graded node's place in the fixed order: kept in its row where it has one."""
    order = np.zeros(len(scored.index), dtype=float)
    kept = np.zeros(len(scored.index), dtype=bool)
    if rows is not None:
        kept = scored.row >= 0
        order[kept] = rows.order[scored.row[kept]]
    rest = np.flatnonzero(~kept)
    if len(rest):
        order[rest] = tie_order([names[position] for position in scored.index[rest].tolist()])
    return order


def sized_share(capacities: tuple, asked: Asked) -> int:
    """The milli a share asking ``asked`` takes of a GPU with one of ``capacities`` (the most,
    where a node's GPUs differ); more than a GPU where one cannot serve it, so none holds it."""
    sizes = [share_milli(each, asked) for each in capacities]
    return MILLI + 1 if not sizes or None in sizes else max(size for size in sizes if size is not None)


def _share_asks(scored: Scored, gpus: int, shares: int, capacity: CapacityShares | None = None,
                slices: int = 0) -> ShareAsk | None:
    """Where the pod takes shares, how many and of what size, per scored node. On a node whose
    reporter publishes no shares, where it lands is not foreseen (it changes nothing seen). A
    share by DRA consumable capacity is sized on each node's GPUs, MIG slices on its GPUs'
    slices in all (the most shares a GPU of the node is)."""
    if capacity is not None:
        count, asked = capacity
        rows = scored.capacity > 0
        if not rows.any():
            return None
        sized = np.array([0, *(sized_share(each, asked) for each in scored.capacities[1:])], dtype=np.int64)
        return ShareAsk(rows, sized[scored.capacity], count)
    if slices:
        rows = (scored.share_of > 0) & (scored.capacity == 0)
        if not rows.any():
            return None
        counts, at = np.unique(scored.share_of, return_inverse=True)
        sized = np.array([slices_milli(slices, each) for each in counts.tolist()], dtype=np.int64)
        return ShareAsk(rows, sized[at.reshape(-1)], 1)
    rows = ((shares > 0) & (scored.share_of > 0)) | ((gpus > 0) & scored.replicated)
    if not rows.any():
        return None
    return ShareAsk(rows, MILLI // np.maximum(scored.share_of, 1), shares or gpus)


def _from_rows(evaluator: Evaluator, rows: ScoreRows, offer: Offer, gpus: int, intent: Intent) -> Scored:
    """The offer read from the kept rows: a node that owes a hold, and a decision per shape of
    node, are the only per-node Python."""
    names, now = offer.names, evaluator.clock()
    slot = rows.find(names)
    known = slot >= 0
    slot = np.where(known, slot, 0)
    kept = known & rows.usable[slot] & (rows.stale_at[slot] >= now)
    holds = evaluator.reservations.by_node()
    held = np.zeros(len(names), dtype=bool)
    if holds:
        held_slots = rows.find(list(holds))
        marked = np.zeros(len(rows.usable), dtype=bool)
        marked[held_slots[held_slots >= 0]] = True
        held = kept & marked[slot]
        kept &= ~held
    index = np.flatnonzero(kept)
    at = slot[index]
    scored = Scored(index, rows.layout[at], rows.free_mask[at], np.zeros(len(index), dtype=np.int64),
                    rows.cpu_left[at], rows.memory_left[at], rows.product[at], np.ones(len(index), dtype=bool),
                    rows.partial[at], rows.share_of[at], rows.replicated[at], rows.capacity[at], at, rows.layouts,
                    rows.products, rows.capacities)
    if gpus > 0 and len(index):
        passes, scored.plan_mask, scored.preferred_met = _by_shape(evaluator, rows, names, index, at, gpus, intent, now)
        scored = scored.take(np.flatnonzero(passes))
    extra: list[tuple] = []
    for position in np.flatnonzero(held).tolist():
        name, row = names[position], int(slot[position])
        entry, hold, alive = rows.entries[row], holds[name], evaluator.alive(name)
        plan: tuple[int, ...] = ()
        preferred_met = True
        if gpus > 0:
            decision = entry.decide(evaluator.decider, name, gpus, hold, now, alive, intent)
            if not decision.passes or decision.plan is None:
                continue
            plan, preferred_met = decision.plan, decision.preferred_met
        state = entry.view(name, hold, False, alive).available()
        if state is None:
            continue
        extra.append((position, rows.layout_code(state.layout), state.free_mask, _mask(plan), int(rows.cpu_left[row]),
                      int(rows.memory_left[row]), int(rows.product[row]), preferred_met, rows.partial[row],
                      int(rows.share_of[row]), bool(rows.replicated[row]), int(rows.capacity[row])))
    if extra:
        joined = scored.joined(_columns(extra, rows.layouts, rows.products, rows.capacities))
        scored = joined.take(np.argsort(joined.index, kind="stable"))  # the offer's order, as the per-node path keeps it
    return scored


def _columns(found: list[tuple], layouts: list[NodeLayout], products: list[str], capacities: list[tuple]) -> Scored:
    """Scored from one tuple per node: (index, layout, free mask, plan mask, CPU left, memory
    left, product, preferred met, partial, share count, replicated, capacity)."""
    columns = list(zip(*found)) or [()] * 12
    ints = (np.array(column, dtype=np.int64) for column in columns[:7])
    partial = np.array(columns[8], dtype=np.int64).reshape(len(found), MAX_GPUS)
    return Scored(*ints, np.array(columns[7], dtype=bool), partial, np.array(columns[9], dtype=np.int64),
                  np.array(columns[10], dtype=bool), np.array(columns[11], dtype=np.int64),
                  np.full(len(found), NO_ROW, dtype=np.int64), layouts, products, capacities)


def _by_shape(evaluator: Evaluator, rows: ScoreRows, names: list[str], index: np.ndarray, at: np.ndarray, gpus: int,
              intent: Intent, now: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per row without a hold: whether it passes with a plan, the plan as a mask, and whether the
    plan is what a preferred pod prefers. Nodes of one shape take one decision
    (ReportEntry.decision_shape), asked once per shape; a node decided on its own is a shape of
    its own."""
    shapes = rows.shape[at]
    shapes = np.where(shapes < 0, -1 - np.arange(len(index)), shapes)
    _, first, inverse = np.unique(shapes, return_index=True, return_inverse=True)
    outcomes = []
    for row, shape in zip(first.tolist(), shapes[first].tolist()):
        outcome = rows.outcomes.get((shape, gpus, intent)) if shape >= 0 else None
        if outcome is None:
            name = names[int(index[row])]
            decision = rows.entries[int(at[row])].decide(evaluator.decider, name, gpus, NO_HOLD, now,
                                                         evaluator.alive(name), intent)
            passed = decision.passes and decision.plan is not None
            outcome = (passed, _mask(decision.plan) if passed else 0, decision.preferred_met)
            if shape >= 0:
                rows.remember(shape, gpus, intent, outcome)
        outcomes.append(outcome)
    passing, planned, preferred = (np.array(column) for column in zip(*outcomes))
    inverse = inverse.reshape(-1)
    return passing[inverse], planned[inverse].astype(np.int64), preferred[inverse]


def _mask(devices: tuple[int, ...]) -> int:
    return sum(1 << device for device in devices)


def _per_node(evaluator: Evaluator, usage: ClusterUsage, offer: Offer, gpus: int, intent: Intent) -> Scored:
    """The offer read node by node: a pod with a Decider or devices of its own, Nodes mode, or a
    node cache not synced yet."""
    names = offer.names
    decisions = evaluator.decisions(gpus, offer, intent=intent) if gpus > 0 else None
    now, holds = evaluator.clock(), evaluator.reservations.by_node()
    layouts: list[NodeLayout] = []
    products: list[str] = []
    capacities: list[tuple] = [()]
    found: list[tuple] = []
    for index, name in enumerate(names):
        plan: tuple[int, ...] = ()
        preferred_met = True
        if decisions is not None:
            if not decisions[index].passes or decisions[index].plan is None:
                continue
            plan, preferred_met = decisions[index].plan, decisions[index].preferred_met
        entry = offer.entry_of(name) or offer.unknown
        alive = evaluator.alive(name)
        if entry.report is None or entry.is_stale(now, alive):
            continue
        hold = evaluator.hold_on(offer, name, holds)
        # Without a hold the report's state is what is available (no view to build per node).
        state = entry.view(name, hold, False, alive).available() if hold else entry.report.state
        cpu_left = usage.cpu_left(name)
        if state is None or cpu_left is None:
            continue
        product = usage.product(name, entry.report.product)
        if state.layout not in layouts:
            layouts.append(state.layout)
        if product not in products:
            products.append(product)
        partial, share_of, replicated, capacity = share_columns(entry.report)
        if capacity not in capacities:
            capacities.append(capacity)
        found.append((index, layouts.index(state.layout), state.free_mask, _mask(plan), cpu_left,
                      memory_left_of(usage, name), products.index(product), preferred_met, partial, share_of,
                      replicated, capacities.index(capacity)))
    return _columns(found, layouts, products, capacities)


@dataclass
class ShareAsk:
    """A pod taking shares: on which rows, each share's milli there, and how many it asks."""

    rows: np.ndarray
    milli: np.ndarray
    count: int


def node_rows(layouts: Sequence[NodeLayout], layout: np.ndarray, free_mask: np.ndarray, plan_mask: np.ndarray,
              cpu_left: np.ndarray, model: np.ndarray, partial: np.ndarray | None = None,
              shares: ShareAsk | None = None, memory_left: np.ndarray | None = None,
              order: np.ndarray | None = None) -> NodeRows:
    """The grading rows of what the extender knows per node: its layout (an index into
    ``layouts``), its whole GPUs available (the report's free less what bound pods hold) and the
    pod's planned set as bit masks, its CPU left, its product's index, and the milli left on
    each partly taken shared GPU (``partial``), its memory left in MiB (``memory_left``; None:
    not counted) and its place in the fixed order (``order``, tie_order; None: none). Where the
    pod takes shares (``shares``) it takes them where share_pick foresees, not its planned set."""
    sizes = np.array([len(each.devices) for each in layouts], dtype=np.int64)[layout]
    width = int(sizes.max())
    bits = np.int64(1) << np.arange(width, dtype=np.int64)
    if shares is not None:
        plan_mask = np.where(shares.rows, 0, plan_mask)
    planned = bool(plan_mask.any())  # a CPU-only pod takes no GPU: after is before
    masks_after = free_mask & ~plan_mask if planned else free_mask
    before = ((free_mask[:, None] & bits) != 0) * MILLI
    if partial is not None and partial.any():
        before = before + partial[:, :width]
    if planned or shares is not None:
        after = ((masks_after[:, None] & bits) != 0) * MILLI
        if partial is not None and partial.any():
            after = after + partial[:, :width]
    else:
        after = before  # the same array: readers take it for a pod that leaves the GPUs as they were
    if shares is not None:
        taking = shares.rows
        after[taking] = packed_after(before[taking], shares.milli[taking], shares.count)
        masks_after = np.where(taking, (after == MILLI).astype(np.int64) @ bits, masks_after)
        planned = True
    known: dict[tuple[int, bool], np.ndarray] = {}
    groups: list[tuple[NodeLayout, np.ndarray]] = []  # found when first asked: only where a row's per_shape is computed

    def whole_fits(k: int, placed: bool) -> np.ndarray:
        key = (k, placed and planned)
        if key not in known:
            if not groups:
                groups.extend((layouts[code], layout == code) for code in np.unique(layout).tolist())
            masks = masks_after if key[1] else free_mask
            fits = np.zeros(len(masks), dtype=bool)
            for each, rows in groups:
                fits[rows] = _fits(each, masks[rows], k)
            known[key] = fits
        return known[key]

    return NodeRows(cpu_left=cpu_left, before=before, after=after, model=model, capacity=sizes * MILLI,
                    whole_fits=whole_fits, memory_left=memory_left, order=order)
