"""The placement intent of a DRA claim, and of a pod from its claims. Pure.

A pod that only references claims never carries ``gpupair.io/placement``: the pod webhook
matches pods with an ``nvidia.com/gpu`` limit, and a claim pod has none. Its intent is written
in its claims instead, by the claim webhook (webhook/claims.py), in two ways:

- the claim's ``gpupair.io/placement`` annotation: the webhook writes it on every claim and
  template it admits in an opted-in namespace, and the resourceclaim controller copies a
  template's ``spec.metadata`` annotations into each claim it makes from it;
- the shape it gave the claim's GPU requests, which stays when the annotation does not (a claim
  written before the webhook annotated every claim): a ``matchAttribute`` numaNode constraint
  over the request is ``required``; the ``firstAvailable`` rewrite, a constrained subrequest
  before an unconstrained one, is ``preferred``. An unconstrained request says nothing: it is
  what a user writes, what ``none`` leaves, and what kube-scheduler's own extended-resource
  claim holds.

So a DRA pod's intent is that of its GPU claims, else its own annotation, else the default
(``gpupair.decide.pod.intent.pod_intent``). Where two GPU claims of one pod say different things, the
strictest counts (``required``, then ``preferred``, then ``none``), and the caller logs why: a
verdict or a filter must not be looser than one of the claims asked. A value gpupair does not
know counts as ``required`` with the reason, as on a pod.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from dataclasses import dataclass
from typing import Any

from gpupair.kubewire import dra
from gpupair.decide.pod.intent import PLACEMENT_KEY, Intent, IntentError, parse_intent, pod_asked_intent

STRICTNESS = (Intent.NONE, Intent.PREFERRED, Intent.REQUIRED)  # loosest first

ANNOTATION, CONSTRAINT, FIRST_AVAILABLE = "annotation", "constraint", "first-available"


@dataclass(frozen=True)
class ClaimIntent:
    """What a claim says about placement, and where it says it."""

    intent: Intent
    source: str  # annotation | constraint | first-available
    claim: str = ""  # namespace/name, for messages
    problem: str = ""  # a bad annotation, read as required


def numa_constrained(claim: dra.ResourceClaim, request: str, subrequest: str | None = None) -> bool:
    """Whether a numaNode matchAttribute constraint covers the (sub)request (no ``requests``:
    every request)."""
    names = {request} if subrequest is None else {request, f"{request}/{subrequest}"}
    return any(c.matchAttribute == dra.NUMA_ATTRIBUTE and (not c.requests or names & set(c.requests))
               for c in claim.spec.devices.constraints)


def gpu_requests(claim: dra.ResourceClaim, gpu_classes: Collection[str]) -> set[str]:
    """The claim's requests that ask for devices of a GPU DeviceClass (a ``firstAvailable``
    request by its first subrequest, the one the allocator tries first)."""
    found = set()
    for request in claim.spec.devices.requests:
        asked = request.exactly or (request.firstAvailable[0] if request.firstAvailable else None)
        if asked is not None and asked.deviceClassName in gpu_classes:
            found.add(request.name)
    return found


def allocated_requests(claim: dra.ResourceClaim, driver: str) -> set[str]:
    """The claim's requests its allocation served with devices of ``driver`` (a result names
    ``<request>/<subrequest>`` where a subrequest was picked)."""
    allocation = claim.status.allocation
    if allocation is None:
        return set()
    return {r.request.split("/", 1)[0] for r in allocation.devices.results if r.driver == driver}


def _shape(claim: dra.ResourceClaim, request: dra.DeviceRequest) -> tuple[Intent, str] | None:
    if request.exactly is not None:
        return (Intent.REQUIRED, CONSTRAINT) if numa_constrained(claim, request.name) else None
    subs = request.firstAvailable or []
    if not subs or not numa_constrained(claim, request.name, subs[0].name):
        return None  # the allocator tries an unconstrained set first: nothing asked
    if any(not numa_constrained(claim, request.name, sub.name) for sub in subs[1:]):
        return Intent.PREFERRED, FIRST_AVAILABLE  # one NUMA node first, then anywhere
    return Intent.REQUIRED, CONSTRAINT  # every alternative on one NUMA node


def claim_intent(claim: dra.ResourceClaim, requests: Collection[str] | None = None) -> ClaimIntent | None:
    """The claim's intent: its ``gpupair.io/placement`` annotation, else the shape of its GPU
    requests (``requests``: their names; None: every request), the strictest where they differ.
    None when the claim says nothing."""
    where = f"{claim.metadata.namespace}/{claim.metadata.name}"
    if PLACEMENT_KEY in claim.metadata.annotations:
        try:
            return ClaimIntent(parse_intent(claim.metadata.annotations[PLACEMENT_KEY],
                                            f"ResourceClaim {where}: {PLACEMENT_KEY}"), ANNOTATION, where)
        except IntentError as exc:
            return ClaimIntent(Intent.REQUIRED, ANNOTATION, where, f"{exc}; treated as {Intent.REQUIRED.value}")
    shapes = [shape for request in claim.spec.devices.requests
              if requests is None or request.name in requests
              if (shape := _shape(claim, request)) is not None]
    if not shapes:
        return None
    intent, source = max(shapes, key=lambda shape: STRICTNESS.index(shape[0]))
    return ClaimIntent(intent, source, where)


def strictest(found: Iterable[ClaimIntent | None]) -> tuple[ClaimIntent | None, str]:
    """The strictest of the claims' intents (None where none says anything), and a note when
    they disagree or one was unreadable ("" if not)."""
    said = [f for f in found if f is not None]
    if not said:
        return None, ""
    chosen = max(said, key=lambda f: STRICTNESS.index(f.intent))
    notes = [f.problem for f in said if f.problem]
    if len({f.intent for f in said}) > 1:
        asked = ", ".join(f"{f.claim or '?'}: {f.intent.value}" for f in said)
        notes.append(f"the pod's claims ask different placements ({asked}); judged as {chosen.intent.value}")
    return chosen, "; ".join(notes)


def dra_pod_intent(pod: Any, claims: Iterable[ClaimIntent | None], default: Intent = Intent.REQUIRED
                   ) -> tuple[Intent, str]:
    """A pod's intent for placement and verdicts: its GPU claims' (``claims``: what each says),
    else its own annotation, else ``default``; and why a value was overridden or claims
    disagreed ("" if neither). ``gpupair.decide.pod.intent.pod_intent`` for a pod without claims."""
    asked, note = asked_pod_intent(pod, claims)
    return (default if asked is None else asked), note


def asked_pod_intent(pod: Any, claims: Iterable[ClaimIntent | None]) -> tuple[Intent | None, str]:
    """What the pod asks, from its GPU claims, else its own annotation; None where neither says
    (the default of whoever decides applies), and the note as ``dra_pod_intent``'s."""
    chosen, note = strictest(claims)
    if chosen is not None:
        return chosen.intent, note
    return pod_asked_intent(pod)
