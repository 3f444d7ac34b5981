"""DRA objects for tests, shaped as the real control plane stored them (shared/fixtures/real-k8s/dra/):
seed-like nodes published as NVIDIA's GPU driver does, claims allocated as kube-scheduler's
allocator writes them, and a stand-in for that allocator (first fit in slice order)."""

from __future__ import annotations

import copy
import itertools
import json
import uuid as uuidlib
from collections.abc import Iterable
from datetime import datetime, timezone
from typing import Any

from gpupair.decide.picture.dra_picture import allocation_of, build
from gpupair.kubewire import dra
from gpupair.topology.report import NodeReport
from tests.real_k8s import REAL_K8S

DRA = REAL_K8S / "dra"
DRIVER = "gpu.nvidia.com"
FRAGMENTED = {"dra-node-1": {3, 4}, "dra-node-2": {2, 3, 4, 5}, "dra-node-3": {0, 1}, "dra-node-4": {4, 5, 6, 7}}
_SEQ = itertools.count()
PICTURE_AT = datetime(2026, 12, 1, 9, 32, tzinfo=timezone.utc)


def recorded(name: str) -> Any:
    return json.loads((DRA / name).read_text())


def recorded_claims() -> list[dict[str, Any]]:
    return recorded("resourceclaims-allocated.json")["items"]


def node_slice(node: str, *, name: str = "", pool: str = "", generation: int = 1, slice_count: int = 1,
               devices: Iterable[int] = range(8), numa: bool = True, driver: str = DRIVER) -> dict[str, Any]:
    """The recorded dra-node-1 slice, published for ``node``: devices gpu-<i> for ``devices``,
    uuids GPU-<node>-<i>, the seed's bus ids (lower-case, as the driver writes them) and one PCIe
    root per GPU; without ``numa`` the driver omits numaNode (sysfs said -1)."""
    obj = copy.deepcopy(recorded("resourceslice-dra-node-1.json"))
    for key in ("creationTimestamp", "resourceVersion", "uid", "generation"):
        obj["metadata"].pop(key, None)
    obj["metadata"]["name"] = name or f"{node}-gpu"
    spec = obj["spec"]
    spec.update(nodeName=node, driver=driver,
                pool={"name": pool or node, "generation": generation, "resourceSliceCount": slice_count})
    wanted = set(devices)
    spec["devices"] = [d for d in spec["devices"] if d["attributes"]["index"]["int"] in wanted]
    for device in spec["devices"]:
        device["attributes"]["uuid"]["string"] = f"GPU-{node}-{device['attributes']['index']['int']}"
        # NVIDIA's driver publishes the lower-case form k8s.io/dynamic-resource-allocation/
        # deviceattribute checks (0000:a1:00.0); the recorded slice was hand-written upper-case.
        bus = device["attributes"].get("resource.kubernetes.io/pciBusID")
        if bus is not None:
            bus["string"] = bus["string"].lower()
        if not numa:
            device["attributes"].pop("resource.kubernetes.io/numaNode")
    return obj


def as_list_attributes(obj: dict[str, Any], names: Iterable[str] = ("resource.kubernetes.io/numaNode",)
                       ) -> dict[str, Any]:
    """The slice as NVIDIA's driver publishes it with the DRAListTypeAttributes gate (KEP-5491):
    each attribute in ``names`` as a list of its one value (``int: 1`` -> ``ints: [1]``)."""
    plural = {"int": "ints", "bool": "bools", "string": "strings", "version": "versions"}
    for device in obj["spec"]["devices"]:
        for name in names:
            attribute = device["attributes"].get(name)
            if attribute is not None:
                (kind, value), = attribute.items()
                device["attributes"][name] = {plural[kind]: [value]}
    return obj


def allocated_claim(namespace: str, name: str, node: str, devices: Iterable[int], *, pod: str | None = "",
                    pod_uid: str = "", request: str = "gpus", pool: str = "", driver: str = DRIVER,
                    constraint: str | None = None) -> dict[str, Any]:
    """A claim as kube-scheduler leaves it after allocating it on ``node`` (the recorded
    plain-1 claim, reshaped); ``pod=None``: allocated but not reserved for a pod yet."""
    obj = copy.deepcopy(next(c for c in recorded_claims() if c["metadata"]["name"].startswith("plain-1")))
    for key in ("creationTimestamp", "resourceVersion", "uid", "generateName", "ownerReferences"):
        obj["metadata"].pop(key, None)
    obj["metadata"].update(name=name, namespace=namespace)
    devices = sorted(devices)
    obj["spec"]["devices"]["requests"][0].update(name=request)
    obj["spec"]["devices"]["requests"][0]["exactly"]["count"] = len(devices)
    if constraint:
        obj["spec"]["devices"]["constraints"] = [{"matchAttribute": constraint, "requests": [request]}]
    allocation = obj["status"]["allocation"]
    allocation["devices"]["results"] = [
        {"device": f"gpu-{i}", "driver": driver, "pool": pool or node, "request": request} for i in devices]
    allocation["nodeSelector"]["nodeSelectorTerms"][0]["matchFields"][0]["values"] = [node]
    if pod is None:
        obj["status"]["reservedFor"] = []
    else:
        pod = pod or name
        obj["status"]["reservedFor"] = [{"name": pod, "resource": "pods",
                                         "uid": pod_uid or str(uuidlib.UUID(int=next(_SEQ) + 1))}]
    return obj


