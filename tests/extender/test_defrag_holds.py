"""The holds of a defrag plan in flight (extender/cache/defrag_holds.py): the freed set for the
waiting pod, each move's new place for the moved pod's replacement, and nobody else; until
heldUntil, the plan's removal or the claimant bound. The caches are wired as the extender wires
them (extender/cache/wiring.py) and fed what the node, pod and ConfigMap watches would hand them;
the verbs are the extender's own (filter, prioritize, the decision bind makes)."""

from __future__ import annotations

import json
import logging

import orjson

from gpupair.decide.judge.decisions import Decider
from gpupair.decide.judge.reservations import Hold, Reservations
from gpupair.decide.picture.node_entries import ReportDecoder
from gpupair.decide.picture.node_picture import node_picture
from gpupair.extender.cache.wiring import wire_caches
from gpupair.extender.evaluation import Evaluator
from gpupair.extender.filter import filter_nodes
from gpupair.extender.prioritize import scores_json
from gpupair.extender.protocol import parse_args
from gpupair.kubewire.defrag_plans import PLANS_CONFIGMAP, PlanInFlight, PlannedMove
from tests.extender_support import NOW, args_body, pod_object, report_annotations
from tests.kube_double import make_node

GPU = "nvidia.com/gpu"
WAITING, MOVED, OWNER = "uid-waiting", "uid-moved", "uid-replicaset"
HELD_UNTIL = NOW.timestamp() + 60


class Clock:
    def __init__(self) -> None:
        self.now = NOW.timestamp()

    def __call__(self) -> float:
        return self.now


class Cluster:
    """The extender's caches and verbs over nodes gpu-a and gpu-b, with one clock for all."""

    def __init__(self) -> None:
        self.clock = Clock()
        picture, _ = node_picture(ReportDecoder(300.0), self.clock)
        self.reservations = Reservations(timer=self.clock)
        self.caches = wire_caches(Decider(), picture, self.reservations, GPU, self.clock, node_cache=True,
                                  heartbeats=None, pod_watch=True, defrag_plans=True)
        self.evaluator = Evaluator(Decider(), self.reservations, picture, self.caches.nodes, self.caches.tables,
                                   self.clock, defrag=self.caches.defrag)
        # gpu-a: NUMA0 (GPU0-3) free, GPU4 and GPU5 free, GPU6 and GPU7 busy. gpu-b: all free.
        self.caches.nodes.replace([node("gpu-a", {0, 1, 2, 3, 4, 5}, {("infra", "x"): {6, 7}}),
                                   node("gpu-b", set(range(8)), {})])
        self.caches.pods.replace([])

    def plans(self, *plans: PlanInFlight | tuple[str, str]) -> None:
        """The plans ConfigMap as the watch lists it: plans, or (key, raw value) pairs."""
        data = dict(p if isinstance(p, tuple) else (p.uid, p.model_dump_json()) for p in plans)
        self.caches.defrag.replace([configmap(data)] if data else [])

    def passes(self, pod: dict, gpus: int, names: list[str]) -> list[str]:
        args = parse_args(orjson.dumps(args_body(pod, names=names)))
        return filter_nodes(self.evaluator, args, gpus).result.NodeNames

    def plan_on(self, pod: dict, gpus: int, node: str) -> tuple[int, ...] | None:
        """The set bind would reserve for ``pod`` on ``node`` (None: bind refuses)."""
        uid = pod["metadata"]["uid"]
        self.evaluator.offer(parse_args(orjson.dumps(args_body(pod, names=[node]))))  # filter saw it first
        decision = self.evaluator.decide_one(gpus, node, exclude_uid=uid)
        return decision.plan if decision.passes else None


def node(name: str, free: set[int], ledger: dict) -> dict:
    return make_node(name, annotations=report_annotations(free, node=name, ledger=ledger))


def configmap(data: dict[str, str]) -> dict:
    return {"apiVersion": "v1", "kind": "ConfigMap", "data": data,
            "metadata": {"name": PLANS_CONFIGMAP, "namespace": "gpupair-system"}}


