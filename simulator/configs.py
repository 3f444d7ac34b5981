"""A configuration is a scheduler model paired with a device-plugin policy."""

from __future__ import annotations

from dataclasses import dataclass

from gpupair.policies import Policy, policy_named
from simulator.schedulers import SCHEDULERS, Scheduler


@dataclass(frozen=True)
class Config:
    scheduler: str  # "default" | "gpupair"
    plugin: str  # "naive" | "aligned"

    @property
    def name(self) -> str:
        return f"{self.scheduler}+{self.plugin}"

    def new_scheduler(self) -> Scheduler:
        return SCHEDULERS[self.scheduler]()

    @property
    def policy(self) -> Policy:
        return policy_named(self.plugin)

    @classmethod
    def parse(cls, text: str) -> "Config":
        scheduler, _, plugin = text.partition("+")
        if scheduler not in SCHEDULERS or not plugin:
            raise ValueError(f"configuration {text!r}: expected SCHEDULER+PLUGIN, e.g. gpupair+aligned")
        policy_named(plugin)
        return cls(scheduler, plugin)


# The field report's comparison, plus gpupair: default scheduler with the old and the new
# plugin, then gpupair's filter and score in front of the new plugin.
DEFAULT_CONFIGS = (Config("default", "naive"), Config("default", "aligned"), Config("gpupair", "aligned"))
