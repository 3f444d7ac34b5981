"""A kubelet stand-in: a real grpc.aio PodResourcesLister server on a Unix socket.

It answers the way the kubelet does (pkg/kubelet/apis/podresources/server_v1.go and
containerDevicesFromResourceDeviceInstances): one ContainerDevices per device and NUMA node,
no topology for devices without NUMA affinity, plain errors (code UNKNOWN) for a Get on a
pod it does not know or when the KubeletPodResourcesGet gate is off, and no Get method at all
on kubelets older than 1.27 (code UNIMPLEMENTED). Tests change ``allocatable`` and ``pods``
between calls and can stop and restart the server on the same socket path.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import tempfile
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field

import grpc
import grpc.aio

from gpupair.reporter.podresources import api_pb2

SERVICE = "v1.PodResourcesLister"
GET_SERVED, GET_GATED, GET_ABSENT = "served", "gated", "absent"


@dataclass
class FakeDevice:
    id: str
    numa: tuple[int, ...] = ()


@dataclass
class FakeContainer:
    name: str
    devices: dict[str, list[FakeDevice]] = field(default_factory=dict)  # resource -> devices


@dataclass
class FakePod:
    namespace: str
    name: str
    containers: list[FakeContainer] = field(default_factory=list)


def container_devices(by_resource: dict[str, list[FakeDevice]]) -> list[api_pb2.ContainerDevices]:
    entries = []
    for resource_name, devices in by_resource.items():
        for device in devices:
            if not device.numa:
                entries.append(
                    api_pb2.ContainerDevices(resource_name=resource_name, device_ids=[device.id])
                )
            for numa in device.numa:
                entries.append(
                    api_pb2.ContainerDevices(
                        resource_name=resource_name,
                        device_ids=[device.id],
                        topology=api_pb2.TopologyInfo(nodes=[api_pb2.NUMANode(ID=numa)]),
                    )
                )
    return entries


def pod_resources(pod: FakePod) -> api_pb2.PodResources:
    return api_pb2.PodResources(
        name=pod.name,
        namespace=pod.namespace,
        containers=[
            api_pb2.ContainerResources(
                name=container.name,
                devices=container_devices(container.devices),
                cpu_ids=[2, 3],
            )
            for container in pod.containers
        ],
    )


class FakeKubelet:
    def __init__(self, socket_path: str, get: str = GET_SERVED) -> None:
        self.socket_path = socket_path
        self.get = get
        self.allocatable: dict[str, list[FakeDevice]] = {}
        self.pods: list[FakePod] = []
        self.calls: list[str] = []
        self.fail_next: tuple[grpc.StatusCode, str] | None = None
        self._server: grpc.aio.Server | None = None

    async def start(self) -> None:
        if self._server is not None:
            raise RuntimeError("already running")
        if os.path.exists(self.socket_path):
            os.unlink(self.socket_path)  # the kubelet removes a stale socket before listening
        handlers = {
            "List": self._unary(self._list, api_pb2.ListPodResourcesRequest),
            "GetAllocatableResources": self._unary(
                self._allocatable, api_pb2.AllocatableResourcesRequest
            ),
        }
        if self.get != GET_ABSENT:
            handlers["Get"] = self._unary(self._get, api_pb2.GetPodResourcesRequest)
        server = grpc.aio.server()
        server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE, handlers),))
        server.add_insecure_port(f"unix://{self.socket_path}")
        await server.start()
        self._server = server

    async def stop(self, remove_socket: bool = True) -> None:
        server, self._server = self._server, None
        if server is not None:
            await server.stop(grace=None)
        if remove_socket and os.path.exists(self.socket_path):
            os.unlink(self.socket_path)
        if not remove_socket and not os.path.exists(self.socket_path):
            # grpc unlinks its socket on stop; a kubelet that crashed leaves one behind that
            # nobody listens on. Binding without listening makes such a file.
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as stale:
                stale.bind(self.socket_path)

    async def restart(self) -> None:
        await self.stop()
        await self.start()

    @staticmethod
    def _unary(behaviour, request_type):
        return grpc.unary_unary_rpc_method_handler(
            behaviour,
            request_deserializer=request_type.FromString,
            response_serializer=lambda message: message.SerializeToString(),
        )

    async def _fail_if_asked(self, context: grpc.aio.ServicerContext) -> None:
        if self.fail_next is not None:
            (code, message), self.fail_next = self.fail_next, None
            await context.abort(code, message)

    async def _list(self, request, context):
        self.calls.append("List")
        await self._fail_if_asked(context)
        return api_pb2.ListPodResourcesResponse(pod_resources=[pod_resources(p) for p in self.pods])

    async def _allocatable(self, request, context):
        self.calls.append("GetAllocatableResources")
        await self._fail_if_asked(context)
        return api_pb2.AllocatableResourcesResponse(
            devices=container_devices(self.allocatable),
            cpu_ids=list(range(8)),
            memory=[api_pb2.ContainerMemory(memory_type="memory", size=64 << 30)],
        )

    async def _get(self, request, context):
        self.calls.append("Get")
        await self._fail_if_asked(context)
        if self.get == GET_GATED:
            await context.abort(grpc.StatusCode.UNKNOWN, "PodResources API Get method disabled")
        for pod in self.pods:
            if pod.namespace == request.pod_namespace and pod.name == request.pod_name:
                return api_pb2.GetPodResourcesResponse(pod_resources=pod_resources(pod))
        await context.abort(
            grpc.StatusCode.UNKNOWN,
            f"pod {request.pod_name} in namespace {request.pod_namespace} not found",
        )


@contextlib.contextmanager
def short_socket_dir(prefix: str = "kubelet-") -> Iterator[str]:
    """A fresh directory for a Unix socket: their paths are limited to 107 bytes, and pytest's
    tmp_path can come close to that."""
    path = tempfile.mkdtemp(prefix=prefix)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@contextlib.asynccontextmanager
async def running_kubelet(allocatable: dict[str, list[FakeDevice]], get: str = GET_SERVED) -> AsyncIterator[FakeKubelet]:
    """A started FakeKubelet offering ``allocatable``, on a socket in a directory of its own."""
    with short_socket_dir() as directory:
        server = FakeKubelet(os.path.join(directory, "kubelet.sock"), get=get)
        server.allocatable = allocatable
        await server.start()
        try:
            yield server
        finally:
            await server.stop()
