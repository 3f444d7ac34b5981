"""A small GPU fleet in the API double covering every case `gpupair status` shows, and a large
generated one for the bench. Reports are written with the project's codec, as the reporter does."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from gpupair.topology import report as codec
from gpupair.kubeclient.kube import event_body
from gpupair.kubewire.defaults import VERIFIER_CONTAINER
from gpupair.decide.judge.verdict import GRANTED_KEY, LINK_KEY, NUMA_KEY, PLANNED_KEY, VERDICT_KEY
from tests.kube_double import Store, make_node, make_pod
from tests.layouts import seed_layout

NOW = datetime(2026, 1, 1, 12, 0, 0, tzinfo=timezone.utc)
NS = "ml"


def rfc3339(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def report(node: str, free: set[int], age: float, unhealthy: set[int] = frozenset(), generation: int = 7,
           holders: list[codec.PodHolding] | None = None) -> dict[str, str]:
    """A node's annotations as its reporter writes them; with ``holders`` the allocation ledger too."""
    return codec.encode_annotations(seed_layout(f"GPU-{node}"), frozenset(free), generation,
                                    NOW - timedelta(seconds=age), frozenset(unhealthy), holders)


def bind(store: Store, name: str, node: str, gpus: int, bound_ago: float, planned: str | None = None,
         verifier: bool = True) -> None:
    """A GPU pod bound to ``node`` ``bound_ago`` seconds before NOW, as kube-scheduler leaves it;
    a multi-GPU one with the webhook's verifier sidecar unless ``verifier`` is False (created
    while the webhook was down)."""
    annotations = {PLANNED_KEY: planned} if planned else {}
    containers = ["main", VERIFIER_CONTAINER] if verifier and gpus > 1 else ["main"]
    store.create("pods", make_pod(name, NS, gpus=gpus, node_name=node, annotations=annotations, containers=containers))
    store.patch("pods", name, {"status": {"phase": "Pending", "conditions": [{
        "type": "PodScheduled", "status": "True",
        "lastTransitionTime": rfc3339(NOW - timedelta(seconds=bound_ago))}]}}, NS)


def core_event(name: str, pod: str, reason: str, message: str, ago: float, uid: str = "") -> dict:
    """A core/v1 Event as a list of /api/v1/events shows it (what kube-scheduler's recorder writes,
    as the apiserver presents it in core/v1)."""
    involved = {"kind": "Pod", "namespace": NS, "name": pod, "apiVersion": "v1"}
    if uid:
        involved["uid"] = uid
    at = rfc3339(NOW - timedelta(seconds=ago))
    return {"metadata": {"name": name, "namespace": NS}, "involvedObject": involved, "reason": reason,
            "message": message, "type": "Warning", "firstTimestamp": at, "lastTimestamp": at, "count": 1,
            "source": {"component": "default-scheduler"}}


