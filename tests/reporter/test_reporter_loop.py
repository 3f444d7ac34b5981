"""The reporter end to end in one process: NVML fake at its boundary, the kubelet's PodResources
as a real gRPC server on a Unix socket, the API server as a real HTTP double."""

from __future__ import annotations

import asyncio
import os

import aiohttp
import grpc
import pytest
from prometheus_client import CollectorRegistry

from gpupair.decide.judge.decisions import Decider, NodeView
from gpupair.topology.report import FREE_KEY, decode_annotations, decode_layout
from gpupair.reporter.allocations import PodResourcesClient
from gpupair.reporter.app import build_app
from gpupair.reporter.checkpoint_watch import CheckpointWatch
from gpupair.reporter.loop import ReporterLoop
from gpupair.reporter.main import node_writer
from gpupair.reporter.metrics import ReporterMetrics
from gpupair.reporter.publisher import Outcome, Publisher
from gpupair.reporter.scan import PodResourcesAllocations, StaticAllocations
from gpupair.reporter.topology_source import FileLayoutSource, NvmlLayoutSource
from tests.kube_double import kube_client_for, make_node, running_kube_double
from tests.nvml_fake import FakeNvml, load_recording, real, write_sysfs
from gpupair.topology.shares import SHARES_KEY
from tests.podresources_server import FakeContainer, FakeDevice, FakePod, running_kubelet
from tests.reporter_support import GPU, NODE, SEED_UUIDS, SHARED, FakeClock, devices, gpu_pod, seed_source

PATH = f"/api/v1/nodes/{NODE}"


@pytest.fixture
async def kubelet():
    async with running_kubelet({GPU: devices(*range(8))}) as server:
        yield server


@pytest.fixture
async def pod_resources(kubelet):
    async with PodResourcesClient(kubelet.socket_path, timeout=5.0) as client:
        yield client


@pytest.fixture
async def double():
    async with running_kube_double() as server:
        server.store.create("nodes", make_node(NODE))
        yield server


@pytest.fixture
async def api(double):
    async with kube_client_for(double) as client:
        yield client


@pytest.fixture
def clock():
    return FakeClock()


@pytest.fixture
def metrics():
    return ReporterMetrics(CollectorRegistry())


def reporter(tmp_path, pod_resources, api, clock, metrics, **kwargs):
    source, nvml = seed_source(tmp_path)
    publisher = Publisher(node_writer(api, NODE), heartbeat=30.0, clock=clock, wall=clock.wall)
    loop = ReporterLoop(source, PodResourcesAllocations(pod_resources, GPU), publisher, metrics, clock=clock, **kwargs)
    return loop, nvml


def node_report(double):
    return decode_annotations(double.store.node(NODE)["metadata"]["annotations"])


def sample(metrics, name, **labels):
    return metrics.registry.get_sample_value(f"gpupair_reporter_{name}", labels or None)


async def test_done_when_seed_node_with_gpu0_and_gpu4_allocated(tmp_path, kubelet, pod_resources, api, double,
                                                                  clock, metrics):
    kubelet.pods = [gpu_pod("train-a", 0), gpu_pod("train-b", 4)]
    loop, _ = reporter(tmp_path, pod_resources, api, clock, metrics)

    await loop.scan_once()

    report = node_report(double)
    assert report.state.free_by_numa() == {0: (1, 2, 3), 1: (5, 6, 7)}
    assert report.layout.link(1, 2) == "NODE" and report.layout.link(3, 5) == "SYS"
    decision = Decider().decide(2, NodeView(NODE, report.state))
    assert decision.passes and decision.plan is not None
    assert set(decision.plan) <= {1, 2, 3} or set(decision.plan) <= {5, 6, 7}

    for _ in range(5):
        clock.advance(5.0)
        await loop.scan_once()
    assert len(double.requests_to(PATH, "PATCH")) == 1, "nothing changed, heartbeat not due"
    assert sample(metrics, "writes_skipped_total", reason="unchanged") == 5

    clock.advance(5.0)  # 30 s since the write
    await loop.scan_once()
    assert loop.last_outcome is Outcome.HEARTBEAT
    assert len(double.requests_to(PATH, "PATCH")) == 2
    assert sample(metrics, "writes_total", outcome="changed") == 1
    assert sample(metrics, "writes_total", outcome="heartbeat") == 1
    assert sample(metrics, "free_devices", numa_node="0") == 3
    assert sample(metrics, "free_devices", numa_node="1") == 3


