"""Wire models of kube-scheduler's HTTP extender protocol (k8s.io/kube-scheduler/extender/v1).

The Go structs in extender/v1/types.go carry no json tags, so the keys on the wire are the Go
field names (``Pod``, ``NodeNames``, ``FailedNodes``, ``Host``, ``PodUID`` ...). Go's
encoding/json also accepts a key that matches a field name case-insensitively; the request
models do the same, so the extender reads exactly what a Go extender would. Unknown keys are
ignored (Go drops them), which keeps newer schedulers compatible.

``Pod`` and the ``items`` of ``Nodes`` (a v1.NodeList) stay plain dicts: the extender reads a
few fields of them and, in Nodes mode, must hand the very Node objects back.
"""

from __future__ import annotations

from typing import Any

import orjson
from typing_extensions import TypedDict

from pydantic import (
    BaseModel, ConfigDict, Field, StrictInt, StrictStr, TypeAdapter, ValidationError, field_validator, model_validator,
)

from gpupair.kubewire import json_body
from gpupair.kubewire.defaults import MAX_EXTENDER_PRIORITY
from gpupair.kubewire.wire import explain


class ProtocolError(ValueError):
    """A request body the extender cannot use; the message says where and why."""


def _fold_case(model: type[BaseModel], data: Any) -> Any:
    """Map keys onto fields as Go's encoding/json does: an exact field name, else one equal
    under case folding; keys are taken in order, so a later key for the same field wins."""
    if not isinstance(data, dict):
        return data
    fields = model.model_fields
    if all(key in fields for key in data):
        return data
    folded = {name.lower(): name for name in fields}
    out: dict[str, Any] = {}
    for key, value in data.items():
        target = key if key in fields else folded.get(key.lower()) if isinstance(key, str) else None
        if target is not None:
            out[target] = value
    return out


class _GoStruct(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)


class NodeList(BaseModel):
    """v1.NodeList: ``items`` are Node objects kept as dicts (json tags are lower-case here)."""

    model_config = ConfigDict(extra="allow", frozen=True)

    metadata: dict[str, Any] | None = None
    items: list[dict[str, Any]] | None = None  # Go marshals an empty list as null

    @field_validator("items")
    @classmethod
    def _named(cls, items: list[dict[str, Any]] | None) -> list[dict[str, Any]] | None:
        for position, node in enumerate(items or ()):
            meta = node.get("metadata")
            name = meta.get("name") if isinstance(meta, dict) else None
            if not isinstance(name, str) or not name:
                raise ValueError(f"items[{position}].metadata.name must be a non-empty string")
            annotations = meta.get("annotations")
            if annotations is not None and (
                not isinstance(annotations, dict) or not all(isinstance(v, str) for v in annotations.values())
            ):  # v1 ObjectMeta.Annotations is map[string]string: Go refuses anything else too
                raise ValueError(f"items[{position}].metadata.annotations must map strings to strings")
        return items


class ExtenderArgs(_GoStruct):
    """What kube-scheduler POSTs to filter and prioritize. It always sends all three keys;
    the unused one of Nodes/NodeNames is null."""

    Pod: dict[str, Any] | None = None
    Nodes: NodeList | None = None  # when nodeCacheCapable is false
    NodeNames: list[str] | None = None  # when nodeCacheCapable is true

    @model_validator(mode="after")
    def _one_form(self) -> "ExtenderArgs":
        if self.Pod is None:
            raise ValueError("Pod is required")
        if self.Nodes is not None and self.NodeNames is not None:
            raise ValueError("send Nodes (nodeCacheCapable: false) or NodeNames (true), not both")
        if self.Nodes is None and self.NodeNames is None:
            raise ValueError("neither Nodes nor NodeNames was sent")
        return self

    def node_names(self) -> list[str]:
        if self.NodeNames is not None:
            return self.NodeNames
        assert self.Nodes is not None
        return [node["metadata"]["name"] for node in self.Nodes.items or ()]


