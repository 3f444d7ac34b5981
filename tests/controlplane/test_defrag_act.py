"""`gpupair defrag --act` on the real control plane (tests/controlplane/defrag_fleet.py's cluster:
kube-scheduler with gpupair's extender, the ReplicaSet controller, the harness kubelets and
gpupair's reporters): a 4-GPU pod that waits on a fragmented fleet is placed on one NUMA node
after one move, the moved pod's replacement is placed too, and no pod that did not opt in moves.
The actor runs as deploy/components/defrag runs it, with the gpupair-defrag ServiceAccount's
token, so the component's RBAC is what it has.
"""

from __future__ import annotations

from tests.controlplane.defrag_fleet import events, fragmented, pods_of, tenant_uids
from tests.controlplane.gpupair_install import NAMESPACE


def test_a_waiting_pod_gets_a_numa_node_after_one_move(api, namespace, kubelets, scheduler, gpupair,
                                                       controller_manager):
    ns = namespace
    fleet = fragmented(api, ns, kubelets, scheduler, gpupair, controller_manager)
    first = fleet.infer
    actor = fleet.install.defrag({"GPUPAIR_DEFRAG_INTERVAL": "1"})
    try:
        [grant] = fleet.sim.wait_admitted(ns, ["wait"], timeout=90)
        assert (grant.node, grant.devices) == ("frag-a", (0, 1, 2, 3)), grant
        replacement = api.wait_for(
            lambda: [p for p in pods_of(api, ns, "infer") if p["metadata"]["uid"] != first["metadata"]["uid"]
                     and p["spec"].get("nodeName")] or None, 60, "infer's replacement placed")
        [moved] = fleet.sim.wait_admitted(ns, [replacement[0]["metadata"]["name"]], timeout=60)
        assert moved.node == "frag-b", moved
        # only the opted-in pod moved; the tenants are the same pods
        assert tenant_uids(api, ns) == fleet.tenant_uids
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
    assert not fleet.sim.errors, fleet.sim.errors
