"""The node's GPU layout read from NVML: the one module in gpupair that touches pynvml.

Everything NVML says goes through ``discover(nvml)``; tests pass a stand-in for the pynvml
module object and nothing else is patched. Every NVML call is guarded: a failing call leaves
the fact it would have given unknown (an empty UUID or PCI id, NUMA -1, P2P None, a pair's
link ``SYS``), is recorded in ``DiscoveryResult.errors`` and logged, and discovery goes on.
An unknown link is reported as ``SYS`` because it is the one reading that can never make a
bad pair look good. Only a failed ``nvmlInit`` or device count stops discovery
(``NvmlUnavailable``): without them there is no layout at all.

Where the answers come from:
- NUMA node: ``nvmlDeviceGetNumaNodeId`` (drivers that lack it answer Not Supported or
  Function Not Found), else the PCI device's ``numa_node`` in sysfs, which spells the domain
  with 4 digits where NVML uses 8; -1 means no affinity.
- Pair class: ``nvmlDeviceGetTopologyCommonAncestor`` mapped by ``links.from_nvml_level``.
- NVLinks: each active link's far end; a link to another GPU counts for that pair, a link to
  an NVSwitch counts for every pair of switch-attached GPUs as ``min`` of their switch links
  (so 18 links per H100 into the switches read ``NV18``, as nvidia-smi prints them).
- P2P: ``nvmlDeviceGetP2PStatus`` with the READ capability, for each ordered pair.
- Product: ``nvmlDeviceGetName`` ("NVIDIA H200"), the node's when every GPU gives the same name
  (a node of mixed products, or with a GPU that gives none, has none: GFD's label would be
  whichever it met first); Not Supported is no error, the extender then reads GFD's label.
- MIG devices, on a GPU whose ``nvmlDeviceGetMigMode`` is enabled (GPUs without MIG answer Not
  Supported): each ``nvmlDeviceGetMigDeviceHandleByIndex`` below ``nvmlDeviceGetMaxMigDeviceCount``
  (Not Found where no device has that index), its UUID, GPU and compute instance ids and, from
  ``nvmlDeviceGetAttributes``, its compute slices; the GPU's slices in all are the largest
  ``sliceCount`` among the GPU instance profiles it supports (7 on an A100, 4 on an A30). They
  place the kubelet's ``MIG-<uuid>`` ids and size MIG shares (gpupair.topology.mig_slices).
"""

from __future__ import annotations

import logging
import os
import warnings
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

from gpupair.topology import links
from gpupair.topology.nics import NicLayout
from gpupair.topology.layout import NO_NUMA, Device, NodeLayout, normalize_pci, sysfs_pci
from gpupair.topology.mig_slices import MigDevice, MigDevices

log = logging.getLogger("gpupair.reporter.nvml_discovery")

# nvidia-ml-py spells NVML_P2P_CAPS_INDEX_READ as "0," (a tuple), which ctypes cannot pass;
# the value in nvml.h is 0.
P2P_CAPS_INDEX_READ = 0
P2P_STATUS_OK = 0  # NVML_P2P_STATUS_OK
P2P_STATUS_UNKNOWN = 6  # NVML_P2P_STATUS_UNKNOWN
FEATURE_ENABLED = 1  # NVML_FEATURE_ENABLED: an NVLink that is up
REMOTE_SWITCH = 2  # NVML_NVLINK_DEVICE_TYPE_SWITCH
DEFAULT_MAX_LINKS = 18  # NVML_NVLINK_MAX_LINKS in older bindings

