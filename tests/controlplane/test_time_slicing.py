"""Time-sliced GPUs on a real kube-scheduler and apiserver, with gpupair as deploy/ runs it: the
reporter counts each GPU's replicas from the kubelet's PodResources (`<index>::<n>` ids, the
harness device plugin handing them out as NVIDIA's does) and publishes them
(gpupair.io/shares); the extender, reading them, keeps multi-GPU pods off the node whose
nvidia.com/gpu is replicas, where two "GPUs" may be one GPU.

Two seed-like nodes. "sliced": every GPU offered four times under nvidia.com/gpu (time-slicing
without renameByDefault: 32 allocatable), one replica of GPU0 held by a pinned pod. "whole": GPU0-5
held by pinned tenants, GPU6 and GPU7 free. kube-scheduler's default profile alone would put a
2-GPU pod on "sliced" (31 of 32 free against 2 of 8); with shares hidden the report shows seven
free GPUs there and the pods land on it.
"""

from __future__ import annotations

import json

from gpupair.topology.shares import SHARES_KEY
from tests.controlplane.gpupair_install import scheduler_extenders
from tests.controlplane.workloads import SEED_TOPO, gpu_pod, pending_for, scheduling_failures, wait_reported


def shares(api, node: str) -> dict | None:
    raw = (api.get("v1", "Node", node)["metadata"].get("annotations") or {}).get(SHARES_KEY)
    return json.loads(raw) if raw else None


def test_multi_gpu_pods_stay_off_replicas_and_one_gpu_pods_share(api, namespace, kubelets, scheduler, gpupair):
    install = gpupair("device-plugin")
    sim = kubelets(policy="aligned")
    sim.add_node("sliced", SEED_TOPO, replicas=4)
    sim.add_node("whole", SEED_TOPO)
    pinned = [f"tenant-{i}" for i in range(6)]
    for i, name in enumerate(pinned):
        api.create(gpu_pod(namespace, name, 1, node="whole", devices=(i,)))
    api.create(gpu_pod(namespace, "slice-holder", 1, node="sliced"))
    sim.wait_admitted(namespace, [*pinned, "slice-holder"], timeout=30)
    for node in sim.nodes.values():
        install.reporter(node)
    wait_reported(api, {"sliced": set(range(1, 8)), "whole": {6, 7}})
    api.wait_for(lambda: (shares(api, "sliced") or {}).get("taken") == [1, 0, 0, 0, 0, 0, 0, 0] or None, 30,
                 "the sliced node's shares")
    assert shares(api, "sliced")["of"] == [4] * 8 and shares(api, "sliced")["replicated"] is True
    assert shares(api, "whole") is None
    _, url = install.extender()
    scheduler({"profiles": [{"schedulerName": "default-scheduler"}], "extenders": scheduler_extenders(url)})

    api.create(gpu_pod(namespace, "pair-1", 2))
    [grant] = sim.wait_admitted(namespace, ["pair-1"], timeout=60)
    assert (grant.node, grant.devices) == ("whole", (6, 7))

    api.create(gpu_pod(namespace, "pair-2", 2))  # no close pair left on "whole"; "sliced" must not take it
    assert pending_for(api, namespace, ["pair-2"], 5) == ["pair-2"]
    api.wait_for(lambda: scheduling_failures(api, namespace, "pair-2") or None, 30, "pair-2's FailedScheduling")
    assert "time-slicing replicas" in scheduling_failures(api, namespace, "pair-2")[-1]

    api.create(gpu_pod(namespace, "single", 1))  # a replica is what a 1-GPU pod gets there
    [single] = sim.wait_admitted(namespace, ["single"], timeout=60)
    assert single.node == "sliced" and single.devices == (1,)  # the plugin spreads: GPU1 has none taken
    api.wait_for(lambda: (shares(api, "sliced") or {}).get("taken") == [1, 1, 0, 0, 0, 0, 0, 0] or None, 30,
                 "the replica taken shown")
    assert not sim.errors, sim.errors
