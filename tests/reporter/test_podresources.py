"""PodResourcesClient against a real gRPC server on a Unix socket (tests/podresources_server.py)."""

from __future__ import annotations

import os

import grpc
import pytest

from gpupair.topology.layout import Device, NodeLayout
from gpupair.reporter.allocations import (
    PodDevices,
    PodNotFoundError,
    PodResourcesClient,
    PodResourcesError,
    free_devices,
)
from tests.podresources_server import (
    GET_ABSENT,
    GET_GATED,
    FakeContainer,
    FakeDevice,
    FakeKubelet,
    FakePod,
    running_kubelet,
    short_socket_dir,
)

GPU = "nvidia.com/gpu"
UUIDS = [f"GPU-{i:08x}-5090-4d00-8000-00000000000{i}" for i in range(8)]


def numa_of(index: int) -> tuple[int, ...]:
    return (0,) if index < 4 else (1,)


def node_layout() -> NodeLayout:
    devices = tuple(Device(index=i, uuid=UUIDS[i], numa_node=numa_of(i)[0]) for i in range(8))
    links = tuple(
        tuple("X" if i == j else ("NODE" if numa_of(i) == numa_of(j) else "SYS") for j in range(8))
        for i in range(8)
    )
    return NodeLayout(devices=devices, links=links)


def gpus(*indices: int, uuid: bool = True) -> list[FakeDevice]:
    return [FakeDevice(UUIDS[i] if uuid else str(i), numa_of(i)) for i in indices]


def gpu_pod(name: str, *indices: int, namespace: str = "default", uuid: bool = True) -> FakePod:
    return FakePod(namespace, name, [FakeContainer("main", {GPU: gpus(*indices, uuid=uuid)})])


@pytest.fixture
def socket_dir():
    with short_socket_dir() as path:
        yield path


@pytest.fixture
async def kubelet():
    async with running_kubelet({GPU: gpus(*range(8))}) as server:
        yield server


@pytest.fixture
async def client(kubelet):
    async with PodResourcesClient(kubelet.socket_path, timeout=5.0) as client:
        yield client


async def test_uuid_strategy_allocatable_and_allocated(kubelet, client):
    kubelet.pods = [gpu_pod("train-1", 0, 1), gpu_pod("train-2", 4, 5, namespace="ml")]

    allocatable = await client.allocatable(GPU)
    allocated = await client.allocated(GPU)

    assert sorted(allocatable) == sorted(UUIDS)
    assert allocated == [
        PodDevices("default", "train-1", "main", GPU, (UUIDS[0], UUIDS[1]), (0,)),
        PodDevices("ml", "train-2", "main", GPU, (UUIDS[4], UUIDS[5]), (1,)),
    ]
    free = free_devices(node_layout(), allocatable, [i for p in allocated for i in p.device_ids])
    assert free.free == {2, 3, 6, 7}
    assert free.allocated == {0, 1, 4, 5}
    assert free.unavailable == frozenset() and free.unknown_ids == ()


async def test_index_strategy(kubelet, client):
    kubelet.allocatable = {GPU: gpus(*range(8), uuid=False)}
    kubelet.pods = [gpu_pod("train-1", 2, 3, uuid=False)]

    allocatable = await client.allocatable(GPU)
    allocated = await client.allocated(GPU)

    assert sorted(allocatable) == [str(i) for i in range(8)]
    assert [p.device_ids for p in allocated] == [("2", "3")]
    free = free_devices(node_layout(), allocatable, allocated[0].device_ids)
    assert free.free == {0, 1, 4, 5, 6, 7}
    assert free.allocated == {2, 3}


async def test_time_sliced_replicas_collapse_to_their_gpu(kubelet, client):
    kubelet.allocatable = {
        GPU: [FakeDevice(f"{UUIDS[i]}::{r}", numa_of(i)) for i in range(8) for r in range(4)]
    }
    def replica_pod(name: str, replica: int) -> FakePod:
        device = FakeDevice(f"{UUIDS[6]}::{replica}", numa_of(6))
        return FakePod("default", name, [FakeContainer("main", {GPU: [device]})])

    kubelet.pods = [replica_pod("a", 2), replica_pod("b", 0)]

    allocatable = await client.allocatable(GPU)
    allocated = [i for p in await client.allocated(GPU) for i in p.device_ids]

    assert len(allocatable) == 32
    assert allocated == [f"{UUIDS[6]}::2", f"{UUIDS[6]}::0"]
    free = free_devices(node_layout(), allocatable, allocated)
    assert free.allocated == {6}
    assert free.free == {0, 1, 2, 3, 4, 5, 7}


