"""The reporter's liveness Lease: one coordination.k8s.io/v1 Lease per node, named after it.

Kubernetes moved the kubelet's heartbeat off the Node object for the same reason: a renewal is a
few hundred bytes to the few readers of Leases in one namespace, where a Node annotation write
is the whole Node object to every Node watcher in the cluster. The reporter renews its Lease
while its published report is current; readers (extender, ``gpupair status``) take a node's
freshness from the newest of the Lease's ``renewTime`` and the report's ``reportedAt``.

Pure: bodies in and out, no I/O. ``HEARTBEAT_SELECTOR`` is how readers tell these Leases from
any other Lease in the namespace (the extender's leader-election Lease lives there too).
"""

from __future__ import annotations

import os
import time
from datetime import datetime
from typing import Any

HEARTBEAT_LABEL = "gpupair.io/heartbeat"
LABELS = {"app.kubernetes.io/name": "gpupair-reporter", HEARTBEAT_LABEL: "node"}
HEARTBEAT_SELECTOR = f"{HEARTBEAT_LABEL}=node"
DEFAULT_NAMESPACE = "gpupair-system"
SERVICE_ACCOUNT_NAMESPACE = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"
API_VERSION = "coordination.k8s.io/v1"


def own_namespace(path: str = SERVICE_ACCOUNT_NAMESPACE) -> str:
    """The pod's namespace from its service-account mount, else gpupair's default."""
    try:
        with open(path, encoding="utf-8") as handle:
            return handle.read().strip() or DEFAULT_NAMESPACE
    except OSError:
        return os.environ.get("POD_NAMESPACE") or DEFAULT_NAMESPACE


def micro_time(now_ns: int | None = None) -> str:
    """A MicroTime: RFC 3339 in UTC with exactly six fractional digits, as the apiserver parses it."""
    now_ns = time.time_ns() if now_ns is None else now_ns
    seconds, nanos = divmod(now_ns, 1_000_000_000)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds)) + f".{nanos // 1000:06d}Z"


def epoch_seconds(text: Any) -> float | None:
    """Epoch seconds of a Time or MicroTime string; None for anything else."""
    if not isinstance(text, str) or not text:
        return None
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def lease_body(node: str, namespace: str, duration: int, renew_ns: int, *,
               previous: dict[str, Any] | None = None, node_uid: str = "") -> dict[str, Any]:
    """The Lease to PUT (``previous`` given: its resourceVersion, so a concurrent writer gets
    409) or to create. The owner reference to the Node lets the garbage collector remove the
    Lease of a deleted node."""
    now = micro_time(renew_ns)
    old_meta = (previous or {}).get("metadata") or {}
    old_spec = (previous or {}).get("spec") or {}
    meta: dict[str, Any] = {"name": node, "namespace": namespace, "labels": {**(old_meta.get("labels") or {}), **LABELS}}
    if old_meta.get("resourceVersion"):
        meta["resourceVersion"] = old_meta["resourceVersion"]
    if old_meta.get("ownerReferences"):
        meta["ownerReferences"] = old_meta["ownerReferences"]
    elif node_uid:
        meta["ownerReferences"] = [{"apiVersion": "v1", "kind": "Node", "name": node, "uid": node_uid}]
    spec: dict[str, Any] = {
        "holderIdentity": node,
        "leaseDurationSeconds": int(duration),
        "acquireTime": old_spec.get("acquireTime") or now,
        "renewTime": now,
    }
    return {"apiVersion": API_VERSION, "kind": "Lease", "metadata": meta, "spec": spec}


def is_heartbeat(lease: Any) -> bool:
    meta = lease.get("metadata") if isinstance(lease, dict) else None
    labels = meta.get("labels") if isinstance(meta, dict) else None
    return isinstance(labels, dict) and labels.get(HEARTBEAT_LABEL) == "node"


def renewed_at(lease: dict[str, Any]) -> float | None:
    """When a heartbeat Lease was last renewed (epoch seconds); None if it is not one or has no time."""
    if not isinstance(lease, dict) or not is_heartbeat(lease):
        return None
    spec = lease.get("spec") or {}
    return epoch_seconds(spec.get("renewTime")) if isinstance(spec, dict) else None