@pytest.mark.parametrize("uuid", [True, False], ids=["uuid-ids", "index-ids"])
async def test_allocations_changing_between_scans(tmp_path, kubelet, pod_resources, api, double, clock, metrics,
                                                  uuid):
    kubelet.allocatable = {GPU: devices(*range(8), uuid=uuid)}
    kubelet.pods = [gpu_pod("a", 0, 1, uuid=uuid)]
    loop, _ = reporter(tmp_path, pod_resources, api, clock, metrics)

    await loop.scan_once()
    assert node_report(double).state.free == {2, 3, 4, 5, 6, 7}

    kubelet.pods.append(gpu_pod("b", 4, 5, namespace="other", uuid=uuid))
    clock.advance(5.0)
    await loop.scan_once()
    assert node_report(double).state.free == {2, 3, 6, 7}

    kubelet.pods = [gpu_pod("b", 4, 5, namespace="other", uuid=uuid)]  # pod a finished
    clock.advance(5.0)
    await loop.scan_once()
    assert node_report(double).state.free_by_numa() == {0: (0, 1, 2, 3), 1: (6, 7)}
    assert len(double.requests_to(PATH, "PATCH")) == 3


async def test_the_ledger_names_each_pod_with_its_devices_and_a_new_pod_is_a_change(
        tmp_path, kubelet, pod_resources, api, double, clock, metrics):
    from tests.podresources_server import FakeContainer, FakePod

    # A pod whose init container and app container share a device, next to a 1-GPU pod.
    kubelet.pods = [FakePod("ml", "pair", [FakeContainer("init", {GPU: devices(2)}),
                                           FakeContainer("main", {GPU: devices(2, 3)})]),
                    gpu_pod("pinned", 5, namespace="infra")]
    loop, _ = reporter(tmp_path, pod_resources, api, clock, metrics)
    await loop.scan_once()
    ledger = node_report(double).ledger
    assert ledger is not None and ledger.pods == {("ml", "pair"): {2, 3}, ("infra", "pinned"): {5}}

    # The same devices held by another pod (one finished, one started) is a change to publish.
    kubelet.pods = [gpu_pod("pair-2", 2, 3), gpu_pod("pinned", 5, namespace="infra")]
    clock.advance(1.0)
    await loop.scan_once()
    assert loop.last_outcome is Outcome.CHANGED
    assert node_report(double).ledger.pods == {("ml", "pair-2"): {2, 3}, ("infra", "pinned"): {5}}
    assert node_report(double).state.free == {0, 1, 4, 6, 7}


async def test_other_resources_and_unhealthy_devices(tmp_path, kubelet, pod_resources, api, double, clock, metrics):
    from tests.podresources_server import FakeContainer, FakeDevice, FakePod

    kubelet.allocatable = {GPU: devices(0, 1, 2, 3, 4, 5, 7), "example.com/nic": [FakeDevice("nic-0", (0,))]}
    kubelet.pods = [FakePod("ml", "mixed", [FakeContainer("main", {GPU: devices(2),
                                                                     "example.com/nic": [FakeDevice("nic-0")]})])]
    loop, _ = reporter(tmp_path, pod_resources, api, clock, metrics)
    await loop.scan_once()
    report = node_report(double)
    assert report.unhealthy == {6}
    assert report.state.free == {0, 1, 3, 4, 5, 7}
    assert sample(metrics, "unhealthy_devices") == 1