# NVML return codes that mean "this query does not apply here", not "something is wrong".
ERROR_INVALID_ARGUMENT = 2
ERROR_NOT_SUPPORTED = 3
ERROR_NOT_FOUND = 6
ERROR_FUNCTION_NOT_FOUND = 13
_NOT_APPLICABLE = frozenset({ERROR_NOT_SUPPORTED, ERROR_FUNCTION_NOT_FOUND})
# nvmlDeviceGetNvLinkState: Invalid Argument for a link number the GPU does not have,
# Not Supported for a GPU without NVLink.
_NO_SUCH_LINK = frozenset({ERROR_INVALID_ARGUMENT, ERROR_NOT_SUPPORTED, ERROR_FUNCTION_NOT_FOUND})
# nvmlDeviceGetGpuInstanceProfileInfo: a profile the GPU does not have, or a driver without the call
_NO_SUCH_PROFILE = frozenset({ERROR_INVALID_ARGUMENT, ERROR_NOT_SUPPORTED, ERROR_FUNCTION_NOT_FOUND})

DEFAULT_SYSFS = "/sys"
MIG_ENABLED = 1  # NVML_DEVICE_MIG_ENABLE
# NVML_GPU_INSTANCE_PROFILE_<n>_SLICE as nvml.h numbers them, the largest first: the first a GPU
# supports gives its compute slices in all.
WHOLE_GPU_PROFILES = (("8_SLICE", 0x5), ("7_SLICE", 0x4), ("6_SLICE", 0x6), ("4_SLICE", 0x3),
                      ("3_SLICE", 0x2), ("2_SLICE", 0x1), ("1_SLICE", 0x0))


class NvmlUnavailable(RuntimeError):
    """NVML could not be initialised or could not count devices: there is no layout."""


@dataclass(frozen=True)
class NvmlFailure:
    """One NVML call that failed and what it left unknown."""

    call: str
    target: str  # "GPU3", "GPU0-GPU5", "GPU2 link 7"
    error: str
    code: int | None = None


@dataclass(frozen=True)
class DiscoveryResult:
    layout: NodeLayout
    errors: tuple[NvmlFailure, ...] = ()
    unknown_links: frozenset[tuple[int, int]] = frozenset()  # (i, j) with i < j, shown as SYS
    lost: frozenset[int] = frozenset()  # devices NVML could not open at all
    driver_version: str = ""
    nics: NicLayout | None = None  # RDMA NICs and GPU x NIC links (sysfs or a topo -m file)
    product: str = ""  # the GPUs' product name as NVML gives it; "" when unknown or mixed
    mig: MigDevices = MigDevices()  # the MIG devices of GPUs in MIG mode

    @property
    def complete(self) -> bool:
        return not self.errors


def load_pynvml() -> ModuleType:
    """Import the real bindings (nvidia-ml-py's ``pynvml``)."""
    with warnings.catch_warnings():
        # The deprecated "pynvml" wheel redirects to nvidia-ml-py and warns on import.
        warnings.simplefilter("ignore", FutureWarning)
        import pynvml
    return pynvml


def read_sysfs_numa(bus_id: str, sysfs_root: str = DEFAULT_SYSFS) -> int | None:
    """The PCI device's numa_node from sysfs, or None when the file is not there or unreadable."""
    path = os.path.join(sysfs_root, "bus", "pci", "devices", sysfs_pci(bus_id), "numa_node")
    try:
        with open(path, encoding="ascii") as handle:
            return int(handle.read().strip())
    except (OSError, ValueError):
        return None


def read_sysfs_pcie_root(bus_id: str, sysfs_root: str = DEFAULT_SYSFS) -> str:
    """The PCI root complex a device hangs off ("pci0000:20"), as DRA's pcieRoot; "" if unknown.

    /sys/bus/pci/devices/<bdf> links into /sys/devices/pci<domain>:<bus>/...; the first
    path part that starts with "pci" names the root.
    """
    path = os.path.join(sysfs_root, "bus", "pci", "devices", sysfs_pci(bus_id))
    try:
        target = os.path.realpath(path, strict=True)
    except OSError:
        return ""
    for part in target.split(os.sep):
        if part.startswith("pci") and ":" in part:
            return part
    return ""


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


