"""audit.summary: the closing table, per node and in total."""

from __future__ import annotations

from gpupair.audit.sample import FAIL_TIMEOUT, Sample
from gpupair.audit.summary import TOTAL, UNSCHEDULED, format_summary, summarize, verdict_line


def _sample(node: str, topo: str, result: str) -> Sample:
    return Sample("01", "p", "Succeeded", node, "GPU0+GPU1", "a+b", "NUMA0+NUMA0", topo, result, "log")


def test_counts_per_node_and_total():
    samples = [
        _sample("gpu-a", "NODE", "PASS"), _sample("gpu-a", "SYS", "FAIL"), _sample("gpu-a", "PIX", "PASS"),
        _sample("gpu-b", "NODE", "PASS"), _sample("", "UNKNOWN", FAIL_TIMEOUT),
    ]
    summary = summarize(samples)
    assert list(summary.nodes) == [UNSCHEDULED, "gpu-a", "gpu-b"]
    a = summary.nodes["gpu-a"]
    assert (a.samples, a.sys_count, a.passed) == (3, 1, 2)
    assert a.links == {"NODE": 1, "SYS": 1, "PIX": 1}
    assert (summary.total.samples, summary.total.sys_count, summary.total.passed) == (5, 1, 3)
    assert summary.total.results[FAIL_TIMEOUT] == 1
    assert not summary.all_passed

    table = format_summary(summary).splitlines()
    assert table[0].split() == ["node", "samples", "SYS", "PASS", "FAIL", "FAIL_PARSE", "FAIL_TIMEOUT",
                                "PASS", "rate", "links"]
    by_name = {line.split()[0]: line.split() for line in table[1:]}
    assert by_name["gpu-a"][1:8] == ["3", "1", "2", "1", "0", "0", "66.7%"]
    assert by_name["gpu-a"][8:] == ["PIX=1", "NODE=1", "SYS=1"]  # nearest first
    assert by_name["all"][2:9] == ["5", "1", "3", "1", "0", "1", "60.0%"]  # "all nodes"
    assert by_name[UNSCHEDULED][-1] == "-"
    assert verdict_line(summary) == "5 samples, 1 SYS, 3 PASS (60.0%): 2 failed (1 timed out)"


def test_one_node_all_pass_has_no_total_row():
    summary = summarize([_sample("gpu-a", "NODE", "PASS")] * 20)
    assert summary.all_passed
    lines = format_summary(summary).splitlines()
    assert len(lines) == 2 and TOTAL not in format_summary(summary)
    assert lines[1].split()[-1] == "NODE=20"
    assert verdict_line(summary) == "20 samples, 0 SYS, 20 PASS (100.0%)"


def test_no_samples_is_not_a_pass():
    summary = summarize([])
    assert not summary.all_passed
    assert verdict_line(summary) == "no samples"
