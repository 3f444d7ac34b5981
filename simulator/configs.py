"""A configuration: a kube-scheduler profile, with or without gpupair, and a device-plugin policy
(the device-plugin path) or the form in which pods ask for DRA devices (the DRA path)."""

from __future__ import annotations

import random
from dataclasses import dataclass

from gpupair.decide.judge.reservations import DEFAULT_TTL
from gpupair.decide.devices.policies import Policy, policy_named
from gpupair.decide.judge.decisions import Decider
from gpupair.decide.devices.pickers import ALLOCATOR
from gpupair.decide.pod.intent import Intent
from gpupair.simulator.interference import Interference
from gpupair.simulator.models.dynamic_resources import FORMS, Form, form_named
from gpupair.simulator.models.kube_scoring import PROFILES, Profile
from gpupair.simulator.models.schedulers import SCHEDULERS, Scheduler

DEVICE_PLUGIN = "device-plugin"
DRA = "dra"
PATHS = (DEVICE_PLUGIN, DRA)

# Before profiles, kube-scheduler alone was called "default"; that name now belongs to the profile.
SCHEDULER_ALIASES = {"default": "kube"}


@dataclass(frozen=True)
class Config:
    scheduler: str  # "kube" (kube-scheduler alone) | "gpupair" (with the extender) | "gpupair-legacy"
    plugin: str  # "naive" | "aligned"; on the DRA path a key of simulator.models.dynamic_resources.FORMS
    profile: str = "default"  # a key of kube_scoring.PROFILES

    @property
    def path(self) -> str:
        return DRA if self.plugin in FORMS else DEVICE_PLUGIN

    @property
    def form(self) -> Form | None:
        return FORMS.get(self.plugin)

    @property
    def pair(self) -> str:
        return f"{self.scheduler}+{self.plugin}"

    @property
    def name(self) -> str:
        """Unique per configuration, safe in a file name: ``<profile>.<scheduler>+<plugin>``."""
        return f"{self.profile}.{self.pair}"

    @property
    def honours_nic(self) -> bool:
        """gpupair's extender reads the pod's gpupair.io/nic ask (kube-scheduler alone and
        ``gpupair-nonic``, the extender before the network issue, do not)."""
        return self.scheduler not in ("kube", "gpupair-nonic")

    @property
    def scheduler_profile(self) -> Profile:
        return PROFILES[self.profile]

    def new_scheduler(self, reservation_ttl: float = DEFAULT_TTL) -> Scheduler:
        scheduler = SCHEDULERS[self.scheduler](self.scheduler_profile, reservation_ttl)
        form = self.form
        if form is not None:  # the DRA path: the allocator picks, the extender decides on it
            scheduler.dra = form
            if scheduler.extender is not None:
                scheduler.extender.decider = Decider(dra_policy=form.policy)
                scheduler.extender.picker = ALLOCATOR
        return scheduler

    @property
    def policy(self) -> Policy:
        """What picks the devices on the node: the device plugin's policy, or the allocator's."""
        form = self.form
        return form.policy if form is not None else policy_named(self.plugin)

    def intent(self, asked: Intent) -> Intent:
        """The intent the pod is decided under: on the DRA path the one the webhook wrote into
        the claim (claim-numa: required, claim-first-available: preferred), else the pod's own."""
        form = self.form
        return form.intent if form is not None and form.intent is not None else asked

    def allocator(self, interference: Interference, rng: random.Random) -> Policy:
        """What grants the devices when a pod is admitted: the device plugin, deviating as
        ``interference`` says; on the DRA path kube-scheduler's allocator, which never deviates
        from its own walk."""
        return self.policy if self.form is not None else interference.plugin(self.policy, rng)

    @classmethod
    def parse(cls, text: str, profile: str = "default", path: str = DEVICE_PLUGIN) -> "Config":
        scheduler, _, plugin = text.partition("+")
        scheduler = SCHEDULER_ALIASES.get(scheduler, scheduler)
        slot = "FORM" if path == DRA else "PLUGIN"
        if scheduler not in SCHEDULERS or not plugin:
            example = "gpupair+claim-numa" if path == DRA else "gpupair+aligned"
            raise ValueError(f"configuration {text!r}: expected SCHEDULER+{slot}, e.g. {example} "
                             f"(schedulers: {', '.join(SCHEDULERS)})")
        if profile not in PROFILES:
            raise ValueError(f"scheduler profile {profile!r}: expected one of {', '.join(PROFILES)}")
        if path == DRA:
            form_named(plugin)
        else:
            policy_named(plugin)
        return cls(scheduler, plugin, profile)


def split_name(name: str) -> tuple[str, str]:
    """``<profile>.<scheduler>+<plugin>`` back into profile and pair."""
    profile, _, pair = name.partition(".")
    return profile, pair


def parse_configs(configs: str, profiles: str, path: str = DEVICE_PLUGIN) -> list[Config]:
    """Every SCHEDULER+PLUGIN pair (on the DRA path SCHEDULER+FORM) under every profile, profile
    by profile."""
    pairs = [text.strip() for text in configs.split(",") if text.strip()]
    names = [name.strip() for name in profiles.split(",") if name.strip()]
    flag = "--dra-configs" if path == DRA else "--configs"
    if not pairs or not names:
        raise ValueError(f"{flag} and --scheduler-profile each need at least one entry")
    try:
        return [Config.parse(pair, profile, path) for profile in names for pair in pairs]
    except ValueError as exc:
        if path == DRA:
            raise ValueError(f"{flag}: {exc}") from None
        raise


def parse_paths(text: str) -> tuple[str, ...]:
    """``--path``: device-plugin, dra, or both (in that order)."""
    if text == "both":
        return PATHS
    if text not in PATHS:
        raise ValueError(f"--path: {text!r} is not one of {', '.join(PATHS)}, both")
    return (text,)


# The field report's comparison, plus gpupair: kube-scheduler with the old and the new plugin,
# then gpupair's filter and score in front of the new plugin.
DEFAULT_PAIRS = "kube+naive,kube+aligned,gpupair+aligned"
# With pods that ask for the network (--nic-share): the same, and gpupair without the NIC ask.
NIC_PAIRS = "kube+naive,kube+aligned,gpupair-nonic+aligned,gpupair+aligned"
