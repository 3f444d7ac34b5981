"""A stand-in for the pynvml module, answering from a recorded node (tests/fixtures/nvml/*.json).

It is passed where reporter.nvml_discovery would use the real module, and nothing else is
replaced. Constants and error classes are the real nvidia-ml-py ones (importing pynvml needs no
driver), PCI answers are real ``nvmlPciInfo_t`` structures, and the fake keeps the real
library's manners: calls before nvmlInit fail Uninitialized, a GPU without NVLink answers Not
Supported for its links, a link number past the GPU's last answers Invalid Argument, and an
argument ctypes could not pass (such as the bindings' tuple-valued NVML_P2P_CAPS_INDEX_READ)
raises ctypes.ArgumentError.

Recording format: ``devices`` (uuid, busId, name (the product; a recording without it answers
Not Supported, as no real driver does), numaNodeId or null for Not Supported,
sysfsNumaNode, pcieRoot, nvlinks as runs of ``{remoteType, remoteBusId, count}``),
``commonAncestor`` and ``p2pRead`` as one row of names per GPU (NVML level names without
NVML_TOPOLOGY_, P2P status names without NVML_P2P_STATUS_), ``topo``: the `nvidia-smi topo -m`
fixture the recording must agree with.

A device's ``mig``, where the GPU can do MIG (without it, MIG calls answer Not Supported, as on
GPUs without MIG): ``mode`` (1 enabled, 0 disabled), ``maxDevices``, ``profiles`` (the GPU
instance profiles it supports, NVML_GPU_INSTANCE_PROFILE_ names without the prefix, each with its
``sliceCount``, ``instanceCount`` and ``memorySizeMB``), and ``devices``, its MIG devices: index
(a gap is Not Found, as NVML answers), uuid, gpuInstance and computeInstance ids, their slice
counts and memorySizeMB.
"""

from __future__ import annotations

import ctypes
import json
import os
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

with warnings.catch_warnings():
    warnings.simplefilter("ignore", FutureWarning)
    import pynvml as real

FIXTURES = Path(__file__).parent / "fixtures" / "nvml"
TOPO_FIXTURES = Path(__file__).parent / "fixtures" / "topo"
RECORDINGS = ("seed-5090d", "hgx-h100", "pix-pxb-8gpu", "dgx-a100-mig")

_P2P = {
    "OK": real.NVML_P2P_STATUS_OK,
    "CHIPSET_NOT_SUPPORTED": real.NVML_P2P_STATUS_CHIPSET_NOT_SUPPORTED,
    "GPU_NOT_SUPPORTED": real.NVML_P2P_STATUS_GPU_NOT_SUPPORTED,
    "IOH_TOPOLOGY_NOT_SUPPORTED": real.NVML_P2P_STATUS_IOH_TOPOLOGY_NOT_SUPPORTED,
    "DISABLED_BY_REGKEY": real.NVML_P2P_STATUS_DISABLED_BY_REGKEY,
    "NOT_SUPPORTED": real.NVML_P2P_STATUS_NOT_SUPPORTED,
    "UNKNOWN": real.NVML_P2P_STATUS_UNKNOWN,
}
_LEVEL = {
    "INTERNAL": real.NVML_TOPOLOGY_INTERNAL,
    "SINGLE": real.NVML_TOPOLOGY_SINGLE,
    "MULTIPLE": real.NVML_TOPOLOGY_MULTIPLE,
    "HOSTBRIDGE": real.NVML_TOPOLOGY_HOSTBRIDGE,
    "NODE": real.NVML_TOPOLOGY_NODE,
    "SYSTEM": real.NVML_TOPOLOGY_SYSTEM,
}
_REMOTE = {"GPU": real.NVML_NVLINK_DEVICE_TYPE_GPU, "SWITCH": real.NVML_NVLINK_DEVICE_TYPE_SWITCH}


def load_recording(name: str) -> dict[str, Any]:
    return json.loads((FIXTURES / f"{name}.json").read_text())


def topo_text(recording: dict[str, Any]) -> str:
    return (TOPO_FIXTURES / recording["topo"]).read_text()


@dataclass(frozen=True)
class FakeHandle:
    index: int


@dataclass(frozen=True)
class FakeMigHandle:
    gpu: int
    index: int


