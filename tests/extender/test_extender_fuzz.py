"""Random protocol-shaped bodies at every verb, over a real loopback socket: never a 5xx, never
a node in an answer that was not offered, every offered node accounted for; and the decision
tables always agreeing with deciding each node afresh. Hostile bytes (deep nesting, invalid
UTF-8, huge numbers) are sent to every endpoint alike by tests/test_endpoint_fuzz.py."""

from __future__ import annotations

import asyncio
import json
from datetime import timedelta

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from gpupair.decide.judge.decisions import Decider, FilterOutcome, NodeView, Unreported
from gpupair.extender.evaluation import Offer
from gpupair.extender.filter import filter_verdicts
from gpupair.extender.prioritize import scores_json
from gpupair.extender.protocol import HOST_PRIORITY_LIST, ExtenderBindingResult, ExtenderFilterResult
from gpupair.decide.judge.reservations import Reservation
from gpupair.topology.report import FREE_KEY, TOPOLOGY_KEY, ReportError, decode_annotations
from tests.extender_support import NOW, make_extender, node_object, report_annotations, serving

CACHED = ["n0", "n1", "n2", "n3", "n4", "n5"]
SETTINGS = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


class Running:
    """An extender app on a loopback port, driven from synchronous hypothesis tests."""

    def __init__(self, extender):
        self.loop = asyncio.new_event_loop()
        self.extender = extender
        self._cm = serving(extender)
        self.client = self.loop.run_until_complete(self._cm.__aenter__())

    def post(self, verb: str, body) -> tuple[int, object]:
        return self.loop.run_until_complete(self.client.post(verb, body))

    def close(self) -> None:
        self.loop.run_until_complete(self._cm.__aexit__(None, None, None))
        self.loop.close()


def _cached_extender(unreported: Unreported):
    extender = make_extender(node_cache=True, unreported=unreported)
    items = [{"metadata": {"name": name, "annotations": annotations}} for name, annotations in (
        ("n0", report_annotations({0, 4}, node="n0")),
        ("n1", report_annotations(set(range(8)), node="n1")),
        ("n2", report_annotations({1, 2, 3}, node="n2")),
        ("n3", {}),
        ("n4", {TOPOLOGY_KEY: "[]", FREE_KEY: "{}"}),
        ("n5", report_annotations({5, 6}, node="n5", reported_at=NOW - timedelta(hours=1))),  # stale
    )]
    extender.node_cache.replace(items)
    extender.reservations.reserve(Reservation("held", "n2", frozenset({1, 2})))
    return extender


@pytest.fixture(scope="module", params=[Unreported.FAIL, Unreported.PASS], ids=["fail", "pass"])
def servers(request):
    names = Running(_cached_extender(request.param))
    nodes = Running(make_extender(unreported=request.param))
    yield names, nodes
    names.close()
    nodes.close()


# ---------------------------------------------------------------- strategies

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-10, 10) | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=6),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=16,
)
quantities = st.sampled_from(["0", "1", "2", "3", "4", "8", "9", "two", "-1", "1.5", "2e0", "1k", "", " 2"]) | st.integers(-2, 12) | st.none()
container = st.fixed_dictionaries(
    {"name": st.text(max_size=4)},
    optional={"resources": st.fixed_dictionaries({}, optional={
        "limits": st.dictionaries(st.sampled_from(["nvidia.com/gpu", "cpu"]), quantities, max_size=2),
        "requests": st.dictionaries(st.sampled_from(["nvidia.com/gpu", "memory"]), quantities, max_size=2)}),
        "restartPolicy": st.sampled_from(["Always", "Never", None])},
)
pods = st.fixed_dictionaries(
    {"metadata": st.fixed_dictionaries({}, optional={"uid": st.text(max_size=8), "name": st.text(max_size=8)})},
    optional={"spec": st.fixed_dictionaries({}, optional={
        "containers": st.lists(container, max_size=3), "initContainers": st.lists(container, max_size=2)})},
) | json_values
free_sets = st.frozensets(st.integers(0, 7))
annotation_sets = st.one_of(
    free_sets.map(lambda free: report_annotations(free, node="fz")),
    st.just({}),
    st.dictionaries(st.sampled_from([TOPOLOGY_KEY, FREE_KEY, "other"]), st.text(max_size=12) | json_values, max_size=3),
)
node_names = st.sampled_from(CACHED + ["ghost", ""]) | st.text(max_size=6)
nodes_lists = st.lists(
    st.builds(lambda name, ann: {"metadata": {"name": name, "annotations": ann}, "status": {}}, node_names, annotation_sets),
    max_size=6,
)