async def test_nvml_errors_are_counted_and_the_rest_is_reported(tmp_path, kubelet, pod_resources, api, double,
                                                                clock, metrics):
    kubelet.pods = [gpu_pod("a", 0)]
    loop, nvml = reporter(tmp_path, pod_resources, api, clock, metrics)
    nvml.fail("nvmlDeviceGetHandleByIndex", 6, code=real.NVML_ERROR_GPU_IS_LOST)
    nvml.fail("nvmlDeviceGetTopologyCommonAncestor", 1, 2)
    nvml.fail("nvmlDeviceGetP2PStatus", 1, 3)

    await loop.scan_once()

    report = node_report(double)
    assert report.unhealthy == {6}, "a GPU NVML cannot open is not offered as free"
    assert report.state.free == {1, 2, 3, 4, 5, 7}
    assert report.layout.link(1, 2) == "SYS" and report.layout.link(1, 3) == "NODE"
    assert sample(metrics, "nvml_errors_total", call="nvmlDeviceGetHandleByIndex") == 1
    assert sample(metrics, "nvml_errors_total", call="nvmlDeviceGetTopologyCommonAncestor") == 1
    assert sample(metrics, "nvml_errors_total", call="nvmlDeviceGetP2PStatus") == 1
    assert sample(metrics, "discoveries_total", result="partial") == 1
    assert sample(metrics, "unknown_links") == 7 + 1

    # the GPU comes back: discovery is retried after rediscover_after, not on every scan
    nvml._failures.clear()
    clock.advance(30.0)
    await loop.scan_once()
    assert sample(metrics, "discoveries_total", result="partial") == 1
    clock.advance(30.0)
    await loop.scan_once()
    assert sample(metrics, "discoveries_total", result="complete") == 1
    report = node_report(double)
    assert report.unhealthy == frozenset() and report.layout.link(1, 2) == "NODE"
    assert report.state.free == {1, 2, 3, 4, 5, 6, 7}


async def test_no_nvml_means_no_layout_and_not_ready(tmp_path, pod_resources, api, double, clock, metrics):
    loop, nvml = reporter(tmp_path, pod_resources, api, clock, metrics)
    nvml.init_error = real.NVML_ERROR_DRIVER_NOT_LOADED
    assert await loop.scan_once() is None
    assert not loop.ready() and loop.layout() is None
    assert sample(metrics, "discoveries_total", result="failed") == 1
    assert double.requests_to(PATH, "PATCH") == []


async def test_kubelet_down_skips_the_scan_and_recovers(tmp_path, kubelet, pod_resources, api, double, clock,
                                                        metrics):
    kubelet.pods = [gpu_pod("a", 0)]
    loop, _ = reporter(tmp_path, pod_resources, api, clock, metrics)
    await kubelet.stop()
    assert await loop.scan_once() is None
    assert sample(metrics, "podresources_errors_total") == 1
    assert double.requests_to(PATH, "PATCH") == []

    await kubelet.start()  # a restarted kubelet recreates its socket
    assert await loop.scan_once() is not None
    assert node_report(double).state.free == {1, 2, 3, 4, 5, 6, 7}
    assert loop.ready()


async def test_kubelet_error_status_is_counted(tmp_path, kubelet, pod_resources, api, double, clock, metrics):
    loop, _ = reporter(tmp_path, pod_resources, api, clock, metrics)
    kubelet.fail_next = (grpc.StatusCode.RESOURCE_EXHAUSTED, "rejected by rate limit")
    assert await loop.scan_once() is None
    assert sample(metrics, "scans_total", result="podresources_error") == 1