class ExtenderFilterResult(BaseModel):
    """Filter's answer. Go marshals every field (no omitempty): nil maps and lists as null."""

    Nodes: NodeList | None = None
    NodeNames: list[str] | None = None
    FailedNodes: dict[str, str] | None = Field(default_factory=dict)
    FailedAndUnresolvableNodes: dict[str, str] | None = Field(default_factory=dict)
    Error: str = ""


def filter_result_json(result: ExtenderFilterResult) -> bytes:
    """``result`` as JSON, the keys in field order as model_dump_json writes them, through
    orjson: five times faster for thousands of names, and Node objects are plain dicts."""
    nodes = result.Nodes
    return orjson.dumps({
        "Nodes": None if nodes is None else {"metadata": nodes.metadata, "items": nodes.items,
                                              **(nodes.model_extra or {})},
        "NodeNames": result.NodeNames,
        "FailedNodes": result.FailedNodes,
        "FailedAndUnresolvableNodes": result.FailedAndUnresolvableNodes,
        "Error": result.Error,
    })


class HostPriority(TypedDict):
    """One entry of prioritize's answer; a TypedDict so thousands serialise without objects."""

    Host: str
    Score: int


HOST_PRIORITY_LIST = TypeAdapter(list[HostPriority])  # HostPriorityList: a bare JSON array


class ExtenderBindingArgs(_GoStruct):
    PodName: str = ""
    PodNamespace: str = ""
    PodUID: str = ""  # types.UID
    Node: str = ""

    @model_validator(mode="after")
    def _complete(self) -> "ExtenderBindingArgs":
        missing = [name for name in ("PodName", "PodNamespace", "Node") if not getattr(self, name)]
        if missing:
            raise ValueError(f"{', '.join(missing)} must be non-empty")
        return self


class ExtenderBindingResult(BaseModel):
    Error: str = ""


class PrioritizeError(BaseModel):
    """Prioritize's HostPriorityList has no error field; a rejected body gets this with a 400."""

    Error: str


def _parse(model: type[_GoStruct], body: bytes | str) -> Any:
    """gpupair.kubewire.json_body, then Go's key folding, then the model. Its orjson refuses what Go's
    decoder refuses (NaN, Infinity, invalid UTF-8) and decodes a 5,000-name body in well under
    half the stdlib's time; python-mode validation of the parsed dict beats pydantic's own JSON mode on
    Nodes-mode bodies (megabytes of Node objects kept as dicts), and the folding needs the
    parsed keys anyway."""
    return _validate(model, _decode(model, body))


def _decode(model: type[_GoStruct], body: bytes | str) -> Any:
    try:
        return json_body.decode(body)
    except json_body.JSONBodyError as exc:
        raise ProtocolError(f"malformed {model.__name__}: {exc}") from None


def _validate(model: type[_GoStruct], data: Any) -> Any:
    try:
        return model.model_validate(_fold_case(model, data))
    except ValidationError as exc:
        raise ProtocolError(f"malformed {model.__name__}: {explain(exc)}") from None


def parse_args(body: bytes | str) -> ExtenderArgs:
    """Decode a filter/prioritize body or raise ProtocolError saying what is wrong."""
    data = _decode(ExtenderArgs, body)
    args = _names_args(data)
    return args if args is not None else _validate(ExtenderArgs, data)


_ARGS_KEYS = frozenset(ExtenderArgs.model_fields)


def _names_args(data: Any) -> ExtenderArgs | None:
    """NodeNames mode as kube-scheduler sends it (exact keys, Nodes null), checked without
    pydantic: validating thousands of names costs more than deciding them. Returns None for
    any other shape, which the model then validates (and explains, when it is wrong)."""
    if not isinstance(data, dict) or not _ARGS_KEYS.issuperset(data):
        return None
    pod, names = data.get("Pod"), data.get("NodeNames")
    if not isinstance(pod, dict) or not isinstance(names, list) or data.get("Nodes") is not None:
        return None
    try:
        "".join(names)  # a TypeError unless every name is a str: a C loop, unlike isinstance()
    except TypeError:
        return None
    return ExtenderArgs.model_construct(Pod=pod, Nodes=None, NodeNames=names)


