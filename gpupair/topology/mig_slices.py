"""A node's MIG devices as plain data: which GPU each belongs to and how many of its compute
slices it takes.

The kubelet names a MIG device as its device plugin advertised it: ``MIG-<uuid>`` (drivers R470
and newer), ``MIG-GPU-<uuid>/<gi>/<ci>`` (older drivers) or ``<gpu>:<mig>`` (the plugin's index
ids). Only the first names no parent GPU; NVML knows it (reporter/nvml_discovery.py), and so
knows each device's size, which none of the three spellings says. A 3g.20gb device of an A100
takes 3 of its 7 compute slices, whatever its memory, so shares are counted in slices: 3/7 of
the GPU, not one device of however many the GPU was cut into.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cached_property

MIG_PREFIX = "MIG-"
# Most GPUs that do MIG (A100, H100, H200, B200) have 7 compute slices; the A30 has 4.
COMMON_GPU_SLICES = 7
# A MIG profile's resource as the device plugin names it (mig.strategy mixed):
# "nvidia.com/mig-3g.20gb", or "nvidia.com/mig-1c.3g.20gb" for a compute instance of a GPU instance.
_PROFILE = re.compile(r"^nvidia\.com/mig-(?:(?P<c>\d+)c\.)?(?P<g>\d+)g\.[0-9a-z.+]+$")


def profile_slices(resource_name: str) -> int | None:
    """The compute slices a device of a MIG profile's resource takes (3 for
    ``nvidia.com/mig-3g.20gb``, 1 for ``nvidia.com/mig-1c.3g.20gb``); None for any other name."""
    found = _PROFILE.match(resource_name)
    if found is None:
        return None
    return int(found["c"] or found["g"]) or None


@dataclass(frozen=True)
class MigDevice:
    """One MIG device (a compute instance) of GPU ``gpu``: NVML's MIG index on that GPU, its GPU
    and compute instance ids, and the compute slices it takes."""

    uuid: str  # "MIG-<uuid>", as NVML and the device plugin spell it
    gpu: int
    index: int
    gpu_instance: int
    compute_instance: int
    slices: int


@dataclass(frozen=True)
class MigDevices:
    """The node's MIG devices, and each MIG-enabled GPU's compute slices in all (7 on an A100
    or H100, 4 on an A30), by layout index."""

    devices: tuple[MigDevice, ...] = ()
    gpu_slices: tuple[tuple[int, int], ...] = ()  # (GPU index, compute slices) per MIG-enabled GPU

    @cached_property
    def _by_uuid(self) -> dict[str, MigDevice]:
        return {device.uuid.lower(): device for device in self.devices}

    @cached_property
    def _by_index(self) -> dict[tuple[int, int], MigDevice]:
        return {(device.gpu, device.index): device for device in self.devices}

    @cached_property
    def _by_instance(self) -> dict[tuple[int, int, int], MigDevice]:
        return {(d.gpu, d.gpu_instance, d.compute_instance): d for d in self.devices}

    def slices_of(self, gpu: int) -> int:
        """GPU ``gpu``'s compute slices in all; 0 where it is not in MIG mode."""
        return dict(self.gpu_slices).get(gpu, 0)

    def by_uuid(self, mig_uuid: str) -> MigDevice | None:
        return self._by_uuid.get(mig_uuid.lower())

    def by_index(self, gpu: int, index: int) -> MigDevice | None:
        return self._by_index.get((gpu, index))

    def by_instance(self, gpu: int, gpu_instance: int, compute_instance: int) -> MigDevice | None:
        return self._by_instance.get((gpu, gpu_instance, compute_instance))
