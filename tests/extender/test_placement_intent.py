"""Placement intent end to end in the extender: filter and prioritize over real loopback HTTP in
both node-cache modes, bind under a non-default intent, the cluster default, and bad values."""

from __future__ import annotations

import logging

import pytest

from gpupair.decide.judge.decisions import Decider, NodeView
from gpupair.decide.pod.intent import PLACEMENT_KEY, Intent, IntentError, parse_intent, pod_intent
from gpupair.topology.layout import NodeState
from tests.extender_support import (
    args_body,
    host_scores,
    make_extender,
    node_object,
    pod_object,
    report_annotations,
    serving,
)
from tests.layouts import seed_layout

FREE = {
    "close": {0, 1},  # a same-NUMA pair
    "split": {3, 4},  # two GPUs, one per NUMA node: only a SYS pair
    "short": {5},  # one GPU: too few for any intent
}
NAMES = [*FREE, "unreported"]


def nodes() -> list[dict]:
    items = [node_object(name, report_annotations(free, node=name)) for name, free in FREE.items()]
    return items + [node_object("unreported")]


def asking(intent: str | None, gpus: int = 2) -> dict:
    pod = pod_object(gpus)
    if intent is not None:
        pod["metadata"].setdefault("annotations", {})[PLACEMENT_KEY] = intent
    return pod


async def ask(extender, pod: dict, cached: bool) -> tuple[dict, dict[str, int]]:
    """Filter then prioritize over HTTP, as kube-scheduler sends them in the given mode."""
    if cached:
        extender.node_cache.replace(nodes())
        body = args_body(pod, names=NAMES)
    else:
        body = args_body(pod, nodes=nodes())
    async with serving(extender) as client:
        status, filtered = await client.post("filter", body)
        assert status == 200 and filtered["Error"] == ""
        status, scored = await client.post("prioritize", body)
        assert status == 200
    if cached:
        passed = filtered["NodeNames"]
    else:
        passed = [n["metadata"]["name"] for n in filtered["Nodes"]["items"]]
    return ({"passed": passed, "failed": filtered["FailedNodes"],
             "unresolvable": filtered["FailedAndUnresolvableNodes"]},
            host_scores(scored, NAMES))


@pytest.mark.parametrize("cached", [False, True], ids=["nodes", "node-names"])
async def test_required_passes_only_nodes_with_a_close_set(cached):
    verdicts, scores = await ask(make_extender(node_cache=cached), asking("required"), cached)
    assert verdicts["passed"] == ["close"]
    assert verdicts["failed"]["split"] == "need 2 GPUs on one NUMA node; free: NUMA0=1 NUMA1=1"
    assert set(verdicts["failed"]) == {"split", "short", "unreported"}
    assert scores["close"] > 0 and scores["split"] == scores["short"] == scores["unreported"] == 0


@pytest.mark.parametrize("cached", [False, True], ids=["nodes", "node-names"])
async def test_preferred_passes_nodes_without_a_close_set_scored_below_those_with_one(cached):
    verdicts, scores = await ask(make_extender(node_cache=cached), asking("preferred"), cached)
    assert verdicts["passed"] == ["close", "split", "unreported"]
    assert verdicts["failed"] == {"short": "need 2 GPUs (preferred placement); free: NUMA0=0 NUMA1=1"}
    assert scores["close"] >= 1
    assert scores["split"] == scores["unreported"] == 0


@pytest.mark.parametrize("cached", [False, True], ids=["nodes", "node-names"])
async def test_none_ignores_topology_but_not_the_count(cached):
    verdicts, scores = await ask(make_extender(node_cache=cached), asking("none"), cached)
    assert verdicts["passed"] == ["close", "split", "unreported"]
    assert set(verdicts["failed"]) == {"short"}
    assert set(scores.values()) == {0}  # no opinion: kube-scheduler's own scores decide


@pytest.mark.parametrize("cached", [False, True], ids=["nodes", "node-names"])
async def test_the_cluster_default_applies_to_pods_that_ask_nothing(cached):
    extender = make_extender(node_cache=cached, default_intent=Intent.PREFERRED)
    verdicts, _ = await ask(extender, asking(None), cached)
    assert "split" in verdicts["passed"]
    verdicts, _ = await ask(extender, asking("required"), cached)  # the pod's own word wins
    assert verdicts["passed"] == ["close"]


async def test_a_bad_value_counts_as_required_and_is_logged(caplog):
    extender = make_extender(node_cache=True, default_intent=Intent.NONE)
    with caplog.at_level(logging.WARNING, logger="gpupair.extender"):
        verdicts, _ = await ask(extender, asking("prefered"), cached=True)
    assert verdicts["passed"] == ["close"]  # stricter than the cluster default, never looser
    records = [r for r in caplog.records if r.getMessage() == "bad placement intent"]
    assert len(records) == 2  # once per request: filter, then prioritize
    for record in records:
        assert "'prefered' is not a placement gpupair knows" in record.error
        assert record.error.endswith("treated as required") and record.pod == "gpupair-test/gpu2"


