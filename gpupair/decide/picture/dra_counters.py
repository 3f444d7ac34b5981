"""How much of a GPU its allocated partitions take: partitionable devices (KEP-4815). Pure.

A driver that partitions GPUs publishes a counter set per GPU (``sharedCounters``, since 1.35
in a slice of their own) and devices that consume from it (``consumesCounters``): the GPU
itself consuming every counter, and each partition its part (NVIDIA's driver: one device per
MIG profile and placement, ``type: mig``). The allocator allocates a device only while what it
consumes is left, so the GPU and its partitions exclude each other. Every other device
consuming a GPU's counter set is one of that GPU's partitions.

The share of a GPU its allocated partitions take is measured in thousandths, as consumable
capacity's is (dra_capacity.py): per counter, the sum the allocated partitions consume over
the counter's value, rounded up; the GPU's is the largest. Counters named ``<stem>-<n>`` count
as one, summed: NVIDIA's driver publishes each MIG memory slice as a counter of 1
(``memory-slice-0`` .. ``memory-slice-7``) that one partition takes whole, so counted alone
each would make the smallest partition take the whole GPU. The GPU's own allocation is not
counted here: taken whole, it is taken already; shared by capacity, its capacity measures it.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from gpupair.decide.pod.pod_request import PodRequestError, parse_milli
from gpupair.decide.picture.dra_capacity import thousandths_taken
from gpupair.kubewire import dra
from gpupair.topology.shares import SharedCapacity

Key = tuple[str, str]  # (pool, device or counter set name)
INDEXED = re.compile(r"^(?P<stem>.+)-\d+$")  # memory-slice-3: one of the memory-slice counters


class CounterError(ValueError):
    """Counters that cannot be read or do not add up; the message says where."""


@dataclass(frozen=True)
class Counters:
    """A node's counter sets and what each device consumes of them, in thousandths of a unit."""

    sets: dict[Key, dict[str, int]]  # (pool, counter set) -> counter -> value
    uses: dict[Key, dict[str, dict[str, int]]]  # (pool, device) -> counter set -> counter -> consumed


def read_counters(pools: Mapping[str, Iterable[dra.ResourceSlice]]) -> Counters:
    """The counter sets and consumptions of the pools' current slices (pool name -> slices)."""
    sets: dict[Key, dict[str, int]] = {}
    uses: dict[Key, dict[str, dict[str, int]]] = {}
    for pool, slices in pools.items():
        for item in slices:
            for counter_set in item.spec.sharedCounters:
                key = (pool, counter_set.name)
                if key in sets:  # unique per pool; the apiserver checks one slice at a time
                    raise CounterError(f"DRA pool {pool} publishes counter set {counter_set.name} twice")
                sets[key] = _values(counter_set.counters, f"DRA pool {pool} counter set {counter_set.name}")
            for device in item.spec.devices:
                if device.consumesCounters:
                    uses[(pool, device.name)] = {
                        c.counterSet: _values(c.counters, f"DRA device {pool}/{device.name} consumesCounters "
                                                          f"{c.counterSet}")
                        for c in device.consumesCounters}
    return Counters(sets, uses)


def partitions_of(counters: Counters, gpus: Iterable[Key]) -> dict[Key, Key]:
    """Each partition of a GPU (a device consuming a counter set the GPU consumes) -> the GPU."""
    gpus = set(gpus)
    owner: dict[Key, Key] = {}
    for gpu in sorted(gpus):
        for name in counters.uses.get(gpu, {}):
            key = (gpu[0], name)
            if key not in counters.sets:
                raise CounterError(f"DRA device {gpu[0]}/{gpu[1]} consumes counter set {name}, "
                                   "which its pool does not publish")
            if key in owner:
                raise CounterError(f"DRA pool {gpu[0]}: GPUs {owner[key][1]} and {gpu[1]} consume counter "
                                   f"set {name}: whose partitions its devices are is unknown")
            owner[key] = gpu
    found: dict[Key, Key] = {}
    for device, used in counters.uses.items():
        if device in gpus:
            continue
        parents = {owner[(device[0], name)] for name in used if (device[0], name) in owner}
        if len(parents) > 1:
            raise CounterError(f"DRA device {device[0]}/{device[1]} consumes the counters of GPUs "
                               f"{', '.join(sorted(g[1] for g in parents))}: a partition of one GPU was expected")
        if parents:
            found[device] = parents.pop()
    return found


def taken_by_partitions(counters: Counters, partitions: Mapping[Key, Key], allocated: Iterable[Key]) -> dict[Key, int]:
    """Each partitioned GPU's share taken by its allocated partitions, in thousandths (0: none)."""
    used: dict[Key, dict[Key, dict[str, int]]] = {gpu: {} for gpu in partitions.values()}  # GPU -> set -> counter
    for device in sorted(set(allocated)):
        gpu = partitions.get(device)
        if gpu is None:
            continue
        for name, amounts in counters.uses[device].items():
            key = (device[0], name)
            if name not in counters.uses[gpu]:
                continue
            lacking = sorted(set(amounts) - set(counters.sets[key]))
            if lacking:
                raise CounterError(f"DRA device {device[0]}/{device[1]} consumes counter {lacking[0]}, "
                                   f"which counter set {name} does not have")
            total = used[gpu].setdefault(key, defaultdict(int))
            for counter, amount in amounts.items():
                total[counter] += amount
    return {gpu: max((_set_taken(counters.sets[key], amounts) for key, amounts in by_set.items()), default=0)
            for gpu, by_set in used.items()}


def _set_taken(values: Mapping[str, int], used: Mapping[str, int]) -> int:
    family_value: dict[str, int] = defaultdict(int)
    family_used: dict[str, int] = defaultdict(int)
    for counter, value in values.items():
        family = _family(counter)
        family_value[family] += value
        family_used[family] += used.get(counter, 0)
    # A counter of zero measures nothing: no device can consume from it.
    measured = tuple(SharedCapacity(family, value) for family, value in sorted(family_value.items()) if value > 0)
    return thousandths_taken(measured, family_used)


def _family(counter: str) -> str:
    match = INDEXED.match(counter)
    return match.group("stem") if match else counter


def _values(counters: Mapping[str, dra.Counter], where: str) -> dict[str, int]:
    try:
        return {name: parse_milli(counter.value, f"{where} counter {name}") for name, counter in counters.items()}
    except PodRequestError as exc:
        raise CounterError(str(exc)) from None