@st.composite
def extender_args(draw):
    body = {}
    keys = {"Pod": "Pod", "Nodes": "Nodes", "NodeNames": "NodeNames"}
    if draw(st.booleans()):
        keys = {k: draw(st.sampled_from([k, k.lower(), k.upper()])) for k in keys}
    if draw(st.integers(0, 9)):
        body[keys["Pod"]] = draw(pods)
    form = draw(st.sampled_from(["names", "nodes", "both", "neither", "junk"]))
    names = draw(st.lists(node_names, max_size=8))
    nodes = draw(nodes_lists)
    body[keys["NodeNames"]] = names if form in ("names", "both") else (draw(json_values) if form == "junk" else None)
    body[keys["Nodes"]] = {"metadata": {}, "items": nodes} if form in ("nodes", "both") else None
    if draw(st.booleans()):
        body["Unknown"] = draw(json_values)
    return body


def offered(body) -> tuple[list[str], list[dict]]:
    lowered = {k.lower(): v for k, v in body.items()} if isinstance(body, dict) else {}
    names = lowered.get("nodenames")
    nodes = (lowered.get("nodes") or {}).get("items") if isinstance(lowered.get("nodes"), dict) else None
    return (names if isinstance(names, list) else []), (nodes if isinstance(nodes, list) else [])


def check_filter(status, answer, body) -> None:
    assert status in (200, 400)
    result = ExtenderFilterResult.model_validate(answer)
    if status == 400:
        assert result.Error
        return
    assert result.Error == ""
    names, nodes = offered(body)
    if result.NodeNames is not None:
        assert result.Nodes is None
        passed = result.NodeNames
        assert set(passed) <= set(names)
        universe = set(names)
    else:
        assert result.Nodes is not None
        items = result.Nodes.items or []
        assert all(item in nodes for item in items)
        passed = [item["metadata"]["name"] for item in items]
        universe = {node["metadata"]["name"] for node in nodes}
    failed, unresolvable = set(result.FailedNodes or {}), set(result.FailedAndUnresolvableNodes or {})
    assert failed <= universe and unresolvable <= universe
    assert not (set(passed) & failed) and not (set(passed) & unresolvable) and not (failed & unresolvable)
    assert set(passed) | failed | unresolvable == universe  # every offered node accounted for
    assert all(reason for reason in {**(result.FailedNodes or {}), **(result.FailedAndUnresolvableNodes or {})}.values())


def check_prioritize(status, answer, body) -> None:
    assert status in (200, 400)
    if status == 400:
        assert isinstance(answer, dict) and answer["Error"]
        return
    scores = HOST_PRIORITY_LIST.validate_python(answer)
    names, nodes = offered(body)
    expected = names if names or not nodes else [n["metadata"]["name"] for n in nodes]
    listed = [s["Host"] for s in scores]
    assert listed == [name for name in expected if name in set(listed)]  # offered ones, in order
    assert all(0 < s["Score"] <= 10 for s in scores)  # a node scored 0 is left out


# ---------------------------------------------------------------- tests


@SETTINGS
@given(body=extender_args())
def test_structured_random_bodies(servers, body):
    for server in servers:
        status, answer = server.post("filter", json.dumps(body))
        event(f"filter answered {status}")
        check_filter(status, answer, body)
        status, answer = server.post("prioritize", json.dumps(body))
        check_prioritize(status, answer, body)


@SETTINGS
@given(body=st.fixed_dictionaries({
    "PodName": st.text(max_size=6) | json_values, "PodNamespace": st.text(max_size=6),
    "PodUID": st.text(max_size=6), "Node": node_names}))
