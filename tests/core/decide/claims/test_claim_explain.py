"""gpupair's reason a claim pod's GPUs fit no DRA node (gpupair/decide/claims/claim_explain.py), on the
recorded slice (one pcieRoot per GPU) and claims: which constraint, which nodes, the free sets."""

from __future__ import annotations

import copy

from gpupair.decide.claims.claim_explain import why_unallocatable
from gpupair.decide.picture.dra_source import DraNodes
from gpupair.decide.picture.node_entries import ReportDecoder
from tests.dra_support import DRIVER, allocated_claim, busy_claims, node_slice

PCIE_ROOT = "resource.kubernetes.io/pcieRoot"


def pending_claim(name: str, count: int, constraint: str | None) -> dict:
    """A claim of ``count`` GPUs not allocated yet (the recorded plain claim, reshaped)."""
    claim = allocated_claim("team", name, "n1", range(count), constraint=constraint)
    claim.pop("status")
    return claim


def pod_with(*claims: str) -> dict:
    return {"metadata": {"namespace": "team", "name": "p", "uid": "u"},
            "spec": {"resourceClaims": [{"name": c, "resourceClaimName": c} for c in claims]}}


def source(*claims: dict) -> DraNodes:
    nodes = DraNodes(DRIVER, ReportDecoder(120.0), lambda: 0.0)
    nodes.slices.replace([node_slice("n1"), node_slice("n2")])
    nodes.claims.replace([*busy_claims("n1", {0, 1, 2, 5, 6, 7}), *busy_claims("n2", range(8)), *claims])
    return nodes


def test_a_constraint_no_node_meets_is_named_with_the_free_sets():
    nodes = source(pending_claim("pair", 2, PCIE_ROOT))
    assert nodes.why_unallocatable(pod_with("pair")) == (
        "gpupair: no DRA node can allocate this pod's claims: need 2 GPUs with one "
        "resource.kubernetes.io/pcieRoot; n1: free GPU3 (pci0000:60) | GPU4 (pci0000:80); n2: none free")


def test_too_few_free_without_a_constraint():
    nodes = source(pending_claim("four", 4, None))
    assert nodes.why_unallocatable(pod_with("four")) == (
        "gpupair: no DRA node can allocate this pod's claims: need 4 GPUs; n1: free GPU3+GPU4; n2: none free")


def test_no_reason_where_some_node_could_hold_them():
    """Then the extender was asked, and kube-scheduler's message carries its reason already."""
    nodes = source(pending_claim("pair", 2, None))
    assert nodes.why_unallocatable(pod_with("pair")) == ""
    assert nodes.why_unallocatable(pod_with("not-watched-yet")) == ""


def test_a_device_without_the_attribute_joins_no_set():
    free = {"n": [("GPU0", {PCIE_ROOT: "a"}), ("GPU1", {PCIE_ROOT: None}), ("GPU2", {PCIE_ROOT: "a"})]}
    assert why_unallocatable(2, (PCIE_ROOT,), free) == ""
    assert why_unallocatable(3, (PCIE_ROOT,), copy.deepcopy(free)).endswith("n: free GPU0+GPU2 (a)")
