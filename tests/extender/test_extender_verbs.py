"""Filter and prioritize over real loopback HTTP: the recorded kube-scheduler bodies, Nodes mode
with reports from the reporter's encoder, unreported nodes under both settings, bad bodies."""

from __future__ import annotations

import json
import re

import pytest

from gpupair.decide.judge.decisions import NodeView, Unreported
from gpupair.extender import protocol
from gpupair.extender.protocol import (
    ExtenderBindingArgs, ExtenderFilterResult, HOST_PRIORITY_LIST, ProtocolError, parse_args, parse_binding,
)
from gpupair.topology.report import FREE_KEY, TOPOLOGY_KEY
from tests.extender_support import (
    NOW,
    args_body,
    host_scores,
    later,
    make_extender,
    node_object,
    pod_object,
    recorded,
    recorded_bytes,
    report_annotations,
    serving,
)

SPLIT = {0, 4}  # one free GPU per NUMA node: no same-NUMA pair
WHOLE = set(range(8))


def test_recorded_bodies_decode():
    for name in ("cache-true-filter-01-gpu2.json", "cache-true-prioritize-01-gpu2.json"):
        args = parse_args(recorded_bytes(name))
        assert args.NodeNames == ["gpu-node-a", "gpu-node-b"] and args.Nodes is None
        assert args.Pod["metadata"]["uid"] == "5fd8153a-1b23-448d-8a4b-c930ac341648"
    args = parse_args(recorded_bytes("cache-false-filter-02-init1-app2.json"))
    assert args.NodeNames is None
    assert [n["metadata"]["name"] for n in args.Nodes.items] == ["gpu-node-a", "gpu-node-b"]
    binding = ExtenderBindingArgs.model_validate_json(recorded_bytes("bind-cache-true-01-gpu2.json"))
    assert (binding.PodName, binding.PodNamespace, binding.Node) == ("gpu2", "gpupair-test", "gpu-node-a")


def test_go_field_names_match_case_insensitively_like_encoding_json():
    args = parse_args(json.dumps({"pod": {"metadata": {}}, "NODENAMES": ["a"], "nodes": None, "Extra": 1}))
    assert args.NodeNames == ["a"] and args.Pod == {"metadata": {}}
    # A later key for the same field wins, as in Go.
    assert parse_args(b'{"Pod": {}, "NodeNames": ["a"], "nodenames": ["b"]}').NodeNames == ["b"]
    assert parse_binding(b'{"podname": "p", "PODNAMESPACE": "ns", "node": "n"}').PodName == "p"


async def test_recorded_nodenames_filter_before_the_node_cache_is_synced():
    extender = make_extender(node_cache=True)  # never fed: first list not in
    async with serving(extender) as client:
        status, body = await client.post("filter", recorded_bytes("cache-true-filter-01-gpu2.json"))
        ready, _ = await client.get("/readyz")
    assert status == 200 and ready == 503
    assert body["NodeNames"] == [] and body["Nodes"] is None and body["Error"] == ""
    assert set(body["FailedNodes"]) == {"gpu-node-a", "gpu-node-b"}
    assert "first list" in body["FailedNodes"]["gpu-node-a"]


@pytest.mark.parametrize("unreported", [Unreported.FAIL, Unreported.PASS])
async def test_recorded_nodes_mode_body_with_foreign_annotations(unreported):
    """The recorded nodes carry no gpupair report; the pod's effective request is 2 (init 1, app 2)."""
    extender = make_extender(unreported=unreported)
    async with serving(extender) as client:
        status, body = await client.post("filter", recorded_bytes("cache-false-filter-02-init1-app2.json"))
    assert status == 200 and body["NodeNames"] is None and body["Error"] == ""
    offered = recorded("cache-false-filter-02-init1-app2.json")["Nodes"]["items"]
    if unreported is Unreported.FAIL:
        assert body["Nodes"]["items"] == []
        assert body["FailedNodes"] == {
            n["metadata"]["name"]: "no gpupair report (gpupair.io/topology missing)" for n in offered}
    else:
        assert body["Nodes"]["items"] == offered  # the very objects, handed back whole
        assert body["FailedNodes"] == {}