def test_random_bind_bodies(servers, body):
    for server in servers:
        status, answer = server.post("bind", json.dumps(body))
        assert status in (200, 400)
        assert ExtenderBindingResult.model_validate(answer).Error


uids = st.sampled_from(["u1", "u2", "u3"]) | st.text(max_size=4)
meta_victims = st.fixed_dictionaries({"Pods": st.lists(st.fixed_dictionaries({"UID": uids}), max_size=3)},
                                     optional={"NumPDBViolations": st.integers(0, 3) | json_values})
pod_victims = st.fixed_dictionaries({"Pods": st.lists(pods, max_size=3)},
                                    optional={"NumPDBViolations": st.integers(0, 3)})


@st.composite
def preemption_args(draw):
    body = {"Pod": draw(pods | json_values)}
    if draw(st.booleans()):
        body["NodeNameToMetaVictims"] = draw(st.dictionaries(node_names, meta_victims | json_values, max_size=4))
        body["NodeNameToVictims"] = None
    else:
        body["NodeNameToVictims"] = draw(st.dictionaries(node_names, pod_victims | json_values, max_size=4))
        body["NodeNameToMetaVictims"] = draw(st.none() | json_values)
    return body


@SETTINGS
@given(body=preemption_args())
def test_random_preempt_bodies(servers, body):
    """Never a 5xx; an answer names only offered nodes, each with a non-empty subset of the
    victims offered there (kube-scheduler refuses a node with none)."""
    for server in servers:
        status, answer = server.post("preempt", json.dumps(body))
        event(f"preempt answered {status}")
        assert status in (200, 400)
        if status == 400:
            assert answer["Error"]
            continue
        offered_victims = body.get("NodeNameToMetaVictims") or body.get("NodeNameToVictims") or {}
        for node, victims in answer["NodeNameToMetaVictims"].items():
            sent = offered_victims[node]["Pods"]
            sent_uids = [p["UID"] if "UID" in p else p["metadata"]["uid"] for p in sent]
            kept = [p["UID"] for p in victims["Pods"]]
            assert kept and set(kept) <= set(sent_uids)


@SETTINGS
@given(frees=st.lists(free_sets, min_size=1, max_size=5), gpus=st.integers(0, 9), fail=st.booleans())
def test_nodes_mode_filter_is_the_cores_decision(frees, gpus, fail):
    """The verb adds transport only: its verdicts are Decider.filter over the decoded reports."""
    unreported = Unreported.FAIL if fail else Unreported.PASS
    nodes = [node_object(f"n{i}", report_annotations(free, node=f"n{i}")) for i, free in enumerate(frees)]
    nodes.append(node_object("bare"))
    extender = make_extender(unreported=unreported)
    from tests.extender_support import args_body, pod_object

    async def go():
        async with serving(extender) as client:
            return await client.post("filter", args_body(pod_object(gpus), nodes=nodes))

    status, answer = asyncio.run(go())
    views = []
    for node in nodes:
        try:
            views.append(NodeView(node["metadata"]["name"], decode_annotations(node["metadata"]["annotations"]).state))
        except ReportError as exc:
            views.append(NodeView(node["metadata"]["name"], None, exc.reason))
    expected = FilterOutcome()
    for view in views:
        expected.add(view.name, Decider(unreported=unreported).decide(gpus, view))
    assert status == 200
    assert [n["metadata"]["name"] for n in answer["Nodes"]["items"]] == expected.passed
    assert answer["FailedAndUnresolvableNodes"] == expected.unresolvable
    assert set(answer["FailedNodes"]) == set(expected.failed)


# ---------------------------------------------------------------- decision tables


operations = st.lists(st.one_of(
    # A report with an (empty) allocation ledger, or from a reporter before the ledger: only a
    # ledger lets pods bound by count hold GPUs there (gpupair/decide/judge/reservations.py).
    st.tuples(st.just("report"), st.sampled_from(CACHED), free_sets, st.integers(-400, 0), st.booleans()),
    st.tuples(st.just("bare"), st.sampled_from(CACHED)),
    st.tuples(st.just("delete"), st.sampled_from(CACHED)),
    st.tuples(st.just("tick"), st.integers(1, 200)),
    st.tuples(st.just("reserve"), st.sampled_from(CACHED), free_sets),
    st.tuples(st.just("release"), st.sampled_from(CACHED)),
    st.tuples(st.just("bound"), st.sampled_from(CACHED), st.sampled_from(CACHED), st.integers(1, 4)),
    st.tuples(st.just("gone"), st.sampled_from(CACHED)),
), max_size=25)


