"""The publisher against a real HTTP kube-apiserver double: bodies, heartbeat, backoff, recovery."""

from __future__ import annotations

import asyncio
import json
from datetime import timedelta

import pytest

from gpupair.topology.report import FREE_KEY, TOPOLOGY_KEY, decode_annotations, encode_free, encode_topology
from gpupair.reporter.main import node_writer
from gpupair.reporter.publisher import Outcome, Publisher
from gpupair.reporter.scan import Allocations, compute
from tests.kube_double import kube_client_for, make_node, running_kube_double
from tests.reporter_support import NODE, FakeClock, seed_layout

PATH = f"/api/v1/nodes/{NODE}"


@pytest.fixture
async def double():
    async with running_kube_double() as server:
        server.store.create("nodes", make_node(NODE, annotations={"gpupair.io/test": "x"}))
        yield server


@pytest.fixture
async def api(double):
    async with kube_client_for(double) as client:
        yield client


@pytest.fixture
def layout(tmp_path):
    return seed_layout(tmp_path).layout


@pytest.fixture
def clock():
    return FakeClock()


def publisher(api, clock, **kwargs) -> Publisher:
    kwargs.setdefault("rng", lambda: 1.0)  # the longest jitter, so backoff times are exact
    return Publisher(node_writer(api, NODE), heartbeat=30.0, clock=clock, wall=clock.wall, **kwargs)


def patches(double):
    return double.requests_to(PATH, "PATCH")


async def test_first_write_is_an_exact_merge_patch_of_the_two_annotations(double, api, layout, clock):
    pub = publisher(api, clock)
    scan = compute(layout, Allocations(allocated=("0", "4")))

    assert await pub.publish(scan) is Outcome.CHANGED

    [request] = patches(double)
    assert request.content_type == "application/merge-patch+json"
    topology = encode_topology(layout)
    generation = int(clock.wall().timestamp() * 1000)
    assert request.json() == {
        "metadata": {
            "annotations": {
                TOPOLOGY_KEY: topology,
                FREE_KEY: encode_free(topology, {1, 2, 3, 5, 6, 7}, generation, clock.wall()),
            }
        }
    }
    annotations = double.store.node(NODE)["metadata"]["annotations"]
    assert annotations["gpupair.io/test"] == "x", "a merge patch leaves other annotations alone"
    decoded = decode_annotations(annotations)
    assert decoded.state.free_by_numa() == {0: (1, 2, 3), 1: (5, 6, 7)}
    assert decoded.generation == generation == pub.generation


async def test_no_write_until_something_changes_or_the_heartbeat_is_due(double, api, layout, clock):
    pub = publisher(api, clock)
    scan = compute(layout, Allocations(allocated=("0", "4")))
    assert await pub.publish(scan) is Outcome.CHANGED

    for _ in range(3):
        clock.advance(9.9)
        same = compute(layout, Allocations(allocated=("4", "0")))  # same set, other order
        assert await pub.publish(same) is Outcome.UNCHANGED
    assert len(patches(double)) == 1

    clock.advance(30.0 - 3 * 9.9)
    assert await pub.publish(scan) is Outcome.HEARTBEAT
    first, second = (request.json()["metadata"]["annotations"] for request in patches(double))
    assert first[TOPOLOGY_KEY] == second[TOPOLOGY_KEY]
    old, new = json.loads(first[FREE_KEY]), json.loads(second[FREE_KEY])
    assert new["free"] == old["free"] and new["generation"] > old["generation"]
    assert new["reportedAt"] == (clock.wall()).strftime("%Y-%m-%dT%H:%M:%SZ") != old["reportedAt"]


async def test_a_change_is_written_at_once(double, api, layout, clock):
    pub = publisher(api, clock)
    assert await pub.publish(compute(layout, Allocations(allocated=("0", "4")))) is Outcome.CHANGED
    clock.advance(1.0)
    assert await pub.publish(compute(layout, Allocations(allocated=("0", "4", "5")))) is Outcome.CHANGED
    annotations = double.store.node(NODE)["metadata"]["annotations"]
    assert decode_annotations(annotations).state.free == {1, 2, 3, 6, 7}
    assert len(patches(double)) == 2


