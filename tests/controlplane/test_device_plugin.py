"""The device-plugin path on a real kube-scheduler and apiserver, with gpupair as deploy/ runs
it: the extender registered as the self-managed overlay's scheduler-config.yaml registers it,
the webhook on TLS, a reporter per node reading the harness kubelet's PodResources socket.

The fragmented four-node table is the acceptance's (and the simulator's) seed scenario on the
real binaries: free {3,4} | {2,3,4,5} | {0,1} | {4,5,6,7} on four seed-like 8-GPU nodes, the rest
held by other tenants' 1-GPU pods pinned with spec.nodeName; 10 rounds of 2 pods asking
``nvidia.com/gpu: 2`` created together, each round's pods deleted before the next. The
kube-scheduler-alone run with a naive device plugin is the control: it must show the SYS grants
the recording in shared/fixtures/real-k8s/default-scheduler-placements.json predicts (ties go
to the first node, fn-1, whose only free pair is GPU3+GPU4).
"""

from __future__ import annotations

from gpupair.decide.judge.verdict import PLANNED_KEY, format_set, parse_set
from tests.controlplane.gpupair_install import scheduler_extenders
from tests.controlplane.kubelet import Grant, Kubelets
from tests.controlplane.workloads import (
    A6000_TOPO, SEED_TOPO, gpu_pod, pending_for, scheduling_failures, wait_gone, wait_reported, wait_verdict,
)

FRAGMENTED = {"fn-1": {3, 4}, "fn-2": {2, 3, 4, 5}, "fn-3": {0, 1}, "fn-4": {4, 5, 6, 7}}
ROUNDS, PODS_PER_ROUND = 10, 2
INJECT = {"gpupair.io/inject": "enabled"}


def nodes_with_tenants(api, sim: Kubelets, namespace: str, free: dict[str, set[int]]) -> None:
    """Seed-like nodes, in this order, each GPU outside ``free`` held by a pinned 1-GPU pod."""
    names = []
    for node, keep in free.items():
        sim.add_node(node, SEED_TOPO)
        for index in sorted(set(range(8)) - keep):
            name = f"tenant-{node}-gpu{index}"
            api.create(gpu_pod(namespace, name, 1, node=node, devices=(index,)))
            names.append(name)
    sim.wait_admitted(namespace, names, timeout=30)
    for node, keep in free.items():
        assert sim.free(node) == frozenset(keep)


def run_rounds(api, sim: Kubelets, namespace: str, free: dict[str, set[int]], *, reports: bool) -> list[Grant]:
    """The rounds; after each, its pods are deleted and (with ``reports``) the reporters have
    shown the nodes back at ``free`` before the next round's pods are created, and each pod's
    verdict, asked for by its verifier sidecar, has named the GPUs the device plugin gave it."""
    grants: list[Grant] = []
    for round_number in range(1, ROUNDS + 1):
        names = [f"r{round_number:02d}-{n}" for n in range(1, PODS_PER_ROUND + 1)]
        for name in names:
            api.create(gpu_pod(namespace, name, 2))
        try:
            grants += sim.wait_admitted(namespace, names, timeout=60)
        except TimeoutError as exc:
            reasons = {n: scheduling_failures(api, namespace, n)[-1:] for n in names}
            raise AssertionError(f"round {round_number}: {exc}; FailedScheduling: {reasons}") from None
        if reports:
            for grant in grants[-PODS_PER_ROUND:]:
                verdict = wait_verdict(api, namespace, grant.pod)
                assert verdict["gpupair.io/granted"] == format_set(grant.devices), (grant, verdict)
                assert verdict["gpupair.io/verdict"] == "PASS" and verdict["gpupair.io/link"] == grant.link, (grant, verdict)
        for name in names:
            api.delete(api.get("v1", "Pod", name, namespace), grace=0)
        wait_gone(api, namespace, names)
        if reports:
            wait_reported(api, free)
    return grants


