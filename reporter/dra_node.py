"""This node's side of DRA: whether a DRA driver publishes its GPUs, and the verdicts of its DRA pods.

**The mode.** Where ResourceSlices of the configured driver name this node, its GPUs are DRA
devices: the allocator's grants live in ResourceClaims, not in the kubelet's PodResources, so
the reporter publishes its topology alone (reporter/publisher.py). The slices are listed again
every ``recheck`` seconds (a node moves between a device plugin and a DRA driver only when an
operator changes it); a refusal (no RBAC, no resource.k8s.io/v1) means device-plugin mode,
logged once.

**The verdicts.** A DRA pod has no sidecar: what it got is in its claims' ``status.allocation``,
written before the pod was bound. So the reporter watches the pods bound to its node (the
field selector the kubelet itself uses) and, for each pod with claims that has no verdict yet,
reads its claims, maps the results of the driver to its own NVML layout through the node's
slices (uuid, then PCI id) and writes the same annotations as a verified pod gets, with the
Warning Event on FAIL (reporter/verification.record_verdict). The intent judged against is that
of the claims holding the pod's GPUs (gpupair/decide/claims/claim_intent.py: their ``gpupair.io/placement``,
else the webhook's constraint shape), else the pod's own annotation, else ``required``: a claim
pod carries no annotation of its own, so a SYS grant under ``preferred`` or ``none`` is PASS
with that intent named, and no Warning, as on the device-plugin path. The reporter writes them
because it already may, and only it may (the verdict admission policy): no new writer, and a pod
can still not choose its own verdict. Pods with fewer than two GPUs of the driver get none, as
with the sidecar.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from datetime import datetime, timezone
from typing import Any

import orjson
from kubernetes_asyncio import client as k8s
from kubernetes_asyncio.client.exceptions import ApiException

from gpupair.decide.judge import verdict

from gpupair.kubewire import dra
from gpupair.decide.claims.claim_intent import ClaimIntent, allocated_requests, claim_intent, dra_pod_intent
from gpupair.decide.picture.dra_picture import PictureError, allocation_of, build, claim_names
from gpupair.decide.pod.scope import SCOPE_KEY, Scope, pod_scope
from gpupair.topology.layout import NodeLayout
from gpupair.topology.nics import NicLayout
from gpupair.reporter.verification import planned_set, record_verdict

log = logging.getLogger("gpupair.reporter.dra")

RECHECK = 300.0  # seconds between listings of this node's slices
TERMINAL = ("Succeeded", "Failed")


class DraNode:
    def __init__(self, api: k8s.ApiClient, node: str, driver: str,
                 layout: Callable[[], NodeLayout | None] = lambda: None, *,
                 recheck: float = RECHECK, api_timeout: float = 10.0,
                 clock: Callable[[], float] = time.monotonic):
        self.api = api
        self.node = node
        self.driver = driver
        self.layout = layout
        self.nics: Callable[[], NicLayout | None] = lambda: None  # the loop gives it the node's NICs
        self.recheck = recheck
        self.api_timeout = api_timeout
        self._clock = clock
        self.active = False  # a DRA driver publishes this node's GPUs
        self.slices: list[dra.ResourceSlice] = []
        self._checked_at: float | None = None
        self._refused = False
        self._queue: asyncio.Queue[str] = asyncio.Queue()
        self._pods: dict[str, dict[str, Any]] = {}  # uid -> the pod as last seen, while it awaits a verdict
        self.judged: set[str] = set()  # pod uids with a verdict written, or none due
        self.listed = False

    # ---- the mode

    async def check(self, force: bool = False) -> bool:
        """Whether the node's GPUs are DRA devices, listing the slices when due."""
        now = self._clock()
        if not force and self._checked_at is not None and now - self._checked_at < self.recheck:
            return self.active
        self._checked_at = now
        try:
            self.slices = await self._list_slices()
        except ApiException as exc:
            if not self._refused:
                log.warning("cannot list this node's ResourceSlices: judging it as a device-plugin node",
                            extra={"status": exc.status, "error": exc.reason})
            self._refused = True
            return self.active
        except (OSError, asyncio.TimeoutError) as exc:
            log.warning("cannot list this node's ResourceSlices now", extra={"error": str(exc)})
            return self.active
        self._refused = False
        active = any(s.spec.devices for s in self.slices)
        if active != self.active:
            log.info("GPUs published by a DRA driver" if active else "no DRA driver publishes the GPUs",
                     extra={"driver": self.driver, "slices": len(self.slices)})
        self.active = active
        return active

    async def _list_slices(self) -> list[dra.ResourceSlice]:
        response = await k8s.ResourceV1Api(self.api).list_resource_slice(
            field_selector=f"spec.nodeName={self.node},spec.driver={self.driver}",
            _preload_content=False, _request_timeout=self.api_timeout)
        try:
            data = await response.read()
        finally:
            response.release()
        items = orjson.loads(data).get("items") or []
        parsed = []
        for item in items:
            try:
                parsed.append(dra.parse_slice(item))
            except dra.DRAWireError as exc:
                log.warning("ResourceSlice left out", extra={"why": str(exc)})
        return parsed

    # ---- the pod watch (a WatchHandler for gpupair/kubeclient/list_watch.ListWatch)

    def replace(self, items: list[dict[str, Any]]) -> None:
        self._pods.clear()
        for pod in items:
            self.apply("ADDED", pod)
        self.listed = True

    def apply(self, event: str, pod: dict[str, Any]) -> None:
        meta = pod.get("metadata") if isinstance(pod, dict) else None
        uid = meta.get("uid") if isinstance(meta, dict) else None
        if not isinstance(uid, str) or not uid:
            return
        if event == "DELETED":
            self._pods.pop(uid, None)
            self.judged.discard(uid)
            return
        if uid in self.judged or not _awaits_verdict(pod, self.node):
            return
        if uid not in self._pods:
            self._queue.put_nowait(uid)
        self._pods[uid] = pod

    async def run(self, stop: asyncio.Event, retry: float = 5.0) -> None:
        """Judge queued pods until ``stop``; a pod that cannot be judged yet is retried."""
        while not stop.is_set():
            getter = asyncio.ensure_future(self._queue.get())
            stopper = asyncio.ensure_future(stop.wait())
            done, _ = await asyncio.wait({getter, stopper}, return_when=asyncio.FIRST_COMPLETED)
            stopper.cancel()
            if getter not in done:
                getter.cancel()
                return
            uid = getter.result()
            pod = self._pods.get(uid)
            if pod is None:
                continue
            try:
                finished = await self.judge(pod)
            except Exception:  # noqa: BLE001 - one pod must not end the loop
                log.exception("DRA verdict failed", extra={"pod": _key(pod)})
                finished = False
            if finished:
                self._pods.pop(uid, None)
                self.judged.add(uid)
            else:
                asyncio.get_running_loop().call_later(retry, self._requeue, uid)

    def _requeue(self, uid: str) -> None:
        if uid in self._pods:
            self._queue.put_nowait(uid)

    # ---- one pod

    async def judge(self, pod: dict[str, Any]) -> bool:
        """Write the pod's verdict from its claims; True when done (written, or none due)."""
        layout = self.layout()
        if layout is None:
            return False
        namespace = pod["metadata"].get("namespace", "")
        devices: set[tuple[str, str]] = set()
        asked: list[ClaimIntent | None] = []  # what each claim holding the pod's GPUs asks
        scopes: set[str] = set()  # the gpupair.io/scope those claims carry (the webhook's nvlink rewrite)
        for name in claim_names(pod):
            claim = await self._claim(namespace, name)
            if claim is None:
                return False
            allocation = allocation_of(claim, self.driver)
            if allocation is not None:
                devices |= set(allocation.devices)
                asked.append(claim_intent(claim, allocated_requests(claim, self.driver)))
                scopes.add(claim.metadata.annotations.get(SCOPE_KEY, ""))
        if len(devices) < 2:
            return True
        mapping = self._mapping(layout)
        if mapping is None or not devices <= mapping.keys():
            await self.check(force=True)  # a slice newer than ours
            mapping = self._mapping(layout)
            if mapping is None or not devices <= mapping.keys():
                log.warning("DRA devices not in this node's slices", extra={"pod": _key(pod),
                                                                             "devices": sorted(map("/".join, devices))})
                return False
        indices = tuple(sorted(mapping[d] for d in devices))
        annotations = pod["metadata"].get("annotations") or {}
        intent, problem = dra_pod_intent(pod, asked)  # its claims', else its own annotation, else required
        if problem:
            log.warning("bad placement intent", extra={"pod": _key(pod), "error": problem})
        scope = pod_scope(pod)[0]
        if scope is Scope.NUMA and Scope.NVLINK.value in scopes:
            scope = Scope.NVLINK  # asked on the template, which the webhook rewrote into bridged pairs
        result = verdict.classify(layout, indices, planned_set(annotations, _key(pod)), intent, self.nics(), scope)
        try:
            await record_verdict(self.api, pod, result, annotations)
        except (ApiException, OSError, asyncio.TimeoutError) as exc:
            log.warning("cannot write the DRA verdict now", extra={"pod": _key(pod), "error": str(exc)})
            return False
        return True

    def _mapping(self, layout: NodeLayout) -> dict[tuple[str, str], int] | None:
        """(pool, device) -> index in this reporter's layout; None unless every device matches."""
        try:
            picture = build(self.node, self.slices, [], self.driver, datetime.now(timezone.utc), layout)
        except PictureError as exc:
            log.warning("this node's slices give no picture", extra={"why": str(exc)})
            return None
        if picture.inferred:
            log.warning("this node's DRA devices do not match its NVML layout", extra={"why": picture.note})
            return None
        return picture.devices

    async def _claim(self, namespace: str, name: str) -> dra.ResourceClaim | None:
        try:
            response = await k8s.ResourceV1Api(self.api).read_namespaced_resource_claim(
                name, namespace, _preload_content=False, _request_timeout=self.api_timeout)
            try:
                data = await response.read()
            finally:
                response.release()
            if response.status != 200:
                raise ApiException(status=response.status, reason=data[:200].decode(errors="replace"))
            return dra.parse_claim(orjson.loads(data))
        except (ApiException, OSError, asyncio.TimeoutError, ValueError) as exc:
            log.info("cannot read a pod's claim yet", extra={"claim": f"{namespace}/{name}", "error": str(exc)})
            return None


