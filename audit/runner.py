"""Run the audit against a cluster: rounds of parallel GPU pods, one sample per pod.

The seed's loop with the API instead of kubectl: create a round's pods together (so they race for
the node's GPUs as the seed's did), poll until each has finished or the round's timeout ran out,
read verdict annotations or the log, delete the round's pods and wait until they are gone (the
next round then finds every GPU free again). Whatever ends the run, a failure, Ctrl-C or a
cancel, every pod carrying the run's label is deleted before ``run`` returns or raises.

Polling a label-selected list (one request per interval for the whole round) is used instead of
a watch: it is what the seed did, it needs only ``list`` on pods, and a lost poll costs nothing.
"""

from __future__ import annotations

import asyncio
import json
import logging
import secrets
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

import aiohttp
from kubernetes_asyncio import client as k8s
from kubernetes_asyncio.client.exceptions import ApiException

from gpupair.topology.layout import NodeLayout
from gpupair.topology.report import TOPOLOGY_KEY, ReportError, decode_layout

from gpupair.audit.manifest import CONTAINER, PodTemplate, pod_manifest, pod_name, round_selector, run_selector
from gpupair.audit.sample import FINISHED_PHASES, Sample, decide, from_annotations

log = logging.getLogger("gpupair.audit")


class AuditError(RuntimeError):
    """The run cannot go on (a pod was refused, the namespace is missing, ...)."""


class Progress(Protocol):
    def update(self, n: int = 1) -> Any: ...
    def set_description(self, desc: str) -> Any: ...


def new_run_id() -> str:
    return secrets.token_hex(3)  # 6 hex digits: short enough for pod names, unique enough per cluster


def round_labels(rounds: int) -> list[str]:
    """``seq -w 1 ROUNDS``: numbers padded to the width of the last one (01..10)."""
    width = len(str(rounds))
    return [f"{number:0{width}d}" for number in range(1, rounds + 1)]


