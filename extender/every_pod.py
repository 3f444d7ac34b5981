"""The every-pod entry: which pods it leaves to the GPU entry.

gpupair registers two entries with kube-scheduler (deploy/overlays/self-managed/scheduler-config.yaml):

- the GPU entry, with ``managedResources`` (the GPU resource, and ``gpupair.io/claim`` with
  ``ignoredByScheduler: true``): filter, prioritize, bind and preempt, ``ignorable: false``, so
  a GPU pod waits rather than risk a SYS pair while the extender is down;
- the every-pod entry, without ``managedResources``, so kube-scheduler asks it about every pod:
  prioritize only (``prioritize-every-pod``), ``ignorable: true``. It scores the pods the GPU
  entry never sees, CPU pods above all, so that they are kept off the CPU free GPUs need
  (``--score fragmentation``). With neither a filter nor a bind verb, nothing of a pod's
  scheduling waits on it: kube-scheduler drops a prioritize that fails and goes on
  (pkg/scheduler/schedule_one.go, prioritizeNodes).

kube-scheduler asks both entries about a GPU pod and adds their answers
(``score * weight * MaxNodeScore / MaxExtenderPriority`` per node). So that such a pod is scored
once, the every-pod entry answers an empty list when the GPU entry manages the pod:
kube-scheduler adds an extender's score to the nodes its answer lists (prioritizeNodes), so an
empty one adds nothing, and neither side writes or reads an entry per offered node (about 500
on a 1,213-node fleet, bench/RESULTS.md).
"""

from __future__ import annotations

from typing import Any

from gpupair.kubewire.defaults import CLAIM_POD_RESOURCE

EVERY_POD_VERB = "prioritize-every-pod"  # the every-pod entry's prioritizeVerb


def gpu_entry_resources(resource: str) -> frozenset[str]:
    """The GPU entry's ``managedResources`` as gpupair ships it."""
    return frozenset({resource, CLAIM_POD_RESOURCE})


def managed(pod: Any, resources: frozenset[str]) -> bool:
    """Whether an entry with these ``managedResources`` is asked about ``pod``, as kube-scheduler's
    ``HTTPExtender.IsInterested`` decides it (pkg/scheduler/extender.go): one of them among the
    requests or the limits of a container or an init container (not of ephemeral containers,
    nor the pod-level resources). Anything else is not a pod kube-scheduler would send that
    entry."""
    spec = pod.get("spec") if isinstance(pod, dict) else None
    if not isinstance(spec, dict):
        return False
    return _asks(spec.get("containers"), resources) or _asks(spec.get("initContainers"), resources)


def _asks(containers: Any, resources: frozenset[str]) -> bool:
    if not isinstance(containers, list):
        return False
    for container in containers:
        asked = container.get("resources") if isinstance(container, dict) else None
        if not isinstance(asked, dict):
            continue
        for values in (asked.get("requests"), asked.get("limits")):
            if isinstance(values, dict) and not resources.isdisjoint(values):
                return True
    return False