async def test_checkpoint_change_triggers_an_immediate_rescan(tmp_path, kubelet, pod_resources, api, double, clock,
                                                              metrics):
    checkpoint = tmp_path / "kubelet_internal_checkpoint"
    checkpoint.write_text('{"Data":{"PodDeviceEntries":null}}')
    loop, _ = reporter(tmp_path, pod_resources, api, clock, metrics, scan_interval=3600.0)
    stop, wake = asyncio.Event(), asyncio.Event()
    watch = CheckpointWatch(str(checkpoint))
    tasks = [asyncio.create_task(loop.run(stop, wake)),
             asyncio.create_task(watch.run(wake.set, stop, interval=0.01))]
    try:
        await asyncio.wait_for(loop.scanned.wait(), 10)
        assert node_report(double).state.free == set(range(8))

        loop.scanned.clear()
        kubelet.pods = [gpu_pod("new", 2, 3)]
        replacement = tmp_path / "checkpoint.tmp"  # the kubelet writes a new file and renames it
        replacement.write_text('{"Data":{"PodDeviceEntries":[1]}}')
        os.replace(replacement, checkpoint)
        await asyncio.wait_for(loop.scanned.wait(), 10)  # well before the hour-long interval
        assert node_report(double).state.free == {0, 1, 4, 5, 6, 7}
        assert sample(metrics, "checkpoint_rescans_total") == 1
    finally:
        stop.set()
        await asyncio.gather(*tasks)


def test_checkpoint_watch_sees_writes_renames_and_removal(tmp_path):
    path = tmp_path / "kubelet_internal_checkpoint"
    watch = CheckpointWatch(str(path))
    assert not watch.changed()
    path.write_text("a")
    assert watch.changed() and not watch.changed()
    os.utime(path, ns=(1, 2))
    assert watch.changed()
    other = tmp_path / "new"
    other.write_text("a")
    os.utime(other, ns=(1, 2))
    os.replace(other, path)  # same size and mtime, new inode
    assert watch.changed()
    path.unlink()
    assert watch.changed() and not watch.changed()


async def test_static_allocations_and_layout_file(tmp_path, api, double, clock, metrics):
    topo = os.path.join(os.path.dirname(os.path.dirname(__file__)), "fixtures", "topo", "seed-5090d.txt")
    layout_file = tmp_path / "host" / "layout.json"
    layout_file.parent.mkdir()
    publisher = Publisher(node_writer(api, NODE), clock=clock, wall=clock.wall)
    loop = ReporterLoop(FileLayoutSource(topo), StaticAllocations(["0", "4"]), publisher, metrics, clock=clock,
                        layout_file=str(layout_file))
    await loop.scan_once()
    report = node_report(double)
    assert report.state.free_by_numa() == {0: (1, 2, 3), 1: (5, 6, 7)}
    assert decode_layout(layout_file.read_text().strip()) == report.layout == loop.layout()


async def test_app_serves_health_readiness_and_metrics_over_http(tmp_path, kubelet, pod_resources, api, double,
                                                                 clock, metrics):
    from aiohttp import web

    async def verify(_request):
        return web.json_response({"verdict": "PASS"})

    loop, _ = reporter(tmp_path, pod_resources, api, clock, metrics)
    app = build_app(metrics.registry, loop.ready, [web.post("/v1/verify", verify)])
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    try:
        async with aiohttp.ClientSession(f"http://127.0.0.1:{port}") as http:
            assert (await http.get("/healthz")).status == 200
            assert (await http.get("/readyz")).status == 503
            await loop.scan_once()
            assert (await http.get("/readyz")).status == 200
            text = await (await http.get("/metrics")).text()
            assert 'gpupair_reporter_free_devices{numa_node="0"} 4.0' in text
            assert 'gpupair_reporter_writes_total{outcome="changed"} 1.0' in text
            assert "gpupair_reporter_scan_seconds_count 1.0" in text
            assert (await (await http.post("/v1/verify", json={})).json()) == {"verdict": "PASS"}
    finally:
        await runner.cleanup()
    assert FREE_KEY in double.store.node(NODE)["metadata"]["annotations"]


def test_free_gauge_drops_numa_nodes_the_layout_no_longer_has(metrics):
    metrics.set_free({-1: (0, 1, 2, 3)}, unhealthy=0)
    assert sample(metrics, "free_devices", numa_node="-1") == 4

    metrics.set_free({0: (0, 1), 1: (2,)}, unhealthy=1)  # rediscovered: the NUMA nodes are known now

    assert sample(metrics, "free_devices", numa_node="-1") is None
    assert sample(metrics, "free_devices", numa_node="0") == 2
    assert sample(metrics, "free_devices", numa_node="1") == 1


