"""The acceptance run that found the guess-and-TTL accounting wrong, end to end: four seed-like
nodes whose only same-NUMA pair is GPU0+GPU1 (GPU3, 5, 6, 7 held by 1-GPU pods created with
``spec.nodeName`` set while the extender runs), then a burst of 8 two-GPU pods. Four must be
placed, one per node, none on a SYS pair. Also: the plugin deviating from the plan, a restart
mid-burst, and two replicas."""

from __future__ import annotations

import random

import pytest

from gpupair.decide.judge.reservations import Hold
from tests.extender_support import eventually, kube_extender
from tests.kube_double import kube_client_for, make_node, make_pod, running_kube_double
from tests.ledger_cluster import NodeKubelet, gpu_pod, schedule

NODES = [f"node-{i}" for i in range(4)]
PINNED = (3, 5, 6, 7)


async def start_cluster(double, api) -> dict[str, NodeKubelet]:
    kubelets = {}
    for name in NODES:
        double.store.create("nodes", make_node(name))
        kubelets[name] = NodeKubelet(name, api)
        await kubelets[name].report()
    return kubelets


async def pin(double, kubelets, *, report: bool) -> None:
    for name in NODES:
        for device in PINNED:
            pod = f"pinned-{name}-{device}"
            double.store.create("pods", make_pod(pod, "infra", gpus=1, node_name=name), "infra")
            kubelets[name].admit("infra", pod, 1, {device})
        if report:
            await kubelets[name].report()


def burst(double, count: int = 8) -> list[dict]:
    return [gpu_pod(double.store.create("pods", make_pod(f"train-{i}", "ml", gpus=2), "ml"), 2)
            for i in range(count)]


async def schedule_all(client, pods, rng, placed: dict[str, str]) -> None:
    """Schedule ``pods`` back to back; record where each placed one went."""
    for pod in pods:
        node = await schedule(client, pod, NODES, rng)
        if node is not None:
            placed[pod["metadata"]["name"]] = node


async def admit_and_report(double, kubelets, placed: dict[str, str]) -> None:
    for pod, node in placed.items():
        kubelets[node].admit("ml", pod, 2)
    for kubelet in kubelets.values():
        await kubelet.report()


@pytest.mark.parametrize("pinned_reported", [True, False], ids=["reports-in", "reports-outstanding"])
async def test_burst_after_pinned_pods_places_four_of_four_one_per_node(pinned_reported):
    rng = random.Random(7)
    async with running_kube_double() as double, kube_client_for(double) as api:
        kubelets = await start_cluster(double, api)
        async with kube_extender(double) as k:
            await eventually(k.extender.ready)
            await pin(double, kubelets, report=pinned_reported)
            # The extender has watched every pinned pod being created (a count hold each, or
            # none where the report already lists it).
            double.store.bookmark_all()
            await eventually(lambda: k.pod_watch.resource_version == str(double.store.rv))
            if pinned_reported:
                await eventually(lambda: not k.extender.reservations.by_node(), what="holds ended by the ledger")
            else:
                assert k.extender.reservations.by_node() == {n: Hold(count=4) for n in NODES}
            placed = {}
            await schedule_all(k.client, burst(double), rng, placed)
            if not pinned_reported:
                for kubelet in kubelets.values():
                    await kubelet.report()
            await admit_and_report(double, kubelets, placed)
            await eventually(lambda: not k.extender.reservations.by_node(), what="every hold ended")
            outcomes = {o: k.extender.metrics.registry.get_sample_value(
                "gpupair_extender_reservation_outcomes_total", {"outcome": o}) for o in ("confirmed", "expired")}
    assert sorted(placed.values()) == NODES, placed
    assert all(kubelets[node].worst_link("ml", pod) != "SYS" for pod, node in placed.items())
    assert outcomes["expired"] == 0 and outcomes["confirmed"] >= 1


