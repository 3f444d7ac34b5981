"""Every cached node's decision, per GPU count and intent, kept current as reports, holds and
time change them.

In NodeNames mode a request names up to thousands of nodes, and even a memoised decision per
node costs a few microseconds of Python. So for each (GPU count, placement intent) asked, the
decisions are kept in a table (sets and dicts) and a request answers with set lookups, in C. A
node is decided again when its report changes, when the report turns stale, and when what it
owes (``Reservations``: a bind's plan, a pod bound, a hold ended) changes; the last only when a
table is next read, since a burst changes holds many times between two requests. In a burst
every node holds something until its report comes, and deciding every held node per request
was most of what filter and prioritize cost on the real scheduler (bench/real_scheduler.py).
Every value in a table is ``Decider.decide``'s own answer for the node's current hold.
"""

from __future__ import annotations

import heapq
import itertools
import re
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping

import orjson

from gpupair.decide.judge.decisions import Decider, NodeDecision
from gpupair.decide.picture.node_entries import ReportEntry
from gpupair.decide.judge.reservations import NO_HOLD, Hold
from gpupair.decide.pod.intent import Intent
from gpupair.kubewire.defaults import MAX_EXTENDER_PRIORITY

MAX_TABLES = 16  # distinct (GPU count, intent) asks kept; pods ask few distinct ones


class Table:
    """Decisions for one GPU count and intent: who passes, who fails and why, and scores."""

    __slots__ = ("gpus", "intent", "passing", "failed", "unresolvable", "score_json", "holds_changed")

    def __init__(self, gpus: int, intent: Intent = Intent.REQUIRED):
        self.gpus = gpus
        self.intent = intent
        self.passing: set[str] = set()
        self.failed: dict[str, str] = {}
        self.unresolvable: dict[str, str] = {}
        # The node's HostPriority as JSON ("" for a 0, left out), so thousands join into a
        # HostPriorityList cheaply.
        self.score_json: dict[str, str] = {}
        self.holds_changed: set[str] = set()  # nodes whose hold changed since they were decided here

    def set(self, name: str, decision: NodeDecision) -> None:
        self.drop(name)
        if decision.passes:
            self.passing.add(name)
        elif decision.unresolvable:
            self.unresolvable[name] = decision.reason
        else:
            self.failed[name] = decision.reason
        self.score_json[name] = host_priority_json(name, decision.score)

    def drop(self, name: str) -> None:
        self.passing.discard(name)
        self.failed.pop(name, None)
        self.unresolvable.pop(name, None)
        self.score_json.pop(name, None)


def host_priority_json(name: str, score: int) -> str:
    """The node's HostPriority as JSON, or "" for a score of 0, which an answer leaves out:
    kube-scheduler adds an extender's score to the nodes its answer lists (prioritizeNodes), so a
    0 listed adds as little as a node left out, and costs it decoding (bench/RESULTS.md)."""
    if not score:
        return ""
    return '{"Host":%s,"Score":%d}' % (orjson.dumps(name).decode(), score)  # orjson: under half json.dumps' time


def host_priority_list(parts: Iterable[str]) -> str:
    """A HostPriorityList from ``host_priority_json``'s parts, the nodes scored 0 left out."""
    return "[" + ",".join(filter(None, parts)) + "]"


# The parts of an answer after a node's name, per score: '","Score":7}'
_SCORE_TAILS = tuple(f'","Score":{score}}}' for score in range(MAX_EXTENDER_PRIORITY + 1))
_NEEDS_ESCAPE = re.compile(r'[\x00-\x1f"\\]')  # what JSON writes otherwise than as it is in a string


def host_priorities_json(names: list[str], scores: list[int]) -> str:
    """``host_priority_list`` for these scores (0 to MAX_EXTENDER_PRIORITY). Node names are DNS
    subdomains, which JSON writes as they are, so each part is the request's own name between
    constant pieces: a table of encoded names cost a read of cold memory per name on the real
    scheduler, twice this in all (bench/RESULTS.md). Where a name would need escaping (not a
    name kube-scheduler sends), or a score is out of range, each part is written alone."""
    in_range = not scores or 0 <= min(scores) <= max(scores) <= MAX_EXTENDER_PRIORITY
    if not in_range or _NEEDS_ESCAPE.search("".join(names)) is not None:
        return host_priority_list(map(host_priority_json, names, scores))
    tails = _SCORE_TAILS
    return "[" + ",".join([f'{{"Host":"{name}{tails[score]}' for name, score in zip(names, scores) if score]) + "]"


