"""A node's layout from a file: the one loader behind reporter --topology-file, simulate
--topology-file and verify --topology-file.

It takes every form gpupair prints or reads, so the output of one command is the input of the
next:
- the text of ``nvidia-smi topo -m`` (any text around the matrix; no UUIDs or PCI ids, so such a
  layout matches device ids by index only);
- the topology JSON, the value of the ``gpupair.io/topology`` annotation (also as a JSON string);
- an annotations object holding that key: what ``gpupair reporter --once --dry-run`` prints, or
  ``kubectl get node -o jsonpath='{.metadata.annotations}'``;
- a Node (``kubectl get node NAME -o json``), or a List holding exactly one.
"""

from __future__ import annotations

import json
from typing import Any

from gpupair.topology import report
from gpupair.topology.layout import NodeLayout
from gpupair.topology.smi_topo import TopoParseError, parse_topo_matrix

MAX_FILE_BYTES = 1024 * 1024


class LayoutFileError(ValueError):
    """A layout file that cannot be read or holds no usable layout; the message says why."""


def read_layout(path: str) -> NodeLayout:
    try:
        with open(path, "rb") as handle:
            raw = handle.read(MAX_FILE_BYTES + 1)
    except OSError as error:
        raise LayoutFileError(f"cannot read layout file {path}: {error.strerror or error}") from None
    if len(raw) > MAX_FILE_BYTES:
        raise LayoutFileError(f"layout file {path} is larger than {MAX_FILE_BYTES} bytes")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise LayoutFileError(f"layout file {path} is not UTF-8 text") from None
    return parse_layout_text(text, origin=path)


def parse_layout_text(text: str, origin: str = "layout") -> NodeLayout:
    """A layout from any of the forms in the module docstring; LayoutFileError says what is wrong."""
    stripped = text.strip()
    if stripped.startswith(("{", '"')):
        try:
            document: Any = json.loads(stripped)
        except (json.JSONDecodeError, RecursionError) as error:
            raise LayoutFileError(f"{origin}: not valid JSON: {error}") from None
        return _layout_from_json(document, stripped, origin)
    try:
        return parse_topo_matrix(text).to_layout()
    except TopoParseError as error:
        raise LayoutFileError(f"{origin}: {error}") from None
    except ValueError as error:  # a matrix the layout itself rejects
        raise LayoutFileError(f"{origin}: {error}") from None


def _layout_from_json(document: Any, text: str, origin: str) -> NodeLayout:
    if isinstance(document, dict) and str(document.get("kind", "")).endswith("List"):
        items = document.get("items") or []
        if not isinstance(items, list) or len(items) != 1:
            raise LayoutFileError(f"{origin}: a list of {len(items)} objects; give one Node")
        document = items[0]
    if isinstance(document, dict) and isinstance(document.get("metadata"), dict):
        annotations = document["metadata"].get("annotations") or {}
        if not isinstance(annotations, dict) or report.TOPOLOGY_KEY not in annotations:
            name = document["metadata"].get("name", "the object")
            raise LayoutFileError(f"{origin}: {name} has no {report.TOPOLOGY_KEY} annotation "
                                  "(is a gpupair reporter running on it?)")
        document = annotations
    if isinstance(document, dict) and report.TOPOLOGY_KEY in document:
        document = document[report.TOPOLOGY_KEY]
        if not isinstance(document, str):
            raise LayoutFileError(f"{origin}: {report.TOPOLOGY_KEY} must be a JSON string")
    if isinstance(document, str):  # the annotation's value itself, quoted
        text = document
    try:
        return report.decode_layout(text)
    except report.ReportError as error:
        raise LayoutFileError(f"{origin}: {error.reason}") from None
