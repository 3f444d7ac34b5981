"""extender/cache/wiring.py on its own: each feed reaches every cache the module says it tells,
with no app and no server around them."""

from __future__ import annotations

from gpupair.decide.judge.decisions import Decider
from gpupair.decide.judge.reservations import Reservations
from gpupair.decide.picture.node_entries import ReportDecoder
from gpupair.decide.picture.node_picture import node_picture
from gpupair.extender.cache.node_leases import Heartbeats
from gpupair.extender.cache.score_rows import NO_ROW
from gpupair.extender.cache.wiring import wire_caches, wire_usage
from tests.extender_support import NOW, report_annotations
from tests.kube_double import make_node, make_pod

GPU = "nvidia.com/gpu"


def wired(*, node_cache: bool = True):
    clock = NOW.timestamp
    beats = Heartbeats()
    picture, _ = node_picture(ReportDecoder(300.0), clock, alive=beats.get)
    reservations = Reservations()
    caches = wire_caches(Decider(), picture, reservations, GPU, clock, node_cache=node_cache, heartbeats=beats,
                         pod_watch=True)
    usage, rows = wire_usage(caches, picture, claims=False, shared_resources=())
    return caches, reservations, usage, rows


def node(cpu: str, free: set[int], ledger: dict | None = None) -> dict:
    made = make_node("a", annotations=report_annotations(free, node="a", ledger=ledger or {}))
    made["status"]["allocatable"]["cpu"] = cpu
    return made


def bound_pod(cpu: str) -> dict:
    pod = make_pod("p", "ml", gpus=1, node_name="a")
    pod["metadata"]["uid"] = "uid-p"
    pod["spec"]["containers"][0]["resources"]["requests"]["cpu"] = cpu
    return pod


def cpu_in_row(rows, name: str) -> int:
    (slot,) = rows.find([name]).tolist()  # reads the rows marked, which may grow the arrays
    assert slot != NO_ROW
    return int(rows.cpu_left[slot])


def test_a_node_reaches_the_usage_the_tables_and_the_rows_and_a_cpu_change_alone_the_usage_and_the_rows():
    caches, _, usage, rows = wired()
    caches.nodes.replace([node("64", {0, 1, 2, 3})])
    assert usage.cpu_left("a") == 64_000
    assert "a" in caches.tables.table(1, NOW.timestamp()).score_json
    assert cpu_in_row(rows, "a") == 64_000
    decodes = caches.nodes.decodes
    caches.nodes.apply("MODIFIED", node("32", {0, 1, 2, 3}))  # the report as it was
    assert caches.nodes.decodes == decodes
    assert usage.cpu_left("a") == 32_000 and cpu_in_row(rows, "a") == 32_000


def test_a_pod_reaches_the_usage_and_the_holds_and_a_ledger_listing_it_ends_its_hold():
    caches, reservations, usage, rows = wired()
    caches.nodes.replace([node("64", {0, 1, 2, 3})])
    caches.pods.replace([bound_pod("4")])
    assert usage.cpu_left("a") == 60_000 and cpu_in_row(rows, "a") == 60_000
    assert len(reservations) == 1
    caches.nodes.apply("MODIFIED", node("64", {1, 2, 3}, {("ml", "p"): {0}}))
    assert len(reservations) == 0
    caches.pods.apply("DELETED", bound_pod("4"))
    assert usage.cpu_left("a") == 64_000 and reservations.known_uids() == set()


def test_without_a_node_cache_there_are_no_rows_and_pods_still_reach_the_usage():
    caches, _, usage, rows = wired(node_cache=False)
    assert caches.nodes is None and caches.tables is None and rows is None
    caches.pods.replace([bound_pod("4")])
    assert usage.workload


def test_memory_reaches_the_usage_and_the_rows_as_kube_scheduler_counts_it():
    """Allocatable memory less the bound pods' requests, in MiB: a pod's pod-level request and
    its overhead count (kube-scheduler's PodRequests), a node's odd bytes do not."""
    caches, _, usage, rows = wired()
    made = node("64", {0, 1, 2, 3})
    made["status"]["allocatable"]["memory"] = "65537Ki"  # 64 MiB and one KiB
    caches.nodes.replace([made])
    assert usage.memory_left("a") == 64
    pod = bound_pod("4")
    pod["spec"]["containers"][0]["resources"]["requests"]["memory"] = "8Mi"
    pod["spec"]["overhead"] = {"memory": "1"}  # one byte: a whole MiB more, rounded up
    caches.pods.replace([pod])
    (slot,) = rows.find(["a"]).tolist()
    assert usage.memory_left("a") == 55 and int(rows.memory_left[slot]) == 55
    assert next(iter(usage.workload.shapes))[4] == 9
    caches.pods.apply("DELETED", pod)
    assert usage.memory_left("a") == 64