async def serve_verdicts(node: DraNode, stop: asyncio.Event, poll: float = 5.0) -> None:
    """Once the node's GPUs show as DRA devices, watch the pods bound here and judge them."""
    import functools

    from gpupair.kubeclient.list_watch import ListWatch

    while not node.active:
        try:
            await asyncio.wait_for(stop.wait(), poll)
            return
        except asyncio.TimeoutError:
            pass
    pods = functools.partial(k8s.CoreV1Api(node.api).list_pod_for_all_namespaces,
                             field_selector=f"spec.nodeName={node.node}")
    tasks = [asyncio.create_task(ListWatch("pods", pods, node).run()), asyncio.create_task(node.run(stop))]
    try:
        await stop.wait()
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


def _awaits_verdict(pod: dict[str, Any], node: str) -> bool:
    if (pod.get("spec") or {}).get("nodeName") != node:
        return False
    if (pod.get("status") or {}).get("phase") in TERMINAL:
        return False
    if ((pod.get("metadata") or {}).get("annotations") or {}).get(verdict.VERDICT_KEY):
        return False
    return bool(claim_names(pod))


def _key(pod: dict[str, Any]) -> str:
    meta = pod.get("metadata") or {}
    return f"{meta.get('namespace', '')}/{meta.get('name', '')}"
