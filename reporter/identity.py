"""Who is calling: a pod's projected service-account token, confirmed by a TokenReview.

Wire models follow k8s.io/api/authentication/v1. Facts the checks rely on (seen on a v1.36
apiserver): a token bound to a scheduled pod carries one-item lists under
``authentication.kubernetes.io/pod-name``, ``pod-uid`` and ``node-name`` in ``status.user.extra``;
a token minted before the pod was scheduled has no node claims; the namespace is only in the
username ``system:serviceaccount:NS:SA``; a failed review still answers HTTP 201, with
``status.authenticated`` absent and ``status.error`` set.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from kubernetes_asyncio import client as k8s
from pydantic import Field, ValidationError

from gpupair.kubewire.wire import KubeWire, UserInfo, explain

API_VERSION = "authentication.k8s.io/v1"
TOKEN_REVIEWS = "/apis/authentication.k8s.io/v1/tokenreviews"
POD_NAME_CLAIM = "authentication.kubernetes.io/pod-name"
POD_UID_CLAIM = "authentication.kubernetes.io/pod-uid"
NODE_NAME_CLAIM = "authentication.kubernetes.io/node-name"
_SERVICE_ACCOUNT = re.compile(r"^system:serviceaccount:([^:]+):([^:]+)$")
MAX_TOKEN_BYTES = 16 * 1024


class TokenReviewStatus(KubeWire):
    authenticated: bool = False  # omitempty: absent means false
    user: UserInfo = Field(default_factory=UserInfo)
    audiences: list[str] = Field(default_factory=list)
    error: str = ""


class TokenReview(KubeWire):
    apiVersion: str
    kind: str
    status: TokenReviewStatus = Field(default_factory=TokenReviewStatus)


class Refused(Exception):
    """A verification request that is answered with an error; ``status`` is the HTTP code."""

    def __init__(self, status: int, message: str, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.retry_after = retry_after


@dataclass(frozen=True)
class PodIdentity:
    namespace: str
    service_account: str
    pod_name: str
    pod_uid: str
    node_name: str


def bearer_token(authorization: str | None) -> str:
    if not authorization:
        raise Refused(401, "no Authorization header: send the pod's gpupair-reporter token as a Bearer token")
    scheme, _, token = authorization.strip().partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token:
        raise Refused(401, "the Authorization header must be 'Bearer <token>'")
    if len(token) > MAX_TOKEN_BYTES or not token.isascii() or not token.isprintable() or " " in token:
        raise Refused(401, "the bearer token is not a service-account token")
    return token


def review_body(token: str, audience: str) -> dict[str, Any]:
    return {"apiVersion": API_VERSION, "kind": "TokenReview", "spec": {"token": token, "audiences": [audience]}}


async def review_token(api: k8s.ApiClient, token: str, audience: str, timeout: float = 10.0) -> TokenReviewStatus:
    """POST a TokenReview with the reporter's credentials. Raises ApiException on HTTP errors."""
    data = await api.call_api(
        TOKEN_REVIEWS,
        "POST",
        body=review_body(token, audience),
        header_params={"Content-Type": "application/json", "Accept": "application/json"},
        response_types_map={200: "object", 201: "object"},
        auth_settings=["BearerToken"],
        _return_http_data_only=True,
        _request_timeout=timeout,
    )
    try:
        return TokenReview.model_validate(data).status
    except ValidationError as exc:
        raise ValueError(f"the apiserver's TokenReview answer does not parse: {explain(exc)}") from None


def _claim(extra: dict[str, list[str]], key: str) -> str | None:
    values = extra.get(key) or []
    return values[0] if len(values) == 1 and values[0] else None


def pod_identity(status: TokenReviewStatus, audience: str, node_name: str) -> PodIdentity:
    """The calling pod, if the review proves one on this node; else Refused saying why."""
    if not status.authenticated:
        raise Refused(401, f"token rejected by the apiserver: {status.error or 'not authenticated'}")
    if audience not in status.audiences:
        raise Refused(401, f"token is not bound to audience {audience!r}")
    match = _SERVICE_ACCOUNT.match(status.user.username)
    if not match:
        raise Refused(403, f"{status.user.username!r} is not a service account")
    extra = status.user.extra
    pod_name, pod_uid = _claim(extra, POD_NAME_CLAIM), _claim(extra, POD_UID_CLAIM)
    if not pod_name or not pod_uid:
        raise Refused(403, "token is not bound to a pod (no pod-name/pod-uid claims); mount a projected token")
    token_node = _claim(extra, NODE_NAME_CLAIM)
    if not token_node:
        raise Refused(
            403,
            "token carries no node claim (minted before the pod was scheduled, or the apiserver "
            "predates ServiceAccountTokenPodNodeInfo); it cannot prove the pod is on this node",
        )
    if token_node != node_name:
        raise Refused(403, f"token belongs to a pod on node {token_node!r}; this reporter serves {node_name!r}")
    return PodIdentity(match.group(1), match.group(2), pod_name, pod_uid, token_node)
