"""audit.pod_log and audit.sample: reading an audit pod's log and annotations into a TSV row."""

from __future__ import annotations

import pytest

from gpupair.decide.judge import verdict as verdicts
from gpupair.topology.layout import Device, NodeLayout

from gpupair.audit.pod_log import UNKNOWN, LogParseError, classify_log, parse_query_csv
from gpupair.audit.sample import FAIL_TIMEOUT, decide, from_annotations, tsv_header
from tests.audit_logs import container_log, fixture, host_layout, query_csv

SEED = "seed-5090d.txt"
SGLANG_5090 = "sglang-23020-8x5090-pcie.txt"


# ---- the seed's own example row


def test_seed_example_row_from_log_and_node_report():
    # The seed's sample: "01 test-01-1 Succeeded GPU0+GPU1 00000000:21:00.0+00000000:31:00.0 NUMA0+NUMA0 NODE PASS"
    verdict = classify_log(container_log(SEED, [0, 1]), host_layout(SEED), expected=2)
    row = verdict.tsv_row("01", "test-01-1", "Succeeded")
    assert row == "01\ttest-01-1\tSucceeded\tGPU0+GPU1\t00000000:21:00.0+00000000:31:00.0\tNUMA0+NUMA0\tNODE\tPASS"


def test_cross_numa_pair_is_sys_and_fails():
    verdict = classify_log(container_log(SEED, [3, 4]), host_layout(SEED), expected=2)
    assert (verdict.granted, verdict.numa, verdict.link, verdict.result) == (
        "GPU3+GPU4", "NUMA0+NUMA1", "SYS", verdicts.FAIL)
    assert verdict.pci == "00000000:61:00.0+00000000:81:00.0"


def test_container_renumbering_is_undone_through_pci():
    # The container shows GPU0/GPU1; the report maps their PCI ids back to host GPU5 and GPU7.
    log = container_log(SGLANG_5090, [5, 7])
    assert "\nGPU0\t X \tNODE" in log and "GPU5" not in log
    verdict = classify_log(log, host_layout(SGLANG_5090), expected=2)
    assert (verdict.granted, verdict.pci, verdict.numa, verdict.link, verdict.result) == (
        "GPU5+GPU7", "00000000:A1:00.0+00000000:E1:00.0", "NUMA1+NUMA1", "NODE", verdicts.PASS)


# ---- without a node report: NUMA from topo -m, host GPU unknown


def test_without_report_numa_comes_from_topo_affinity():
    verdict = classify_log(container_log(SGLANG_5090, [4, 6]), None, expected=2)
    assert (verdict.granted, verdict.numa, verdict.link, verdict.result) == (
        UNKNOWN, "NUMA1+NUMA1", "NODE", verdicts.PASS)
    assert verdict.pci == "00000000:81:00.0+00000000:C1:00.0"


def test_without_report_cross_socket_still_fails():
    verdict = classify_log(container_log(SGLANG_5090, [2, 5]), None, expected=2)
    assert (verdict.numa, verdict.link, verdict.result) == ("NUMA0+NUMA1", "SYS", verdicts.FAIL)


def test_report_of_another_node_falls_back_per_gpu():
    # A report whose PCI ids match none of the pod's GPUs (stale, or another node's): topo -m decides.
    other = NodeLayout(devices=(Device(0, pci_bus_id="00000000:05:00.0", numa_node=3),), links=(("X",),))
    verdict = classify_log(container_log(SEED, [4, 5]), other, expected=2)
    assert (verdict.granted, verdict.numa, verdict.result) == (UNKNOWN, "NUMA1+NUMA1", verdicts.PASS)


