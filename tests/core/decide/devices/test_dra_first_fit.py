"""The DRA allocator's pick (gpupair.decide.devices.policies.FirstFitPolicy) against a literal transcription of
kube-scheduler's structured allocator walk (v1.36, staging/src/k8s.io/dynamic-resource-allocation/
structured/internal/stable/allocator_stable.go, allocateOne), for one claim with one request."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from gpupair.topology.layout import NO_NUMA, Device, NodeLayout
from gpupair.decide.devices.policies import POLICIES, FirstFitPolicy
from tests.layouts import seed_layout


def allocate_one(pools, in_use, num_devices, match_attribute):
    """allocateOne for claim 0, request 0: ``pools`` is [[slice devices, ...], ...] of
    (name, numaNode or None); returns the device names of the first full solution, or None.

    Transcribed step by step: past the last device the request is done; otherwise every device
    of every pool, slice by slice, in order: skip one in use; allocateDevice checks the
    constraint (the first device sets the attribute's value, later ones must match it; a device
    without the attribute fails); on success recurse for the next device; on failure deallocate
    and go on."""
    allocating = []
    constraint_value = [None]  # matchAttributeConstraint.attribute

    def constraint_add(numa):
        if not match_attribute:
            return True
        if numa is None:
            return False
        if constraint_value[0] is None:
            constraint_value[0] = numa
            return True
        return constraint_value[0] == numa

    def constraint_remove():
        if match_attribute and len(allocating) == 0:
            constraint_value[0] = None

    def recurse(device_index):
        if device_index >= num_devices:
            return True
        for pool in pools:
            for slice_devices in pool:
                for name, numa in slice_devices:
                    if name in in_use or name in allocating:
                        continue
                    if not constraint_add(numa):
                        continue
                    allocating.append(name)
                    if recurse(device_index + 1):
                        return True
                    allocating.pop()
                    constraint_remove()
        return False

    return list(allocating) if recurse(0) else None


@st.composite
def nodes(draw):
    n = draw(st.integers(1, 10))
    numas = draw(st.lists(st.sampled_from([0, 1, 2, None]), min_size=n, max_size=n))
    walk = draw(st.permutations(range(n)))
    cut = draw(st.integers(0, n))  # two slices of one pool
    free = draw(st.sets(st.integers(0, n - 1)))
    k = draw(st.integers(1, n + 1))
    return numas, list(walk), cut, frozenset(free), k


def layout_of(numas, walk):
    n = len(numas)
    devices = tuple(Device(index=i, numa_node=NO_NUMA if numa is None else numa) for i, numa in enumerate(numas))
    links = tuple(tuple("X" if i == j else ("NODE" if numas[i] == numas[j] and numas[i] is not None else "SYS")
                        for j in range(n)) for i in range(n))
    return NodeLayout(devices=devices, links=links, walk=tuple(walk) if walk != list(range(n)) else None)


@settings(max_examples=400, deadline=None)
@given(nodes(), st.booleans())
def test_first_fit_is_the_allocators_first_solution(node, same_numa):
    numas, walk, cut, free, k = node
    layout = layout_of(numas, walk)
    ordered = [(f"gpu-{i}", numas[i]) for i in walk]
    pools = [[ordered[:cut], ordered[cut:]]]
    in_use = {f"gpu-{i}" for i in range(len(numas)) if i not in free}
    expected = allocate_one(pools, in_use, k, same_numa)
    got = FirstFitPolicy(same_numa).pick(layout, free, k)
    assert got == (None if expected is None else tuple(sorted(int(name[4:]) for name in expected)))


def test_on_the_seed_board_first_fit_takes_the_cross_socket_pair_the_real_allocator_took():
    # The recorded plain-1 claim: free gpu-3 and gpu-4 only among NUMA0 {0..3}, NUMA1 {4..7}
    layout = seed_layout()
    assert POLICIES["dra-first-fit"].pick(layout, frozenset({3, 4, 5}), 2) == (3, 4)
    assert POLICIES["dra-first-fit-numa"].pick(layout, frozenset({3, 4, 5}), 2) == (4, 5)
    assert POLICIES["dra-first-fit-numa"].pick(layout, frozenset({3, 4}), 2) is None


def test_the_walk_order_not_the_index_decides():
    layout = replace(seed_layout(), walk=(4, 5, 6, 7, 0, 1, 2, 3))
    assert POLICIES["dra-first-fit"].pick(layout, frozenset(range(8)), 2) == (4, 5)
