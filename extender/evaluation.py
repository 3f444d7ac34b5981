"""The core's decision for each node offered in one filter or prioritize request.

Both verbs ask the same question of the same Decider the simulator uses; this module only
supplies what the extender knows per node: its report entry (from the request's Node objects
or the node cache), the devices reserved there, and the time for staleness. In NodeNames mode
the answers come from DecisionTables (the same decisions, kept per GPU count) and only nodes
holding reservations are decided afresh.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from cachetools import LRUCache

from extender.decision_tables import DecisionTables, host_priority_json
from extender.decisions import Decider, NodeDecision
from extender.node_reports import ReportDecoder, ReportEntry
from extender.protocol import ExtenderArgs
from extender.reservations import Reservations

UNCACHED_PROBLEM = "node not in the extender's node cache (not listed yet, or deleted)"
UNSYNCED_PROBLEM = "the extender's node cache has not finished its first list"
NO_CACHE_PROBLEM = ("the extender runs without a node cache (--no-node-cache): register it with "
                    "nodeCacheCapable: false, or drop that flag")

_NONE: frozenset[int] = frozenset()


@dataclass
class Offer:
    """The nodes of one request: names in the order offered, and how to find each report."""

    names: list[str]
    entry_of: Callable[[str], ReportEntry | None]
    unknown: ReportEntry  # stands in for a name the lookup does not know
    nodes: list[dict[str, Any]] | None = None  # Nodes mode: the Node objects, to hand back
    cached: bool = False  # NodeNames mode with a synced node cache: tables apply


@dataclass
class Verdicts:
    passed: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)
    unresolvable: dict[str, str] = field(default_factory=dict)


@dataclass
class Evaluator:
    decider: Decider
    reservations: Reservations
    decoder: ReportDecoder
    node_cache: Any = None  # NodeCache; None when the extender runs without one
    tables: DecisionTables | None = None  # over node_cache
    clock: Callable[[], float] = time.time
    seen_limit: int = 16384

    def __post_init__(self) -> None:
        # Entries memoise decisions of one Decider, so each Evaluator has its own stand-ins.
        self.uncached = ReportEntry(None, UNCACHED_PROBLEM, "missing")
        self.unsynced = ReportEntry(None, UNSYNCED_PROBLEM, "missing")
        self.no_cache = ReportEntry(None, NO_CACHE_PROBLEM, "missing")
        # Nodes mode: the last report each node showed, so bind can plan without a node cache.
        self.last_seen: LRUCache = LRUCache(self.seen_limit)

    # ---- one request

    def offer(self, args: ExtenderArgs) -> Offer:
        if args.NodeNames is not None:
            cache = self.node_cache
            if cache is None:
                return Offer(args.NodeNames, lambda name: None, self.no_cache)
            if not cache.ready:
                return Offer(args.NodeNames, lambda name: None, self.unsynced)
            return Offer(args.NodeNames, cache.get, self.uncached, cached=self.tables is not None)
        nodes = (args.Nodes.items if args.Nodes is not None else None) or []
        decode = self.decoder.decode
        entries = {node["metadata"]["name"]: decode(node["metadata"].get("annotations")) for node in nodes}
        self.last_seen.update(entries)
        self._release_taken(entries)
        names = [node["metadata"]["name"] for node in nodes]
        return Offer(names, entries.get, self.uncached, nodes=nodes)

    def decisions(self, gpus: int, offer: Offer, names: list[str] | None = None) -> list[NodeDecision]:
        """One decision per name (default: every offered name), in order."""
        now = self.clock()
        reserved = self.reservations.by_node()
        decider, entry_of, unknown = self.decider, offer.entry_of, offer.unknown
        return [
            (entry_of(name) or unknown).decide(decider, name, gpus, reserved.get(name, _NONE), now)
            for name in (offer.names if names is None else names)
        ]

    def verdicts(self, gpus: int, offer: Offer) -> Verdicts:
        if offer.cached:
            return self._table_verdicts(gpus, offer)
        out = Verdicts()
        for name, decision in zip(offer.names, self.decisions(gpus, offer)):
            _sort(out, name, decision)
        return out

    def scores_json(self, gpus: int, offer: Offer) -> str:
        """The HostPriorityList for the offered names, as JSON."""
        if offer.cached:
            assert self.tables is not None
            table = self.tables.table(gpus, self.clock())
            special = self._special(offer)
            fragments = table.score_json
            if special:
                parts = [None if name in special else fragments.get(name) for name in offer.names]
            else:
                parts = list(map(fragments.get, offer.names))
            if None in parts:
                missing = [i for i, part in enumerate(parts) if part is None]
                redo = self.decisions(gpus, offer, [offer.names[i] for i in missing])
                for i, decision in zip(missing, redo):
                    parts[i] = host_priority_json(offer.names[i], decision.score)
            return "[" + ",".join(parts) + "]"  # type: ignore[arg-type]
        decisions = self.decisions(gpus, offer)
        return "[" + ",".join(host_priority_json(n, d.score) for n, d in zip(offer.names, decisions)) + "]"

    # ---- outside a request (bind, pod watch)

    def entry_for(self, node: str) -> ReportEntry:
        """The freshest report known for ``node``."""
        cached = self.node_cache.get(node) if self.node_cache is not None else None
        seen = self.last_seen.get(node)
        known = [e for e in (cached, seen) if e is not None]
        if not known:
            return self.uncached
        return max(known, key=_freshness)

    def decide_one(self, gpus: int, node: str, exclude_uid: str | None = None) -> NodeDecision:
        """The decision for one node now, counting reservations of other pods only."""
        reserved = self.reservations.on_node(node, exclude=exclude_uid)
        return self.entry_for(node).decide(self.decider, node, gpus, reserved, self.clock())

    # ---- internals

    def _table_verdicts(self, gpus: int, offer: Offer) -> Verdicts:
        assert self.tables is not None
        table = self.tables.table(gpus, self.clock())
        names = offer.names
        special = self._special(offer)
        passing = table.passing
        # filter() with a bound __contains__ runs the loop in C: about 40 ns a name.
        passed = list(filter(passing.__contains__, names))
        if special:
            passed = [n for n in passed if n not in special]
        out = Verdicts(passed)
        if len(passed) == len(names):
            return out
        failed, unresolvable = table.failed, table.unresolvable
        offered = set(names)
        if len(failed) + len(unresolvable) < len(offered):
            # Few nodes fail cluster-wide: pick the offered ones out of the failing tables.
            out.failed = {n: r for n, r in failed.items() if n in offered}
            out.unresolvable = {n: r for n, r in unresolvable.items() if n in offered}
            unique_passed = len(passed) if len(offered) == len(names) else len(set(passed))
            known = len(out.failed) + len(out.unresolvable) + unique_passed
            rest = (offered - passing - out.failed.keys() - out.unresolvable.keys()) if known < len(offered) else set()
        else:
            rest = set()
            for name in offered.difference(passing):
                if name in failed:
                    out.failed[name] = failed[name]
                elif name in unresolvable:
                    out.unresolvable[name] = unresolvable[name]
                else:
                    rest.add(name)
        # Nodes holding reservations, and names the cache does not know, are decided afresh.
        redo = list(rest | (offered & special))
        for name in redo:
            out.failed.pop(name, None)
            out.unresolvable.pop(name, None)
        for name, decision in zip(redo, self.decisions(gpus, offer, redo)):
            _sort(out, name, decision)
        return out

    def _special(self, offer: Offer) -> set[str]:
        """Offered names whose table entry does not apply: they hold reservations."""
        reserved = self.reservations.by_node()
        return set(reserved) if reserved else set()

    def _release_taken(self, entries: Mapping[str, ReportEntry]) -> None:
        """Nodes mode has no watch: a request's reports also release reservations they show taken."""
        for node in self.reservations.by_node():
            entry = entries.get(node)
            if entry is not None and entry.report is not None:
                self.reservations.observe_report(node, entry.report.state.free)


def _sort(out: Verdicts, name: str, decision: NodeDecision) -> None:
    if decision.passes:
        out.passed.append(name)
    elif decision.unresolvable:
        out.unresolvable[name] = decision.reason
    else:
        out.failed[name] = decision.reason


def _freshness(entry: ReportEntry) -> tuple[int, float]:
    if entry.report is None:
        return (0, 0.0)
    return (1, entry.report.reported_at.timestamp())
