"""A configuration: a kube-scheduler profile, with or without gpupair, and a device-plugin policy."""

from __future__ import annotations

from dataclasses import dataclass

from gpupair.reservations import DEFAULT_TTL
from gpupair.policies import Policy, policy_named
from simulator.kube_scoring import PROFILES, Profile
from simulator.schedulers import SCHEDULERS, Scheduler

# Before profiles, kube-scheduler alone was called "default"; that name now belongs to the profile.
SCHEDULER_ALIASES = {"default": "kube"}


@dataclass(frozen=True)
class Config:
    scheduler: str  # "kube" (kube-scheduler alone) | "gpupair" (with the extender) | "gpupair-legacy"
    plugin: str  # "naive" | "aligned"
    profile: str = "default"  # a key of kube_scoring.PROFILES

    @property
    def pair(self) -> str:
        return f"{self.scheduler}+{self.plugin}"

    @property
    def name(self) -> str:
        """Unique per configuration, safe in a file name: ``<profile>.<scheduler>+<plugin>``."""
        return f"{self.profile}.{self.pair}"

    @property
    def scheduler_profile(self) -> Profile:
        return PROFILES[self.profile]

    def new_scheduler(self, reservation_ttl: float = DEFAULT_TTL) -> Scheduler:
        return SCHEDULERS[self.scheduler](self.scheduler_profile, reservation_ttl)

    @property
    def policy(self) -> Policy:
        return policy_named(self.plugin)

    @classmethod
    def parse(cls, text: str, profile: str = "default") -> "Config":
        scheduler, _, plugin = text.partition("+")
        scheduler = SCHEDULER_ALIASES.get(scheduler, scheduler)
        if scheduler not in SCHEDULERS or not plugin:
            raise ValueError(f"configuration {text!r}: expected SCHEDULER+PLUGIN, e.g. gpupair+aligned "
                             f"(schedulers: {', '.join(SCHEDULERS)})")
        if profile not in PROFILES:
            raise ValueError(f"scheduler profile {profile!r}: expected one of {', '.join(PROFILES)}")
        policy_named(plugin)
        return cls(scheduler, plugin, profile)


def split_name(name: str) -> tuple[str, str]:
    """``<profile>.<scheduler>+<plugin>`` back into profile and pair."""
    profile, _, pair = name.partition(".")
    return profile, pair


def parse_configs(configs: str, profiles: str) -> list[Config]:
    """Every SCHEDULER+PLUGIN pair under every profile, profile by profile."""
    pairs = [text.strip() for text in configs.split(",") if text.strip()]
    names = [name.strip() for name in profiles.split(",") if name.strip()]
    if not pairs or not names:
        raise ValueError("--configs and --scheduler-profile each need at least one entry")
    return [Config.parse(pair, profile) for profile in names for pair in pairs]


# The field report's comparison, plus gpupair: kube-scheduler with the old and the new plugin,
# then gpupair's filter and score in front of the new plugin.
DEFAULT_PAIRS = "kube+naive,kube+aligned,gpupair+aligned"
DEFAULT_CONFIGS = tuple(Config.parse(pair) for pair in DEFAULT_PAIRS.split(","))
