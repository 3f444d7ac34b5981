"""What happens next to a plan in flight (defrag/progress.py): evictions only while everything the
plan counts on still holds, dropped as soon as it does not, ended once its pods are placed."""

from __future__ import annotations

from datetime import datetime, timezone

from gpupair.defrag import progress
from gpupair.defrag.progress import End, Evict, Nudge, Wait, next_step
from gpupair.kubewire.defrag_plans import PlanInFlight, PlannedMove
from gpupair.topology.report import PodHolding, decode_annotations, encode_annotations
from tests.layouts import seed_layout

NOW = 1_796_000_000.0
OWNER = "rs-uid"


def report(node: str, free: set[int], holders: list[PodHolding]):
    notes = encode_annotations(seed_layout(node), free, 1, datetime.fromtimestamp(NOW - 5, timezone.utc), holders=holders)
    return decode_annotations(notes)


def pod(name: str, uid: str, node: str = "", owner: str = "", created: float = NOW - 100) -> dict:
    meta = {"name": name, "namespace": "ml", "uid": uid,
            "creationTimestamp": datetime.fromtimestamp(created, timezone.utc).isoformat().replace("+00:00", "Z")}
    if owner:
        meta["ownerReferences"] = [{"kind": "ReplicaSet", "name": "rs", "uid": owner, "controller": True}]
    return {"metadata": meta, "spec": {"nodeName": node} if node else {}}


def plan(evicted: bool = False) -> PlanInFlight:
    return PlanInFlight(namespace="ml", name="wait", uid="w", node="a", devices=[0, 1, 2, 3],
                        moves=[PlannedMove(pod="ml/infer", uid="i", owner=OWNER, fromNode="a", fromDevices=[1],
                                           toNode="b", toDevices=[7], evicted=evicted)],
                        startedAt=NOW - 10, heldUntil=NOW + 100)


def cluster(a_free=frozenset({0, 2, 3}), b_free=frozenset({1, 7}), infer_on_a=True):
    holders = [PodHolding("ml", "infer", frozenset({1}), "i")] if infer_on_a else []
    return {"a": report("a", set(a_free), holders), "b": report("b", set(b_free), [])}


def test_the_planned_pod_is_evicted_while_the_plan_holds():
    pods = {"w": pod("wait", "w"), "i": pod("infer", "i", "a", OWNER)}
    step = next_step(plan(), pods, cluster(), NOW)
    assert isinstance(step, Evict) and step.move.uid == "i"


def test_a_plan_is_dropped_when_the_freed_set_or_the_target_is_taken():
    pods = {"w": pod("wait", "w"), "i": pod("infer", "i", "a", OWNER)}
    assert next_step(plan(), pods, cluster(a_free={2, 3}), NOW) == End(progress.SET_TAKEN)
    assert next_step(plan(), pods, cluster(b_free={1}), NOW) == End(progress.TARGET_TAKEN)
    # a pod by the planned name with another UID on the set is not the planned pod
    reports = cluster(infer_on_a=False)
    reports["a"] = report("a", {0, 2, 3}, [PodHolding("ml", "infer", frozenset({1}), "other")])
    assert next_step(plan(), pods, reports, NOW) == End(progress.SET_TAKEN)


def test_nothing_is_evicted_while_a_node_is_not_read():
    pods = {"w": pod("wait", "w"), "i": pod("infer", "i", "a", OWNER)}
    reports = cluster()
    del reports["b"]
    assert isinstance(next_step(plan(), pods, reports, NOW), Wait)


def test_the_waiting_pod_gone_or_placed_elsewhere_ends_the_plan():
    pods = {"i": pod("infer", "i", "a", OWNER)}
    assert next_step(plan(), pods, cluster(), NOW) == End(progress.WAITING_GONE)
    pods["w"] = pod("wait", "w", "b")
    assert next_step(plan(), pods, cluster(), NOW) == End(progress.PLACED_ELSEWHERE)


def test_the_plan_ends_placed_once_the_pod_and_the_replacement_are_bound():
    pods = {"w": pod("wait", "w", "a"), "i": pod("infer", "i", "a", OWNER)}  # the old one still terminating
    assert isinstance(next_step(plan(evicted=True), pods, cluster(), NOW), Wait)
    pods["r"] = pod("infer-2", "r", "b", OWNER, created=NOW - 5)
    assert next_step(plan(evicted=True), pods, cluster(), NOW) == End(progress.PLACED)
    # a pod of the same controller from before the plan is not the replacement
    pods["r"] = pod("infer-2", "r", "b", OWNER, created=NOW - 60)
    assert isinstance(next_step(plan(evicted=True), pods, cluster(), NOW), Wait)


def test_past_its_hold_a_plan_ends():
    pods = {"w": pod("wait", "w"), "i": pod("infer", "i", "a", OWNER)}
    assert next_step(plan(), pods, cluster(), NOW + 200) == End(progress.EXPIRED)
    pods["w"] = pod("wait", "w", "a")
    assert next_step(plan(evicted=True), pods, cluster(), NOW + 200) == End(progress.PLACED)


def test_a_moved_pod_gone_before_its_eviction_is_a_move_done():
    pods = {"w": pod("wait", "w")}
    assert isinstance(next_step(plan(), pods, cluster(a_free={0, 1, 2, 3}, infer_on_a=False), NOW), Nudge)


def test_the_waiting_pod_is_nudged_only_once_its_set_shows_free():
    pods = {"w": pod("wait", "w"), "i": pod("infer", "i", "a", OWNER)}  # evicted, still terminating
    assert isinstance(next_step(plan(evicted=True), pods, cluster(), NOW), Wait)
    freed = cluster(a_free={0, 1, 2, 3}, infer_on_a=False)
    assert isinstance(next_step(plan(evicted=True), pods, freed, NOW), Nudge)
