"""`gpupair defrag --act` started after its predecessor died mid-plan, on the real control plane
(tests/controlplane/defrag_fleet.py's cluster). What a dead actor leaves is its plan in the plans
ConfigMap, written before its first eviction, so the rows are written as it would have left them:

- killed after writing the plan, before the eviction: the successor checks the plan, evicts the
  planned pod once, and the waiting pod is placed on the freed NUMA node;
- killed with a plan whose picture has changed since (its moved pod's target taken): the plan is
  dropped, with a Warning Event, and nothing is evicted for it.

Both: no pod that did not opt in is evicted, and no GPU is handed out twice (the harness kubelet
refused nothing).
"""

from __future__ import annotations

import time

from gpupair.kubewire.defrag_plans import PLANS_CONFIGMAP, PlanInFlight, PlannedMove
from tests.controlplane.defrag_fleet import events, fragmented, pods_of, tenant_uids
from tests.controlplane.gpupair_install import NAMESPACE
from tests.controlplane.processes import Process
from tests.controlplane.workloads import gpu_pod, wait_reported


def left_behind(api, fleet, to_devices: list[int]) -> PlanInFlight:
    """The plan a dead actor left: infer from frag-a GPU1 to frag-b ``to_devices``, not evicted."""
    infer = fleet.infer
    owner = next(o["uid"] for o in infer["metadata"]["ownerReferences"] if o.get("controller"))
    now = time.time()
    plan = PlanInFlight(namespace=fleet.waiting["metadata"]["namespace"], name="wait", uid=fleet.waiting["metadata"]["uid"],
                        node="frag-a", devices=[0, 1, 2, 3],
                        moves=[PlannedMove(pod=f"{infer['metadata']['namespace']}/{infer['metadata']['name']}",
                                           uid=infer["metadata"]["uid"], owner=owner, fromNode="frag-a",
                                           fromDevices=[1], toNode="frag-b", toDevices=to_devices)],
                        startedAt=now - 5, heldUntil=now + 120)
    api.apply({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": PLANS_CONFIGMAP, "namespace": NAMESPACE},
               "data": {plan.uid: plan.model_dump_json()}})
    return plan


def actor(fleet, **env: str) -> Process:
    """The successor, as the defrag component runs it (its ServiceAccount's token)."""
    return fleet.install.defrag({"GPUPAIR_DEFRAG_INTERVAL": "1", **env})


def plans_left(api) -> dict:
    found = api.find("v1", "ConfigMap", PLANS_CONFIGMAP, NAMESPACE)
    return (found or {}).get("data") or {}


def test_a_plan_left_before_its_eviction_is_resumed(api, namespace, kubelets, scheduler, gpupair, controller_manager):
    fleet = fragmented(api, namespace, kubelets, scheduler, gpupair, controller_manager)
    left_behind(api, fleet, [1])
    process = actor(fleet)
    try:
        [grant] = fleet.sim.wait_admitted(namespace, ["wait"], timeout=90)
        assert (grant.node, grant.devices) == ("frag-a", (0, 1, 2, 3))
        api.wait_for(lambda: [p for p in pods_of(api, namespace, "infer")
                              if p["metadata"]["uid"] != fleet.infer["metadata"]["uid"] and p["spec"].get("nodeName")]
                     or None, 60, "infer's replacement placed")
        evicting = events(api, namespace, "DefragEvicting")
        assert [e["regarding"]["name"] for e in evicting] == [fleet.infer["metadata"]["name"]]
        assert events(api, namespace, "DefragPlanned") == []  # resumed, not planned again
        api.wait_for(lambda: events(api, namespace, "DefragPlaced") or None, 30, "DefragPlaced")
        api.wait_for(lambda: not plans_left(api) or None, 30, "the plan's key removed")
        assert tenant_uids(api, namespace) == fleet.tenant_uids
    finally:
        process.stop()
    assert not fleet.sim.errors, fleet.sim.errors


def test_a_plan_left_whose_picture_changed_is_dropped_and_evicts_nothing(api, namespace, kubelets, scheduler, gpupair,
                                                                         controller_manager):
    fleet = fragmented(api, namespace, kubelets, scheduler, gpupair, controller_manager)
    # since the plan was written, a pinned pod took its moved pod's target, frag-b GPU7
    api.create(gpu_pod(namespace, "late", 1, node="frag-b", devices=(7,)))
    fleet.sim.wait_admitted(namespace, ["late"], timeout=30)
    wait_reported(api, {"frag-b": {1}})
    left_behind(api, fleet, [7])
    # only the dropped plan is under test: too few moves a minute to start another
    process = actor(fleet, GPUPAIR_DEFRAG_MOVES_PER_MINUTE="0.1")
    try:
        dropped = api.wait_for(lambda: events(api, namespace, "DefragDropped") or None, 60, "DefragDropped")
        assert "new place was taken" in dropped[0]["note"]
        api.wait_for(lambda: not plans_left(api) or None, 30, "the plan's key removed")
        time.sleep(3)  # a few more rounds
        assert events(api, namespace, "DefragEvicting") == []
        assert [p["metadata"]["uid"] for p in pods_of(api, namespace, "infer")] == [fleet.infer["metadata"]["uid"]]
        assert tenant_uids(api, namespace) == fleet.tenant_uids
    finally:
        process.stop()
    assert not fleet.sim.errors, fleet.sim.errors
