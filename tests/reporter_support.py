"""Shared pieces for the reporter tests: a hand-driven clock and the seed node's kubelet view."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from pathlib import Path

from gpupair.reporter.nvml_discovery import DiscoveryResult
from gpupair.reporter.topology_source import NvmlLayoutSource
from tests.nvml_fake import FakeNvml, load_recording, write_sysfs
from tests.podresources_server import FakeContainer, FakeDevice, FakePod

GPU = "nvidia.com/gpu"
SHARED = "nvidia.com/gpu.shared"  # time-slicing's resource under renameByDefault
NODE = "gpu-node-1"
SEED = load_recording("seed-5090d")
SEED_UUIDS = [device["uuid"] for device in SEED["devices"]]


class FakeClock:
    """Monotonic seconds (call it) and the matching wall time (``wall()``), moved by hand."""

    def __init__(self, start: datetime = datetime(2025, 3, 1, 8, 0, 0, tzinfo=timezone.utc)) -> None:
        self.seconds = 1000.0
        self._start_seconds = self.seconds
        self.start = start

    def __call__(self) -> float:
        return self.seconds

    def wall(self) -> datetime:
        return self.start + timedelta(seconds=self.seconds - self._start_seconds)

    def advance(self, seconds: float) -> None:
        self.seconds += seconds


def seed_source(tmp_path: Path) -> tuple[NvmlLayoutSource, FakeNvml]:
    """NVML discovery of the seed's node (fake NVML at the module boundary, real sysfs files)."""
    nvml = FakeNvml(load_recording("seed-5090d"))
    return NvmlLayoutSource(nvml, str(write_sysfs(tmp_path / "sys", nvml.recording))), nvml


def seed_layout(tmp_path: Path) -> DiscoveryResult:
    source, _ = seed_source(tmp_path)
    return source.load()


def device(index: int, uuid: bool = True) -> FakeDevice:
    return FakeDevice(SEED_UUIDS[index] if uuid else str(index), (0,) if index < 4 else (1,))


def devices(*indices: int, uuid: bool = True) -> list[FakeDevice]:
    return [device(i, uuid) for i in indices]


def gpu_pod(name: str, *indices: int, namespace: str = "ml", uuid: bool = True) -> FakePod:
    return FakePod(namespace, name, [FakeContainer("main", {GPU: devices(*indices, uuid=uuid)})])
