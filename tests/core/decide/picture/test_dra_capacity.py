"""A DRA node's GPUs shared through consumable capacity (KEP-5075; gpupair/decide/picture/dra_capacity.py):
the shares taken come from the allocation results' consumedCapacity, on objects shaped as the real
v1.36 apiserver stores them (the recorded slice and claims, with the v1.36 fields added)."""

from __future__ import annotations

import pytest

from gpupair.decide.judge.decisions import Decider, NodeView
from gpupair.decide.picture.dra_picture import PictureError
from gpupair.topology.shares import MILLI
from tests.dra_support import allocated_claim, dra_report as report, node_slice, share_claim, shared_slice

NODE = "dra-node-1"


def test_a_partly_consumed_gpu_is_neither_free_nor_full():
    claims = [share_claim("dra-probe", "a", NODE, {2: "8Gi"}), share_claim("dra-probe", "b", NODE, {2: "4Gi"})]
    got = report([shared_slice(NODE)], claims)
    assert 2 not in got.state.free and got.state.free == frozenset(range(8)) - {2}
    assert got.shares is not None and got.shares.of[2] == MILLI
    assert got.shares.taken[2] == 375 and got.shares.partly_taken(2)  # 12Gi of 32Gi
    assert got.milli_left(2) == 625 and got.milli_left(0) == MILLI
    assert got.ledger.devices_of("dra-probe", "a") == got.ledger.devices_of("dra-probe", "b") == {2}


def test_a_whole_gpu_pod_is_not_offered_the_partly_consumed_gpu():
    """Only GPU2 and GPU3 free of NUMA0's four otherwise: with GPU2 partly consumed, a pair on
    NUMA0 is not there (it would be, with the consumed capacity ignored)."""
    busy = [allocated_claim("dra-probe", f"busy-{i}", NODE, [i]) for i in (0, 1, 4, 5, 6)]
    claims = [*busy, share_claim("dra-probe", "a", NODE, {2: "1Gi"})]
    slices = [shared_slice(NODE)]
    got = report(slices, claims)
    assert got.state.free == {3, 7}
    decision = Decider().decide(2, NodeView(NODE, got.state))
    assert not decision.passes and decision.reason == "need 2 GPUs on one NUMA node; free: NUMA0=1 NUMA1=1"


def test_a_fully_consumed_gpu_is_taken_and_not_shared():
    got = report([shared_slice(NODE)], [share_claim("dra-probe", "a", NODE, {5: "20Gi"}),
                                        share_claim("dra-probe", "b", NODE, {5: "12Gi"})])
    assert 5 not in got.state.free and got.shares.taken[5] == MILLI
    assert not got.shares.partly_taken(5) and got.milli_left(5) == 0


def test_shares_round_up_to_a_thousandth():
    got = report([shared_slice(NODE, memory="3Gi")], [share_claim("dra-probe", "a", NODE, {0: "1Gi"})])
    assert got.shares.taken[0] == 334 and got.milli_left(0) == 666


def test_a_shareable_gpu_with_nothing_consumed_is_free():
    got = report([shared_slice(NODE)], [share_claim("dra-probe", "a", NODE, {4: "0"})])
    assert got.state.free == frozenset(range(8)) and got.shares.taken == (0,) * 8
    assert report([shared_slice(NODE)], []).state.free == frozenset(range(8))


def test_a_whole_allocation_of_a_shareable_gpu_takes_it_whole():
    """A result without consumedCapacity (written before the device was shareable) takes the GPU."""
    got = report([shared_slice(NODE)], [allocated_claim("dra-probe", "old", NODE, [6])])
    assert 6 not in got.state.free and got.shares.taken[6] == MILLI and got.milli_left(6) == 0


def test_the_most_consumed_capacity_measures_the_share():
    obj = shared_slice(NODE)
    obj["spec"]["devices"][1]["capacity"]["gpu.nvidia.com/cores"] = {"value": "100"}
    claim = share_claim("dra-probe", "a", NODE, {1: "4Gi"})
    claim["status"]["allocation"]["devices"]["results"][0]["consumedCapacity"]["gpu.nvidia.com/cores"] = "50"
    got = report([obj], [claim])
    assert got.shares.taken[1] == 500  # cores half taken, memory an eighth: what is left is half


def test_capacity_names_match_with_or_without_the_drivers_domain():
    claim = share_claim("dra-probe", "a", NODE, {3: "16Gi"})
    result = claim["status"]["allocation"]["devices"]["results"][0]
    result["consumedCapacity"] = {"gpu.nvidia.com/memory": "16Gi"}
    assert report([shared_slice(NODE)], [claim]).shares.taken[3] == 500


def test_devices_not_shareable_are_taken_whole_and_publish_no_shares():
    """The recorded slice lists a memory capacity without allowMultipleAllocations: an exclusive GPU."""
    got = report([node_slice(NODE)], [allocated_claim("dra-probe", "a", NODE, [2])])
    assert got.shares is None and got.state.free == frozenset(range(8)) - {2}


def test_a_capacity_that_is_not_a_quantity_leaves_no_picture():
    obj = shared_slice(NODE)
    obj["spec"]["devices"][0]["capacity"]["memory"]["value"] = "lots"
    with pytest.raises(PictureError, match="gpu-0 capacity memory"):
        report([obj], [])
    claim = share_claim("dra-probe", "a", NODE, {0: "some"})
    with pytest.raises(PictureError, match="consumedCapacity memory"):
        report([shared_slice(NODE)], [claim])


def test_the_most_common_capacity_sizes_an_unplaced_share_and_a_tie_takes_the_smaller_gpu():
    from gpupair.decide.picture.dra_capacity import most_common_capacity
    from gpupair.topology.shares import SharedCapacity

    small, large = (SharedCapacity("gpu.nvidia.com/memory", 16 * 2**30 * 1000),), \
        (SharedCapacity("gpu.nvidia.com/memory", 32 * 2**30 * 1000),)
    assert most_common_capacity([large, None, large, small]) == large
    assert most_common_capacity([large, small, None]) == small  # a share is not understated
    assert most_common_capacity([None, None]) is None