async def test_other_resources_are_ignored(kubelet, client):
    kubelet.allocatable = {
        GPU: gpus(0, 1),
        "example.com/nic": [FakeDevice("0000:3b:00.1", (0,))],
        "nvidia.com/mig-1g.10gb": [FakeDevice("MIG-4f1c0e6a-0000-0000-0000-000000000000", (0,))],
    }
    kubelet.pods = [
        FakePod(
            "default",
            "mixed",
            [
                FakeContainer("nic-only", {"example.com/nic": [FakeDevice("0000:3b:00.1", (0,))]}),
                FakeContainer(
                    "gpu", {GPU: gpus(1), "example.com/nic": [FakeDevice("0000:3b:00.2")]}
                ),
                FakeContainer("sidecar"),
            ],
        ),
        FakePod("default", "no-devices", [FakeContainer("main")]),
    ]

    assert await client.allocatable(GPU) == (UUIDS[0], UUIDS[1])
    assert await client.allocated(GPU) == [
        PodDevices("default", "mixed", "gpu", GPU, (UUIDS[1],), (0,))
    ]
    assert await client.pod_devices("default", "mixed", GPU) == [UUIDS[1]]
    assert await client.allocatable("example.com/nic") == ("0000:3b:00.1",)


async def test_device_on_two_numa_nodes_is_listed_once(kubelet, client):
    # The kubelet repeats a device once per NUMA node in its topology.
    kubelet.allocatable = {GPU: [FakeDevice(UUIDS[0], (0, 1)), FakeDevice(UUIDS[1])]}
    two_numa = FakeDevice(UUIDS[0], (0, 1))
    kubelet.pods = [FakePod("default", "p", [FakeContainer("c", {GPU: [two_numa]})])]

    assert await client.allocatable(GPU) == (UUIDS[0], UUIDS[1])
    assert await client.allocated(GPU) == [
        PodDevices("default", "p", "c", GPU, (UUIDS[0],), (0, 1))
    ]


async def test_unhealthy_device_missing_from_allocatable_is_unavailable(kubelet, client):
    kubelet.allocatable = {GPU: gpus(0, 1, 2, 4, 5, 6, 7)}  # GPU3 unhealthy
    kubelet.pods = [gpu_pod("p", 0)]

    allocated = [i for p in await client.allocated(GPU) for i in p.device_ids]
    free = free_devices(node_layout(), await client.allocatable(GPU), allocated)

    assert free.unavailable == {3}
    assert free.free == {1, 2, 4, 5, 6, 7}
    assert free.state().free_by_numa() == {0: (1, 2), 1: (4, 5, 6, 7)}


async def test_allocations_change_between_scans(kubelet, client):
    kubelet.pods = [gpu_pod("first", 0, 1)]
    first = await client.allocated(GPU)

    kubelet.pods = [gpu_pod("second", 2, 3), gpu_pod("third", 6, 7)]
    second = await client.allocated(GPU)

    kubelet.pods = []
    third = await client.allocated(GPU)

    assert [(p.pod, p.device_ids) for p in first] == [("first", (UUIDS[0], UUIDS[1]))]
    assert [(p.pod, p.device_ids) for p in second] == [
        ("second", (UUIDS[2], UUIDS[3])),
        ("third", (UUIDS[6], UUIDS[7])),
    ]
    assert third == []


async def test_client_recovers_after_kubelet_restart(kubelet, client):
    kubelet.pods = [gpu_pod("before", 0, 1)]
    assert [p.pod for p in await client.allocated(GPU)] == ["before"]

    await kubelet.stop()
    with pytest.raises(PodResourcesError, match="does not exist"):
        await client.allocated(GPU)

    kubelet.pods = [gpu_pod("after", 4, 5)]
    await kubelet.start()
    assert [p.pod for p in await client.allocated(GPU)] == ["after"]


