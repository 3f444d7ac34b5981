"""scripts/nvml_probe.py, run against the recorded NVML fakes (the real run needs a GPU node)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from gpupair.topology import report
from gpupair.reporter.nvml_discovery import discover
from tests.nvml_fake import RECORDINGS, FakeNvml, load_recording, real, topo_text, write_sysfs

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "nvml_probe.py"


@pytest.fixture(scope="module")
def nvml_probe():
    spec = importlib.util.spec_from_file_location("nvml_probe", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("name", RECORDINGS)
def test_probe_reports_agreement_with_nvidia_smi(nvml_probe, tmp_path, name):
    recording = load_recording(name)
    sysfs = str(write_sysfs(tmp_path, recording))
    output = nvml_probe.probe(FakeNvml(recording), sysfs, ("0",), topo_text(recording))
    assert output["complete"] and output["nvidia_smi_topo"]["agrees"]
    annotations = output["dry_run_annotations"]
    assert report.decode_annotations(annotations).state.free == set(range(1, 8))


def test_probe_shows_disagreement(nvml_probe, tmp_path):
    recording = load_recording("seed-5090d")
    nvml = FakeNvml(recording).fail("nvmlDeviceGetTopologyCommonAncestor", 0, 1)
    output = nvml_probe.probe(nvml, str(write_sysfs(tmp_path, recording)), (), topo_text(recording))
    assert not output["complete"] and output["unknown_links"] == ["GPU0-GPU1"]
    assert output["nvidia_smi_topo"]["link_differences"] == [{"pair": "GPU0-GPU1", "nvml": "SYS", "nvidia_smi": "NODE"}]


@pytest.mark.parametrize("name", RECORDINGS)
def test_recording_replays_to_the_same_layout(nvml_probe, tmp_path, name):
    recording = load_recording(name)
    sysfs = str(write_sysfs(tmp_path / "sys", recording))
    recorder = nvml_probe.RecordingNvml(FakeNvml(recording))
    original = discover(recorder, sysfs).layout

    rerecorded = nvml_probe.recording_from(recorder, sysfs, recording["topo"])
    assert rerecorded["commonAncestor"] == recording["commonAncestor"]
    assert rerecorded["p2pRead"] == recording["p2pRead"]
    assert [d["uuid"] for d in rerecorded["devices"]] == [d["uuid"] for d in recording["devices"]]
    replayed = FakeNvml(rerecorded).fail("nvmlDeviceGetNvLinkRemoteDeviceType", code=real.NVML_ERROR_FUNCTION_NOT_FOUND)
    assert discover(replayed, sysfs).layout == original
    assert discover(FakeNvml(rerecorded), sysfs).layout == original
