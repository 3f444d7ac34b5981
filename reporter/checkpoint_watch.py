"""Notice at once when the kubelet's device checkpoint changes, so a new allocation shows in
the report within a poll interval instead of a scan interval.

The kubelet's device manager rewrites ``kubelet_internal_checkpoint`` (in
/var/lib/kubelet/device-plugins) whenever it allocates or frees devices. Polling the file's
identity and modification time costs one stat() per interval, needs no inotify support in
the container, and sees both in-place writes and write-and-rename (a new inode). Mount the
directory, not the file: a bind-mounted file keeps pointing at the old inode after a rename.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Callable

log = logging.getLogger("gpupair.reporter.checkpoint_watch")

DEFAULT_CHECKPOINT = "/var/lib/kubelet/device-plugins/kubelet_internal_checkpoint"

Stamp = tuple[int, int, int, int] | None  # (device, inode, mtime ns, size); None: no file


def stamp(path: str) -> Stamp:
    try:
        info = os.stat(path)
    except OSError:
        return None
    return (info.st_dev, info.st_ino, info.st_mtime_ns, info.st_size)


class CheckpointWatch:
    """``changed()`` is True once for every change of the file since the last call."""

    def __init__(self, path: str = DEFAULT_CHECKPOINT) -> None:
        self.path = path
        self._last = stamp(path)
        if self._last is None:
            log.info("kubelet checkpoint not found; rescans follow --scan-interval only until it appears",
                     extra={"path": path})

    def changed(self) -> bool:
        current = stamp(self.path)
        if current == self._last:
            return False
        self._last = current
        return True

    async def run(self, on_change: Callable[[], None], stop: asyncio.Event, interval: float = 0.5) -> None:
        """Call ``on_change`` after each change, polling every ``interval`` seconds until ``stop``."""
        if interval <= 0:
            raise ValueError(f"poll interval must be positive, got {interval}")
        while not stop.is_set():
            try:
                await asyncio.wait_for(stop.wait(), timeout=interval)
            except asyncio.TimeoutError:
                pass
            if not stop.is_set() and self.changed():
                log.debug("kubelet checkpoint changed", extra={"path": self.path})
                on_change()
