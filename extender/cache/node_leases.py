"""Each node's last Lease renewal, from one list+watch of the reporters' Leases in one namespace.

A reporter renews its node's Lease while its published report is current (reporter/heartbeat.py),
so a node whose annotations have not changed for hours is still fresh. These renewals are the
Lease half of the reporter's source of the node picture (``AnnotatedNodes.alive``,
gpupair/decide/picture/node_picture.py). Freshness is the newest of the renewal and the report's own
reportedAt: an old reporter without a Lease (or a Lease left behind by a newer one) still counts
by its annotation re-writes, as before.

Only Leases labelled as node heartbeats count (the list+watch selects them by label, and this
checks again): others in the namespace, such as the extender's leader-election Lease, are not
nodes. A renewal costs a dict update, and ``on_renewal`` for the decision tables, which re-decide
only a node that had been stale.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from gpupair.kubewire.leases import HEARTBEAT_SELECTOR, is_heartbeat, renewed_at

log = logging.getLogger("gpupair.extender.node_leases")


class Heartbeats:
    def __init__(self, on_renewal: Callable[[str], None] | None = None):
        self._listeners: list[Callable[[str], None]] = [on_renewal] if on_renewal else []
        self._renewed: dict[str, float] = {}
        self.listed = False
        self.events = 0  # renewals seen, for tests and the scale bench

    # ---- the WatchHandler side

    def replace(self, items: list[dict[str, Any]]) -> None:
        before = self._renewed
        self._renewed = {}
        for lease in items:
            name, at = _heartbeat(lease)
            if name and at is not None:
                self._renewed[name] = at
        for name, at in self._renewed.items():
            if before.get(name) != at:
                self._on_renewal(name)
        for name in before.keys() - self._renewed.keys():
            self._on_renewal(name)
        if not self.listed:
            log.info("node Leases listed", extra={"leases": len(self._renewed)})
        self.listed = True

    def apply(self, event_type: str, obj: dict[str, Any]) -> None:
        name, at = _heartbeat(obj)
        if not name:
            return
        self.events += 1
        if event_type == "DELETED" or at is None:
            if self._renewed.pop(name, None) is not None:
                self._on_renewal(name)
            return
        if self._renewed.get(name) != at:
            self._renewed[name] = at
            self._on_renewal(name)

    def subscribe(self, on_renewal: Callable[[str], None]) -> None:
        self._listeners.append(on_renewal)

    def _on_renewal(self, name: str) -> None:
        for listener in self._listeners:
            listener(name)

    # ---- readers

    def get(self, name: str) -> float | None:
        return self._renewed.get(name)

    def __len__(self) -> int:
        return len(self._renewed)


def list_leases(api: Any, namespace: str) -> Callable[..., Awaitable[Any]]:
    """The list call for ListWatch: one namespace, heartbeat Leases only (not, e.g., the
    extender's own leader-election Lease)."""
    from kubernetes_asyncio import client as k8s

    return functools.partial(k8s.CoordinationV1Api(api).list_namespaced_lease, namespace,
                             label_selector=HEARTBEAT_SELECTOR)


def _heartbeat(lease: Any) -> tuple[str, float | None]:
    """(node name, renewal) of a heartbeat Lease; ("", None) for anything else. A heartbeat
    Lease without a readable renewTime counts as no renewal."""
    if not isinstance(lease, dict) or not is_heartbeat(lease):
        return "", None
    name = (lease.get("metadata") or {}).get("name")
    if not isinstance(name, str) or not name:
        return "", None
    return name, renewed_at(lease)