def shared_slice(node: str, memory: str = "32Gi", devices: Iterable[int] = range(8)) -> dict[str, Any]:
    """``node_slice`` with every GPU shareable through consumable capacity (KEP-5075, v1.36):
    ``allowMultipleAllocations`` and the recorded ``memory`` capacity with a request policy (a
    request not naming memory takes 8Gi; amounts in 1Gi steps), as a driver sharing GPUs by
    memory publishes them."""
    obj = node_slice(node, devices=devices)
    for device in obj["spec"]["devices"]:
        device["allowMultipleAllocations"] = True
        device["capacity"]["memory"] = {"value": memory, "requestPolicy": {
            "default": "8Gi", "validRange": {"min": "1Gi", "step": "1Gi"}}}
    return obj


def share_claim(namespace: str, name: str, node: str, shares: dict[int, str], **kwargs: Any) -> dict[str, Any]:
    """``allocated_claim`` whose results are shares of shareable devices, as the allocator writes
    them: a ``shareID`` each and the ``consumedCapacity`` (``shares``: device index -> memory)."""
    obj = allocated_claim(namespace, name, node, list(shares), **kwargs)
    obj["spec"]["devices"]["requests"][0]["exactly"]["capacity"] = {"requests": {"memory": next(iter(shares.values()))}}
    for result in obj["status"]["allocation"]["devices"]["results"]:
        index = int(result["device"].removeprefix("gpu-"))
        result["shareID"] = str(uuidlib.UUID(int=(next(_SEQ) + 1) << 64))
        result["consumedCapacity"] = {"memory": shares[index]}
    return obj


# Partitionable devices (KEP-4815), as NVIDIA's DRA driver publishes a GPU with MIG: a counter set
# per GPU, ``gpu-<minor>-counter-set`` (GetSharedCounterSetName), holding one counter per MIG
# capacity of the largest profile, named from it (capacitiesToCounters: copyEngines -> copy-engines)
# and one counter of 1 per memory slice, ``memory-slice-<n>`` (addCountersForMemSlices); the GPU
# device consumes all of it (PartConsumesCounters), each MIG device (``type: mig``, one per profile
# and placement, named gpu-<minor>-mig-<profile>-<profile id>-<placement start>) its profile's
# capacities and the memory slices of its placement (MigSpec.PartConsumesCounters). Since 1.35 the
# sets go in a slice of their own, published first (generateSplitResourceSlices).
# Source: github.com/NVIDIA/k8s-dra-driver-gpu cmd/gpu-kubelet-plugin/partitions.go, driver.go,
# deviceinfo.go (CommonCapacitiesMig, CommonAttributesMig). The profiles' sizes are an A100-SXM4-40GB's
# as `nvidia-smi mig -lgip` lists them in NVIDIA's MIG user guide (memory in MiB, as NVML gives it);
# the driver also writes encoders etc. as capacities of each MIG device, which gpupair does not read.
A100_MIG_PROFILES = {  # profile: (profile id, placement size in memory slices, placement starts, counters)
    "1g.5gb": (19, 1, range(7), {"multiprocessors": 14, "copy-engines": 1, "decoders": 0, "encoders": 0,
                                 "jpeg-engines": 0, "ofa-engines": 0, "memory": "4864Mi"}),
    "2g.10gb": (14, 2, (0, 2, 4), {"multiprocessors": 28, "copy-engines": 2, "decoders": 1, "encoders": 0,
                                   "jpeg-engines": 0, "ofa-engines": 0, "memory": "9984Mi"}),
    "3g.20gb": (9, 4, (0, 4), {"multiprocessors": 42, "copy-engines": 3, "decoders": 2, "encoders": 0,
                               "jpeg-engines": 0, "ofa-engines": 0, "memory": "20096Mi"}),
    "7g.40gb": (0, 8, (0,), {"multiprocessors": 98, "copy-engines": 7, "decoders": 5, "encoders": 0,
                             "jpeg-engines": 1, "ofa-engines": 1, "memory": "40448Mi"}),
}
MEMORY_SLICES = 8


def _counters(values: dict[str, Any], slices: Iterable[int] = ()) -> dict[str, Any]:
    counters = {name: {"value": str(value)} for name, value in values.items()}
    counters.update({f"memory-slice-{n}": {"value": "1"} for n in slices})
    return counters


def counter_set_name(index: int) -> str:
    return f"gpu-{index}-counter-set"


