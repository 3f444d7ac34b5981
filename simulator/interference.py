"""What the scheduler does not control: a device plugin that picks another set than planned, and
pods created with ``spec.nodeName`` already set (DaemonSets, pinned pods, other schedulers).

Both make the extender's picture of a node wrong until the node reports. With the allocation
ledger the next report puts it right; the accounting from before the ledger (``gpupair-legacy``)
keeps a wrong guess until its devices all show taken or its TTL runs out.
"""

from __future__ import annotations

import itertools
import random
from dataclasses import dataclass

from gpupair.decide.judge.reservations import DEFAULT_TTL
from gpupair.topology.layout import NodeLayout
from gpupair.decide.devices.policies import Policy


@dataclass(frozen=True)
class Interference:
    plugin_deviation: float = 0.0  # chance the device plugin picks another set than its policy's
    pinned_share: float = 0.0  # share of pods created with a node already set, bypassing the scheduler
    reservation_ttl: float = DEFAULT_TTL  # seconds: when a hold nothing ended expires

    def __post_init__(self) -> None:
        for name in ("plugin_deviation", "pinned_share"):
            value = getattr(self, name)
            if not 0.0 <= value <= 1.0:
                raise ValueError(f"--{name.replace('_', '-')} must be between 0 and 1, not {value:g}")
        if self.reservation_ttl <= 0:
            raise ValueError("--reservation-ttl must be positive")

    def plugin(self, policy: Policy, rng: random.Random) -> "DevicePlugin":
        return DevicePlugin(policy, self.plugin_deviation, rng)

    def describe(self) -> str:
        """For the run's header line; empty when nothing interferes."""
        parts = []
        if self.plugin_deviation:
            parts.append(f"plugin deviates {100 * self.plugin_deviation:g}%")
        if self.pinned_share:
            parts.append(f"{100 * self.pinned_share:g}% pinned by nodeName")
        if parts or self.reservation_ttl != DEFAULT_TTL:
            parts.append(f"hold TTL {self.reservation_ttl:g} s")
        return ", ".join(parts)


@dataclass
class DevicePlugin:
    """The simulated device plugin: its policy's pick, or with chance ``deviation`` another valid
    set of the free GPUs, as tight (as few NUMA nodes) as the policy's when one exists. A plugin
    that follows another policy than the extender predicts with, or breaks ties its own way,
    deviates like this; it never grants a worse set, so deviation changes the accounting only."""

    policy: Policy
    deviation: float = 0.0
    rng: random.Random | None = None
    deviated: int = 0  # grants that were not the policy's pick

    @property
    def name(self) -> str:
        return self.policy.name

    def pick(self, layout: NodeLayout, free: frozenset[int], k: int) -> tuple[int, ...] | None:
        chosen = self.policy.pick(layout, free, k)
        if not chosen or not self.deviation or self.rng is None or self.rng.random() >= self.deviation:
            return chosen
        span = len({layout.numa_of(i) for i in chosen})
        others = [combo for combo in itertools.combinations(sorted(free), k)
                  if combo != tuple(sorted(chosen)) and len({layout.numa_of(i) for i in combo}) <= span]
        if not others:
            return chosen
        self.deviated += 1
        return self.rng.choice(others)