@settings(max_examples=150, deadline=None)
@given(ops=operations, fail=st.booleans(), shuffled=st.permutations(CACHED + ["ghost"]), cut=st.integers(0, 7))
def test_decision_tables_agree_with_deciding_afresh(ops, fail, shuffled, cut):
    now = [NOW.timestamp()]
    # One clock for reports and holds, so ticks also end holds by their TTL (120 s).
    extender = make_extender(node_cache=True, clock=lambda: now[0], stale_after=300.0,
                             reservation_timer=lambda: now[0],
                             unreported=Unreported.FAIL if fail else Unreported.PASS)
    cache, evaluator = extender.node_cache, extender.evaluator
    cache.replace([])
    generation = 0
    for op in ops:
        if op[0] == "report":
            generation += 1
            _, name, free, age, ledger = op
            reported = NOW + timedelta(seconds=now[0] - NOW.timestamp() + age)
            cache.apply("MODIFIED", {"metadata": {"name": name, "annotations": report_annotations(
                free, node=name, generation=generation, reported_at=reported.replace(microsecond=0),
                ledger={} if ledger else None)}})
        elif op[0] == "bare":
            cache.apply("ADDED", {"metadata": {"name": op[1]}})
        elif op[0] == "delete":
            cache.apply("DELETED", {"metadata": {"name": op[1]}})
        elif op[0] == "tick":
            now[0] += op[1]
        elif op[0] == "reserve":
            extender.reservations.reserve(Reservation(f"uid-{op[1]}", op[1], op[2]))
        elif op[0] == "release":
            extender.reservations.release(f"uid-{op[1]}")
        elif op[0] == "bound":  # the pod watch: a pod bound by anyone, held by count or by its plan
            extender.reservations.pod_bound(f"uid-{op[1]}", op[2], "default", op[1], op[3])
        else:
            extender.reservations.pod_gone(f"uid-{op[1]}", "deleted")
        # The holds as kept between changes are the holds as counted afresh.
        holds = extender.reservations.by_node()
        assert holds == {name: hold for name in CACHED if (hold := extender.reservations.hold(name))}
        for names in (CACHED + ["ghost"], shuffled[:cut]):  # every node, and some in any order
            tabled = Offer(names, cache.get, evaluator.uncached, cached=True)
            fresh = Offer(names, cache.get, evaluator.uncached, cached=False)
            for gpus in (0, 1, 2, 3, 5, 9):
                a, b = filter_verdicts(evaluator, gpus, tabled), filter_verdicts(evaluator, gpus, fresh)
                assert sorted(a.passed) == sorted(b.passed)
                assert a.failed == b.failed and a.unresolvable == b.unresolvable
                assert scores_json(evaluator, gpus, tabled) == scores_json(evaluator, gpus, fresh)


# ---------------------------------------------------------------- the NodeNames fast path


@SETTINGS
@given(body=extender_args() | json_values, names=st.lists(node_names | json_values, max_size=6))
def test_names_fast_path_agrees_with_the_model(body, names):
    """parse_args skips pydantic for kube-scheduler's NodeNames shape; whatever it accepts that
    way, the model accepts with the same fields, and whatever the model refuses it refuses."""
    from gpupair.extender.protocol import ExtenderArgs, ProtocolError, parse_args

    bodies = [body]
    if isinstance(body, dict):
        bodies.append({**body, "NodeNames": names})
    for candidate in bodies:
        raw = json.dumps(candidate).encode()
        try:
            expected = ExtenderArgs.model_validate(_folded(candidate))
        except Exception:  # noqa: BLE001 - the model refuses: so must parse_args
            with pytest.raises(ProtocolError):
                parse_args(raw)
            continue
        got = parse_args(raw)
        assert (got.Pod, got.Nodes, got.NodeNames) == (expected.Pod, expected.Nodes, expected.NodeNames)


