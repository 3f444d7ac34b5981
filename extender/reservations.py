"""GPUs promised to pods that are bound but not yet visible in their node's report.

Between a Binding and the reporter's next report the node still shows the pair free; without a
reservation the next pod would be promised the same pair. Entries live in a cachetools
TTLCache keyed by pod UID and leave when the node's report shows the devices taken, when the
pod is deleted or finishes, or when the TTL runs out (a plan the device plugin did not follow
must not block the node for good).

Every method is synchronous: on the single-threaded event loop a check-and-set done without an
``await`` in between is atomic, so no lock exists that could stall another pod's request.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from cachetools import TTLCache

DEFAULT_TTL = 120.0


@dataclass(frozen=True)
class Reservation:
    uid: str
    node: str
    devices: frozenset[int]
    namespace: str = ""
    name: str = ""


class Reservations:
    def __init__(self, ttl: float = DEFAULT_TTL, maxsize: int = 100_000,
                 timer: Callable[[], float] = time.monotonic):
        self._held: TTLCache = TTLCache(maxsize=maxsize, ttl=ttl, timer=timer)
        # node -> UIDs reserved there; may name expired UIDs, which readers drop lazily.
        self._by_node: dict[str, set[str]] = {}

    def reserve(self, reservation: Reservation) -> None:
        previous = self._held.get(reservation.uid)
        if previous is not None and previous.node != reservation.node:
            self._unindex(previous.uid, previous.node)
        self._held[reservation.uid] = reservation
        self._by_node.setdefault(reservation.node, set()).add(reservation.uid)

    def release(self, uid: str) -> Reservation | None:
        reservation = self._held.pop(uid, None)
        if reservation is not None:
            self._unindex(uid, reservation.node)
        return reservation

    def get(self, uid: str) -> Reservation | None:
        return self._held.get(uid)

    def uids(self) -> list[str]:
        return list(self._held.keys())

    def on_node(self, node: str, exclude: str | None = None) -> frozenset[int]:
        """Devices reserved on ``node`` (less those of pod ``exclude``)."""
        devices: set[int] = set()
        for reservation in self._live(node):
            if reservation.uid != exclude:
                devices |= reservation.devices
        return frozenset(devices)

    def by_node(self) -> dict[str, frozenset[int]]:
        """Every node with a live reservation and the devices reserved there."""
        out = {}
        for node in list(self._by_node):
            devices = self.on_node(node)
            if devices:
                out[node] = devices
        return out

    def observe_report(self, node: str, free: Iterable[int]) -> list[Reservation]:
        """A new report for ``node``: release reservations whose devices it shows all taken."""
        free_now = frozenset(free)
        released = []
        for reservation in self._live(node):
            if not reservation.devices & free_now:
                self.release(reservation.uid)
                released.append(reservation)
        return released

    def node_gone(self, node: str) -> list[Reservation]:
        return [r for r in self._live(node) if self.release(r.uid)]

    def __len__(self) -> int:
        self._held.expire()
        return len(self._held)

    def _live(self, node: str) -> list[Reservation]:
        uids = self._by_node.get(node)
        if not uids:
            return []
        live = []
        for uid in list(uids):
            reservation = self._held.get(uid)  # None once the TTL ran out
            if reservation is None or reservation.node != node:
                uids.discard(uid)
            else:
                live.append(reservation)
        if not uids:
            del self._by_node[node]
        return live

    def _unindex(self, uid: str, node: str) -> None:
        uids = self._by_node.get(node)
        if uids is not None:
            uids.discard(uid)
            if not uids:
                del self._by_node[node]