@dataclass
class _Session:
    nvml: Any
    errors: list[NvmlFailure] = field(default_factory=list)

    def code_of(self, error: Exception) -> int | None:
        value = getattr(error, "value", None)
        return value if isinstance(value, int) else None

    def call(
        self,
        name: str,
        target: str,
        *args: Any,
        quiet: frozenset[int] = frozenset(),
    ) -> tuple[Any, Exception | None]:
        """Run one NVML call; failures not in ``quiet`` are recorded. Returns (value, error)."""
        try:
            return getattr(self.nvml, name)(*args), None
        except Exception as error:  # noqa: BLE001 - NVMLError, ctypes errors, missing symbols
            code = self.code_of(error)
            if code not in quiet:
                self.fail(name, target, error)
            return None, error

    def fail(self, name: str, target: str, error: Exception | str) -> None:
        code = self.code_of(error) if isinstance(error, Exception) else None
        text = str(error) or type(error).__name__
        self.errors.append(NvmlFailure(call=name, target=target, error=text, code=code))
        log.warning("NVML call failed", extra={"call": name, "target": target, "error": text, "code": code})


def discover(nvml: Any = None, sysfs_root: str = DEFAULT_SYSFS) -> DiscoveryResult:
    """Read the node's GPU layout from NVML (``nvml`` is the pynvml module or a stand-in)."""
    nvml = nvml if nvml is not None else load_pynvml()
    try:
        nvml.nvmlInit()
    except Exception as error:  # noqa: BLE001
        raise NvmlUnavailable(f"NVML init failed: {error or type(error).__name__}") from error
    try:
        return _discover(_Session(nvml), sysfs_root)
    finally:
        try:
            nvml.nvmlShutdown()
        except Exception as error:  # noqa: BLE001 - nothing left to lose at this point
            log.debug("nvmlShutdown failed", extra={"error": str(error)})


def _discover(session: _Session, sysfs_root: str) -> DiscoveryResult:
    nvml = session.nvml
    try:
        count = int(nvml.nvmlDeviceGetCount())
    except Exception as error:  # noqa: BLE001
        raise NvmlUnavailable(f"NVML could not count GPUs: {error or type(error).__name__}") from error
    driver, _ = session.call("nvmlSystemGetDriverVersion", "system", quiet=_NOT_APPLICABLE)

    handles: list[Any] = []
    devices: list[Device] = []
    lost: set[int] = set()
    names: set[str] = set()
    migs: list[tuple[int, int, list[MigDevice]]] = []
    for index in range(count):
        handle, error = session.call("nvmlDeviceGetHandleByIndex", f"GPU{index}", index)
        if error is not None:
            lost.add(index)
        handles.append(handle)
        devices.append(_device(session, index, handle, sysfs_root) if error is None else Device(index=index))
        if error is None:
            name, _ = session.call("nvmlDeviceGetName", f"GPU{index}", handle, quiet=_NOT_APPLICABLE)
            names.add(_text(name).strip() if name is not None else "")
            mig = _mig_devices(session, index, handle)
            if mig is not None:
                migs.append(mig)
    if len(names - {""}) > 1:
        log.warning("GPUs of several products: none published", extra={"products": sorted(names)})

    by_pci = {normalize_pci(d.pci_bus_id): d.index for d in devices if d.pci_bus_id}
    nvlinks = _nvlink_counts(session, handles, by_pci)

    matrix = [[links.SELF if i == j else "SYS" for j in range(count)] for i in range(count)]
    unknown: set[tuple[int, int]] = set()
    for i in range(count):
        for j in range(i + 1, count):
            pcie = _pcie_class(session, handles[i], handles[j], i, j)
            if pcie is None and nvlinks[i][j] == 0:
                unknown.add((i, j))
            label = links.pair_label(pcie or "SYS", nvlinks[i][j])
            matrix[i][j] = matrix[j][i] = label

    p2p = [[_p2p(session, handles[i], handles[j], i, j) if i != j else None for j in range(count)] for i in range(count)]

    layout = NodeLayout(
        devices=tuple(devices),
        links=tuple(tuple(row) for row in matrix),
        p2p=tuple(tuple(row) for row in p2p),
    )
    result = DiscoveryResult(
        layout=layout,
        errors=tuple(session.errors),
        unknown_links=frozenset(unknown),
        lost=frozenset(lost),
        driver_version=_text(driver) if driver is not None else "",
        product=names.pop() if len(names) == 1 else "",
        mig=MigDevices(tuple(device for _, _, found in migs for device in found),
                       tuple((index, slices) for index, slices, _ in migs)),
    )
    log.info(
        "NVML discovery done",
        extra={
            "gpus": count,
            "nvml_errors": len(result.errors),
            "unknown_links": len(unknown),
            "lost": sorted(lost),
            "driver": result.driver_version,
            "mig_devices": len(result.mig.devices),
        },
    )
    return result