def _folded(body):
    from gpupair.extender.protocol import ExtenderArgs, _fold_case

    return _fold_case(ExtenderArgs, body)


@SETTINGS
@given(names=st.none() | st.lists(node_names, max_size=6), nodes=st.none() | nodes_lists,
       failed=st.dictionaries(node_names, st.text(max_size=12), max_size=4),
       unresolvable=st.none() | st.dictionaries(node_names, st.text(max_size=12), max_size=4),
       error=st.text(max_size=8), extra=st.dictionaries(st.sampled_from(["kind", "apiVersion"]), json_values))
def test_filter_result_json_is_the_models_json(names, nodes, failed, unresolvable, error, extra):
    """The orjson encoding of filter's answer writes what pydantic would: same keys, same order."""
    from gpupair.extender.protocol import NodeList, filter_result_json

    node_list = None if nodes is None else NodeList.model_construct(metadata={}, items=nodes, **extra)
    result = ExtenderFilterResult.model_construct(Nodes=node_list, NodeNames=names, FailedNodes=failed,
                                                  FailedAndUnresolvableNodes=unresolvable, Error=error)
    ours = json.loads(filter_result_json(result))
    theirs = json.loads(result.model_dump_json())
    assert ours == theirs
    assert list(ours) == list(theirs)
    if ours["Nodes"] is not None:
        assert list(ours["Nodes"]) == list(theirs["Nodes"])


def test_a_hold_on_one_node_is_counted_in_the_tables_and_decides_that_node_again_only():
    # A burst on the real scheduler: every node holds plans until its report comes. Filter and
    # prioritize answer from the tables, so a bind's hold must show there at the next request,
    # and only the node it touched is decided again.
    extender = make_extender(node_cache=True)
    cache, evaluator, tables = extender.node_cache, extender.evaluator, extender.evaluator.tables
    cache.replace([{"metadata": {"name": n, "annotations": report_annotations({0, 1, 2, 3}, node=n)}}
                   for n in ("n0", "n1")])
    offer = Offer(["n0", "n1"], cache.get, evaluator.uncached, cached=True)
    assert filter_verdicts(evaluator, 4, offer).passed == ["n0", "n1"]  # the table for 4 exists
    looked_up: list[str] = []
    lookup = tables._lookup
    tables._lookup = lambda name: looked_up.append(name) or lookup(name)
    extender.reservations.reserve(Reservation("uid-a", "n0", frozenset({0, 1})))
    extender.reservations.reserve(Reservation("uid-b", "n0", frozenset({0, 1})))  # n0 changes twice
    verdicts = filter_verdicts(evaluator, 4, offer)
    assert verdicts.passed == ["n1"] and "reserved for pods just bound here" in verdicts.failed["n0"]
    assert looked_up == ["n0"]  # once, at the request; n1's decision stands
    assert filter_verdicts(evaluator, 4, offer).passed == ["n1"] and looked_up == ["n0"]  # nothing changed since
    extender.reservations.release("uid-a")
    extender.reservations.release("uid-b")
    assert filter_verdicts(evaluator, 4, offer).passed == ["n0", "n1"] and looked_up == ["n0", "n0"]

@SETTINGS
@given(parts=st.lists(st.tuples(node_names | st.sampled_from(['a"b', "a\\b", "a\nb", "ñodo-1"]),
                                st.integers(min_value=-1, max_value=11)), max_size=8))
def test_host_priorities_json_is_the_models_answer(parts):
    """prioritize's answer as written without the model: each node scored above 0, its name as
    JSON writes it (escaped where it must be), whatever the names and scores."""
    from gpupair.extender.cache.decision_tables import host_priorities_json

    names, scores = [name for name, _ in parts], [score for _, score in parts]
    answer = host_priorities_json(names, scores)
    expected = [{"Host": name, "Score": score} for name, score in parts if score]
    assert HOST_PRIORITY_LIST.validate_json(answer) == HOST_PRIORITY_LIST.validate_python(expected)
    assert json.loads(answer) == expected
