"""`gpupair status` end to end: the command run as a user runs it (a subprocess with a
kubeconfig) against the API double holding a fleet with every case (tests/status_fleet.py).

Text outputs are golden files (tests/fixtures/status/); regenerate them after a deliberate
change with ``GPUPAIR_UPDATE_GOLDEN=1 ./dev test tests/status/test_status.py`` and review the diff."""

from __future__ import annotations

import asyncio
import io
import json
import os
import signal
import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path

import jsonschema
import pytest

from gpupair.topology import report as codec
from gpupair.topology.shares import SHARES_KEY, GpuShares, encode_shares
from gpupair.decide.picture.node_entries import ReportDecoder
from gpupair.status.build import Listing, Options, build
from gpupair.status.objects import annotations
from gpupair.status.main import CLEAR, _show, paused_gc
from gpupair.status.render import render_text
from gpupair.status.schema import schema, schema_text
from gpupair.status.view import StatusView
from tests.kube_double import Store, make_node, make_pod, running_kube_double
from tests.status_fleet import NOW, NS, bind, report, rfc3339, small_fleet

REPO = Path(__file__).resolve().parents[2]
GOLDEN = REPO / "tests" / "fixtures" / "status"
SCHEMA_FILE = REPO / "docs" / "status.schema.json"
FORBIDDEN_EVENTS = ('events is forbidden: User "tester" cannot list resource "events" in API group "" '
                    'at the cluster scope')


@pytest.fixture
async def fleet():
    store = Store()
    small_fleet(store)
    async with running_kube_double(store) as double:
        yield double


async def status(double, tmp_path: Path, *flags: str) -> tuple[int, str, str]:
    kubeconfig = double.write_kubeconfig(tmp_path / "kubeconfig")
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUPAIR_") and k != "KUBECONFIG"}
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "gpupair.command.cli", "status", "--kubeconfig", str(kubeconfig), "--now", rfc3339(NOW),
        *flags, cwd=REPO, env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    return proc.returncode, out.decode(), err.decode()


def matches_golden(name: str, text: str) -> None:
    path = GOLDEN / name
    if os.environ.get("GPUPAIR_UPDATE_GOLDEN"):
        path.write_text(text)
    assert text == path.read_text(), f"output differs from {path} (see the module docstring to regenerate)"


# ---- the command against the double


@pytest.mark.parametrize("output,golden", [("text", "fleet.txt"), ("wide", "fleet-wide.txt")])
async def test_text_outputs_show_every_case(fleet, tmp_path, output, golden):
    code, out, err = await status(fleet, tmp_path, "-o", output)
    assert (code, err) == (0, "")
    matches_golden(golden, out)


def test_the_docs_screenshot_is_the_golden_output():
    page = (REPO / "docs" / "status.md").read_text()
    assert "$ gpupair status --now 2026-01-01T12:00:00Z\n" + (GOLDEN / "fleet.txt").read_text() + "```" in page


async def test_text_names_each_case_on_its_node(fleet, tmp_path):
    # What the golden file must keep saying, spelled out so a regenerated golden cannot lose it.
    _, out, _ = await status(fleet, tmp_path)
    lines = {line.split()[0]: line for line in out.splitlines() if line.startswith(("gpu-", "cpu-"))}
    assert set(lines) == {"gpu-a", "gpu-b", "gpu-c", "gpu-d", "gpu-e", "gpu-f", "gpu-g"}  # no CPU node
    assert "NUMA0 ■■□□  NUMA1 □□□□" in lines["gpu-a"] and "4 NUMA1" in lines["gpu-a"]
    assert "NUMA0 ■◩◩■  NUMA1 □■■✕" in lines["gpu-b"]  # planned set reserved, GPU7 unhealthy
    assert "+2 reserved on devices not yet known" in lines["gpu-c"]
    assert "ledger not used: gpupair.io/allocations is of generation 6, gpupair.io/free of 7" in lines["gpu-c"]
    assert "NUMA0 ■■□□  NUMA1 ◩◩□□" in lines["gpu-g"]  # bound before the scan, not in the ledger
    assert " stale " in lines["gpu-d"] and "from 2026-01-01T11:51:00Z is older than 300s" in lines["gpu-d"]
    assert " invalid " in lines["gpu-e"] and "out of range 0..7: [9]" in lines["gpu-e"]
    assert " missing " in lines["gpu-f"] and "gpupair.io/topology missing" in lines["gpu-f"]
    assert "1 GPU: 4  2 GPU: 3  4 GPU: 1  8 GPU: 0" in out
    assert "ml/train-4gpu  4     default    45s" in out and "2 need 4 GPUs on one NUMA node" in out
    assert "ml/train-8gpu  8     default    -           (no FailedScheduling event seen)" in out
    assert out.index("ml/train-k2x8p") < out.index("ml/gone-pod")  # newest FAIL first


