"""A kube-apiserver test double: a real aiohttp server on a loopback port.

Why not kmock (0.8): its KubernetesEmulator stores objects, but lists carry a literal
``resourceVersion: '...'``, objects get no resourceVersion/uid, a watch always replays every
object from scratch (no resume from a resourceVersion, no BOOKMARK, no 410), PATCH is a plain
dict merge whatever the Content-Type, and there is no generateName, field selector, binding,
log or TokenReview behaviour. Those are exactly the parts gpupair relies on, so this module
implements them directly, following the apiserver's observable behaviour:

* one global resourceVersion counter (like etcd's revision) bumped on every write;
  a no-op PATCH writes nothing and sends no event;
* list items carry no ``kind``/``apiVersion`` (watch events and GETs do);
* a watch resumes after ``resourceVersion``; unset or "0" starts with synthetic ADDED
  events; a resourceVersion older than the compaction floor gets HTTP 200 and an ERROR event
  carrying a 410 ``Expired`` Status (as the watch cache does);
* a field/label-selected watch turns "starts matching" into ADDED and "stops matching"
  into DELETED;
* errors are ``Status`` objects with the apiserver's reasons and messages;
* a TokenReview of a pod-bound token fails (HTTP 201, ``status.error``) once that pod is
  deleted or replaced by a namesake with another UID;
* ``dryRun=All`` on a create or a patch answers what would be stored and stores nothing (no
  admission policy runs here: every dry run is admitted).

resource.k8s.io/v1 (ResourceSlices, DeviceClasses, ResourceClaims and their templates) is
served as stored objects with the kinds' selectable fields; a claim's ``/status`` writes the
whole object. Nothing allocates: tests play kube-scheduler's allocator by writing
``status.allocation`` themselves.

Known simplifications: strategic merge patch merges maps like a JSON merge patch and merges
lists only for a few keyed lists (conditions by type, containers by name); pods are deleted at
once (no kubelet to wait for); ``limit``/``continue`` are ignored (a full list is a valid answer);
no server-side apply (answers 415).
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import json
import random
import re
import ssl
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web
from kubernetes_asyncio import client as k8s

# resource plural -> (kind, apiVersion, namespaced)
RESOURCES: dict[str, tuple[str, str, bool]] = {
    "nodes": ("Node", "v1", False),
    "pods": ("Pod", "v1", True),
    "events": ("Event", "v1", True),
    "configmaps": ("ConfigMap", "v1", True),
    "leases": ("Lease", "coordination.k8s.io/v1", True),
    "resourceslices": ("ResourceSlice", "resource.k8s.io/v1", False),
    "deviceclasses": ("DeviceClass", "resource.k8s.io/v1", False),
    "resourceclaims": ("ResourceClaim", "resource.k8s.io/v1", True),
    "resourceclaimtemplates": ("ResourceClaimTemplate", "resource.k8s.io/v1", True),
}
# Field selectors each resource accepts (others answer 400, like the apiserver).
FIELD_LABELS: dict[str, set[str]] = {
    "nodes": {"metadata.name", "spec.unschedulable"},
    "pods": {
        "metadata.name", "metadata.namespace", "spec.nodeName", "spec.restartPolicy",
        "spec.schedulerName", "spec.serviceAccountName", "status.phase", "status.podIP",
        "status.nominatedNodeName",
    },
    "events": {
        "metadata.name", "metadata.namespace", "involvedObject.kind", "involvedObject.name",
        "involvedObject.namespace", "involvedObject.uid", "reason", "type",
        "regarding.kind", "regarding.name", "regarding.namespace",
    },
    "leases": {"metadata.name", "metadata.namespace"},
    "configmaps": {"metadata.name", "metadata.namespace"},
    # k8s.io/kubernetes pkg/registry/resource/*/strategy.go: the selectable fields of each kind
    "resourceslices": {"metadata.name", "spec.nodeName", "spec.driver"},
    "deviceclasses": {"metadata.name"},
    "resourceclaims": {"metadata.name", "metadata.namespace"},
    "resourceclaimtemplates": {"metadata.name", "metadata.namespace"},
}
REASONS = {
    400: "BadRequest", 401: "Unauthorized", 403: "Forbidden", 404: "NotFound",
    405: "MethodNotAllowed", 409: "Conflict", 410: "Gone", 415: "UnsupportedMediaType",
    422: "Invalid", 429: "TooManyRequests", 500: "InternalError", 503: "ServiceUnavailable",
    504: "Timeout",
}
DEFAULT_AUDIENCES = ["https://kubernetes.default.svc.cluster.local"]
POD_NAME_CLAIM = "authentication.kubernetes.io/pod-name"  # a pod-bound token's claims, in a review's user.extra
POD_UID_CLAIM = "authentication.kubernetes.io/pod-uid"
_NAME_CHARS = "bcdfghjklmnpqrstvwxz2456789"  # apiserver's generateName alphabet
_TRUE = {"1", "t", "T", "true", "TRUE", "True"}  # Go strconv.ParseBool


def now_rfc3339() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


# --------------------------------------------------------------------------- errors


class ApiError(Exception):
    """An apiserver error; rendered as a ``Status`` object."""

    def __init__(self, code: int, message: str, reason: str | None = None, details: dict | None = None):
        super().__init__(message)
        self.code, self.message = code, message
        self.reason = reason or REASONS.get(code, "Unknown")
        self.details = details

    def status(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": self.message, "reason": self.reason,
        }
        if self.details:
            body["details"] = self.details
        body["code"] = self.code
        return body


def not_found(resource: str, name: str) -> ApiError:
    return ApiError(404, f'{resource} "{name}" not found', "NotFound", {"name": name, "kind": resource})


def already_exists(resource: str, name: str) -> ApiError:
    return ApiError(409, f'{resource} "{name}" already exists', "AlreadyExists", {"name": name, "kind": resource})


def conflict(resource: str, name: str, why: str) -> ApiError:
    return ApiError(409, f'Operation cannot be fulfilled on {resource} "{name}": {why}', "Conflict",
                    {"name": name, "kind": resource})


def invalid(kind: str, name: str, causes: list[tuple[str, str, str]]) -> ApiError:
    """causes: (reason e.g. FieldValueRequired, field path, message)."""
    text = ", ".join(f"{f}: {m}" for _, f, m in causes)
    return ApiError(422, f'{kind} "{name}" is invalid: {text}', "Invalid", {
        "name": name, "kind": kind,
        "causes": [{"reason": r, "message": m, "field": f} for r, f, m in causes],
    })


def expired(requested: int, oldest: int) -> ApiError:
    return ApiError(410, f"too old resource version: {requested} ({oldest})", "Expired")


# --------------------------------------------------------------------------- patches and selectors


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


_SMP_LIST_KEYS = {"conditions": "type", "containers": "name", "initContainers": "name"}


def strategic_merge_patch(target: Any, patch: Any, key: str | None = None) -> Any:
    """Strategic merge patch, enough for metadata maps and a few keyed lists."""
    if isinstance(patch, list) and key in _SMP_LIST_KEYS and isinstance(target, list):
        merge_key = _SMP_LIST_KEYS[key]
        result = [copy.deepcopy(item) for item in target]
        for item in patch:
            for i, old in enumerate(result):
                if old.get(merge_key) == item.get(merge_key):
                    result[i] = strategic_merge_patch(old, item)
                    break
            else:
                result.append(copy.deepcopy(item))
        return result
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for k, value in patch.items():
        if value is None:
            result.pop(k, None)
        else:
            result[k] = strategic_merge_patch(result.get(k), value, k)
    return result


def _dig(obj: dict, dotted: str) -> str:
    value: Any = obj
    for part in dotted.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def parse_field_selector(resource: str, text: str) -> list[tuple[str, bool, str]]:
    """``a=b,c!=d`` -> [(field, equal?, value)]; unknown fields are a 400."""
    terms = []
    for part in filter(None, text.split(",")):
        m = re.fullmatch(r"\s*([^!=\s]+)\s*(==|=|!=)\s*(.*?)\s*", part)
        if not m:
            raise ApiError(400, f'invalid selector: "{text}"; can\'t understand "{part}"')
        name, op, value = m.groups()
        if name not in FIELD_LABELS[resource]:
            raise ApiError(400, f"field label not supported: {name}")
        terms.append((name, op != "!=", value))
    return terms


def parse_label_selector(text: str) -> list[tuple[str, str, set[str]]]:
    """Equality, set-based and existence terms -> [(key, op, values)]."""
    terms = []
    for part in filter(None, (p.strip() for p in re.split(r",(?![^()]*\))", text))):
        if m := re.fullmatch(r"(\S+?)\s+(in|notin)\s+\(([^)]*)\)", part):
            terms.append((m[1], m[2], {v.strip() for v in m[3].split(",") if v.strip()}))
        elif m := re.fullmatch(r"([^!=\s]+)\s*(==|=|!=)\s*(\S*)", part):
            terms.append((m[1], "notin" if m[2] == "!=" else "in", {m[3]}))
        elif m := re.fullmatch(r"!\s*(\S+)", part):
            terms.append((m[1], "!", set()))
        elif re.fullmatch(r"[^\s!=()]+", part):
            terms.append((part, "exists", set()))
        else:
            raise ApiError(400, f"unable to parse requirement: {part!r}")
    return terms


@dataclass
class Selector:
    resource: str
    namespace: str | None = None
    fields: list[tuple[str, bool, str]] = field(default_factory=list)
    labels: list[tuple[str, str, set[str]]] = field(default_factory=list)

    def matches(self, obj: dict | None) -> bool:
        if obj is None:
            return False
        meta = obj.get("metadata", {})
        if self.namespace is not None and meta.get("namespace") != self.namespace:
            return False
        for name, equal, value in self.fields:
            if (_dig(obj, name) == value) != equal:
                return False
        labels = meta.get("labels") or {}
        for key, op, values in self.labels:
            ok = {
                "in": key in labels and labels[key] in values,
                "notin": key not in labels or labels[key] not in values,
                "exists": key in labels,
                "!": key not in labels,
            }[op]
            if not ok:
                return False
        return True


# --------------------------------------------------------------------------- store


@dataclass
class Change:
    rv: int
    resource: str
    type: str  # ADDED / MODIFIED / DELETED
    obj: dict
    old: dict | None


@dataclass(eq=False)  # identity-hashed: kept in a set
class Watcher:
    selector: Selector
    bookmarks: bool
    queue: asyncio.Queue = field(default_factory=asyncio.Queue)


class Store:
    """Objects by resource and (namespace, name), with a change history for watch resumes.

    Outlives a server stop/start, as etcd outlives an apiserver restart."""

    def __init__(self, seed: int = 0):
        self.rv = 1
        self.oldest_rv = 1  # watches from before this get 410 Expired
        self.objects: dict[str, dict[tuple[str, str], dict]] = {r: {} for r in RESOURCES}
        self.history: list[Change] = []
        self.logs: dict[tuple[str, str, str | None], str] = {}
        self.watchers: set[Watcher] = set()
        self._random = random.Random(seed)

    # ---- reads (tests may call these directly)

    def get(self, resource: str, name: str, namespace: str = "") -> dict | None:
        obj = self.objects[resource].get((namespace, name))
        return copy.deepcopy(obj) if obj else None

    def items(self, resource: str, namespace: str | None = None) -> list[dict]:
        sel = Selector(resource, namespace)
        return [copy.deepcopy(o) for _, o in sorted(self.objects[resource].items()) if sel.matches(o)]

    def node(self, name: str) -> dict | None:
        return self.get("nodes", name)

    def pod(self, namespace: str, name: str) -> dict | None:
        return self.get("pods", name, namespace)

    # ---- writes

    def create(self, resource: str, obj: dict, namespace: str = "") -> dict:
        kind, api_version, namespaced = RESOURCES[resource]
        obj = copy.deepcopy(obj)
        obj.setdefault("kind", kind)
        obj.setdefault("apiVersion", api_version)
        meta = obj.setdefault("metadata", {})
        if namespaced:
            meta["namespace"] = namespace or meta.get("namespace") or "default"
        else:
            meta.pop("namespace", None)
        if not meta.get("name"):
            if not meta.get("generateName"):
                raise invalid(kind, "", [("FieldValueRequired", "metadata.name",
                                          "Required value: name or generateName is required")])
            meta["name"] = meta["generateName"] + "".join(self._random.choice(_NAME_CHARS) for _ in range(5))
        key = (meta.get("namespace", ""), meta["name"])
        if key in self.objects[resource]:
            raise already_exists(resource, meta["name"])
        meta["uid"] = meta.get("uid") or str(uuid.uuid4())
        meta["creationTimestamp"] = now_rfc3339()
        if resource == "pods":
            obj.setdefault("spec", {})
            obj.setdefault("status", {}).setdefault("phase", "Pending")
        self._commit(resource, "ADDED", obj, None)
        return copy.deepcopy(obj)

    def update(self, resource: str, name: str, namespace: str, new: dict) -> dict:
        """Replace an object with ``new`` (identity fields kept); no write if nothing changed."""
        old = self.objects[resource].get((namespace, name))
        if old is None:
            raise not_found(resource, name)
        new = copy.deepcopy(new)
        meta = new.setdefault("metadata", {})
        for key in ("name", "namespace", "uid", "creationTimestamp", "resourceVersion"):
            if key in old["metadata"]:
                meta[key] = old["metadata"][key]
        new["kind"], new["apiVersion"] = old["kind"], old["apiVersion"]
        if new == old:
            return copy.deepcopy(old)
        self._commit(resource, "MODIFIED", new, old)
        return copy.deepcopy(new)

    def patch(self, resource: str, name: str, patch: dict, namespace: str = "") -> dict:
        """Merge-patch from a test (as another client would)."""
        old = self.objects[resource].get((namespace, name))
        if old is None:
            raise not_found(resource, name)
        return self.update(resource, name, namespace, merge_patch(old, patch))

    def delete(self, resource: str, name: str, namespace: str = "") -> dict:
        old = self.objects[resource].get((namespace, name))
        if old is None:
            raise not_found(resource, name)
        gone = copy.deepcopy(old)
        self._commit(resource, "DELETED", gone, old)
        return copy.deepcopy(self.history[-1].obj)

    def compact(self, keep: int = 0) -> int:
        """Forget history up to now, or all but the newest ``keep`` changes (as etcd compacts
        behind a window): older resourceVersions answer 410 from here on."""
        del self.history[:max(0, len(self.history) - keep)]
        self.oldest_rv = self.history[0].rv - 1 if self.history else self.rv
        return self.oldest_rv

    def set_log(self, namespace: str, pod: str, text: str, container: str | None = None) -> None:
        self.logs[(namespace, pod, container)] = text

    def bookmark_all(self) -> None:
        """Send a BOOKMARK at the current resourceVersion to every watch that allows them."""
        for w in self.watchers:
            if w.bookmarks:
                w.queue.put_nowait(("BOOKMARK", bookmark(w.selector.resource, self.rv)))

    def _commit(self, resource: str, type_: str, obj: dict, old: dict | None) -> None:
        self.rv += 1
        obj["metadata"]["resourceVersion"] = str(self.rv)
        key = (obj["metadata"].get("namespace", ""), obj["metadata"]["name"])
        if type_ == "DELETED":
            self.objects[resource].pop(key, None)
        else:
            self.objects[resource][key] = obj
        change = Change(self.rv, resource, type_, copy.deepcopy(obj), copy.deepcopy(old))
        self.history.append(change)
        for w in self.watchers:
            event = watch_event(w.selector, change)
            if event:
                w.queue.put_nowait(event)


def bookmark(resource: str, rv: int, initial_events_end: bool = False) -> dict:
    kind, api_version, _ = RESOURCES[resource]
    meta: dict[str, Any] = {"resourceVersion": str(rv)}
    if initial_events_end:
        meta["annotations"] = {"k8s.io/initial-events-end": "true"}
    return {"kind": kind, "apiVersion": api_version, "metadata": meta}


def watch_event(sel: Selector, change: Change) -> tuple[str, dict] | None:
    """What a selected watch sees of one change (selection changes become ADDED/DELETED)."""
    if change.resource != sel.resource:
        return None
    now = sel.matches(change.obj) if change.type != "DELETED" else False
    before = sel.matches(change.old)
    if change.type == "DELETED":
        return ("DELETED", change.obj) if before else None
    if now and before:
        return ("MODIFIED", change.obj)
    if now:
        return ("ADDED", change.obj)
    if before:
        return ("DELETED", change.obj)
    return None


# --------------------------------------------------------------------------- server


@dataclass
class RecordedRequest:
    method: str
    path: str
    query: dict[str, str]
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)

    @property
    def content_type(self) -> str:
        return self.headers.get("Content-Type", "")


@dataclass
class Fault:
    path: str
    method: str | None
    status: int
    remaining: int
    message: str
    reason: str | None


@dataclass
class TokenIdentity:
    username: str
    uid: str = ""
    groups: list[str] = field(default_factory=list)
    extra: dict[str, list[str]] = field(default_factory=dict)
    audiences: list[str] = field(default_factory=lambda: list(DEFAULT_AUDIENCES))


def _bool(query, name: str) -> bool:
    return query.get(name, "") in _TRUE


class KubeDouble:
    """The running server. See module docstring for the behaviour it copies."""

    def __init__(self, store: Store | None = None, host: str = "127.0.0.1", serve_dra: bool = True,
                 ssl_context: ssl.SSLContext | None = None):
        self.store = store or Store()
        self.host = host
        self.ssl_context = ssl_context  # serve HTTPS, as a real apiserver does
        self.serve_dra = serve_dra  # False: an apiserver without resource.k8s.io/v1 (404s)
        self.port = 0
        self.requests: list[RecordedRequest] = []
        self.tokens: dict[str, TokenIdentity] = {}
        self.faults: list[Fault] = []
        # Seconds a Binding takes before it is checked and applied: a real apiserver's admission
        # and etcd write take a few milliseconds (bench/extender.py --burst uses this).
        self.binding_delay = 0.0
        # Seconds each change of a resource waits before a watch sends it: a watch that lags
        # another client's view, as an informer can (watch_delay["resourceclaims"] = 0.5).
        self.watch_delay: dict[str, float] = {}
        self._runner: web.AppRunner | None = None
        self._streams: set[asyncio.BaseTransport] = set()  # open watch connections

    @property
    def url(self) -> str:
        return f"{'https' if self.ssl_context else 'http'}://{self.host}:{self.port}"

    def write_kubeconfig(self, path) -> "Path":
        """A kubeconfig file pointing at the double (plain HTTP, a token it ignores), for commands
        run as a user would run them: ``--kubeconfig PATH``."""
        from pathlib import Path

        path = Path(path)
        path.write_text(json.dumps({
            "apiVersion": "v1", "kind": "Config", "current-context": "double",
            "clusters": [{"name": "double", "cluster": {"server": self.url}}],
            "users": [{"name": "tester", "user": {"token": "test-token"}}],
            "contexts": [{"name": "double", "context": {"cluster": "double", "user": "tester"}}],
        }))
        return path

    # ---- test controls

    def add_token(self, token: str, username: str, *, uid: str = "", groups: list[str] | None = None,
                  extra: dict[str, list[str]] | None = None, audiences: list[str] | None = None) -> None:
        self.tokens[token] = TokenIdentity(username, uid, list(groups or []), dict(extra or {}),
                                           list(audiences or DEFAULT_AUDIENCES))

    def fail_next(self, path: str, status: int = 500, times: int = 1, *, method: str | None = None,
                  message: str = "injected fault", reason: str | None = None) -> None:
        """The next ``times`` requests to exactly ``path`` (optionally one method) get ``status``."""
        self.faults.append(Fault(path, method and method.upper(), status, times, message, reason))

    def requests_to(self, path: str, method: str | None = None) -> list[RecordedRequest]:
        return [r for r in self.requests if r.path == path and (method is None or r.method == method.upper())]

    async def start(self) -> None:
        """Listen (again) on the same port; the store survives restarts."""
        app = web.Application(middlewares=[self._record_and_fault], client_max_size=8 * 1024 * 1024)
        self._routes(app)
        self._runner = web.AppRunner(app, shutdown_timeout=0.5, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port, reuse_address=True, ssl_context=self.ssl_context)
        await site.start()
        if not self.port:
            self.port = self._runner.addresses[0][1]

    async def stop(self) -> None:
        """Vanish: cut open watch streams and stop listening (connections are refused)."""
        for transport in list(self._streams):
            transport.abort()
        for w in list(self.store.watchers):
            w.queue.put_nowait(None)
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    # ---- plumbing

    @web.middleware
    async def _record_and_fault(self, request: web.Request, handler):
        body = await request.read()
        self.requests.append(RecordedRequest(request.method, request.path, dict(request.query),
                                             dict(request.headers), body))
        for fault in self.faults:
            if fault.path == request.path and fault.method in (None, request.method) and fault.remaining > 0:
                fault.remaining -= 1
                return self._error(ApiError(fault.status, fault.message, fault.reason))
        try:
            return await handler(request)
        except ApiError as exc:
            return self._error(exc)
        except web.HTTPException:
            raise
        except Exception as exc:  # a bug in the double must still look like an apiserver 500
            return self._error(ApiError(500, f"double: {exc!r}"))

    @staticmethod
    def _error(exc: ApiError) -> web.Response:
        return web.json_response(exc.status(), status=exc.code)

    def _routes(self, app: web.Application) -> None:
        r = app.router
        r.add_get("/version", self._version)
        r.add_get("/api/v1/{resource:nodes}", self._collection)
        r.add_get("/api/v1/{resource:pods|events}", self._collection)
        r.add_route("*", "/api/v1/namespaces/{namespace}/{resource:pods|events}", self._collection)
        r.add_post("/apis/events.k8s.io/v1/namespaces/{namespace}/{resource:events}", self._collection)
        r.add_get("/apis/events.k8s.io/v1/namespaces/{namespace}/{resource:events}", self._collection)
        r.add_route("*", "/api/v1/{resource:nodes}/{name}", self._item)
        r.add_route("*", "/api/v1/namespaces/{namespace}/{resource:pods|events|configmaps}/{name}", self._item)
        r.add_post("/api/v1/namespaces/{namespace}/pods/{name}/binding", self._binding)
        r.add_get("/api/v1/namespaces/{namespace}/pods/{name}/log", self._log)
        r.add_post("/apis/authentication.k8s.io/v1/tokenreviews", self._token_review)
        leases = "/apis/coordination.k8s.io/v1"
        r.add_get(leases + "/{resource:leases}", self._collection)
        r.add_route("*", leases + "/namespaces/{namespace}/{resource:leases}", self._collection)
        r.add_route("*", leases + "/namespaces/{namespace}/{resource:leases}/{name}", self._item)
        dra = "/apis/resource.k8s.io/v1"
        if self.serve_dra:
            r.add_get(dra, self._dra_discovery)
            r.add_route("*", dra + "/{resource:resourceslices|deviceclasses}", self._collection)
            r.add_route("*", dra + "/{resource:resourceslices|deviceclasses}/{name}", self._item)
            r.add_get(dra + "/{resource:resourceclaims|resourceclaimtemplates}", self._collection)
            r.add_route("*", dra + "/namespaces/{namespace}/{resource:resourceclaims|resourceclaimtemplates}",
                        self._collection)
            r.add_route("*", dra + "/namespaces/{namespace}/{resource:resourceclaims|resourceclaimtemplates}/{name}",
                        self._item)
            r.add_route("*", dra + "/namespaces/{namespace}/{resource:resourceclaims}/{name}/status", self._item)

    async def _dra_discovery(self, request: web.Request) -> web.Response:
        resources = [{"name": name, "namespaced": namespaced, "kind": kind,
                      "verbs": ["create", "delete", "get", "list", "patch", "update", "watch"]}
                     for name, (kind, version, namespaced) in RESOURCES.items() if version == "resource.k8s.io/v1"]
        return web.json_response({"kind": "APIResourceList", "apiVersion": "v1",
                                  "groupVersion": "resource.k8s.io/v1", "resources": resources})

    async def _version(self, request: web.Request) -> web.Response:
        return web.json_response({"major": "1", "minor": "36", "gitVersion": "v1.36.2"})

    @staticmethod
    async def _json_body(request: web.Request) -> Any:
        try:
            return json.loads(await request.read())
        except ValueError as exc:
            raise ApiError(400, f"the body of the request was in an unknown format: {exc}") from None

    def _selector(self, request: web.Request, resource: str, namespace: str | None) -> Selector:
        q = request.query
        return Selector(resource, namespace, parse_field_selector(resource, q.get("fieldSelector", "")),
                        parse_label_selector(q.get("labelSelector", "")))

    # ---- collection: list, watch, create

    async def _collection(self, request: web.Request) -> web.StreamResponse:
        resource = request.match_info["resource"]
        namespace = request.match_info.get("namespace")
        if request.method == "POST":
            return await self._create(request, resource, namespace or "")
        if request.method != "GET":
            raise ApiError(405, "the server does not allow this method on the requested resource")
        selector = self._selector(request, resource, namespace)
        if _bool(request.query, "watch"):
            return await self._watch(request, selector)
        rv = request.query.get("resourceVersion", "")
        if request.query.get("resourceVersionMatch") == "Exact" and rv and int(rv) < self.store.oldest_rv:
            raise ApiError(410, "The resourceVersion for the provided list is too old.", "Expired")
        kind, api_version, _ = RESOURCES[resource]
        items = []
        for obj in self.store.items(resource):
            if selector.matches(obj):
                obj.pop("kind", None)
                obj.pop("apiVersion", None)
                items.append(obj)
        return web.json_response({"kind": f"{kind}List", "apiVersion": api_version,
                                  "metadata": {"resourceVersion": str(self.store.rv)}, "items": items})

    async def _watch(self, request: web.Request, selector: Selector) -> web.StreamResponse:
        q = request.query
        store = self.store
        watcher = Watcher(selector, _bool(q, "allowWatchBookmarks"))
        rv_text = q.get("resourceVersion", "")
        send_initial = _bool(q, "sendInitialEvents") or rv_text in ("", "0")
        initial: list[tuple[str, dict]] = []
        error: ApiError | None = None
        # Nothing below awaits until the watcher is registered, so no change slips between.
        if send_initial:
            initial = [("ADDED", o) for o in store.items(selector.resource) if selector.matches(o)]
            if _bool(q, "sendInitialEvents") and watcher.bookmarks:
                initial.append(("BOOKMARK", bookmark(selector.resource, store.rv, initial_events_end=True)))
        else:
            try:
                since = int(rv_text)
            except ValueError:
                raise ApiError(400, f'invalid resource version "{rv_text}"') from None
            if since < store.oldest_rv:
                error = expired(since, store.oldest_rv)
            else:
                for change in store.history:
                    if change.rv > since and (event := watch_event(selector, change)):
                        initial.append(event)
        if error is None:
            store.watchers.add(watcher)
        response = web.StreamResponse(headers={"Content-Type": "application/json"})
        transport = request.transport
        if transport is not None:
            self._streams.add(transport)
        try:
            await response.prepare(request)
            if error is not None:
                await self._send(response, "ERROR", error.status())
                return response
            for type_, obj in initial:
                await self._send(response, type_, obj)
            timeout = float(q["timeoutSeconds"]) if q.get("timeoutSeconds") else None
            deadline = None if timeout is None else asyncio.get_running_loop().time() + timeout
            while True:
                remaining = None if deadline is None else deadline - asyncio.get_running_loop().time()
                if remaining is not None and remaining <= 0:
                    break
                try:
                    event = await asyncio.wait_for(watcher.queue.get(), remaining)
                except TimeoutError:
                    break
                if event is None:  # server stopping
                    break
                if lag := self.watch_delay.get(selector.resource):
                    await asyncio.sleep(lag)
                await self._send(response, *event)
            await response.write_eof()
        except (ConnectionResetError, asyncio.CancelledError):
            pass
        finally:
            store.watchers.discard(watcher)
            self._streams.discard(transport)
        return response

    @staticmethod
    async def _send(response: web.StreamResponse, type_: str, obj: dict) -> None:
        await response.write(json.dumps({"type": type_, "object": obj}).encode() + b"\n")

    async def _create(self, request: web.Request, resource: str, namespace: str) -> web.Response:
        body = await self._json_body(request)
        if not isinstance(body, dict):
            raise ApiError(400, "the body of the request was in an unknown format")
        body_ns = (body.get("metadata") or {}).get("namespace")
        if body_ns and namespace and body_ns != namespace:
            raise ApiError(400, "the namespace of the provided object does not match the namespace sent on the request")
        if resource == "events":
            self._validate_event(request.path, body, namespace)
        if _dry_run(request):
            return web.json_response(body, status=201)
        obj = self.store.create(resource, body, namespace)
        return web.json_response(obj, status=201)

    @staticmethod
    def _validate_event(path: str, event: dict, namespace: str) -> None:
        name = (event.get("metadata") or {}).get("name", "")
        causes = []
        if path.startswith("/apis/events.k8s.io/"):
            regarding = event.get("regarding") or {}
            time_ = event.get("eventTime")
            if not time_:
                causes.append(("FieldValueRequired", "eventTime", "Required value"))
            elif not re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}(Z|[+-]\d\d:\d\d)", time_):
                causes.append(("FieldValueInvalid", "eventTime", f'Invalid value: "{time_}": not RFC3339 micro'))
            for key in ("reportingController", "reportingInstance", "action", "reason"):
                if not event.get(key):
                    causes.append(("FieldValueRequired", key, "Required value"))
                elif len(event[key]) > 128:
                    causes.append(("FieldValueTooLong", key, "Too long: may not be more than 128 bytes"))
            if len(event.get("note") or "") > 1024:
                causes.append(("FieldValueTooLong", "note", "Too long: may not be more than 1024 bytes"))
        else:
            regarding = event.get("involvedObject") or {}
        if event.get("type") not in ("Normal", "Warning"):
            causes.append(("FieldValueNotSupported", "type",
                           f'Unsupported value: "{event.get("type")}": supported values: "Normal", "Warning"'))
        reg_ns = regarding.get("namespace") or ""
        if (reg_ns and reg_ns != namespace) or (not reg_ns and namespace not in ("", "default")):
            causes.append(("FieldValueInvalid", "involvedObject.namespace",
                           f'Invalid value: "{reg_ns}": does not match event.namespace'))
        if causes:
            raise invalid("Event", name, causes)

    # ---- one object: get, patch, delete

    async def _item(self, request: web.Request) -> web.Response:
        resource = request.match_info["resource"]
        namespace = request.match_info.get("namespace", "")
        name = request.match_info["name"]
        if request.method == "GET":
            obj = self.store.get(resource, name, namespace)
            if obj is None:
                raise not_found(resource, name)
            return web.json_response(obj)
        if request.method == "PATCH":
            return web.json_response(await self._patch(request, resource, namespace, name))
        if request.method == "PUT":
            return web.json_response(await self._replace(request, resource, namespace, name))
        if request.method == "DELETE":
            gone = self.store.delete(resource, name, namespace)
            if resource == "pods":  # the pod registry returns the deleted object
                return web.json_response(gone)
            return web.json_response({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success",
                                      "details": {"name": name, "kind": resource,
                                                  "uid": gone["metadata"]["uid"]}})
        raise ApiError(405, "the server does not allow this method on the requested resource")

    async def _patch(self, request: web.Request, resource: str, namespace: str, name: str) -> dict:
        content_type = request.content_type
        old = self.store.get(resource, name, namespace)
        if old is None:
            raise not_found(resource, name)
        patch = await self._json_body(request)
        if content_type == "application/merge-patch+json":
            new = merge_patch(old, patch)
        elif content_type == "application/strategic-merge-patch+json":
            new = strategic_merge_patch(old, patch)
        elif content_type == "application/json-patch+json":
            import jsonpatch

            try:
                new = jsonpatch.apply_patch(old, patch)
            except (jsonpatch.JsonPatchException, jsonpatch.JsonPointerException) as exc:
                raise ApiError(422, f"the server rejected our request due to an error in our request: {exc}",
                               "Invalid") from None
        else:
            raise ApiError(415, f'the body of the request was in an unknown format - accepted media types include: '
                                f'application/json-patch+json, application/merge-patch+json, '
                                f'application/strategic-merge-patch+json', "UnsupportedMediaType")
        if not isinstance(patch, (dict, list)):
            raise ApiError(400, "the body of the request was in an unknown format")
        wanted_rv = (patch.get("metadata") or {}).get("resourceVersion") if isinstance(patch, dict) else None
        if wanted_rv and wanted_rv != old["metadata"]["resourceVersion"]:
            raise conflict(resource, name, "the object has been modified; please apply your changes "
                                           "to the latest version and try again")
        if _dry_run(request):
            return new
        return self.store.update(resource, name, namespace, new)

    async def _replace(self, request: web.Request, resource: str, namespace: str, name: str) -> dict:
        """PUT: a whole object; with metadata.resourceVersion set it must be the current one
        (optimistic concurrency, as leader election and Lease renewals rely on)."""
        old = self.store.get(resource, name, namespace)
        if old is None:
            raise not_found(resource, name)
        body = await self._json_body(request)
        if not isinstance(body, dict):
            raise ApiError(400, "the body of the request was in an unknown format")
        meta = body.get("metadata") or {}
        if meta.get("name") not in (None, name):
            raise ApiError(400, "the name of the object does not match the name on the URL")
        wanted_rv = meta.get("resourceVersion")
        if wanted_rv and wanted_rv != old["metadata"]["resourceVersion"]:
            raise conflict(resource, name, "the object has been modified; please apply your changes "
                                           "to the latest version and try again")
        return self.store.update(resource, name, namespace, body)

    # ---- subresources

    async def _binding(self, request: web.Request) -> web.Response:
        namespace, name = request.match_info["namespace"], request.match_info["name"]
        binding = await self._json_body(request)
        if self.binding_delay:
            await asyncio.sleep(self.binding_delay)  # before the check-and-set, which stays atomic
        meta = binding.get("metadata") or {}
        if meta.get("name") != name:
            raise ApiError(400, "the name of the object does not match the name on the URL")
        target = binding.get("target") or {}
        if target.get("kind") not in (None, "", "Node"):
            raise ApiError(400, "must be empty or 'Node'")  # the apiserver's check on target.kind
        if not target.get("name"):
            raise invalid("Binding", name, [("FieldValueRequired", "target.name", "Required value")])
        pod = self.store.get("pods", name, namespace)
        if pod is None:
            raise not_found("pods", name)
        if meta.get("uid") and meta["uid"] != pod["metadata"]["uid"]:
            raise conflict("pods", name, f"Precondition failed: UID in precondition: {meta['uid']}, "
                                         f"UID in object meta: {pod['metadata']['uid']}")
        if pod["metadata"].get("deletionTimestamp"):
            raise conflict("pods/binding", name, f"pod {name} is being deleted, cannot be assigned to a host")
        if pod["spec"].get("nodeName"):
            raise conflict("pods/binding", name, f'pod {name} is already assigned to node "{pod["spec"]["nodeName"]}"')
        pod["spec"]["nodeName"] = target["name"]
        if meta.get("annotations"):
            pod["metadata"].setdefault("annotations", {}).update(meta["annotations"])
        conditions = [c for c in pod.setdefault("status", {}).get("conditions", []) if c.get("type") != "PodScheduled"]
        conditions.append({"type": "PodScheduled", "status": "True", "lastProbeTime": None,
                           "lastTransitionTime": now_rfc3339()})
        pod["status"]["conditions"] = conditions
        self.store.update("pods", name, namespace, pod)
        return web.json_response({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success",
                                  "code": 201}, status=201)

    async def _log(self, request: web.Request) -> web.Response:
        namespace, name = request.match_info["namespace"], request.match_info["name"]
        pod = self.store.get("pods", name, namespace)
        if pod is None:
            raise not_found("pods", name)
        names = [c.get("name") for c in pod["spec"].get("containers", [])]
        container = request.query.get("container")
        if not container:
            if len(names) > 1:
                raise ApiError(400, f"a container name must be specified for pod {name}, "
                                    f"choose one of: [{' '.join(names)}]")
            container = names[0] if names else None
        elif names and container not in names:
            raise ApiError(400, f"container {container} is not valid for pod {name}")
        text = self.store.logs.get((namespace, name, container), self.store.logs.get((namespace, name, None)))
        if text is None:
            raise ApiError(400, f'container "{container}" in pod "{name}" is waiting to start: ContainerCreating')
        if request.query.get("tailLines"):
            lines = text.splitlines(keepends=True)
            text = "".join(lines[-int(request.query["tailLines"]):]) if int(request.query["tailLines"]) else ""
        return web.Response(text=text, content_type="text/plain")

    def _bound_pod_gone(self, identity: TokenIdentity) -> str | None:
        """Why a pod-bound token no longer authenticates, or None: the apiserver's validator
        (pkg/serviceaccount/claims.go) reads the bound pod on every review and rejects the token
        once that pod is gone, or replaced by one of the same name with another UID."""
        name = (identity.extra.get(POD_NAME_CLAIM) or [""])[0]
        if not name:
            return None
        namespace = identity.username.split(":")[2] if identity.username.count(":") == 3 else ""
        pod = self.store.pod(namespace, name)
        if pod is None:
            return "service account token has been invalidated"
        claimed, actual = (identity.extra.get(POD_UID_CLAIM) or [""])[0], pod["metadata"]["uid"]
        if claimed != actual:
            return f"pod UID ({actual}) does not match service account pod ref claim ({claimed})"
        return None

    async def _token_review(self, request: web.Request) -> web.Response:
        review = await self._json_body(request)
        spec = review.get("spec") or {}
        token = spec.get("token") or ""
        if not token:
            raise ApiError(400, "token is required for TokenReview in authentication")
        identity = self.tokens.get(token)
        wanted = spec.get("audiences") or []
        status: dict[str, Any] = {"user": {}}
        if identity is None:
            status["error"] = "[invalid bearer token, token lookup failed]"
        elif wanted and not set(wanted) & set(identity.audiences):
            status["error"] = "[invalid bearer token, token audiences is invalid for the target audiences]"
        elif (unbound := self._bound_pod_gone(identity)) is not None:
            status["error"] = f"[invalid bearer token, {unbound}]"
        else:
            user: dict[str, Any] = {"username": identity.username}
            if identity.uid:
                user["uid"] = identity.uid
            if identity.groups:
                user["groups"] = identity.groups
            if identity.extra:
                user["extra"] = identity.extra
            # Authenticated false is omitted on the wire (omitempty); only true is ever sent.
            status = {"authenticated": True, "user": user,
                      "audiences": [a for a in identity.audiences if not wanted or a in wanted]}
        return web.json_response({"kind": "TokenReview", "apiVersion": "authentication.k8s.io/v1",
                                  "metadata": {}, "spec": spec, "status": status}, status=201)


# --------------------------------------------------------------------------- fixtures


@contextlib.asynccontextmanager
async def running_kube_double(store: Store | None = None) -> AsyncIterator[KubeDouble]:
    """Start a double on a free loopback port; stop it afterwards."""
    double = KubeDouble(store)
    await double.start()
    try:
        yield double
    finally:
        await double.stop()


def kube_client_for(double: KubeDouble) -> k8s.ApiClient:
    """A kubernetes-asyncio ApiClient pointed at the double (plain HTTP, no auth).

    Use as ``async with kube_client_for(double) as api:`` so its session is closed."""
    config = type.__call__(k8s.Configuration)  # a fresh config, not a copy of the global default
    config.host = double.url
    return k8s.ApiClient(configuration=config)


def make_node(name: str, *, gpus: int = 8, annotations: dict[str, str] | None = None,
              labels: dict[str, str] | None = None) -> dict:
    """A Node like the recorded fixtures: ``gpus`` x nvidia.com/gpu allocatable."""
    return {
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, **(labels or {})},
                     "annotations": dict(annotations or {})},
        "spec": {},
        "status": {"capacity": {"nvidia.com/gpu": str(gpus)}, "allocatable": {"nvidia.com/gpu": str(gpus)}},
    }


def make_pod(name: str = "", namespace: str = "", *, gpus: int = 2, generate_name: str = "",
             node_name: str = "", annotations: dict[str, str] | None = None,
             containers: list[str] | None = None) -> dict:
    """A Pod asking ``gpus`` nvidia.com/gpu in its first container."""
    meta: dict[str, Any] = {"annotations": dict(annotations or {})}
    if namespace:
        meta["namespace"] = namespace
    if name:
        meta["name"] = name
    if generate_name:
        meta["generateName"] = generate_name
    specs = []
    for i, cname in enumerate(containers or ["main"]):
        c: dict[str, Any] = {"name": cname, "image": "nvidia/cuda:12.4.1-base-ubuntu22.04"}
        if i == 0 and gpus:
            c["resources"] = {"limits": {"nvidia.com/gpu": str(gpus)}, "requests": {"nvidia.com/gpu": str(gpus)}}
        specs.append(c)
    spec: dict[str, Any] = {"containers": specs, "restartPolicy": "Never"}
    if node_name:
        spec["nodeName"] = node_name
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}


def _dry_run(request: web.Request) -> bool:
    return request.query.get("dryRun") == "All"
