"""Allocation policies: which free GPUs a pod asking for k is handed on a node.

The scheduler only picks the node; on the node the device plugin picks the devices. gpupair
models the two behaviours the field report compared, as small interchangeable policies that the
simulator and the extender share:

- ``naive``: the first k free devices in index order, as plugins without topology-aware
  allocation effectively do.
- ``aligned``: the NVIDIA plugin's best-effort policy (go-gpuallocator). It does not take the
  single best set greedily: it looks for the partition of *all* free GPUs into sets of size k
  with the highest total score, then returns the best set of that partition. Greedy picking can
  strand the remaining GPUs in poor sets; partition-optimal keeps future pods well placed too.
- ``dra-first-fit``: kube-scheduler's structured DRA allocator (v1.36, allocator_stable.go), which
  picks the devices itself where a DRA driver publishes the GPUs. Its depth-first search walks
  the devices in ResourceSlice order and takes the first full solution: for k devices without a
  constraint, the first k free ones in that order; with ``matchAttribute:
  resource.kubernetes.io/numaNode`` (``dra-first-fit-numa``), the first k free devices of the
  first NUMA node, in that order, that has k free. Nothing scores topology or fragmentation.
- ``dra-nvlink-pairs``: the webhook's ``nvlink`` rewrite of a 2-device request, one
  ``firstAvailable`` subrequest per NVLink-bridged pair (``nvlink-<n>``, selectors naming its
  two devices), so the allocator takes the first free bridged pair in that order, or nothing;
  ``dra-nvlink-pairs-or-first-fit`` adds the unconstrained ``any`` last (``preferred``).
"""

from __future__ import annotations

import heapq
from functools import lru_cache
from itertools import combinations
from typing import Protocol

from gpupair.topology.layout import NodeLayout


class Policy(Protocol):
    name: str

    def pick(self, layout: NodeLayout, free: frozenset[int], k: int) -> tuple[int, ...] | None:
        """The device indices granted to a pod asking k, or None when fewer than k are free."""


class NaivePolicy:
    name = "naive"

    def pick(self, layout: NodeLayout, free: frozenset[int], k: int) -> tuple[int, ...] | None:
        if k <= 0:
            return ()
        if len(free) < k:
            return None
        return tuple(sorted(free)[:k])


class AlignedPolicy:
    """The best-effort policy, with its tie-breaking: among equal scores the first partition in
    the plugin's enumeration order wins, then the first best set within it.

    The plugin enumerates every partition (15!! = 2 million for 16 GPUs in pairs); this finds
    the same first-best partition by memoised search over the remaining devices, which visits
    each subset once, skips a set that cannot reach the best found so far, and never enumerates
    sets that would split the padding. On 16 free GPUs the worst case is about 2 s (a 5- or
    6-GPU pod, nothing cached), pods of 2, 4 or 8 GPUs take milliseconds (bench/placement.py). One deliberate difference: a padding set (the leftover when the free count
    is not a multiple of k) is never returned, since it holds fewer than k real devices.
    """

    name = "aligned"

    def pick(self, layout: NodeLayout, free: frozenset[int], k: int) -> tuple[int, ...] | None:
        if k <= 0:
            return ()
        if len(free) < k:
            return None
        ordered = tuple(sorted(free))
        if k == 1:
            # The plugin's partitions are singletons scoring 0: the first one stays best.
            return (ordered[0],)
        # The whole matrix is the cache key: hashing it costs far less than cutting out the free
        # devices' rows on every call, which only a miss needs.
        return _best_set(layout.pair_weights, k, ordered)