async def test_one_list_call_per_kind_and_no_per_node_request(fleet, tmp_path):
    code, _, _ = await status(fleet, tmp_path)
    assert code == 0
    gets = sorted((r.method, r.path) for r in fleet.requests)
    assert gets == [("GET", "/api/v1/events"), ("GET", "/api/v1/nodes"), ("GET", "/api/v1/pods"),
                    ("GET", "/apis/coordination.k8s.io/v1/namespaces/gpupair-system/leases"),
                    ("GET", "/apis/resource.k8s.io/v1/resourceclaims"),
                    ("GET", "/apis/resource.k8s.io/v1/resourceslices")]
    (leases,) = [r for r in fleet.requests if "leases" in r.path]
    assert leases.query["labelSelector"] == "gpupair.io/heartbeat=node"  # not the extender's leader Lease


async def test_a_renewed_lease_keeps_a_node_with_an_old_report_fresh(fleet, tmp_path):
    from gpupair.kubewire.leases import lease_body

    renewed = lease_body("gpu-d", "gpupair-system", 120, int((NOW - timedelta(seconds=3)).timestamp() * 1e9))
    fleet.store.create("leases", renewed, "gpupair-system")
    leader = lease_body("gpu-a", "gpupair-system", 15, int(NOW.timestamp() * 1e9))
    leader["metadata"].update(name="gpupair-extender", labels={})
    fleet.store.create("leases", leader, "gpupair-system")
    _, out, _ = await status(fleet, tmp_path, "-o", "json")
    _, without, _ = await status(fleet, tmp_path, "-o", "json", "--lease-namespace", "")
    nodes = {n["name"]: n for n in json.loads(out)["nodes"]}
    assert (nodes["gpu-d"]["state"], nodes["gpu-d"]["heartbeatSource"], nodes["gpu-d"]["ageSeconds"]) == (
        "fresh", "lease", 3.0)
    assert nodes["gpu-a"]["heartbeatSource"] == "report"
    assert {n["name"]: n["state"] for n in json.loads(without)["nodes"]}["gpu-d"] == "stale"


async def test_selectors_go_to_the_server(fleet, tmp_path):
    fleet.store.patch("nodes", "gpu-a", {"metadata": {"labels": {"pool": "a"}}})
    code, out, _ = await status(fleet, tmp_path, "-l", "pool=a", "-n", NS)
    assert code == 0
    assert [line.split()[0] for line in out.splitlines() if line.startswith("gpu-")] == ["gpu-a"]
    assert fleet.requests_to("/api/v1/nodes")[0].query == {"labelSelector": "pool=a"}
    assert fleet.requests_to(f"/api/v1/namespaces/{NS}/pods") and fleet.requests_to(f"/api/v1/namespaces/{NS}/events")
    code, out, _ = await status(fleet, tmp_path, "--namespace", "elsewhere")
    assert "pending GPU pods: none" in out and "recent FAIL verdicts: none" in out