@dataclass(frozen=True)
class AuditPlan:
    template: PodTemplate
    rounds: int = 10
    pods_per_round: int = 2
    timeout: float = 180.0  # per round, from the moment its pods were created
    poll_interval: float = 2.0
    delete_timeout: float = 90.0  # how long to wait for a round's pods to be gone
    run_id: str = field(default_factory=new_run_id)

    def __post_init__(self) -> None:
        for name in ("rounds", "pods_per_round"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1")
        if self.template.gpus < 1:
            raise ValueError("gpus must be at least 1")
        for name in ("timeout", "poll_interval", "delete_timeout"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive")


# Errors a poll survives: the apiserver answering an error, or the connection failing once.
TRANSIENT = (ApiException, aiohttp.ClientError, asyncio.TimeoutError)


def _error_text(exc: BaseException) -> str:
    return _describe(exc) if isinstance(exc, ApiException) else repr(exc)


def _describe(exc: ApiException) -> str:
    """The apiserver's own message from a Status body, else the HTTP reason."""
    try:
        return json.loads(exc.body).get("message") or exc.reason
    except (TypeError, ValueError, AttributeError):
        return f"{exc.status} {exc.reason}"


class Auditor:
    def __init__(
        self,
        api: k8s.ApiClient,
        plan: AuditPlan,
        on_sample: Callable[[Sample], None] = lambda sample: None,
        progress: Progress | None = None,
    ):
        self.core = k8s.CoreV1Api(api)
        self.plan = plan
        self.on_sample = on_sample
        self.progress = progress
        self.samples: list[Sample] = []
        self._layouts: dict[str, asyncio.Task[NodeLayout | None]] = {}
        self._current: list[str] = []
        self.cleaning = False  # set once cleanup has begun: a stop signal must not cancel it

    @property
    def namespace(self) -> str:
        return self.plan.template.namespace

    async def run(self) -> list[Sample]:
        labels = round_labels(self.plan.rounds)
        try:
            for label in labels:
                if self.progress is not None:
                    self.progress.set_description(f"round {label}/{labels[-1]}")
                for sample in await self._round(label):
                    self.samples.append(sample)
                    self.on_sample(sample)
        finally:
            self.cleaning = True
            await self.cleanup()
        return self.samples

    # ---- one round

    async def _round(self, label: str) -> list[Sample]:
        names = [pod_name(self.plan.template, self.plan.run_id, label, n)
                 for n in range(1, self.plan.pods_per_round + 1)]
        self._current = names  # cleanup deletes these by name too: a create may still be in flight
        await asyncio.gather(*(self._create(label, n) for n in range(1, len(names) + 1)))
        log.debug("round created", extra={"round": label, "pods": names})
        pods, unfinished = await self._wait(label, names)
        samples = list(await asyncio.gather(
            *(self._sample(label, name, pods.get(name), name in unfinished) for name in names)))
        await self._delete_round(label, names)
        self._current = []
        return samples

    async def _create(self, label: str, number: int) -> None:
        body = pod_manifest(self.plan.template, self.plan.run_id, label, number)
        try:
            await self.core.create_namespaced_pod(self.namespace, body)
        except ApiException as exc:
            hint = ""
            if exc.status == 404:
                hint = f" (create it: kubectl create namespace {self.namespace})"
            elif exc.status == 403:
                hint = f" (the audit needs create, get, list, delete on pods and get on pods/log in {self.namespace})"
            raise AuditError(
                f"cannot create pod {body['metadata']['name']} in {self.namespace}: {_describe(exc)}{hint}"
            ) from None

    async def _wait(self, label: str, names: list[str]) -> tuple[dict[str, k8s.V1Pod], set[str]]:
        """Poll until every pod finished or the timeout ran out.

        Returns the last seen pods by name and the names that had not finished. A pod missing
        from the list was deleted by someone else: there is nothing left to wait for.
        """
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.plan.timeout
        counted: set[str] = set()
        pods: dict[str, k8s.V1Pod] = {}
        done: set[str] = set()
        while True:
            try:
                listed = await self.core.list_namespaced_pod(
                    self.namespace, label_selector=round_selector(self.plan.run_id, label))
            except TRANSIENT as exc:  # one failed poll is not a failed round
                log.warning("listing pods failed, will retry", extra={"error": _error_text(exc)})
            else:
                pods = {p.metadata.name: p for p in listed.items}
                done = {name for name in names
                        if name not in pods or (pods[name].status and pods[name].status.phase in FINISHED_PHASES)}
                self._advance(len(done - counted))
                counted |= done
            remaining = deadline - loop.time()
            if len(done) == len(names) or remaining <= 0:
                break
            await asyncio.sleep(min(self.plan.poll_interval, remaining))
        unfinished = set(names) - done
        self._advance(len(unfinished))  # timed out: still one step of the bar each
        return pods, unfinished

    def _advance(self, count: int) -> None:
        if count and self.progress is not None:
            self.progress.update(count)

    async def _sample(self, label: str, name: str, pod: k8s.V1Pod | None, timed_out: bool) -> Sample:
        if pod is None:
            return decide(round_label=label, pod=name, phase=None, node=None, annotations=None,
                          log=None, layout=None, expected_gpus=self.plan.template.gpus,
                          timed_out=False)
        phase = pod.status.phase if pod.status else None
        node = pod.spec.node_name if pod.spec else None
        annotations = pod.metadata.annotations or {}
        layout, text = None, None
        if from_annotations(annotations) is None:  # no verifier verdict: the log has to tell
            layout = await self._layout(node) if node else None
            text = await self._log(name)
        sample = decide(round_label=label, pod=name, phase=phase, node=node, annotations=annotations,
                        log=text, layout=layout, expected_gpus=self.plan.template.gpus,
                        timed_out=timed_out)
        status_reason = pod.status.reason if pod.status else None
        if sample.reason and status_reason:  # e.g. OutOfnvidia.com/gpu from the kubelet
            sample = replace(sample, reason=f"{sample.reason} [pod status: {status_reason}]")
        if not sample.passed:
            log.warning("sample did not pass", extra={
                "pod": name, "node": sample.node, "result": sample.result, "source": sample.source,
                "topo": sample.topo, "reason": sample.reason or None})
        return sample

    async def _log(self, name: str) -> str | None:
        try:
            return await self.core.read_namespaced_pod_log(name, self.namespace, container=CONTAINER)
        except TRANSIENT as exc:
            log.debug("no pod log", extra={"pod": name, "error": _error_text(exc)})
            return None

    async def _layout(self, node: str) -> NodeLayout | None:
        """The node's reported layout (read once per node and run), None without a usable report.

        The read is shared as a task: a round's pods on one node ask for it at the same time."""
        if node not in self._layouts:
            self._layouts[node] = asyncio.create_task(self._read_layout(node))
        return await self._layouts[node]

    async def _read_layout(self, node: str) -> NodeLayout | None:
        layout = None
        try:
            obj = await self.core.read_node(node)
            topology = (obj.metadata.annotations or {}).get(TOPOLOGY_KEY)
            if topology is None:
                log.info("node has no gpupair report; NUMA comes from the pod's topo -m",
                         extra={"node": node})
            else:
                layout = decode_layout(topology)
        except ReportError as exc:
            log.warning("node report unusable; NUMA comes from the pod's topo -m",
                        extra={"node": node, "error": exc.reason})
        except TRANSIENT as exc:
            log.warning("cannot read node; NUMA comes from the pod's topo -m",
                        extra={"node": node, "error": _error_text(exc)})
        return layout

    # ---- deletion

    async def _delete(self, name: str) -> None:
        try:
            await self.core.delete_namespaced_pod(name, self.namespace)
        except ApiException as exc:
            if exc.status != 404:
                log.warning("cannot delete pod", extra={"pod": name, "error": _describe(exc)})

    async def _delete_round(self, label: str, names: list[str]) -> None:
        await asyncio.gather(*(self._delete(name) for name in names))
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.plan.delete_timeout
        while True:
            try:
                listed = await self.core.list_namespaced_pod(
                    self.namespace, label_selector=round_selector(self.plan.run_id, label))
                if not listed.items:
                    return
            except TRANSIENT as exc:
                log.warning("listing pods failed, will retry", extra={"error": _error_text(exc)})
            remaining = deadline - loop.time()
            if remaining <= 0:
                log.warning("pods still terminating, going on", extra={"round": label})
                return
            await asyncio.sleep(min(self.plan.poll_interval, remaining))

    async def cleanup(self) -> int:
        """Delete every pod of this run that still exists; returns how many deletes were sent.

        Runs on every exit path, so it must not raise: a failure here is logged, not thrown
        over the error that brought the run here."""
        try:
            listed = await self.core.list_namespaced_pod(
                self.namespace, label_selector=run_selector(self.plan.run_id))
            names = sorted({p.metadata.name for p in listed.items} | set(self._current))
            await asyncio.gather(*(self._delete(name) for name in names))
            if names:
                log.info("deleted leftover audit pods", extra={"pods": names})
            return len(names)
        except Exception as exc:  # noqa: BLE001 - see docstring
            log.error("cleanup failed: delete pods labelled %s by hand",
                      run_selector(self.plan.run_id), extra={"error": repr(exc)})
            return 0