def _device(session: _Session, index: int, handle: Any, sysfs_root: str) -> Device:
    target = f"GPU{index}"
    uuid, _ = session.call("nvmlDeviceGetUUID", target, handle)
    pci_info, _ = session.call("nvmlDeviceGetPciInfo", target, handle)
    bus_id = ""
    if pci_info is not None:
        try:
            bus_id = normalize_pci(_text(pci_info.busId))
        except (AttributeError, ValueError) as error:
            session.fail("nvmlDeviceGetPciInfo", target, f"unusable bus id: {error}")

    numa, numa_error = session.call("nvmlDeviceGetNumaNodeId", target, handle, quiet=_NOT_APPLICABLE)
    if numa_error is not None or not isinstance(numa, int):
        from_sysfs = read_sysfs_numa(bus_id, sysfs_root) if bus_id else None
        if from_sysfs is not None:
            numa = from_sysfs
        else:
            if numa_error is not None and session.code_of(numa_error) in _NOT_APPLICABLE:
                # Not counted above because sysfs usually answers; here neither did.
                session.fail("nvmlDeviceGetNumaNodeId", target, numa_error)
            numa = NO_NUMA
    return Device(
        index=index,
        uuid=_text(uuid) if uuid is not None else "",
        pci_bus_id=bus_id,
        numa_node=numa if numa >= 0 else NO_NUMA,
        pcie_root=read_sysfs_pcie_root(bus_id, sysfs_root) if bus_id else "",
    )


def _mig_devices(session: _Session, index: int, handle: Any) -> tuple[int, int, list[MigDevice]] | None:
    """GPU ``index``'s compute slices in all and its MIG devices; None where MIG is off or unknown."""
    target = f"GPU{index}"
    mode, error = session.call("nvmlDeviceGetMigMode", target, handle, quiet=_NOT_APPLICABLE)
    if error is not None or mode is None or mode[0] != MIG_ENABLED:
        return None
    most, error = session.call("nvmlDeviceGetMaxMigDeviceCount", target, handle)
    if error is not None:
        return None
    # Without the profile call, the most MIG devices a GPU can have: one per slice on every MIG GPU.
    slices = int(most)
    for name, profile in WHOLE_GPU_PROFILES:
        constant = getattr(session.nvml, f"NVML_GPU_INSTANCE_PROFILE_{name}", profile)
        info, error = session.call("nvmlDeviceGetGpuInstanceProfileInfo", target, handle, constant,
                                   quiet=_NO_SUCH_PROFILE)
        if error is None and info is not None and info.sliceCount:
            slices = int(info.sliceCount)
            break
    found = []
    for mig_index in range(int(most)):
        mig_target = f"GPU{index} MIG {mig_index}"
        mig, error = session.call("nvmlDeviceGetMigDeviceHandleByIndex", mig_target, handle, mig_index,
                                  quiet=frozenset({ERROR_NOT_FOUND}))
        if error is not None:
            continue  # Not Found: no MIG device has this index (the rest of the GPU is not carved)
        uuid, uuid_error = session.call("nvmlDeviceGetUUID", mig_target, mig)
        attributes, attributes_error = session.call("nvmlDeviceGetAttributes", mig_target, mig)
        gpu_instance, gi_error = session.call("nvmlDeviceGetGpuInstanceId", mig_target, mig)
        compute_instance, ci_error = session.call("nvmlDeviceGetComputeInstanceId", mig_target, mig)
        if uuid_error or attributes_error or gi_error or ci_error:
            continue
        # A compute instance smaller than its GPU instance (1c.3g.20gb) takes its own slices.
        size = int(attributes.computeInstanceSliceCount or attributes.gpuInstanceSliceCount)
        found.append(MigDevice(_text(uuid), index, mig_index, int(gpu_instance), int(compute_instance), size))
    return index, slices, found


