"""`gpupair defrag --act` on a real kube-apiserver, kube-scheduler (with gpupair's extender, as
deploy/ registers it) and kube-controller-manager's ReplicaSet controller, with the harness
kubelets and gpupair's reporters: a 4-GPU pod that waits on a fragmented fleet is placed on one
NUMA node after one move, and the moved pod's replacement is placed too. The actor runs as
deploy/components/defrag runs it, with the gpupair-defrag ServiceAccount's token, so the
component's RBAC is what it has.

Two seed nodes (GPU0-3 NUMA0, GPU4-7 NUMA1). Pinned tenants (bare pods: they may not move) hold
a's NUMA1 and all of b but GPU1 and GPU7. "infer", one replica of a ReplicaSet that opted in,
is placed while a's GPU1 is the only free GPU; then the fillers around it go. No NUMA node has
four free GPUs (a's NUMA0 has three), so the 4-GPU pod waits, until infer moves to b.
"""

from __future__ import annotations

import time

from tests.controlplane.gpupair_install import NAMESPACE, scheduler_extenders
from tests.controlplane.workloads import SEED_TOPO, gpu_pod, pending_for, scheduling_failures, wait_gone, wait_reported

MOVABLE = {"gpupair.io/movable": "true"}


def replica_set(namespace: str, name: str) -> dict:
    labels = {"app": name}
    template = gpu_pod(namespace, name, 1, annotations=MOVABLE)
    template["metadata"] = {"labels": labels, "annotations": template["metadata"]["annotations"]}
    return {"apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": {"name": name, "namespace": namespace},
            "spec": {"replicas": 1, "selector": {"matchLabels": labels}, "template": template}}


def pods_of(api, namespace: str, app: str) -> list[dict]:
    return [p for p in api.list("v1", "Pod", namespace, labelSelector=f"app={app}")
            if not p["metadata"].get("deletionTimestamp")]


def events(api, namespace: str, reason: str) -> list[dict]:
    return [e for e in api.list("events.k8s.io/v1", "Event", namespace) if e.get("reason") == reason]


def test_a_waiting_pod_gets_a_numa_node_after_one_move(api, namespace, kubelets, scheduler, gpupair,
                                                       controller_manager):
    ns = namespace
    install = gpupair("defrag")
    sim = kubelets(policy="aligned")
    sim.add_node("frag-a", SEED_TOPO)
    sim.add_node("frag-b", SEED_TOPO)
    tenants = {f"a-{i}": ("frag-a", i) for i in (4, 5, 6, 7)}
    tenants |= {f"b-{i}": ("frag-b", i) for i in (0, 2, 3, 4, 5, 6)}
    fillers = {"fill-a0": ("frag-a", 0), "fill-a2": ("frag-a", 2), "fill-a3": ("frag-a", 3),
               "fill-b1": ("frag-b", 1), "fill-b7": ("frag-b", 7)}
    for name, (node, device) in (tenants | fillers).items():
        api.create(gpu_pod(ns, name, 1, node=node, devices=(device,)))
    sim.wait_admitted(ns, list(tenants | fillers), timeout=60)
    for node in sim.nodes.values():
        install.reporter(node)
    wait_reported(api, {"frag-a": {1}, "frag-b": set()})
    _, url = install.extender()
    scheduler({"profiles": [{"schedulerName": "default-scheduler"}], "extenders": scheduler_extenders(url)})
    controller_manager("replicaset-controller")

    api.create(replica_set(ns, "infer"))
    api.wait_for(lambda: [p for p in pods_of(api, ns, "infer") if p["spec"].get("nodeName")] or None, 60, "infer placed")
    [first] = pods_of(api, ns, "infer")
    sim.wait_admitted(ns, [first["metadata"]["name"]], timeout=60)
    for name in fillers:
        api.delete(f"/api/v1/namespaces/{ns}/pods/{name}")
    wait_gone(api, ns, list(fillers))
    wait_reported(api, {"frag-a": {0, 2, 3}, "frag-b": {1, 7}})

    api.create(gpu_pod(ns, "wait", 4))
    api.wait_for(lambda: scheduling_failures(api, ns, "wait") or None, 60, "wait's FailedScheduling")
    assert pending_for(api, ns, ["wait"], 2) == ["wait"]
    tenant_uids = {p["metadata"]["name"]: p["metadata"]["uid"] for p in api.list("v1", "Pod", ns)
                   if p["metadata"]["name"] in tenants}

    # as deploy/components/defrag runs it, with its ServiceAccount's token: its RBAC is enough
    actor = install.defrag({"GPUPAIR_DEFRAG_INTERVAL": "1"})
    try:
        [grant] = sim.wait_admitted(ns, ["wait"], timeout=90)
        assert (grant.node, grant.devices) == ("frag-a", (0, 1, 2, 3)), grant
        replacement = api.wait_for(
            lambda: [p for p in pods_of(api, ns, "infer") if p["metadata"]["uid"] != first["metadata"]["uid"]
                     and p["spec"].get("nodeName")] or None, 60, "infer's replacement placed")
        [moved] = sim.wait_admitted(ns, [replacement[0]["metadata"]["name"]], timeout=60)
        assert moved.node == "frag-b", moved
        # only the opted-in pod moved; the tenants are the same pods
        assert {p["metadata"]["name"]: p["metadata"]["uid"] for p in api.list("v1", "Pod", ns)
                if p["metadata"]["name"] in tenants} == tenant_uids
        assert api.find("v1", "Pod", first["metadata"]["name"], ns) is None
        planned = api.wait_for(lambda: events(api, ns, "DefragPlanned") or None, 30, "the DefragPlanned Event")
        assert planned[0]["regarding"]["name"] == "wait" and "moving 1 pod(s)" in planned[0]["note"]
        evicting = events(api, ns, "DefragEvicting")
        assert [e["regarding"]["name"] for e in evicting] == [first["metadata"]["name"]]
        api.wait_for(lambda: events(api, ns, "DefragPlaced") or None, 30, "the DefragPlaced Event")
        # the plan ended: its key is gone from the plans ConfigMap
        plans = api.find("v1", "ConfigMap", "gpupair-defrag-plans", NAMESPACE)
        assert plans is None or not (plans.get("data") or {}), plans
        # nothing it reads or writes was refused (a list it may not make is only a warning)
        assert "HTTP 403" not in actor.log.read_text(), actor.tail()
    finally:
        actor.stop()
        time.sleep(0)
    assert not sim.errors, sim.errors
