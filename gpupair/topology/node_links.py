"""The nodes' measured links in one document: what the webhook reads to write NVLink subrequests.

The webhook has no API token, and should not need one to read every Node. So the links the
reporters publish (each node's ``gpupair.io/topology``, verbatim) are gathered into one small
document, ``{"v": 1, "nodes": {"<node>": "<gpupair.io/topology>"}}``, kept in the ConfigMap
``gpupair-node-links``, which the webhook mounts as a file: the kubelet keeps the file current
and the webhook reads it when it changes. Whoever gathers it already reads the Nodes' annotations
(the extender lists and watches them) and needs only ``get`` and ``patch`` on that one ConfigMap.

Decoding keeps every node whose topology decodes and reports the others, so one bad report does
not hide the rest.
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
    """The document for ``topologies`` (node name -> its ``gpupair.io/topology`` value)."""
    return json.dumps({"v": FORMAT_VERSION, "nodes": dict(sorted(topologies.items()))}, separators=(",", ":"))


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
    return layouts, problems