_PROFILES = {name[len("NVML_GPU_INSTANCE_PROFILE_"):]: getattr(real, name) for name in dir(real)
             if name.startswith("NVML_GPU_INSTANCE_PROFILE_") and name != "NVML_GPU_INSTANCE_PROFILE_COUNT"}


def _pci_info(bus_id: str) -> real.nvmlPciInfo_t:
    info = real.nvmlPciInfo_t()
    domain, bus, rest = bus_id.split(":")
    info.busId = bus_id.encode()
    info.busIdLegacy = f"{int(domain, 16):04X}:{bus}:{rest}".encode()
    info.domain, info.bus, info.device = int(domain, 16), int(bus, 16), int(rest.split(".")[0], 16)
    return info


class FakeNvml:
    """One recorded node behind pynvml's names. ``fail`` makes chosen calls raise NVMLError."""

    def __init__(self, recording: dict[str, Any]) -> None:
        for name in dir(real):
            if name.startswith(("NVML_", "NVMLError")):
                setattr(self, name, getattr(real, name))
        self.recording = recording
        self.devices = recording["devices"]
        if "maxLinks" in recording:
            self.NVML_NVLINK_MAX_LINKS = recording["maxLinks"]
        self.initialised = 0
        self.calls: list[str] = []
        self._failures: dict[tuple[str, tuple], int] = {}
        self.init_error: int | None = None
        self._links = [self._expand_links(d.get("nvlinks", [])) for d in self.devices]

    # --- test controls

    def fail(self, call: str, *args: int, code: int = real.NVML_ERROR_UNKNOWN) -> "FakeNvml":
        """Make ``call`` raise NVMLError(code): for these device indices (and link), or always."""
        self._failures[(call, tuple(args))] = code
        return self

    def count(self, call: str) -> int:
        return self.calls.count(call)

    # --- helpers

    @staticmethod
    def _expand_links(runs: list[dict[str, Any]]) -> list[tuple[int, str]]:
        expanded: list[tuple[int, str]] = []
        for run in runs:
            expanded.extend([(_REMOTE[run["remoteType"]], run["remoteBusId"])] * run.get("count", 1))
        return expanded

    def _enter(self, call: str, *key: Any) -> None:
        self.calls.append(call)
        if call not in ("nvmlInit", "nvmlShutdown") and self.initialised == 0:
            raise real.NVMLError(real.NVML_ERROR_UNINITIALIZED)
        for candidate in (key, ()):
            code = self._failures.get((call, tuple(candidate)))
            if code is not None:
                raise real.NVMLError(code)

    def _device(self, handle: Any) -> int:
        if not isinstance(handle, FakeHandle) or not 0 <= handle.index < len(self.devices):
            raise real.NVMLError(real.NVML_ERROR_INVALID_ARGUMENT)
        return handle.index

    @staticmethod
    def _cell(rows: list[str], i: int, j: int) -> str:
        return rows[i].split()[j]

    # --- the pynvml surface the reporter uses

    def nvmlInit(self) -> None:
        self.calls.append("nvmlInit")
        if self.init_error is not None:
            raise real.NVMLError(self.init_error)
        self.initialised += 1

    def nvmlShutdown(self) -> None:
        self._enter("nvmlShutdown")
        if self.initialised == 0:
            raise real.NVMLError(real.NVML_ERROR_UNINITIALIZED)
        self.initialised -= 1

    def nvmlSystemGetDriverVersion(self) -> str:
        self._enter("nvmlSystemGetDriverVersion")
        return self.recording.get("driverVersion", "")

    def nvmlDeviceGetCount(self) -> int:
        self._enter("nvmlDeviceGetCount")
        return len(self.devices)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> FakeHandle:
        self._enter("nvmlDeviceGetHandleByIndex", index)
        if not 0 <= index < len(self.devices):
            raise real.NVMLError(real.NVML_ERROR_INVALID_ARGUMENT)
        return FakeHandle(index)

    def nvmlDeviceGetUUID(self, handle: FakeHandle | FakeMigHandle) -> str:
        if isinstance(handle, FakeMigHandle):
            self._enter("nvmlDeviceGetUUID", handle.gpu, handle.index)
            return self._mig_device(handle)["uuid"]
        self._enter("nvmlDeviceGetUUID", getattr(handle, "index", None))
        return self.devices[self._device(handle)]["uuid"]

    # --- MIG

    def _mig(self, handle: FakeHandle) -> dict[str, Any]:
        mig = self.devices[self._device(handle)].get("mig")
        if mig is None:
            raise real.NVMLError(real.NVML_ERROR_NOT_SUPPORTED)
        return mig

    def _mig_device(self, handle: FakeMigHandle) -> dict[str, Any]:
        for device in self._mig(FakeHandle(handle.gpu)).get("devices", []):
            if device["index"] == handle.index:
                return device
        raise real.NVMLError(real.NVML_ERROR_INVALID_ARGUMENT)  # a handle NVML never gave

    def nvmlDeviceGetMigMode(self, handle: FakeHandle) -> list[int]:
        self._enter("nvmlDeviceGetMigMode", getattr(handle, "index", None))
        mode = self._mig(handle)["mode"]
        return [mode, mode]

    def nvmlDeviceGetMaxMigDeviceCount(self, handle: FakeHandle) -> int:
        self._enter("nvmlDeviceGetMaxMigDeviceCount", getattr(handle, "index", None))
        return self._mig(handle)["maxDevices"]

    def nvmlDeviceGetGpuInstanceProfileInfo(self, handle: FakeHandle, profile: int,
                                            version: int = 2) -> real.c_nvmlGpuInstanceProfileInfo_v2_t:
        self._enter("nvmlDeviceGetGpuInstanceProfileInfo", getattr(handle, "index", None))
        names = [name for name, value in _PROFILES.items() if value == profile]
        if not names:
            raise real.NVMLError(real.NVML_ERROR_INVALID_ARGUMENT)
        recorded = self._mig(handle)["profiles"].get(names[0])
        if recorded is None:
            raise real.NVMLError(real.NVML_ERROR_NOT_SUPPORTED)
        info = real.c_nvmlGpuInstanceProfileInfo_v2_t()
        info.sliceCount, info.instanceCount = recorded["sliceCount"], recorded["instanceCount"]
        info.memorySizeMB = recorded["memorySizeMB"]
        return info

    def nvmlDeviceGetMigDeviceHandleByIndex(self, handle: FakeHandle, index: int) -> FakeMigHandle:
        self._enter("nvmlDeviceGetMigDeviceHandleByIndex", getattr(handle, "index", None), index)
        mig = self._mig(handle)
        if not 0 <= index < mig["maxDevices"]:
            raise real.NVMLError(real.NVML_ERROR_INVALID_ARGUMENT)
        if all(device["index"] != index for device in mig.get("devices", [])):
            raise real.NVMLError(real.NVML_ERROR_NOT_FOUND)
        return FakeMigHandle(self._device(handle), index)

    def nvmlDeviceGetAttributes(self, handle: FakeMigHandle) -> real.c_nvmlDeviceAttributes:
        self._enter("nvmlDeviceGetAttributes", getattr(handle, "gpu", None), getattr(handle, "index", None))
        if not isinstance(handle, FakeMigHandle):
            raise real.NVMLError(real.NVML_ERROR_NOT_SUPPORTED)  # only recorded for MIG devices
        device = self._mig_device(handle)
        attributes = real.c_nvmlDeviceAttributes()
        attributes.gpuInstanceSliceCount = device["gpuInstanceSlices"]
        attributes.computeInstanceSliceCount = device["computeInstanceSlices"]
        attributes.memorySizeMB = device["memorySizeMB"]
        return attributes

    def nvmlDeviceGetGpuInstanceId(self, handle: FakeMigHandle) -> int:
        self._enter("nvmlDeviceGetGpuInstanceId", getattr(handle, "gpu", None), getattr(handle, "index", None))
        if not isinstance(handle, FakeMigHandle):
            raise real.NVMLError(real.NVML_ERROR_INVALID_ARGUMENT)  # not a MIG device handle
        return self._mig_device(handle)["gpuInstance"]

    def nvmlDeviceGetComputeInstanceId(self, handle: FakeMigHandle) -> int:
        self._enter("nvmlDeviceGetComputeInstanceId", getattr(handle, "gpu", None), getattr(handle, "index", None))
        if not isinstance(handle, FakeMigHandle):
            raise real.NVMLError(real.NVML_ERROR_INVALID_ARGUMENT)
        return self._mig_device(handle)["computeInstance"]

    def nvmlDeviceGetName(self, handle: FakeHandle) -> str:
        self._enter("nvmlDeviceGetName", getattr(handle, "index", None))
        name = self.devices[self._device(handle)].get("name")
        if name is None:
            raise real.NVMLError(real.NVML_ERROR_NOT_SUPPORTED)
        return name

    def nvmlDeviceGetPciInfo(self, handle: FakeHandle) -> real.nvmlPciInfo_t:
        self._enter("nvmlDeviceGetPciInfo", getattr(handle, "index", None))
        return _pci_info(self.devices[self._device(handle)]["busId"])

    def nvmlDeviceGetNumaNodeId(self, handle: FakeHandle) -> int:
        self._enter("nvmlDeviceGetNumaNodeId", getattr(handle, "index", None))
        value = self.devices[self._device(handle)].get("numaNodeId")
        if value is None:
            raise real.NVMLError(real.NVML_ERROR_NOT_SUPPORTED)
        return value

    def nvmlDeviceGetTopologyCommonAncestor(self, a: FakeHandle, b: FakeHandle) -> int:
        self._enter("nvmlDeviceGetTopologyCommonAncestor", getattr(a, "index", None), getattr(b, "index", None))
        i, j = self._device(a), self._device(b)
        if i == j:
            raise real.NVMLError(real.NVML_ERROR_INVALID_ARGUMENT)
        return _LEVEL[self._cell(self.recording["commonAncestor"], i, j)]

    def nvmlDeviceGetP2PStatus(self, a: FakeHandle, b: FakeHandle, index: Any) -> int:
        if not isinstance(index, int):
            # what ctypes says when handed pynvml's tuple-valued NVML_P2P_CAPS_INDEX_READ
            raise ctypes.ArgumentError("argument 3: TypeError: Don't know how to convert parameter 3")
        self._enter("nvmlDeviceGetP2PStatus", getattr(a, "index", None), getattr(b, "index", None))
        i, j = self._device(a), self._device(b)
        if index != real.NVML_P2P_CAPS_INDEX_WRITE and index != 0:
            raise real.NVMLError(real.NVML_ERROR_NOT_SUPPORTED)
        if i == j:
            raise real.NVMLError(real.NVML_ERROR_INVALID_ARGUMENT)
        return _P2P[self._cell(self.recording["p2pRead"], i, j)]

    def _link(self, handle: FakeHandle, link: int) -> tuple[int, str]:
        links = self._links[self._device(handle)]
        if not links:
            raise real.NVMLError(real.NVML_ERROR_NOT_SUPPORTED)
        if not 0 <= link < len(links):
            raise real.NVMLError(real.NVML_ERROR_INVALID_ARGUMENT)
        return links[link]

    def nvmlDeviceGetNvLinkState(self, handle: FakeHandle, link: int) -> int:
        self._enter("nvmlDeviceGetNvLinkState", getattr(handle, "index", None), link)
        self._link(handle, link)
        return real.NVML_FEATURE_ENABLED

    def nvmlDeviceGetNvLinkRemoteDeviceType(self, handle: FakeHandle, link: int) -> int:
        self._enter("nvmlDeviceGetNvLinkRemoteDeviceType", getattr(handle, "index", None), link)
        return self._link(handle, link)[0]

    def nvmlDeviceGetNvLinkRemotePciInfo(self, handle: FakeHandle, link: int) -> real.nvmlPciInfo_t:
        self._enter("nvmlDeviceGetNvLinkRemotePciInfo", getattr(handle, "index", None), link)
        return _pci_info(self._link(handle, link)[1])


def write_sysfs(root: Path, recording: dict[str, Any]) -> Path:
    """A sysfs tree for the recorded devices: /sys/bus/pci/devices/<bdf> linked into
    /sys/devices/<pcieRoot>/..., with numa_node where the recording has one."""
    devices_dir = root / "bus" / "pci" / "devices"
    devices_dir.mkdir(parents=True, exist_ok=True)
    for device in recording["devices"]:
        domain, rest = device["busId"].split(":", 1)
        bdf = f"{int(domain, 16):04x}:{rest.lower()}"
        pcie_root = device.get("pcieRoot") or "pci0000:00"
        real_dir = root / "devices" / pcie_root / "root-port" / bdf  # the bridge name is irrelevant
        real_dir.mkdir(parents=True, exist_ok=True)
        if device.get("sysfsNumaNode") is not None:
            (real_dir / "numa_node").write_text(f"{device['sysfsNumaNode']}\n")
        link = devices_dir / bdf
        if not link.exists():
            os.symlink(os.path.relpath(real_dir, devices_dir), link)
    return root
