"""The extender's own view of every node's report, for NodeNames mode (nodeCacheCapable).

Fed by a ListWatch on nodes. A node's annotations are decoded when they change, never per
request: an event whose two report annotations equal the ones held keeps the entry (and its
memoised decisions). Ready once the first list is in.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from typing import Any

from extender.node_reports import ReportDecoder, ReportEntry
from gpupair.report import ALLOCATIONS_KEY, FREE_KEY, TOPOLOGY_KEY

log = logging.getLogger("gpupair.extender.nodes")


class NodeCache:
    def __init__(
        self,
        decoder: ReportDecoder,
        on_report: Callable[[str, ReportEntry], None] | None = None,
        on_gone: Callable[[str], None] | None = None,
    ):
        self._decoder = decoder
        self._on_report = on_report or (lambda name, entry: None)
        self._on_gone = on_gone or (lambda name: None)
        self._entries: dict[str, ReportEntry] = {}
        self._raw: dict[str, tuple[Any, Any, Any]] = {}
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
        for name in [n for n in self._entries if n not in seen]:
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
        annotations = (node.get("metadata") or {}).get("annotations")
        if not isinstance(annotations, dict):
            annotations = {}
        raw = (annotations.get(TOPOLOGY_KEY), annotations.get(FREE_KEY), annotations.get(ALLOCATIONS_KEY))
        if self._raw.get(name) == raw and name in self._entries:
            return
        entry = self._decoder.decode(annotations)
        self.decodes += 1
        self._raw[name] = raw
        self._entries[name] = entry
        if entry.report is None:
            log.info("node report unusable", extra={"node": name, "why": entry.problem})
        elif entry.report.ledger_problem:
            log.warning("node allocation ledger unusable; deciding without it",
                        extra={"node": name, "why": entry.report.ledger_problem})
        self._on_report(name, entry)

    def _remove(self, name: str) -> None:
        if self._entries.pop(name, None) is not None:
            self._raw.pop(name, None)
            self._on_gone(name)


def _name(obj: dict[str, Any]) -> str:
    meta = obj.get("metadata") if isinstance(obj, dict) else None
    name = meta.get("name") if isinstance(meta, dict) else None
    return name if isinstance(name, str) else ""