def plan(devices=(0, 1, 2, 3), move_to=(4, 5), held_until=HELD_UNTIL) -> PlanInFlight:
    """Pod ml/big waits for GPU0-3 of gpu-a; ml/small (of ReplicaSet OWNER) moves to gpu-a GPU4,5."""
    move = PlannedMove(pod="ml/small", uid=MOVED, owner=OWNER, fromNode="gpu-a", fromDevices=[0, 1],
                       toNode="gpu-a", toDevices=list(move_to))
    return PlanInFlight(namespace="ml", name="big", uid=WAITING, node="gpu-a", devices=list(devices), moves=[move],
                        startedAt=NOW.timestamp(), heldUntil=held_until)


def plan_to_b() -> PlanInFlight:
    """As ``plan``, ml/small moving to gpu-b GPU0,1: on one node with the freed set the device
    plugin, picking among every free GPU, would give the replacement held GPUs."""
    elsewhere = plan()
    elsewhere.moves[0] = elsewhere.moves[0].model_copy(update={"toNode": "gpu-b", "toDevices": [0, 1]})
    return elsewhere


def pod(uid: str, gpus: int, owner: str = "", node_name: str = "") -> dict:
    made = pod_object(gpus, name=uid, uid=uid, namespace="ml")
    if owner:
        made["metadata"]["ownerReferences"] = [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "small-7f9c",
                                                "uid": owner, "controller": True}]
    if node_name:
        made["spec"]["nodeName"] = node_name
    return made


def test_another_pod_does_not_get_the_freed_set_and_the_waiting_pod_does():
    cluster = Cluster()
    other = pod("uid-other", 2)
    assert cluster.passes(other, 2, ["gpu-a"]) == ["gpu-a"]  # before the plan: NUMA0 is free
    cluster.plans(plan())
    assert cluster.passes(other, 2, ["gpu-a", "gpu-b"]) == ["gpu-b"]
    assert cluster.plan_on(other, 2, "gpu-a") is None
    waiting = pod(WAITING, 4)
    assert sorted(cluster.passes(waiting, 4, ["gpu-a", "gpu-b"])) == ["gpu-a", "gpu-b"]
    assert cluster.plan_on(waiting, 4, "gpu-a") == (0, 1, 2, 3)


def test_a_pod_the_device_plugin_would_give_a_held_gpu_is_kept_off_the_node():
    """The plugin picks among every free GPU, held ones included: on gpu-b, with NUMA0 held and
    NUMA1 free, it would give a 2-GPU pod GPU0 and GPU1, so gpu-b is no place for it."""
    cluster = Cluster()
    cluster.plans(plan().model_copy(update={"node": "gpu-b", "moves": []}))
    other = pod("uid-other", 2)
    assert cluster.passes(other, 2, ["gpu-a", "gpu-b"]) == ["gpu-a"]
    assert cluster.plan_on(other, 2, "gpu-b") is None
    assert cluster.plan_on(pod(WAITING, 4), 4, "gpu-b") == (0, 1, 2, 3)


def test_the_replacement_of_the_moved_pod_gets_its_new_place_and_the_moved_pod_itself_does_not():
    cluster = Cluster()
    cluster.plans(plan_to_b())
    moved = pod(MOVED, 2, owner=OWNER)  # the moved pod, as a request might still show it
    assert cluster.passes(moved, 2, ["gpu-b"]) == []
    stranger = pod("uid-stranger", 2, owner="uid-other-replicaset")
    assert cluster.passes(stranger, 2, ["gpu-b"]) == []
    replacement = pod("uid-replacement", 2, owner=OWNER)
    assert cluster.passes(replacement, 2, ["gpu-b"]) == ["gpu-b"]
    assert cluster.plan_on(replacement, 2, "gpu-b") == (0, 1)
    # The first replacement claimed the move: a second pod of the same controller does not get it.
    assert cluster.passes(pod("uid-second", 2, owner=OWNER), 2, ["gpu-b"]) == []


def test_prioritize_scores_the_held_node_for_its_claimant_only():
    cluster = Cluster()
    cluster.plans(plan().model_copy(update={"moves": []}))
    offered = ["gpu-a", "gpu-b"]

    def scores(who: dict) -> dict[str, int]:
        offer = cluster.evaluator.offer(parse_args(orjson.dumps(args_body(who, names=offered))))
        return {entry["Host"]: entry["Score"] for entry in json.loads(scores_json(cluster.evaluator, 4, offer))}

    assert "gpu-a" not in scores(pod("uid-other", 4))
    assert scores(pod(WAITING, 4))["gpu-a"] > 0


