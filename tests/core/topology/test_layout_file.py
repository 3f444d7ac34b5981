"""gpupair.topology.layout_file: one loader for every layout form gpupair prints or reads, behind
reporter --topology-file, simulate --topology-file and verify --topology-file."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

import pytest

from gpupair.topology import report
from gpupair.decide.judge.verdict import LINK_KEY
from gpupair.topology.layout_file import LayoutFileError, parse_layout_text, read_layout
from gpupair.reporter.topology_source import FileLayoutSource
from tests.reporter_support import seed_layout

REPO = Path(__file__).resolve().parents[3]
TOPO = REPO / "tests" / "fixtures" / "topo"


@pytest.fixture
def layout(tmp_path):
    return seed_layout(tmp_path).layout


def node(layout, name: str = "gpu-1") -> dict:
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "annotations": {report.TOPOLOGY_KEY: report.encode_topology(layout)}}}


def every_form(layout) -> dict[str, str]:
    topology = report.encode_topology(layout)
    annotations = report.encode_annotations(layout, {1}, 1, datetime.now(timezone.utc))
    return {
        "topology JSON": topology,
        "the annotation value, quoted": json.dumps(topology),
        "annotations object (reporter --once --dry-run)": json.dumps(annotations, indent=2),
        "Node": json.dumps(node(layout), indent=2),
        "List of one Node": json.dumps({"kind": "List", "items": [node(layout)]}),
    }


def test_every_json_form_gives_the_same_layout(layout):
    for form, text in every_form(layout).items():
        assert parse_layout_text(text, origin=form) == layout, form


def test_nvidia_smi_topo_text():
    layout = parse_layout_text((TOPO / "sglang-30401-hgx-h100.txt").read_text())
    assert layout.size == 8 and layout.link(0, 7) == "NV18"
    assert layout.numa_nodes == {0: (0, 1, 2, 3), 1: (4, 5, 6, 7)}


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("{not json", "not valid JSON"),
        ("[" * 100_000, "no nvidia-smi topo -m matrix"),
        ("{" * 100_000, "not valid JSON"),
        ('{"v": 1, "devices": [], "links": [], "extra": 1}', "gpupair.io/topology rejected"),
        ('{"gpupair.io/topology": 5}', "must be a JSON string"),
        ('{"kind": "Node", "metadata": {"name": "cpu-1", "annotations": {}}}', "cpu-1 has no gpupair.io/topology"),
        ('{"kind": "NodeList", "items": []}', "a list of 0 objects"),
        ("no matrix here\n", "no nvidia-smi topo -m matrix"),
        ("\tGPU0\tGPU1\nGPU0\t X \tNODE\nGPU1\tSYS\t X \n", "not symmetric"),
    ],
)
def test_bad_layout_text_says_why(text, message):
    with pytest.raises(LayoutFileError, match=message):
        parse_layout_text(text, origin="t.txt")


def test_unreadable_or_binary_files(tmp_path):
    with pytest.raises(LayoutFileError, match="cannot read layout file"):
        read_layout(str(tmp_path / "missing.txt"))
    binary = tmp_path / "b.bin"
    binary.write_bytes(b"\xff\xfe\x00")
    with pytest.raises(LayoutFileError, match="not UTF-8"):
        FileLayoutSource(str(binary))


def gpupair(*args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUPAIR_")}
    return subprocess.run([sys.executable, "-m", "gpupair.command.cli", *args], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=120)


def test_what_the_reporter_prints_every_layout_flag_reads(tmp_path):
    """The reporter's dry run, from topo -m text, is the input of all three layout flags."""
    printed = gpupair("reporter", "--once", "--dry-run", "--topology-file", str(TOPO / "seed-5090d.txt"),
                      "--allocated", "0")
    assert printed.returncode == 0, printed.stderr
    dry_run = tmp_path / "dry-run.json"
    dry_run.write_text(printed.stdout)

    again = gpupair("reporter", "--once", "--dry-run", "--topology-file", str(dry_run), "--allocated", "0")
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)[report.TOPOLOGY_KEY] == json.loads(printed.stdout)[report.TOPOLOGY_KEY]

    verdict = gpupair("verify", "--dry-run", "--topology-file", str(dry_run), "--devices", "3,4")
    assert verdict.returncode == 0, verdict.stderr
    assert json.loads(verdict.stdout)[LINK_KEY] == "SYS"

    simulated = gpupair("simulate", "--topology-file", str(dry_run), "--runs", "1", "--rounds", "2",
                        "--configs", "gpupair+aligned", "--scheduler-profile", "default",
                        "--output", str(tmp_path / "sim.tsv"), "--no-progress")
    assert simulated.returncode == 0, simulated.stderr
    assert "4 nodes x 8 GPUs" in simulated.stdout
