"""The DRA path: nodes whose GPUs a DRA driver publishes, where kube-scheduler picks the devices.

On the device-plugin path kube-scheduler counts GPUs and the plugin on the node picks them. On
the DRA path kube-scheduler's DynamicResources plugin runs the structured allocator in Filter: a
node passes only where the allocator finds devices for the pod's claim, and the devices it finds
are the ones the pod gets (``gpupair.decide.devices.policies``' ``dra-first-fit``: the first free devices in
ResourceSlice order, allocator_stable.go's allocateOne). A pod reaches the DRA devices in one of
four forms (``FORMS``):

- ``extended``: ``limits: nvidia.com/gpu`` served from DRA (a DeviceClass with
  ``extendedResourceName``). kube-scheduler writes the claim itself; nobody can add a constraint.
  The extender, registered with ``managedResources: [nvidia.com/gpu]``, is called for the pod.
  NodeResourcesFit scores the GPUs where the profile lists ``nvidia.com/gpu`` (KEP-5004: a
  DRA-backed extended resource is counted from the node's devices), as on a device-plugin node.
- ``claim``: a ResourceClaim asking k devices, no constraint (as written, no webhook).
- ``claim-numa``: the same with ``matchAttribute: resource.kubernetes.io/numaNode`` (the webhook's
  ``required`` rewrite): the first k free devices of the first NUMA node with k free. The webhook
  leaves a request larger than a NUMA node (or of one device) as written, and so does this model.
- ``claim-first-available``: the webhook's ``preferred`` rewrite, ``firstAvailable: [numa, any]``:
  the allocator tries the constrained subrequest first, then the plain one. DynamicResources'
  Score ranks a node by which subrequest it used (``dynamic_resources_scores``), so nodes where
  the close set fits rank higher natively.

Claim pods request no ``nvidia.com/gpu``: NodeResourcesFit never scores their GPUs. With gpupair
the extender decides with its own ``Decider`` on ``NodeView(picker=ALLOCATOR)``, planning with the
claim's allocator policy (``FORMS[...].policy``): for ``extended`` that is the extender's
``Decider.dra_policy`` as deployed; for claim pods the extender is registered without
``managedResources``, so kube-scheduler calls it for them too.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpupair.decide.pod.intent import Intent
from gpupair.topology.layout import NodeLayout
from gpupair.decide.devices.policies import POLICIES
from gpupair.kubewire.defaults import MAX_NODE_SCORE

FIRST_FIT = POLICIES["dra-first-fit"]
FIRST_FIT_NUMA = POLICIES["dra-first-fit-numa"]
# resource.FirstAvailableDeviceRequestMaxSize: DynamicResources' Score gives a request that used
# subrequest i (0-based) this many points less i; NormalizeScore scales the top node to 100.
MAX_SUBREQUESTS = 8
DYNAMIC_RESOURCES_WEIGHT = 1  # a default-profile score plugin without an explicit weight


def _constrained(layout: NodeLayout, k: int) -> bool:
    """Whether the webhook constrains a request of k devices: 2 or more, and no more than a
    NUMA node of this node holds (``--gpus-per-numa-node``)."""
    return 2 <= k <= max(len(members) for members in layout.numa_nodes.values())


@dataclass(frozen=True)
class ClaimPolicy:
    """The allocator's pick for one pod's claim of k devices in a form: ``same_numa`` under the
    numaNode constraint, ``first_available`` for ``[numa, any]``. ``subrequest`` says which
    subrequest a pick used (0: numa, 1: any), for DynamicResources' Score."""

    name: str
    same_numa: bool = False
    first_available: bool = False

    def subrequest(self, layout: NodeLayout, free: frozenset[int], k: int) -> tuple[int, tuple[int, ...] | None]:
        if not (self.same_numa or self.first_available) or not _constrained(layout, k):
            return 0, FIRST_FIT.pick(layout, free, k)
        close = FIRST_FIT_NUMA.pick(layout, free, k)
        if close is not None or not self.first_available:
            return 0, close
        return 1, FIRST_FIT.pick(layout, free, k)

    def pick(self, layout: NodeLayout, free: frozenset[int], k: int) -> tuple[int, ...] | None:
        return self.subrequest(layout, free, k)[1]


@dataclass(frozen=True)
class Form:
    """How a pod asks for its DRA devices."""

    name: str
    policy: ClaimPolicy
    intent: Intent | None = None  # the intent the webhook wrote into the claim; None: the pod's
    scored_gpus: bool = False  # NodeResourcesFit scores the pod's GPUs (an extended resource)
    summary: str = ""

    @property
    def first_available(self) -> bool:
        return self.policy.first_available


FORMS: dict[str, Form] = {
    "extended": Form("extended", ClaimPolicy("dra-first-fit"), scored_gpus=True,
                     summary="limits: nvidia.com/gpu served from DRA devices; kube-scheduler writes the claim"),
    "claim": Form("claim", ClaimPolicy("dra-first-fit"), summary="a claim of k devices, no constraint"),
    "claim-numa": Form("claim-numa", ClaimPolicy("dra-first-fit-numa", same_numa=True), Intent.REQUIRED,
                       summary="a claim with matchAttribute resource.kubernetes.io/numaNode (webhook: required)"),
    "claim-first-available": Form(
        "claim-first-available", ClaimPolicy("dra-first-available", first_available=True), Intent.PREFERRED,
        summary="firstAvailable [numa, any] (webhook: preferred)"),
}


def form_named(name: str) -> Form:
    try:
        return FORMS[name]
    except KeyError:
        raise ValueError(f"unknown DRA form {name!r}; known: {', '.join(FORMS)}") from None


def dynamic_resources_scores(form: Form, picks: dict[str, int]) -> dict[str, int]:
    """DynamicResources' Score, normalised and weighted, per node: ``picks`` holds the subrequest
    each node's allocation used. Only a ``firstAvailable`` request scores (a plain request gives
    every node 0); DefaultNormalizeScore scales the best node to MaxNodeScore."""
    if not form.first_available or not picks:
        return {name: 0 for name in picks}
    raw = {name: MAX_SUBREQUESTS - index for name, index in picks.items()}
    top = max(raw.values())
    return {name: score * MAX_NODE_SCORE // top * DYNAMIC_RESOURCES_WEIGHT for name, score in raw.items()}


# What --dra-configs runs by default: every form with and without gpupair.
DEFAULT_DRA_PAIRS = ",".join(f"{scheduler}+{form}" for form in FORMS for scheduler in ("kube", "gpupair"))