async def test_nodes_mode_filter_with_encoded_reports():
    nodes = [
        node_object("split", report_annotations(SPLIT, node="split")),
        node_object("whole", report_annotations(WHOLE, node="whole")),
        node_object("broken", report_annotations({1, 2, 5}, node="broken")),
    ]
    async with serving(make_extender()) as client:
        status, body = await client.post("filter", args_body(pod_object(2), nodes=nodes))
        status9, body9 = await client.post("filter", args_body(pod_object(9), nodes=nodes))
    assert status == 200
    assert [n["metadata"]["name"] for n in body["Nodes"]["items"]] == ["whole", "broken"]
    assert body["Nodes"]["items"][0] == nodes[1]
    assert body["FailedNodes"] == {"split": "need 2 GPUs on one NUMA node; free: NUMA0=1 NUMA1=1"}
    assert body["FailedAndUnresolvableNodes"] == {}
    ExtenderFilterResult.model_validate(body)
    # A pod no node's hardware can ever hold: unresolvable, so preemption is not tried.
    assert status9 == 200 and body9["Nodes"]["items"] == []
    assert body9["FailedAndUnresolvableNodes"] == {n: "need 9 GPUs; the node has only 8" for n in ("split", "whole", "broken")}


async def test_prioritize_keeps_whole_numa_nodes_free():
    extender = make_extender()
    whole = node_object("whole", report_annotations(WHOLE, node="whole"))
    broken = node_object("broken", report_annotations({2, 3, 4, 5, 6, 7}, node="broken"))
    async with serving(extender) as client:
        status, body = await client.post("prioritize", args_body(pod_object(2), nodes=[whole, broken]))
    assert status == 200
    scores = host_scores(HOST_PRIORITY_LIST.validate_python(body), ["whole", "broken"])
    assert scores["broken"] > scores["whole"]  # GPU2+GPU3 fill NUMA0; NUMA1 stays whole
    assert all(0 <= s <= 10 for s in scores.values())
    # The very numbers of the core's Decider (the simulator's logic).
    names = [n["metadata"]["name"] for n in (whole, broken)]
    views = [NodeView(name, extender.picture.entry_of(name, n["metadata"]["annotations"]).report.state)
             for name, n in zip(names, (whole, broken))]
    assert scores == {view.name: extender.evaluator.decider.decide(2, view).score for view in views}


async def test_one_gpu_pod_passes_everywhere_and_goes_where_it_breaks_no_pair():
    whole = node_object("whole", report_annotations(WHOLE, node="whole"))
    lone = node_object("lone", report_annotations({3, 4, 5, 6, 7}, node="lone"))  # NUMA0 has one left
    none_free = node_object("full", report_annotations(set(), node="full"))
    async with serving(make_extender()) as client:
        _, filtered = await client.post("filter", args_body(pod_object(1), nodes=[whole, lone, none_free]))
        _, scores = await client.post("prioritize", args_body(pod_object(1), nodes=[whole, lone]))
    assert [n["metadata"]["name"] for n in filtered["Nodes"]["items"]] == ["whole", "lone", "full"]
    by_host = host_scores(scores, ["whole", "lone"])
    assert by_host["lone"] > by_host["whole"]


async def test_pod_asking_no_gpu_passes_with_equal_scores():
    nodes = [node_object("a", report_annotations(SPLIT, node="a")), node_object("b"),
             node_object("c", {TOPOLOGY_KEY: "{", FREE_KEY: "{"})]
    async with serving(make_extender()) as client:
        _, filtered = await client.post("filter", args_body(pod_object(0), nodes=nodes))
        _, scores = await client.post("prioritize", args_body(pod_object(0), nodes=nodes))
        _, by_name = await client.post("filter", args_body(pod_object(0), names=["a", "b", "zz"]))
    assert filtered["Nodes"]["items"] == nodes and filtered["FailedNodes"] == {}
    assert scores == []  # every node 0: none listed
    assert by_name["NodeNames"] == ["a", "b", "zz"] and by_name["Nodes"] is None