def small_fleet(store: Store) -> None:
    """One node per case: fresh, fresh with reservations (planned and unplaced), an unhealthy GPU,
    stale, corrupt, missing; a CPU node that is not shown; pending pods; FAIL verdicts."""
    store.create("nodes", make_node("gpu-a", annotations=report("gpu-a", {2, 3, 4, 5, 6, 7}, 12)))
    store.create("nodes", make_node("gpu-b", annotations=report("gpu-b", {1, 2, 4}, 30, unhealthy={7})))
    # gpu-c's ledger is of another generation than its free report: not used, said so
    with_ledger = report("gpu-c", {0, 1, 2, 3, 4, 5}, 20)
    with_ledger[codec.ALLOCATIONS_KEY] = codec.encode_allocations(with_ledger[codec.TOPOLOGY_KEY], [], 6)
    store.create("nodes", make_node("gpu-c", annotations=with_ledger))
    store.create("nodes", make_node("gpu-d", annotations=report("gpu-d", {0, 1, 2, 3, 4, 5, 6, 7}, 540)))
    corrupt = report("gpu-e", {0, 1}, 5)
    corrupt[codec.FREE_KEY] = corrupt[codec.FREE_KEY].replace('"free":[0,1]', '"free":[0,9]')
    store.create("nodes", make_node("gpu-e", annotations=corrupt))
    store.create("nodes", make_node("gpu-f"))
    store.create("nodes", make_node("cpu-1", gpus=0))
    # gpu-g: a reporter with the allocation ledger: running-1 is in it; admitting was bound an
    # hour ago, before the scan, yet is not in it (the kubelet has not admitted it): reserved
    # all the same, which binding times alone could not tell
    store.create("nodes", make_node("gpu-g", annotations=report(
        "gpu-g", {2, 3, 4, 5, 6, 7}, 8, holders=[codec.PodHolding(NS, "running-1", frozenset({0, 1}))])))
    bind(store, "running-1", "gpu-g", 2, bound_ago=7200)
    bind(store, "admitting", "gpu-g", 2, bound_ago=3600, planned="GPU4+GPU5")

    # gpu-b: a pod the extender planned on GPU1+GPU2, bound after the report; one bound before it
    bind(store, "train-planned", "gpu-b", 2, bound_ago=4, planned="GPU1+GPU2")
    bind(store, "train-old", "gpu-b", 2, bound_ago=3600, planned="GPU0+GPU3")
    # gpu-c: a 2-GPU pod bound after the report, no plan: count only
    bind(store, "train-unplanned", "gpu-c", 2, bound_ago=2)
    # a 2-GPU pod created while the webhook was down: no verifier sidecar, so it is "not verified"
    bind(store, "no-verifier", "gpu-a", 2, bound_ago=7200, verifier=False)
    store.patch("pods", "no-verifier", {"status": {"phase": "Running"}}, NS)
    # a finished pod bound after the report holds nothing
    bind(store, "done", "gpu-c", 4, bound_ago=1)
    store.patch("pods", "done", {"status": {"phase": "Succeeded"}}, NS)

    pending = store.create("pods", make_pod("train-4gpu", NS, gpus=4))
    store.create("pods", make_pod("train-8gpu", NS, gpus=8))
    store.create("pods", make_pod("web", NS, gpus=0))
    store.create("events", core_event("train-4gpu.1", "train-4gpu", "FailedScheduling",
                                      "0/7 nodes are available: 1 Insufficient nvidia.com/gpu, 1 node(s) had "
                                      "untolerated taint {node-role.kubernetes.io/control-plane: }, "
                                      "2 need 4 GPUs on one NUMA node; free: NUMA0=2 NUMA1=1, "
                                      "3 gpupair report is stale or missing. preemption: 0/7 nodes are available",
                                      45, uid=pending["metadata"]["uid"]), NS)
    store.create("events", core_event("train-4gpu.0", "train-4gpu", "FailedScheduling",
                                      "an older attempt", 300), NS)

    failed = make_pod("train-k2x8p", NS, gpus=2, node_name="gpu-a", annotations={
        VERDICT_KEY: "FAIL", GRANTED_KEY: "GPU3+GPU4", NUMA_KEY: "NUMA0+NUMA1", LINK_KEY: "SYS"})
    store.create("pods", failed)
    store.patch("pods", "train-k2x8p", {"status": {"phase": "Running"}}, NS)
    store.create("events", core_event("train-k2x8p.1", "train-k2x8p", "GPUPlacementFailed",
                                      "granted GPU3+GPU4 on NUMA0+NUMA1 with worst link SYS", 600), NS)
    # the reporter writes through events.k8s.io/v1: regarding and note instead of involvedObject and message
    gone = {"kind": "Pod", "apiVersion": "v1", "metadata": {"name": "gone-pod", "namespace": NS, "uid": "u-gone"}}
    store.create("events", event_body(gone, "GPUPlacementFailed", "granted GPU2+GPU5 on NUMA0+NUMA1 with worst link SYS",
                                      type="Warning", component="gpupair-reporter", instance="gpupair-reporter-gpu-a",
                                      now_ns=int((NOW - timedelta(hours=2)).timestamp() * 1e9)), NS)


def large_fleet(store: Store, nodes: int) -> None:
    """``nodes`` seed-shaped nodes, varied free sets, 1 in 50 stale, 1 in 200 with no report; each
    reported node's taken GPUs held by 2-GPU pods its allocation ledger lists (as reporters publish
    it now), and one pod in 20 nodes pending."""
    for n in range(nodes):
        name = f"node-{n:05d}"
        if n % 200 == 199:
            store.create("nodes", make_node(name))
            continue
        free = {i for i in range(8) if (n >> (i % 5)) & 1 or i == n % 8}
        taken = sorted(set(range(8)) - free)
        holders = [codec.PodHolding(NS, f"job-{n:05d}-{p}", frozenset(taken[p:p + 2]))
                   for p in range(0, len(taken), 2)]
        age = 900 if n % 50 == 49 else n % 40
        store.create("nodes", make_node(name, annotations=report(name, free, age, generation=n, holders=holders)))
        for holder in holders:
            pod = make_pod(holder.name, NS, gpus=len(holder.devices), node_name=name)
            pod["status"] = {"phase": "Running", "conditions": [{
                "type": "PodScheduled", "status": "True", "lastTransitionTime": rfc3339(NOW - timedelta(hours=1))}]}
            store.create("pods", pod)
    for p in range(nodes // 20):
        store.create("pods", make_pod(f"waiting-{p:05d}", NS, gpus=4))