def parse_binding(body: bytes | str) -> ExtenderBindingArgs:
    """Decode a bind body or raise ProtocolError saying what is wrong."""
    data = _decode(ExtenderBindingArgs, body)
    args = _binding_args(data)
    return args if args is not None else _validate(ExtenderBindingArgs, data)


_BINDING_KEYS = frozenset(ExtenderBindingArgs.model_fields)


def _binding_args(data: Any) -> ExtenderBindingArgs | None:
    """The bind body as kube-scheduler sends it (the four keys, strings, the pod's name,
    namespace and node set), checked without pydantic, as ``_names_args`` does for filter.
    None for any other shape, which the model then validates (and explains)."""
    if type(data) is not dict or data.keys() != _BINDING_KEYS:
        return None
    name, namespace, uid, node = data["PodName"], data["PodNamespace"], data["PodUID"], data["Node"]
    strings = type(name) is str and type(namespace) is str and type(uid) is str and type(node) is str
    if not (strings and name and namespace and node):
        return None
    return ExtenderBindingArgs.model_construct(PodName=name, PodNamespace=namespace, PodUID=uid, Node=node)


# --- the preempt verb (ExtenderPreemptionArgs -> ExtenderPreemptionResult) ----------------------


class _FoldedStruct(_GoStruct):
    """A nested Go struct: its keys fold like the top level's (Go's decoder folds at every level)."""

    @model_validator(mode="before")
    @classmethod
    def _fold(cls, data: Any) -> Any:
        return _fold_case(cls, data)


class MetaPod(_FoldedStruct):
    UID: StrictStr


class MetaVictims(_FoldedStruct):
    """Victims on one node by UID only: what kube-scheduler sends with nodeCacheCapable: true,
    and what the extender always answers."""

    Pods: list[MetaPod] | None = None  # Go marshals a nil slice as null
    NumPDBViolations: StrictInt = 0


class Victims(_FoldedStruct):
    """Victims on one node as whole v1.Pod objects (nodeCacheCapable: false), kept as dicts."""

    Pods: list[dict[str, Any]] | None = None
    NumPDBViolations: StrictInt = 0

    @field_validator("Pods")
    @classmethod
    def _identified(cls, pods: list[dict[str, Any]] | None) -> list[dict[str, Any]] | None:
        for position, pod in enumerate(pods or ()):
            meta = pod.get("metadata")
            uid = meta.get("uid") if isinstance(meta, dict) else None
            if not isinstance(uid, str) or not uid:
                raise ValueError(f"Pods[{position}].metadata.uid must be a non-empty string")
        return pods


class ExtenderPreemptionArgs(_GoStruct):
    """What kube-scheduler POSTs to the preempt verb: one of the two maps, the other null."""

    Pod: dict[str, Any] | None = None
    NodeNameToVictims: dict[str, Victims] | None = None  # nodeCacheCapable: false
    NodeNameToMetaVictims: dict[str, MetaVictims] | None = None  # nodeCacheCapable: true

    @model_validator(mode="after")
    def _one_form(self) -> "ExtenderPreemptionArgs":
        if self.Pod is None:
            raise ValueError("Pod is required")
        if self.NodeNameToVictims is not None and self.NodeNameToMetaVictims is not None:
            raise ValueError("send NodeNameToVictims (nodeCacheCapable: false) or NodeNameToMetaVictims (true), "
                             "not both")
        if self.NodeNameToVictims is None and self.NodeNameToMetaVictims is None:
            raise ValueError("neither NodeNameToVictims nor NodeNameToMetaVictims was sent")
        return self


class ExtenderPreemptionResult(BaseModel):
    """The preempt verb's answer, always by UID; a node left out is not preempted on. It has no
    error field: a rejected body gets PrioritizeError's ``{"Error": ...}`` with a 400."""

    NodeNameToMetaVictims: dict[str, MetaVictims] | None = Field(default_factory=dict)


def parse_preemption(body: bytes | str) -> ExtenderPreemptionArgs:
    return _parse(ExtenderPreemptionArgs, body)