async def test_events_forbidden_says_what_it_could_not_see(fleet, tmp_path):
    fleet.fail_next("/api/v1/events", 403, message=FORBIDDEN_EVENTS, reason="Forbidden")
    code, out, err = await status(fleet, tmp_path)
    assert (code, err) == (0, "")
    matches_golden("fleet-events-forbidden.txt", out)
    assert f"not visible: events: cannot list events: HTTP 403: {FORBIDDEN_EVENTS}" in out
    assert "ml/train-4gpu  4     default    -           (events not visible)" in out
    assert "ml/train-k2x8p  -" in out  # the pod's own verdict is still shown, without a time


async def test_pods_forbidden_leaves_the_nodes_and_says_so(fleet, tmp_path):
    fleet.fail_next("/api/v1/pods", 403, message="pods is forbidden", reason="Forbidden")
    code, out, _ = await status(fleet, tmp_path, "-o", "json")
    view = StatusView.model_validate_json(out)
    assert code == 0 and len(view.nodes) == 7 and view.summary.pending == []
    assert [(u.resource, u.reason) for u in view.unseen] == [("pods", "cannot list pods: HTTP 403: pods is forbidden")]
    fleet.fail_next("/api/v1/pods", 403, message="pods is forbidden", reason="Forbidden")
    code, out, _ = await status(fleet, tmp_path)
    assert "pending GPU pods: unknown (pods not visible)" in out


async def test_nodes_not_listable_is_an_error(fleet, tmp_path):
    fleet.fail_next("/api/v1/nodes", 403, message="nodes is forbidden", reason="Forbidden")
    code, out, err = await status(fleet, tmp_path)
    assert (code, out) == (1, "")  # a runtime failure: one line, exit 1
    assert err == "gpupair status: cannot list nodes: HTTP 403: nodes is forbidden\n"


