"""A small synchronous client for the test's own calls to the apiserver (as admin, or as a
service account with a token). gpupair's processes use their own client; this one only sets
up objects and reads results, so it stays plain: JSON in, JSON out, server-side apply for
whole manifests, and the resource path of any kind found through discovery."""

from __future__ import annotations

import http.client
import json
import ssl
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterable
from typing import Any

MERGE = "application/merge-patch+json"
STRATEGIC = "application/strategic-merge-patch+json"
APPLY = "application/apply-patch+yaml"
FIELD_MANAGER = "gpupair-tests"


class ApiError(Exception):
    def __init__(self, status: int, method: str, path: str, body: Any) -> None:
        message = body.get("message") if isinstance(body, dict) else body
        super().__init__(f"{method} {path}: HTTP {status}: {message}")
        self.status = status
        self.body = body


class Api:
    """``host``:``port`` over TLS trusting ``ca_file``; a client certificate or a bearer token."""

    def __init__(self, host: str, port: int, ca_file: str, *, cert: tuple[str, str] | None = None,
                 token: str | None = None) -> None:
        self.host, self.port, self.token, self.ca_file = host, port, token, ca_file
        self._context = ssl.create_default_context(cafile=ca_file)
        if cert is not None:
            self._context.load_cert_chain(*cert)
        self._local = threading.local()
        self._resources: dict[tuple[str, str], tuple[str, bool]] = {}

    def as_token(self, token: str) -> Api:
        """The same apiserver, as whoever ``token`` names."""
        return Api(self.host, self.port, self.ca_file, token=token)

    # --- raw requests

    def _connection(self) -> http.client.HTTPSConnection:
        connection = getattr(self._local, "connection", None)
        if connection is None:
            connection = http.client.HTTPSConnection(self.host, self.port, context=self._context, timeout=30)
            self._local.connection = connection
        return connection

    def request(self, method: str, path: str, body: Any = None, content_type: str = "application/json",
                ok: Iterable[int] = (200, 201, 202)) -> Any:
        headers = {"Accept": "application/json"}
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        data = None
        if body is not None:
            data = body if isinstance(body, bytes) else json.dumps(body).encode()
            headers["Content-Type"] = content_type
        for attempt in (1, 2):
            connection = self._connection()
            try:
                connection.request(method, path, body=data, headers=headers)
                response = connection.getresponse()
                raw = response.read()
                break
            except (http.client.HTTPException, ConnectionError, OSError):
                connection.close()
                self._local.connection = None
                if attempt == 2:
                    raise
        try:
            answer = json.loads(raw) if raw else None
        except ValueError:
            answer = raw.decode(errors="replace")
        if response.status not in tuple(ok):
            raise ApiError(response.status, method, path, answer)
        return answer

    # --- object paths

    def resource(self, api_version: str, kind: str) -> tuple[str, bool]:
        """(plural, namespaced) of ``kind`` in ``api_version``, from discovery."""
        key = (api_version, kind)
        if key not in self._resources:
            base = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
            for entry in self.request("GET", base)["resources"]:
                if "/" not in entry["name"]:
                    self._resources[(api_version, entry["kind"])] = (entry["name"], entry["namespaced"])
        return self._resources[key]

    def path(self, api_version: str, kind: str, name: str = "", namespace: str = "", sub: str = "") -> str:
        plural, namespaced = self.resource(api_version, kind)
        base = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
        if namespaced and namespace:
            base += f"/namespaces/{namespace}"
        path = f"{base}/{plural}"
        if name:
            path += f"/{name}"
        if sub:
            path += f"/{sub}"
        return path

    def path_of(self, obj: dict[str, Any], sub: str = "") -> str:
        meta = obj["metadata"]
        return self.path(obj["apiVersion"], obj["kind"], meta["name"], meta.get("namespace", ""), sub)

    # --- verbs

    def get(self, api_version: str, kind: str, name: str, namespace: str = "") -> dict[str, Any]:
        return self.request("GET", self.path(api_version, kind, name, namespace))

    def find(self, api_version: str, kind: str, name: str, namespace: str = "") -> dict[str, Any] | None:
        try:
            return self.get(api_version, kind, name, namespace)
        except ApiError as exc:
            if exc.status == 404:
                return None
            raise

    def list(self, api_version: str, kind: str, namespace: str = "", **query: str) -> list[dict[str, Any]]:
        path = self.path(api_version, kind, namespace=namespace)
        if query:
            path += "?" + urllib.parse.urlencode({_camel(k): v for k, v in query.items()})
        return self.request("GET", path)["items"]

    def create(self, obj: dict[str, Any]) -> dict[str, Any]:
        meta = obj["metadata"]
        path = self.path(obj["apiVersion"], obj["kind"], namespace=meta.get("namespace", ""))
        return self.request("POST", path, obj)

    def apply(self, obj: dict[str, Any]) -> dict[str, Any]:
        """Server-side apply (create or update), as `kubectl apply --server-side --force-conflicts`."""
        path = self.path_of(obj) + f"?fieldManager={FIELD_MANAGER}&force=true"
        return self.request("PATCH", path, obj, APPLY)

    def patch(self, obj_or_path: dict[str, Any] | str, patch: dict[str, Any], content_type: str = MERGE,
              sub: str = "") -> dict[str, Any]:
        path = obj_or_path if isinstance(obj_or_path, str) else self.path_of(obj_or_path, sub)
        return self.request("PATCH", path, patch, content_type)

    def delete(self, obj_or_path: dict[str, Any] | str, grace: int | None = 0) -> None:
        path = obj_or_path if isinstance(obj_or_path, str) else self.path_of(obj_or_path)
        body = {"kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": "Background"}
        if grace is not None:
            body["gracePeriodSeconds"] = grace
        self.request("DELETE", path, body, ok=(200, 202, 404))

    def request_token(self, namespace: str, service_account: str, *, audiences: list[str] | None = None,
              bound_pod: dict[str, Any] | None = None, seconds: int = 3600) -> str:
        """A TokenRequest for the service account; ``bound_pod``: bound to that pod (and so, once
        the pod names a node, carrying the node's name as kubelet-minted tokens do)."""
        spec: dict[str, Any] = {"expirationSeconds": seconds}
        if audiences:
            spec["audiences"] = audiences
        if bound_pod is not None:
            spec["boundObjectRef"] = {"apiVersion": "v1", "kind": "Pod", "name": bound_pod["metadata"]["name"],
                                      "uid": bound_pod["metadata"]["uid"]}
        body = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": spec}
        path = self.path("v1", "ServiceAccount", service_account, namespace, "token")
        return self.request("POST", path, body)["status"]["token"]

    def wait_for(self, check: Callable[[], Any], timeout: float, what: str, interval: float = 0.1) -> Any:
        """Poll ``check`` until it returns something truthy; TimeoutError with ``what`` and its last value."""
        deadline = time.monotonic() + timeout
        last: Any = None
        while True:
            last = check()
            if last:
                return last
            if time.monotonic() > deadline:
                raise TimeoutError(f"{what}: not within {timeout:g} s (last: {last!r})")
            time.sleep(interval)


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part.capitalize() for part in rest)
