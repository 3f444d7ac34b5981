"""A defrag plan's hold on a real kube-scheduler and apiserver, with the extender as deploy/ runs
it (its Role reads the plans ConfigMap in gpupair's namespace, docs/defrag.md#holds).

One seed-like node, GPU0-3 (NUMA0) held by a pinned tenant, GPU4-7 (NUMA1) free. A 4-GPU pod
waits behind a scheduling gate; the plans ConfigMap holds GPU4-7 for it, as the defrag service
writes it before its evictions. A 2-GPU pod created then would take GPU4,5 (the only close pair
free) without the hold: it stays pending. The gate lifted, the waiting pod is placed on the
held set.
"""

from __future__ import annotations

import time

from gpupair.kubewire.defrag_plans import PLANS_CONFIGMAP, PlanInFlight
from tests.controlplane.gpupair_install import NAMESPACE, scheduler_extenders
from tests.controlplane.workloads import SEED_TOPO, gpu_pod, pending_for, scheduling_failures, wait_reported

GATE = "gpupair.io/test-waits"


def test_a_plans_freed_set_goes_to_its_waiting_pod_only(api, namespace, kubelets, scheduler, gpupair):
    install = gpupair("device-plugin")
    sim = kubelets(policy="aligned")
    sim.add_node("gpu-a", SEED_TOPO)
    api.create(gpu_pod(namespace, "tenant", 4, node="gpu-a", devices=(0, 1, 2, 3)))
    sim.wait_admitted(namespace, ["tenant"], timeout=30)
    install.reporter(sim.nodes["gpu-a"])
    wait_reported(api, {"gpu-a": {4, 5, 6, 7}})
    waiting = gpu_pod(namespace, "waiting", 4)
    waiting["spec"]["schedulingGates"] = [{"name": GATE}]
    uid = api.create(waiting)["metadata"]["uid"]
    now = time.time()
    plan = PlanInFlight(namespace=namespace, name="waiting", uid=uid, node="gpu-a", devices=[4, 5, 6, 7], moves=[],
                        startedAt=now, heldUntil=now + 300)
    plans = api.create({"apiVersion": "v1", "kind": "ConfigMap", "data": {uid: plan.model_dump_json()},
                        "metadata": {"name": PLANS_CONFIGMAP, "namespace": NAMESPACE}})
    try:
        _, url = install.extender()  # lists the plans before it is ready: no request sees GPU4-7 free
        scheduler({"profiles": [{"schedulerName": "default-scheduler"}], "extenders": scheduler_extenders(url)})

        api.create(gpu_pod(namespace, "other", 2))
        api.wait_for(lambda: scheduling_failures(api, namespace, "other") or None, 30, "other's FailedScheduling")
        assert pending_for(api, namespace, ["other"], 3) == ["other"]

        api.patch(api.path("v1", "Pod", "waiting", namespace), {"spec": {"schedulingGates": None}})
        [grant] = sim.wait_admitted(namespace, ["waiting"], timeout=60)
        assert (grant.node, grant.devices) == ("gpu-a", (4, 5, 6, 7))
        assert pending_for(api, namespace, ["other"], 1) == ["other"]
        assert not sim.errors, sim.errors
    finally:
        api.delete(plans)
