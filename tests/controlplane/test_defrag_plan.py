"""`gpupair defrag --plan` against a real kube-apiserver v1.36.2, run as a user runs it (a
subprocess, the admin kubeconfig). It only reads, so the cluster is written straight into the API:
two seed nodes (GPU0-3 NUMA0, GPU4-7 NUMA1) whose reports' ledgers name the pods created, and a
4-GPU pod marked unschedulable as kube-scheduler marks it (PodScheduled False, Unschedulable).

- a: a1 on GPU1 (annotated movable, owned by a ReplicaSet), a2 on GPU5 (not opted in).
- b: big on GPU0-3 (no controller), b1 on GPU6 (movable by its namespace's label).

The plan moves a1; once a PodDisruptionBudget protects a1 it moves b1; it never names a2 or big.
Nothing on the cluster changes. ~5 s.
"""

from __future__ import annotations

import json
from datetime import datetime, timezone

import pytest

from gpupair.defrag.live_fleet import MOVABLE_KEY
from gpupair.topology.report import PodHolding, encode_annotations
from tests.controlplane.api import Api
from tests.controlplane.test_snapshot import add_node, gpupair, nodes, pod  # noqa: F401 (nodes: a fixture)
from tests.layouts import seed_layout

OWNER = {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs", "uid": "6d1c8a4e-0000-4000-8000-000000000001",
         "controller": True}


@pytest.fixture
def movable_namespace(api: Api):
    name = "defrag-movable"
    api.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": {MOVABLE_KEY: "true"}}})
    api.create({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "default", "namespace": name}})
    yield name
    api.delete(f"/api/v1/namespaces/{name}")


def gpu_pod(namespace: str, name: str, gpus: int, node: str = "", *, movable: bool = False, owned: bool = True,
            labels: dict[str, str] | None = None) -> dict:
    body = pod(namespace, name, node=node, limits={"nvidia.com/gpu": str(gpus)}, requests={"cpu": "1"})
    body["metadata"]["labels"] = labels or {}
    if movable:
        body["metadata"]["annotations"] = {MOVABLE_KEY: "true"}
    if owned:
        body["metadata"]["ownerReferences"] = [OWNER]
    return body


def report(api: Api, name: str, held: dict[str, tuple[dict, tuple[int, ...]]]) -> None:
    holders = [PodHolding(p["metadata"]["namespace"], p["metadata"]["name"], frozenset(devices), p["metadata"]["uid"])
               for p, devices in held.values()]
    taken = set().union(*(h.devices for h in holders))
    notes = encode_annotations(seed_layout(name), set(range(8)) - taken, 1, datetime.now(timezone.utc), holders=holders)
    add_node(api, name, {"cpu": "32", "memory": "256Gi", "pods": "110", "nvidia.com/gpu": "8"}, annotations=notes)
    # the apiserver taints a new Node not-ready; its kubelet lifts that once Ready (the planner,
    # like kube-scheduler, keeps pods off a not-ready node)
    api.patch(f"/api/v1/nodes/{name}", {"spec": {"taints": None}})


def plan(control_plane, *extra: str):
    done = gpupair("defrag", "--plan", "--kubeconfig", str(control_plane.admin_kubeconfig), "--lease-namespace", "",
                   *extra)
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    return done


def test_defrag_plan_moves_only_opted_in_pods_and_respects_budgets(api, namespace, movable_namespace, nodes,
                                                                   control_plane):
    ns = namespace
    a1 = api.create(gpu_pod(ns, "a1", 1, "defrag-a", movable=True, labels={"app": "infer"}))
    a2 = api.create(gpu_pod(ns, "a2", 1, "defrag-a"))
    big = api.create(gpu_pod(ns, "big", 4, "defrag-b", owned=False, movable=True))
    b1 = api.create(gpu_pod(movable_namespace, "b1", 1, "defrag-b"))
    nodes += ["defrag-a", "defrag-b"]
    report(api, "defrag-a", {"a1": (a1, (1,)), "a2": (a2, (5,))})
    report(api, "defrag-b", {"big": (big, (0, 1, 2, 3)), "b1": (b1, (6,))})
    waiting = api.create(gpu_pod(ns, "wait", 4))
    api.patch(waiting, {"status": {"conditions": [{
        "type": "PodScheduled", "status": "False", "reason": "Unschedulable", "lastTransitionTime": "2026-12-06T12:00:00Z",
        "message": "0/2 nodes are available: 2 no close set of 4 GPUs."}]}}, sub="status")
    before = {p["metadata"]["name"]: p["metadata"]["resourceVersion"] for p in api.list("v1", "Pod", ns)}

    text = plan(control_plane).stdout
    assert f"{ns}/wait (4 GPUs): defrag-a GPU0,1,2,3 after 1 move (1 GPUs moved)" in text
    assert f"  move {ns}/a1 (1 GPU): defrag-a GPU1 -> defrag-b GPU" in text

    document = json.loads(plan(control_plane, "-o", "json").stdout)
    [mine] = [p for p in document["plans"] if p["pod"] == f"{ns}/wait"]
    assert (mine["node"], mine["devices"]) == ("defrag-a", [0, 1, 2, 3])
    assert [m["pod"] for m in mine["moves"]] == [f"{ns}/a1"]
    assert mine["moves"][0]["toNode"] == "defrag-b" and mine["moves"][0]["toDevices"][0] in (4, 5, 7)
    assert document["pinnedPods"].get("not opted in", 0) >= 1 and document["pinnedPods"].get(
        "no controller that recreates it", 0) >= 1

    # A budget with no disruption left (the disruption controller is not running: status as it writes it)
    budget = api.create({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
                         "metadata": {"name": "infer", "namespace": ns},
                         "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "infer"}}}})
    api.patch(budget, {"status": {"disruptionsAllowed": 0, "currentHealthy": 1, "desiredHealthy": 1, "expectedPods": 1,
                                  "observedGeneration": budget["metadata"]["generation"]}}, sub="status")
    document = json.loads(plan(control_plane, "-o", "json").stdout)
    [mine] = [p for p in document["plans"] if p["pod"] == f"{ns}/wait"]
    assert (mine["node"], mine["devices"]) == ("defrag-b", [4, 5, 6, 7])
    assert [(m["pod"], m["toNode"]) for m in mine["moves"]] == [(f"{movable_namespace}/b1", "defrag-a")]
    assert document["pinnedPods"]["its PodDisruptionBudget allows no disruption"] >= 1

    # a dry run: nothing changed
    after = {p["metadata"]["name"]: p["metadata"]["resourceVersion"] for p in api.list("v1", "Pod", ns)}
    assert after == before
    api.delete(f"/api/v1/namespaces/{movable_namespace}/pods/b1")
