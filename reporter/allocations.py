"""Which GPUs the kubelet holds for which pod, read from its PodResources v1 API.

Two parts: pure helpers that turn device-plugin device ids into NodeLayout indices and work
out the free set, and ``PodResourcesClient``, an asyncio gRPC client for the kubelet's
pod-resources Unix socket.

Device ids are whatever the device plugin advertised to the kubelet. The NVIDIA device
plugin advertises GPU UUIDs (``GPU-8a7c...``); other plugins and older setups use NVML
indices (``"0"``, ``"1"``). With time-slicing or MPS each GPU is advertised several times as
``<id>::<replica>``; MIG devices by index are ``<gpu>:<mig>``, by UUID ``MIG-GPU-<uuid>/<gi>/<ci>``
(drivers before R470) or ``MIG-<uuid>``, which names no parent GPU: NVML's MIG devices
(gpupair.topology.mig_slices) map it, and size all three spellings in compute slices.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import grpc
import grpc.aio

from gpupair.kubewire import defaults
from gpupair.topology.layout import NodeLayout, NodeState
from gpupair.topology.mig_slices import MIG_PREFIX, MigDevice, MigDevices
from gpupair.topology.shares import GpuShares, count_shares
from gpupair.reporter.podresources import api_pb2, api_pb2_grpc

log = logging.getLogger("gpupair.reporter.allocations")

DEFAULT_SOCKET = "/var/lib/kubelet/pod-resources/kubelet.sock"
NVIDIA_GPU = defaults.RESOURCE_NAME
# The kubelet's own podresources client allows 16 MiB answers; List on a busy node is large.
MAX_MESSAGE_BYTES = 16 * 1024 * 1024
_REPLICA_SEPARATOR = "::"
# What a kubelet with the KubeletPodResourcesGet gate off answers (a plain error: code UNKNOWN).
_GET_DISABLED = "Get method disabled"


# --- pure helpers -----------------------------------------------------------------------


def strip_replica(device_id: str) -> str:
    """``GPU-abc::3`` -> ``GPU-abc``: the physical device behind a shared replica id."""
    return device_id.split(_REPLICA_SEPARATOR, 1)[0]


def _resolve(device_id: str, layout: NodeLayout, uuids: dict[str, int],
             mig: MigDevices | None) -> tuple[int | None, MigDevice | None]:
    """The layout index a device id names, and the MIG device where NVML knows it."""
    base = strip_replica(device_id.strip())
    upper = base.upper()
    if upper.startswith("MIG-GPU-"):  # pre-R470 MIG id: MIG-GPU-<uuid>/<gi>/<ci>
        parent, _, instances = base[len(MIG_PREFIX):].partition("/")
        index = uuids.get(parent.lower())
        gi, _, ci = instances.partition("/")
        found = (mig.by_instance(index, int(gi), int(ci))
                 if mig and index is not None and gi.isdecimal() and ci.isdecimal() else None)
        return index, found
    if upper.startswith(MIG_PREFIX):  # R470 and newer: MIG-<uuid>, which only NVML places
        found = mig.by_uuid(base) if mig else None
        return (found.gpu, found) if found is not None else (None, None)
    if upper.startswith("GPU-"):
        return uuids.get(base.lower()), None
    gpu, _, mig_index = base.partition(":")  # MIG by index: "<gpu>:<mig>" lives on GPU <gpu>
    if not gpu.isdecimal() or int(gpu) >= layout.size:
        return None, None
    found = mig.by_index(int(gpu), int(mig_index)) if mig and mig_index.isdecimal() else None
    return int(gpu), found


def _resolver(layout: NodeLayout, mig: MigDevices | None) -> Callable[[str], tuple[int | None, MigDevice | None]]:
    uuids = {uuid.lower(): index for uuid, index in layout.by_uuid().items()}
    return lambda device_id: _resolve(device_id, layout, uuids, mig)


def device_indices(ids: Iterable[str], layout: NodeLayout,
                   mig: MigDevices | None = None) -> tuple[list[int], list[str]]:
    """Each device-plugin id's layout index, in order (two replicas of one GPU give its index
    twice), and the ids that match no device, each once in their spelling."""
    resolve = _resolver(layout, mig)
    indices: list[int] = []
    unknown: list[str] = []
    for device_id in ids:
        index, _ = resolve(device_id)
        if index is not None:
            indices.append(index)
        elif device_id not in unknown:
            unknown.append(device_id)
    return indices, unknown


def map_device_ids(ids: Iterable[str], layout: NodeLayout,
                   mig: MigDevices | None = None) -> tuple[set[int], list[str]]:
    """Map device-plugin ids to layout indices; returns (indices, ids that match no device).
    Replicas of one GPU collapse to its index."""
    indices, unknown = device_indices(ids, layout, mig)
    return set(indices), unknown


def share_counts(layout: NodeLayout, allocatable_ids: Iterable[str], allocated_ids: Iterable[str],
                 replicated: bool = False, mig: MigDevices | None = None) -> GpuShares | None:
    """Each GPU's shares offered and held; None where every GPU is offered once.

    One id a share (``<id>::<n>`` replicas, MIG devices NVML does not know), except on a GPU in
    MIG mode whose every device NVML sized: there a device is its compute slices, out of the
    GPU's. A held id counts as offered too: the kubelet drops a device that turned unhealthy from
    what it offers, not from the pod that holds it.
    """
    resolve = _resolver(layout, mig)
    allocated = list(dict.fromkeys(allocated_ids))
    found = {device_id: resolve(device_id) for device_id in dict.fromkeys([*allocatable_ids, *allocated])}
    found = {device_id: hit for device_id, hit in found.items() if hit[0] is not None}
    sized: dict[int, bool] = {}
    for index, device in found.values():
        sized[index] = sized.get(index, True) and device is not None
    whole = {index: mig.slices_of(index) for index, ok in sized.items() if ok and mig and mig.slices_of(index)}

    def shares(device_id: str) -> tuple[int, int]:
        index, device = found[device_id]
        return index, device.slices if index in whole and device is not None else 1

    return count_shares(layout.size, [shares(i) for i in found], [shares(i) for i in allocated if i in found],
                        replicated, whole)


def is_replica(device_id: str) -> bool:
    return _REPLICA_SEPARATOR in device_id


@dataclass(frozen=True)
class FreeDevices:
    """A node's GPUs split by what the kubelet says about them.

    ``free``: allocatable and held by no container. ``allocated``: held by some container
    (a GPU with any replica or MIG slice in use counts as allocated). ``unavailable``: in the
    layout but not allocatable, which the kubelet does for unhealthy devices and for devices
    the plugin never advertised; an allocated GPU that turned unhealthy is in both
    ``allocated`` and ``unavailable``. ``unknown_ids``: ids the layout has no device for.
    """

    layout: NodeLayout
    free: frozenset[int]
    allocated: frozenset[int]
    unavailable: frozenset[int]
    unknown_ids: tuple[str, ...] = ()

    def state(self) -> NodeState:
        return NodeState(self.layout, self.free)


def free_devices(
    layout: NodeLayout, allocatable_ids: Iterable[str], allocated_ids: Iterable[str],
    mig: MigDevices | None = None,
) -> FreeDevices:
    allocatable, unknown = map_device_ids(allocatable_ids, layout, mig)
    allocated, unknown_allocated = map_device_ids(allocated_ids, layout, mig)
    unknown += [device_id for device_id in unknown_allocated if device_id not in unknown]
    return FreeDevices(
        layout=layout,
        free=frozenset(allocatable - allocated),
        allocated=frozenset(allocated),
        unavailable=frozenset(set(range(layout.size)) - allocatable),
        unknown_ids=tuple(unknown),
    )


@dataclass(frozen=True)
class PodDevices:
    """The devices of one resource that the kubelet assigned to one container."""

    namespace: str
    pod: str
    container: str
    resource_name: str
    device_ids: tuple[str, ...]
    numa_nodes: tuple[int, ...] = ()  # as the device plugin reported them, sorted


def _device_ids(devices: Iterable[api_pb2.ContainerDevices], resource_name: str) -> list[str]:
    # The kubelet sends one ContainerDevices per device and NUMA node, so a device with
    # affinity to two NUMA nodes comes twice.
    ids: list[str] = []
    for entry in devices:
        if entry.resource_name != resource_name:
            continue
        ids.extend(device_id for device_id in entry.device_ids if device_id not in ids)
    return ids


def _numa_nodes(
    devices: Iterable[api_pb2.ContainerDevices], resource_name: str
) -> tuple[int, ...]:
    nodes = {
        node.ID
        for entry in devices
        if entry.resource_name == resource_name and entry.HasField("topology")
        for node in entry.topology.nodes
    }
    return tuple(sorted(nodes))


def pod_devices_from(pod: api_pb2.PodResources, resource_name: str) -> list[PodDevices]:
    """One PodDevices per container of ``pod`` that holds devices of ``resource_name``."""
    found = []
    for container in pod.containers:
        ids = _device_ids(container.devices, resource_name)
        if ids:
            found.append(
                PodDevices(
                    namespace=pod.namespace,
                    pod=pod.name,
                    container=container.name,
                    resource_name=resource_name,
                    device_ids=tuple(ids),
                    numa_nodes=_numa_nodes(container.devices, resource_name),
                )
            )
    return found


# --- the client -------------------------------------------------------------------------


class PodResourcesError(Exception):
    """Any failure to get an answer from the kubelet's PodResources API."""


