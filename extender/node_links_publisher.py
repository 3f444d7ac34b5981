"""The extender publishes the nodes' measured links for the webhook: the ConfigMap
``gpupair-node-links`` (gpupair/topology/node_links.py holds the document).

The extender already list-watches the Nodes, so it is the one writer that needs no new read
right: ``NodeLinks`` sits beside the node cache on that watch and keeps each node's
``gpupair.io/topology``, and ``NodeLinksPublisher`` writes the document when that set changed,
never on a schedule (the Node Lease split: the widely read object is written only on change).

- **Debounced**: a change wakes the writer, which waits ``debounce`` seconds so that a burst
  (a rollout of reporters, the first list) becomes one write: at most one write per interval.
- **Only what changed**: the writer compares the document with the ConfigMap's (read once at
  start, then every ``resync`` seconds, so an edit by hand or a re-created ConfigMap is put
  right) and patches only a difference. Two replicas write the same document from the same
  Nodes; the second's patch finds it written.
- **Least privilege**: ``get`` and ``patch`` on that one ConfigMap (``resourceNames``), which the
  manifests create empty; the extender creates nothing.
- **Never in a verb's way**: it runs as its own task; a failure (the ConfigMap missing, a 403,
  the API down) is logged once per kind and retried with capped backoff, and the verbs never
  wait on it.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Awaitable, Callable
from typing import Any

from kubernetes_asyncio import client as k8s
from kubernetes_asyncio.client.exceptions import ApiException

from gpupair.kubeclient import kube
from gpupair.topology.node_links import FILE_KEY, MAX_BYTES, encode_node_links_within
from gpupair.topology.report import TOPOLOGY_KEY

log = logging.getLogger("gpupair.extender.node_links_publisher")


class NodeLinks:
    """A WatchHandler of Nodes: each node's ``gpupair.io/topology``, and a version that moves
    when that set changes (a node added, gone, or its links re-measured)."""

    def __init__(self, on_change: Callable[[], None] = lambda: None) -> None:
        self.topologies: dict[str, str] = {}
        self.version = 0
        self.ready = False  # the first list is in: before it, the set is not the cluster's
        self._on_change = on_change

    def replace(self, items: list[dict[str, Any]]) -> None:
        listed = {}
        for node in items:
            name, topology = _topology_of(node)
            if name and topology is not None:
                listed[name] = topology
        changed = listed != self.topologies or not self.ready
        self.topologies, self.ready = listed, True
        if changed:
            self._changed()

    def apply(self, event_type: str, obj: dict[str, Any]) -> None:
        name, topology = _topology_of(obj)
        if not name:
            return
        if event_type == "DELETED":
            topology = None
        if self.topologies.get(name) == topology:
            return
        if topology is None:
            del self.topologies[name]
        else:
            self.topologies[name] = topology
        if self.ready:
            self._changed()

    def document(self, limit: int = MAX_BYTES) -> tuple[str, str]:
        """The document now, and how it was written (``full``, ``compact``, ``empty``)."""
        return encode_node_links_within(self.topologies, limit)

    def _changed(self) -> None:
        self.version += 1
        self._on_change()


def _topology_of(node: Any) -> tuple[str, str | None]:
    meta = node.get("metadata") if isinstance(node, dict) else None
    if not isinstance(meta, dict) or not isinstance(meta.get("name"), str):
        return "", None
    annotations = meta.get("annotations")
    topology = annotations.get(TOPOLOGY_KEY) if isinstance(annotations, dict) else None
    return meta["name"], topology if isinstance(topology, str) else None


class NodeLinksPublisher:
    """Writes ``links.document()`` into the ConfigMap ``namespace/name`` (key node-links.json)."""

    def __init__(self, api: Any, links: NodeLinks, namespace: str, name: str, *, debounce: float = 2.0,
                 resync: float = 300.0, backoff_max: float = 60.0, limit: int = MAX_BYTES,
                 sleep: Callable[[float], Awaitable[None]] = asyncio.sleep) -> None:
        self.api, self.links, self.namespace, self.name = api, links, namespace, name
        self.debounce, self.resync, self.backoff_max, self.limit = debounce, resync, backoff_max, limit
        self._sleep = sleep
        self._wake = asyncio.Event()
        links._on_change = self._wake.set
        self.written: str | None = None  # the ConfigMap's document as last read or written
        self.writes = 0  # patches sent, for tests and logs
        self._problem = ""

    @property
    def where(self) -> str:
        return f"ConfigMap {self.namespace}/{self.name}"

    async def run(self) -> None:
        failures = 0
        while True:
            try:
                await asyncio.wait_for(self._wake.wait(), self.resync)
            except asyncio.TimeoutError:
                self.written = None  # read it again: someone may have edited or re-created it
            if not self.links.ready:
                continue
            await self._sleep(self.debounce)
            self._wake.clear()
            try:
                await self.publish()
                failures = 0
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - the extender serves on; the next try may succeed
                failures += 1
                delay = min(self.backoff_max, self.debounce * 2 ** failures) * (0.5 + random.random() / 2)
                self._report(exc, delay)
                self.written = None
                await self._sleep(delay)
                self._wake.set()

    async def publish(self) -> bool:
        """Write the document if the ConfigMap holds another; whether it wrote."""
        core = k8s.CoreV1Api(self.api)
        if self.written is None:
            current = await core.read_namespaced_config_map(self.name, self.namespace, _request_timeout=10)
            self.written = (current.data or {}).get(FILE_KEY)
        document, form = self.links.document(self.limit)
        if document == self.written:
            return False
        await core.patch_namespaced_config_map(self.name, self.namespace, {"data": {FILE_KEY: document}},
                                               _content_type=kube.MERGE_PATCH, _request_timeout=10)
        self.written, self.writes, self._problem = document, self.writes + 1, ""
        fields = {"configmap": self.where, "nodes": len(self.links.topologies), "bytes": len(document.encode()),
                  "form": form}
        if form == "full":
            log.info("node links published", extra=fields)
        else:
            log.warning("node links over the ConfigMap's 1 MiB in full; published "
                        + ("one entry per distinct layout" if form == "compact" else
                           "no node's links (the webhook treats them as unknown)"), extra=fields)
        return True

    def _report(self, exc: Exception, delay: float) -> None:
        if isinstance(exc, ApiException) and exc.status == 404:
            problem = f"{self.where} not found: the manifests create it (deploy/components/dra, the chart's dra)"
        else:
            problem = f"{self.where}: {kube.describe_error(exc)}"
        if problem != self._problem:
            self._problem = problem
            log.warning("cannot publish node links; retrying", extra={"why": problem, "retry_in_s": round(delay, 1)})
