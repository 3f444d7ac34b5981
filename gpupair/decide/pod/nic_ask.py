"""Whether a pod asks for the network, and how close: ``gpupair.io/nic`` and ``gpupair.io/nic-level``.

A pod that trains across nodes needs each of its GPUs near an RDMA NIC (NCCL uses GPUDirect
RDMA only within NCCL_NET_GDR_LEVEL). It asks with the annotation ``gpupair.io/nic``:
``required`` (only a set whose every GPU has a NIC at the level or closer), ``preferred``
(such a set wins; another still takes the pod), or ``none``; or implicitly, by requesting one
of the configured RDMA resources (``rdma/hca_shared_devices_a``, ``nvidia.com/rdma``), which
counts as ``required``. The level is ``gpupair.io/nic-level`` (``PIX``, ``PXB``, ``PHB``,
``NODE``), else the extender's ``--nic-level`` (``PXB``). A bad value counts as ``required``
at the default level, and the caller logs why, as for placement intents.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gpupair.decide.pod.intent import Intent
from gpupair.decide.pod.pod_request import PodRequestError, gpu_request

NIC_ASK_KEY = "gpupair.io/nic"
NIC_LEVEL_KEY = "gpupair.io/nic-level"
LEVELS = ("PIX", "PXB", "PHB", "NODE")  # SYS is no closeness to ask for
DEFAULT_LEVEL = "PXB"
DEFAULT_RDMA_RESOURCES = ("rdma/hca_shared_devices_a", "nvidia.com/rdma")


@dataclass(frozen=True)
class NicAsk:
    intent: Intent  # required or preferred
    level: str  # the farthest acceptable GPU x NIC link


def nic_ask(pod: Any, rdma_resources: tuple[str, ...] = DEFAULT_RDMA_RESOURCES,
            default_level: str = DEFAULT_LEVEL) -> tuple[NicAsk | None, str]:
    """The pod's ask (None: it does not ask for the network) and why a bad value was overridden."""
    meta = pod.get("metadata") if isinstance(pod, Mapping) else None
    annotations = meta.get("annotations") if isinstance(meta, Mapping) else None
    annotations = annotations if isinstance(annotations, Mapping) else {}
    problem = ""
    level = annotations.get(NIC_LEVEL_KEY, default_level)
    if level not in LEVELS:
        problem = f"{NIC_LEVEL_KEY}: {level!r} is not one of {', '.join(LEVELS)}; using {default_level}"
        level = default_level
    asked = annotations.get(NIC_ASK_KEY)
    if asked is not None:
        if asked == Intent.NONE.value:
            return None, problem
        if asked in (Intent.REQUIRED.value, Intent.PREFERRED.value):
            return NicAsk(Intent(asked), level), problem
        return NicAsk(Intent.REQUIRED, level), f"{NIC_ASK_KEY}: {asked!r} is not required, preferred or none"
    for resource in _named(pod, rdma_resources):
        try:
            if gpu_request(pod, resource) > 0:
                return NicAsk(Intent.REQUIRED, level), problem
        except PodRequestError:
            continue
    return None, problem


def _named(pod: Any, resources: tuple[str, ...]) -> tuple[str, ...]:
    """The ``resources`` some container's requests or limits name (a request of one no container
    names is 0): one walk of the pod for every pod that asks for none, not one per resource. A
    pod it cannot walk keeps them all, for gpu_request to judge."""
    try:
        spec = pod["spec"]
        tables = [table for field in ("containers", "initContainers") for container in (spec.get(field) or ())
                  for table in ((container.get("resources") or {}).get("requests"),
                                (container.get("resources") or {}).get("limits")) if table]
        return tuple(resource for resource in resources if any(resource in table for table in tables))
    except (KeyError, TypeError, AttributeError):
        return resources