class DecisionTables:
    """``alive(name)``: the node's last Lease renewal (epoch seconds) or None; see node_leases.py.
    ``holds()``: every node that owes something now (``Reservations.by_node``); whoever changes
    them calls ``hold_changed``."""

    def __init__(self, decider: Decider, entries: Callable[[], list[tuple[str, ReportEntry]]],
                 lookup: Callable[[str], ReportEntry | None],
                 alive: Callable[[str], float | None] = lambda name: None,
                 holds: Callable[[], Mapping[str, Hold]] = dict):
        self._decider = decider
        self._entries = entries  # every (name, entry) cached now
        self._lookup = lookup
        self._alive = alive
        self._holds = holds
        self._tables: OrderedDict[tuple[int, Intent], Table] = OrderedDict()
        # When to look at a node's staleness next: at most one live heap record per node (the
        # one _next_check names); a renewal moves no record, the check finds the later time.
        self._stale_heap: list[tuple[float, int, str]] = []
        self._next_check: dict[str, float] = {}
        self._stale: set[str] = set()  # nodes the tables hold as stale
        self._order = itertools.count()

    def node_changed(self, name: str, entry: ReportEntry, now: float) -> None:
        # Expiring here too keeps the queue to reports not yet stale even when no request
        # comes for hours.
        self._expire(now)
        self._decide(name, entry, now)

    def node_alive(self, name: str, now: float) -> None:
        """The node's Lease was renewed (or went): only a node held stale needs deciding again;
        for the others the scheduled check will find the later time."""
        self._expire(now)
        entry = self._lookup(name)
        if entry is None:
            return
        if name in self._stale:
            self._decide(name, entry, now)
            return
        stale_at = entry.stale_at_with(self._alive(name))
        if stale_at is not None and now > stale_at:  # the Lease went and the report alone is old
            self._decide(name, entry, now)
        elif stale_at is not None:
            self._schedule(name, stale_at)  # earlier than the check queued (a Lease gone)? move it

    def hold_changed(self, name: str) -> None:
        """What ``name`` owes changed: decided again where a table is next read."""
        for table in self._tables.values():
            table.holds_changed.add(name)

    def node_gone(self, name: str) -> None:
        for table in self._tables.values():
            table.drop(name)
        self._stale.discard(name)
        self._next_check.pop(name, None)

    def table(self, gpus: int, now: float, intent: Intent = Intent.REQUIRED) -> Table:
        self._expire(now)
        holds = self._holds()  # reading them first ends expired holds, which calls hold_changed
        key = (gpus, intent)
        table = self._tables.get(key)
        if table is None:
            table = Table(gpus, intent)
            alive = self._alive
            for name, entry in self._entries():
                table.set(name, entry.decide(self._decider, name, gpus, holds.get(name, NO_HOLD), now, alive(name),
                                             intent))
            self._tables[key] = table
            if len(self._tables) > MAX_TABLES:
                self._tables.popitem(last=False)
            return table
        self._tables.move_to_end(key)
        if table.holds_changed:
            for name in table.holds_changed:
                entry = self._lookup(name)
                if entry is not None:  # a node not cached has no row to change
                    table.set(name, entry.decide(self._decider, name, gpus, holds.get(name, NO_HOLD), now,
                                                 self._alive(name), intent))
            table.holds_changed.clear()
        return table

    def _decide(self, name: str, entry: ReportEntry, now: float) -> None:
        alive = self._alive(name)
        hold = self._holds().get(name, NO_HOLD)
        for table in self._tables.values():
            table.set(name, entry.decide(self._decider, name, table.gpus, hold, now, alive, table.intent))
            table.holds_changed.discard(name)
        stale_at = entry.stale_at_with(alive)
        if stale_at is not None and now > stale_at:
            self._stale.add(name)
        else:
            self._stale.discard(name)
            if stale_at is not None:
                self._schedule(name, stale_at)

    def _schedule(self, name: str, at: float) -> None:
        current = self._next_check.get(name)
        if current is not None and current <= at:
            return  # the earlier check reschedules
        self._next_check[name] = at
        heapq.heappush(self._stale_heap, (at, next(self._order), name))

    def _expire(self, now: float) -> None:
        """Re-decide nodes whose report has turned stale since the last look."""
        heap = self._stale_heap
        while heap and heap[0][0] < now:
            at, _, name = heapq.heappop(heap)
            if self._next_check.get(name) != at:
                continue  # superseded by an earlier check, or the node is gone
            del self._next_check[name]
            entry = self._lookup(name)
            if entry is None:
                continue
            stale_at = entry.stale_at_with(self._alive(name))
            if stale_at is not None and now <= stale_at and name not in self._stale:
                self._schedule(name, stale_at)  # renewed since: look again then
            else:
                self._decide(name, entry, now)