def test_numa_not_applicable_judged_by_link_alone():
    # vLLM's box prints NUMA Affinity N/A on every row; as in the seed, the link decides.
    same_switch = classify_log(container_log("vllm-11122-8gpu-pix-pxb.txt", [0, 1]), None, expected=2)
    assert (same_switch.numa, same_switch.link, same_switch.result) == (
        f"{UNKNOWN}+{UNKNOWN}", "PIX", verdicts.PASS)
    across = classify_log(container_log("vllm-11122-8gpu-pix-pxb.txt", [2, 5]), None, expected=2)
    assert (across.link, across.result) == ("SYS", verdicts.FAIL)


def test_old_driver_soc_reads_as_sys():
    log = container_log("gpu-manager-6gpu-soc.txt", [1, 4])
    assert "SOC" in log
    verdict = classify_log(log, host_layout("gpu-manager-6gpu-soc.txt"), expected=2)
    assert (verdict.granted, verdict.link, verdict.result) == ("GPU1+GPU4", "SYS", verdicts.FAIL)


def test_nvlink_pair_across_sockets_fails_on_numa():
    # NV18 between every H100, but GPU0 and GPU4 sit on different NUMA nodes: the core's rule
    # needs one NUMA node, so the audit says FAIL as the verifier would.
    verdict = classify_log(container_log("sglang-30401-hgx-h100.txt", [0, 4]), None, expected=2)
    assert (verdict.numa, verdict.link, verdict.result) == ("NUMA0+NUMA1", "NV18", verdicts.FAIL)
    inside = classify_log(container_log("sglang-30401-hgx-h100.txt", [1, 2]), None, expected=2)
    assert (inside.link, inside.result) == ("NV18", verdicts.PASS)


@pytest.mark.parametrize(
    ("granted", "link", "result"),
    [([0, 1, 2, 3], "NODE", verdicts.PASS), ([2, 3, 4, 5], "SYS", verdicts.FAIL), ([0, 1, 2, 4], "SYS", verdicts.FAIL)],
)
def test_four_gpus_take_the_worst_pair(granted, link, result):
    verdict = classify_log(container_log(SEED, granted), host_layout(SEED), expected=4)
    assert (verdict.granted, verdict.link, verdict.result) == (verdicts.format_set(granted), link, result)


def test_whole_node_pod_reads_the_verbatim_fixture_with_its_noise():
    # An 8-GPU pod sees the host's own matrix: the recorded text, prompt lines and Legend included.
    log = query_csv(list(range(8)), 8) + fixture(SGLANG_5090)
    verdict = classify_log(log, host_layout(SGLANG_5090), expected=8)
    assert verdict.granted == "+".join(f"GPU{i}" for i in range(8))
    assert verdict.numa == "+".join(["NUMA0"] * 4 + ["NUMA1"] * 4)
    assert (verdict.link, verdict.result) == ("SYS", verdicts.FAIL)


def test_single_gpu_needs_no_matrix():
    verdict = classify_log(query_csv([6], 8), host_layout(SEED), expected=1)
    assert (verdict.granted, verdict.numa, verdict.link, verdict.result) == (
        "GPU6", "NUMA1", verdicts.NO_LINK, verdicts.PASS)


def test_csv_without_header_and_four_digit_domain():
    text = "0, GPU-aa, 0000:21:00.0\n1, GPU-bb, 0000:31:00.0\n"
    assert [g.pci_bus_id for g in parse_query_csv(text)] == ["00000000:21:00.0", "00000000:31:00.0"]


# ---- FAIL_PARSE: logs that do not say what the pod got


DRIVER_DOWN = (
    "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
    "Make sure that the latest NVIDIA driver is installed and running.\n"
)


