"""Who the fleet's pods are beyond their size: their priority and their placement intent.

Drawn per arrival from their own random streams, so that a share or a mix changes only what it
names: the arrivals, sizes and durations stay the same at any setting.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpupair.decide.pod.intent import CHOICES, Intent, IntentError, parse_intent

ALL_REQUIRED: tuple[tuple[Intent, float], ...] = ((Intent.REQUIRED, 1.0),)


def parse_intent_mix(text: str) -> tuple[tuple[Intent, float], ...]:
    """``required=0.7,preferred=0.2,none=0.1`` -> weights per intent (they must sum to 1)."""
    mix: dict[Intent, float] = {}
    for part in (p.strip() for p in text.split(",") if p.strip()):
        name, sep, share = part.partition("=")
        try:
            intent = parse_intent(name, "--intent-mix")
            if not sep:
                raise ValueError("no share")
            weight = float(share)
        except (IntentError, ValueError) as exc:
            raise ValueError(f"--intent-mix: {part!r} is not INTENT=SHARE with INTENT one of {CHOICES} "
                             f"and SHARE a number ({exc})") from None
        if not 0.0 <= weight <= 1.0:
            raise ValueError(f"--intent-mix: share of {intent.value} must be between 0 and 1, not {share}")
        if intent in mix:
            raise ValueError(f"--intent-mix: {intent.value} given twice")
        mix[intent] = weight
    if not mix or abs(sum(mix.values()) - 1.0) > 1e-6:
        raise ValueError(f"--intent-mix: the shares must sum to 1 (got {text!r})")
    return tuple((intent, weight) for intent, weight in mix.items() if weight > 0)


@dataclass(frozen=True)
class PodMix:
    high_priority_share: float = 0.0  # pods at HIGH_PRIORITY, which may preempt the others
    intents: tuple[tuple[Intent, float], ...] = ALL_REQUIRED

    def __post_init__(self) -> None:
        if not 0.0 <= self.high_priority_share <= 1.0:
            raise ValueError(f"--high-priority-share must be between 0 and 1, not {self.high_priority_share:g}")

    def describe(self) -> str:
        """For the run's header line; empty at the defaults."""
        parts = []
        if self.high_priority_share:
            parts.append(f"{100 * self.high_priority_share:g}% high priority (may preempt)")
        if self.intents != ALL_REQUIRED:
            parts.append("intents " + ", ".join(f"{i.value} {100 * w:g}%" for i, w in self.intents))
        return ", ".join(parts)
