"""The extender's Prometheus metrics, on a registry of its own (served at /metrics)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from gpupair.decide.picture.node_entries import ReportEntry
from gpupair.decide.judge.reservations import OUTCOMES

LATENCY_BUCKETS = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)


class ExtenderMetrics:
    def __init__(self, registry: CollectorRegistry | None = None):
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.requests = Counter(
            "gpupair_extender_requests", "Extender requests by verb and outcome "
            "(ok, bad_request, error)", ["verb", "outcome"], registry=r)
        self.decisions = Counter(
            "gpupair_extender_decisions", "Per-node filter outcomes (pass, fail, unresolvable), "
            "bind outcomes (bound, conflict, failed) and per-node preempt outcomes (kept, trimmed, "
            "dropped, unknown)", ["verb", "outcome"], registry=r)
        for outcome in ("pass", "fail", "unresolvable"):  # filter counts only what happened
            self.decisions.labels("filter", outcome)
        self.latency = Histogram(
            "gpupair_extender_request_seconds", "Time to answer an extender request, by verb",
            ["verb"], buckets=LATENCY_BUCKETS, registry=r)
        self.answer_cpu = Histogram(
            "gpupair_extender_answer_cpu_seconds", "CPU time the extender spent answering filter and "
            "prioritize requests, by verb (a filter that waited for the pod watch counts what ran meanwhile)",
            ["verb"], buckets=LATENCY_BUCKETS, registry=r)
        self.watch_restarts = Counter(
            "gpupair_extender_watch_restarts", "List/watch restarts by resource and reason "
            "(gone: relisted after 410; error: backed off)", ["resource", "reason"], registry=r)
        self.pod_watch_waits = Counter(
            "gpupair_extender_pod_watch_waits", "Filter requests whose pod the pod watch had not read "
            "yet, by how the wait ended (caught_up; timed_out: decided without the newest pods)",
            ["outcome"], registry=r)
        for outcome in ("caught_up", "timed_out"):
            self.pod_watch_waits.labels(outcome)
        self.report_age = Gauge(
            "gpupair_extender_report_age_seconds", "Age of node reports in the node cache, since the "
            "newest of the report's reportedAt and the node's Lease renewal",
            ["stat"], registry=r)
        self.leases = Gauge(
            "gpupair_extender_node_leases", "Reporters' node Leases seen (liveness renewals)", registry=r)
        self.nodes = Gauge(
            "gpupair_extender_nodes", "Cached nodes by report state (ok, stale, missing, invalid)",
            ["state"], registry=r)
        self.reservations = Gauge(
            "gpupair_extender_reservations", "Pods bound but not yet in their node's report: planned "
            "sets and counts held for pods bound by others", registry=r)
        self.reservation_outcomes = Counter(
            "gpupair_extender_reservation_outcomes", "How reservations ended: confirmed (the report "
            "lists the pod with the planned set), deviated (with another set), expired (the pod never "
            "showed up within --reservation-ttl), released (deleted or finished first)",
            ["outcome"], registry=r)
        for outcome in OUTCOMES:
            self.reservation_outcomes.labels(outcome)
        self.plan_follow = Gauge(
            "gpupair_extender_plan_follow_ratio", "Share of planned sets the device plugin followed "
            "(confirmed / (confirmed + deviated)) since start; low: --policy does not match the "
            "cluster's device plugin", registry=r)
        self.plan_follow.set_function(self._plan_follow)

    def watch_node_cache(self, entries: Callable[[], Iterable[tuple[str, ReportEntry]]],
                         clock: Callable[[], float] = time.time,
                         alive: Callable[[str], float | None] = lambda name: None) -> None:
        """Report ages (since the newest of reportedAt and the node's Lease renewal) and node
        states, computed when scraped."""

        def ages() -> list[float]:
            now = clock()
            return [now - max(e.report.reported_at.timestamp(), alive(n) or 0.0)
                    for n, e in entries() if e.report is not None]

        self.report_age.labels("max").set_function(lambda: max(ages(), default=0.0))
        self.report_age.labels("median").set_function(lambda: _median(ages()))

        def count(state: str) -> Callable[[], float]:
            def value() -> float:
                now = clock()
                return sum(1 for n, e in entries() if _state(e, now, alive(n)) == state)

            return value

        for state in ("ok", "stale", "missing", "invalid"):
            self.nodes.labels(state).set_function(count(state))

    def watch_heartbeats(self, count: Callable[[], int]) -> None:
        self.leases.set_function(lambda: float(count()))

    def watch_reservations(self, size: Callable[[], int]) -> None:
        self.reservations.set_function(lambda: float(size()))

    def reservation_ended(self, outcome: str) -> None:
        self.reservation_outcomes.labels(outcome).inc()

    def _plan_follow(self) -> float:
        confirmed = self.reservation_outcomes.labels("confirmed")._value.get()
        deviated = self.reservation_outcomes.labels("deviated")._value.get()
        return confirmed / (confirmed + deviated) if confirmed + deviated else 1.0


def _state(entry: ReportEntry, now: float, alive: float | None) -> str:
    if entry.report is None:
        return entry.kind if entry.kind in ("missing", "invalid") else "invalid"
    return "stale" if entry.is_stale(now, alive) else "ok"


def _median(values: list[float]) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    middle = len(ordered) // 2
    return ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2
