"""The webhook's view of the nodes' measured links: the mounted node-links document
(gpupair/topology/node_links.py), read again whenever the file changes, turned into the NVLink
subrequests a claim gets (gpupair/decide/claims/nvlink_classes.py).

The kubelet swaps a ConfigMap volume's files by renaming a symlink, so the file's modification
inode, time and size tell a new version; the derivation runs once per version, not per claim. A missing
file, or one that cannot be read, means the links are unknown: claims then get what they got
without it (``--nvlink-pairs`` where set, else the ``numa`` rule), and the reason is logged once.
"""

from __future__ import annotations

import logging
import os

from gpupair.decide.claims.nvlink_classes import NvlinkChoices, nvlink_choices
from gpupair.topology.node_links import NodeLinksError, decode_node_links

log = logging.getLogger("gpupair.webhook")
UNKNOWN = NvlinkChoices((), False, False)


class NodeLinksFile:
    """Callable: the NVLink choices for the document at ``path`` as it is now."""

    def __init__(self, path: str, attribute: str = "pciBusID") -> None:
        self.path = path
        self.attribute = attribute
        self._version: tuple[int, int, int] | None = None
        self._choices = UNKNOWN
        self._problem = ""

    def __call__(self) -> NvlinkChoices:
        try:
            stat = os.stat(self.path)
        except OSError as exc:
            self._forget(f"cannot read {self.path}: {exc.strerror}")
            return UNKNOWN
        version = (stat.st_ino, stat.st_mtime_ns, stat.st_size)
        if version != self._version:
            self._version = version
            self._choices = self._load()
        return self._choices

    def _load(self) -> NvlinkChoices:
        try:
            with open(self.path, encoding="utf-8") as handle:
                layouts, problems = decode_node_links(handle.read())
        except (OSError, UnicodeDecodeError, NodeLinksError) as exc:
            self._forget(f"{self.path}: {exc}")
            return UNKNOWN
        choices = nvlink_choices(layouts, self.attribute)
        self._problem = ""
        log.info("node links read", extra={"nodes": len(layouts), "left_out": problems,
                                           "nvlink_subrequests": len(choices.selectors), "notes": list(choices.notes)})
        return choices

    def _forget(self, problem: str) -> None:
        self._version, self._choices = None, UNKNOWN
        if problem != self._problem:
            self._problem = problem
            log.warning("node links unknown; NVLink claims get --nvlink-pairs or the numa rule",
                        extra={"reason": problem})
