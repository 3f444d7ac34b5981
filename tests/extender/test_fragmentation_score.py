"""prioritize under ``--score fragmentation`` (kube-apiserver double feeding the node cache and
the pod watch, the app on a loopback port): the workload is the cluster's pods, each node's CPU
is its allocatable less its pods' requests, and CPU-only pods are scored too."""

from __future__ import annotations

from gpupair.decide.score.gpu_products import PRODUCT_LABEL
from gpupair.decide.pod.intent import PLACEMENT_KEY
from gpupair.extender.main import configure
from gpupair.extender.prioritize import BestFit
from gpupair.topology.report import PRODUCT_KEY
from tests.extender_support import args_body, graded_alike, eventually, host_scores, kube_extender, pod_object, report_annotations
from tests.kube_double import make_node, make_pod, running_kube_double

EVERY_GPU = set(range(8))


def node(name: str, free: set[int], cpu: str, ledger: dict) -> dict:
    made = make_node(name, annotations=report_annotations(free, node=name, ledger=ledger))
    made["status"]["allocatable"]["cpu"] = cpu
    return made


def with_cpu(pod: dict, cpu: str) -> dict:
    container = pod["spec"]["containers"][0]
    container.setdefault("resources", {}).setdefault("requests", {})["cpu"] = cpu
    return pod


async def test_a_small_pod_goes_where_it_breaks_no_set_a_waiting_pod_could_use():
    async with running_kube_double() as double:
        double.store.create("nodes", node("whole", EVERY_GPU, "64", {}))
        double.store.create("nodes", node("broken", EVERY_GPU - {0}, "64", {("infra", "holder"): {0}}))
        double.store.create("pods", with_cpu(make_pod("holder", "infra", gpus=1, node_name="broken"), "4"), "infra")
        double.store.create("pods", with_cpu(make_pod("trainer", "ml", gpus=8), "16"), "ml")  # waiting
        async with kube_extender(double, fragmentation=True) as k:
            await eventually(lambda: k.extender.ready())
            usage = k.extender.score.usage
            assert usage.cpu_left("broken") == 60_000 and usage.cpu_left("whole") == 64_000
            _, answer = await k.client.post("prioritize", args_body(with_cpu(pod_object(1, uid="small"), "4"),
                                                                     names=["whole", "broken"]))
    # On the whole node the one GPU would leave no room for the waiting 8-GPU pod; on the
    # broken one there was none anyway.
    assert host_scores(answer, ["whole", "broken"]) == {"whole": 0, "broken": 10}


def roomy_and_tight(double) -> None:
    """Same GPUs free (GPU4-7); "tight" has only the CPU its free GPUs' pods need, "roomy" more;
    a 4-GPU pod asking 16 CPUs waits."""
    double.store.create("nodes", node("roomy", {4, 5, 6, 7}, "64", {("infra", "a"): {0, 1, 2, 3}}))
    double.store.create("nodes", node("tight", {4, 5, 6, 7}, "20", {("infra", "b"): {0, 1, 2, 3}}))
    double.store.create("pods", with_cpu(make_pod("a", "infra", gpus=4, node_name="roomy"), "4"), "infra")
    double.store.create("pods", with_cpu(make_pod("b", "infra", gpus=4, node_name="tight"), "4"), "infra")
    double.store.create("pods", with_cpu(make_pod("next", "ml", gpus=4), "16"), "ml")  # waiting


async def test_a_cpu_pod_is_scored_away_from_the_cpu_gpu_pods_need():
    async with running_kube_double() as double:
        roomy_and_tight(double)
        async with kube_extender(double, fragmentation=True) as k:
            await eventually(lambda: k.extender.ready())
            _, answer = await k.client.post("prioritize", args_body(with_cpu(pod_object(0, uid="web"), "8"),
                                                                     names=["roomy", "tight"]))
    assert host_scores(answer, ["roomy", "tight"]) == {"roomy": 10, "tight": 0}  # on "tight" it would strand four GPUs


