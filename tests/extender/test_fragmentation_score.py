"""prioritize under ``--score fragmentation`` (kube-apiserver double feeding the node cache and
the pod watch, the app on a loopback port): the workload is the cluster's pods, each node's CPU
is its allocatable less its pods' requests, and CPU-only pods are scored too."""

from __future__ import annotations

from gpupair.extender.main import configure
from tests.extender_support import args_body, eventually, kube_extender, pod_object, report_annotations
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


def scores(answer: list[dict]) -> dict[str, int]:
    return {entry["Host"]: entry["Score"] for entry in answer}


async def test_a_small_pod_goes_where_it_breaks_no_set_a_waiting_pod_could_use():
    async with running_kube_double() as double:
        double.store.create("nodes", node("whole", EVERY_GPU, "64", {}))
        double.store.create("nodes", node("broken", EVERY_GPU - {0}, "64", {("infra", "holder"): {0}}))
        double.store.create("pods", with_cpu(make_pod("holder", "infra", gpus=1, node_name="broken"), "4"), "infra")
        double.store.create("pods", with_cpu(make_pod("trainer", "ml", gpus=8), "16"), "ml")  # waiting
        async with kube_extender(double, fragmentation=True) as k:
            await eventually(lambda: k.extender.ready())
            usage = k.extender.evaluator.usage
            assert usage.cpu_left("broken") == 60_000 and usage.cpu_left("whole") == 64_000
            _, answer = await k.client.post("prioritize", args_body(with_cpu(pod_object(1, uid="small"), "4"),
                                                                     names=["whole", "broken"]))
    # On the whole node the one GPU would leave no room for the waiting 8-GPU pod; on the
    # broken one there was none anyway.
    assert scores(answer) == {"whole": 0, "broken": 10}


async def test_a_cpu_pod_is_scored_away_from_the_cpu_gpu_pods_need():
    async with running_kube_double() as double:
        # Same GPUs free; "tight" has only the CPU its free GPUs' pods need.
        double.store.create("nodes", node("roomy", {4, 5, 6, 7}, "64", {("infra", "a"): {0, 1, 2, 3}}))
        double.store.create("nodes", node("tight", {4, 5, 6, 7}, "20", {("infra", "b"): {0, 1, 2, 3}}))
        double.store.create("pods", with_cpu(make_pod("a", "infra", gpus=4, node_name="roomy"), "4"), "infra")
        double.store.create("pods", with_cpu(make_pod("b", "infra", gpus=4, node_name="tight"), "4"), "infra")
        double.store.create("pods", with_cpu(make_pod("next", "ml", gpus=4), "16"), "ml")  # waiting
        async with kube_extender(double, fragmentation=True) as k:
            await eventually(lambda: k.extender.ready())
            _, answer = await k.client.post("prioritize", args_body(with_cpu(pod_object(0, uid="web"), "8"),
                                                                     names=["roomy", "tight"]))
    assert scores(answer) == {"roomy": 10, "tight": 0}  # on "tight" it would strand four GPUs


async def test_best_fit_remains_the_default_and_gives_cpu_pods_no_opinion():
    async with running_kube_double() as double:
        double.store.create("nodes", node("roomy", {4, 5, 6, 7}, "64", {("infra", "a"): {0, 1, 2, 3}}))
        double.store.create("pods", with_cpu(make_pod("a", "infra", gpus=4, node_name="roomy"), "4"), "infra")
        async with kube_extender(double) as k:
            await eventually(lambda: k.extender.ready())
            assert k.extender.evaluator.usage is None
            _, answer = await k.client.post("prioritize", args_body(pod_object(0, uid="web"), names=["roomy"]))
    assert scores(answer) == {"roomy": 0}


def test_the_flag_reads_its_variable(monkeypatch):
    import argparse

    monkeypatch.setenv("GPUPAIR_EXTENDER_SCORE", "fragmentation")
    parser = argparse.ArgumentParser(prog="gpupair extender")
    parser.gpupair_command = "extender"  # as gpupair.command.cli names the subcommand
    configure(parser)
    assert parser.parse_args([]).score == "fragmentation"
    assert parser.parse_args(["--score", "best-fit"]).score == "best-fit"
