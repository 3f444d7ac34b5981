"""A node's report as the extender and `gpupair status` keep it: decoded once, with its decisions
memoised.

Decoding a report (pydantic over two JSON annotations) costs tens of microseconds, and the
device-plugin policy's pick costs microseconds more; with thousands of nodes per request both
must happen once per report change, not once per request. A ``ReportEntry`` holds one decoded
report (or why there is none) and memoises ``Decider.decide`` per (GPUs asked, devices
reserved, stale or not, placement intent). Entries do not depend on the node's name, so
Nodes-mode requests that repeat a node's annotations reuse them through ``ReportDecoder``'s LRU.

Decisions on a fresh report are shared further (``SharedDecisions``): by every report of the
same hardware with the same devices free, whichever node it comes from. In a fleet of identical
nodes a bind's hold on one node is, most of the time, a hold another node was decided under
already; in a burst each bind made a node be decided afresh, most of what a filter then cost.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from dataclasses import replace
from datetime import datetime, timezone

from cachetools import LRUCache

from gpupair.decide.judge.decisions import Decider, NodeDecision, NodeView
from gpupair.decide.devices.pickers import DEVICE_PLUGIN, Picker
from gpupair.decide.judge.reservations import NO_HOLD, Hold
from gpupair.decide.pod.intent import Intent
from gpupair.topology.layout import NodeLayout
from gpupair.topology.nics import NICS_KEY
from gpupair.topology.report import (
    EXTRA_KEYS, FREE_KEY, TOPOLOGY_KEY, NodeReport, ReportError, decode_annotations, decode_layout,
)

MEMO_LIMIT = 64  # decisions kept per report; reservations make the key space open-ended
SHARED_LIMIT = 65536  # decisions kept across reports, and hardware shapes known


class SharedDecisions:
    """Decisions keyed by what a decision reads of a fresh report: the layout less the devices'
    identity (UUIDs and PCI addresses name devices in no decision or reason), the free devices,
    who picks (the device plugin or the DRA allocator) and the NICs. Each such shape gets a number once, when its
    report is decoded, so a lookup hashes a small tuple, not a link matrix."""

    def __init__(self, limit: int = SHARED_LIMIT):
        self.limit = limit
        self.decisions: dict[tuple, NodeDecision] = {}
        self._shapes: LRUCache = LRUCache(limit)
        self._numbers = itertools.count()  # never reused: a forgotten shape's decisions stay its own

    def shape(self, report: NodeReport, picker: Picker) -> int:
        layout = report.state.layout
        key = (tuple((d.numa_node, d.pcie_root) for d in layout.devices), layout.links, layout.p2p, layout.walk,
               picker, report.nics, report.state.free, report.shares is not None and report.shares.replicated)
        number = self._shapes.get(key)
        if number is None:
            number = self._shapes[key] = next(self._numbers)
        return number


class ReportEntry:
    """One node report (or the reason it is unusable) and the decisions taken on it; ``picker``:
    who picks a pod's devices on the node, as the source that made the report knows."""

    __slots__ = ("report", "problem", "cause", "kind", "stale_at", "stale_after", "stale_problem", "picker", "_memo",
                 "_shared", "_shape")

    def __init__(self, report: NodeReport | None, problem: str = "", kind: str = "ok",
                 stale_after: float | None = None, shared: SharedDecisions | None = None, cause: str = "",
                 picker: Picker = DEVICE_PLUGIN):
        self.report = report
        self.picker = picker
        self.problem = problem
        self.cause = cause or problem  # the problem in the codec's own words, without what it is about
        self.kind = kind  # ok | missing | invalid
        self.stale_after = stale_after
        self.stale_at: float | None = None  # epoch seconds from which the report alone is stale
        self.stale_problem = ""
        if report is not None and stale_after is not None:
            self.stale_at = report.reported_at.timestamp() + stale_after
            self.stale_problem = (
                f"gpupair report from {_utc(report.reported_at.timestamp())} is older than {stale_after:.0f}s: "
                "is the gpupair reporter running on this node?"
            )
        self._memo: dict[tuple, NodeDecision] = {}
        # No report, or a stale one: the reason names this node's problem, so decided here alone.
        self._shared = shared if report is not None else None
        self._shape = shared.shape(report, picker) if shared is not None and report is not None else -1

    @property
    def decision_shape(self) -> int:
        """Entries of one shape (layout, picker, NICs and free GPUs alike) take the same decision
        for one ask without a hold; -1 for an entry decided on its own (no report, no sharing)."""
        return self._shape

    def stale_at_with(self, alive: float | None) -> float | None:
        """When the report turns stale given the node's last Lease renewal (epoch seconds, None
        without a Lease): the newest sign of life counts."""
        if self.stale_at is None or alive is None or self.stale_after is None:
            return self.stale_at
        return max(self.stale_at, alive + self.stale_after)

    def is_stale(self, now: float, alive: float | None = None) -> bool:
        stale_at = self.stale_at_with(alive)
        return stale_at is not None and now > stale_at

    def problem_when_stale(self, alive: float | None) -> str:
        if alive is None or self.report is None or alive <= self.report.reported_at.timestamp():
            return self.stale_problem
        return (f"gpupair reporter last seen {_utc(alive)} (its Lease's renewTime; report from "
                f"{_utc(self.report.reported_at.timestamp())}), older than {self.stale_after:.0f}s: "
                "is the gpupair reporter running on this node?")

    def view(self, name: str, hold: Hold = NO_HOLD, stale: bool = False, alive: float | None = None) -> NodeView:
        if self.report is None:
            return NodeView(name, None, self.problem, hold.devices, hold.count)
        if stale:
            return NodeView(name, None, self.problem_when_stale(alive), hold.devices, hold.count)
        shares = self.report.shares
        return NodeView(name, self.report.state, "", hold.devices, hold.count, self.picker, self.report.nics,
                        shares is not None and shares.replicated, hold.kept)

    def decide(self, decider: Decider, name: str, gpus: int, hold: Hold, now: float,
               alive: float | None = None, intent: Intent = Intent.REQUIRED) -> NodeDecision:
        """``decider.decide`` for this report, memoised; the decision's ``name`` is whichever
        node first asked, so callers use only its verdict, reason, plan and score. ``alive``:
        the node's last Lease renewal, if it has a Lease."""
        stale = self.is_stale(now, alive)
        if hold.devices and self.report is not None:
            # Planned devices the report already shows taken change nothing: one memo key.
            hold = Hold(hold.devices & self.report.state.free, hold.count, hold.kept & self.report.state.free)
        shared = None if stale else self._shared
        if shared is not None:
            memo, limit = shared.decisions, shared.limit
            key: tuple = (self._shape, gpus, hold, intent, decider.policy.name, decider.dra_policy.name, decider.nic,
                          decider.scope)
        else:
            memo, limit = self._memo, MEMO_LIMIT
            key = (gpus, hold, stale, intent, decider.dra_policy.name, decider.nic, decider.scope)  # per-pod variants
        decision = memo.get(key)
        if decision is None:
            decision = decider.decide(gpus, self.view(name, hold, stale, alive), intent)
            if hold and not decision.passes and decision.reason and self.report is not None and not stale:
                taken = hold.gpus
                decision = replace(decision, reason=(
                    f"{decision.reason} ({taken} GPU{'s' if taken > 1 else ''} reserved "
                    "for pods just bound here)"))
            if len(memo) >= limit:
                memo.clear()
            memo[key] = decision
        return decision


    def decide_owning(self, decider: Decider, name: str, gpus: int, own: frozenset[int], hold: Hold, now: float,
                      alive: float | None = None, intent: Intent = Intent.REQUIRED) -> NodeDecision:
        """``decider.decide_owning`` for a pod whose own DRA claims hold ``own`` here: one pod's
        view, so never memoised."""
        return decider.decide_owning(gpus, self.view(name, hold, self.is_stale(now, alive), alive), own, intent)