async def test_a_deviated_plan_frees_its_planned_pair_at_the_next_report():
    rng = random.Random(1)
    async with running_kube_double() as double, kube_client_for(double) as api:
        double.store.create("nodes", make_node("node-0"))
        kubelet = NodeKubelet("node-0", api)
        for device in (4, 5, 6, 7):
            kubelet.admit("infra", f"numa1-{device}", 1, {device})
        await kubelet.report()  # free: GPU0-3, two same-NUMA pairs
        async with kube_extender(double) as k:
            await eventually(k.extender.ready)
            first, second, third = burst(double, 3)
            assert await schedule(k.client, first, ["node-0"], rng) == "node-0"
            plan = k.extender.reservations.get(first["metadata"]["uid"]).devices
            # The plugin gives the other pair; until the report, the planned pair is held.
            kubelet.admit("ml", "train-0", 2, {0, 1, 2, 3} - plan)
            assert await schedule(k.client, second, ["node-0"], rng) == "node-0"
            assert await schedule(k.client, third, ["node-0"], rng) is None  # nothing left
            await kubelet.report()
            await eventually(lambda: k.extender.reservations.get(first["metadata"]["uid"]) is None)
            registry = k.extender.metrics.registry
            deviated = registry.get_sample_value("gpupair_extender_reservation_outcomes_total", {"outcome": "deviated"})
            ratio = registry.get_sample_value("gpupair_extender_plan_follow_ratio")
    assert deviated == 1 and ratio == 0.0


async def test_restart_mid_burst_rebuilds_holds_from_pods_and_ledger():
    rng = random.Random(3)
    async with running_kube_double() as double, kube_client_for(double) as api:
        kubelets = await start_cluster(double, api)
        await pin(double, kubelets, report=True)
        pods = burst(double)
        placed = {}
        async with kube_extender(double) as k:
            await eventually(k.extender.ready)
            await schedule_all(k.client, pods[:2], rng, placed)
        # The extender restarts before the two bound pods reach any report.
        async with kube_extender(double) as k:
            await eventually(k.extender.ready)
            holds = k.extender.reservations.by_node()
            before_restart = set(placed.values())
            await schedule_all(k.client, pods[2:], rng, placed)
            await admit_and_report(double, kubelets, placed)
            await eventually(lambda: not k.extender.reservations.by_node(), what="holds ended by the ledger")
    assert len(before_restart) == 2 and holds == {node: Hold(count=2) for node in before_restart}
    assert sorted(placed.values()) == NODES
    assert all(kubelets[node].worst_link("ml", pod) != "SYS" for pod, node in placed.items())


async def test_two_replicas_the_standby_holds_what_the_active_one_bound():
    """The Service's ClientIP affinity sends the one active kube-scheduler to one replica; the
    other keeps its watches warm. When the scheduler's calls move to it (the first replica
    died), it already holds, by count, every pod the first bound that no report lists yet."""
    rng = random.Random(11)
    async with running_kube_double() as double, kube_client_for(double) as api:
        kubelets = await start_cluster(double, api)
        await pin(double, kubelets, report=True)
        pods = burst(double)
        placed = {}
        async with kube_extender(double) as standby:
            async with kube_extender(double) as active:
                await eventually(lambda: active.extender.ready() and standby.extender.ready())
                await schedule_all(active.client, pods[:3], rng, placed)
                first = set(placed.values())
                await eventually(lambda: standby.extender.reservations.by_node() == {n: Hold(count=2) for n in first},
                                 what="the standby's holds")
            # The active replica is gone; the scheduler's calls now reach the standby.
            await schedule_all(standby.client, pods[3:], rng, placed)
            await admit_and_report(double, kubelets, placed)
            await eventually(lambda: not standby.extender.reservations.by_node(), what="holds ended by the ledger")
    assert len(first) == 3 and sorted(placed.values()) == NODES
    assert all(kubelets[node].worst_link("ml", pod) != "SYS" for pod, node in placed.items())