def table(grants: list[Grant]) -> str:
    return "\n".join(f"{g.pod} {g.node} GPU{'+GPU'.join(map(str, g.devices))} {g.link}" for g in grants)


def test_kube_scheduler_alone_with_a_naive_plugin_grants_sys_pairs(api, namespace, kubelets, scheduler):
    sim = kubelets(policy="naive")
    nodes_with_tenants(api, sim, namespace, FRAGMENTED)
    scheduler({"profiles": [{"schedulerName": "default-scheduler"}]})
    grants = run_rounds(api, sim, namespace, FRAGMENTED, reports=False)
    assert len(grants) == ROUNDS * PODS_PER_ROUND
    sys_grants = [g for g in grants if g.link == "SYS"]
    # as recorded: ties between the four nodes go to fn-1, whose only free pair crosses the sockets
    assert sys_grants, f"no SYS grant without gpupair; the control run shows nothing:\n{table(grants)}"
    assert {g.node for g in sys_grants} == {"fn-1"}, table(grants)


def test_gpupair_places_the_fragmented_table_with_no_sys_pair(api, namespace, kubelets, scheduler, gpupair):
    api.patch(f"/api/v1/namespaces/{namespace}", {"metadata": {"labels": INJECT}})
    install = gpupair("device-plugin")
    install.webhook()
    sim = kubelets(policy="aligned")
    for node in FRAGMENTED:
        sim.add_node(node, SEED_TOPO)
        install.reporter(sim.nodes[node])
    _, url = install.extender()
    scheduler({"profiles": [{"schedulerName": "default-scheduler"}], "extenders": scheduler_extenders(url)})
    names = []
    for node, keep in FRAGMENTED.items():
        for index in sorted(set(range(8)) - keep):
            names.append(f"tenant-{node}-gpu{index}")
            api.create(gpu_pod(namespace, names[-1], 1, node=node, devices=(index,)))
    sim.wait_admitted(namespace, names, timeout=30)
    wait_reported(api, FRAGMENTED)

    grants = run_rounds(api, sim, namespace, FRAGMENTED, reports=True)

    assert len(grants) == ROUNDS * PODS_PER_ROUND, table(grants)
    assert [g for g in grants if g.link == "SYS"] == [], table(grants)
    assert not sim.errors, sim.errors


def test_a_burst_after_pinned_pods_gets_no_sys_pair_and_no_set_twice(api, namespace, kubelets, scheduler, gpupair):
    """Pods pinned with spec.nodeName take GPUs the reports do not show yet; a burst of 2-GPU
    pods created at once must not be sent where only a SYS pair is left, and no GPU may be
    planned for two of them. (Which GPUs the pinned pods got the extender cannot know before the
    reports: it holds them by count, so a plan may name one of theirs; the grant never does.)"""
    api.patch(f"/api/v1/namespaces/{namespace}", {"metadata": {"labels": INJECT}})
    install = gpupair("device-plugin")
    install.webhook()
    sim = kubelets(policy="aligned")
    for node in ("burst-1", "burst-2"):
        sim.add_node(node, SEED_TOPO)
        install.reporter(sim.nodes[node])
    _, url = install.extender()
    scheduler({"profiles": [{"schedulerName": "default-scheduler"}], "extenders": scheduler_extenders(url)})
    wait_reported(api, {"burst-1": set(range(8)), "burst-2": set(range(8))})
    # burst-1 keeps {3} and {5,6,7}: 4 GPUs, but one close pair; burst-2 keeps {1,2,3} and {6,7}:
    # two. Three close pairs in all, and a count that says four.
    pinned = {"burst-1": (0, 1, 2, 4), "burst-2": (0, 4, 5)}
    names = []
    for node, held in pinned.items():
        for index in held:
            names.append(f"pinned-{node}-gpu{index}")
            api.create(gpu_pod(namespace, names[-1], 1, node=node, devices=(index,)))
    burst = [f"burst-{n}" for n in range(1, 7)]
    for name in burst:
        api.create(gpu_pod(namespace, name, 2))
    sim.wait_admitted(namespace, names, timeout=30)

    placed_names = sorted(api.wait_for(
        lambda: (lambda bound: bound if len(bound) >= 3 else None)(
            [n for n in burst if api.get("v1", "Pod", n, namespace)["spec"].get("nodeName")]),
        90, "three of the burst bound"))
    grants = sim.wait_admitted(namespace, placed_names, timeout=30)
    still_pending = pending_for(api, namespace, [n for n in burst if n not in placed_names], 5)

    assert not sim.errors, f"the kubelet refused pods it was sent (a set promised twice): {sim.errors}"
    assert [g for g in grants if g.link == "SYS"] == [], table(grants)
    assert len(grants) == 3 and len(still_pending) == 3, (table(grants), still_pending)
    plans: dict[str, list[set[int]]] = {}
    for name in placed_names:
        pod = api.get("v1", "Pod", name, namespace)
        planned = parse_set(pod["metadata"]["annotations"][PLANNED_KEY])
        plans.setdefault(pod["spec"]["nodeName"], []).append(set(planned))
    for node, sets in plans.items():
        taken = [i for s in sets for i in s]
        assert len(taken) == len(set(taken)), f"{node}: one GPU planned for two pods: {sets}"
    for name in still_pending:
        assert scheduling_failures(api, namespace, name), f"{name} waits with no FailedScheduling event"


