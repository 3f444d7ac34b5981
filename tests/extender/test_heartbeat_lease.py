"""Liveness on a per-node Lease instead of Node writes (issue 10): the reporter renews its node's
Lease and writes annotations only on change (or rarely, for old extenders); the extender takes
freshness from the newest of the Lease's renewTime and the report's reportedAt. Reporter, kubelet
(real gRPC) and API (the HTTP double) are real; time is a hand-driven clock, so hours of renewals
run in a second."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from prometheus_client import CollectorRegistry

from gpupair.extender.cache.node_leases import Heartbeats
from gpupair.kubewire import leases
from gpupair.reporter.allocations import PodResourcesClient
from gpupair.reporter.heartbeat import KubeLeases, LeaseKeeper, Renewal
from gpupair.reporter.loop import ReporterLoop
from gpupair.reporter.main import node_writer
from gpupair.reporter.metrics import ReporterMetrics
from gpupair.reporter.publisher import Publisher
from gpupair.reporter.scan import PodResourcesAllocations
from tests.extender_support import NOW, args_body, eventually, kube_extender, pod_object, report_annotations
from tests.kube_double import kube_client_for, make_node, running_kube_double
from tests.reporter_support import GPU, NODE, FakeClock, seed_source
from tests.reporter.test_reporter_loop import api, double, kubelet  # noqa: F401 - fixtures: a node on the double, the kubelet

NS = "gpupair-system"
LEASE_PATH = f"/apis/coordination.k8s.io/v1/namespaces/{NS}/leases"
NODE_PATH = f"/api/v1/nodes/{NODE}"
STALE_REASON = "is the gpupair reporter running on this node?"


@pytest.fixture
def clock():
    return FakeClock(start=NOW)


def wall_ns(clock: FakeClock):
    return lambda: int(clock.wall().timestamp() * 1_000_000_000)


def keeper(api, clock, **kwargs) -> LeaseKeeper:
    kwargs.setdefault("rng", lambda: 1.0)
    return LeaseKeeper(KubeLeases(api), NODE, NS, interval=30.0, clock=clock, wall_ns=wall_ns(clock), **kwargs)


def new_reporter(tmp_path, client, api, clock, *, refresh: float | None, lease: bool = True):
    """The reporter as `gpupair reporter` builds it: --annotation-refresh ``refresh`` (None: 0)."""
    source, _ = seed_source(tmp_path)
    publisher = Publisher(node_writer(api, NODE), heartbeat=refresh, clock=clock, wall=clock.wall)
    return ReporterLoop(source, PodResourcesAllocations(client, GPU), publisher, ReporterMetrics(CollectorRegistry()),
                        clock=clock, lease=keeper(api, clock) if lease else None)


def filter_body(names: list[str]) -> dict:
    return args_body(pod_object(2), names=names)


def lease_of(double, name: str = NODE) -> dict | None:
    return double.store.get("leases", name, NS)


def put_lease(double, name: str, at, *, labelled: bool = True, namespace: str = NS) -> None:
    """A Lease as a reporter (or, unlabelled, some other holder) leaves it, renewed at ``at``."""
    body = leases.lease_body(name, namespace, 120, int(at.timestamp() * 1e9), previous=lease_of(double, name))
    if not labelled:
        body["metadata"]["labels"] = {}
    if double.store.get("leases", name, namespace) is None:
        double.store.create("leases", body, namespace)
    else:
        double.store.update("leases", name, namespace, body)


# --------------------------------------------------------------------------- the reporter


async def test_an_idle_node_is_one_lease_renewal_per_interval_and_no_node_write(tmp_path, kubelet, double, api, clock):
    async with PodResourcesClient(kubelet.socket_path, timeout=5.0) as client:
        loop = new_reporter(tmp_path, client, api, clock, refresh=None)
        for _ in range(360):  # one hour of 10 s scans, nothing changing
            await loop.scan_once()
            clock.advance(10.0)
    assert len(double.requests_to(NODE_PATH, "PATCH")) == 1, "the first report only"
    assert len(double.requests_to(LEASE_PATH, "POST")) == 1
    renewals = double.requests_to(f"{LEASE_PATH}/{NODE}", "PUT")
    assert len(renewals) == 3600 // 30 - 1
    lease = lease_of(double)
    node_uid = double.store.node(NODE)["metadata"]["uid"]
    assert lease["metadata"]["labels"][leases.HEARTBEAT_LABEL] == "node"
    assert lease["metadata"]["ownerReferences"] == [{"apiVersion": "v1", "kind": "Node", "name": NODE, "uid": node_uid}]
    assert lease["spec"]["holderIdentity"] == NODE and lease["spec"]["leaseDurationSeconds"] == 120
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z", lease["spec"]["renewTime"])
    assert leases.epoch_seconds(lease["spec"]["renewTime"]) == (NOW + timedelta(seconds=3570)).timestamp()
    # every renewal is a PUT against the version it last saw: no blind overwrite
    assert all(r.json()["metadata"]["resourceVersion"] for r in renewals)
    assert max(len(r.body) for r in renewals) < 600, "a small object"


async def test_a_reporter_whose_scans_fail_stops_renewing(tmp_path, kubelet, double, api, clock):
    async with PodResourcesClient(kubelet.socket_path, timeout=1.0) as client:
        loop = new_reporter(tmp_path, client, api, clock, refresh=None)
        await loop.scan_once()
        renewed = lease_of(double)["spec"]["renewTime"]
        await kubelet.stop()  # the kubelet's PodResources API is gone: the report can no longer be trusted
        for _ in range(6):
            clock.advance(30.0)
            assert await loop.scan_once() is None
    assert lease_of(double)["spec"]["renewTime"] == renewed
    assert loop.last_renewal is Renewal.CREATED  # the last one, before the kubelet went


async def test_a_concurrent_writer_costs_one_reread_and_a_deleted_lease_is_created_again(double, api, clock):
    lease = keeper(api, clock)
    assert await lease.keep_alive() is Renewal.CREATED
    assert await lease.keep_alive() is Renewal.NOT_DUE
    put_lease(double, NODE, NOW + timedelta(seconds=1))  # someone else wrote it: our resourceVersion is old now
    clock.advance(30.0)
    assert await lease.keep_alive() is Renewal.RENEWED
    puts = double.requests_to(f"{LEASE_PATH}/{NODE}", "PUT")
    assert [p.json()["metadata"]["resourceVersion"] for p in puts] == ["3", "4"]  # 409, then the re-read version
    double.store.delete("leases", NODE, NS)
    clock.advance(30.0)
    assert await lease.keep_alive() is Renewal.CREATED
    assert leases.epoch_seconds(lease_of(double)["spec"]["renewTime"]) == clock.wall().timestamp()


async def test_renewal_failures_back_off_like_the_publisher(double, api, clock):
    lease = keeper(api, clock)
    assert await lease.keep_alive() is Renewal.CREATED
    double.fail_next(f"{LEASE_PATH}/{NODE}", 500, times=3, method="PUT")
    clock.advance(30.0)
    delays = []
    for _ in range(3):
        assert await lease.keep_alive() is Renewal.ERROR
        delays.append(lease.retry_at - clock())
        assert await lease.keep_alive() is Renewal.BACKOFF
        clock.advance(delays[-1])
    assert delays == [1.0, 2.0, 4.0]
    assert "HTTP 500" in lease.last_error
    assert await lease.keep_alive() is Renewal.RENEWED and lease.failures == 0


async def test_a_forbidden_renewal_says_what_is_missing(double, api, clock):
    double.fail_next(f"{LEASE_PATH}/{NODE}", 403, method="GET")
    lease = keeper(api, clock)
    assert await lease.keep_alive() is Renewal.ERROR
    assert "may not write its node's Lease" in lease.last_error


# --------------------------------------------------------------------------- the extender


async def test_a_renewing_reporter_with_old_annotations_is_fresh_until_it_stops_renewing():
    now = [NOW.timestamp()]
    async with running_kube_double() as double:
        # The report was written two hours ago and has not changed since.
        old = report_annotations(set(range(8)), node="a", reported_at=NOW - timedelta(hours=2))
        double.store.create("nodes", make_node("a", annotations=old))
        put_lease(double, "a", NOW - timedelta(seconds=5))
        # Not node heartbeats: the extender's leader-election Lease, and one in another namespace.
        put_lease(double, "gpupair-extender", NOW, labelled=False)
        put_lease(double, "b", NOW, namespace="elsewhere")
        async with kube_extender(double, heartbeats=True, clock=lambda: now[0]) as k:
            await eventually(lambda: k.extender.ready(), what="nodes, pods and leases listed")
            beats: Heartbeats = k.extender.heartbeats
            assert len(beats) == 1 and beats.get("gpupair-extender") is None and beats.get("b") is None
            _, fresh = await k.client.post("filter", filter_body(["a"]))
            _, metrics = await k.client.get("/metrics")

            now[0] = (NOW + timedelta(seconds=296)).timestamp()  # 301 s since the last renewal
            _, stale = await k.client.post("filter", filter_body(["a"]))
            _, stale_metrics = await k.client.get("/metrics")

            put_lease(double, "a", NOW + timedelta(seconds=296))  # the reporter is back
            await eventually(lambda: beats.get("a") == now[0], what="the renewal")
            _, revived = await k.client.post("filter", filter_body(["a"]))
    assert fresh["NodeNames"] == ["a"]
    assert 'gpupair_extender_nodes{state="ok"} 1.0' in metrics
    assert 'gpupair_extender_report_age_seconds{stat="max"} 5.0' in metrics
    assert 'gpupair_extender_node_leases 1.0' in metrics
    assert stale["NodeNames"] == []
    reason = stale["FailedNodes"]["a"]
    assert reason == (f"gpupair reporter last seen 2026-11-30T07:29:55Z (its Lease's renewTime; report from "
                      f"2026-11-30T05:30:00Z), older than 300s: {STALE_REASON}")
    assert 'gpupair_extender_nodes{state="stale"} 1.0' in stale_metrics
    assert revived["NodeNames"] == ["a"]


async def test_old_reporter_new_extender_freshness_from_the_report_as_before():
    """No Lease (a reporter from before it re-writes its annotations every 30 s)."""
    now = [NOW.timestamp()]
    async with running_kube_double() as double:
        double.store.create("nodes", make_node("a", annotations=report_annotations(set(range(8)), node="a")))
        async with kube_extender(double, heartbeats=True, clock=lambda: now[0]) as k:
            await eventually(lambda: k.extender.ready())
            now[0] = (NOW + timedelta(seconds=290)).timestamp()
            _, fresh = await k.client.post("filter", filter_body(["a"]))
            double.store.patch("nodes", "a", {"metadata": {"annotations": report_annotations(
                set(range(8)), node="a", generation=2, reported_at=NOW + timedelta(seconds=290))}})
            await eventually(lambda: k.extender.node_cache.get("a").report.generation == 2)
            now[0] = (NOW + timedelta(seconds=591)).timestamp()  # that write is 301 s old, no Lease
            _, stale = await k.client.post("filter", filter_body(["a"]))
    assert fresh["NodeNames"] == ["a"]
    assert stale["FailedNodes"]["a"] == f"gpupair report from 2026-11-30T07:34:50Z is older than 300s: {STALE_REASON}"


@pytest.mark.parametrize("refresh,extender_reads_leases,stays_fresh", [
    (90.0, False, True),  # the default: an old extender (deploy's --stale-after 120) keeps seeing it live
    (None, False, False),  # --annotation-refresh 0 with an old extender: why the flag defaults on
    (None, True, True),  # every extender new, annotations written only on change
], ids=["new-reporter-old-extender", "refresh-off-too-early", "both-new"])
async def test_new_reporter_during_a_rolling_upgrade(tmp_path, kubelet, clock, refresh, extender_reads_leases,
                                                    stays_fresh):
    """The new reporter (Lease; annotations unchanged for hours) against an extender that reads
    Leases and one that does not (heartbeats off: it judges freshness from reportedAt alone,
    as extenders before the Lease did), at the deployment's --stale-after 120."""
    async with running_kube_double() as double:
        double.store.create("nodes", make_node(NODE))
        async with kube_client_for(double) as api, PodResourcesClient(kubelet.socket_path, timeout=5.0) as client:
            loop = new_reporter(tmp_path, client, api, clock, refresh=refresh)
            await loop.scan_once()
            async with kube_extender(double, heartbeats=extender_reads_leases, stale_after=120.0,
                                     clock=lambda: clock.wall().timestamp()) as k:
                await eventually(lambda: k.extender.ready())
                verdicts = []
                for step in range(1, 721):  # two hours of 10 s scans
                    clock.advance(10.0)
                    await loop.scan_once()
                    if step % 30 == 0:  # every 5 minutes, once the watches have caught up
                        await eventually(lambda: _caught_up(k, double))
                        _, answer = await k.client.post("filter", filter_body([NODE]))
                        verdicts.append(answer["NodeNames"] == [NODE])
    node_writes = len(double.requests_to(NODE_PATH, "PATCH"))
    assert all(verdicts) if stays_fresh else not any(verdicts)
    assert node_writes == (1 + 7200 // 90 if refresh else 1)


def _caught_up(k, double) -> bool:
    beats = k.extender.heartbeats
    lease = lease_of(double)
    if beats is not None and lease is not None and beats.get(NODE) != leases.renewed_at(lease):
        return False
    entry = k.extender.node_cache.get(NODE)
    return entry is not None and entry.report is not None and (
        k.extender.node_cache._raw[NODE][1] == double.store.node(NODE)["metadata"]["annotations"][
            "gpupair.io/free"])


def test_heartbeats_ignore_what_is_not_a_node_heartbeat():
    seen = []
    beats = Heartbeats(seen.append)
    lease = leases.lease_body("gpu-1", NS, 120, 1_764_543_321_000_000_000)
    unlabelled = {**lease, "metadata": {**lease["metadata"], "name": "gpupair-extender", "labels": {}}}
    beats.replace([lease, unlabelled, {"metadata": "nonsense"}, "nonsense"])
    assert len(beats) == 1 and beats.get("gpu-1") == 1_764_543_321.0 and seen == ["gpu-1"]
    beats.apply("MODIFIED", {**lease, "spec": {"renewTime": "yesterday"}})  # unreadable: no renewal
    assert beats.get("gpu-1") is None and seen == ["gpu-1", "gpu-1"]
    beats.apply("MODIFIED", unlabelled)
    beats.apply("DELETED", lease)
    assert len(beats) == 0 and seen == ["gpu-1", "gpu-1"]


async def test_nodes_mode_takes_freshness_from_the_lease_too():
    """nodeCacheCapable: false: the Node objects come in the request, the Leases from the watch."""
    from tests.extender_support import make_extender, node_object, serving

    extender = make_extender(heartbeats=True, stale_after=300.0, clock=lambda: NOW.timestamp())
    old = report_annotations(set(range(8)), node="a", reported_at=NOW - timedelta(hours=1))
    body = args_body(pod_object(2), nodes=[node_object("a", old), node_object("b", old)])
    extender.heartbeats.replace([leases.lease_body("a", NS, 120, int((NOW - timedelta(seconds=10)).timestamp() * 1e9))])
    async with serving(extender) as client:
        _, answer = await client.post("filter", body)
    assert [n["metadata"]["name"] for n in answer["Nodes"]["items"]] == ["a"]
    assert answer["FailedNodes"]["b"] == f"gpupair report from 2026-11-30T06:30:00Z is older than 300s: {STALE_REASON}"
