"""The I/O of `gpupair status` and `gpupair snapshot`: one list call per kind (nodes, pods, events,
the reporters' node Leases, a DRA driver's ResourceSlices and every ResourceClaim), run together.

Lists are read as raw JSON (orjson), not as generated models: on 5,000 nodes building a
V1Node per item costs more than the whole status. Nodes must be listable; pods and events may be
forbidden or fail, and the view then says what it could not see.
"""

from __future__ import annotations

import asyncio
from datetime import datetime, timezone
from typing import Any

import orjson
from kubernetes_asyncio import client as k8s
from kubernetes_asyncio.client.exceptions import ApiException

from gpupair.kubeclient.kube import describe_error
from gpupair.kubewire.leases import DEFAULT_NAMESPACE, HEARTBEAT_SELECTOR, renewed_at
from gpupair.status.build import Listing
from gpupair.status.view import Unseen

# Terminal pods hold no GPUs and are never pending: leave them on the server.
LIVE_PODS = "status.phase!=Succeeded,status.phase!=Failed"
# FailedScheduling and GPUPlacementFailed are both Warnings; Normal events are most of the volume.
WARNINGS = "type=Warning"


class NodesNotVisible(RuntimeError):
    """The one list status cannot do without."""


async def read_items(call, *args: Any, **kwargs: Any) -> list[dict[str, Any]]:
    """A list call's items as raw JSON; an ApiException for a status outside 2xx."""
    response = await call(*args, _preload_content=False, **kwargs)
    try:
        data = await response.read()
    finally:
        response.release()
    if not 200 <= response.status <= 299:  # unread responses skip the client's own check
        exc = ApiException(status=response.status, reason=response.reason)
        exc.body = data.decode(errors="replace")
        raise exc
    items = orjson.loads(data).get("items")
    return items if isinstance(items, list) else []


async def _none() -> list[dict[str, Any]]:
    return []


async def list_cluster(api: k8s.ApiClient, node_selector: str = "", namespace: str = "",
                       timeout: float = 30.0, lease_namespace: str = DEFAULT_NAMESPACE,
                       dra_driver: str = "", with_events: bool = True) -> Listing:
    """``lease_namespace``: where the reporters renew their node Leases ('' to judge freshness
    from the reports alone). ``dra_driver``: list its ResourceSlices and every claim too, for the
    nodes whose GPUs it publishes ('' for none); a cluster without resource.k8s.io/v1 (404) has
    none to show. ``with_events``: the Warning Events too (False: ``Listing.events`` is None)."""
    core = k8s.CoreV1Api(api)
    resource = k8s.ResourceV1Api(api)
    slices_call = (read_items(resource.list_resource_slice, field_selector=f"spec.driver={dra_driver}")
                   if dra_driver else _none())
    claims_call = read_items(resource.list_resource_claim_for_all_namespaces) if dra_driver else _none()
    leases_call = (read_items(k8s.CoordinationV1Api(api).list_namespaced_lease, lease_namespace,
                         label_selector=HEARTBEAT_SELECTOR) if lease_namespace else _none())
    if namespace:
        pods_call = read_items(core.list_namespaced_pod, namespace, field_selector=LIVE_PODS)
        events_call = read_items(core.list_namespaced_event, namespace, field_selector=WARNINGS) if with_events else None
    else:
        pods_call = read_items(core.list_pod_for_all_namespaces, field_selector=LIVE_PODS)
        events_call = read_items(core.list_event_for_all_namespaces, field_selector=WARNINGS) if with_events else None
    nodes, pods, events, leases, slices, claims = await asyncio.gather(
        asyncio.wait_for(read_items(core.list_node, label_selector=node_selector or None), timeout),
        asyncio.wait_for(pods_call, timeout), asyncio.wait_for(events_call or _none(), timeout),
        asyncio.wait_for(leases_call, timeout), asyncio.wait_for(slices_call, timeout),
        asyncio.wait_for(claims_call, timeout), return_exceptions=True)
    if isinstance(nodes, BaseException):
        if not isinstance(nodes, Exception):
            raise nodes
        raise NodesNotVisible(f"cannot list nodes: {describe_error(nodes)}") from nodes
    unseen = []
    for kind, result, where in (("pods", pods, namespace), ("events", events, namespace),
                                ("leases", leases, lease_namespace), ("resourceslices", slices, ""),
                                ("resourceclaims", claims, "")):
        if isinstance(result, BaseException):
            if kind.startswith("resource") and getattr(result, "status", None) == 404:
                continue  # no resource.k8s.io/v1 on this cluster: no DRA nodes to show
            if not isinstance(result, Exception):
                raise result
            where = f" in namespace {where}" if where else ""
            unseen.append(Unseen(resource=kind, reason=f"cannot list {kind}{where}: {describe_error(result)}"))
    return Listing(nodes=nodes,
                   pods=None if isinstance(pods, BaseException) else pods,
                   events=None if isinstance(events, BaseException) or events_call is None else events,
                   unseen=unseen, leases={} if isinstance(leases, BaseException) else _renewals(leases),
                   slices=[] if isinstance(slices, BaseException) else slices,
                   claims=[] if isinstance(claims, BaseException) else claims, dra_driver=dra_driver)


def _renewals(leases: list[dict[str, Any]]) -> dict[str, datetime]:
    """Node name -> renewTime of each reporter heartbeat Lease."""
    out = {}
    for lease in leases:
        at = renewed_at(lease)
        name = (lease.get("metadata") or {}).get("name") if isinstance(lease, dict) else None
        if at is not None and isinstance(name, str):
            out[name] = datetime.fromtimestamp(at, timezone.utc)
    return out