def replicas(indices, per_gpu: int, numa: bool = True) -> list[FakeDevice]:
    """Time-slicing's ids: each GPU advertised ``per_gpu`` times as ``<uuid>::<n>``."""
    return [FakeDevice(f"{SEED_UUIDS[i]}::{n}", ((0,) if i < 4 else (1,)) if numa else ())
            for i in indices for n in range(per_gpu)]


def share_pod(name: str, *ids: FakeDevice, resource: str = SHARED) -> FakePod:
    return FakePod("ml", name, [FakeContainer("main", {resource: list(ids)})])


@pytest.mark.parametrize("resource", [SHARED, GPU], ids=["renamed", "replicated"])
async def test_time_sliced_replicas_are_published_as_each_gpus_shares(tmp_path, kubelet, pod_resources, api, double,
                                                                      clock, metrics, resource):
    """Four replicas a GPU, under nvidia.com/gpu.shared (renameByDefault) or under nvidia.com/gpu
    itself: the report says, per GPU, the replicas offered and those pods hold, and a GPU with
    one taken is not free."""
    offered = replicas(range(8), 4)
    kubelet.allocatable = {resource: offered}
    on_gpu2 = [device for device in offered if device.id.startswith(SEED_UUIDS[2])]
    kubelet.pods = [share_pod("a", on_gpu2[0], resource=resource), share_pod("b", on_gpu2[1], resource=resource),
                    share_pod("c", offered[0], resource=resource)]
    source, _ = seed_source(tmp_path)
    publisher = Publisher(node_writer(api, NODE), heartbeat=30.0, clock=clock, wall=clock.wall)
    loop = ReporterLoop(source, PodResourcesAllocations(pod_resources, GPU, [SHARED]), publisher, metrics, clock=clock)

    await loop.scan_once()

    report = node_report(double)
    assert report.shares is not None and report.shares_problem == ""
    assert report.shares.of == (4,) * 8 and report.shares.taken == (1, 0, 2, 0, 0, 0, 0, 0)
    assert report.shares.replicated == (resource == GPU)
    assert report.state.free == frozenset({1, 3, 4, 5, 6, 7})
    assert [report.milli_left(i) for i in range(4)] == [750, 1000, 500, 1000]
    assert report.ledger is not None and report.ledger.devices_of("ml", "b") == frozenset({2})  # two pods on GPU2

    kubelet.allocatable, kubelet.pods = {GPU: devices(*range(8))}, []  # sharing turned off on the node
    clock.advance(5.0)
    await loop.scan_once()
    annotations = double.store.node(NODE)["metadata"]["annotations"]
    assert SHARES_KEY not in annotations and node_report(double).shares is None


def mig_node(tmp_path) -> tuple[NvmlLayoutSource, FakeNvml]:
    """The recorded DGX A100: GPU0 carved 3g+2g+1g+1g, GPU1 3g+3g, GPU2-7 whole."""
    nvml = FakeNvml(load_recording("dgx-a100-mig"))
    return NvmlLayoutSource(nvml, str(write_sysfs(tmp_path / "sys", nvml.recording))), nvml


def mixed_strategy(nvml: FakeNvml) -> dict[str, list[FakeDevice]]:
    """What NVIDIA's device plugin offers with mig.strategy mixed: the GPUs without MIG under
    nvidia.com/gpu, each MIG device under its profile's resource, by its MIG-<uuid>."""
    offered: dict[str, list[FakeDevice]] = {GPU: [FakeDevice(d["uuid"], (0,) if i < 4 else (1,))
                                                  for i, d in enumerate(nvml.devices) if "devices" not in d["mig"]
                                                  or not d["mig"]["devices"]]}
    profiles = {3: "nvidia.com/mig-3g.40gb", 2: "nvidia.com/mig-2g.20gb", 1: "nvidia.com/mig-1g.10gb"}
    for device in nvml.devices:
        for mig in device["mig"]["devices"]:
            offered.setdefault(profiles[mig["gpuInstanceSlices"]], []).append(FakeDevice(mig["uuid"], (0,)))
    offered["example.com/fpga"] = [FakeDevice("fpga-0")]  # not a GPU: not read
    return offered