def mig_device_name(index: int, profile: str, start: int) -> str:
    return f"gpu-{index}-mig-{profile.replace('.', '')}-{A100_MIG_PROFILES[profile][0]}-{start}"


def partitioned_slices(node: str, partitioned: Iterable[int] = (2,), devices: Iterable[int] = range(8),
                       generation: int = 1) -> list[dict[str, Any]]:
    """``node_slice``'s GPUs with the GPUs ``partitioned`` split by MIG as NVIDIA's driver
    publishes them (above): a slice of the counter sets, then the devices' slice (the driver puts
    each GPU's devices in a slice of its own; the recorded slice holds them all, in its order)."""
    whole = A100_MIG_PROFILES["7g.40gb"][3]
    devices_slice = node_slice(node, name=f"{node}-gpu-devices", generation=generation, slice_count=2,
                               devices=devices)
    partitioned = sorted(partitioned)
    listed = devices_slice["spec"]["devices"]
    for index in partitioned:
        gpu = next(d for d in listed if d["attributes"]["index"]["int"] == index)
        gpu["consumesCounters"] = [{"counterSet": counter_set_name(index),
                                    "counters": _counters(whole, range(MEMORY_SLICES))}]
        for profile, (_, size, starts, values) in A100_MIG_PROFILES.items():
            for start in starts:
                attributes = {"type": {"string": "mig"}, "profile": {"string": profile},
                              "parentUUID": {"string": gpu["attributes"]["uuid"]["string"]}}
                for name in ("resource.kubernetes.io/pciBusID", "resource.kubernetes.io/pcieRoot"):
                    if name in gpu["attributes"]:
                        attributes[name] = copy.deepcopy(gpu["attributes"][name])
                listed.append({"name": mig_device_name(index, profile, start), "attributes": attributes,
                               "consumesCounters": [{"counterSet": counter_set_name(index),
                                                     "counters": _counters(values, range(start, start + size))}]})
    counters_slice = {"apiVersion": devices_slice["apiVersion"], "kind": "ResourceSlice",
                      "metadata": {"name": f"{node}-gpu-counters"},
                      "spec": {"driver": DRIVER, "nodeName": node,
                               "pool": dict(devices_slice["spec"]["pool"]),
                               "sharedCounters": [{"name": counter_set_name(i),
                                                   "counters": _counters(whole, range(MEMORY_SLICES))}
                                                  for i in partitioned]}}
    return [counters_slice, devices_slice]


def partition_claim(namespace: str, name: str, node: str, devices: list[str], **kwargs: Any) -> dict[str, Any]:
    """``allocated_claim`` whose results are the partition ``devices`` (by name), as the allocator
    writes a claim for MIG devices."""
    obj = allocated_claim(namespace, name, node, range(len(devices)), **kwargs)
    for result, device in zip(obj["status"]["allocation"]["devices"]["results"], devices):
        result["device"] = device
    return obj


def dra_report(slices: list[dict[str, Any]], claims: list[dict[str, Any]], node: str = "dra-node-1") -> NodeReport:
    """The node's report from DRA (gpupair/decide/picture/dra_picture.py) on these objects, as the
    extender builds it."""
    parsed = [dra.parse_slice(s) for s in slices]
    allocations = [a for a in (allocation_of(dra.parse_claim(c), DRIVER) for c in claims) if a is not None]
    return build(node, parsed, allocations, DRIVER, PICTURE_AT).report


def busy_claims(node: str, taken: Iterable[int], namespace: str = "dra-probe") -> list[dict[str, Any]]:
    """One-device claims pinning ``taken``, as the recorded busy-* claims did."""
    return [allocated_claim(namespace, f"busy-{node}-{i}", node, [i]) for i in taken]


def fragmented_cluster() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The acceptance's four DRA nodes (free {3,4} | {2,3,4,5} | {0,1} | {4,5,6,7}): slices and claims."""
    slices = [node_slice(node) for node in FRAGMENTED]
    claims = [c for node, free in FRAGMENTED.items() for c in busy_claims(node, set(range(8)) - free)]
    return slices, claims


def first_fit(slices: list[dict[str, Any]], claims: list[dict[str, Any]], node: str, count: int,
              same_numa: bool = False) -> list[int] | None:
    """The allocator's pick on one node: the first ``count`` free devices in slice order (the
    first combination in that order meeting a numaNode constraint, with ``same_numa``)."""
    taken = {(r["pool"], r["device"]) for c in claims for r in
             ((c.get("status") or {}).get("allocation") or {}).get("devices", {}).get("results", [])}
    free = [(d["attributes"]["index"]["int"], d["attributes"].get("resource.kubernetes.io/numaNode", {}).get("int"))
            for s in slices if s["spec"]["nodeName"] == node for d in s["spec"]["devices"]
            if (s["spec"]["pool"]["name"], d["name"]) not in taken]
    for combo in itertools.combinations(free, count):
        if not same_numa or len({numa for _, numa in combo}) == 1:
            return [index for index, _ in combo]
    return None
