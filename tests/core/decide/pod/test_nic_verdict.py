"""The verdict says how close the network is: each granted GPU's nearest NIC and the worst link,
on recorded real topologies with NIC columns; and the reporter publishes the NICs it knows."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from gpupair.decide.judge import verdict
from gpupair.topology.nics import NICS_KEY, decode_nics
from gpupair.topology.report import TOPOLOGY_KEY, fingerprint
from gpupair.topology.smi_topo import parse_topo_matrix

REPO = Path(__file__).resolve().parents[4]
TOPO = REPO / "tests" / "fixtures" / "topo"


def classify(name: str, granted: tuple[int, ...]) -> verdict.Verdict:
    topo = parse_topo_matrix((TOPO / name).read_text())
    return verdict.classify(topo.to_layout(), granted, nics=topo.to_nic_layout())


def test_each_gpu_names_its_nearest_nic_and_the_worst_is_the_pods():
    hgx = classify("sglang-30401-hgx-h100.txt", (0, 1))
    assert hgx.annotations()[verdict.GRANTED_NIC_KEY] == "GPU0:mlx5_0=PIX GPU1:mlx5_1=PIX"
    assert hgx.annotations()[verdict.NIC_LINK_KEY] == "PIX"
    far = classify("sglang-23020-8x5090-pcie.txt", (4, 5))  # both NICs hang off the other socket
    assert far.nic == "GPU4:mlx5_0=SYS GPU5:mlx5_0=SYS" and far.nic_link == "SYS"
    mixed = classify("stelline-4x-rtx6000ada.txt", (1, 2))
    assert mixed.nic == "GPU1:mlx5_0=NODE GPU2:mlx5_2=NODE"


def test_unknown_nics_add_nothing_and_a_node_without_nics_says_so():
    topo = parse_topo_matrix((TOPO / "seed-5090d.txt").read_text())
    unknown = verdict.classify(topo.to_layout(), (0, 1))
    assert verdict.GRANTED_NIC_KEY not in unknown.annotations()
    none = verdict.classify(topo.to_layout(), (0, 1), nics=topo.to_nic_layout())
    assert none.annotations()[verdict.GRANTED_NIC_KEY] == "-" and none.annotations()[verdict.NIC_LINK_KEY] == "-"


def test_the_reporter_dry_run_publishes_a_topo_files_nics_and_verify_shows_them():
    path = TOPO / "deepep-13-dgx-a100.txt"
    run = subprocess.run([sys.executable, "-m", "gpupair.command.cli", "reporter", "--once", "--dry-run",
                          "--topology-file", str(path), "--allocated="], capture_output=True, text=True,
                         cwd=REPO, timeout=60)
    assert run.returncode == 0, run.stderr
    annotations = json.loads(run.stdout)
    nics = decode_nics(annotations[NICS_KEY], fingerprint(annotations[TOPOLOGY_KEY]), 8)
    assert [n.name for n in nics.nics][:2] == ["mlx5_0", "mlx5_1"] and nics.nearest(4) == ("mlx5_4", "PXB")
    verify = subprocess.run([sys.executable, "-m", "gpupair.command.cli", "verify", "--dry-run", "--topology-file",
                             str(path), "--devices", "GPU0+GPU1"], capture_output=True, text=True, cwd=REPO,
                            timeout=60)
    assert verify.returncode == 0, verify.stderr
    assert "GPU0:mlx5_0=PXB GPU1:mlx5_0=PXB" in verify.stdout
