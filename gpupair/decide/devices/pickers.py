"""Who picks a pod's devices on a node, as the decision core asks it.

On a device-plugin node the plugin picks when the container starts, by the policy it runs (the
extender's ``--policy``), and gpupair plans for that pick. On a node whose GPUs a DRA driver
publishes, kube-scheduler's structured allocator picks before binding, by the pod's claims: the
first fit in slice order, under whatever constraint the claims carry, and nobody can steer it.

Each ``NodeView`` carries its picker. ``Decider`` asks it which of its two policies runs there
and what a reason calls it, and never tests which path the node is on; the simulator builds its
nodes with the same two pickers.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from operator import attrgetter
from typing import Protocol

from gpupair.decide.devices.policies import Policy


class Policies(Protocol):
    """A decider's policies: the device plugin's and, for the pod's claims, the allocator's."""

    policy: Policy
    dra_policy: Policy


@dataclass(frozen=True)
class Picker:
    name: str  # as a reason names it
    # Takes the first fit in its own order, blind to topology: a close set being free does not
    # mean it takes one, so the set it would take is what is judged.
    first_fit: bool
    policy: Callable[[Policies], Policy] = field(compare=False)  # which of a decider's policies it runs


DEVICE_PLUGIN = Picker("device plugin", first_fit=False, policy=attrgetter("policy"))
ALLOCATOR = Picker("allocator", first_fit=True, policy=attrgetter("dra_policy"))