@pytest.mark.parametrize(
    ("log", "why"),
    [
        ("", "no GPU rows"),
        (DRIVER_DOWN + DRIVER_DOWN, "no GPU rows"),
        ("index, uuid, pci.bus_id\n", "no GPU rows"),
        (query_csv([0, 1], 8), "topo -m"),  # the second command printed nothing
        (query_csv([0], 8) + "\tGPU0\tCPU Affinity\nGPU0\t X \t0-95\n", "saw 1 GPU"),
        (query_csv([0, 1], 8) + "\tGPU0\tGPU1\nGPU0\t X \tNODE\n", "topo -m"),  # truncated matrix
        (query_csv([0, 1], 8) + "\tGPU0\tGPU1\tGPU2\nGPU0\t X \tNODE\tNODE\nGPU1\tNODE\t X \tNODE\n"
         "GPU2\tNODE\tNODE\t X \n", "topo -m shows 3 GPUs"),
        ("0, GPU-a, 00000000:21:00.0\n0, GPU-b, 00000000:31:00.0\n", "not indexed"),
    ],
)
def test_unparsable_logs(log, why):
    with pytest.raises(LogParseError, match=why):
        classify_log(log, host_layout(SEED), expected=2)


# ---- audit.sample: annotations first, then the log, then timeout


def _annotations(result: str = verdicts.PASS) -> dict[str, str]:
    return {verdicts.GRANTED_KEY: "GPU4+GPU5", verdicts.PCI_KEY: "00000000:81:00.0+00000000:A1:00.0",
            verdicts.NUMA_KEY: "NUMA1+NUMA1", verdicts.LINK_KEY: "NODE", verdicts.P2P_KEY: "not-supported",
            verdicts.VERDICT_KEY: result}


def _decide(**overrides):
    values = dict(round_label="01", pod="p-01-1", phase="Succeeded", node="gpu-1", annotations=None,
                  log=None, layout=host_layout(SEED), expected_gpus=2, timed_out=False)
    values.update(overrides)
    return decide(**values)


def test_annotations_win_over_a_log_that_disagrees():
    sample = _decide(annotations=_annotations(), log=container_log(SEED, [3, 4]))
    assert (sample.gpu_pair, sample.topo, sample.result, sample.source) == (
        "GPU4+GPU5", "NODE", verdicts.PASS, "annotations")


def test_incomplete_annotations_fall_back_to_the_log():
    partial = _annotations()
    del partial[verdicts.LINK_KEY]
    sample = _decide(annotations=partial, log=container_log(SEED, [3, 4]))
    assert (sample.gpu_pair, sample.topo, sample.result, sample.source) == (
        "GPU3+GPU4", "SYS", verdicts.FAIL, "log")


def test_unknown_verdict_value_is_not_trusted():
    assert from_annotations({**_annotations(), verdicts.VERDICT_KEY: "MAYBE"}) is None


def test_annotation_values_cannot_break_the_tsv():
    sample = _decide(annotations={**_annotations(), verdicts.NUMA_KEY: "NUMA1\t+NUMA1\n"})
    assert sample.tsv_row().count("\t") == len(verdicts.TSV_HEADER) - 1
    assert sample.numa_pair == "NUMA1 +NUMA1"


def test_no_log_is_fail_parse_with_unknown_columns():
    sample = _decide(phase="Failed", log=None)
    assert sample.tsv_row() == "01\tp-01-1\tFailed\tUNKNOWN\tUNKNOWN\tUNKNOWN\tUNKNOWN\tFAIL_PARSE"
    assert "no log" in sample.reason


def test_timed_out_pod_is_fail_timeout_with_its_phase():
    sample = _decide(phase="Pending", timed_out=True)
    assert (sample.phase, sample.result) == ("Pending", FAIL_TIMEOUT)
    assert "Pending" in sample.reason
    # Even a pod whose grant was already annotated is a timeout: it did not finish.
    assert _decide(phase="Running", annotations=_annotations(), timed_out=True).result == FAIL_TIMEOUT


def test_gone_pod_is_unknown_phase():
    sample = _decide(phase=None, node=None)
    assert (sample.phase, sample.node, sample.result) == (UNKNOWN, "", verdicts.FAIL_PARSE)


def test_header_is_the_seeds():
    assert tsv_header() == "round\tpod\tphase\tgpu_pair\tpci_pair\tnuma_pair\ttopo\tresult"
