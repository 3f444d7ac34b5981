"""The pure conversion of `gpupair snapshot` (snapshot/convert.py): API objects as dicts in,
openb rows and findings out; the rows written and read back by the trace reader unchanged."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

from gpupair.decide.score.gpu_products import PRODUCT_LABEL
from gpupair.simulator.trace.files import TraceNode, TracePod, read_nodes, read_pods, write_nodes, write_pods
from gpupair.snapshot.convert import REPLICAS_LABEL, SnapshotOptions, convert, summary
from gpupair.topology import report as report_codec
from gpupair.topology.report import PRODUCT_KEY, encode_annotations
from gpupair.topology.shares import SHARES_KEY, GpuShares, encode_shares
from tests.layouts import seed_layout

A100, T4 = "NVIDIA-A100-SXM4-80GB", "Tesla-T4"
NOW = datetime(2026, 12, 1, tzinfo=timezone.utc)


def node(name: str, *, cpu: str = "32", memory: str = "256Gi", gpus: int | None = None, labels=None,
         report: str | None = None, extra: dict[str, str] | None = None) -> dict[str, Any]:
    allocatable = {"cpu": cpu, "memory": memory, "pods": "110", **(extra or {})}
    if gpus is not None:
        allocatable["nvidia.com/gpu"] = str(gpus)
    notes: dict[str, str] = {}
    if report is not None:
        notes = encode_annotations(seed_layout(name), set(range(8)), 1, NOW)
        if report:
            notes[PRODUCT_KEY] = report
    return {"metadata": {"name": name, "labels": dict(labels or {}), "annotations": notes},
            "status": {"allocatable": allocatable}}


def pod(name: str, *, created: int, node_name: str = "", requests: dict[str, str] | None = None,
        limits: dict[str, str] | None = None, namespace: str = "ns", phase: str = "Pending", **spec: Any) -> dict[str, Any]:
    resources: dict[str, Any] = {}
    if requests:
        resources["requests"] = requests
    if limits:
        resources["limits"] = limits
    body: dict[str, Any] = {"containers": [{"name": "main", "resources": resources}], **spec}
    if node_name:
        body["nodeName"] = node_name
    return {"metadata": {"name": name, "namespace": namespace, "uid": f"uid-{name}",
                         "creationTimestamp": f"2026-12-01T00:00:{created:02d}Z"},
            "spec": body, "status": {"phase": phase}}


def pinned(obj: dict[str, Any], *products: str) -> dict[str, Any]:
    if len(products) == 1:
        obj["spec"]["nodeSelector"] = {PRODUCT_LABEL: products[0]}
    else:
        obj["spec"]["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchExpressions": [
                {"key": PRODUCT_LABEL, "operator": "In", "values": list(products)}]}]}}}
    return obj


def test_nodes_take_gpus_from_allocatable_then_the_report_and_the_product_from_the_report_then_the_label():
    snap = convert([
        node("a", gpus=8, report="NVIDIA A100-SXM4-80GB", labels={PRODUCT_LABEL: "something-else"}),
        node("b", gpus=4, labels={PRODUCT_LABEL: T4}),  # no report: allocatable and the label
        node("c", report="NVIDIA A100-SXM4-80GB"),  # no nvidia.com/gpu: the report's 8
        node("cpu", cpu="64", memory="128Gi"),
    ], [])
    assert snap.nodes == [
        TraceNode("a", 32000, 262144, 8, A100),
        TraceNode("b", 32000, 262144, 4, T4),
        TraceNode("c", 32000, 262144, 8, A100),
        TraceNode("cpu", 64000, 131072, 0, ""),
    ]
    assert {(f.kind, f.subject) for f in snap.findings} == {("node-no-report", "b"), ("node-no-gpus", "cpu")}


def test_pods_in_creation_order_with_effective_requests_gpus_and_accepted_products():
    nodes = [node("a", gpus=8, labels={PRODUCT_LABEL: A100}), node("b", gpus=4, labels={PRODUCT_LABEL: T4})]
    init = pod("init", created=5, requests={"cpu": "500m", "memory": "1Gi"})
    init["spec"]["initContainers"] = [{"name": "setup", "resources": {"requests": {"cpu": "4", "memory": "100M"}}}]
    overhead = pod("overhead", created=6, requests={"cpu": "1", "memory": "1Gi"}, overhead={"cpu": "250m"})
    snap = convert(nodes, [
        pinned(pod("pinned-one", created=3, node_name="b", requests={"cpu": "2"}, limits={"nvidia.com/gpu": "1"}), T4),
        pod("whole", created=1, node_name="a", requests={"cpu": "8", "memory": "64Gi"}, limits={"nvidia.com/gpu": "2"}),
        pinned(pod("either", created=2, limits={"nvidia.com/gpu": "4"}), T4, A100, "H100-not-here"),
        init, overhead,
        pod("done", created=0, phase="Succeeded", limits={"nvidia.com/gpu": "8"}),
        pinned(pod("cpu-pinned", created=7, requests={"cpu": "1"}), T4),  # a CPU pod's products are not written
    ])
    assert snap.pods == [
        TracePod("ns/whole", 8000, 65536, 2, 1000),
        TracePod("ns/either", 0, 0, 4, 1000, ("H100-not-here", A100, T4)),
        TracePod("ns/pinned-one", 2000, 0, 1, 1000, (T4,)),
        TracePod("ns/init", 4000, 1024, 0, 0),  # the init container's CPU, the app's memory (100M: 96 MiB)
        TracePod("ns/overhead", 1250, 1024, 0, 0),
        TracePod("ns/cpu-pinned", 1000, 0, 0, 0),
    ]
    assert [(f.kind, f.subject) for f in snap.findings if f.kind.startswith("pod")] == [("pod-no-requests", "ns/either")]


def test_a_share_is_a_thousand_over_the_replicas_of_its_node_or_of_the_cluster():
    shared = {"nvidia.com/gpu.shared": "32"}
    nodes = [node("ts4", report="", labels={REPLICAS_LABEL: "4", PRODUCT_LABEL: "Tesla-T4-SHARED"}, extra=shared),
             node("ts3", report="", extra={"nvidia.com/gpu.shared": "24"})]  # 8 GPUs reported: 3 a GPU
    snap = convert(nodes, [
        pod("on-4", created=1, node_name="ts4", requests={"cpu": "1"}, limits={"nvidia.com/gpu.shared": "1"}),
        pod("on-3", created=2, node_name="ts3", requests={"cpu": "1"}, limits={"nvidia.com/gpu.shared": "1"}),
        pod("two-on-4", created=3, node_name="ts4", requests={"cpu": "1"}, limits={"nvidia.com/gpu.shared": "2"}),
        pod("pending", created=4, requests={"cpu": "1"}, limits={"nvidia.com/gpu.shared": "1"}),
        pod("many", created=5, requests={"cpu": "1"}, limits={"nvidia.com/gpu.shared": "9"}),
    ])
    assert [n.gpus for n in snap.nodes] == [8, 8]
    assert [(p.name, p.gpus, p.milli_per_gpu) for p in snap.pods] == [
        ("ns/on-4", 1, 250), ("ns/on-3", 1, 333), ("ns/two-on-4", 1, 500),
        ("ns/pending", 1, 333),  # 3 and 4 once each: the smaller share
        ("ns/many", 1, 1000),  # at most one GPU
    ]


def test_a_share_pod_with_no_sharing_node_is_left_out_with_a_line():
    snap = convert([node("a", gpus=8)], [pod("s", created=1, requests={"cpu": "1"},
                                              limits={"nvidia.com/gpu.shared": "1"})])
    assert snap.pods == []
    assert [(f.kind, f.subject) for f in snap.findings] == [
        ("node-no-report", "a"), ("node-no-product", "a"), ("pod-share-unknown", "ns/s")]


def test_replicas_under_the_gpu_resource_are_divided_back_to_gpus():
    snap = convert([node("r", gpus=32, labels={REPLICAS_LABEL: "4"}, report="")], [])
    assert snap.nodes[0].gpus == 8
    assert [f.kind for f in snap.findings] == ["node-replicated", "node-no-product"]


def test_without_gfds_label_the_replicas_are_those_the_reporter_counted():
    """gpupair.io/shares says four replicas a GPU: under nvidia.com/gpu (no renameByDefault) the
    allocatable count is divided back to GPUs; renamed, a share pod takes a quarter GPU."""
    def counted(name: str, replicated: bool, **kwargs) -> dict[str, Any]:
        made = node(name, report="", **kwargs)
        notes = made["metadata"]["annotations"]
        fingerprint = report_codec.fingerprint(notes[report_codec.TOPOLOGY_KEY])
        notes[SHARES_KEY] = encode_shares(GpuShares((4,) * 8, (0,) * 8, replicated), fingerprint, 1)
        return made

    snap = convert([counted("plain", True, gpus=32), counted("renamed", False, extra={"nvidia.com/gpu.shared": "32"})],
                   [pod("s", created=1, node_name="renamed", limits={"nvidia.com/gpu.shared": "1"})])
    assert [n.gpus for n in snap.nodes] == [8, 8]
    assert [(p.gpus, p.milli_per_gpu) for p in snap.pods] == [(1, 250)]
    assert [f.kind for f in snap.findings if f.subject == "plain"] == ["node-replicated", "node-no-product"]


def test_daemonset_and_static_pods_are_capacity_not_workload():
    daemon = pod("agent", created=1, node_name="a", requests={"cpu": "2", "memory": "4Gi"})
    daemon["metadata"]["ownerReferences"] = [{"kind": "DaemonSet", "name": "agent", "apiVersion": "apps/v1", "uid": "u"}]
    static = pod("etcd", created=1, node_name="a", requests={"cpu": "1"})
    static["metadata"]["annotations"] = {"kubernetes.io/config.mirror": "x"}
    snap = convert([node("a", gpus=8, labels={PRODUCT_LABEL: A100})], [daemon, static])
    assert snap.nodes == [TraceNode("a", 29000, 258048, 8, A100)]
    assert snap.pods == [] and snap.daemon_pods == 2


def test_bad_objects_give_a_line_each_and_never_stop_the_conversion():
    nodes = [node("bad-cpu", cpu="lots"), node("a", gpus=20, labels={PRODUCT_LABEL: A100}), {"metadata": "nope"},
             node("nameless-product", gpus=2)]
    bad_gpus = pod("bad-gpus", created=1, limits={"nvidia.com/gpu": "1.5"})
    bad_spec = pod("bad-spec", created=2)
    bad_spec["spec"]["containers"] = "not a list"
    bad_affinity = pod("bad-affinity", created=3, limits={"nvidia.com/gpu": "1"}, affinity="nope")
    snap = convert(nodes, [bad_gpus, bad_spec, bad_affinity, "not a pod", pinned(
        pod("nowhere", created=4, requests={"cpu": "1"}, limits={"nvidia.com/gpu": "1"}), "H100")])
    assert [n.name for n in snap.nodes] == ["a", "nameless-product"]
    assert snap.nodes[0].gpus == 16
    assert [p.name for p in snap.pods] == ["ns/nowhere"]
    counts = snap.counts()
    assert counts == {"node-unreadable": 2, "node-too-many-gpus": 1, "node-no-report": 2,
                      "node-no-product": 1, "pod-unreadable": 3, "pod-no-product": 1}
    text = "\n".join(summary(snap))
    assert "3 x pod left out: spec unreadable" in text and "2 x node left out" in text


def test_what_is_written_reads_back_unchanged(tmp_path):
    nodes = [TraceNode("a", 32000, 262144, 8, A100), TraceNode("cpu", 64000, 1024, 0, "")]
    pods = [TracePod("ns/p", 1000, 512, 2, 1000, (A100, T4)), TracePod("ns/s", 0, 0, 1, 250),
            TracePod("ns/c", 500, 0, 0, 0)]
    write_nodes(tmp_path / "n.csv", nodes)
    write_pods(tmp_path / "p.csv", pods)
    assert read_nodes(tmp_path / "n.csv") == nodes
    assert read_pods(tmp_path / "p.csv") == pods


def test_the_options_name_other_resources():
    nodes = [node("m", extra={"nvidia.com/mig-1g.10gb": "7"}, labels={PRODUCT_LABEL: A100})]
    snap = convert(nodes, [pod("p", created=1, limits={"nvidia.com/mig-1g.10gb": "1"})],
                   options=SnapshotOptions(resource="nvidia.com/mig-1g.10gb"))
    assert (snap.nodes[0].gpus, snap.pods[0].gpus) == (7, 1)


def test_pod_level_resources_replace_the_containers_sum_where_set():
    both = pod("pod-level", created=1, requests={"cpu": "1", "memory": "1Gi"})
    both["spec"]["resources"] = {"limits": {"cpu": "3"}}  # a pod-level limit alone is its request; memory not set
    snap = convert([], [both])
    assert snap.pods == [TracePod("ns/pod-level", 3000, 1024, 0, 0)]


def test_dra_nodes_and_claims_give_gpus_where_no_resource_does():
    from tests.dra_support import DRIVER, allocated_claim, node_slice

    claimed = pod("claimed", created=1, node_name="d", requests={"cpu": "1"})
    claimed["spec"]["resourceClaims"] = [{"name": "gpus", "resourceClaimName": "two"}]
    published = node_slice("d")
    for device in published["spec"]["devices"]:
        device["attributes"]["productName"] = {"string": "NVIDIA H200"}
    claim = allocated_claim("ns", "two", "d", [0, 1], pod="claimed", pod_uid="uid-claimed")
    snap = convert([node("d")], [claimed], [published], [claim], SnapshotOptions(dra_driver=DRIVER))
    assert snap.nodes == [TraceNode("d", 32000, 262144, 8, "NVIDIA-H200")]  # no nvidia.com/gpu: the slice's
    assert snap.pods == [TracePod("ns/claimed", 1000, 0, 2, 1000)]


def test_a_pod_asking_a_mig_profile_takes_its_compute_slices_of_one_gpu():
    """mig.strategy mixed: nvidia.com/mig-3g.40gb is 3 of the 7 slices its node's reporter counted
    (3 x 1000 / 7 milli), 1g of an A30-like GPU's 4 is 250; a pending pod, or one on a node
    without counted shares, takes the cluster's most common count."""
    def carved(name: str, of: tuple[int, ...], taken: tuple[int, ...]) -> dict[str, Any]:
        made = node(name, labels={PRODUCT_LABEL: A100})
        notes = encode_annotations(seed_layout(name), {i for i in range(8) if not taken[i]}, 1, NOW)
        fingerprint = report_codec.fingerprint(notes[report_codec.TOPOLOGY_KEY])
        notes[SHARES_KEY] = encode_shares(GpuShares(of, taken, whole=tuple(7 if o == 6 else 0 for o in of)),
                                          fingerprint, 1)
        made["metadata"]["annotations"] = notes
        return made

    nodes = [carved("a100", (7, 6) + (1,) * 6, (3, 3) + (0,) * 6), carved("a30", (4, 4) + (1,) * 6, (1, 0) + (0,) * 6),
             carved("other", (7,) + (1,) * 7, (0,) * 8)]
    pods = [pod("big", created=1, node_name="a100", limits={"nvidia.com/mig-3g.40gb": "1"}),
            pod("small", created=2, node_name="a30", limits={"nvidia.com/mig-1g.6gb": "1"}),
            pod("split", created=3, node_name="a100", limits={"nvidia.com/mig-1c.3g.40gb": "2"}),
            pod("pending", created=4, limits={"nvidia.com/mig-4g.40gb": "1"}),
            pod("whole", created=5, node_name="a100", limits={"nvidia.com/gpu": "1"})]
    snap = convert(nodes, pods)
    assert [(p.name, p.gpus, p.milli_per_gpu) for p in snap.pods] == [
        ("ns/big", 1, 428), ("ns/small", 1, 250), ("ns/split", 1, 285), ("ns/pending", 1, 571), ("ns/whole", 1, 1000)]
    assert [n.gpus for n in snap.nodes] == [8, 8, 8]


