"""The reporter's work loop: keep a layout, scan allocations, publish, renew the Lease, repeat.

The layout is discovered once; a discovery that left something unknown (or failed outright)
is retried every ``rediscover_after`` seconds, not every scan, so a broken GPU does not flood
the logs. So is one whose MIG devices the kubelet names ids of that NVML did not list: the
GPU was carved anew since (NVIDIA's MIG manager does it while the node runs). A scan runs every ``scan_interval`` seconds and at once when ``wake`` is set (the
kubelet checkpoint changed). Nothing here raises out of ``run``: a failed scan is logged,
counted and retried at the next tick.
"""

from __future__ import annotations

import asyncio
import logging
import os
import tempfile
import time
from collections.abc import Callable

from gpupair.topology import report
from gpupair.topology.layout import NodeLayout
from gpupair.topology.mig_slices import MIG_PREFIX
from gpupair.topology.nics import NicLayout
from typing import TYPE_CHECKING

from gpupair.reporter.allocations import PodResourcesError
from gpupair.reporter.heartbeat import LeaseKeeper, Renewal
from gpupair.reporter.metrics import ReporterMetrics
from gpupair.reporter.nvml_discovery import DiscoveryResult, NvmlUnavailable
from gpupair.reporter.publisher import Outcome, Publisher
from gpupair.reporter.scan import AllocationSource, ScanResult, compute
from gpupair.reporter.topology_source import LayoutSource

if TYPE_CHECKING:
    from gpupair.reporter.dra_node import DraNode

log = logging.getLogger("gpupair.reporter.loop")


