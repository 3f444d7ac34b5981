"""Deciding when to write the node's annotations, and writing them.

A write happens when the report changed (topology, free or unhealthy devices, or which pod
holds which devices) or, with ``heartbeat`` set, when the last write is that many seconds old.
Liveness is the node's Lease (reporter/heartbeat.py); ``heartbeat`` only keeps extenders older
than the Lease (which judge freshness from the report's reportedAt) seeing a live report, or is
the liveness signal itself where the reporter runs without a Lease. None: write only on change.
After a failed write the publisher waits, exponentially longer up to ``backoff_cap`` with
jitter, before it tries again whatever the scans say: a struggling API server gets no storm
from every node at once.

On a node whose GPUs a DRA driver publishes (``topology_only``), the kubelet's PodResources
shows none of the allocator's grants, so a free list from it would be wrong: the report is the
topology alone, and ``free`` and ``allocations`` are removed (the extender takes what is free
from the claims; an extender older than DRA sees no report there, and says so).

The generation only grows: each write uses max(last + 1, wall-clock milliseconds), so a
restarted reporter moves forward of the generations it wrote before.

Time comes from injected clocks (``clock``: monotonic seconds, ``wall``: aware datetime) so
tests drive it without sleeping.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from enum import Enum
from typing import Any

from gpupair.topology.report import ALLOCATIONS_KEY, FREE_KEY, TOPOLOGY_KEY, encode_topology
from gpupair.topology.shares import SHARES_KEY
from gpupair.reporter.scan import ScanResult

log = logging.getLogger("gpupair.reporter.publisher")

Write = Callable[[Mapping[str, str]], Awaitable[Any]]


class Outcome(str, Enum):
    CHANGED = "changed"  # written because the report changed (or is the first)
    HEARTBEAT = "heartbeat"  # written because the last write was getting old
    ERROR = "error"  # a write was tried and failed
    UNCHANGED = "unchanged"  # nothing to write
    BACKOFF = "backoff"  # something to write, but waiting after a failure

    @property
    def wrote(self) -> bool:
        return self in (Outcome.CHANGED, Outcome.HEARTBEAT)


@dataclass(frozen=True)
class Written:
    annotations: dict[str, str]
    generation: int
    at: float


def utc_now() -> datetime:
    return datetime.now(timezone.utc)


class Publisher:
    def __init__(
        self,
        write: Write,
        *,
        heartbeat: float | None = 30.0,
        backoff_base: float = 1.0,
        backoff_cap: float = 60.0,
        timeout: float = 10.0,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], datetime] = utc_now,
        rng: Callable[[], float] = random.random,
    ) -> None:
        if heartbeat is not None and heartbeat <= 0:
            raise ValueError(f"heartbeat must be positive or None, got {heartbeat}")
        if backoff_base <= 0 or backoff_cap < backoff_base:
            raise ValueError("need 0 < backoff_base <= backoff_cap")
        self._write = write
        self.heartbeat = heartbeat
        self.backoff_base = backoff_base
        self.backoff_cap = backoff_cap
        self.timeout = timeout
        self._clock = clock
        self._wall = wall
        self._rng = rng
        self.generation = 0
        self.failures = 0
        self.retry_at: float | None = None
        self.last: Written | None = None
        self._last_key: tuple | None = None
        self.last_error: str = ""
        self.topology_only = False  # a DRA driver publishes this node's GPUs

    def key(self, scan: ScanResult) -> tuple:
        """What makes two reports the same: everything but time and generation.

        The layout compares as a frozen value (the same object scan after scan), so no scan
        re-encodes the topology just to find it unchanged."""
        if self.topology_only:
            return (scan.layout, scan.nics, scan.product, "topology-only")
        return (scan.layout, scan.free, scan.unhealthy, scan.holders, scan.nics, scan.product, scan.shares)

    def annotations(self, scan: ScanResult, generation: int, at: datetime) -> dict[str, str | None]:
        if self.topology_only:
            topology = encode_topology(scan.layout)
            return {TOPOLOGY_KEY: topology, FREE_KEY: None, ALLOCATIONS_KEY: None, SHARES_KEY: None,
                    **scan.hardware_annotations(topology)}
        annotations = scan.annotations(generation, at)
        if SHARES_KEY not in annotations and self.last is not None and self.last.annotations.get(SHARES_KEY):
            # The node no longer shares GPUs. One left by an earlier reporter process is of an older
            # generation, which readers ignore.
            annotations[SHARES_KEY] = None
        return annotations

    def due(self, scan: ScanResult) -> Outcome:
        """What ``publish`` would do now, without doing it."""
        now = self._clock()
        changed = self._last_key != self.key(scan)
        heartbeat = self.heartbeat is not None and self.last is not None and now - self.last.at >= self.heartbeat
        if not changed and not heartbeat:
            return Outcome.UNCHANGED
        if self.retry_at is not None and now < self.retry_at:
            return Outcome.BACKOFF
        return Outcome.CHANGED if changed else Outcome.HEARTBEAT

    def next_generation(self) -> int:
        wall_ms = int(self._wall().timestamp() * 1000)
        return max(self.generation + 1, wall_ms)

    async def publish(self, scan: ScanResult) -> Outcome:
        outcome = self.due(scan)
        if not outcome.wrote:
            return outcome
        # Spend the generation before the write: a write that timed out may still have landed.
        self.generation = self.next_generation()
        annotations = self.annotations(scan, self.generation, self._wall())
        try:
            await asyncio.wait_for(self._write(annotations), timeout=self.timeout)
        except Exception as error:  # noqa: BLE001 - any failure: back off and retry later
            self._failed(error)
            return Outcome.ERROR
        self.failures = 0
        self.retry_at = None
        self.last_error = ""
        self.last = Written(annotations=dict(annotations), generation=self.generation, at=self._clock())
        self._last_key = self.key(scan)
        log.info(
            "node report written",
            extra={
                "why": outcome.value,
                "generation": self.generation,
                "topology_only": self.topology_only,
                "free": sorted(scan.free),
                "unhealthy": sorted(scan.unhealthy),
            },
        )
        return outcome

    def _failed(self, error: BaseException) -> None:
        self.failures += 1
        delay = backoff_delay(self.failures, self.backoff_base, self.backoff_cap, self._rng)
        self.retry_at = self._clock() + delay
        self.last_error = describe_write_error(error)
        log.warning(
            "writing the node report failed; backing off",
            extra={"error": self.last_error, "failures": self.failures, "retry_in_s": round(delay, 3)},
        )


def backoff_delay(failures: int, base: float, cap: float, rng: Callable[[], float]) -> float:
    """Seconds to wait after ``failures`` failures in a row: doubling up to ``cap``, jittered
    so that nodes which failed together retry apart."""
    return min(cap, base * 2 ** (failures - 1)) * (0.5 + 0.5 * rng())


def describe_write_error(error: BaseException, resource: str = "nodes") -> str:
    """``kube.describe_error``'s line, with what to check where the status points at the reporter."""
    from gpupair.kubeclient import kube

    text = kube.describe_error(error)
    status = getattr(error, "status", None)
    if status == 404 and resource == "nodes":
        text += " (the node does not exist: is --node-name right?)"
    elif status in (401, 403) and resource == "nodes":
        text += " (the reporter may not patch this node: RBAC needs patch on nodes)"
    elif status in (401, 403):
        text += (" (the reporter may not write its node's Lease: RBAC needs get, create, update on "
                 "leases in --lease-namespace, and the gpupair-reporter-leases policy lets it write only its node's)")
    return text
