"""gpupair.io/scope on the decision core, over a recorded 8x RTX A6000 box whose NVLink bridges
pair GPU0+1, 2+3, 4+5 and 6+7 (tests/fixtures/topo/unige-3741-8x-a6000-nvlink.txt): the device
plugin's pick and DRA's first fit, under required, preferred and none."""

from __future__ import annotations

from dataclasses import replace

import pytest

from gpupair.decide.judge.decisions import Decider, NodeView
from gpupair.decide.devices import pickers
from gpupair.decide.pod.intent import Intent
from gpupair.decide.devices.policies import POLICIES
from gpupair.decide.pod.scope import SCOPE_KEY, Scope, free_sets, parse_scope, pod_scope, within
from gpupair.decide.judge.verdict import classify
from gpupair.topology.layout import NodeState
from gpupair.topology.smi_topo import parse_topo_matrix
from tests.core.topology.test_smi_topo import load

A6000 = parse_topo_matrix(load("unige-3741-8x-a6000-nvlink.txt")).to_layout()
PLUGIN = Decider(policy=POLICIES["aligned"], scope=Scope.NVLINK)
ALLOCATOR = Decider(dra_policy=POLICIES["dra-first-fit"], scope=Scope.NVLINK)


def node(free, *, dra: bool = False) -> NodeView:
    return NodeView("a6000", NodeState(A6000, frozenset(free)), picker=pickers.ALLOCATOR if dra else pickers.DEVICE_PLUGIN)


def test_the_recording_pairs_gpus_by_nvlink_bridges():
    assert [a for a in range(8) for b in range(8) if a < b and A6000.link(a, b) == "NV4"] == [0, 2, 4, 6]
    assert A6000.link(1, 2) == "NODE" and A6000.link(3, 4) == "SYS"
    assert within(A6000, (2, 3), Scope.NVLINK) and not within(A6000, (1, 2), Scope.NVLINK)
    assert within(A6000, (1, 2), Scope.NUMA) and not within(A6000, (3, 4), Scope.NUMA)
    assert not within(A6000, (0, 1, 2), Scope.NVLINK), "a bridge joins two GPUs, not three"
    assert free_sets(A6000, {1, 2, 3, 5, 6, 7}, 2, Scope.NVLINK) == [(2, 3), (6, 7)]


def test_first_fit_would_take_a_bridgeless_pair_so_required_refuses_and_says_which_are_free():
    """Free {1,2,3}: DRA's first fit takes GPU1+GPU2 (NODE) though GPU2+GPU3 share a bridge."""
    decision = ALLOCATOR.decide(2, node({1, 2, 3}, dra=True), Intent.REQUIRED)
    assert not decision.passes
    assert decision.reason == ("need 2 GPUs joined by NVLink; the allocator would take GPU1+GPU2 (NODE); "
                               "free sets joined by NVLink: GPU2+GPU3")


def test_the_device_plugin_takes_the_bridged_pair_where_one_is_free():
    decision = PLUGIN.decide(2, node({1, 2, 3}), Intent.REQUIRED)
    assert decision.passes and decision.plan == (2, 3) and decision.score >= 6


def test_no_bridged_pair_free_fails_required_and_names_none():
    decision = PLUGIN.decide(2, node({1, 2, 5, 6}), Intent.REQUIRED)
    assert not decision.passes and decision.reason.endswith("free sets joined by NVLink: none")


def test_preferred_ranks_every_node_whose_pick_is_bridged_above_every_other():
    bridged = PLUGIN.decide(2, node(range(8)), Intent.PREFERRED)  # best fit low: a whole NUMA node broken
    bridgeless = PLUGIN.decide(2, node({1, 2}), Intent.PREFERRED)  # best fit high: fills NUMA0
    assert bridged.passes and bridgeless.passes
    assert bridged.score > bridgeless.score
    assert replace(PLUGIN, scope=Scope.NUMA).decide(2, node({1, 2}), Intent.PREFERRED).score > \
        replace(PLUGIN, scope=Scope.NUMA).decide(2, node(range(8)), Intent.PREFERRED).score, \
        "without the scope, best fit alone would rank them the other way"


