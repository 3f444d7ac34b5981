"""Test helpers for the extender: the recorded kube-scheduler bodies, reshaped; nodes carrying
real gpupair reports; and the app on a loopback port."""

from __future__ import annotations

import asyncio
import contextlib
import copy
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any

import aiohttp
import numpy as np

from gpupair.extender.app import Extender, assemble, build_app
from gpupair.decide.judge.decisions import Decider, Unreported
from gpupair.decide.score.fragmentation import grades, tie_order
from gpupair.kubeclient.list_watch import ListWatch
from gpupair.topology.report import PodHolding, encode_annotations
from tests.layouts import seed_layout
from tests.real_k8s import REAL_K8S

FIXTURES = REAL_K8S
NOW = datetime(2026, 11, 30, 7, 30, tzinfo=timezone.utc)


def recorded(name: str) -> dict[str, Any]:
    return json.loads((FIXTURES / name).read_text())


def recorded_for_double(name: str) -> dict[str, Any]:
    """The recorded ExtenderArgs less its Pod's resourceVersion, for an extender whose pod watch
    reads the kube double: the version is the recording cluster's, and filter would wait for the
    double to reach it."""
    body = recorded(name)
    body["Pod"]["metadata"].pop("resourceVersion", None)
    return body


def recorded_bytes(name: str) -> bytes:
    return (FIXTURES / name).read_bytes()


def report_annotations(free: set[int] | frozenset[int], *, node: str = "n", generation: int = 1,
                       reported_at: datetime = NOW,
                       ledger: dict[tuple[str, str], set[int]] | None = None) -> dict[str, str]:
    """The annotations the reporter writes for a seed-shaped node with ``free`` devices; with
    ``ledger`` ((namespace, name) -> devices) the allocation ledger too, as reporters since the
    ledger write it (without: a reporter from before it)."""
    holders = None if ledger is None else [PodHolding(ns, name, frozenset(d)) for (ns, name), d in ledger.items()]
    return encode_annotations(seed_layout(f"GPU-{node}"), frozenset(free), generation, reported_at, holders=holders)


def node_object(name: str, annotations: dict[str, str] | None = None) -> dict[str, Any]:
    """A Node as kube-scheduler sends it in Nodes mode (the recorded gpu-node-a, renamed)."""
    node = copy.deepcopy(recorded("cache-false-filter-02-init1-app2.json")["Nodes"]["items"][0])
    node["metadata"]["name"] = name
    node["metadata"]["labels"]["kubernetes.io/hostname"] = name
    node["metadata"]["annotations"] = {"node.alpha.kubernetes.io/ttl": "0", **(annotations or {})}
    return node


def pod_object(gpus: int, *, name: str = "gpu2", uid: str = "5fd8153a-1b23-448d-8a4b-c930ac341648",
               namespace: str = "gpupair-test") -> dict[str, Any]:
    """The recorded pod, asking ``gpus`` (no GPU resource at all for 0), less its resourceVersion:
    that is the recording cluster's, and filter would wait for a kube double's pod watch to read
    that far."""
    pod = copy.deepcopy(recorded("cache-true-filter-01-gpu2.json")["Pod"])
    pod["metadata"].update(name=name, uid=uid, namespace=namespace)
    pod["metadata"].pop("resourceVersion", None)
    resources = pod["spec"]["containers"][0]["resources"]
    if gpus:
        resources["limits"]["nvidia.com/gpu"] = str(gpus)
        resources["requests"]["nvidia.com/gpu"] = str(gpus)
    else:
        resources.clear()
    return pod


def host_scores(answer: list[dict[str, Any]], offered: list[str]) -> dict[str, int]:
    """A prioritize answer as kube-scheduler reads it: each offered node's score, 0 for a node the
    answer leaves out. Asserts the answer lists only offered nodes, and none at 0 (gpupair leaves
    those out, extender/cache/decision_tables.py)."""
    listed = {entry["Host"]: entry["Score"] for entry in answer}
    assert set(listed) <= set(offered), f"not offered: {set(listed) - set(offered)}"
    assert 0 not in listed.values(), f"a 0 listed: {answer}"
    return {name: listed.get(name, 0) for name in offered}


def graded_alike(names: list[str]) -> dict[str, int]:
    """The fragmentation score of nodes it finds alike and best among those offered: 10 for the
    first of them in the fixed order (tie_order), 9 for the rest, none a whole point behind."""
    order = tie_order(names)
    return dict(zip(names, grades(np.zeros(len(names)), np.zeros(len(names)), np.ones(len(names)), 0, order).tolist()))


