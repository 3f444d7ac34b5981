"""Tests for gpupair.topology.smi_topo against real `nvidia-smi topo -m` outputs (tests/fixtures/topo).

Expected values below were read off each fixture by eye, not produced by the parser.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpupair.topology.layout import NodeLayout
from gpupair.topology.smi_topo import SmiTopology, TopoParseError, parse_topo_matrix

FIXTURES = Path(__file__).parents[2] / "fixtures" / "topo"
ALL_FIXTURES = sorted(p.name for p in FIXTURES.glob("*.txt"))


def load(name: str) -> str:
    return (FIXTURES / name).read_text()


def parse(name: str) -> SmiTopology:
    return parse_topo_matrix(load(name))


def link(topo: SmiTopology, a: int, b: int) -> str:
    return topo.gpu_links[a][b]


def nic_link(topo: SmiTopology, gpu: int, nic: str) -> str:
    return topo.gpu_nic_links[gpu][topo.nics.index(nic)]


# ---------------------------------------------------------------- per-fixture facts


def test_sglang_8x5090_pcie_node_sys_split():
    topo = parse("sglang-23020-8x5090-pcie.txt")
    assert topo.gpus == tuple(f"GPU{i}" for i in range(8))
    assert link(topo, 0, 3) == "NODE"
    assert link(topo, 5, 6) == "NODE"
    assert link(topo, 0, 4) == "SYS"
    assert link(topo, 3, 7) == "SYS"
    assert topo.nics == ("NIC0", "NIC1")
    assert topo.nic_legend == {"NIC0": "mlx5_0", "NIC1": "mlx5_1"}
    assert nic_link(topo, 0, "NIC0") == "NODE"
    assert nic_link(topo, 4, "NIC1") == "SYS"
    # "128-255,384-511 1" has a single space before the NUMA column: the CPU list overflowed it.
    assert topo.cpu_affinity[4] == "128-255,384-511"
    assert topo.numa_affinity[4] == "1"
    assert topo.gpu_numa_id[4] == "N/A"
    assert [topo.numa_node_of(i) for i in (0, 3, 4, 7)] == [0, 0, 1, 1]


def test_lmdeploy_8x3090_tab_separated():
    topo = parse("lmdeploy-4917-8x3090-pcie.txt")
    assert len(topo.gpus) == 8
    assert link(topo, 1, 2) == "NODE"
    assert link(topo, 2, 6) == "SYS"
    assert link(topo, 6, 7) == "NODE"
    assert topo.nics == ()
    assert topo.nic_legend == {}
    assert topo.cpu_affinity[0] == "0-63,128-191"
    assert topo.cpu_affinity[5] == "64-127,192-255"
    assert topo.numa_affinity[5] == "1"
    assert topo.gpu_numa_id[0] == "N/A"
    assert topo.numa_node_of(2) == 0
    assert topo.numa_node_of(5) == 1


def test_vllm_pcie_switches_and_na_numa():
    topo = parse("vllm-11122-8gpu-pix-pxb.txt")
    assert len(topo.gpus) == 8
    assert link(topo, 0, 1) == "PIX"
    assert link(topo, 4, 5) == "PIX"
    assert link(topo, 2, 3) == "PXB"
    assert link(topo, 6, 7) == "PXB"
    assert link(topo, 1, 5) == "SYS"
    assert topo.cpu_affinity[7] == "0-95"
    assert topo.numa_affinity[0] == "N/A"
    # N/A affinity and N/A GPU NUMA ID: no NUMA node known for any GPU.
    assert [topo.numa_node_of(i) for i in range(8)] == [-1] * 8


def test_gpu_manager_old_soc_is_sys():
    topo = parse("gpu-manager-6gpu-soc.txt")
    assert len(topo.gpus) == 6
    assert link(topo, 0, 4) == "SYS"  # printed as SOC
    assert link(topo, 5, 1) == "SYS"
    assert link(topo, 2, 3) == "PIX"
    assert link(topo, 4, 5) == "PIX"
    assert link(topo, 1, 2) == "PHB"
    assert topo.cpu_affinity == (None,) * 6
    assert topo.numa_affinity == (None,) * 6
    assert topo.numa_node_of(0) == -1


def test_sglang_hgx_h100_nvlink_and_nic_legend():
    topo = parse("sglang-30401-hgx-h100.txt")
    assert len(topo.gpus) == 8
    assert link(topo, 0, 7) == "NV18"
    assert link(topo, 3, 4) == "NV18"
    assert topo.nics == tuple(f"NIC{i}" for i in range(8))
    assert topo.nic_legend["NIC0"] == "mlx5_0"
    assert topo.nic_legend["NIC5"] == "mlx5_5"
    assert len(topo.nic_legend) == 8
    assert nic_link(topo, 3, "NIC3") == "PIX"
    assert nic_link(topo, 3, "NIC4") == "SYS"
    assert nic_link(topo, 6, "NIC4") == "NODE"
    assert topo.cpu_affinity[5] == "48-95,144-191"
    assert topo.numa_node_of(3) == 0
    assert topo.numa_node_of(4) == 1


def test_deepep_dgx_a100_without_gpu_numa_id_column():
    topo = parse("deepep-13-dgx-a100.txt")
    assert link(topo, 2, 6) == "NV12"
    assert nic_link(topo, 0, "NIC0") == "PXB"
    assert nic_link(topo, 0, "NIC2") == "NODE"
    assert nic_link(topo, 0, "NIC4") == "SYS"
    assert nic_link(topo, 7, "NIC7") == "PXB"
    assert topo.nic_legend["NIC7"] == "mlx5_7"
    assert topo.gpu_numa_id == (None,) * 8  # older driver: no such column
    assert topo.numa_affinity[6] == "1"
    assert topo.numa_node_of(6) == 1
    assert topo.numa_node_of(1) == 0


def test_deepep_topo_mp_twelve_nics():
    topo = parse("deepep-397-h100-topo-mp.txt")
    assert len(topo.nics) == 12
    assert topo.nics[-1] == "NIC11"
    assert [nic_link(topo, 0, n) for n in ("NIC0", "NIC1", "NIC2")] == ["PIX", "PIX", "PIX"]
    assert nic_link(topo, 1, "NIC3") == "PIX"
    assert nic_link(topo, 4, "NIC6") == "PIX"
    assert link(topo, 0, 1) == "NODE"
    assert link(topo, 0, 4) == "SYS"
    assert topo.cpu_affinity[0] == "0,2,4,6,8,10"
    assert topo.cpu_affinity[7] == "1,3,5,7,9,11"
    assert topo.nic_legend["NIC10"] == "mlx5_10"
    assert topo.numa_node_of(7) == 1


def test_go_gpuallocator_all_sys_but_two_numa_nodes():
    topo = parse("go-gpuallocator-17-8x4090-sys.txt")
    assert link(topo, 0, 1) == "SYS"
    assert link(topo, 3, 4) == "SYS"
    assert link(topo, 6, 7) == "SYS"
    assert nic_link(topo, 6, "NIC0") == "PHB"
    assert nic_link(topo, 6, "NIC1") == "PHB"
    assert nic_link(topo, 0, "NIC0") == "SYS"
    assert topo.nic_legend == {}
    assert topo.numa_node_of(3) == 0
    assert topo.numa_node_of(4) == 1


def test_stelline_four_gpu_box():
    topo = parse("stelline-4x-rtx6000ada.txt")
    assert topo.gpus == ("GPU0", "GPU1", "GPU2", "GPU3")
    assert link(topo, 0, 1) == "NODE"
    assert link(topo, 1, 2) == "SYS"
    assert link(topo, 2, 3) == "NODE"
    assert nic_link(topo, 0, "NIC2") == "SYS"
    assert nic_link(topo, 2, "NIC2") == "NODE"
    assert topo.nic_legend == {"NIC0": "mlx5_0", "NIC1": "mlx5_1", "NIC2": "mlx5_2", "NIC3": "mlx5_3"}
    assert topo.cpu_affinity[2] == "32-63"
    assert [topo.numa_node_of(i) for i in range(4)] == [0, 0, 1, 1]


def test_wsl2_empty_affinity_cells():
    topo = parse("sglang-24364-wsl2-1gpu-no-affinity.txt")
    assert topo.gpus == ("GPU0",)
    assert topo.gpu_links == (("X",),)
    assert topo.cpu_affinity == (None,)
    assert topo.numa_affinity == (None,)
    assert topo.gpu_numa_id == ("N/A",)
    assert topo.numa_node_of(0) == -1


def test_lent_h200_vm_escapes_in_a_pipe():
    # Recorded on a lent H200 VM: nvidia-smi underlines the header even into a pipe, and the VM's
    # one NUMA node shows as affinity 0 though sysfs (and NVML discovery there) said -1.
    topo = parse("lent-h200-1gpu-vm-ansi.txt")
    assert topo.gpus == ("GPU0",)
    assert topo.gpu_links == (("X",),)
    assert (topo.cpu_affinity, topo.numa_affinity, topo.gpu_numa_id) == (("0-15",), ("0",), ("N/A",))
    assert topo.numa_node_of(0) == 0


def test_empty_affinity_cells_after_tabs_became_spaces():
    # The WSL2 row as a browser or terminal shows it, with its tabs expanded.
    text = "\tGPU0\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\nGPU0\t X \t\t\t\tN/A\n".expandtabs()
    topo = parse_topo_matrix(text)
    assert (topo.cpu_affinity, topo.numa_affinity, topo.gpu_numa_id) == ((None,), (None,), ("N/A",))


def test_empty_numa_cell_between_filled_ones_is_read_by_tab_position():
    # nvidia-smi's separators: one tab after CPU Affinity, two after NUMA Affinity. Here the NUMA
    # cell is empty while the cells around it are not; only the tabs say which one is missing.
    text = "\tGPU0\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\nGPU0\t X \t0-95\t\t\tN/A\n"
    topo = parse_topo_matrix(text)
    assert (topo.cpu_affinity, topo.numa_affinity, topo.gpu_numa_id) == (("0-95",), (None,), ("N/A",))


def test_seed_node_matches_field_report():
    # DIGEST.md: GPU0-3 on NUMA 0, GPU4-7 on NUMA 1, NODE inside a NUMA node, SYS across.
    topo = parse("seed-5090d.txt")
    for a in range(8):
        for b in range(8):
            expected = "X" if a == b else ("NODE" if (a < 4) == (b < 4) else "SYS")
            assert link(topo, a, b) == expected
    assert [topo.numa_node_of(i) for i in range(8)] == [0] * 4 + [1] * 4
    assert topo.cpu_affinity[0] == "0-95"
    assert topo.cpu_affinity[7] == "96-191"


# ---------------------------------------------------------------- layouts


@pytest.mark.parametrize("name", ALL_FIXTURES)
def test_to_layout_is_a_valid_node_layout(name):
    topo = parse(name)
    layout = topo.to_layout()
    assert isinstance(layout, NodeLayout)
    assert layout.size == len(topo.gpus)
    assert layout.links == topo.gpu_links
    assert [d.index for d in layout.devices] == list(range(layout.size))
    assert all(d.uuid == "" and d.pci_bus_id == "" for d in layout.devices)
    assert [d.numa_node for d in layout.devices] == [
        topo.numa_node_of(i) for i in range(layout.size)
    ]


def test_layout_groups_by_numa_node():
    assert parse("stelline-4x-rtx6000ada.txt").to_layout().numa_nodes == {0: (0, 1), 1: (2, 3)}
    seed = parse("seed-5090d.txt").to_layout()
    assert seed.numa_nodes == {0: (0, 1, 2, 3), 1: (4, 5, 6, 7)}
    assert seed.worst_link([0, 3]) == "NODE"
    assert seed.worst_link([3, 4]) == "SYS"
    # No NUMA affinity printed: placement infers the two groups the SYS links separate.
    assert parse("vllm-11122-8gpu-pix-pxb.txt").to_layout().numa_nodes == {
        -1: (0, 1, 2, 3),
        -2: (4, 5, 6, 7),
    }


def test_numa_affinity_spanning_nodes_falls_back_to_gpu_numa_id():
    text = (
        "\tGPU0\tGPU1\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\n"
        "GPU0\t X \tNV4\t0-143\t0-1\t\t2\n"
        "GPU1\tNV4\t X \t0-143\t0-1\t\tN/A\n"
    )
    topo = parse_topo_matrix(text)
    assert topo.numa_affinity == ("0-1", "0-1")
    assert topo.numa_node_of(0) == 2  # from GPU NUMA ID
    assert topo.numa_node_of(1) == -1


# ---------------------------------------------------------------- surrounding text and formatting


def test_ansi_underlined_header_parses_like_plain():
    plain = load("lmdeploy-4917-8x3090-pcie.txt")
    lines = plain.splitlines()
    header = next(i for i, line in enumerate(lines) if "CPU Affinity" in line)
    lines[header] = "\x1b[4m" + lines[header] + "\x1b[0m"
    lines[header + 1] = "\x1b[1mGPU0\x1b[0m" + lines[header + 1][len("GPU0") :]
    assert parse_topo_matrix("\n".join(lines)) == parse_topo_matrix(plain)


def test_crlf_line_endings():
    plain = load("stelline-4x-rtx6000ada.txt")
    assert parse_topo_matrix(plain.replace("\n", "\r\n")) == parse_topo_matrix(plain)


def test_pod_log_with_query_gpu_csv_before_the_matrix():
    # What the seed's test pod prints: the --query-gpu CSV, then topo -m for its 2 GPUs.
    # The UUIDs are placeholders; the bus ids are the seed's example map.
    log = (
        "index, uuid, pci.bus_id\n"
        "0, GPU-00000000-0000-0000-0000-000000000000, 00000000:21:00.0\n"
        "1, GPU-11111111-1111-1111-1111-111111111111, 00000000:31:00.0\n"
        "\tGPU0\tGPU1\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\n"
        "GPU0\t X \tNODE\t0-95\t0\t\tN/A\n"
        "GPU1\tNODE\t X \t0-95\t0\t\tN/A\n"
        "\n"
        "Legend:\n"
        "\n"
        "  X    = Self\n"
    )
    topo = parse_topo_matrix(log)
    assert topo.gpus == ("GPU0", "GPU1")
    assert link(topo, 0, 1) == "NODE"
    assert [topo.numa_node_of(i) for i in range(2)] == [0, 0]


def test_first_matrix_wins_and_keeps_only_its_own_legend():
    # lmdeploy has no NIC Legend; the HGX output after it has one that must not be borrowed.
    topo = parse_topo_matrix(load("lmdeploy-4917-8x3090-pcie.txt") + "\n" + load("sglang-30401-hgx-h100.txt"))
    assert topo.nics == ()
    assert topo.nic_legend == {}
    assert link(topo, 0, 1) == "NODE"


def test_p2p_status_matrix_is_not_mistaken_for_links():
    # `nvidia-smi topo -p2p rw` as pasted in noonghunna/club-3090#1229: its labels are statuses.
    text = " \tGPU0\tGPU1\t\n GPU0\tX\tGNS\t\n GPU1\tGNS\tX\t\n"
    with pytest.raises(TopoParseError) as info:
        parse_topo_matrix(text)
    assert info.value.lineno == 2
    assert "GNS" in str(info.value)


# ---------------------------------------------------------------- errors


def test_garbage_has_no_matrix():
    with pytest.raises(TopoParseError) as info:
        parse_topo_matrix("hello\nthis is not nvidia-smi output\nGPU 0: NVIDIA GeForce RTX 4090\n")
    assert info.value.lineno is None
    assert "no nvidia-smi topo -m matrix" in str(info.value)
    with pytest.raises(TopoParseError):
        parse_topo_matrix("")


def test_truncated_row_names_its_line():
    lines = load("seed-5090d.txt").splitlines()
    assert lines[6].startswith("GPU5")  # line 7
    lines[6] = "\t".join(lines[6].split("\t")[:4])
    with pytest.raises(TopoParseError) as info:
        parse_topo_matrix("\n".join(lines))
    assert info.value.lineno == 7
    assert info.value.line == lines[6]
    assert "line 7" in str(info.value) and "GPU5" in str(info.value)


def test_matrix_cut_off_at_end_of_text():
    lines = load("seed-5090d.txt").splitlines()[:5]  # header + GPU0..GPU3
    with pytest.raises(TopoParseError) as info:
        parse_topo_matrix("\n".join(lines))
    assert info.value.lineno == 5
    assert "4 of 8 GPU rows" in str(info.value)


def test_matrix_cut_off_before_legend():
    lines = load("seed-5090d.txt").splitlines()
    text = "\n".join(lines[:5] + ["", "Legend:"])
    with pytest.raises(TopoParseError) as info:
        parse_topo_matrix(text)
    assert info.value.lineno == 6
    assert info.value.line == ""


def test_asymmetric_matrix_names_the_later_row():
    lines = load("seed-5090d.txt").splitlines()
    assert lines[4].startswith("GPU3\tNODE\tNODE")  # line 5
    lines[4] = lines[4].replace("GPU3\tNODE\tNODE", "GPU3\tNODE\tSYS", 1)
    with pytest.raises(TopoParseError) as info:
        parse_topo_matrix("\n".join(lines))
    assert info.value.lineno == 5
    assert "GPU3->GPU1 is SYS" in str(info.value)
    assert "GPU1->GPU3 is NODE" in str(info.value)


@pytest.mark.parametrize("label", ["MIG", "NV", "NV0", "NODES", "?"])
def test_unknown_label_names_its_line(label):
    lines = load("stelline-4x-rtx6000ada.txt").splitlines()
    assert lines[3].startswith("GPU1    NODE")  # line 4
    lines[3] = lines[3].replace("NODE", label, 1)
    with pytest.raises(TopoParseError) as info:
        parse_topo_matrix("\n".join(lines))
    assert info.value.lineno == 4
    assert repr(label) in str(info.value)


def test_unknown_label_in_a_nic_column():
    lines = load("sglang-23020-8x5090-pcie.txt").splitlines()
    assert lines[2].startswith("GPU0")
    lines[2] = re.sub(r"NODE(\s+0-127)", r"IB\1", lines[2], count=1)
    with pytest.raises(TopoParseError) as info:
        parse_topo_matrix("\n".join(lines))
    assert info.value.lineno == 3


def test_x_off_the_diagonal_and_missing_on_it():
    lines = load("seed-5090d.txt").splitlines()
    off = list(lines)
    off[1] = off[1].replace(" X \tNODE\tNODE", " X \tNODE\t X ", 1)  # GPU0->GPU2
    off[3] = off[3].replace("GPU2\tNODE", "GPU2\t X ", 1)  # GPU2->GPU0
    with pytest.raises(TopoParseError) as info:
        parse_topo_matrix("\n".join(off))
    assert info.value.lineno == 4
    assert "GPU2->GPU0 is X off the diagonal" in str(info.value)
    missing = list(lines)
    missing[2] = missing[2].replace(" X ", "NODE", 1)  # GPU1's own cell
    with pytest.raises(TopoParseError) as info:
        parse_topo_matrix("\n".join(missing))
    assert info.value.lineno == 3
    assert "not X in its own column" in str(info.value)


def test_rows_out_of_order():
    lines = load("seed-5090d.txt").splitlines()
    lines[1], lines[2] = lines[2], lines[1]
    with pytest.raises(TopoParseError) as info:
        parse_topo_matrix("\n".join(lines))
    assert info.value.lineno == 2
    assert "expected row GPU0" in str(info.value)


def test_row_with_extra_cells():
    lines = load("seed-5090d.txt").splitlines()
    lines[8] = lines[8] + "\textra\tcells"
    with pytest.raises(TopoParseError) as info:
        parse_topo_matrix("\n".join(lines))
    assert info.value.lineno == 9


def test_nic_legend_naming_a_missing_column():
    text = load("stelline-4x-rtx6000ada.txt").replace("  NIC3: mlx5_3", "  NIC9: mlx5_3")
    with pytest.raises(TopoParseError) as info:
        parse_topo_matrix(text)
    assert "NIC9" in str(info.value)
    assert info.value.line == "  NIC9: mlx5_3"


# ---------------------------------------------------------------- whitespace does not matter


def _reformat(text: str, draw) -> str:
    """Every whitespace run becomes a random run of tabs and spaces; no line gains trailing space."""
    gap = st.text(alphabet=" \t", min_size=1, max_size=4)
    out = []
    for line in text.splitlines():
        tokens = line.split()
        if not tokens:
            out.append("")
            continue
        lead = draw(st.text(alphabet=" \t", max_size=3))
        out.append(lead + "".join(t + draw(gap) for t in tokens[:-1]) + tokens[-1])
    return "\n".join(out)


# The recorded one-GPU VM row has every affinity cell filled and no link cell to anchor them: where
# tabs and spaces mix, the parser reads cells by tab position (as it must for empty cells, see
# test_empty_numa_cell_between_filled_ones_is_read_by_tab_position), so a reformatting that moves
# the tabs moves the cells. nvidia-smi itself never mixes them.
WHITESPACE_FREE = [name for name in ALL_FIXTURES if name != "lent-h200-1gpu-vm-ansi.txt"]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(name=st.sampled_from(WHITESPACE_FREE), data=st.data())
def test_any_tabs_and_spaces_parse_identically(name, data):
    text = load(name)
    assert parse_topo_matrix(_reformat(text, data.draw)) == parse_topo_matrix(text)
