"""Placement intent: how much a multi-GPU pod cares that its GPUs sit close together.

The pod annotation ``gpupair.io/placement`` takes

- ``required`` (the default): only a node with a close set free (one NUMA node, or the fewest
  the hardware allows) may take the pod; it waits otherwise;
- ``preferred``: a node with a close set wins, but a node without one still takes the pod
  (scored below every node with one): run now on a SYS pair rather than wait;
- ``none``: topology is ignored for placement (only the GPU count matters).

The kubelet's Topology Manager offers single-numa-node / best-effort / none for the same
reason. The webhook resolves a pod's intent at admission (the pod's own annotation, else its
namespace's ``gpupair.io/placement`` label, else the cluster default) and writes it on the pod;
the extender and the verdict read the pod's annotation, so all three agree on what was asked.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import Enum
from typing import Any

# Pod annotation, and namespace label for its default. Spelt out rather than built from
# gpupair.topology.report.PREFIX: the command line imports this module, and report pulls in pydantic.
PLACEMENT_KEY = "gpupair.io/placement"


class Intent(str, Enum):
    REQUIRED = "required"
    PREFERRED = "preferred"
    NONE = "none"


CHOICES = ", ".join(i.value for i in Intent)


class IntentError(ValueError):
    """A placement value gpupair does not know; the message names the allowed ones."""


def parse_intent(value: Any, where: str = PLACEMENT_KEY) -> Intent:
    """``"Preferred "`` -> Intent.PREFERRED; anything else unknown raises IntentError."""
    text = value.strip().lower() if isinstance(value, str) else None
    for intent in Intent:
        if text == intent.value:
            return intent
    raise IntentError(f"{where}: {value!r} is not a placement gpupair knows (one of {CHOICES})")


def asked_intent(annotations: Any) -> Intent | None:
    """The intent a pod's annotations ask for, None if they ask none; IntentError if bad."""
    if not isinstance(annotations, Mapping) or PLACEMENT_KEY not in annotations:
        return None
    return parse_intent(annotations[PLACEMENT_KEY])


def pod_intent(pod: Any, default: Intent = Intent.REQUIRED) -> tuple[Intent, str]:
    """A pod's intent for placement and verdicts, and why a bad value was overridden ("" if
    not). A bad value (the webhook refuses those at admission; it may have been down, or the
    pod annotated later) counts as ``required``, the strictest, never as the default: a typo in
    ``requried`` must not loosen placement."""
    asked, problem = pod_asked_intent(pod)
    return (default if asked is None else asked), problem


def pod_asked_intent(pod: Any) -> tuple[Intent | None, str]:
    """What a pod's own annotation asks (None: nothing), a bad value as ``required`` with why."""
    meta = pod.get("metadata") if isinstance(pod, Mapping) else None
    annotations = meta.get("annotations") if isinstance(meta, Mapping) else None
    try:
        return asked_intent(annotations), ""
    except IntentError as exc:
        return Intent.REQUIRED, f"{exc}; treated as {Intent.REQUIRED.value}"
