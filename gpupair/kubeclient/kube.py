"""Kubernetes API plumbing shared by every gpupair service: client construction, annotation
patches, pod binding, Events, and 410 detection."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import time
from collections.abc import Mapping
from contextlib import suppress
from typing import Any

import aiohttp
import orjson
from aiohttp.helpers import get_env_proxy_for_url
from kubernetes_asyncio import client as k8s
from kubernetes_asyncio import config as k8s_config
from kubernetes_asyncio.client.exceptions import ApiException
from kubernetes_asyncio.client.rest import RESTResponse
from yarl import URL

from gpupair.kubeclient.binding_client import binding, binding_path
from gpupair.kubewire.leases import micro_time
from gpupair.kubewire.usage_errors import InputError

MERGE_PATCH = "application/merge-patch+json"
IN_CLUSTER_HOST_ENV = "KUBERNETES_SERVICE_HOST"
DEFAULT_KUBECONFIG = "~/.kube/config"
EVENT_NOTE_LIMIT = 1024  # the apiserver rejects a longer Event note/message
MAX_KUBECONFIG_BYTES = 4 * 1024 * 1024  # kubeconfigs are kilobytes; past this one is not one (and parsing would hang)


class KubeConfigError(InputError):
    """No usable Kubernetes client configuration was found (exit 2, one line naming the file)."""


def check_kubeconfig(path: str, context: str | None, origin: str = "kubeconfig") -> None:
    """Read ``path`` as a kubeconfig before kubernetes-asyncio does, so that each way it can be
    wrong is one sentence naming the file rather than a TypeError or a hang."""
    import yaml  # kubernetes-asyncio's own dependency

    where = f"{origin} {path}"
    try:
        with open(os.path.expanduser(path), "rb") as handle:
            raw = handle.read(MAX_KUBECONFIG_BYTES + 1)
    except FileNotFoundError:
        raise KubeConfigError(f"{where}: no such file") from None
    except IsADirectoryError:
        raise KubeConfigError(f"{where}: is a directory, not a file") from None
    except OSError as exc:
        raise KubeConfigError(f"{where}: cannot read it: {exc.strerror or exc}") from None
    if len(raw) > MAX_KUBECONFIG_BYTES:
        raise KubeConfigError(f"{where}: larger than {MAX_KUBECONFIG_BYTES // 2**20} MiB; not a kubeconfig")
    try:
        document = yaml.safe_load(raw.decode("utf-8"))
    except UnicodeDecodeError:
        raise KubeConfigError(f"{where}: is not text (UTF-8)") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        raise KubeConfigError(f"{where}: is not YAML" + (f" (line {mark.line + 1})" if mark else "")) from None
    if not isinstance(document, dict) or not isinstance(document.get("contexts") or [], list):
        raise KubeConfigError(f"{where}: is not a kubeconfig (no clusters, contexts and users)")
    names = [c.get("name") for c in document.get("contexts") or [] if isinstance(c, dict)]
    wanted = context or document.get("current-context")
    if not wanted:
        raise KubeConfigError(f"{where}: has no current-context; pass --context (one of: {', '.join(map(str, names)) or 'none'})")
    if wanted not in names:
        raise KubeConfigError(f"{where}: has no context {wanted!r} (it has: {', '.join(map(str, names)) or 'none'})")


async def api_client(kubeconfig: str | None = None, context: str | None = None) -> k8s.ApiClient:
    """An ApiClient from, in order: ``kubeconfig``, $KUBECONFIG, the in-cluster service
    account, ~/.kube/config. The caller closes it (``async with`` or ``await api.close()``)."""
    configuration = type.__call__(k8s.Configuration)  # fresh, not a copy of the global default
    path = kubeconfig or os.environ.get("KUBECONFIG")
    if kubeconfig:
        check_kubeconfig(kubeconfig, context)
    elif path and os.pathsep not in path:  # a list in $KUBECONFIG is merged by the loader
        check_kubeconfig(path, context, "$KUBECONFIG")
    elif not path and not os.environ.get(IN_CLUSTER_HOST_ENV) and os.path.exists(os.path.expanduser(DEFAULT_KUBECONFIG)):
        check_kubeconfig(DEFAULT_KUBECONFIG, context)
    try:
        if path:
            # persist_config=False: never write refreshed tokens back into someone's kubeconfig
            await k8s_config.load_kube_config(config_file=path, context=context,
                                              client_configuration=configuration, persist_config=False)
        elif os.environ.get(IN_CLUSTER_HOST_ENV):
            k8s_config.load_incluster_config(client_configuration=configuration)
        elif os.path.exists(os.path.expanduser(DEFAULT_KUBECONFIG)):
            await k8s_config.load_kube_config(config_file=os.path.expanduser(DEFAULT_KUBECONFIG),
                                              context=context, client_configuration=configuration,
                                              persist_config=False)
        else:
            raise KubeConfigError(
                "no Kubernetes configuration: pass --kubeconfig, set KUBECONFIG, run in a pod "
                f"(${IN_CLUSTER_HOST_ENV} unset) or create {DEFAULT_KUBECONFIG}")
    except KubeConfigError:
        raise
    except Exception as exc:  # ConfigException, bad base64 or PEM data, a token file that cannot be read, ...
        raise KubeConfigError(f"cannot load Kubernetes configuration ({path or 'in-cluster'}): "
                              f"{describe_error(exc)}") from None
    try:
        api = k8s.ApiClient(configuration=configuration)  # builds the TLS context: a bad CA fails here
    except Exception as exc:
        raise KubeConfigError(f"cannot load Kubernetes configuration ({path or 'in-cluster'}): "
                              f"{describe_error(exc)}") from None
    read_environment_once(api)
    return api


def read_environment_once(api: k8s.ApiClient) -> None:
    """Resolve the API server's proxy from the environment now, not before every request.

    kubernetes-asyncio opens its aiohttp session with ``trust_env=True``, so aiohttp looks up
    ~/.netrc and the *_PROXY variables in a worker thread before each request: two thread
    hand-offs per API call, each waiting for the event loop's GIL (bench/extender.py --burst,
    under py-spy). The environment does not change while the process runs: the proxy it names
    for the API server (HTTPS_PROXY, NO_PROXY, as client-go reads them) is set once on the
    client, and the session stops consulting the environment; .netrc, which client-go never
    reads, is no longer a source of API credentials.

    kubernetes-asyncio has no setting for either: its Configuration sizes the connector
    (``connection_pool_maxsize``) but not the session, which RESTClientObject opens itself with
    ``trust_env=True`` and aiohttp's cookie jar. So the session in ``rest.pool_manager``, an
    attribute the client does not document, is replaced here. That attribute and the session's
    arguments read the same in the client's source from release 30 to 36, and the tests run on
    36 (constraints.txt); pyproject.toml caps the client below 37 so that a new major, which
    may move it, is taken only after tests/core/kubeclient/test_kube.py passes on it."""
    rest = api.rest_client
    if not rest.proxy:
        with suppress(LookupError):
            proxy, proxy_auth = get_env_proxy_for_url(URL(api.configuration.host))
            rest.proxy = str(proxy)
            if proxy_auth is not None:
                rest.proxy_headers = {**(rest.proxy_headers or {}), "Proxy-Authorization": proxy_auth.encode()}
    session = rest.pool_manager
    # Same connector (pool size, TLS context) and read buffer as kubernetes-asyncio's own session.
    # No cookie jar, as client-go has none: the apiserver sets no cookies, and filtering the
    # jar for every request cost 60 of a Binding's 220 us (bench/request_path.py).
    rest.pool_manager = aiohttp.ClientSession(connector=session.connector, trust_env=False, read_bufsize=2**21,
                                              cookie_jar=aiohttp.DummyCookieJar())
    session.detach()


def annotation_patch(annotations: Mapping[str, str | None]) -> dict[str, Any]:
    """The JSON merge patch that sets (str) or removes (None) exactly these annotations."""
    for key, value in annotations.items():
        if not isinstance(key, str) or not key:
            raise ValueError(f"annotation key must be a non-empty string, got {key!r}")
        if value is not None and not isinstance(value, str):
            raise ValueError(f"annotation {key!r} must be a string or None, got {type(value).__name__}")
    return {"metadata": {"annotations": dict(annotations)}}


async def patch_annotations(api: k8s.ApiClient, kind: str, name: str, namespace: str | None,
                            annotations: Mapping[str, str | None]) -> Any:
    """Set/remove annotations on a node or pod with one JSON merge patch; returns the object.

    kubernetes-asyncio would send a dict body as strategic-merge-patch, so the content type is
    forced: a merge patch touches only the keys named, needs no schema, and is understood the
    same way by every apiserver and test double."""
    body = annotation_patch(annotations)
    core = k8s.CoreV1Api(api)
    if kind == "node":
        return await core.patch_node(name, body, _content_type=MERGE_PATCH)
    if kind == "pod":
        if not namespace:
            raise ValueError("a pod annotation patch needs a namespace")
        return await core.patch_namespaced_pod(name, namespace, body, _content_type=MERGE_PATCH)
    raise ValueError(f"kind must be 'node' or 'pod', got {kind!r}")


async def bind_pod(api: k8s.ApiClient, namespace: str, name: str, node: str, uid: str | None = None,
                   annotations: Mapping[str, str] | None = None) -> None:
    """POST pods/{name}/binding. ``uid`` makes the apiserver refuse a same-named newer pod.

    ``annotations`` on a Binding are merged into the pod by the apiserver in the same update
    that sets spec.nodeName: they are on the pod from the moment it is bound, with no second
    request and no pod patch right.

    Sent on the client's own session (its pool, TLS, proxy and credentials, the token through
    the client's refresh hook), without the generated client's per-call parameter and model
    handling. The extender binds on gpupair.kubeclient.binding_client instead, leaner still; this is the
    path for a proxy, and for every other caller. The apiserver answers a Status, which the generated
    client would read as a V1Binding and fail on its required ``target``, so the response is
    read here. Errors raise ApiException as every other call does."""
    body = binding(namespace, name, node, uid, annotations)
    rest, config = api.rest_client, api.configuration
    headers = {**api.default_headers, "Accept": "application/json", "Content-Type": "application/json"}
    auth = (await config.auth_settings()).get("BearerToken")
    if auth:
        headers[auth["key"]] = auth["value"]
    options = {key: value for key, value in (("proxy", rest.proxy), ("proxy_headers", rest.proxy_headers),
                                              ("server_hostname", rest.server_hostname)) if value}
    url = config.host + binding_path(namespace, name)
    async with rest.pool_manager.post(url, data=orjson.dumps(body), headers=headers, **options) as response:
        data = await response.read()
        if not 200 <= response.status <= 299:
            exc = ApiException(http_resp=RESTResponse(response, data))
            exc.body = data.decode(errors="replace")
            raise exc


def object_reference(obj: Any) -> dict[str, str]:
    """An ObjectReference for a V1Pod/V1Node model or a raw object dict."""
    if isinstance(obj, Mapping):
        meta = obj.get("metadata") or {}
        kind = obj.get("kind") or ""
        api_version = obj.get("apiVersion") or "v1"
        fields = {"name": meta.get("name"), "namespace": meta.get("namespace"),
                  "uid": meta.get("uid"), "resourceVersion": meta.get("resourceVersion")}
    else:
        meta = obj.metadata
        # List items come without kind; the model class still says what it is.
        kind = getattr(obj, "kind", None) or {k8s.V1Pod: "Pod", k8s.V1Node: "Node"}.get(type(obj), "")
        api_version = getattr(obj, "api_version", None) or "v1"
        fields = {"name": meta.name, "namespace": meta.namespace, "uid": meta.uid,
                  "resourceVersion": meta.resource_version}
    if kind not in ("Pod", "Node"):
        raise ValueError(f"events are only made for Pods and Nodes, got kind {kind!r}")
    if not fields["name"]:
        raise ValueError("the involved object has no name")
    ref = {"apiVersion": api_version, "kind": kind}
    ref.update({k: v for k, v in fields.items() if v})
    return ref


def event_body(involved: Any, reason: str, message: str, *, type: str, component: str,
               action: str | None = None, instance: str | None = None,
               now_ns: int | None = None) -> dict[str, Any]:
    """An events.k8s.io/v1 Event (pure: no I/O)."""
    if type not in ("Normal", "Warning"):
        raise ValueError(f"event type must be 'Normal' or 'Warning', got {type!r}")
    if not reason or not component:
        raise ValueError("an event needs a reason and a component")
    regarding = object_reference(involved)
    now_ns = time.time_ns() if now_ns is None else now_ns
    event_time = micro_time(now_ns)  # the apiserver parses exactly six fractional digits
    return {
        "apiVersion": "events.k8s.io/v1", "kind": "Event",
        # Same naming as client-go's event recorder: <object>.<hex nanoseconds>.
        "metadata": {"name": f"{regarding['name']}.{now_ns:x}",
                     "namespace": regarding.get("namespace") or "default"},
        "eventTime": event_time,
        "reportingController": component,
        "reportingInstance": instance or f"{component}-{os.environ.get('HOSTNAME') or socket.gethostname()}",
        "action": action or reason,
        "reason": reason,
        "regarding": regarding,
        # Truncate rather than lose the event: the apiserver refuses notes over 1024 bytes.
        "note": message.encode()[:EVENT_NOTE_LIMIT].decode(errors="ignore"),
        "type": type,
    }


async def create_event(api: k8s.ApiClient, involved: Any, reason: str, message: str, *,
                       type: str = "Normal", component: str, action: str | None = None,
                       instance: str | None = None) -> Any:
    """Record an Event about a pod or node.

    Uses events.k8s.io/v1, not core v1 Events: it is the GA API the kube-scheduler's own
    recorder writes, it requires reportingController/reportingInstance/action so a reader can
    tell which gpupair component and replica spoke, and both APIs share one storage, so
    ``kubectl describe pod`` and ``kubectl get events`` show it either way. RBAC: create on
    events.events.k8s.io."""
    body = event_body(involved, reason, message, type=type, component=component,
                      action=action, instance=instance)
    return await k8s.EventsV1Api(api).create_namespaced_event(body["metadata"]["namespace"], body)


def describe_error(exc: BaseException) -> str:
    """One line for logs and answers: ``HTTP <status>: <the Status message>`` for API errors,
    else the exception's type and text."""
    if isinstance(exc, ApiException):
        reason = exc.reason
        if exc.body:
            try:
                reason = json.loads(exc.body).get("message") or reason
            except (ValueError, AttributeError):
                pass
        return f"HTTP {exc.status}: {reason}"
    if isinstance(exc, asyncio.TimeoutError):
        return "timed out waiting for the API server"
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


async def serves(api: k8s.ApiClient, group: str, version: str, timeout: float = 10.0) -> bool:
    """Whether the API serves ``group/version`` (its discovery document answers). Only a 404
    says no: on any other failure the caller's watches find out, and retry."""
    try:
        await api.call_api(f"/apis/{group}/{version}", "GET", header_params={"Accept": "application/json"},
                           response_types_map={200: "object"}, auth_settings=["BearerToken"],
                           _return_http_data_only=True, _request_timeout=timeout)
    except ApiException as exc:
        return exc.status != 404
    except (OSError, asyncio.TimeoutError):
        return True
    return True
