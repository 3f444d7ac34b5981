"""Is a node's report live? Pure: heartbeats in, a state with its reason out.

A heartbeat is any sign, with a time, that the node's reporter is alive: the free report's
``reportedAt`` and the renewTime of the node's reporter Lease (coordination.k8s.io, one per node,
gpupair/kubewire/leases.py). The newest one counts, as in the extender.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Literal

State = Literal["fresh", "stale", "missing", "invalid"]
Source = Literal["report", "lease", "dra"]  # dra: ResourceSlices and claims, current as listed


@dataclass(frozen=True)
class Heartbeat:
    source: Source
    at: datetime


@dataclass(frozen=True)
class Freshness:
    state: Literal["fresh", "stale"]
    age: float  # seconds since the newest heartbeat (negative: a clock ahead of ours)
    source: Source
    reason: str = ""


def classify(heartbeats: Iterable[Heartbeat], now: datetime, stale_after: float) -> Freshness | None:
    """The newest heartbeat decides; None when there is none (the caller says why: missing).
    ``stale_after`` 0: never stale, as the extender's --stale-after 0."""
    newest = max(heartbeats, key=lambda beat: beat.at, default=None)
    if newest is None:
        return None
    age = (now - newest.at).total_seconds()
    if stale_after and age > stale_after:
        return Freshness("stale", age, newest.source,
                         f"{newest.source} is {age:.0f}s old (stale after {stale_after:.0f}s): "
                         "is the reporter running?")
    return Freshness("fresh", age, newest.source)