@lru_cache(maxsize=65536)
def _best_set(
    pair_weights: tuple[tuple[int, ...], ...], k: int, ordered: tuple[int, ...]
) -> tuple[int, ...]:
    weights = tuple(tuple(pair_weights[a][b] for b in ordered) for a in ordered)  # the free devices' own
    n = len(ordered)
    padding = (-n) % k
    total = n + padding  # positions >= n are padding ("nil" devices scoring 0)
    pad_mask = ((1 << total) - 1) ^ ((1 << n) - 1)
    bits = [1 << p for p in range(total)]
    set_scores: dict[int, int] = {}

    def set_score(members: int) -> int:
        found = set_scores.get(members)
        if found is None:
            real = [p for p in range(n) if members & bits[p]]
            found = sum(weights[a][b] for i, a in enumerate(real) for b in real[i + 1 :])
            set_scores[members] = found
        return found

    # Twice an upper bound on what a set of devices can score in any partition: each device at
    # best joins its k-1 strongest links, and each link counts for both of its ends. A candidate
    # set whose score plus this bound on the rest falls strictly below the best found so far can
    # neither beat nor tie it, so skipping it changes no answer (ties still go to the first in the
    # plugin's order); it only spares the search the rest's sub-problems.
    strongest = {bits[p]: sum(sorted((weights[p][q] for q in range(n) if q != p), reverse=True)[: k - 1])
                 if p < n else 0 for p in range(total)}

    real_bits = bits[:n]
    pad_bits = tuple(bits[n:])

    def candidates(rest: list[int], pads_left: int):
        """The head's possible companions in the plugin's order (combinations of the positions,
        padding last), less those that split the padding, which the plugin keeps in one set.
        They are generated, not filtered: the padding is up to k-1 positions, and enumerating
        combinations through them grew to tens of seconds on 16 GPUs."""
        plain = combinations(rest, k - 1)
        if not pads_left or k - 1 < padding:
            return plain
        padded = (others + pad_bits for others in combinations(rest, k - 1 - padding))
        return heapq.merge(plain, padded)  # both in lexicographic order; so is the merge

    # remaining devices (bit mask) -> (best score, the first set achieving it)
    memo: dict[int, tuple[int, int]] = {}

    def best(remaining: int) -> int:
        if remaining.bit_count() == k:
            memo[remaining] = (set_score(remaining), remaining)
            return memo[remaining][0]
        if remaining in memo:
            return memo[remaining][0]
        head = remaining & -remaining  # always a real device: padding alone never fills a set
        rest = [b for b in real_bits if remaining & b and b != head]
        bound_rest = sum(strongest[b] for b in rest)  # twice the bound, with the head taken
        top, top_set = -1, 0
        for others in candidates(rest, remaining & pad_mask):
            members = head | sum(others)
            own = set_score(members)
            if 2 * own + bound_rest - sum(strongest[b] for b in others) < 2 * top:
                continue
            score = own + best(remaining ^ members)
            if score > top:  # strictly greater: the first best in the plugin's order wins
                top, top_set = score, members
        memo[remaining] = (top, top_set)
        return top

    remaining = (1 << total) - 1
    best(remaining)
    chosen, chosen_score = 0, -1
    while remaining:
        members = memo[remaining][1]
        if not members & pad_mask and set_score(members) > chosen_score:
            chosen, chosen_score = members, set_score(members)
        remaining ^= members
    return tuple(ordered[p] for p in range(n) if chosen & bits[p])


class FirstFitPolicy:
    """The structured allocator's pick for one request of k devices (``same_numa``: under a
    numaNode constraint). A device without a NUMA node fails the constraint, as a device without
    the attribute does. Checked against a transcription of allocateOne in
    tests/core/decide/devices/test_dra_first_fit.py."""

    def __init__(self, same_numa: bool = False):
        self.same_numa = same_numa
        self.name = "dra-first-fit-numa" if same_numa else "dra-first-fit"

    def pick(self, layout: NodeLayout, free: frozenset[int], k: int) -> tuple[int, ...] | None:
        if k <= 0:
            return ()
        order = [i for i in layout.walk_order if i in free]
        if len(order) < k:
            return None
        if not self.same_numa:
            return tuple(sorted(order[:k]))
        for position, first in enumerate(order):
            numa = layout.devices[first].numa_node
            if numa < 0:
                continue
            mates = [i for i in order[position + 1:] if layout.devices[i].numa_node == numa]
            if len(mates) >= k - 1:
                return tuple(sorted([first, *mates[:k - 1]]))
        return None


class FirstAvailablePolicy:
    """A ``firstAvailable`` request of a constrained subrequest, then the same unconstrained
    (the webhook's ``preferred`` rewrite): the allocator tries the first on the node and falls
    back to the second."""

    name = "dra-first-available"

    def pick(self, layout: NodeLayout, free: frozenset[int], k: int) -> tuple[int, ...] | None:
        return FirstFitPolicy(same_numa=True).pick(layout, free, k) or FirstFitPolicy().pick(layout, free, k)


class NvlinkPairsPolicy:
    """The first free NVLink-bridged pair in index order, as the webhook lists the pairs
    (``--nvlink-pairs``, which must name the node's bridges: the prediction reads the node's
    measured links); ``or_first_fit``: else the first fit, as the ``any`` subrequest takes."""

    def __init__(self, or_first_fit: bool = False):
        self.or_first_fit = or_first_fit
        self.name = "dra-nvlink-pairs-or-first-fit" if or_first_fit else "dra-nvlink-pairs"

    def pick(self, layout: NodeLayout, free: frozenset[int], k: int) -> tuple[int, ...] | None:
        if k == 2:
            for pair in combinations(sorted(free), 2):
                if layout.link(*pair).startswith("NV"):
                    return pair
        return FirstFitPolicy().pick(layout, free, k) if self.or_first_fit or k != 2 else None


POLICIES: dict[str, Policy] = {
    "naive": NaivePolicy(), "aligned": AlignedPolicy(),
    "dra-first-fit": FirstFitPolicy(), "dra-first-fit-numa": FirstFitPolicy(same_numa=True),
    "dra-first-available": FirstAvailablePolicy(),
    "dra-nvlink-pairs": NvlinkPairsPolicy(), "dra-nvlink-pairs-or-first-fit": NvlinkPairsPolicy(or_first_fit=True),
}



def policy_named(name: str) -> Policy:
    try:
        return POLICIES[name]
    except KeyError:
        raise ValueError(f"unknown device-plugin policy {name!r}; known: {sorted(POLICIES)}") from None