def test_a_pod_sharing_a_gpu_by_dra_capacity_is_written_at_the_part_its_claims_consume():
    """KEP-5075: a bound pod at the thousandths its claims' consumedCapacity takes of its GPU's
    memory (8Gi of 32Gi: 250; two claims on one GPU summed); a pending pod's share sized on the
    cluster's most common shared GPU as the allocator rounds it (6Gi: 188); an ask no such GPU can
    serve is left out with a line; a claim asking whole GPUs stays whole."""
    from tests.dra_support import DRIVER, allocated_claim, share_claim, shared_slice

    def claimed(name: str, claims: list[str], created: int, node_name: str = "") -> dict[str, Any]:
        made = pod(name, created=created, node_name=node_name, requests={"cpu": "1"})
        made["spec"]["resourceClaims"] = [{"name": f"c{i}", "resourceClaimName": c} for i, c in enumerate(claims)]
        return made

    def pending(claim: dict[str, Any]) -> dict[str, Any]:
        del claim["status"]
        return claim

    claims = [share_claim("ns", "quarter", "d", {2: "8Gi"}, pod="small", pod_uid="uid-small"),
              share_claim("ns", "four", "d", {3: "4Gi"}, pod="mixed", pod_uid="uid-mixed"),
              share_claim("ns", "twelve", "d", {3: "12Gi"}, pod="mixed", pod_uid="uid-mixed"),
              allocated_claim("ns", "pair", "d", [0, 1], pod="whole", pod_uid="uid-whole"),
              pending(share_claim("ns", "asked", "d", {5: "6Gi"})),
              pending(share_claim("ns", "too-big", "d", {5: "40Gi"}))]
    pods = [claimed("small", ["quarter"], 1, "d"), claimed("mixed", ["four", "twelve"], 2, "d"),
            claimed("whole", ["pair"], 3, "d"), claimed("waiting", ["asked"], 4), claimed("huge", ["too-big"], 5)]
    snap = convert([node("d")], pods, [shared_slice("d")], claims, SnapshotOptions(dra_driver=DRIVER))
    assert [(p.name, p.gpus, p.milli_per_gpu) for p in snap.pods] == [
        ("ns/small", 1, 250), ("ns/mixed", 1, 500), ("ns/whole", 2, 1000), ("ns/waiting", 1, 188)]
    assert [(f.kind, f.subject) for f in snap.findings if f.kind.startswith("pod-")] == [
        ("pod-share-unservable", "ns/huge")]
    assert snap.nodes[0].gpus == 8
    assert "pods: 4 (1 whole-GPU, 3 share, 0 CPU-only)" in summary(snap)[1]


