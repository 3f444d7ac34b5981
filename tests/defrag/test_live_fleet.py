"""The planner's picture of a live cluster (defrag/live_fleet.py) and `defrag --plan`'s answer on
it, from objects shaped as the apiserver lists them: two seed nodes (GPU0-3 NUMA0, GPU4-7 NUMA1)
with reports and ledgers, where a 4-GPU pod waits although 8 GPUs are free."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

from gpupair.decide.defrag.fleet import DefragPlan, NoDefragPlan
from gpupair.decide.defrag.planner import Planner
from gpupair.defrag import live_fleet as lf
from gpupair.defrag.live_fleet import MOVABLE_KEY, live_fleet
from gpupair.defrag.plan_view import defrag_view, render_text
from gpupair.status.build import Listing
from gpupair.topology.report import PodHolding, encode_annotations
from tests.layouts import seed_layout

NOW = datetime(2026, 12, 6, 12, 0, tzinfo=timezone.utc)
OWNER = [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs", "uid": "rs-uid", "controller": True}]


def node(name: str, holders: list[PodHolding], **spec: Any) -> dict[str, Any]:
    taken = set().union(*(h.devices for h in holders)) if holders else set()
    notes = encode_annotations(seed_layout(name), set(range(8)) - taken, 1, NOW - timedelta(seconds=5),
                               holders=holders)
    return {"metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}, "annotations": notes},
            "spec": spec, "status": {"allocatable": {"cpu": "32", "memory": "256Gi", "nvidia.com/gpu": "8"}}}


def pod(name: str, gpus: int, node_name: str = "", namespace: str = "ml", *, movable: str | None = "true",
        owners: list | None = OWNER, cpu: str = "1", labels: dict | None = None, **spec: Any) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": name, "namespace": namespace, "uid": f"uid-{name}",
                                "creationTimestamp": "2026-12-06T11:00:00Z", "labels": labels or {}}
    if movable is not None:
        metadata["annotations"] = {MOVABLE_KEY: movable}
    if owners:
        metadata["ownerReferences"] = owners
    body = {"containers": [{"name": "main", "resources": {"limits": {"nvidia.com/gpu": str(gpus)},
                                                           "requests": {"cpu": cpu}}}], **spec}
    status: dict[str, Any] = {"phase": "Pending" if not node_name else "Running"}
    if node_name:
        body["nodeName"] = node_name
    else:
        status["conditions"] = [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]
    return {"metadata": metadata, "spec": body, "status": status}


def holding(p: dict[str, Any], *devices: int) -> PodHolding:
    return PodHolding(p["metadata"]["namespace"], p["metadata"]["name"], frozenset(devices), p["metadata"]["uid"])


def fragmented(**overrides: dict[str, Any]) -> tuple[list, list]:
    """Node a: a1 on GPU1 (movable), a2 on GPU5 (not opted in). Node b: big on GPU0-3 (neither
    opted in nor owned), b1 on GPU6 (movable by its namespace's label). A 4-GPU pod waits."""
    pods = {
        "a1": pod("a1", 1, "defrag-a"),
        "a2": pod("a2", 1, "defrag-a", movable=None),
        "big": pod("big", 4, "defrag-b", owners=None, movable=None),
        "b1": pod("b1", 1, "defrag-b", namespace="batch", movable=None),
        "wait": pod("wait", 4),
    }
    pods.update(overrides)
    a = node("defrag-a", [holding(pods["a1"], 1), holding(pods["a2"], 5)])
    b = node("defrag-b", [holding(pods["big"], 0, 1, 2, 3), holding(pods["b1"], 6)])
    return [a, b], list(pods.values())


def plan(nodes, pods, budgets=(), namespaces=("batch",)):
    fleet = live_fleet(Listing(nodes=nodes, pods=pods, events=None), NOW, movable_namespaces=namespaces, budgets=budgets)
    return fleet, Planner(fleet.rooms, fleet.placed).plan_all(fleet.waiting)


def test_the_waiting_pod_gets_a_numa_node_after_one_move_of_an_opted_in_pod():
    fleet, [answer] = plan(*fragmented())
    assert isinstance(answer, DefragPlan)
    assert (answer.node, answer.devices) == ("defrag-a", (0, 1, 2, 3))
    [move] = answer.moves
    assert fleet.names[move.pod.uid].name == "a1"
    assert move.node == "defrag-b" and len(move.devices) == 1 and move.devices[0] in (4, 5, 7)
    text = render_text(defrag_view(fleet, [answer], NOW))
    assert "ml/wait (4 GPUs): defrag-a GPU0,1,2,3 after 1 move" in text
    assert "move ml/a1 (1 GPU): defrag-a GPU1 -> defrag-b GPU" in text


def test_who_may_move_and_why_not():
    fleet, _ = plan(*fragmented())
    movable = {fleet.names[p.uid].name for p in fleet.placed if p.movable}
    assert movable == {"a1", "b1"}  # b1 by its namespace's label
    assert fleet.why_pinned == {"uid-a2": lf.NOT_OPTED_IN, "uid-big": lf.NOT_OPTED_IN}
    nodes, pods = fragmented(big=pod("big", 4, "defrag-b", owners=None))
    fleet, _ = plan(nodes, pods)
    assert fleet.why_pinned["uid-big"] == lf.NO_CONTROLLER
    # the annotation "false" opts a pod out of its namespace's label
    nodes, pods = fragmented(b1=pod("b1", 1, "defrag-b", namespace="batch", movable="false"))
    fleet, _ = plan(nodes, pods)
    assert fleet.why_pinned["uid-b1"] == lf.NOT_OPTED_IN
    # a DaemonSet's pod is recreated on its node only: moving it frees nothing
    nodes, pods = fragmented(a1=pod("a1", 1, "defrag-a", owners=[{**OWNER[0], "kind": "DaemonSet"}]))
    fleet, _ = plan(nodes, pods)
    assert fleet.why_pinned["uid-a1"] == lf.NO_CONTROLLER


def test_a_budget_that_allows_no_disruption_makes_the_planner_move_another_pod():
    nodes, pods = fragmented(a1=pod("a1", 1, "defrag-a", labels={"app": "infer"}))
    budget = {"metadata": {"name": "infer", "namespace": "ml"},
              "spec": {"selector": {"matchLabels": {"app": "infer"}}, "minAvailable": 1},
              "status": {"disruptionsAllowed": 0}}
    fleet, [answer] = plan(nodes, pods, budgets=[budget])
    assert fleet.why_pinned["uid-a1"] == lf.BUDGET
    assert isinstance(answer, DefragPlan) and answer.node == "defrag-b" and answer.devices == (4, 5, 6, 7)
    assert [fleet.names[m.pod.uid].name for m in answer.moves] == ["b1"]
    # once it allows one, a1 may move again
    budget["status"]["disruptionsAllowed"] = 1
    fleet, [answer] = plan(nodes, pods, budgets=[budget])
    assert "uid-a1" not in fleet.why_pinned


def test_without_any_opted_in_pod_the_answer_says_why():
    fleet, [answer] = plan(*fragmented(), namespaces=())
    nodes, pods = fragmented(a1=pod("a1", 1, "defrag-a", movable=None))
    fleet, [answer] = plan(nodes, pods, namespaces=())
    assert isinstance(answer, NoDefragPlan)
    assert "2 nodes hold a pod that may not move on every such set" in answer.reason
    assert "ml/wait (4 GPUs): no plan for 4 whole GPUs" in render_text(defrag_view(fleet, [answer], NOW))


def moves(fleet, answer) -> list[tuple[str, str]]:
    return [(fleet.names[m.pod.uid].name, m.node) for m in answer.moves]


def test_a_moved_pod_goes_only_where_the_scheduler_would_let_it():
    # b is tainted and a1 does not tolerate it: its replacement goes to a's other NUMA node
    nodes, pods = fragmented()
    nodes[1]["spec"]["taints"] = [{"key": "dedicated", "value": "train", "effect": "NoSchedule"}]
    fleet, [answer] = plan(nodes, pods)
    assert moves(fleet, answer) == [("a1", "defrag-a")] and answer.moves[0].devices[0] in (4, 6, 7)
    # tolerated, it may go to b again
    nodes, pods = fragmented(a1=pod("a1", 1, "defrag-a", tolerations=[{"key": "dedicated", "operator": "Exists"}]))
    nodes[1]["spec"]["taints"] = [{"key": "dedicated", "value": "train", "effect": "NoSchedule"}]
    fleet, [answer] = plan(nodes, pods)
    assert moves(fleet, answer) == [("a1", "defrag-b")]
    # a node selector a1's replacement does not match keeps it off b too
    nodes, pods = fragmented(a1=pod("a1", 1, "defrag-a", nodeSelector={"kubernetes.io/hostname": "defrag-a"}))
    fleet, [answer] = plan(nodes, pods)
    assert moves(fleet, answer) == [("a1", "defrag-a")]


def test_a_node_whose_report_does_not_list_a_bound_gpu_pod_is_left_out():
    nodes, pods = fragmented()
    pods.append(pod("late", 1, "defrag-a"))  # bound, not in a's ledger yet
    fleet, [answer] = plan(nodes, pods)
    assert fleet.left_out == {"defrag-a": "settling: 1 GPU pod(s) bound that its report does not list yet"}
    assert [room.name for room in fleet.rooms] == ["defrag-b"]
    # b1 would have to go to a, which is not planned on
    assert isinstance(answer, NoDefragPlan) and "no place elsewhere" in answer.reason


def test_cpu_counts_where_the_moved_pod_goes():
    nodes, pods = fragmented()
    fleet, [answer] = plan(nodes, pods)
    assert moves(fleet, answer) == [("a1", "defrag-b")]
    # b has no CPU left for a1 (31 + b1's 1 of 32)
    nodes, pods = fragmented(big=pod("big", 4, "defrag-b", owners=None, movable=None, cpu="31"))
    fleet, [answer] = plan(nodes, pods)
    assert moves(fleet, answer) == [("a1", "defrag-a")]


@pytest.mark.parametrize("stale", [True])
def test_a_stale_node_is_left_out(stale):
    nodes, pods = fragmented()
    old = encode_annotations(seed_layout("defrag-a"), set(range(8)), 1, NOW - timedelta(hours=2), holders=[])
    nodes[0]["metadata"]["annotations"] = old
    fleet, _ = plan(nodes, pods)
    assert fleet.left_out == {"defrag-a": "its report is stale"}


def test_a_pod_sharing_a_gpu_by_dra_capacity_asks_its_part_of_one_gpu():
    """KEP-5075: a placed pod whose claim consumes 8Gi of a 32Gi GPU asks 250 milli of one GPU
    again, as the node picture measures it; a waiting pod whose claim asks 6Gi waits for one GPU
    at 188 milli, sized on the fleet's most common GPU shared by capacity; whole GPUs stay whole."""
    from tests.dra_support import DRIVER, allocated_claim, share_claim, shared_slice

    def claimed(name: str, claim: str, node_name: str = "") -> dict[str, Any]:
        made = pod(name, 0, node_name)
        made["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimTemplateName": "t"}]
        made["status"]["resourceClaimStatuses"] = [{"name": "gpu", "resourceClaimName": claim}]
        return made

    asked = share_claim("ml", "asked", "d", {5: "6Gi"})
    del asked["status"]
    claims = [share_claim("ml", "quarter", "d", {2: "8Gi"}, pod="share", pod_uid="uid-share"),
              allocated_claim("ml", "pair", "d", [0, 1], pod="whole", pod_uid="uid-whole"), asked]
    pods = [claimed("share", "quarter", "d"), claimed("whole", "pair", "d"), claimed("wait", "asked")]
    dra_node = {"metadata": {"name": "d", "labels": {"kubernetes.io/hostname": "d"}, "annotations": {}},
                "status": {"allocatable": {"cpu": "32", "memory": "256Gi"}}}
    fleet = live_fleet(Listing(nodes=[dra_node], pods=pods, events=None, slices=[shared_slice("d")], claims=claims,
                               dra_driver=DRIVER), NOW)
    assert {p.uid: (p.devices, p.ask.gpus, p.ask.milli) for p in fleet.placed} == {
        "uid-share": ((2,), 1, 250), "uid-whole": ((0, 1), 2, 1000)}
    assert [(w.uid, w.ask.gpus, w.ask.milli) for w in fleet.waiting] == [("uid-wait", 1, 188)]
    assert fleet.rooms[0].left[2] == 750