async def test_best_fit_remains_the_default_and_gives_cpu_pods_no_opinion():
    async with running_kube_double() as double:
        double.store.create("nodes", node("roomy", {4, 5, 6, 7}, "64", {("infra", "a"): {0, 1, 2, 3}}))
        double.store.create("pods", with_cpu(make_pod("a", "infra", gpus=4, node_name="roomy"), "4"), "infra")
        async with kube_extender(double) as k:
            await eventually(lambda: k.extender.ready())
            assert isinstance(k.extender.score, BestFit)
            _, answer = await k.client.post("prioritize", args_body(pod_object(0, uid="web"), names=["roomy"]))
    assert answer == []  # no opinion: nothing listed


async def test_a_preferred_pod_ranks_every_close_set_above_the_set_fragmentation_alone_would_pick():
    async with running_kube_double() as double:
        # "whole": every GPU free, a close pair, but taking it breaks the 8 GPUs a waiting pod
        # needs; "split": GPU3 and GPU4 free, across the sockets, the pair that strands nothing.
        double.store.create("nodes", node("whole", EVERY_GPU, "64", {}))
        double.store.create("nodes", node("split", {3, 4}, "64", {("infra", "h"): EVERY_GPU - {3, 4}}))
        double.store.create("pods", with_cpu(make_pod("h", "infra", gpus=6, node_name="split"), "4"), "infra")
        double.store.create("pods", with_cpu(make_pod("trainer", "ml", gpus=8), "16"), "ml")  # waiting
        pod = with_cpu(pod_object(2, uid="pair"), "4")
        async with kube_extender(double, fragmentation=True) as k:
            await eventually(lambda: k.extender.ready())
            _, required = await k.client.post("prioritize", args_body(pod, names=["whole", "split"]))
            pod["metadata"].setdefault("annotations", {})[PLACEMENT_KEY] = "preferred"
            _, preferred = await k.client.post("prioritize", args_body(pod, names=["whole", "split"]))
    assert host_scores(required, ["whole", "split"]) == {"whole": 10, "split": 0}  # split fails the filter
    banded = host_scores(preferred, ["whole", "split"])
    assert banded["whole"] >= 6 > 5 >= banded["split"]


def pinned(pod: dict, product: str) -> dict:
    pod["spec"]["nodeSelector"] = {PRODUCT_LABEL: product}
    return pod


async def test_an_unpinned_pod_is_scored_away_from_the_scarce_product_pinned_pods_wait_for():
    """One H200 node (its reporter's NVML name) and one A100 node (GFD's label), all GPUs free;
    the pods waiting are pinned to the H200. A 1-GPU pod that may run anywhere should leave the
    H200 whole. Without pins the two nodes are alike: only their place in the fixed order
    (tie_order) parts them."""
    async def scores_with(pin: bool) -> dict[str, int]:
        async with running_kube_double() as double:
            h200 = node("h200", EVERY_GPU, "64", {})
            h200["metadata"]["annotations"][PRODUCT_KEY] = "NVIDIA H200"
            a100 = node("a100", EVERY_GPU, "64", {})
            a100["metadata"]["labels"][PRODUCT_LABEL] = "NVIDIA-A100-SXM4-80GB"
            double.store.create("nodes", h200)
            double.store.create("nodes", a100)
            for number in range(2):
                waiting = with_cpu(make_pod(f"train-{number}", "ml", gpus=8), "8")
                double.store.create("pods", pinned(waiting, "NVIDIA-H200") if pin else waiting, "ml")
            async with kube_extender(double, fragmentation=True) as k:
                await eventually(lambda: k.extender.ready())
                _, answer = await k.client.post("prioritize", args_body(with_cpu(pod_object(1, uid="any"), "4"),
                                                                         names=["h200", "a100"]))
        return host_scores(answer, ["h200", "a100"])

    assert await scores_with(pin=True) == {"h200": 0, "a100": 10}
    unpinned = await scores_with(pin=False)
    assert unpinned == graded_alike(["h200", "a100"])


def test_the_flag_reads_its_variable(monkeypatch):
    import argparse

    monkeypatch.setenv("GPUPAIR_EXTENDER_SCORE", "fragmentation")
    parser = argparse.ArgumentParser(prog="gpupair extender")
    parser.gpupair_command = "extender"  # as gpupair.command.cli names the subcommand
    configure(parser)
    assert parser.parse_args([]).score == "fragmentation"
    assert parser.parse_args(["--score", "best-fit"]).score == "best-fit"