def _pcie_class(session: _Session, a: Any, b: Any, i: int, j: int) -> str | None:
    if a is None or b is None:
        return None
    level, error = session.call("nvmlDeviceGetTopologyCommonAncestor", f"GPU{i}-GPU{j}", a, b)
    if error is not None:
        return None
    try:
        return links.from_nvml_level(level)
    except links.UnknownLinkError as unknown:
        session.fail("nvmlDeviceGetTopologyCommonAncestor", f"GPU{i}-GPU{j}", str(unknown))
        return None


def _p2p(session: _Session, a: Any, b: Any, i: int, j: int) -> bool | None:
    if a is None or b is None:
        return None
    status, error = session.call("nvmlDeviceGetP2PStatus", f"GPU{i}-GPU{j}", a, b, P2P_CAPS_INDEX_READ)
    if error is not None or status == P2P_STATUS_UNKNOWN:
        return None
    return status == P2P_STATUS_OK


def _nvlink_counts(session: _Session, handles: list[Any], by_pci: dict[str, int]) -> list[list[int]]:
    """NVLinks between each pair: direct GPU-GPU links plus shared NVSwitch links."""
    count = len(handles)
    direct = [[0] * count for _ in range(count)]
    to_switch = [0] * count
    max_links = int(getattr(session.nvml, "NVML_NVLINK_MAX_LINKS", DEFAULT_MAX_LINKS))
    for i, handle in enumerate(handles):
        if handle is None:
            continue
        for link in range(max_links):
            target = f"GPU{i} link {link}"
            state, error = session.call("nvmlDeviceGetNvLinkState", target, handle, link, quiet=_NO_SUCH_LINK)
            if error is not None and session.code_of(error) in _NOT_APPLICABLE:
                break  # this GPU has no NVLink at all
            if error is not None or state != FEATURE_ENABLED:
                continue
            remote_type, _ = session.call(
                "nvmlDeviceGetNvLinkRemoteDeviceType", target, handle, link, quiet=_NOT_APPLICABLE
            )
            if remote_type == REMOTE_SWITCH:
                to_switch[i] += 1
                continue
            info, error = session.call("nvmlDeviceGetNvLinkRemotePciInfo", target, handle, link)
            if error is not None:
                continue
            try:
                peer = by_pci.get(normalize_pci(_text(info.busId)))
            except (AttributeError, ValueError) as bad:
                session.fail("nvmlDeviceGetNvLinkRemotePciInfo", target, f"unusable bus id: {bad}")
                continue
            if peer is not None and peer != i:
                direct[i][peer] += 1
            elif peer is None and remote_type is None:
                # Drivers without the remote-type query: a far end that is no GPU of this
                # node is an NVSwitch (NVLink bridges to CPUs exist only on POWER9).
                to_switch[i] += 1
    counts = [[0] * count for _ in range(count)]
    for i in range(count):
        for j in range(count):
            if i != j:
                counts[i][j] = max(direct[i][j], direct[j][i]) + min(to_switch[i], to_switch[j])
    return counts
