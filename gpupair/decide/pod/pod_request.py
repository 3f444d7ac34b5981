"""How many GPUs (and how much CPU) a pod asks for, by Kubernetes' effective-request rule.

kube-scheduler and kubelet size a pod as the larger of
- the app containers plus the restartable init containers (native sidecars), summed, and
- for each init container in order, its own request plus the sidecars started before it.
The extender, the webhook and the simulator all count with this one function.

``pod_request`` adds what kube-scheduler adds on top for CPU and memory (its
``resourcehelper.PodRequests``): pod-level resources (``spec.resources``) replace the
containers' sum where set, and the RuntimeClass's ``spec.overhead`` counts on top. `gpupair
snapshot` writes those; the extender's CPU accounting still reads the containers alone.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from decimal import Decimal, InvalidOperation
from typing import Any

from gpupair.kubewire import defaults

DEFAULT_RESOURCE = defaults.RESOURCE_NAME

_QUANTITY = re.compile(r"^([+-]?[0-9.]+(?:[eE][+-]?[0-9]+)?)(Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E)?$")
_SUFFIX = {
    None: Decimal(1), "n": Decimal("1e-9"), "u": Decimal("1e-6"), "m": Decimal("1e-3"),
    "k": Decimal("1e3"), "M": Decimal("1e6"), "G": Decimal("1e9"), "T": Decimal("1e12"),
    "P": Decimal("1e15"), "E": Decimal("1e18"), "Ki": Decimal(2**10), "Mi": Decimal(2**20),
    "Gi": Decimal(2**30), "Ti": Decimal(2**40), "Pi": Decimal(2**50), "Ei": Decimal(2**60),
}


class PodRequestError(ValueError):
    """A pod spec whose GPU request cannot be read; the message says where."""


def parse_count(value: Any, where: str) -> int:
    """A Kubernetes quantity for a countable resource ("2", 2, "2e0") as an int."""
    if type(value) is str and value.isascii() and value.isdigit():
        return int(value)  # "2", as nearly every pod writes it: what the grammar below gives, sooner
    if isinstance(value, bool):
        raise PodRequestError(f"{where}: expected a quantity, got {value!r}")
    if isinstance(value, int):
        number = Decimal(value)
    elif isinstance(value, str):
        match = _QUANTITY.match(value.strip())
        if not match:
            raise PodRequestError(f"{where}: {value!r} is not a quantity")
        try:
            number = Decimal(match.group(1)) * _SUFFIX[match.group(2)]
        except InvalidOperation:
            raise PodRequestError(f"{where}: {value!r} is not a quantity") from None
    else:
        raise PodRequestError(f"{where}: expected a quantity, got {type(value).__name__}")
    if number < 0 or number != number.to_integral_value():
        raise PodRequestError(f"{where}: {value!r} is not a whole number of devices")
    return int(number)


def parse_milli(value: Any, where: str) -> int:
    """A Kubernetes quantity ("500m", "2", 1.5) in thousandths, rounded up as the API server
    rounds a CPU request it stores."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise PodRequestError(f"{where}: expected a quantity, got {type(value).__name__}")
    match = _QUANTITY.match(str(value).strip())
    if not match:
        raise PodRequestError(f"{where}: {value!r} is not a quantity")
    try:
        number = Decimal(match.group(1)) * _SUFFIX[match.group(2)] * 1000
    except InvalidOperation:
        raise PodRequestError(f"{where}: {value!r} is not a quantity") from None
    if number < 0:
        raise PodRequestError(f"{where}: {value!r} is negative")
    return int(number.to_integral_value(rounding="ROUND_CEILING"))


def parse_bytes(value: Any, where: str) -> int:
    """A memory quantity ("512Mi", "1G", 1e9) in bytes, rounded up."""
    milli = parse_milli(value, where)
    return -(-milli // 1000)


def _container_request(container: Any, resource: str, where: str, parse=parse_count) -> int:
    if not isinstance(container, Mapping):
        raise PodRequestError(f"{where}: a container must be an object")
    resources = container.get("resources") or {}
    if not isinstance(resources, Mapping):
        raise PodRequestError(f"{where}.resources: must be an object")
    for field in ("requests", "limits"):  # extended resources: requests default to limits
        table = resources.get(field) or {}
        if not isinstance(table, Mapping):
            raise PodRequestError(f"{where}.resources.{field}: must be an object")
        if resource in table:
            return parse(table[resource], f"{where}.resources.{field}[{resource}]")
    return 0


def _containers(spec: Mapping[str, Any], field: str) -> list[Any]:
    value = spec.get(field) or []
    if not isinstance(value, list):
        raise PodRequestError(f"spec.{field}: must be a list")
    return value


def gpu_request(pod: Mapping[str, Any], resource: str = DEFAULT_RESOURCE) -> int:
    """The effective request of ``resource`` for a pod object (a dict as the API sends it)."""
    return _effective(pod, resource, parse_count)


def cpu_request(pod: Mapping[str, Any]) -> int:
    """The pod's effective CPU request in millicores (a limit alone counts as the request, as
    the API server defaults it)."""
    return _effective(pod, "cpu", parse_milli)


def pod_request(pod: Mapping[str, Any], resource: str) -> int:
    """``cpu`` (millicores) or ``memory`` (bytes) as kube-scheduler counts the pod: its pod-level
    request (a pod-level limit alone defaults it) where set, else the containers' effective
    request; plus its overhead."""
    parse = parse_milli if resource == "cpu" else parse_bytes
    spec = pod.get("spec") if isinstance(pod, Mapping) else None
    if not isinstance(spec, Mapping):
        return _effective(pod, resource, parse)
    pod_level = _container_request({"resources": spec.get("resources") or {}}, resource, "spec", parse) \
        if spec.get("resources") else None
    total = pod_level if pod_level else _effective(pod, resource, parse)
    overhead = spec.get("overhead") or {}
    if not isinstance(overhead, Mapping):
        raise PodRequestError("spec.overhead: must be an object")
    if resource in overhead:
        total += parse(overhead[resource], f"spec.overhead[{resource}]")
    return total


def _effective(pod: Mapping[str, Any], resource: str, parse) -> int:
    if not isinstance(pod, Mapping):
        raise PodRequestError("pod must be an object")
    spec = pod.get("spec") or {}
    if not isinstance(spec, Mapping):
        raise PodRequestError("spec: must be an object")
    apps = sum(
        _container_request(c, resource, f"spec.containers[{i}]", parse)
        for i, c in enumerate(_containers(spec, "containers"))
    )
    sidecars = 0
    init_peak = 0
    for i, container in enumerate(_containers(spec, "initContainers")):
        request = _container_request(container, resource, f"spec.initContainers[{i}]", parse)
        if container.get("restartPolicy") == "Always":
            sidecars += request
            init_peak = max(init_peak, sidecars)
        else:
            init_peak = max(init_peak, request + sidecars)
    return max(apps + sidecars, init_peak)
