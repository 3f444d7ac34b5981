"""The I/O of `gpupair status`: one list call per kind (nodes, pods, events), run together.

Lists are read as raw JSON (orjson), not as generated models: on 5,000 nodes building a
V1Node per item costs more than the whole status. Nodes must be listable; pods and events may be
forbidden or fail, and the view then says what it could not see.
"""

from __future__ import annotations

import asyncio
from typing import Any

import orjson
from kubernetes_asyncio import client as k8s
from kubernetes_asyncio.client.exceptions import ApiException

from gpupair.kube import describe_error
from status.build import Listing
from status.view import Unseen

# Terminal pods hold no GPUs and are never pending: leave them on the server.
LIVE_PODS = "status.phase!=Succeeded,status.phase!=Failed"
# FailedScheduling and GPUPlacementFailed are both Warnings; Normal events are most of the volume.
WARNINGS = "type=Warning"


class NodesNotVisible(RuntimeError):
    """The one list status cannot do without."""


async def _read(call, *args: Any, **kwargs: Any) -> list[dict[str, Any]]:
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


async def list_cluster(api: k8s.ApiClient, node_selector: str = "", namespace: str = "",
                       timeout: float = 30.0) -> Listing:
    core = k8s.CoreV1Api(api)
    if namespace:
        pods_call = _read(core.list_namespaced_pod, namespace, field_selector=LIVE_PODS)
        events_call = _read(core.list_namespaced_event, namespace, field_selector=WARNINGS)
    else:
        pods_call = _read(core.list_pod_for_all_namespaces, field_selector=LIVE_PODS)
        events_call = _read(core.list_event_for_all_namespaces, field_selector=WARNINGS)
    nodes, pods, events = await asyncio.gather(
        asyncio.wait_for(_read(core.list_node, label_selector=node_selector or None), timeout),
        asyncio.wait_for(pods_call, timeout), asyncio.wait_for(events_call, timeout),
        return_exceptions=True)
    if isinstance(nodes, BaseException):
        if not isinstance(nodes, Exception):
            raise nodes
        raise NodesNotVisible(f"cannot list nodes: {describe_error(nodes)}") from nodes
    unseen = []
    for resource, result in (("pods", pods), ("events", events)):
        if isinstance(result, BaseException):
            if not isinstance(result, Exception):
                raise result
            where = f" in namespace {namespace}" if namespace else ""
            unseen.append(Unseen(resource=resource, reason=f"cannot list {resource}{where}: {describe_error(result)}"))
    return Listing(nodes=nodes,
                   pods=None if isinstance(pods, BaseException) else pods,
                   events=None if isinstance(events, BaseException) else events,
                   unseen=unseen)
