"""Every cached node's decision, per GPU count, kept current as reports change and age.

In NodeNames mode a request names up to thousands of nodes, and even a memoised decision per
node costs a few microseconds of Python. So for each GPU count asked, the decisions with
nothing reserved are kept in a table (sets and dicts), updated when a node's report changes and
when a report turns stale; a request then answers with set lookups and reworks only the few
nodes holding reservations. Every value in a table is ``Decider.decide``'s own answer.
"""

from __future__ import annotations

import heapq
import itertools
import json
from collections import OrderedDict
from collections.abc import Callable

from extender.decisions import Decider, NodeDecision
from extender.node_reports import ReportEntry
from extender.reservations import NO_HOLD

MAX_TABLES = 16  # distinct GPU counts kept; pods ask few distinct counts


class Table:
    """Decisions for one GPU count: who passes, who fails and why, and prioritize scores."""

    __slots__ = ("gpus", "passing", "failed", "unresolvable", "score_json")

    def __init__(self, gpus: int):
        self.gpus = gpus
        self.passing: set[str] = set()
        self.failed: dict[str, str] = {}
        self.unresolvable: dict[str, str] = {}
        # The node's HostPriority as JSON, so thousands join into a HostPriorityList cheaply.
        self.score_json: dict[str, str] = {}

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
    return '{"Host":%s,"Score":%d}' % (json.dumps(name), score)


class DecisionTables:
    def __init__(self, decider: Decider, entries: Callable[[], list[tuple[str, ReportEntry]]],
                 lookup: Callable[[str], ReportEntry | None]):
        self._decider = decider
        self._entries = entries  # every (name, entry) cached now
        self._lookup = lookup
        self._tables: OrderedDict[int, Table] = OrderedDict()
        self._stale_heap: list[tuple[float, int, str, ReportEntry]] = []
        self._order = itertools.count()

    def node_changed(self, name: str, entry: ReportEntry, now: float) -> None:
        # Reporters write a heartbeat every few seconds whether or not requests come; expiring
        # here too keeps the queue to reports not yet stale even when no request comes for hours.
        self._expire(now)
        for table in self._tables.values():
            table.set(name, entry.decide(self._decider, name, table.gpus, NO_HOLD, now))
        if entry.stale_at is not None:
            heapq.heappush(self._stale_heap, (entry.stale_at, next(self._order), name, entry))

    def node_gone(self, name: str) -> None:
        for table in self._tables.values():
            table.drop(name)

    def table(self, gpus: int, now: float) -> Table:
        self._expire(now)
        table = self._tables.get(gpus)
        if table is None:
            table = Table(gpus)
            for name, entry in self._entries():
                table.set(name, entry.decide(self._decider, name, gpus, NO_HOLD, now))
            self._tables[gpus] = table
            if len(self._tables) > MAX_TABLES:
                self._tables.popitem(last=False)
        else:
            self._tables.move_to_end(gpus)
        return table

    def _expire(self, now: float) -> None:
        """Re-decide nodes whose report has turned stale since the last request."""
        heap = self._stale_heap
        while heap and heap[0][0] < now:
            _, _, name, entry = heapq.heappop(heap)
            if self._lookup(name) is entry:  # else a newer report replaced it
                for table in self._tables.values():
                    table.set(name, entry.decide(self._decider, name, table.gpus, NO_HOLD, now))