class PodNotFoundError(PodResourcesError):
    """The kubelet does not know the pod (not on this node, or not admitted yet)."""


class PodResourcesClient:
    """Async client for the kubelet PodResources v1 API on a Unix socket.

    The channel is made on first use. When the kubelet restarts it recreates the socket; a
    call that finds the connection gone gets a fresh channel and is tried once more, so the
    caller sees the restart only if the kubelet is still down.
    """

    def __init__(
        self,
        socket_path: str = DEFAULT_SOCKET,
        timeout: float = 5.0,
        get_recheck_s: float = 600.0,
    ) -> None:
        if timeout <= 0:
            raise ValueError(f"timeout must be positive, got {timeout}")
        self.socket_path = os.path.abspath(socket_path)
        self.timeout = timeout
        # How long to use List before asking a kubelet that lacked Get again (it may have been
        # upgraded or had the gate turned on meanwhile without us seeing a reconnect).
        self.get_recheck_s = get_recheck_s
        self._channel: grpc.aio.Channel | None = None
        self._stub: api_pb2_grpc.PodResourcesListerStub | None = None
        self._lock = asyncio.Lock()
        self._get_missing_since: float | None = None  # monotonic time Get was last refused

    async def __aenter__(self) -> "PodResourcesClient":
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    async def close(self) -> None:
        async with self._lock:
            await self._drop()

    async def allocatable(self, resource_name: str = NVIDIA_GPU) -> tuple[str, ...]:
        """Device ids of ``resource_name`` the kubelet may hand out (healthy ones only)."""
        return (await self.allocatable_resources()).get(resource_name, ())

    async def allocatable_resources(self) -> dict[str, tuple[str, ...]]:
        """Every device resource the kubelet may hand out, with its device ids, from one call."""
        request = api_pb2.AllocatableResourcesRequest()
        response = await self._call("GetAllocatableResources", request)
        names = dict.fromkeys(entry.resource_name for entry in response.devices)
        return {name: tuple(_device_ids(response.devices, name)) for name in names}

    async def allocated(self, resource_name: str = NVIDIA_GPU) -> list[PodDevices]:
        """Every container on the node that holds devices of ``resource_name``."""
        return await self.allocated_matching(lambda name: name == resource_name)

    async def allocated_matching(self, wanted: Callable[[str], bool]) -> list[PodDevices]:
        """Every container's devices of each resource ``wanted`` accepts, from one List."""
        response = await self._call("List", api_pb2.ListPodResourcesRequest())
        found: list[PodDevices] = []
        for pod in response.pod_resources:
            names = dict.fromkeys(entry.resource_name for container in pod.containers for entry in container.devices)
            for name in filter(wanted, names):
                found.extend(pod_devices_from(pod, name))
        return found

    async def pod_devices(
        self, namespace: str, name: str, resource_name: str = NVIDIA_GPU
    ) -> list[str]:
        """Device ids of ``resource_name`` held by any container of one pod.

        Uses Get where the kubelet serves it, List on kubelets without it (before 1.27, or
        with the KubeletPodResourcesGet gate off). Raises PodNotFoundError for a pod the
        kubelet does not know.
        """
        if self._should_try_get():
            request = api_pb2.GetPodResourcesRequest(pod_name=name, pod_namespace=namespace)
            try:
                response = await self._call("Get", request, translate=False)
            except grpc.aio.AioRpcError as error:
                if not _get_unsupported(error):
                    raise self._error("Get", error, pod=f"{namespace}/{name}") from None
                log.info(
                    "kubelet does not serve PodResources Get; using List",
                    extra={"detail": error.details()},
                )
                self._get_missing_since = time.monotonic()
            else:
                self._get_missing_since = None
                return flatten_device_ids(pod_devices_from(response.pod_resources, resource_name))
        listing = await self._call("List", api_pb2.ListPodResourcesRequest())
        for pod in listing.pod_resources:
            if pod.namespace == namespace and pod.name == name:
                return flatten_device_ids(pod_devices_from(pod, resource_name))
        raise PodNotFoundError(
            f"pod {namespace}/{name} is not known to the kubelet at {self.socket_path}"
        )

    def _should_try_get(self) -> bool:
        if self._get_missing_since is None:
            return True
        return time.monotonic() - self._get_missing_since >= self.get_recheck_s

    async def _call(self, method: str, request: object, translate: bool = True):
        """One unary call, retried once on a fresh channel when the connection is gone."""
        for attempt in (1, 2):
            stub, channel = await self._connect()
            try:
                return await getattr(stub, method)(request, timeout=self.timeout)
            except grpc.aio.AioRpcError as error:
                if error.code() == grpc.StatusCode.UNAVAILABLE and attempt == 1:
                    log.info(
                        "kubelet pod-resources connection lost; reconnecting",
                        extra={"socket": self.socket_path},
                    )
                    async with self._lock:
                        if self._channel is channel:
                            await self._drop()
                    continue
                if not translate:
                    raise
                raise self._error(method, error) from None
        raise AssertionError("unreachable")

    async def _connect(self) -> tuple[api_pb2_grpc.PodResourcesListerStub, grpc.aio.Channel]:
        async with self._lock:
            if self._channel is None:
                self._channel = grpc.aio.insecure_channel(
                    f"unix://{self.socket_path}",
                    options=[
                        ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
                        # The kubelet is local: try again soon rather than after grpc's 1-120 s.
                        ("grpc.initial_reconnect_backoff_ms", 100),
                        ("grpc.max_reconnect_backoff_ms", 1000),
                        # A fresh channel must dial afresh; from grpc's shared subchannel pool
                        # it would inherit the old one's failure and backoff.
                        ("grpc.use_local_subchannel_pool", 1),
                    ],
                )
                self._stub = api_pb2_grpc.PodResourcesListerStub(self._channel)
                self._get_missing_since = None  # a restarted kubelet may be a newer one
            assert self._stub is not None
            return self._stub, self._channel

    async def _drop(self) -> None:
        channel, self._channel, self._stub = self._channel, None, None
        if channel is not None:
            await channel.close()

    def _error(self, method: str, error: grpc.aio.AioRpcError, pod: str = "") -> PodResourcesError:
        code, details = error.code(), error.details() or ""
        where = f"kubelet pod-resources socket {self.socket_path}"
        if code == grpc.StatusCode.UNAVAILABLE:
            if not os.path.exists(self.socket_path):
                return PodResourcesError(
                    f"{where} does not exist: is the kubelet running and is its pod-resources "
                    "directory mounted?"
                )
            if "permission denied" in details.lower():
                return PodResourcesError(
                    f"{where}: permission denied; the reporter needs read-write access to it"
                )
            return PodResourcesError(f"{where} does not answer ({details})")
        if code == grpc.StatusCode.DEADLINE_EXCEEDED:
            return PodResourcesError(f"{method} on {where} took longer than {self.timeout}s")
        if code == grpc.StatusCode.RESOURCE_EXHAUSTED:
            return PodResourcesError(
                f"{method} on {where} was rate-limited by the kubelet ({details})"
            )
        if pod and code == grpc.StatusCode.UNKNOWN and "not found" in details:
            return PodNotFoundError(f"pod {pod} is not known to the kubelet at {self.socket_path}")
        return PodResourcesError(f"{method} on {where} failed: {code.name}: {details}")


def _get_unsupported(error: grpc.aio.AioRpcError) -> bool:
    if error.code() == grpc.StatusCode.UNIMPLEMENTED:
        return True
    return error.code() == grpc.StatusCode.UNKNOWN and _GET_DISABLED in (error.details() or "")


def flatten_device_ids(found: Iterable[PodDevices]) -> list[str]:
    """Every device id held by ``found``, once each, in first-seen order."""
    ids: list[str] = []
    for entry in found:
        ids.extend(device_id for device_id in entry.device_ids if device_id not in ids)
    return ids