async def test_unhealthy_devices_are_published_apart_from_free(double, api, layout, clock):
    pub = publisher(api, clock)
    offered = tuple(str(i) for i in range(8) if i != 6)  # the kubelet stopped offering GPU6
    await pub.publish(compute(layout, Allocations(allocated=("0",), allocatable=offered)))
    decoded = decode_annotations(double.store.node(NODE)["metadata"]["annotations"])
    assert decoded.unhealthy == {6} and decoded.state.free == {1, 2, 3, 4, 5, 7}


async def test_recovers_after_the_api_server_vanishes_without_a_write_storm(double, api, layout, clock):
    pub = publisher(api, clock, backoff_base=1.0, backoff_cap=8.0)
    scan = compute(layout, Allocations(allocated=("0", "4")))
    assert await pub.publish(scan) is Outcome.CHANGED

    await double.stop()
    changed = compute(layout, Allocations(allocated=("0", "4", "1")))
    assert await pub.publish(changed) is Outcome.ERROR
    assert pub.retry_at == pytest.approx(clock() + 1.0)

    await double.start()  # back on the same port, same store
    before = len(double.requests)
    for _ in range(7):
        clock.advance(0.125)  # binary fractions: the sum is exact
        assert await pub.publish(changed) is Outcome.BACKOFF
    assert len(double.requests) == before, "nothing is sent while backing off"

    clock.advance(0.125)
    assert await pub.publish(changed) is Outcome.CHANGED
    assert decode_annotations(double.store.node(NODE)["metadata"]["annotations"]).state.free == {2, 3, 5, 6, 7}
    assert pub.failures == 0 and pub.retry_at is None


async def test_backoff_doubles_up_to_the_cap_and_heartbeats_wait_too(double, api, layout, clock):
    pub = publisher(api, clock, backoff_base=1.0, backoff_cap=4.0)
    scan = compute(layout, Allocations())
    double.fail_next(PATH, 503, times=4, method="PATCH", message="etcdserver: request timed out")
    delays = []
    for _ in range(4):
        assert await pub.publish(scan) is Outcome.ERROR
        delays.append(pub.retry_at - clock())
        clock.advance(delays[-1])
    assert delays == [1.0, 2.0, 4.0, 4.0]
    assert "HTTP 503" in pub.last_error
    assert await pub.publish(scan) is Outcome.CHANGED
    assert len(patches(double)) == 5


async def test_jitter_spreads_retries(api, layout, clock, double):
    pub = publisher(api, clock, rng=lambda: 0.0)
    double.fail_next(PATH, 500, method="PATCH")
    await pub.publish(compute(layout, Allocations()))
    assert pub.retry_at - clock() == pytest.approx(0.5)


async def test_missing_node_is_an_error_that_names_the_flag(api, layout, clock, double):
    double.store.delete("nodes", NODE)
    pub = publisher(api, clock)
    assert await pub.publish(compute(layout, Allocations())) is Outcome.ERROR
    assert "404" in pub.last_error and "--node-name" in pub.last_error


async def test_a_hung_write_times_out_and_backs_off(layout, clock):
    never = asyncio.Event()

    async def hang(_annotations):
        await never.wait()

    pub = Publisher(hang, timeout=0.05, clock=clock, wall=clock.wall, rng=lambda: 1.0)
    assert await pub.publish(compute(layout, Allocations())) is Outcome.ERROR
    assert pub.last_error == "timed out waiting for the API server"


async def test_generation_only_grows(api, layout, clock, double):
    pub = publisher(api, clock)
    scans = [compute(layout, Allocations(allocated=(str(i),))) for i in range(3)]
    await pub.publish(scans[0])
    first = pub.generation
    clock.start -= timedelta(hours=1)  # the wall clock steps back
    await pub.publish(scans[1])
    assert pub.generation == first + 1

    clock.start += timedelta(hours=1, seconds=5)
    restarted = publisher(api, clock)  # a new process knows no past generation
    await restarted.publish(scans[2])
    assert restarted.generation > first + 1
    assert decode_annotations(double.store.node(NODE)["metadata"]["annotations"]).generation == restarted.generation