def test_nvlink_scope_takes_a_bridged_pair_or_waits_saying_which_are_free(api, namespace, kubelets, scheduler,
                                                                          gpupair):
    """gpupair.io/scope: nvlink on the device-plugin path, on two nodes of the recorded 8x RTX A6000
    box (bridges on 0+1, 2+3, 4+5, 6+7): dp-1 keeps {1,2,3}, one bridged pair, and dp-2 keeps
    {0,2,4,6}, none. The first pod gets GPU2+GPU3 (NV4), its verdict naming the scope; the
    second waits with gpupair's reason."""
    api.patch(f"/api/v1/namespaces/{namespace}", {"metadata": {"labels": INJECT}})
    install = gpupair("device-plugin")
    install.webhook()
    sim = kubelets(policy="aligned")
    free = {"dp-1": {1, 2, 3}, "dp-2": {0, 2, 4, 6}}
    names = []
    for node, keep in free.items():
        sim.add_node(node, A6000_TOPO)
        install.reporter(sim.nodes[node])
        for index in sorted(set(range(8)) - keep):
            names.append(f"tenant-{node}-gpu{index}")
            api.create(gpu_pod(namespace, names[-1], 1, node=node, devices=(index,)))
    _, url = install.extender()
    scheduler({"profiles": [{"schedulerName": "default-scheduler"}], "extenders": scheduler_extenders(url)})
    sim.wait_admitted(namespace, names, timeout=30)
    wait_reported(api, free)

    nvlink = {"gpupair.io/scope": "nvlink", "gpupair.io/placement": "required"}
    api.create(gpu_pod(namespace, "bridged", 2, annotations=nvlink))
    [grant] = sim.wait_admitted(namespace, ["bridged"], timeout=60)
    verdict = wait_verdict(api, namespace, "bridged")
    api.create(gpu_pod(namespace, "waits", 2, annotations=nvlink))
    reason = api.wait_for(lambda: [m for m in scheduling_failures(api, namespace, "waits") if "NVLink" in m],
                          30, "gpupair's reason in a FailedScheduling event")

    assert (grant.node, grant.devices, grant.link) == ("dp-1", (2, 3), "NV4"), grant
    assert (verdict["gpupair.io/verdict"], verdict["gpupair.io/verdict-scope"], verdict["gpupair.io/link"]) == \
        ("PASS", "nvlink", "NV4")
    assert "need 2 GPUs joined by NVLink; the device plugin would take" in reason[0], reason
    assert "free sets joined by NVLink: none" in reason[0], reason
