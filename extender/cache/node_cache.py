"""The extender's own view of every node's report, for NodeNames mode (nodeCacheCapable).

One node picture, several sources (gpupair/decide/picture/node_picture.py). Fed by a ListWatch on nodes:
a node's entry is asked of the picture when its report annotations change, or when a source tells
of a change of its own (a DRA driver's slices and claims), never per request: an event whose
report annotations equal the ones held keeps the entry (and its memoised decisions). Listeners see
one entry per node, whichever source it came from; object listeners see every Node object (its CPU
and labels change without its report). Ready once the first node list is in.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from typing import Any, Protocol

from gpupair.decide.picture.node_entries import ReportEntry
from gpupair.decide.picture.node_picture import NodePicture
from gpupair.decide.judge.reservations import Reservations
from gpupair.topology.report import EXTRA_KEYS, FREE_KEY, TOPOLOGY_KEY

log = logging.getLogger("gpupair.extender.nodes")
REPORT_KEYS = (TOPOLOGY_KEY, FREE_KEY, *EXTRA_KEYS)  # what a node's entry is read from


class NodeListener(Protocol):
    """What learns of each report change, in the order subscribed."""

    def node_changed(self, name: str, entry: ReportEntry, now: float) -> None: ...

    def node_gone(self, name: str) -> None: ...


class NodeObjectListener(Protocol):
    """What learns of each Node object listed or changed, whether or not its report changed
    (ClusterUsage: its allocatable CPU and product label), and of each Node deleted."""

    def node_seen(self, name: str, node: dict[str, Any]) -> None: ...

    def node_gone(self, name: str) -> None: ...


class HoldsByReport:
    """Reservations as a listener: each usable report ends the holds its ledger lists."""

    def __init__(self, reservations: Reservations):
        self.reservations = reservations

    def node_changed(self, name: str, entry: ReportEntry, now: float) -> None:
        if entry.report is not None:
            self.reservations.observe_report(name, entry.report.state.free, entry.report.ledger)

    def node_gone(self, name: str) -> None:
        self.reservations.node_gone(name)


class NodeCache:
    def __init__(self, picture: NodePicture, clock: Callable[[], float] = time.time):
        self._picture = picture
        self._clock = clock
        self._listeners: list[NodeListener] = []
        self._object_listeners: list[NodeObjectListener] = []
        self._entries: dict[str, ReportEntry] = {}  # what readers see, from whichever source
        self._raw: dict[str, tuple[Any, ...]] = {}  # each listed Node's REPORT_KEYS annotations
        picture.subscribe(self._source_changed)
        self.ready = False
        self.decodes = 0  # annotation changes decoded, for tests and metrics

    # ---- the WatchHandler side

    def replace(self, items: list[dict[str, Any]]) -> None:
        seen = set()
        for node in items:
            name = _name(node)
            if name:
                seen.add(name)
                self._update(name, node)
        for name in [n for n in self._raw if n not in seen]:
            self._remove(name)
        if not self.ready:
            log.info("node cache ready", extra={"nodes": len(self._entries)})
        self.ready = True

    def apply(self, event_type: str, obj: dict[str, Any]) -> None:
        name = _name(obj)
        if not name:
            return
        if event_type == "DELETED":
            self._remove(name)
        else:
            self._update(name, obj)

    def subscribe(self, listener: NodeListener) -> None:
        self._listeners.append(listener)

    def subscribe_objects(self, listener: NodeObjectListener) -> None:
        self._object_listeners.append(listener)

    # ---- readers

    def get(self, name: str) -> ReportEntry | None:
        return self._entries.get(name)

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, name: str) -> bool:
        return name in self._entries

    def items(self) -> Iterator[tuple[str, ReportEntry]]:
        return iter(list(self._entries.items()))

    # ---- internals

    def _update(self, name: str, node: dict[str, Any]) -> None:
        for listener in self._object_listeners:
            listener.node_seen(name, node)
        annotations = (node.get("metadata") or {}).get("annotations")
        if not isinstance(annotations, dict):
            annotations = {}
        raw = tuple(annotations.get(key) for key in REPORT_KEYS)
        if self._raw.get(name) == raw:
            return
        self._raw[name] = raw
        self.decodes += 1
        self._refresh(name)

    def _remove(self, name: str) -> None:
        for listener in self._object_listeners:
            listener.node_gone(name)
        if self._raw.pop(name, None) is not None:
            self._refresh(name)

    def _source_changed(self, names: set[str]) -> None:
        for name in sorted(names):
            self._refresh(name)

    def _refresh(self, name: str) -> None:
        """Put the node's entry from the picture and tell the listeners."""
        raw = self._raw.get(name)
        notes = None if raw is None else {key: value for key, value in zip(REPORT_KEYS, raw) if value is not None}
        entry = self._picture.entry_of(name, notes)
        if entry is None:
            if self._entries.pop(name, None) is not None:
                for listener in self._listeners:
                    listener.node_gone(name)
            return
        if self._entries.get(name) is entry:
            return
        self._entries[name] = entry
        if entry.report is None:
            log.info("node report unusable", extra={"node": name, "why": entry.problem})
        elif entry.report.ledger_problem:
            log.warning("node allocation ledger unusable; deciding without it",
                        extra={"node": name, "why": entry.report.ledger_problem})
        now = self._clock()
        for listener in self._listeners:
            listener.node_changed(name, entry, now)


def _name(obj: dict[str, Any]) -> str:
    meta = obj.get("metadata") if isinstance(obj, dict) else None
    name = meta.get("name") if isinstance(meta, dict) else None
    return name if isinstance(name, str) else ""