def test_the_holds_end_at_held_until():
    cluster = Cluster()
    cluster.plans(plan())
    other = pod("uid-other", 2)
    cluster.clock.now = HELD_UNTIL - 1
    assert cluster.passes(other, 2, ["gpu-a"]) == []
    cluster.clock.now = HELD_UNTIL + 1
    assert cluster.passes(other, 2, ["gpu-a"]) == ["gpu-a"]
    assert not cluster.reservations.held_sets() and not cluster.caches.defrag.active


def test_a_plan_already_out_of_time_holds_nothing():
    cluster = Cluster()
    cluster.plans(plan(held_until=NOW.timestamp() - 1))
    assert not cluster.reservations.by_node()


def test_the_holds_end_when_the_plan_leaves_the_configmap():
    cluster = Cluster()
    cluster.plans(plan())
    assert cluster.reservations.by_node()["gpu-a"] == Hold(frozenset({0, 1, 2, 3, 4, 5}), kept=frozenset({0, 1, 2, 3, 4, 5}))
    cluster.plans()  # the ConfigMap deleted (no plan in flight)
    assert not cluster.reservations.by_node()
    assert cluster.passes(pod("uid-other", 2), 2, ["gpu-a"]) == ["gpu-a"]


def test_a_hold_ends_when_its_claimant_is_seen_bound_and_stays_ended():
    cluster = Cluster()
    cluster.plans(plan())
    cluster.caches.pods.apply("ADDED", pod("uid-replacement", 2, owner=OWNER))  # claims the move
    cluster.caches.pods.apply("MODIFIED", pod("uid-replacement", 2, owner=OWNER, node_name="gpu-a"))
    # The move's hold gave way to the pod's own count hold; the freed set is still held.
    assert cluster.reservations.by_node()["gpu-a"] == Hold(frozenset({0, 1, 2, 3}), count=2, kept=frozenset({0, 1, 2, 3}))
    cluster.caches.pods.apply("MODIFIED", pod(WAITING, 4, node_name="gpu-a"))
    assert not cluster.reservations.held_sets()
    cluster.plans(plan())  # the plan rewritten (a move marked evicted): what ended stays ended
    assert not cluster.reservations.held_sets()


def test_a_replacement_deleted_unbound_gives_its_move_to_the_next_pod_of_its_controller():
    cluster = Cluster()
    cluster.plans(plan_to_b())
    first = pod("uid-replacement", 2, owner=OWNER)
    cluster.caches.pods.apply("ADDED", first)
    assert cluster.passes(pod("uid-second", 2, owner=OWNER), 2, ["gpu-b"]) == []
    cluster.caches.pods.apply("DELETED", first)
    assert cluster.passes(pod("uid-second", 2, owner=OWNER), 2, ["gpu-b"]) == ["gpu-b"]


def test_a_pod_relist_and_reports_leave_the_holds_as_they_are():
    cluster = Cluster()
    cluster.plans(plan())
    cluster.caches.pods.replace([])  # no pod carries a held set's key: none is a "deleted pod"
    # gpu-a's next report: the moved pod still runs on GPU0,1; nothing turns into a count hold.
    cluster.caches.nodes.apply("MODIFIED", node("gpu-a", {2, 3, 4, 5}, {("ml", "small"): {0, 1}, ("infra", "x"): {6, 7}}))
    assert cluster.reservations.by_node()["gpu-a"] == Hold(frozenset({0, 1, 2, 3, 4, 5}), kept=frozenset({0, 1, 2, 3, 4, 5}))


def test_a_malformed_plan_is_one_log_line_and_ignored(caplog):
    cluster = Cluster()
    good = plan()
    bad = ("uid-bad", '{"node": "gpu-b", "devices": "all"}')
    with caplog.at_level(logging.WARNING, logger="gpupair.extender.defrag_holds"):
        cluster.plans(good, bad)
        cluster.plans(good, bad)  # the same value again: no second line
        cluster.plans(good, ("uid-wrong-key", good.model_dump_json()))  # a plan under another pod's key
    lines = [record for record in caplog.records if record.name == "gpupair.extender.defrag_holds"]
    assert [record.getMessage() for record in lines] == ["defrag plan unreadable: ignored"] * 2
    assert lines[0].key == "uid-bad" and lines[1].key == "uid-wrong-key"
    good_holds = frozenset({0, 1, 2, 3, 4, 5})
    assert cluster.reservations.by_node() == {"gpu-a": Hold(good_holds, kept=good_holds)}  # the good plan holds
