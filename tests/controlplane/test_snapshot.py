"""`gpupair snapshot` against a real kube-apiserver v1.36.2, then its files replayed by `gpupair
simulate --scenario trace`, both run as a user runs them (subprocesses, the admin kubeconfig).

The cluster, written straight into the API (snapshot only reads, so no kubelet or scheduler
runs): an A100 node with a gpupair report (product from the report, not its stale label), a T4
node with GFD's label and no report, a time-sliced node (nvidia.com/gpu.shared, 4 replicas a GPU,
its 8 GPUs from its report) and a CPU node. Pods: whole-GPU pods bound and pending, one pinned by
nodeSelector and one by required node affinity, share pods bound and pending, CPU pods (one with
no requests at all), a DaemonSet pod (capacity of its node, not workload) and a Succeeded pod
(left out). ~5 s.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest

from gpupair.command import flags
from gpupair.decide.score.gpu_products import PRODUCT_LABEL
from gpupair.simulator.trace.files import TraceNode, TracePod, read_nodes, read_pods
from gpupair.snapshot.convert import REPLICAS_LABEL
from gpupair.topology.report import PRODUCT_KEY, encode_annotations
from tests.controlplane.api import Api
from tests.layouts import seed_layout

REPO = Path(__file__).resolve().parents[2]
A100, T4 = "NVIDIA-A100-SXM4-80GB", "Tesla-T4"


def add_node(api: Api, name: str, allocatable: dict[str, str], labels: dict[str, str] | None = None,
             annotations: dict[str, str] | None = None) -> None:
    obj = {"apiVersion": "v1", "kind": "Node",
           "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, **(labels or {})},
                        "annotations": annotations or {}}}
    api.create(obj)
    api.patch(obj, {"status": {"capacity": allocatable, "allocatable": allocatable}}, sub="status")


def report(name: str, product: str = "") -> dict[str, str]:
    notes = encode_annotations(seed_layout(name), set(range(8)), 1, datetime.now(timezone.utc))
    if product:
        notes[PRODUCT_KEY] = product
    return notes


def pod(namespace: str, name: str, *, node: str = "", limits: dict[str, str] | None = None,
        requests: dict[str, str] | None = None, **spec: Any) -> dict[str, Any]:
    resources = {k: v for k, v in (("limits", limits), ("requests", requests)) if v}
    body = {"containers": [{"name": "main", "image": "registry.k8s.io/pause:3.10", "resources": resources}],
            "terminationGracePeriodSeconds": 0, **spec}
    if node:
        body["nodeName"] = node
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": namespace}, "spec": body}


def gpupair(*args: str) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(flags.ENV_PREFIX) and k != "KUBECONFIG"}
    return subprocess.run([sys.executable, "-m", "gpupair.command.cli", *args], cwd=REPO, env=clean,
                          capture_output=True, text=True, timeout=300)


@pytest.fixture
def nodes(api: Api):
    made: list[str] = []
    yield made
    for name in made:
        api.delete(f"/api/v1/nodes/{name}")


def test_a_snapshot_of_the_cluster_replays_in_simulate(api, namespace, nodes, control_plane, tmp_path):
    ns = namespace
    nodes += ["snap-a100", "snap-t4", "snap-ts", "snap-cpu"]
    add_node(api, "snap-a100", {"cpu": "32", "memory": "256Gi", "pods": "110", "nvidia.com/gpu": "8"},
             {PRODUCT_LABEL: "NVIDIA-A100-PCIE-40GB"}, report("snap-a100", "NVIDIA A100-SXM4-80GB"))
    add_node(api, "snap-t4", {"cpu": "16", "memory": "64Gi", "pods": "110", "nvidia.com/gpu": "4"}, {PRODUCT_LABEL: T4})
    add_node(api, "snap-ts", {"cpu": "32", "memory": "128Gi", "pods": "110", "nvidia.com/gpu.shared": "32"},
             {PRODUCT_LABEL: "Tesla-T4-SHARED", REPLICAS_LABEL: "4"}, report("snap-ts"))
    add_node(api, "snap-cpu", {"cpu": "64", "memory": "128Gi", "pods": "110"})

    api.create(pod(ns, "z-first", requests={"cpu": "1"}))
    time.sleep(1.1)  # creationTimestamp has whole seconds: the next pods are created later
    api.create(pod(ns, "whole", node="snap-a100", limits={"nvidia.com/gpu": "2"},
                   requests={"cpu": "8", "memory": "32Gi"}))
    api.create(pod(ns, "by-selector", limits={"nvidia.com/gpu": "1"}, requests={"cpu": "2"},
                   nodeSelector={PRODUCT_LABEL: T4}))
    api.create(pod(ns, "by-affinity", limits={"nvidia.com/gpu": "4"}, requests={"cpu": "4", "memory": "16Gi"},
                   affinity={"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                       {"matchExpressions": [{"key": PRODUCT_LABEL, "operator": "In", "values": [A100, T4]}]}]}}}))
    api.create(pod(ns, "share", node="snap-ts", limits={"nvidia.com/gpu.shared": "1"}, requests={"cpu": "1"}))
    api.create(pod(ns, "share-pending", limits={"nvidia.com/gpu.shared": "2"}, requests={"cpu": "1"}))
    api.create(pod(ns, "cpu", node="snap-cpu", requests={"cpu": "4", "memory": "8Gi"}))
    api.create(pod(ns, "bare"))
    daemon = pod(ns, "agent", node="snap-a100", requests={"cpu": "2", "memory": "4Gi"})
    daemon["metadata"]["ownerReferences"] = [{"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "agent",
                                              "uid": "00000000-0000-0000-0000-000000000001", "controller": True}]
    api.create(daemon)
    done = api.create(pod(ns, "done", node="snap-a100", limits={"nvidia.com/gpu": "8"}))
    api.patch(done, {"status": {"phase": "Succeeded"}}, sub="status")

    out = tmp_path / "fleet"
    snap = gpupair("snapshot", "--kubeconfig", str(control_plane.admin_kubeconfig), "--output-dir", str(out))
    assert snap.returncode == 0, snap.stderr
    assert "Traceback" not in snap.stderr

    mine = {f"{ns}/{name}" for name in ("z-first", "whole", "by-selector", "by-affinity", "share", "share-pending",
                                        "cpu", "bare", "agent", "done")}
    written_nodes = [n for n in read_nodes(out / "openb_node_list_gpu_node.csv") if n.name in nodes]
    assert written_nodes == [
        TraceNode("snap-a100", 30000, 258048, 8, A100),  # less the DaemonSet pod; the report's product
        TraceNode("snap-cpu", 64000, 131072, 0, ""),
        TraceNode("snap-t4", 16000, 65536, 4, T4),
        TraceNode("snap-ts", 32000, 131072, 8, T4),  # GPUs from the report, the -SHARED suffix dropped
    ]
    written_pods = [p for p in read_pods(out / "openb_pod_list_snapshot.csv") if p.name in mine]
    first, *rest = [
        TracePod(f"{ns}/z-first", 1000, 0, 0, 0),
        TracePod(f"{ns}/whole", 8000, 32768, 2, 1000),
        TracePod(f"{ns}/by-selector", 2000, 0, 1, 1000, (T4,)),
        TracePod(f"{ns}/by-affinity", 4000, 16384, 4, 1000, (A100, T4)),
        TracePod(f"{ns}/share", 1000, 0, 1, 250),  # one of 4 replicas
        TracePod(f"{ns}/share-pending", 1000, 0, 1, 500),  # 2 replicas, the cluster's 4 a GPU
        TracePod(f"{ns}/cpu", 4000, 8192, 0, 0),
        TracePod(f"{ns}/bare", 0, 0, 0, 0),
    ]
    # in creation order; pods created in the same second (creationTimestamp's grain) by name. On a
    # loaded machine the seven after the pause may span two seconds: the order is read back.
    created = {f"{ns}/{item['metadata']['name']}": item["metadata"]["creationTimestamp"]
               for item in api.list("v1", "Pod", ns)}
    assert written_pods == [first, *sorted(rest, key=lambda p: (created[p.name], p.name))]
    assert created[first.name] < min(created[p.name] for p in rest)
    # one line each on stderr, and a count in the summary on stdout
    assert f"{ns}/bare: requests no CPU or memory" in snap.stderr
    assert "snap-t4: " in snap.stderr and "snap-cpu: no GPUs" in snap.stderr
    assert "x pod without CPU or memory requests" in snap.stdout
    assert "x GPU node without a gpupair report" in snap.stdout and "x node without GPUs" in snap.stdout
    assert "1 DaemonSet or static pod(s) left out" in snap.stdout

    replay = gpupair("simulate", "--scenario", "trace", "--trace-nodes", str(out / "openb_node_list_gpu_node.csv"),
                     "--trace-pods", str(out / "openb_pod_list_snapshot.csv"), "--seeds", "42",
                     "--policies", "kube-default", "--gpupair-scores", "shipped", "--workers", "1", "--output", "json")
    assert replay.returncode == 0, replay.stderr
    document = json.loads(replay.stdout)
    all_nodes = read_nodes(out / "openb_node_list_gpu_node.csv")
    all_pods = read_pods(out / "openb_pod_list_snapshot.csv")
    assert (document["trace"]["node_count"], document["trace"]["gpus"], document["trace"]["pod_count"]) == (
        len(all_nodes), sum(n.gpus for n in all_nodes), len(all_pods))
    runs = document["runs"]
    assert sorted(r["gpupair"] for r in runs) == [False, True] and all(r["seed"] == 42 for r in runs)
    for run in runs:
        allocated = [v for v in run["allocation"].values() if v is not None]
        assert allocated and 0 < max(allocated) <= 100, run
        assert run["arrived_pods"] >= len(all_pods)  # sampled up to 130% of the GPUs: every pod, then clones
    with_gpupair = next(r for r in runs if r["gpupair"])
    assert with_gpupair["multi_gpu_placed"] > 0
    assert with_gpupair["multi_gpu_numa_local"] == with_gpupair["multi_gpu_placed"]