def test_the_workload_keeps_each_pods_accepted_products_and_resolves_notin_against_the_nodes():
    from gpupair.extender.cache.cluster_usage import ClusterUsage
    from gpupair.decide.pod.pod_request import gpu_request

    usage = ClusterUsage(gpu_request)
    usage.node_seen("t4", make_node("t4", labels={PRODUCT_LABEL: "Tesla-T4"}))
    assert usage.product("t4", "") == "Tesla-T4" and usage.product("t4", "NVIDIA H200") == "NVIDIA-H200"
    not_t4 = make_pod("big", "ml", gpus=4)
    not_t4["spec"]["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [{"key": PRODUCT_LABEL, "operator": "NotIn", "values": ["Tesla-T4"]}]}]}}}
    for uid, pod in (("a", not_t4), ("b", pinned(make_pod("small", "ml", gpus=1), "Tesla-T4")),
                     ("c", make_pod("any", "ml", gpus=2))):
        pod["metadata"]["uid"] = uid
        usage.pod_seen(pod)
    measure = usage.measure(["NVIDIA-H200", "Tesla-T4"])
    allowed = {int(gpus): list(map(bool, measure.allowed[:, t])) for t, gpus in enumerate(measure.need_gpus)}
    assert allowed == {4: [True, False], 1: [False, True], 2: [True, True]}


def test_the_measure_kept_between_calls_is_the_one_made_afresh():
    """A measure asked again reuses its shapes while their set holds: counts that moved, a shape
    new or gone, other models or shares each give what a ClusterUsage that kept nothing gives."""
    from gpupair.extender.cache.cluster_usage import ClusterUsage
    from gpupair.decide.pod.pod_request import gpu_request

    usage = ClusterUsage(gpu_request)
    notin = make_pod("notin", "ml", gpus=4)
    notin["spec"]["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [{"key": PRODUCT_LABEL, "operator": "NotIn", "values": ["Tesla-T4"]}]}]}}}
    shares, cpu = make_pod("shares", "ml", gpus=0), make_pod("cpu", "ml", gpus=0)
    shares["spec"]["containers"][0]["resources"] = {"requests": {"nvidia.com/gpu.shared": "2", "cpu": "1"},
                                                    "limits": {"nvidia.com/gpu.shared": "2"}}
    cpu["spec"]["containers"][0]["resources"] = {"requests": {"cpu": "2", "memory": "1Gi"}}
    pods = [notin, make_pod("one", "ml", gpus=1), shares, make_pod("one-more", "ml", gpus=1), cpu,
            make_pod("two", "ml", gpus=2)]
    for number, pod in enumerate(pods):
        pod["metadata"]["uid"] = f"u{number}"

    def same(models, shares_per_gpu):
        fresh = ClusterUsage(gpu_request)
        for pod in pods[:seen]:
            fresh.pod_seen(pod)
        for uid in gone:
            fresh.pod_gone(uid)
        ours, theirs = usage.measure(models, shares_per_gpu), fresh.measure(models, shares_per_gpu)
        for name in ("share", "thresholds", "which", "need_gpus", "need_cpu", "need_memory", "allowed"):
            assert getattr(ours, name).tolist() == getattr(theirs, name).tolist(), name
        assert ours.cpu_only_share == theirs.cpu_only_share
        return ours

    seen, gone = 0, []
    for seen, pod in enumerate(pods, start=1):
        usage.pod_seen(pod)
        first = same(["NVIDIA-H200", "Tesla-T4"], 0)
        assert same(["NVIDIA-H200", "Tesla-T4"], 0).columns is first.columns  # kept while nothing moved
        same(["Tesla-T4"], 0)
        same(["NVIDIA-H200", "Tesla-T4"], 4)
    usage.pod_gone("u0")  # the only pod of its shape: the set changes
    gone.append("u0")
    same(["NVIDIA-H200", "Tesla-T4"], 4)
    usage.pod_gone("u3")  # one of two of its shape: the counts move, the set holds
    gone.append("u3")
    same(["NVIDIA-H200", "Tesla-T4"], 4)
