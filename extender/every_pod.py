"""The every-pod entry: the scheduler entry that scores.

gpupair registers two entries with kube-scheduler (deploy/overlays/self-managed/scheduler-config.yaml):

- the GPU entry, with ``managedResources`` (the GPU resource, and ``gpupair.io/claim`` with
  ``ignoredByScheduler: true``): filter, bind and preempt, ``ignorable: false``, so a GPU pod
  waits rather than risk a SYS pair while the extender is down;
- the every-pod entry, without ``managedResources``, so kube-scheduler asks it about every pod:
  prioritize only (``prioritize-every-pod``), ``ignorable: true``. It scores every pod, a GPU
  pod among the nodes the GPU entry let through and the pods the GPU entry never sees, CPU pods
  above all, so that they are kept off the CPU free GPUs need (``--score fragmentation``).
  With neither a filter nor a bind verb, nothing of a pod's scheduling waits on it:
  kube-scheduler drops a prioritize that fails and goes on (pkg/scheduler/schedule_one.go,
  prioritizeNodes).

A GPU pod is scored here rather than in the GPU entry: kube-scheduler asks every entry without
``managedResources`` about every pod anyway, so scoring it in the GPU entry as well cost a call
per GPU pod (an empty answer from this entry) and kube-scheduler's encoding of the pod and
~500 names for it (bench/RESULTS.md). The extender still answers ``prioritize`` alike, for a
configuration that lists it in the GPU entry.
"""

from __future__ import annotations

EVERY_POD_VERB = "prioritize-every-pod"  # the every-pod entry's prioritizeVerb
