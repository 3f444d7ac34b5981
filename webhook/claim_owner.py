"""The pod a claim was made for, read from the API: the one thing the webhook reads.

A pod asks its placement and scope in its own annotations, as on the device-plugin path; its
claims, made from a template by the resourceclaim controller in kube-controller-manager, are
admitted separately, and their admission review names the pod only in the claim's controller
ownerReference (name and UID; webhook.claims.owner_pod). So the webhook reads that pod
(``get pods``, the dra component's Role) to plan the claim under the pod's ask.

The controller creates a claim only once its pod exists, so the pod is there to read. A read
that fails (the API slow or down, the pod gone or replaced by another of the same name) must
not hold up the claim: it is answered within ``timeout`` (well inside the webhook entry's
``timeoutSeconds``) with None, logged with the reason, and the claim is planned as if its pod
asked nothing (its template's, its namespace's or the cluster's intent).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING

from gpupair.kubeclient.kube import describe_error

if TYPE_CHECKING:
    from kubernetes_asyncio import client as k8s

log = logging.getLogger("gpupair.webhook")

READ_TIMEOUT = 2.0  # seconds; the claim entries' timeoutSeconds is 5


class PodReader:
    """Reads the annotations of the pod a claim was made for."""

    def __init__(self, api: k8s.ApiClient, timeout: float = READ_TIMEOUT) -> None:
        self.api = api
        self.timeout = timeout

    async def annotations(self, namespace: str, name: str, uid: str) -> Mapping[str, str] | None:
        """The pod's annotations ({} for none); None when it cannot be read in time, or the pod
        of that name is not the claim's owner (another UID)."""
        path = f"/api/v1/namespaces/{namespace}/pods/{name}"
        try:
            pod = await asyncio.wait_for(self.api.call_api(
                path, "GET", header_params={"Accept": "application/json"}, response_types_map={200: "object"},
                auth_settings=["BearerToken"], _return_http_data_only=True, _request_timeout=self.timeout),
                self.timeout)
        except Exception as exc:  # ApiException, OSError, a timeout: the claim is planned without its pod's ask
            log.warning("cannot read the claim's pod; planned without its ask",
                        extra={"namespace": namespace, "pod": name, "error": describe_error(exc)})
            return None
        meta = pod.get("metadata") if isinstance(pod, Mapping) else None
        if not isinstance(meta, Mapping) or meta.get("uid") != uid:
            log.warning("the claim's pod was replaced; planned without its ask",
                        extra={"namespace": namespace, "pod": name, "uid": uid})
            return None
        annotations = meta.get("annotations")
        if not isinstance(annotations, Mapping):
            return {}
        return {k: v for k, v in annotations.items() if isinstance(k, str) and isinstance(v, str)}
