"""A GPU shared through DRA consumable capacity (KEP-5075), on the real control plane:
kube-scheduler v1.36.2 (DRAConsumableCapacity is beta and on by default in 1.36, so no gate is
set) allocates shares of one device by its memory capacity, and gpupair's picture of the node
(``gpupair status -o json``, as a user runs it) shows that GPU partly taken, not free."""

from __future__ import annotations

import json
import subprocess
from typing import Any

from tests.controlplane.containers import base_env, gpupair_argv
from tests.controlplane.dra import RESOURCE, claim_pod, pinned_claim, seed_topology_file
from tests.dra_support import shared_slice


def status_of(control_plane, namespace: str, node: str) -> dict[str, Any]:
    done = subprocess.run(gpupair_argv(["status", "-o", "json", "-n", namespace,
                                        "--kubeconfig", str(control_plane.admin_kubeconfig)]),
                          capture_output=True, text=True, timeout=60, env=base_env())
    assert done.returncode == 0, done.stderr
    return next(n for n in json.loads(done.stdout)["nodes"] if n["name"] == node)


def test_a_gpu_partly_consumed_by_shares_is_shown_shared_and_not_free(
        api, namespace, kubelets, scheduler, control_plane, gpu_device_class):
    """Two claims each asking 8Gi of GPU2's 32Gi: the allocator gives both a share of gpu-2 (a
    shareID and consumedCapacity each). gpupair's picture: GPU2 half taken (500/1000), shared,
    and the node's largest free set on NUMA0 is the three other GPUs, not four."""
    sim = kubelets()
    node = "dra-share-1"
    sim.add_node(node, seed_topology_file(sim.directory, node), gpus=None)
    api.apply(shared_slice(node))
    scheduler({"profiles": [{"schedulerName": "default-scheduler"}]})
    names = ["share-a", "share-b"]
    for name in names:
        api.create(pinned_claim(namespace, name, 2, memory="8Gi"))
        api.create(claim_pod(namespace, name, claim=name, node=node))
    api.wait_for(lambda: all(api.get("v1", "Pod", n, namespace)["spec"].get("nodeName") for n in names),
                 60, "the share pods bound")

    results = [r for n in names
               for r in api.get(RESOURCE, "ResourceClaim", n, namespace)["status"]["allocation"]["devices"]["results"]]
    assert [(r["device"], r["consumedCapacity"]) for r in results] == [("gpu-2", {"memory": "8Gi"})] * 2, results
    assert len({r["shareID"] for r in results}) == 2, results

    shown = status_of(control_plane, namespace, node)
    devices = {d["index"]: d for numa in shown["numa"] for d in numa["devices"]}
    assert devices[2]["state"] == "shared" and devices[2]["shares"] == "500/1000", devices[2]
    assert [i for i, d in sorted(devices.items()) if d["state"] == "free"] == [0, 1, 3, 4, 5, 6, 7], devices
    assert shown["largestFree"]["gpus"] == 4 and shown["largestFree"]["numa"] == "NUMA1", shown["largestFree"]
