"""`gpupair defrag --act`'s Prometheus metrics, in a registry of its own."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge

NAMESPACE = "gpupair_defrag"


class DefragMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.plans = Counter("plans", "Plans started (written, before their first eviction)", namespace=NAMESPACE, registry=r)
        self.moves = Counter("moves", "Pods evicted by a plan (their controllers recreate them)", namespace=NAMESPACE,
                             registry=r)
        self.gpus_freed = Counter("gpus_freed", "GPUs of the close sets that plans freed and their waiting pods got",
                                  namespace=NAMESPACE, registry=r)
        self.placed = Counter("pods_placed", "Waiting pods placed on the set a plan freed", namespace=NAMESPACE, registry=r)
        self.dropped = Counter("plans_dropped", "Plans dropped or expired, by reason", ["reason"], namespace=NAMESPACE,
                               registry=r)
        self.in_flight = Gauge("plans_in_flight", "Plans written and not ended", namespace=NAMESPACE, registry=r)
        self.round_errors = Counter("round_errors", "Rounds that could not read or write the cluster", namespace=NAMESPACE,
                                    registry=r)