BAD_REPORTS = {
    "missing": ({}, "no gpupair report (gpupair.io/topology missing)"),
    "corrupt": ({TOPOLOGY_KEY: '{"v":1,"devices":[],"links":[]}', FREE_KEY: "not json"},
                "unusable gpupair report: gpupair.io/free rejected"),
    "stale": (report_annotations(WHOLE, node="stale", reported_at=NOW), "is older than 300s"),
}


@pytest.mark.parametrize("case", sorted(BAD_REPORTS))
@pytest.mark.parametrize("unreported", [Unreported.FAIL, Unreported.PASS])
async def test_unusable_reports_under_both_settings(case, unreported):
    annotations, reason = BAD_REPORTS[case]
    good = node_object("good", report_annotations(WHOLE, node="good", reported_at=later(590)))
    bad = node_object("bad", annotations)
    extender = make_extender(unreported=unreported, now=later(600))  # "stale" is 600 s old
    async with serving(extender) as client:
        _, two = await client.post("filter", args_body(pod_object(2), nodes=[good, bad]))
        _, one = await client.post("filter", args_body(pod_object(1), nodes=[good, bad]))
        _, scores = await client.post("prioritize", args_body(pod_object(2), nodes=[good, bad]))
    passed = [n["metadata"]["name"] for n in two["Nodes"]["items"]]
    if unreported is Unreported.FAIL:
        assert passed == ["good"]
        assert reason in two["FailedNodes"]["bad"]
    else:
        assert passed == ["good", "bad"] and two["FailedNodes"] == {}
    # A 1-GPU pod cannot be misplaced across sockets: it passes either way.
    assert [n["metadata"]["name"] for n in one["Nodes"]["items"]] == ["good", "bad"]
    assert host_scores(scores, ["good", "bad"])["bad"] == 0  # unscored


async def test_stale_report_recovers_when_time_is_on_its_side():
    node = node_object("n", report_annotations(WHOLE, node="n", reported_at=NOW))
    async with serving(make_extender(now=later(299))) as client:
        _, body = await client.post("filter", args_body(pod_object(2), nodes=[node]))
    assert [n["metadata"]["name"] for n in body["Nodes"]["items"]] == ["n"]


MALFORMED = [
    b"",
    b"not json",
    b"[]",
    b"{}",
    b'{"Pod": null, "Nodes": null, "NodeNames": ["a"]}',
    b'{"Pod": {}, "Nodes": null, "NodeNames": null}',
    b'{"Pod": {}, "Nodes": {"items": []}, "NodeNames": ["a"]}',
    b'{"Pod": {}, "NodeNames": "a"}',
    b'{"Pod": {}, "NodeNames": [1, 2]}',
    b'{"Pod": {"x": NaN}, "NodeNames": ["a"]}',
    b'\xff\xfe{}',
    b'{"Pod": [], "NodeNames": ["a"]}',
    b'{"Pod": {}, "Nodes": {"items": [{"metadata": {}}]}, "NodeNames": null}',
    b'{"Pod": {"spec": {"containers": [{"resources": {"limits": {"nvidia.com/gpu": "two"}}}]}}, "NodeNames": ["a"]}',
    b'{"Pod": {"spec": {"containers": [{"resources": {"limits": {"nvidia.com/gpu": "0.5"}}}]}}, "NodeNames": ["a"]}',
]


@pytest.mark.parametrize("body", MALFORMED)
async def test_malformed_filter_and_prioritize_bodies_get_400_with_the_error(body):
    async with serving(make_extender()) as client:
        status, answer = await client.post("filter", body)
        pstatus, panswer = await client.post("prioritize", body)
    assert status == 400
    result = ExtenderFilterResult.model_validate(answer)
    assert result.Error and result.NodeNames is None and result.Nodes is None
    assert pstatus == 400 and set(panswer) == {"Error"} and panswer["Error"]


