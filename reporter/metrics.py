"""The reporter's Prometheus metrics, in a registry of its own."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from gpupair.reporter.nvml_discovery import NvmlFailure

NAMESPACE = "gpupair_reporter"


class ReporterMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.scan_seconds = Histogram(
            "scan_seconds", "Time to read allocations and build the report, per scan",
            namespace=NAMESPACE, registry=r,
            buckets=(0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0),
        )
        self.scans = Counter("scans", "Scans by result (ok, or what failed)", ["result"],
                             namespace=NAMESPACE, registry=r)
        self.writes = Counter("writes", "Node annotation writes tried, by outcome (changed, heartbeat: unchanged but refreshed, error)",
                              ["outcome"], namespace=NAMESPACE, registry=r)
        self.skipped = Counter("writes_skipped", "Scans that wrote nothing, by reason (unchanged, backoff)",
                               ["reason"], namespace=NAMESPACE, registry=r)
        self.nvml_errors = Counter("nvml_errors", "NVML calls that failed during discovery, by call",
                                   ["call"], namespace=NAMESPACE, registry=r)
        self.discoveries = Counter("discoveries", "Layout discoveries, by result (complete, partial, failed)",
                                   ["result"], namespace=NAMESPACE, registry=r)
        self.podresources_errors = Counter("podresources_errors", "Failed reads of the kubelet PodResources API",
                                           namespace=NAMESPACE, registry=r)
        self.checkpoint_rescans = Counter("checkpoint_rescans", "Rescans started by a kubelet checkpoint change",
                                          namespace=NAMESPACE, registry=r)
        self.free_devices = Gauge("free_devices", "Free GPUs per NUMA node (-1: no NUMA affinity)",
                                  ["numa_node"], namespace=NAMESPACE, registry=r)
        self.unhealthy_devices = Gauge("unhealthy_devices", "GPUs in the layout the node cannot hand out",
                                       namespace=NAMESPACE, registry=r)
        self.unknown_links = Gauge("unknown_links", "GPU pairs whose link NVML could not tell (reported SYS)",
                                   namespace=NAMESPACE, registry=r)
        self.generation = Gauge("generation", "Generation of the last report written",
                                namespace=NAMESPACE, registry=r)
        self.last_write = Gauge("last_write_timestamp_seconds", "Unix time of the last successful write",
                                namespace=NAMESPACE, registry=r)
        self.lease_renewals = Counter("lease_renewals", "Node Lease renewals tried, by outcome (renewed, created, error)",
                                      ["outcome"], namespace=NAMESPACE, registry=r)
        self.last_renewal = Gauge("last_lease_renewal_timestamp_seconds",
                                  "Unix time of the last successful Lease renewal", namespace=NAMESPACE, registry=r)
        self._numa_labels: set[str] = set()

    def count_nvml_errors(self, errors: Iterable[NvmlFailure]) -> None:
        for failure in errors:
            self.nvml_errors.labels(call=failure.call).inc()

    def set_free(self, free_by_numa: Mapping[int, tuple[int, ...]], unhealthy: int) -> None:
        # A rediscovered layout can move GPUs to other NUMA nodes (e.g. -1 once sysfs answers):
        # a node no longer in the layout must not keep showing its last count.
        labels = {str(numa) for numa in free_by_numa}
        for gone in self._numa_labels - labels:
            self.free_devices.remove(gone)
        self._numa_labels = labels
        for numa, members in free_by_numa.items():
            self.free_devices.labels(numa_node=str(numa)).set(len(members))
        self.unhealthy_devices.set(unhealthy)