async def test_client_recovers_when_restart_happens_between_calls(kubelet, client):
    assert len(await client.allocatable(GPU)) == 8
    kubelet.allocatable = {GPU: gpus(0, 1)}
    await kubelet.restart()
    assert await client.allocatable(GPU) == (UUIDS[0], UUIDS[1])


async def test_missing_socket_raises_pod_resources_error(socket_dir):
    async with PodResourcesClient(os.path.join(socket_dir, "kubelet.sock"), timeout=2.0) as client:
        with pytest.raises(PodResourcesError, match="does not exist"):
            await client.allocatable(GPU)
        with pytest.raises(PodResourcesError):
            await client.pod_devices("default", "p", GPU)


async def test_stale_socket_file_raises_pod_resources_error(kubelet):
    await kubelet.stop(remove_socket=False)  # kubelet died and left its socket behind
    async with PodResourcesClient(kubelet.socket_path, timeout=2.0) as client:
        with pytest.raises(PodResourcesError, match="does not answer") as raised:
            await client.allocated(GPU)
    assert not isinstance(raised.value, grpc.RpcError)


async def test_rate_limit_surfaces_as_pod_resources_error(kubelet, client):
    kubelet.fail_next = (grpc.StatusCode.RESOURCE_EXHAUSTED, "rejected by rate limit")
    with pytest.raises(PodResourcesError, match="rate-limited"):
        await client.allocated(GPU)
    assert await client.allocated(GPU) == []  # the next call goes through


async def test_pod_devices_uses_get(kubelet, client):
    kubelet.pods = [gpu_pod("train-1", 0, 1), gpu_pod("train-2", 2, 3)]
    assert await client.pod_devices("default", "train-2", GPU) == [UUIDS[2], UUIDS[3]]
    assert kubelet.calls == ["Get"]


async def test_pod_devices_unknown_pod(kubelet, client):
    with pytest.raises(PodNotFoundError, match="default/ghost"):
        await client.pod_devices("default", "ghost", GPU)


@pytest.mark.parametrize("get_mode", [GET_ABSENT, GET_GATED])
async def test_pod_devices_falls_back_to_list(kubelet, client, get_mode):
    await kubelet.stop()
    kubelet.get = get_mode
    await kubelet.start()
    kubelet.pods = [gpu_pod("train-1", 0, 1), gpu_pod("train-2", 5, 6)]

    assert await client.pod_devices("default", "train-2", GPU) == [UUIDS[5], UUIDS[6]]
    assert await client.pod_devices("default", "train-1", GPU) == [UUIDS[0], UUIDS[1]]
    with pytest.raises(PodNotFoundError):
        await client.pod_devices("default", "ghost", GPU)
    # Get is tried once, then List is used directly. A kubelet without the method never
    # sees the call; one with the gate off answers it with an error.
    assert kubelet.calls == (["Get"] if get_mode == GET_GATED else []) + ["List"] * 3


async def test_get_is_tried_again_after_kubelet_restart(kubelet, client):
    kubelet.get = GET_GATED
    kubelet.pods = [gpu_pod("p", 0)]
    assert await client.pod_devices("default", "p", GPU) == [UUIDS[0]]
    assert kubelet.calls == ["Get", "List"]

    await kubelet.stop()
    with pytest.raises(PodResourcesError):
        await client.allocatable(GPU)
    kubelet.get = "served"  # restarted with the KubeletPodResourcesGet gate on
    await kubelet.start()
    kubelet.calls.clear()
    assert await client.pod_devices("default", "p", GPU) == [UUIDS[0]]
    assert kubelet.calls == ["Get"]


async def test_get_is_tried_again_after_recheck_interval(kubelet):
    kubelet.get = GET_GATED
    kubelet.pods = [gpu_pod("p", 3)]
    async with PodResourcesClient(kubelet.socket_path, get_recheck_s=0) as client:
        assert await client.pod_devices("default", "p", GPU) == [UUIDS[3]]
        kubelet.get = "served"  # gate turned on without the connection dropping
        assert await client.pod_devices("default", "p", GPU) == [UUIDS[3]]
    assert kubelet.calls == ["Get", "List", "Get"]


async def test_timeout_must_be_positive():
    with pytest.raises(ValueError):
        PodResourcesClient("/nonexistent.sock", timeout=0)