@pytest.mark.parametrize("body", [b"", b"{", b"[]", b'{"PodName": "p"}', b'{"PodName": "p", "PodNamespace": "n", "Node": 3}'])
async def test_malformed_bind_bodies_get_400_with_the_error(body):
    async with serving(make_extender()) as client:
        status, answer = await client.post("bind", body)
    assert status == 400 and answer["Error"] and set(answer) == {"Error"}


BIND_SHAPES = [
    {"PodName": "p", "PodNamespace": "ns", "PodUID": "u", "Node": "n"},  # kube-scheduler's shape
    {"PodName": "p", "PodNamespace": "ns", "PodUID": "", "Node": "n"},
    {"PodName": "p", "PodNamespace": "ns", "Node": "n"},
    {"PodName": "p", "PodNamespace": "ns", "PodUID": None, "Node": "n"},
    {"PodName": "p", "PodNamespace": "ns", "PodUID": "u", "Node": "n", "Extra": 1},
    {"podName": "p", "PodNamespace": "ns", "PodUID": "u", "Node": "n"},
    {"PodName": "", "PodNamespace": "ns", "PodUID": "u", "Node": "n"},
    {"PodName": "p", "PodNamespace": "", "PodUID": "u", "Node": "n"},
    {"PodName": "p", "PodNamespace": "ns", "PodUID": "u", "Node": ""},
    {"PodName": "p", "PodNamespace": "ns", "PodUID": 7, "Node": "n"},
    {"PodName": ["p"], "PodNamespace": "ns", "PodUID": "u", "Node": "n"},
]


@pytest.mark.parametrize("shape", BIND_SHAPES)
def test_bind_bodies_read_as_the_model_reads_them(shape):
    """parse_binding takes kube-scheduler's exact shape without pydantic: whatever the body, it
    answers what the model (Go's key folding included) answers, a refusal included."""
    try:
        expected = protocol._validate(ExtenderBindingArgs, shape)
    except ProtocolError as exc:
        with pytest.raises(ProtocolError, match=re.escape(str(exc))):
            parse_binding(json.dumps(shape).encode())
        return
    assert parse_binding(json.dumps(shape).encode()).model_dump() == expected.model_dump()


async def test_error_messages_say_where():
    async with serving(make_extender()) as client:
        _, answer = await client.post("filter", b'{"Pod": {}, "NodeNames": [1]}')
        _, quantity = await client.post("filter", MALFORMED[13])
    assert answer["Error"].startswith("malformed ExtenderArgs: NodeNames.0")
    assert "spec.containers[0].resources.limits[nvidia.com/gpu]" in quantity["Error"]


async def test_health_and_metrics():
    extender = make_extender()
    async with serving(extender) as client:
        await client.post("filter", args_body(pod_object(2), nodes=[node_object("a", report_annotations(SPLIT, node="a"))]))
        await client.post("filter", b"junk")
        health, _ = await client.get("/healthz")
        ready, _ = await client.get("/readyz")
        status, text = await client.get("/metrics")
    assert (health, ready, status) == (200, 200, 200)
    assert 'gpupair_extender_requests_total{outcome="ok",verb="filter"} 1.0' in text
    assert 'gpupair_extender_requests_total{outcome="bad_request",verb="filter"} 1.0' in text
    assert 'gpupair_extender_decisions_total{outcome="fail",verb="filter"} 1.0' in text
    assert "gpupair_extender_request_seconds_bucket" in text
    assert "gpupair_extender_reservations 0.0" in text


def test_filter_result_keys_are_the_go_field_names():
    dumped = json.loads(ExtenderFilterResult(NodeNames=["a"]).model_dump_json())
    assert list(dumped) == ["Nodes", "NodeNames", "FailedNodes", "FailedAndUnresolvableNodes", "Error"]
