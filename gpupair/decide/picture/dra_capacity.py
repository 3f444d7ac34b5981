"""How much of a shared DRA device its allocations take: consumable capacity (KEP-5075). Pure.

A device published with ``allowMultipleAllocations: true`` is not taken whole by one allocation:
kube-scheduler's allocator gives each request a share, writes what the share consumes of every
capacity of the device into the result's ``consumedCapacity`` (rounded up to the capacity's
``requestPolicy``; a capacity a request does not ask with no policy is consumed whole), and
allocates again while every capacity has room.

The share taken is measured in thousandths of the device: per capacity, the sum of what the
results consume over the device's ``value``, rounded up; the device's is the largest of these.
A whole-GPU request consumes every capacity it does not ask in full, so anything consumed of any
capacity keeps the GPU from being whole; and what is left for one more share is bounded by its
scarcest capacity. NVIDIA's driver and the KEP's examples publish ``memory`` alone, where this is
the memory taken. Nothing consumed: the device is free. Shared but with no capacity to measure by
(none published, or one of zero): any allocation takes it whole, as before KEP-5075.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from gpupair.decide.pod.pod_request import PodRequestError, parse_milli
from gpupair.kubewire import dra
from gpupair.topology.shares import MILLI


class CapacityError(ValueError):
    """A capacity or a consumed amount that is not a quantity; the message says where."""


def qualified(name: str, driver: str) -> str:
    """A capacity's name with its domain: a short name is the driver's own (as for attributes),
    and consumedCapacity may write either form."""
    return name if "/" in name else f"{driver}/{name}"


def shared_capacity(device: dra.SliceDevice, driver: str) -> tuple[tuple[str, int], ...] | None:
    """The device's capacities (qualified name, value in thousandths of its unit) where several
    allocations may share it and each can be measured; None where an allocation takes it whole."""
    if not device.allowMultipleAllocations or not device.capacity:
        return None
    values = tuple(sorted((qualified(name, driver), _milli(capacity.value, f"{device.name} capacity {name}"))
                          for name, capacity in device.capacity.items()))
    return None if any(value <= 0 for _, value in values) else values


def consumed(results: Iterable[Mapping[str, str]], driver: str, where: str) -> dict[str, int]:
    """What allocation results consume of a device, summed per capacity (thousandths)."""
    total: dict[str, int] = {}
    for result in results:
        for name, quantity in result.items():
            key = qualified(name, driver)
            total[key] = total.get(key, 0) + _milli(quantity, f"{where} consumedCapacity {name}")
    return total


def thousandths_taken(capacity: tuple[tuple[str, int], ...], used: Mapping[str, int]) -> int:
    """The share of the device taken, in thousandths rounded up: the most consumed capacity's."""
    taken = max((-(-MILLI * used.get(name, 0) // value) for name, value in capacity), default=0)
    return min(taken, MILLI)


def _milli(quantity: str, where: str) -> int:
    try:
        return parse_milli(quantity, where)
    except PodRequestError as exc:
        raise CapacityError(str(exc)) from None
