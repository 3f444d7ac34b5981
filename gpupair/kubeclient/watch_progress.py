"""How far a list+watch has read, and a wait until it has read as far as an object's version.

kube-scheduler's informers and the extender's pod watch are two streams from the apiserver, and
on a busy control plane the extender's can be behind. A pod pinned with ``spec.nodeName`` just
before a burst is then already counted by kube-scheduler and not yet held by the extender, which
would promise its GPUs again. The pod in a filter request carries the ``resourceVersion``
kube-scheduler saw; every write before it (the pinned pods included) has a lower one. Once the
pod watch has read that far, the extender's holds include every pod the scheduler could know of.

Comparing a pod's resourceVersion with the pod watch's is a contract since Kubernetes 1.35
(KEP-5504): within one resource type they are integers that grow with every write. A version that
is not such an integer is never waited for.
"""

from __future__ import annotations

import asyncio


def revision(resource_version: object) -> int | None:
    """The integer behind a resourceVersion, or None where it is none."""
    if not isinstance(resource_version, str) or not (resource_version.isascii() and resource_version.isdigit()):
        return None
    return int(resource_version)


class WatchProgress:
    def __init__(self) -> None:
        self.revision = 0  # the highest version read so far, from objects, bookmarks and lists
        self._waiters: list[tuple[int, asyncio.Future[None]]] = []

    def advance(self, resource_version: object) -> None:
        seen = revision(resource_version)
        if seen is None or seen <= self.revision:
            return
        self.revision = seen
        if self._waiters:
            still = []
            for target, waiter in self._waiters:
                if target <= seen:
                    if not waiter.done():
                        waiter.set_result(None)
                else:
                    still.append((target, waiter))
            self._waiters = still

    def behind(self, resource_version: object) -> bool:
        target = revision(resource_version)
        return target is not None and target > self.revision

    async def reached(self, resource_version: object, timeout: float) -> bool:
        """Wait until the watch has read ``resource_version``; False if ``timeout`` ran out first."""
        target = revision(resource_version)
        if target is None or target <= self.revision:
            return True
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        entry = (target, waiter)
        self._waiters.append(entry)
        try:
            await asyncio.wait_for(asyncio.shield(waiter), timeout)
            return True
        except asyncio.TimeoutError:
            return False
        finally:
            if entry in self._waiters:
                self._waiters.remove(entry)
