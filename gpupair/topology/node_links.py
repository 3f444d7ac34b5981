"""The nodes' measured links in one document: what the webhook reads to write NVLink subrequests.

The webhook has no API token, and should not need one to read every Node. So the links the
reporters publish (each node's ``gpupair.io/topology``, verbatim) are gathered into one small
document, ``{"v": 1, "nodes": {"<node>": "<gpupair.io/topology>"}}``, kept in the ConfigMap
``gpupair-node-links``, which the webhook mounts as a file: the kubelet keeps the file current
and the webhook reads it when it changes. Whoever gathers it already reads the Nodes' annotations
(the extender lists and watches them) and needs only ``get`` and ``patch`` on that one ConfigMap.

Decoding keeps every node whose topology decodes and reports the others, so one bad report does
not hide the rest.

A ConfigMap holds 1 MiB: about 800 8-GPU nodes written out in full. Past that the document is
written compact: one topology per distinct layout with its GPUs' uuids left out of the grouping
(the link matrix, index, PCI address and NUMA node of each GPU), under one of its nodes' names,
and ``"same": {"<node>": "<node written in full>"}`` for the rest. Every node keeps its links and
addresses; only the uuids of the nodes under ``same`` are lost, so a class whose selector has to
name uuids (gpupair/decide/claims/nvlink_classes.py) matches on the written node alone: fewer bridged
pairs offered, none wrong. Where even that is over the limit, the document is written empty
(links unknown: claims get the ``numa`` rule) and the writer says so.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

from gpupair.topology.layout import NodeLayout
from gpupair.topology.report import ReportError, decode_layout

FORMAT_VERSION = 1
FILE_KEY = "node-links.json"  # the ConfigMap's key, and so the file's name in the mount
MAX_BYTES = 1024 * 1024  # a ConfigMap holds at most 1 MiB


class NodeLinksError(ValueError):
    """A document that is not a node-links document at all."""


def encode_node_links(topologies: Mapping[str, str]) -> str:
    """The document for ``topologies`` (node name -> its ``gpupair.io/topology`` value), in full."""
    return json.dumps({"v": FORMAT_VERSION, "nodes": dict(sorted(topologies.items()))}, separators=(",", ":"))


def encode_node_links_within(topologies: Mapping[str, str], limit: int = MAX_BYTES) -> tuple[str, str]:
    """The document for ``topologies`` that fits in ``limit`` bytes, and how it was written:
    ``full``, ``compact`` (one entry per distinct layout, the module docstring) or ``empty``
    (not even that fits: no node's links)."""
    full = encode_node_links(topologies)
    if len(full.encode()) <= limit:
        return full, "full"
    written: dict[str, str] = {}
    same: dict[str, str] = {}
    first_of: dict[str, str] = {}
    for name, topology in sorted(topologies.items()):
        key = _layout_key(topology)
        if key in first_of:
            same[name] = first_of[key]
        else:
            first_of[key] = name
            written[name] = topology
    compact = json.dumps({"v": FORMAT_VERSION, "nodes": written, "same": same}, separators=(",", ":"))
    if len(compact.encode()) <= limit:
        return compact, "compact"
    return encode_node_links({}), "empty"


def _layout_key(topology: str) -> str:
    """What nodes of one board, bridged alike, share: the topology without its GPUs' uuids (and
    without any other per-GPU field that names the one GPU). A value that does not read as JSON
    is its own key."""
    try:
        report = json.loads(topology)
        devices = report.get("devices")
        if isinstance(devices, list):
            report["devices"] = [{k: v for k, v in d.items() if k != "uuid"} if isinstance(d, dict) else d
                                 for d in devices]
        return json.dumps(report, sort_keys=True, separators=(",", ":"))
    except (ValueError, AttributeError):
        return "\0" + topology


def decode_node_links(text: str) -> tuple[dict[str, NodeLayout], dict[str, str]]:
    """Each node's layout, and for each node left out why. NodeLinksError where the document
    itself cannot be read."""
    if len(text) > MAX_BYTES:
        raise NodeLinksError(f"{len(text)} bytes, over the {MAX_BYTES} a ConfigMap holds")
    try:
        document = json.loads(text)
    except ValueError as exc:
        raise NodeLinksError(f"not JSON: {exc}") from None
    if not isinstance(document, dict) or document.get("v") != FORMAT_VERSION:
        raise NodeLinksError(f'not a node-links document of version {FORMAT_VERSION} ({{"v": 1, "nodes": {{...}}}})')
    nodes = document.get("nodes")
    if not isinstance(nodes, dict):
        raise NodeLinksError('"nodes" must be an object of node name -> gpupair.io/topology')
    same = document.get("same", {})
    if not isinstance(same, dict):
        raise NodeLinksError('"same" must be an object of node name -> a node written in "nodes"')
    layouts: dict[str, NodeLayout] = {}
    problems: dict[str, str] = {}
    for name, topology in nodes.items():
        if not isinstance(topology, str):
            problems[name] = "its topology must be the gpupair.io/topology string"
            continue
        try:
            layouts[name] = decode_layout(topology)
        except ReportError as exc:
            problems[name] = exc.reason
    for name, like in same.items():
        if like in layouts:
            layouts.setdefault(name, layouts[like])
        else:
            problems[name] = f"the same as {like!r}, which the document does not hold decoded"
    return layouts, problems
