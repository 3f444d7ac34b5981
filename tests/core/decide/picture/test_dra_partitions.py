"""A DRA node whose GPUs are partitioned (KEP-4815, MIG devices consuming their GPU's counter set):
an allocated partition takes its share of the GPU in the node picture
(gpupair/decide/picture/dra_picture.py with dra_counters.py), on slices published as NVIDIA's DRA
driver publishes an A100 split by MIG (tests/dra_support.partitioned_slices, its sources there)."""

from __future__ import annotations

import pytest

from gpupair.decide.judge.decisions import Decider, NodeView
from gpupair.decide.picture.dra_picture import PictureError
from gpupair.topology.shares import MILLI
from tests.dra_support import (
    allocated_claim, dra_report as report, mig_device_name, partition_claim, partitioned_slices, share_claim,
)

NODE = "dra-node-1"


def mig(profile, start, index=2):
    return mig_device_name(index, profile, start)


def test_a_gpu_with_a_partition_allocated_is_neither_free_nor_full():
    got = report(partitioned_slices(NODE), [partition_claim("dra-probe", "a", NODE, [mig("1g.5gb", 0)])])
    assert got.layout.size == 8  # the MIG devices are not GPUs of their own
    assert got.state.free == frozenset(range(8)) - {2}
    assert got.shares is not None and got.shares.of[2] == MILLI
    assert got.shares.taken[2] == 143 and got.shares.partly_taken(2) and got.milli_left(2) == 857
    assert got.ledger.devices_of("dra-probe", "a") == {2}


def test_a_whole_gpu_pod_is_not_offered_the_partitioned_gpu():
    """Only GPU2 and GPU3 free of NUMA0's four otherwise: with a MIG partition of GPU2 allocated,
    a pair on NUMA0 is not there (it would be, with the counters ignored)."""
    busy = [allocated_claim("dra-probe", f"busy-{i}", NODE, [i]) for i in (0, 1, 4, 5, 6)]
    got = report(partitioned_slices(NODE), [*busy, partition_claim("dra-probe", "a", NODE, [mig("2g.10gb", 2)])])
    assert got.state.free == {3, 7}
    decision = Decider().decide(2, NodeView(NODE, got.state))
    assert not decision.passes and decision.reason == "need 2 GPUs on one NUMA node; free: NUMA0=1 NUMA1=1"


def test_partitions_of_several_claims_add_up_to_the_whole_gpu():
    claims = [partition_claim("dra-probe", "a", NODE, [mig("3g.20gb", 0)]),
              partition_claim("dra-probe", "b", NODE, [mig("3g.20gb", 4)])]
    got = report(partitioned_slices(NODE), claims)
    assert 2 not in got.state.free and got.shares.taken[2] == MILLI
    assert not got.shares.partly_taken(2) and got.milli_left(2) == 0


def test_a_partitioned_gpu_with_no_partition_allocated_is_free():
    got = report(partitioned_slices(NODE), [allocated_claim("dra-probe", "other", NODE, [5])])
    assert got.state.free == frozenset(range(8)) - {5}
    assert got.shares.of[2] == MILLI and got.shares.taken[2] == 0 and got.milli_left(2) == MILLI


def test_the_whole_gpu_device_allocated_takes_the_gpu():
    """gpu-2 itself consumes all of its counter set: allocated, the GPU is taken whole, as ever."""
    got = report(partitioned_slices(NODE), [allocated_claim("dra-probe", "whole", NODE, [2])])
    assert 2 not in got.state.free and got.shares.taken[2] == MILLI
    assert got.ledger.devices_of("dra-probe", "whole") == {2}


def test_a_node_without_partitions_publishes_no_shares():
    got = report(partitioned_slices(NODE, partitioned=()), [allocated_claim("dra-probe", "a", NODE, [2])])
    assert got.shares is None and got.state.free == frozenset(range(8)) - {2}


def test_capacity_and_partitions_both_consumed_the_larger_measures_the_gpu():
    def shared(slices):
        gpu = next(d for d in slices[1]["spec"]["devices"] if d["name"] == "gpu-2")
        gpu["allowMultipleAllocations"] = True
        return slices

    one_mig = partition_claim("dra-probe", "mig", NODE, [mig("1g.5gb", 6)])
    small = share_claim("dra-probe", "small", NODE, {2: "4Gi"})  # 125 of the recorded 32Gi
    large = share_claim("dra-probe", "large", NODE, {2: "16Gi"})  # 500
    assert report(shared(partitioned_slices(NODE)), [one_mig, small]).shares.taken[2] == 143
    assert report(shared(partitioned_slices(NODE)), [one_mig, large]).shares.taken[2] == 500


def test_a_counter_that_is_not_a_quantity_leaves_the_node_without_a_picture_saying_why():
    slices = partitioned_slices(NODE)
    slices[0]["spec"]["sharedCounters"][0]["counters"]["multiprocessors"]["value"] = "many"
    with pytest.raises(PictureError, match="counter set gpu-2-counter-set counter multiprocessors"):
        report(slices, [])


def test_a_missing_counter_set_leaves_the_node_without_a_picture_saying_why():
    slices = partitioned_slices(NODE)
    slices[0]["spec"]["sharedCounters"][0]["name"] = "gpu-9-counter-set"
    with pytest.raises(PictureError, match="gpu-2 consumes counter set gpu-2-counter-set, which its pool does not"):
        report(slices, [])


def test_a_pool_whose_counter_slice_is_not_in_is_incomplete():
    with pytest.raises(PictureError, match="incomplete: 1 of 2 ResourceSlices"):
        report(partitioned_slices(NODE)[1:], [])