def args_body(pod: dict[str, Any], *, nodes: list[dict[str, Any]] | None = None,
              names: list[str] | None = None) -> dict[str, Any]:
    """ExtenderArgs exactly as kube-scheduler sends them: all three keys, the unused one null."""
    return {"Pod": pod, "Nodes": {"metadata": {}, "items": nodes} if nodes is not None else None,
            "NodeNames": names}


def make_extender(*, unreported: Unreported = Unreported.FAIL, api=None, node_cache: bool = False,
                  stale_after: float | None = 300.0, now: datetime = NOW, **kwargs: Any) -> Extender:
    clock = kwargs.pop("clock", lambda: now.timestamp())
    return assemble(decider=Decider(unreported=unreported), resource="nvidia.com/gpu", api=api,
                    stale_after=stale_after, node_cache=node_cache, clock=clock, **kwargs)


class ExtenderClient:
    """Talks to the running app over a real socket, as kube-scheduler does."""

    def __init__(self, session: aiohttp.ClientSession, base: str):
        self.session = session
        self.base = base

    async def post(self, verb: str, body: Any) -> tuple[int, Any]:
        data = body if isinstance(body, (bytes, str)) else json.dumps(body)
        async with self.session.post(f"{self.base}/{verb}", data=data,
                                     headers={"Content-Type": "application/json"}) as response:
            text = await response.text()
            try:
                return response.status, json.loads(text)
            except ValueError:
                return response.status, text

    async def get(self, path: str) -> tuple[int, str]:
        async with self.session.get(f"{self.base}{path}") as response:
            return response.status, await response.text()


@contextlib.asynccontextmanager
async def serving(extender: Extender) -> AsyncIterator[ExtenderClient]:
    server = build_app(extender)
    await server.start("127.0.0.1", 0)
    try:
        async with aiohttp.ClientSession() as session:
            yield ExtenderClient(session, f"http://127.0.0.1:{server.port}")
    finally:
        await server.close()
        await extender.binder.close()


def later(seconds: float) -> datetime:
    return NOW + timedelta(seconds=seconds)


async def eventually(predicate, timeout: float = 5.0, what: str = "condition") -> None:
    """Wait (without asserting on time) until ``predicate()`` holds; fail after ``timeout``."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        value = predicate()
        if asyncio.iscoroutine(value):
            value = await value
        if value:
            return
        if loop.time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.005)


@dataclass
class KubeExtender:
    extender: Extender
    client: ExtenderClient
    double: Any
    api: Any
    node_watch: ListWatch
    pod_watch: ListWatch
    lease_watch: ListWatch | None = None


@contextlib.asynccontextmanager
async def kube_extender(double, **kwargs: Any) -> AsyncIterator[KubeExtender]:
    """The extender with its node cache and pod watch fed by the kube double's list+watch, and
    its bind verb talking to the double; served on a loopback port."""
    from kubernetes_asyncio import client as k8s

    from tests.kube_double import kube_client_for

    async with kube_client_for(double) as api:
        extender = make_extender(api=api, node_cache=True, **kwargs)
        core = k8s.CoreV1Api(api)
        restarts = extender.metrics.watch_restarts
        nodes = ListWatch("nodes", core.list_node, extender.node_cache, timeout_seconds=30,
                          backoff_base=0.01, backoff_max=0.05,
                          on_restart=lambda why: restarts.labels("nodes", why).inc())
        pods = ListWatch("pods", core.list_pod_for_all_namespaces, extender.pod_watch, timeout_seconds=30,
                         backoff_base=0.01, backoff_max=0.05,
                         on_restart=lambda why: restarts.labels("pods", why).inc(),
                         progress=extender.pod_watch.progress)
        watches = [nodes, pods]
        leases = None
        if extender.heartbeats is not None:  # heartbeats=True: the reporters' Leases in gpupair-system
            from gpupair.extender.cache.node_leases import list_leases

            leases = ListWatch("leases", list_leases(api, "gpupair-system"), extender.heartbeats,
                               timeout_seconds=30, backoff_base=0.01, backoff_max=0.05)
            watches.append(leases)
        if extender.dra is not None:  # dra_driver=...: the driver's ResourceSlices and every claim
            resource = k8s.ResourceV1Api(api)
            watches += [
                ListWatch("resourceslices", resource.list_resource_slice, extender.dra.slices, timeout_seconds=30,
                          backoff_base=0.01, backoff_max=0.05),
                ListWatch("resourceclaims", resource.list_resource_claim_for_all_namespaces, extender.dra.claims,
                          timeout_seconds=30, backoff_base=0.01, backoff_max=0.05),
            ]
        tasks = [asyncio.create_task(w.run()) for w in watches]
        try:
            async with serving(extender) as client:
                yield KubeExtender(extender, client, double, api, nodes, pods, leases)
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