def test_a_capacity_share_with_no_gpu_shared_by_capacity_is_a_whole_gpu():
    """Where no GPU of the cluster is shared by capacity, the allocator takes a whole device for
    each share a pending claim asks."""
    from tests.dra_support import DRIVER, node_slice, share_claim

    claim = share_claim("ns", "asked", "d", {5: "6Gi"})
    del claim["status"]
    waiting = pod("waiting", created=1, requests={"cpu": "1"})
    waiting["spec"]["resourceClaims"] = [{"name": "c", "resourceClaimName": "asked"}]
    snap = convert([node("d")], [waiting], [node_slice("d")], [claim], SnapshotOptions(dra_driver=DRIVER))
    assert [(p.name, p.gpus, p.milli_per_gpu) for p in snap.pods] == [("ns/waiting", 1, 1000)]


def test_a_gpu_shared_by_dra_capacity_does_not_count_as_mig_slices():
    """A DRA GPU shared by capacity counts thousandths (of = 1000), not MIG slices: a pending MIG
    pod is still sized on the slices the reporters counted (4g of 7: 571), however many such
    DRA nodes there are."""
    from tests.dra_support import DRIVER, share_claim, shared_slice

    def carved(name: str) -> dict[str, Any]:
        made = node(name, labels={PRODUCT_LABEL: A100})
        notes = encode_annotations(seed_layout(name), set(range(1, 8)), 1, NOW)
        fingerprint = report_codec.fingerprint(notes[report_codec.TOPOLOGY_KEY])
        notes[SHARES_KEY] = encode_shares(GpuShares((7,) + (1,) * 7, (3,) + (0,) * 7), fingerprint, 1)
        made["metadata"]["annotations"] = notes
        return made

    dra_nodes = [f"d{i}" for i in range(3)]
    claims = [share_claim("ns", f"part-{n}", n, {2: "8Gi"}, pod=f"small-{n}", pod_uid=f"uid-{n}") for n in dra_nodes]
    pods = []
    for n in dra_nodes:
        made = pod(f"small-{n}", created=1, node_name=n, requests={"cpu": "1"})
        made["spec"]["resourceClaims"] = [{"name": "c", "resourceClaimName": f"part-{n}"}]
        pods.append(made)
    pods.append(pod("pending", created=2, limits={"nvidia.com/mig-4g.40gb": "1"}))
    snap = convert([carved("a100"), *(node(n) for n in dra_nodes)], pods, [shared_slice(n) for n in dra_nodes],
                   claims, SnapshotOptions(dra_driver=DRIVER))
    assert [(p.name, p.gpus, p.milli_per_gpu) for p in snap.pods if p.name == "ns/pending"] == [("ns/pending", 1, 571)]
