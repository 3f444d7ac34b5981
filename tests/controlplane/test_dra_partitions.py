"""A GPU split by MIG through DRA partitionable devices (KEP-4815), on the real control plane:
kube-scheduler v1.36.2 (DRAPartitionableDevices is beta and on by default in 1.36, so no gate is
set) allocates MIG devices from the GPU's counter set, and gpupair's picture of the node
(``gpupair status -o json``, as a user runs it) shows that GPU partly taken, not free."""

from __future__ import annotations

from tests.controlplane.dra import RESOURCE, claim_pod, mig_claim, seed_topology_file
from tests.controlplane.test_dra_capacity import status_of
from tests.dra_support import mig_device_name, partitioned_slices


def test_a_gpu_with_mig_partitions_allocated_is_shown_shared_and_not_free(
        api, namespace, kubelets, scheduler, control_plane, gpu_device_class):
    """GPU2 published as NVIDIA's driver publishes an A100 with MIG (its counter set in a slice of
    its own, the GPU and its MIG devices consuming from it). A 1g.5gb claim, then a 3g.20gb one:
    the allocator gives the 1g placement 0 and, memory-slice-0 being consumed, the 3g placement 4.
    gpupair's picture: GPU2 5/8 of its memory slices taken (625/1000), shared, and the node's
    largest free set on NUMA0 is the three other GPUs, not four."""
    sim = kubelets()
    node = "dra-part-1"
    sim.add_node(node, seed_topology_file(sim.directory, node), gpus=None)
    for obj in partitioned_slices(node):
        api.apply(obj)
    scheduler({"profiles": [{"schedulerName": "default-scheduler"}]})
    for name, profile in [("mig-small", "1g.5gb"), ("mig-half", "3g.20gb")]:
        api.create(mig_claim(namespace, name, node, 2, profile))
        api.create(claim_pod(namespace, name, claim=name, node=node))
        api.wait_for(lambda: api.get("v1", "Pod", name, namespace)["spec"].get("nodeName"), 60, f"pod {name} bound")

    results = [r["device"] for n in ("mig-small", "mig-half")
               for r in api.get(RESOURCE, "ResourceClaim", n, namespace)["status"]["allocation"]["devices"]["results"]]
    assert results == [mig_device_name(2, "1g.5gb", 0), mig_device_name(2, "3g.20gb", 4)], results

    shown = status_of(control_plane, namespace, node)
    devices = {d["index"]: d for numa in shown["numa"] for d in numa["devices"]}
    assert devices[2]["state"] == "shared" and devices[2]["shares"] == "625/1000", devices[2]
    assert [i for i, d in sorted(devices.items()) if d["state"] == "free"] == [0, 1, 3, 4, 5, 6, 7], devices
    assert shown["largestFree"]["gpus"] == 4 and shown["largestFree"]["numa"] == "NUMA1", shown["largestFree"]
