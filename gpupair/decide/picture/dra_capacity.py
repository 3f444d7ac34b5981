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

A claim asking a share (``capacity.requests``) is sized the way v1.36's allocator
(dynamic-resource-allocation/structured, ``CmpRequestOverCapacity``) sizes it on a device: each
capacity the request names (by the key the slice publishes, exactly) is rounded up to the
capacity's ``requestPolicy`` (below ``validRange.min``: the min; else up to a whole ``step`` from
it; or up to the first of ``validValues`` that holds it), each it does not name takes the
policy's ``default``, else all of it; a device whose policy the amount breaks (past ``max``, off
a step, not one of ``validValues``), or that lacks a capacity asked, or has too little, cannot
serve it. The share is then what it consumes, in thousandths as above (``share_milli``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping

from gpupair.decide.pod.pod_request import PodRequestError, parse_milli
from gpupair.kubewire import dra
from gpupair.topology.shares import MILLI, SharedCapacity

Asked = tuple[tuple[str, int], ...]  # a request's capacity.requests: (name as written, thousandths), sorted


class CapacityError(ValueError):
    """A capacity or a consumed amount that is not a quantity; the message says where."""


def qualified(name: str, driver: str) -> str:
    """A capacity's name with its domain: a short name is the driver's own (as for attributes),
    and consumedCapacity may write either form."""
    return name if "/" in name else f"{driver}/{name}"


def shared_capacity(device: dra.SliceDevice, driver: str) -> tuple[SharedCapacity, ...] | None:
    """The device's capacities (amounts in thousandths of their unit) where several allocations
    may share it and each can be measured; None where an allocation takes it whole."""
    if not device.allowMultipleAllocations or not device.capacity:
        return None
    found = tuple(sorted(_capacity(name, capacity, driver, f"{device.name} capacity {name}")
                         for name, capacity in device.capacity.items()))
    return None if any(capacity.value <= 0 for capacity in found) else found


def _capacity(name: str, capacity: dra.DeviceCapacity, driver: str, where: str) -> SharedCapacity:
    policy = capacity.requestPolicy
    limits = policy.validRange if policy is not None else None

    def amount(quantity: str | None, field: str) -> int | None:
        return None if quantity is None else _milli(quantity, f"{where} requestPolicy {field}")

    return SharedCapacity(
        qualified(name, driver), _milli(capacity.value, where), name,
        default=amount(policy.default, "default") if policy is not None else None,
        valid_values=tuple(_milli(v, f"{where} requestPolicy validValues") for v in policy.validValues)
        if policy is not None else (),
        minimum=amount(limits.min, "validRange.min") if limits is not None else None,
        maximum=amount(limits.max, "validRange.max") if limits is not None else None,
        step=amount(limits.step, "validRange.step") if limits is not None else None)


def capacity_asked(requests: Mapping[str, str], where: str) -> Asked:
    """A request's ``capacity.requests`` in thousandths; CapacityError for an amount that is not
    a quantity."""
    return tuple(sorted((name, _milli(quantity, f"{where} capacity.requests {name}"))
                        for name, quantity in requests.items()))


def consumed_by(capacity: tuple[SharedCapacity, ...], asked: Asked) -> dict[str, int] | None:
    """What one allocation of a request asking ``asked`` consumes of a free device with
    ``capacity`` (qualified name -> thousandths); None where the device cannot serve it."""
    wanted = dict(asked)
    if not set(wanted) <= {each.published for each in capacity}:
        return None  # the allocator skips a device lacking a capacity asked
    used = {}
    for each in capacity:
        requested = wanted.get(each.published)
        amount = _rounded(requested, each)
        if _breaks_policy(amount, each):
            return None
        if amount > each.value:
            return None
        used[each.name] = amount
    return used


def share_milli(capacity: tuple[SharedCapacity, ...], asked: Asked) -> int | None:
    """The share of a free device with ``capacity`` one allocation asking ``asked`` takes, in
    thousandths (what the score grades it by); None where the device cannot serve it."""
    used = consumed_by(capacity, asked)
    return None if used is None else thousandths_taken(capacity, used)


def pending_share(shares: int, asked: Asked, common: tuple[SharedCapacity, ...] | None) -> tuple[int, int] | None:
    """Where a pending pod's ``shares`` shares asking ``asked`` are counted, as (GPUs, thousandths
    of each): one GPU at their sizes summed (at most a whole GPU), sized on ``common``, the
    cluster's most common GPU shared by capacity; with none, a whole GPU a share, as the allocator
    gives one there; None where ``common`` cannot serve them. ``snapshot`` and ``defrag`` count them
    so."""
    if common is None:
        return shares, MILLI
    size = share_milli(common, asked)
    return None if size is None else (1, min(MILLI, shares * size))


def _has_policy(capacity: SharedCapacity) -> bool:
    return capacity.default is not None or bool(capacity.valid_values) or capacity.minimum is not None \
        or capacity.maximum is not None or capacity.step is not None


def _units(milli: int) -> int:
    """Quantity.Value(): the amount rounded up to a whole unit, as the allocator's integer path
    reads a range's bounds and the amount it rounds."""
    return -(-milli // MILLI)


def _rounded(requested: int | None, capacity: SharedCapacity) -> int:
    """calculateConsumedCapacity: what a request consumes of one capacity, in thousandths."""
    if requested is None:
        return capacity.default if capacity.default is not None else capacity.value
    if capacity.minimum is not None:  # validRange (min is required there)
        if requested < capacity.minimum:
            return capacity.minimum
        if capacity.step is None:
            return requested
        added, step = _units(requested) - _units(capacity.minimum), _units(capacity.step)
        return (_units(capacity.minimum) + step * -(-added // step)) * MILLI
    if capacity.valid_values:
        return next((value for value in capacity.valid_values if requested <= value), requested)
    return requested


def _breaks_policy(amount: int, capacity: SharedCapacity) -> bool:
    """violatesPolicy: the default always passes; any other amount (a capacity not named with no
    default consumes all of it) is checked against the range or the values."""
    if not _has_policy(capacity) or (capacity.default is not None and amount == capacity.default):
        return False
    if capacity.minimum is not None or capacity.maximum is not None or capacity.step is not None:
        if capacity.maximum is not None and amount > capacity.maximum:
            return True
        return capacity.step is not None and \
            (_units(amount) - _units(capacity.minimum or 0)) % _units(capacity.step) != 0
    return bool(capacity.valid_values) and amount not in capacity.valid_values


def consumed(results: Iterable[Mapping[str, str]], driver: str, where: str) -> dict[str, int]:
    """What allocation results consume of a device, summed per capacity (thousandths)."""
    total: dict[str, int] = {}
    for result in results:
        for name, quantity in result.items():
            key = qualified(name, driver)
            total[key] = total.get(key, 0) + _milli(quantity, f"{where} consumedCapacity {name}")
    return total


def share_taken(capacity: tuple[SharedCapacity, ...], results: Iterable[Mapping[str, str]], driver: str,
                where: str) -> int:
    """The thousandths of a device with ``capacity`` that allocation results consuming
    ``results`` take together: the node picture's measure of a GPU, and of one pod's part of it."""
    return thousandths_taken(capacity, consumed(results, driver, where))


def most_common_capacity(capacities: Iterable[tuple[SharedCapacity, ...] | None]
                         ) -> tuple[SharedCapacity, ...] | None:
    """The capacities most GPUs shared by capacity have (``None`` entries: GPUs not shared so),
    for sizing a share whose GPU is not known yet; on a tie the smallest, so that a share is not
    understated. None where no GPU is shared by capacity."""
    counted = Counter(capacity for capacity in capacities if capacity)
    if not counted:
        return None
    most = max(counted.values())
    return min((capacity for capacity, count in counted.items() if count == most),
               key=lambda capacity: [each.value for each in capacity])


def thousandths_taken(capacity: tuple[SharedCapacity, ...], used: Mapping[str, int]) -> int:
    """The share of the device taken, in thousandths rounded up: the most consumed capacity's."""
    taken = max((-(-MILLI * used.get(each.name, 0) // each.value) for each in capacity), default=0)
    return min(taken, MILLI)


def _milli(quantity: str, where: str) -> int:
    try:
        return parse_milli(quantity, where)
    except PodRequestError as exc:
        raise CapacityError(str(exc)) from None
