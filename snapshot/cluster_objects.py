"""The I/O of `gpupair snapshot`: nodes and live pods, and the DRA driver's ResourceSlices and
every ResourceClaim where it has some, listed together as raw JSON (status/fetch.py).

Nodes and pods must be listable: without them there is nothing to write. Slices and claims may
be missing (no resource.k8s.io/v1 on the cluster: nothing to read) or forbidden (then the
command says what it could not see and goes on from the annotations and requests alone).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

from kubernetes_asyncio import client as k8s

from gpupair.command.flags import Failure
from gpupair.kubeclient.kube import describe_error
from gpupair.status.fetch import LIVE_PODS, read_items


@dataclass
class ClusterObjects:
    nodes: list[dict[str, Any]]
    pods: list[dict[str, Any]]
    slices: list[dict[str, Any]] = field(default_factory=list)
    claims: list[dict[str, Any]] = field(default_factory=list)
    unseen: list[str] = field(default_factory=list)  # what could not be listed, and why


async def _none() -> list[dict[str, Any]]:
    return []


async def list_cluster(api: k8s.ApiClient, dra_driver: str = "", timeout: float = 60.0) -> ClusterObjects:
    core, resource = k8s.CoreV1Api(api), k8s.ResourceV1Api(api)
    calls = (read_items(core.list_node), read_items(core.list_pod_for_all_namespaces, field_selector=LIVE_PODS),
             read_items(resource.list_resource_slice, field_selector=f"spec.driver={dra_driver}") if dra_driver
             else _none(),
             read_items(resource.list_resource_claim_for_all_namespaces) if dra_driver else _none())
    nodes, pods, slices, claims = await asyncio.gather(*(asyncio.wait_for(c, timeout) for c in calls),
                                                       return_exceptions=True)
    for kind, result in (("nodes", nodes), ("pods", pods)):
        if isinstance(result, BaseException):
            if not isinstance(result, Exception):
                raise result
            raise Failure(f"cannot list {kind}: {describe_error(result)}") from result
    unseen = []
    for kind, result in (("resourceslices", slices), ("resourceclaims", claims)):
        if isinstance(result, BaseException):
            if not isinstance(result, Exception):
                raise result
            if getattr(result, "status", None) != 404:  # 404: no resource.k8s.io/v1, so no DRA GPUs
                unseen.append(f"cannot list {kind}: {describe_error(result)}")
    return ClusterObjects(nodes, pods,  # type: ignore[arg-type]
                   [] if isinstance(slices, BaseException) else slices,
                   [] if isinstance(claims, BaseException) else claims, unseen)