def test_none_ignores_the_scope_and_numa_is_todays_rule():
    assert ALLOCATOR.decide(2, node({1, 2, 3}, dra=True), Intent.NONE).passes
    numa = replace(ALLOCATOR, scope=Scope.NUMA)
    assert numa.decide(2, node({1, 2, 3}, dra=True), Intent.REQUIRED) == \
        Decider(dra_policy=POLICIES["dra-first-fit"]).decide(2, node({1, 2, 3}, dra=True), Intent.REQUIRED)


def test_an_allocation_already_made_is_judged_as_it_is():
    decision = ALLOCATOR.decide_owning(2, node({1, 3}, dra=True), frozenset({1, 2}), Intent.REQUIRED)
    assert not decision.passes and "the allocator took GPU1+GPU2 (NODE)" in decision.reason
    assert ALLOCATOR.decide_owning(2, node({1}, dra=True), frozenset({2, 3}), Intent.REQUIRED).passes


def test_pcie_switch_takes_pix_and_nvlink_pairs_and_nothing_farther():
    assert within(A6000, (6, 7), Scope.PCIE_SWITCH)
    assert not within(A6000, (5, 6), Scope.PCIE_SWITCH)


@pytest.mark.parametrize("value, expected", [("nvlink", Scope.NVLINK), (" PCIe-Switch ", Scope.PCIE_SWITCH),
                                             ("numa", Scope.NUMA)])
def test_a_pods_annotation_says_its_scope(value, expected):
    assert pod_scope({"metadata": {"annotations": {SCOPE_KEY: value}}}) == (expected, "")


def test_no_annotation_is_numa_and_a_bad_one_the_strictest_with_why():
    assert pod_scope({"metadata": {}}) == (Scope.NUMA, "")
    scope, why = pod_scope({"metadata": {"annotations": {SCOPE_KEY: "nvlnk"}}})
    assert scope is Scope.NVLINK and why == ("gpupair.io/scope: 'nvlnk' is not a scope gpupair knows "
                                             "(one of numa, pcie-switch, nvlink); treated as nvlink")
    with pytest.raises(ValueError, match="one of numa, pcie-switch, nvlink"):
        parse_scope(3)


@pytest.mark.parametrize("granted, intent, result", [
    ((2, 3), Intent.REQUIRED, "PASS"), ((1, 2), Intent.REQUIRED, "FAIL"),
    ((1, 2), Intent.PREFERRED, "PASS"), ((1, 2), Intent.NONE, "PASS")])
def test_the_verdict_names_the_scope_asked_and_the_link_got(granted, intent, result):
    """GPU1+GPU2 is close (one NUMA node, NODE) but not bridged: FAIL only for a pod that
    required nvlink; PASS otherwise, the link got and the scope asked both named."""
    annotations = classify(A6000, granted, intent=intent, scope=Scope.NVLINK).annotations()
    assert (annotations["gpupair.io/verdict-scope"], annotations["gpupair.io/link"],
            annotations["gpupair.io/verdict"]) == ("nvlink", A6000.link(*granted), result)
    assert "gpupair.io/verdict-scope" not in classify(A6000, granted, intent=intent).annotations(), \
        "a pod that asked no scope reads as before"


def test_the_webhooks_pairs_find_the_bridged_pair_first_fit_would_miss():
    """dra-nvlink-pairs (the webhook's nvlink rewrite): free {1,2,3} takes GPU2+GPU3; with no
    bridged pair free it takes nothing, and required says so; or-first-fit falls back."""
    pairs = Decider(dra_policy=POLICIES["dra-nvlink-pairs"], scope=Scope.NVLINK)
    assert pairs.decide(2, node({1, 2, 3}, dra=True), Intent.REQUIRED).plan == (2, 3)
    refused = pairs.decide(2, node({0, 2, 4, 6}, dra=True), Intent.REQUIRED)
    assert not refused.passes and refused.reason == ("need 2 GPUs joined by NVLink; free sets joined by NVLink: "
                                                     "none (free: NUMA0=2 NUMA1=2)")
    fallback = replace(pairs, dra_policy=POLICIES["dra-nvlink-pairs-or-first-fit"])
    assert fallback.decide(2, node({0, 2, 4, 6}, dra=True), Intent.PREFERRED).plan == (0, 2)