async def test_mixed_strategy_mig_devices_are_published_as_their_gpus_slices(tmp_path, kubelet, pod_resources, api,
                                                                            double, clock, metrics):
    """Each profile's resource is read; a MIG device counts its compute slices of its GPU, found
    through NVML from its MIG-<uuid>: GPU0 with a 1g taken has 6/7 left, GPU1 with one of its two
    3g taken 3/7 (its seventh slice is in no device), and neither is free."""
    source, nvml = mig_node(tmp_path)
    kubelet.allocatable = offered = mixed_strategy(nvml)
    one_g, three_g = offered["nvidia.com/mig-1g.10gb"][0], offered["nvidia.com/mig-3g.40gb"][2]
    kubelet.pods = [share_pod("small", one_g, resource="nvidia.com/mig-1g.10gb"),
                    share_pod("big", three_g, resource="nvidia.com/mig-3g.40gb"),
                    FakePod("ml", "whole", [FakeContainer("main", {GPU: [offered[GPU][3]]})]),
                    FakePod("ml", "fpga", [FakeContainer("main", {"example.com/fpga": offered["example.com/fpga"]})])]
    publisher = Publisher(node_writer(api, NODE), heartbeat=30.0, clock=clock, wall=clock.wall)
    loop = ReporterLoop(source, PodResourcesAllocations(pod_resources, GPU, [SHARED]), publisher, metrics, clock=clock)

    scan = await loop.scan_once()

    assert scan is not None and scan.unknown_ids == ()
    report = node_report(double)
    assert report.shares is not None and report.shares_problem == ""
    assert report.shares.of == (7, 6) + (1,) * 6 and report.shares.taken == (1, 3, 0, 0, 0, 1, 0, 0)
    assert report.shares.whole == (0, 7) + (0,) * 6
    assert [report.milli_left(i) for i in range(3)] == [857, 428, 1000]
    assert report.state.free == frozenset({2, 3, 4, 6, 7})
    assert report.ledger is not None and report.ledger.devices_of("ml", "big") == frozenset({1})
    assert kubelet.calls == ["GetAllocatableResources", "List"]  # one of each, whatever the resources


async def test_a_mig_device_carved_after_discovery_is_found_by_discovering_again(tmp_path, kubelet, pod_resources,
                                                                                api, double, clock, metrics):
    """NVIDIA's MIG manager re-carves GPUs while the node runs: a MIG-<uuid> the discovery did not
    list makes the reporter ask NVML again (no sooner than rediscover_after), and then it counts."""
    source, nvml = mig_node(tmp_path)
    kubelet.allocatable = mixed_strategy(nvml)
    carved = {"index": 4, "uuid": "MIG-a100c1e0-0004-4c1e-9f2a-000000000004", "gpuInstance": 11, "computeInstance": 0,
              "gpuInstanceSlices": 1, "computeInstanceSlices": 1, "memorySizeMB": 10240}
    publisher = Publisher(node_writer(api, NODE), heartbeat=30.0, clock=clock, wall=clock.wall)
    loop = ReporterLoop(source, PodResourcesAllocations(pod_resources, GPU), publisher, metrics, clock=clock)
    await loop.scan_once()
    nvml.devices[1]["mig"]["devices"].append(carved)  # GPU1's seventh slice, carved as a 1g
    kubelet.allocatable["nvidia.com/mig-1g.10gb"].append(FakeDevice(carved["uuid"]))
    kubelet.pods = [share_pod("new", FakeDevice(carved["uuid"]), resource="nvidia.com/mig-1g.10gb")]

    clock.advance(5.0)
    assert (await loop.scan_once()).unknown_ids == (carved["uuid"],)
    clock.advance(60.0)
    scan = await loop.scan_once()

    assert scan is not None and scan.unknown_ids == ()
    assert scan.shares is not None and scan.shares.of[1] == 7 and scan.shares.taken[1] == 1
    assert nvml.count("nvmlDeviceGetCount") == 2
