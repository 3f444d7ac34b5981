"""What a GPU's allocated partitions take of it, from its counter set (KEP-4815;
gpupair/decide/picture/dra_counters.py), on slices published as NVIDIA's DRA driver publishes an
A100 split by MIG (tests/dra_support.partitioned_slices, its sources there)."""

from __future__ import annotations

import pytest

from gpupair.decide.picture.dra_counters import CounterError, partitions_of, read_counters, taken_by_partitions
from gpupair.kubewire import dra
from tests.dra_support import mig_device_name, partitioned_slices

NODE = "dra-node-1"
GPU2 = (NODE, "gpu-2")
GPUS = [(NODE, f"gpu-{i}") for i in range(8)]


def counters_of(slices):
    return read_counters({NODE: [dra.parse_slice(s) for s in slices]})


def taken(allocated, slices=None, gpus=GPUS):
    counters = counters_of(slices or partitioned_slices(NODE))
    return taken_by_partitions(counters, partitions_of(counters, gpus), [(NODE, d) for d in allocated])


def mig(profile, start, index=2):
    return mig_device_name(index, profile, start)


def test_every_mig_device_consuming_a_gpus_counter_set_is_a_partition_of_that_gpu():
    found = partitions_of(counters_of(partitioned_slices(NODE, partitioned=(2, 5))), GPUS)
    assert {device for device, gpu in found.items() if gpu == GPU2} == {
        (NODE, mig(p, s)) for p, s in [("1g.5gb", i) for i in range(7)] + [("2g.10gb", 0), ("2g.10gb", 2),
                                                                             ("2g.10gb", 4), ("3g.20gb", 0),
                                                                             ("3g.20gb", 4), ("7g.40gb", 0)]}
    assert set(found.values()) == {GPU2, (NODE, "gpu-5")}


def test_the_smallest_partition_takes_its_scarcest_counter_not_its_memory_slice_whole():
    """1g.5gb: 14 of 98 multiprocessors and 1 of 7 copy engines (143), 4864Mi of 40448Mi (121),
    memory-slice-0 of memory-slice-0..7 (125). Counted alone, memory-slice-0 would say 1000."""
    assert taken([mig("1g.5gb", 0)]) == {GPU2: 143}


def test_partitions_add_up_and_the_largest_counter_measures_the_gpu():
    assert taken([mig("1g.5gb", 0), mig("1g.5gb", 1)]) == {GPU2: 286}  # 28 of 98 multiprocessors
    assert taken([mig("1g.5gb", 0), mig("3g.20gb", 4)]) == {GPU2: 625}  # 5 of 8 memory slices


def test_two_halves_take_the_whole_gpu():
    """Two 3g.20gb take all eight memory slices (84 of 98 multiprocessors): nothing is left."""
    assert taken([mig("3g.20gb", 0), mig("3g.20gb", 4)]) == {GPU2: 1000}


def test_a_partitioned_gpu_with_no_partition_allocated_has_nothing_taken():
    assert taken([]) == {GPU2: 0}
    assert taken([mig("1g.5gb", 0, index=2)], partitioned_slices(NODE, partitioned=(2, 5))) == {
        GPU2: 143, (NODE, "gpu-5"): 0}


def test_the_gpus_own_allocation_is_not_counted_as_a_partition():
    assert taken(["gpu-2"]) == {GPU2: 0}


def test_a_gpu_without_partitions_is_not_measured():
    assert taken(["gpu-3"]) == {GPU2: 0}
    plain = counters_of(partitioned_slices(NODE, partitioned=()))
    assert partitions_of(plain, GPUS) == {}


def test_a_counter_that_is_not_a_quantity_is_an_error_naming_it():
    slices = partitioned_slices(NODE)
    slices[0]["spec"]["sharedCounters"][0]["counters"]["memory"]["value"] = "lots"
    with pytest.raises(CounterError, match="counter set gpu-2-counter-set counter memory: 'lots' is not a quantity"):
        counters_of(slices)


def test_a_gpu_consuming_a_counter_set_its_pool_lacks_is_an_error():
    slices = partitioned_slices(NODE)
    slices[0]["spec"]["sharedCounters"] = []
    with pytest.raises(CounterError, match="gpu-2 consumes counter set gpu-2-counter-set, which its pool"):
        taken([], slices)


def test_a_counter_set_published_twice_is_an_error():
    slices = partitioned_slices(NODE)
    slices[0]["spec"]["sharedCounters"] *= 2
    with pytest.raises(CounterError, match="publishes counter set gpu-2-counter-set twice"):
        counters_of(slices)


def test_two_gpus_consuming_one_counter_set_is_an_error():
    slices = partitioned_slices(NODE)
    gpu3 = next(d for d in slices[1]["spec"]["devices"] if d["name"] == "gpu-3")
    gpu3["consumesCounters"] = [{"counterSet": "gpu-2-counter-set", "counters": {"memory": {"value": "1"}}}]
    with pytest.raises(CounterError, match="GPUs gpu-2 and gpu-3 consume counter set gpu-2-counter-set"):
        taken([], slices)


def test_an_allocated_partition_consuming_a_counter_its_set_lacks_is_an_error():
    slices = partitioned_slices(NODE)
    device = next(d for d in slices[1]["spec"]["devices"] if d["name"] == mig("1g.5gb", 0))
    device["consumesCounters"][0]["counters"]["memory-slice-9"] = {"value": "1"}
    with pytest.raises(CounterError, match="consumes counter memory-slice-9, which counter set gpu-2-counter-set"):
        taken([mig("1g.5gb", 0)], slices)