class ReporterLoop:
    def __init__(
        self,
        topology: LayoutSource,
        allocations: AllocationSource,
        publisher: Publisher | None,
        metrics: ReporterMetrics,
        *,
        scan_interval: float = 5.0,
        rediscover_after: float = 60.0,
        layout_file: str = "",
        clock: Callable[[], float] = time.monotonic,
        lease: LeaseKeeper | None = None,
        dra: DraNode | None = None,
    ) -> None:
        if scan_interval <= 0:
            raise ValueError(f"scan interval must be positive, got {scan_interval}")
        self.topology = topology
        self.allocations = allocations
        self.publisher = publisher
        self.lease = lease
        self.dra = dra  # publishes the topology alone while a DRA driver publishes the GPUs
        if dra is not None:
            dra.layout = self.layout  # its verdicts map claims onto this layout
            dra.nics = self.nics
        self.metrics = metrics
        self.scan_interval = scan_interval
        self.rediscover_after = rediscover_after
        self.layout_file = layout_file
        self._clock = clock
        self.discovery: DiscoveryResult | None = None
        self._discovered_at: float | None = None
        self._mig_unknown = False  # the kubelet named MIG devices the discovery lacks
        self._written_layout: str | None = None
        self.last_scan: ScanResult | None = None
        self.last_outcome: Outcome | None = None
        self.last_renewal: Renewal | None = None
        self.scans = 0
        self.scanned = asyncio.Event()  # set after every scan; tests wait on it

    # --- what other parts read

    def layout(self) -> NodeLayout | None:
        """The current layout (None until the first discovery succeeds)."""
        return self.discovery.layout if self.discovery is not None else None

    def nics(self) -> NicLayout | None:
        """The RDMA NICs and their GPU links, where discovery found them."""
        return self.discovery.nics if self.discovery is not None else None

    def ready(self) -> bool:
        """Ready once a report is out: written, or (without a publisher) computed."""
        if self.publisher is None:
            return self.last_scan is not None
        return self.publisher.last is not None

    # --- the work

    async def refresh_topology(self) -> DiscoveryResult | None:
        now = self._clock()
        fresh = self.discovery is not None and self.discovery.complete and not self._mig_unknown
        recent = self._discovered_at is not None and now - self._discovered_at < self.rediscover_after
        if fresh or recent:
            return self.discovery
        self._discovered_at = now
        try:
            result = await asyncio.to_thread(self.topology.load)
        except NvmlUnavailable as error:
            self.metrics.discoveries.labels(result="failed").inc()
            log.error("no GPU layout: %s", error, extra={"source": self.topology.description})
            return self.discovery
        self._mig_unknown = False
        self.metrics.count_nvml_errors(result.errors)
        self.metrics.discoveries.labels(result="complete" if result.complete else "partial").inc()
        self.metrics.unknown_links.set(len(result.unknown_links))
        if not result.complete:
            log.warning(
                "GPU layout partly unknown; retrying discovery later",
                extra={"nvml_errors": len(result.errors), "unknown_links": sorted(result.unknown_links),
                       "lost": sorted(result.lost), "retry_in_s": self.rediscover_after},
            )
        self.discovery = result
        self._keep_layout_file(result.layout)
        return result

    async def scan_once(self) -> ScanResult | None:
        """One scan and, with a publisher, one publish decision. None when the scan failed."""
        try:
            discovery = await self.refresh_topology()
            if discovery is None:
                self.metrics.scans.labels(result="no_layout").inc()
                return None
            started = time.perf_counter()
            try:
                allocations = await self.allocations.read()
            except PodResourcesError as error:
                self.metrics.podresources_errors.inc()
                self.metrics.scans.labels(result="podresources_error").inc()
                log.warning("cannot read allocations: %s", error)
                return None
            scan = compute(discovery.layout, allocations, discovery.lost, discovery.nics, discovery.product,
                           discovery.mig)
            self.metrics.scan_seconds.observe(time.perf_counter() - started)
            self.metrics.scans.labels(result="ok").inc()
            if scan.unknown_ids:
                log.warning("the kubelet names devices this node's layout lacks",
                            extra={"ids": list(scan.unknown_ids)})
            self._mig_unknown = any(i.upper().startswith(MIG_PREFIX) for i in scan.unknown_ids)
            self.metrics.set_free(scan.free_by_numa(), len(scan.unhealthy))
            self.last_scan = scan
            if self.publisher is not None:
                if self.dra is not None:
                    self.publisher.topology_only = await self.dra.check()
                self.last_outcome = await self.publisher.publish(scan)
                self._count(self.last_outcome)
                if self.lease is not None and self.last_outcome in PUBLISHED:
                    await self._renew(self.lease)
            return scan
        finally:
            self.scans += 1
            self.scanned.set()

    async def _renew(self, lease: LeaseKeeper) -> None:
        """The report in the API is what this scan saw: say so on the Lease, if due."""
        self.last_renewal = await lease.keep_alive()
        if self.last_renewal in (Renewal.RENEWED, Renewal.CREATED, Renewal.ERROR):
            self.metrics.lease_renewals.labels(outcome=self.last_renewal.value).inc()
        if self.last_renewal in (Renewal.RENEWED, Renewal.CREATED):
            self.metrics.last_renewal.set_to_current_time()

    def _count(self, outcome: Outcome) -> None:
        if outcome in (Outcome.UNCHANGED, Outcome.BACKOFF):
            self.metrics.skipped.labels(reason=outcome.value).inc()
            return
        self.metrics.writes.labels(outcome=outcome.value).inc()
        if outcome.wrote and self.publisher is not None:
            self.metrics.generation.set(self.publisher.generation)
            self.metrics.last_write.set_to_current_time()

    async def run(self, stop: asyncio.Event, wake: asyncio.Event | None = None) -> None:
        """Scan until ``stop``; each scan waits ``scan_interval`` or until ``wake``."""
        wake = wake or asyncio.Event()
        while not stop.is_set():
            try:
                await self.scan_once()
            except Exception:  # noqa: BLE001 - a bug in one scan must not end the reporter
                log.exception("scan failed")
            await _first_of(stop, wake, self.scan_interval)
            if wake.is_set() and not stop.is_set():
                wake.clear()
                self.metrics.checkpoint_rescans.inc()

    def _keep_layout_file(self, layout: NodeLayout) -> None:
        """Keep the topology JSON in a host file for node-local readers (no API access needed)."""
        if not self.layout_file:
            return
        text = report.encode_topology(layout)
        if text == self._written_layout:
            return
        directory = os.path.dirname(os.path.abspath(self.layout_file))
        try:
            fd, temporary = tempfile.mkstemp(prefix=".layout-", dir=directory)
            with os.fdopen(fd, "w", encoding="utf-8") as handle:
                handle.write(text + "\n")
            os.chmod(temporary, 0o644)
            os.replace(temporary, self.layout_file)  # readers never see half a file
        except OSError as error:
            log.warning("cannot write the layout file", extra={"path": self.layout_file, "error": str(error)})
            return
        self._written_layout = text


# Outcomes after which the API holds this scan's report; a failed or postponed write is not.
PUBLISHED = (Outcome.CHANGED, Outcome.HEARTBEAT, Outcome.UNCHANGED)


async def _first_of(stop: asyncio.Event, wake: asyncio.Event, timeout: float) -> None:
    waiters = [asyncio.ensure_future(stop.wait()), asyncio.ensure_future(wake.wait())]
    try:
        await asyncio.wait(waiters, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for waiter in waiters:
            waiter.cancel()