async def test_tables_keep_each_intent_apart():
    """The NodeNames tables are per (GPU count, intent): asking one must not answer the other."""
    extender = make_extender(node_cache=True)
    for intent, expected in (("required", ["close"]), ("none", ["close", "split", "unreported"]),
                             ("required", ["close"]), ("preferred", ["close", "split", "unreported"])):
        verdicts, _ = await ask(extender, asking(intent), cached=True)
        assert verdicts["passed"] == expected, intent


async def test_a_pod_is_read_once_per_version_and_afresh_when_it_changes(caplog):
    extender = make_extender(node_cache=True)
    extender.node_cache.replace(nodes())
    pod = asking("prefered")
    pod["metadata"]["resourceVersion"] = "7"
    fixed = asking("preferred")  # the owner fixes the annotation: a new version of the pod
    fixed["metadata"]["resourceVersion"] = "8"
    async with serving(extender) as client:
        with caplog.at_level(logging.WARNING, logger="gpupair.extender"):
            for verb in ("filter", "prioritize"):
                status, _ = await client.post(verb, args_body(pod, names=NAMES))
                assert status == 200
        # Filter read it; prioritize got the same version of the pod and read nothing again.
        assert len([r for r in caplog.records if r.getMessage() == "bad placement intent"]) == 1
        status, filtered = await client.post("filter", args_body(fixed, names=NAMES))
    assert status == 200 and filtered["NodeNames"] == ["close", "split", "unreported"]


def test_decider_agrees_with_the_verbs_for_one_gpu_pods():
    """A 1-GPU pod has no pair to keep close: every intent passes it where a GPU is free."""
    decider = Decider()
    view = NodeView("n", NodeState(seed_layout(), frozenset({3})))
    for intent in Intent:
        assert decider.decide(1, view, intent).passes
    assert decider.decide(1, view, Intent.REQUIRED).score > 0
    assert decider.decide(1, view, Intent.NONE).score == 0


def test_parse_intent_and_pod_intent():
    assert parse_intent(" Preferred ") is Intent.PREFERRED
    with pytest.raises(IntentError, match=r"'sometimes' is not a placement gpupair knows \(one of required, "
                                          r"preferred, none\)"):
        parse_intent("sometimes")
    assert pod_intent({"metadata": {}}, Intent.NONE) == (Intent.NONE, "")
    assert pod_intent({"metadata": {"annotations": {PLACEMENT_KEY: "none"}}}) == (Intent.NONE, "")
    intent, problem = pod_intent({"metadata": {"annotations": {PLACEMENT_KEY: 3}}}, Intent.NONE)
    assert intent is Intent.REQUIRED and "treated as required" in problem


async def test_bind_reserves_a_preferred_pods_fallback_set():
    """A preferred pod passed onto a node without a close set binds there; the set the plugin
    is expected to give it is reserved like any other."""
    from tests.extender_support import eventually, kube_extender
    from tests.kube_double import make_node, running_kube_double

    async with running_kube_double() as double:
        double.store.create("nodes", make_node("split", annotations=report_annotations(FREE["split"], node="s")))
        pod = asking("preferred")
        for key in ("resourceVersion", "creationTimestamp", "generation"):
            pod["metadata"].pop(key, None)
        double.store.create("pods", pod, "gpupair-test")
        uid = pod["metadata"]["uid"]
        async with kube_extender(double) as k:
            await eventually(lambda: k.extender.node_cache.ready and k.pod_watch.lists >= 1, what="caches synced")
            status, filtered = await k.client.post("filter", args_body(pod, names=["split"]))
            assert filtered["NodeNames"] == ["split"]
            status, answer = await k.client.post("bind", {"PodName": "gpu2", "PodNamespace": "gpupair-test",
                                                          "PodUID": uid, "Node": "split"})
            held = k.extender.reservations.get(uid)
    assert (status, answer) == (200, {"Error": ""})
    assert held is not None and held.devices == frozenset(FREE["split"])


@pytest.mark.parametrize("cached", [False, True], ids=["nodes", "node-names"])
async def test_the_fragmentation_score_keeps_best_fit_and_the_tiers_until_it_can_grade(cached):
    """No pod seen yet (an extender just started, or Nodes mode without an API server): the
    fragmentation score grades nothing, and a preferred pod is scored by best fit, close sets
    first, as under --score best-fit."""
    _, best_fit = await ask(make_extender(node_cache=cached), asking("preferred"), cached)
    extender = make_extender(node_cache=cached, fragmentation=True)
    assert not extender.score.usage.workload
    _, scores = await ask(extender, asking("preferred"), cached)
    assert scores == best_fit
    assert scores["close"] >= 1 and scores["split"] == scores["unreported"] == 0
    # A CPU-only pod still gets no opinion.
    body = args_body(pod_object(0), **({"names": NAMES} if cached else {"nodes": nodes()}))
    async with serving(make_extender(node_cache=cached, fragmentation=True)) as client:
        status, answer = await client.post("prioritize", body)
    assert status == 200 and answer == []