async def test_no_cluster_configuration_is_an_error(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUPAIR_") and k != "KUBECONFIG"}
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "gpupair.command.cli", "status", "--kubeconfig", str(tmp_path / "nope"), cwd=REPO, env=env,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await proc.communicate()
    assert proc.returncode == 2 and out == b""
    assert err == f"gpupair status: error: kubeconfig {tmp_path / 'nope'}: no such file\n".encode()


@pytest.mark.parametrize("flags,message", [
    (["--now", "yesterday"], "--now 'yesterday' is not an RFC 3339 time"),
    (["--interval", "0"], "--interval: must be above 0"),
    (["--fails", "-1"], "--fails: must be between 0 and 1000, got -1"),
])
async def test_bad_flags_are_usage_errors(fleet, tmp_path, flags, message):
    code, out, err = await status(fleet, tmp_path, *flags)
    assert code == 2 and out == "" and message in err


async def test_watch_redraws_until_sigterm(fleet, tmp_path):
    kubeconfig = fleet.write_kubeconfig(tmp_path / "kubeconfig")
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUPAIR_") and k != "KUBECONFIG"}
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "gpupair.command.cli", "status", "--kubeconfig", str(kubeconfig), "--now", rfc3339(NOW),
        "-o", "json", "--watch", "--interval", "0.1", cwd=REPO, env=env,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    first = StatusView.model_validate_json(await asyncio.wait_for(proc.stdout.readline(), 30))
    fleet.store.patch("nodes", "gpu-f", {"metadata": {"annotations": report("gpu-f", {0, 1}, 1)}})
    for _ in range(50):  # frames follow one per line until the change shows
        frame = StatusView.model_validate_json(await asyncio.wait_for(proc.stdout.readline(), 30))
        if frame.summary.nodes.missing == 0:
            break
    proc.send_signal(signal.SIGTERM)
    await asyncio.wait_for(proc.wait(), 30)
    assert first.summary.nodes.missing == 1 and frame.summary.nodes.missing == 0
    assert proc.returncode == 0


def test_watch_on_a_terminal_redraws_in_place():
    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    screen = Terminal()
    _show(screen, "frame 1\n", redraw=True)
    _show(screen, "frame 2\n", redraw=True)
    assert screen.getvalue() == f"{CLEAR}frame 1\n{CLEAR}frame 2\n"


def test_paused_gc_restores_the_collector_as_it_was():
    import gc

    assert gc.isenabled()
    with pytest.raises(RuntimeError), paused_gc():
        assert not gc.isenabled()
        raise RuntimeError("a failed list")
    assert gc.isenabled()
    gc.disable()
    try:
        with paused_gc():
            pass
        assert not gc.isenabled()  # a caller that had it off keeps it off
    finally:
        gc.enable()


# ---- -o json and its documented schema


def test_documented_schema_is_the_one_the_code_emits():
    assert SCHEMA_FILE.read_text() == schema_text(), "regenerate: python -m gpupair.status.schema > docs/status.schema.json"
    jsonschema.Draft202012Validator.check_schema(schema())


async def test_json_output_validates_against_the_schema(fleet, tmp_path):
    fleet.fail_next("/api/v1/events", 403, message=FORBIDDEN_EVENTS, reason="Forbidden")
    outputs = [(await status(fleet, tmp_path, "-o", "json"))[1], (await status(fleet, tmp_path, "-o", "json"))[1]]
    validator = jsonschema.Draft202012Validator(json.loads(SCHEMA_FILE.read_text()),
                                                format_checker=jsonschema.FormatChecker())
    for text in outputs:
        document = json.loads(text)
        validator.validate(document)
        assert document["schemaVersion"] == 1 and len(document["nodes"]) == 7
    assert [u["resource"] for u in json.loads(outputs[0])["unseen"]] == ["events"]
    full = json.loads(outputs[1])
    by_name = {n["name"]: n for n in full["nodes"]}
    assert by_name["gpu-b"]["reserved"] == {"basis": "binding-time", "pods": ["ml/train-planned"], "devices": [1, 2],
                                            "unplaced": 0}
    assert by_name["gpu-g"]["reserved"] == {"basis": "ledger", "pods": ["ml/admitting"], "devices": [4, 5],
                                            "unplaced": 0}
    assert by_name["gpu-e"]["state"] == "invalid" and by_name["gpu-e"]["numa"] == []
    assert [f["source"] for f in full["summary"]["failVerdicts"]] == ["pod", "event"]
    with pytest.raises(jsonschema.ValidationError):
        validator.validate({**full, "nodes": [{**full["nodes"][0], "state": "sleepy"}]})


# ---- the pure parts


def node_with(free, age, unhealthy=frozenset()):
    return make_node("n", annotations=report("n", set(free), age, set(unhealthy)))


def test_a_lease_heartbeat_newer_than_the_report_keeps_a_node_fresh():
    old = node_with({0, 1}, age=900)
    alive = {"n": (NOW - timedelta(seconds=5)).timestamp()}
    [stale] = build(Listing(nodes=[old], pods=[], events=[]), NOW, Options(stale_after=300)).nodes
    assert (stale.state, stale.heartbeatSource, stale.ageSeconds) == ("stale", "report", 900.0)
    [live] = build(Listing(nodes=[old], pods=[], events=[], leases={"n": datetime.fromtimestamp(alive["n"], timezone.utc)}),
                   NOW, Options(stale_after=300)).nodes
    assert (live.state, live.heartbeatSource, live.ageSeconds, live.reason) == ("fresh", "lease", 5.0, "")


def test_a_stale_node_has_the_extenders_reason():
    # One rule, in the node picture's entry: status says what the extender's filter says.
    old = node_with({0, 1}, age=900)
    [view] = build(Listing(nodes=[old], pods=[], events=[]), NOW, Options(stale_after=300)).nodes
    entry = ReportDecoder(300).decode(annotations(old))
    assert entry.is_stale(NOW.timestamp())
    assert view.reason == entry.view("n", stale=True).problem
    assert "older than 300s" in view.reason


def test_stale_after_0_is_never_stale_as_in_the_extender():
    view = build(Listing(nodes=[node_with({0, 1}, age=10**6)], pods=[], events=[]), NOW, Options(stale_after=0))
    assert [n.state for n in view.nodes] == ["fresh"]
    assert "(never stale)" in render_text(view)


def test_a_pod_bound_in_the_same_second_as_the_scan_is_not_counted_reserved():
    store = Store()
    bind(store, "same-second", "n", 2, bound_ago=10)
    bind(store, "later", "n", 1, bound_ago=9)
    listing = Listing(nodes=[node_with(range(8), 10)], pods=store.items("pods"), events=[])
    node = build(listing, NOW).nodes[0]
    assert node.reserved.pods == [f"{NS}/later"] and node.reserved.unplaced == 1


def test_a_plan_naming_taken_devices_is_only_counted():
    store = Store()
    bind(store, "deviated", "n", 2, bound_ago=1, planned="GPU0+GPU1")
    listing = Listing(nodes=[node_with({2, 3}, 10)], pods=store.items("pods"), events=[])
    node = build(listing, NOW).nodes[0]
    assert node.reserved.devices == [] and node.reserved.unplaced == 2
    assert [d.state for d in node.numa[0].devices] == ["taken", "taken", "free", "free"]


def test_fragmentation_counts_what_the_extender_accepts_for_pods_larger_than_a_numa_node():
    """No 8-GPU pod fits one 4-GPU NUMA node, yet the extender places one on an empty node
    within the fewest (two) NUMA nodes: the "8 GPU" column counts that node."""
    empty = Listing(nodes=[node_with(set(range(8)), 10)], pods=[], events=[])
    assert [r.nodes for r in build(empty, NOW).summary.fragmentation] == [1, 1, 1, 1]
    one_taken = Listing(nodes=[node_with(set(range(1, 8)), 10)], pods=[], events=[])
    assert [r.nodes for r in build(one_taken, NOW).summary.fragmentation] == [1, 1, 1, 0]
    store = Store()
    bind(store, "somewhere", "n", 1, bound_ago=1)  # one GPU held on a device nobody has named yet
    held = Listing(nodes=[node_with(set(range(8)), 10)], pods=store.items("pods"), events=[])
    assert [r.nodes for r in build(held, NOW).summary.fragmentation] == [1, 1, 1, 0]


def test_fragmentation_counts_fresh_nodes_and_unknown_reservations_against_them():
    store = Store()
    bind(store, "somewhere", "n", 2, bound_ago=1)
    listing = Listing(nodes=[node_with({0, 1, 2, 3}, 10)], pods=store.items("pods"), events=[])
    assert [r.nodes for r in build(listing, NOW).summary.fragmentation] == [1, 1, 0, 0]
    stale = Listing(nodes=[node_with({0, 1, 2, 3}, 10)], pods=[], events=[])
    assert [r.nodes for r in build(stale, NOW, Options(stale_after=5)).summary.fragmentation] == [0, 0, 0, 0]


def test_a_topology_that_does_not_decode_is_invalid_with_the_codec_reason():
    node = node_with({0}, 1)
    node["metadata"]["annotations"][codec.TOPOLOGY_KEY] = "{not json"
    view = build(Listing(nodes=[node], pods=[], events=[]), NOW).nodes[0]
    assert view.state == "invalid" and view.reason.startswith("gpupair.io/topology rejected")


# ---- DRA nodes


async def test_dra_nodes_show_the_same_map_marked_dra(tmp_path):
    from tests.dra_support import fragmented_cluster, node_slice

    store = Store()
    slices, claims = fragmented_cluster()
    for obj in slices:
        store.create("nodes", make_node(obj["spec"]["nodeName"], gpus=0))
        store.create("resourceslices", obj)
    for obj in claims:
        store.create("resourceclaims", obj, obj["metadata"]["namespace"])
    bad = node_slice("dra-node-5", numa=False)
    store.create("nodes", make_node("dra-node-5", gpus=0))
    store.create("resourceslices", bad)
    async with running_kube_double(store) as double:
        code, out, err = await status(double, tmp_path, "-o", "wide")
        _, skipped, _ = await status(double, tmp_path, "--dra-driver", "")
    assert (code, err) == (0, "")
    lines = {line.split()[0]: line for line in out.splitlines() if line.startswith("dra-node")}
    assert "NUMA0 ■■■□  NUMA1 □■■■" in lines["dra-node-1"] and " fresh " in lines["dra-node-1"]
    assert "NUMA0 ■■■■  NUMA1 □□□□" in lines["dra-node-4"] and "4 NUMA1" in lines["dra-node-4"]
    assert all(" dra " in line and line.rstrip().endswith("DRA") for name, line in lines.items()
               if name != "dra-node-5")
    assert " invalid " in lines["dra-node-5"] and "no resource.kubernetes.io/numaNode attribute" in lines["dra-node-5"]
    assert "dra-node" not in skipped  # without the driver these nodes have no GPUs to show


async def test_wide_shows_each_numa_nodes_nics(tmp_path):
    from gpupair.topology import nics
    from gpupair.topology.report import TOPOLOGY_KEY, encode_annotations, fingerprint
    from tests.layouts import seed_layout

    lopsided = nics.NicLayout(nics=(nics.Nic("mlx5_bond_0"),),  # no numaNode: placed by its nearest GPU
                              links=tuple((("PIX",) if g < 4 else ("SYS",)) for g in range(8)))
    annotations = encode_annotations(seed_layout("GPU-n"), frozenset(range(8)), 1, NOW)
    annotations[nics.NICS_KEY] = nics.encode_nics(lopsided, fingerprint(annotations[TOPOLOGY_KEY]))
    store = Store()
    store.create("nodes", make_node("gpu-nic", annotations=annotations))
    store.create("nodes", make_node("gpu-old", annotations=encode_annotations(seed_layout("GPU-o"), frozenset(), 1, NOW)))
    async with running_kube_double(store) as double:
        code, out, err = await status(double, tmp_path, "-o", "wide")
        _, as_json, _ = await status(double, tmp_path, "-o", "json")
    assert (code, err) == (0, "")
    lines = {line.split()[0]: line for line in out.splitlines() if line.startswith("gpu-")}
    assert "NUMA0 mlx5_bond_0  NUMA1 -" in lines["gpu-nic"]
    nodes = {n["name"]: n for n in json.loads(as_json)["nodes"]}
    assert [n["nics"] for n in nodes["gpu-nic"]["numa"]] == [["mlx5_bond_0"], []]
    assert [n["nics"] for n in nodes["gpu-old"]["numa"]] == [None, None]


# ---- pending claim pods: their GPUs and placement from their claims


def pending_claim_pod(name: str, claim: str, annotations: dict | None = None) -> dict:
    from tests.kube_double import make_pod

    pod = make_pod(name, NS, gpus=0)
    pod["metadata"]["annotations"] = annotations or {}
    pod["spec"]["resourceClaims"] = [{"name": "gpus", "resourceClaimName": claim}]
    pod["status"] = {"phase": "Pending"}
    return pod


def admitted_claim(name: str, intent, count: int = 2, keep_annotation: bool = True) -> dict:
    """A claim as the claim webhook stores it in a namespace defaulting to ``intent``, not allocated."""
    import jsonpatch

    from gpupair.decide.pod.intent import PLACEMENT_KEY, Intent
    from gpupair.webhook.claims import ClaimOptions, plan_claim
    from tests.webhook.claim_shapes import plain_claim

    claim = plain_claim(count=count)
    claim["metadata"].update(name=name, namespace=NS)
    claim = jsonpatch.apply_patch(claim, plan_claim(claim, "ResourceClaim", ClaimOptions(), Intent.REQUIRED,
                                                    intent).ops)
    if not keep_annotation:
        claim["metadata"]["annotations"].pop(PLACEMENT_KEY)
    return claim


def test_pending_claim_pods_count_their_claims_gpus_and_ask_their_claims_placement():
    from gpupair.decide.pod.intent import PLACEMENT_KEY, Intent

    claims = [admitted_claim("pref-gpus", Intent.PREFERRED), admitted_claim("none-gpus", Intent.NONE),
              admitted_claim("shape-gpus", Intent.PREFERRED, count=4, keep_annotation=False),
              admitted_claim("plain-gpus", Intent.NONE, keep_annotation=False),
              admitted_claim("one-gpus", Intent.REQUIRED, count=1)]
    pods = [pending_claim_pod("pref", "pref-gpus", {PLACEMENT_KEY: "required"}),  # the claim's wins
            pending_claim_pod("none", "none-gpus"), pending_claim_pod("shape", "shape-gpus"),
            pending_claim_pod("plain", "plain-gpus", {PLACEMENT_KEY: "none"}), pending_claim_pod("plain-2", "plain-gpus"),
            pending_claim_pod("one", "one-gpus"), pending_claim_pod("unseen", "not-listed")]
    listing = Listing(nodes=[], pods=pods, events=[], claims=claims, dra_driver="gpu.nvidia.com")
    pending = {p.name: (p.gpus, p.placement) for p in build(listing, NOW).summary.pending}
    assert pending == {"pref": (2, "preferred"), "none": (2, "none"), "shape": (4, "preferred"),
                       "plain": (2, "none"), "plain-2": (2, None), "one": (1, "required")}
    other = Options(gpu_classes=frozenset({"gpu.example.com"}))  # not GPUs to this status: not GPU pods
    assert build(listing, NOW, other).summary.pending == []


async def test_status_shows_a_pending_claim_pods_placement(tmp_path):
    from gpupair.decide.pod.intent import Intent

    store = Store()
    store.create("resourceclaims", admitted_claim("pref-gpus", Intent.PREFERRED), NS)
    store.create("pods", pending_claim_pod("pref", "pref-gpus"), NS)
    async with running_kube_double(store) as double:
        code, out, err = await status(double, tmp_path)
        _, listed, _ = await status(double, tmp_path, "-o", "json")
    assert (code, err) == (0, "")
    assert f"{NS}/pref  2     preferred  -" in out
    (pod,) = json.loads(listed)["summary"]["pending"]
    assert (pod["name"], pod["gpus"], pod["placement"]) == ("pref", 2, "preferred")


def test_a_multi_gpu_pod_created_without_the_verifier_is_not_verified():
    """The webhook is failurePolicy Ignore: a pod created while it was down has no sidecar, so no
    verdict will ever come, and status must not let it pass for verified."""
    store = Store()
    bind(store, "with-sidecar", "n", 2, bound_ago=5)
    bind(store, "webhook-down", "n", 2, bound_ago=5, verifier=False)
    bind(store, "one-gpu", "n", 1, bound_ago=5, verifier=False)  # no verdict for one GPU anyway
    bind(store, "verdict-written", "n", 2, bound_ago=5, verifier=False)
    store.patch("pods", "verdict-written", {"metadata": {"annotations": {"gpupair.io/verdict": "PASS"}}}, NS)
    claim_pod = make_pod("dra-pod", NS, gpus=0, node_name="n")  # its verdict comes from its claims
    claim_pod["spec"]["resourceClaims"] = [{"name": "gpus", "resourceClaimTemplateName": "pair"}]
    store.create("pods", claim_pod)
    view = build(Listing(nodes=[node_with(range(8), 10)], pods=store.items("pods"), events=[]), NOW)
    assert [(p.name, p.node, p.gpus, p.verdict) for p in view.summary.notVerified] == [
        ("webhook-down", "n", 2, "not verified")]
    assert "not verified: 1 multi-GPU pods" in render_text(view)


def test_a_time_sliced_node_shows_each_gpus_shares():
    """gpupair.io/shares: a GPU with some replicas taken is shared, with its count; one with all
    taken is taken; the text map marks the shared ones."""
    annotations_ = report("n", {2, 3, 4, 5, 6, 7}, age=10)
    fingerprint = codec.fingerprint(annotations_[codec.TOPOLOGY_KEY])
    shares = GpuShares((4,) * 8, (1, 4, 0, 0, 0, 0, 0, 0))
    annotations_[SHARES_KEY] = encode_shares(shares, fingerprint, 7)
    node = make_node("n", annotations=annotations_)
    view = build(Listing(nodes=[node], pods=[], events=[]), NOW, Options(stale_after=300))
    [numa0, _] = view.nodes[0].numa
    assert [(d.state, d.shares) for d in numa0.devices] == [("shared", "1/4"), ("taken", "4/4"), ("free", "0/4"),
                                                             ("free", "0/4")]
    assert "NUMA0 ◧■□□" in render_text(view)


def test_a_mig_node_shows_each_gpus_slices_taken():
    """MIG devices counted in compute slices: GPU0 with 3 of its 7 taken is shared; GPU1, carved
    3g+3g, shows the slice no device has; a GPU with all its slices taken is taken."""
    annotations_ = report("n", {3, 4, 5, 6, 7}, age=10)
    fingerprint = codec.fingerprint(annotations_[codec.TOPOLOGY_KEY])
    shares = GpuShares((7, 6, 7) + (1,) * 5, (3, 3, 7) + (0,) * 5, whole=(0, 7) + (0,) * 6)
    annotations_[SHARES_KEY] = encode_shares(shares, fingerprint, 7)
    node = make_node("n", annotations=annotations_)
    view = build(Listing(nodes=[node], pods=[], events=[]), NOW, Options(stale_after=300))
    [numa0, _] = view.nodes[0].numa
    assert [(d.state, d.shares) for d in numa0.devices] == [("shared", "3/7"), ("shared", "3/6 of 7"),
                                                             ("taken", "7/7"), ("free", None)]
    assert "NUMA0 ◧◧■□" in render_text(view)


def test_a_pending_pod_asking_a_share_by_dra_capacity_is_shown_as_its_share_not_a_gpu():
    """KEP-5075: a claim asking capacity.requests asks part of a GPU. Pending, its share is sized
    as the allocator would on the cluster's most common GPU shared by capacity (6Gi of 32Gi:
    188/1000), shown as the GPU's own shares are; one that GPU cannot serve shows ?/1000; a claim
    of whole GPUs stays a count. With no GPU shared by capacity a share takes a whole GPU."""
    from gpupair.decide.pod.intent import Intent
    from tests.dra_support import node_slice, share_claim, shared_slice

    def asking(name: str, memory: str) -> dict:
        claim = share_claim(NS, name, "dra-node-1", {5: memory})
        del claim["status"]
        return claim

    claims = [share_claim(NS, "held", "dra-node-1", {2: "8Gi"}, pod="running"), asking("six", "6Gi"),
              asking("huge", "40Gi"), admitted_claim("pair", Intent.REQUIRED)]
    pods = [pending_claim_pod("share", "six"), pending_claim_pod("too-big", "huge"), pending_claim_pod("two", "pair")]
    node = make_node("dra-node-1", gpus=0)

    def listed(published: dict) -> StatusView:
        return build(Listing(nodes=[node], pods=pods, events=[], slices=[published], claims=claims,
                             dra_driver="gpu.nvidia.com"), NOW)

    view = listed(shared_slice("dra-node-1"))
    assert "250/1000" in [d.shares for numa in view.nodes[0].numa for d in numa.devices]
    assert {p.name: (p.gpus, p.shares) for p in view.summary.pending} == {
        "share": (0, "188/1000"), "too-big": (0, "?/1000"), "two": (2, None)}
    text = render_text(view)
    assert f"{NS}/share    188/1000  default" in text and f"{NS}/two      2         required" in text
    unshared = listed(node_slice("dra-node-1"))
    assert {p.name: (p.gpus, p.shares) for p in unshared.summary.pending} == {
        "share": (1, None), "too-big": (1, None), "two": (2, None)}
