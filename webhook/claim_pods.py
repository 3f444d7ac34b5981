"""The mark that sends a claim pod to the extender, and only claim pods. Pure.

kube-scheduler asks an extender about a pod only when one of the pod's containers requests a
resource in the extender's ``managedResources``; a pod that asks DRA for GPUs through
``spec.resourceClaims`` requests none, so the extender never saw it. The webhook therefore gives
such a pod an extended resource that no node advertises and only the extender's GPU entry names
(``gpupair.io/claim``), as request and limit of **zero**:

- kube-scheduler asks an entry about a pod by the *names* of its containers' requests and limits,
  whatever their quantity (pkg/scheduler/extender.go ``hasManagedResources``);
- every check of a quantity skips a zero: NodeResourcesFit (pkg/scheduler/framework/plugins/
  noderesources/fit.go ``fitsRequest``: "Skip in case request quantity is zero", before it looks
  at ``ignoredByScheduler``) and DynamicResources' extended-resource filter alike; the kubelet
  drops requests of extended resources its node does not advertise before it fits the pod
  (pkg/kubelet/lifecycle/predicate.go ``removeMissingExtendedResources``).

So the mark can strand no pod, whatever the scheduler's configuration: with the GPU entry
registered the pod reaches the extender; without it (the install-order window, a scheduler
configured without the entry, a pod naming another scheduler) kube-scheduler places it alone,
as it places an unmarked one. A mark of one, as gpupair wrote it before, waited on "Insufficient
gpupair.io/claim" wherever no entry listed it with ``ignoredByScheduler: true``; the shipped
entry still lists it so, which keeps pods marked by an older webhook schedulable.

The webhook cannot read the pod's claims (it has no API access), so every pod with
``spec.resourceClaims`` is marked; one whose claims ask no GPU reaches the extender, which
passes every node for it. Requests and limits are both set, equal: an extended resource may not
be overcommitted, so the apiserver refuses a request without an equal limit.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gpupair.kubewire.defaults import CLAIM_POD_RESOURCE  # noqa: F401 - the dra component's --claim-pod-resource
from gpupair.webhook.claims import pointer
MARK = "0"  # a name kube-scheduler routes by, a quantity nothing counts (above)


def has_claims(pod: Mapping[str, Any]) -> bool:
    spec = pod.get("spec")
    return isinstance(spec, Mapping) and isinstance(spec.get("resourceClaims"), list) and bool(spec["resourceClaims"])


def _asks(container: Any, resource: str) -> bool:
    resources = container.get("resources") if isinstance(container, Mapping) else None
    if not isinstance(resources, Mapping):
        return False
    return any(isinstance(resources.get(part), Mapping) and resource in resources[part]
               for part in ("requests", "limits"))


def mark_ops(pod: Mapping[str, Any], resource: str) -> list[dict[str, Any]]:
    """The JSON patch that makes the pod's first container request and limit ``resource`` (zero);
    empty for a pod without claims, one already marked (reinvocation), or one without a
    container the patch can reach."""
    if not resource or not has_claims(pod):
        return []
    containers = pod["spec"].get("containers")
    if not isinstance(containers, list) or not containers or not isinstance(containers[0], Mapping):
        return []
    if any(_asks(c, resource) for c in containers + list(pod["spec"].get("initContainers") or [])):
        return []
    first = containers[0]
    resources = first.get("resources")
    if not isinstance(resources, Mapping):
        return [{"op": "add", "path": pointer("spec", "containers", 0, "resources"),
                 "value": {"requests": {resource: MARK}, "limits": {resource: MARK}}}]
    ops = []
    for part in ("requests", "limits"):
        path = pointer("spec", "containers", 0, "resources", part)
        if isinstance(resources.get(part), Mapping):  # add to the table there
            ops.append({"op": "add", "path": path + pointer(resource), "value": MARK})
        else:  # absent or null: the table is made
            ops.append({"op": "add", "path": path, "value": {resource: MARK}})
    return ops