def _utc(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


class ReportDecoder:
    """Decodes node annotations into ReportEntries, reusing entries for unchanged annotations
    and layouts for unchanged topology annotations."""

    def __init__(self, stale_after: float | None, maxsize: int = 16384):
        self.stale_after = stale_after
        self._entries: LRUCache = LRUCache(maxsize)
        self._layouts: LRUCache = LRUCache(maxsize)
        self.shared = SharedDecisions()  # for DRA nodes' entries too (gpupair/decide/picture/dra_source.py)

    def decode(self, annotations: Mapping[str, str] | None) -> ReportEntry:
        annotations = annotations if isinstance(annotations, Mapping) else {}
        topology = annotations.get(TOPOLOGY_KEY)
        free = annotations.get(FREE_KEY)
        if not isinstance(topology, (str, type(None))) or not isinstance(free, (str, type(None))):
            return ReportEntry(None, "gpupair report annotations must be strings", "invalid")
        extras = tuple(value if isinstance(value, str) else None for value in map(annotations.get, EXTRA_KEYS))
        key = (topology, free, *extras)
        entry = self._entries.get(key)
        if entry is None:
            entry = self._decode(topology, free, extras)
            self._entries[key] = entry
        return entry

    def _decode(self, topology: object, free: object, extras: tuple[str | None, ...]) -> ReportEntry:
        """``extras``: the EXTRA_KEYS annotations, None where absent."""
        if topology is None or free is None:
            missing = TOPOLOGY_KEY if topology is None else FREE_KEY
            return ReportEntry(None, f"no gpupair report ({missing} missing)", "missing")
        try:
            layout = self._layout(topology)
            # Staleness is judged per request from reported_at, so decode without a clock.
            raw = {TOPOLOGY_KEY: topology, FREE_KEY: free,
                   **{key: value for key, value in zip(EXTRA_KEYS, extras) if value is not None}}
            report = decode_annotations(raw, layout=layout)
        except ReportError as exc:
            return ReportEntry(None, f"unusable gpupair report: {exc.reason}", exc.kind, cause=exc.reason)
        return ReportEntry(report, stale_after=self.stale_after, shared=self.shared)

    def layout_of(self, topology: str) -> NodeLayout | None:
        """The decoded topology annotation, or None when it does not decode."""
        try:
            return self._layout(topology)
        except ReportError:
            return None

    def _layout(self, topology: str) -> NodeLayout:
        layout = self._layouts.get(topology)
        if layout is None:
            layout = decode_layout(topology)
            self._layouts[topology] = layout
        return layout
