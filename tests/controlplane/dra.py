"""The harness's DRA driver: ResourceSlices, the DeviceClass and claims shaped as the real
control plane stored them (shared/fixtures/real-k8s/dra/, copied under tests/fixtures/real-k8s/dra).

A DRA node is a simulated node without the device plugin (``kubelets.add_node(..., gpus=None)``:
no ``nvidia.com/gpu`` in its allocatable) whose GPUs ``publish_slices`` publishes as NVIDIA's GPU
driver does (``tests/dra_support.node_slice``: gpu-0..7, numaNode 0 for GPU0-3 and 1 for GPU4-7,
one pcieRoot per GPU, one pool per node named after it). kube-scheduler allocates the claims
itself; the resourceclaim controller (``controller_manager("resourceclaim-controller")``) makes
claims from templates and deallocates them. Objects a test makes here are removed by the
fixtures (claims carry a delete-protection finalizer the harness takes off when it cleans up).
"""

from __future__ import annotations

import copy
import time
from pathlib import Path
from typing import Any

from gpupair.topology.layout import NodeLayout
from gpupair.topology.layout_file import read_layout
from gpupair.topology.report import encode_topology
from tests.controlplane.api import Api
from tests.controlplane.kubelet import Kubelets
from tests.controlplane.workloads import A6000_TOPO, PAUSE_IMAGE, wait_gone
from tests.dra_support import DRIVER, node_slice, recorded
from tests.layouts import seed_layout

RESOURCE = "resource.k8s.io/v1"
NUMA_ATTRIBUTE = "resource.kubernetes.io/numaNode"


def _fresh(obj: dict[str, Any]) -> dict[str, Any]:
    obj = copy.deepcopy(obj)
    for key in ("creationTimestamp", "resourceVersion", "uid", "generation", "managedFields"):
        obj["metadata"].pop(key, None)
    obj.pop("status", None)
    return obj


def seed_topology_file(directory: Path, node: str) -> Path:
    """The seed node's topology as JSON, with the UUIDs (GPU-<node>-<i>) and PCI ids the node's
    slice publishes: a reporter on a DRA node maps claim results onto its layout through them,
    and `nvidia-smi topo -m` output carries neither."""
    path = directory / f"{node}-topology.json"
    path.write_text(encode_topology(seed_layout(f"GPU-{node}")))
    return path


def a6000_topology_file(directory: Path, node: str) -> Path:
    """The recorded 8x RTX A6000 box (NVLink bridges on 0+1, 2+3, 4+5, 6+7; NUMA as the seed's)
    as JSON, its devices named as the node's slice names them (the seed's UUIDs and PCI ids)."""
    links = read_layout(str(A6000_TOPO)).links
    path = directory / f"{node}-topology.json"
    path.write_text(encode_topology(NodeLayout(devices=seed_layout(f"GPU-{node}").devices, links=links)))
    return path


def hgx_h100_topology_file(directory: Path, node: str) -> Path:
    """The recorded HGX H100 board (tests/fixtures/topo/sglang-30401-hgx-h100.txt: every pair NV18
    through NVSwitch) as JSON, its devices named as the node's slice names them."""
    links = read_layout(str(A6000_TOPO.parent / "sglang-30401-hgx-h100.txt")).links
    path = directory / f"{node}-topology.json"
    path.write_text(encode_topology(NodeLayout(devices=seed_layout(f"GPU-{node}").devices, links=links)))
    return path


def publish_slices(api: Api, nodes: list[str], **options: Any) -> list[dict[str, Any]]:
    """One ResourceSlice per node, as the driver publishes it; ``options`` go to node_slice
    (``devices``, ``numa``, ...)."""
    return [api.apply(node_slice(node, **options)) for node in nodes]


def device_class(api: Api, *, extended_resource: bool = True) -> dict[str, Any]:
    """The recorded DeviceClass ``gpu.nvidia.com``; with ``extended_resource`` it serves
    ``nvidia.com/gpu`` asks from DRA devices (extendedResourceName)."""
    obj = _fresh(recorded("deviceclass-with-extended-resource-name.json"))
    if not extended_resource:
        obj["spec"].pop("extendedResourceName", None)
    return api.apply(obj)


def claim_template(namespace: str, name: str, count: int, *, constraint: str | None = NUMA_ATTRIBUTE,
                   annotations: dict[str, str] | None = None) -> dict[str, Any]:
    """A ResourceClaimTemplate asking ``count`` GPUs of the class (the recorded pair-numa
    template, reshaped); ``constraint=None``: as users write it, no matchAttribute."""
    obj = _fresh(recorded("resourceclaimtemplate-pair-numa.json"))
    obj["metadata"] = {"name": name, "namespace": namespace, "annotations": dict(annotations or {})}
    devices = obj["spec"]["spec"]["devices"]
    devices["requests"][0]["exactly"]["count"] = count
    if constraint is None:
        devices.pop("constraints")
    else:
        devices["constraints"][0]["matchAttribute"] = constraint
    return obj


def pinned_claim(namespace: str, name: str, index: int, memory: str = "") -> dict[str, Any]:
    """A one-GPU claim that only device ``index`` satisfies (the recorded busy-* claims);
    ``memory``: a share of it asking that much of its memory capacity (KEP-5075)."""
    request = {"name": "gpus", "exactly": {
        "allocationMode": "ExactCount", "count": 1, "deviceClassName": DRIVER,
        "selectors": [{"cel": {"expression": f"device.attributes['{DRIVER}'].index == {index}"}}]}}
    if memory:
        request["exactly"]["capacity"] = {"requests": {"memory": memory}}
    return {"apiVersion": RESOURCE, "kind": "ResourceClaim", "metadata": {"name": name, "namespace": namespace},
            "spec": {"devices": {"requests": [request]}}}


def mig_claim(namespace: str, name: str, node: str, index: int, profile: str) -> dict[str, Any]:
    """A claim for one MIG device of profile ``profile`` of GPU ``index`` of ``node`` (partitioned_slices'
    devices: ``profile`` and ``parentUUID`` as NVIDIA's driver writes them; a GPU device has no
    ``profile``, hence the ``in`` test before reading it)."""
    attributes = f"device.attributes['{DRIVER}']"
    expression = (f"'profile' in {attributes} && {attributes}.profile == '{profile}' && "
                  f"{attributes}.parentUUID == 'GPU-{node}-{index}'")
    request = {"name": "mig", "exactly": {"allocationMode": "ExactCount", "count": 1, "deviceClassName": DRIVER,
                                          "selectors": [{"cel": {"expression": expression}}]}}
    return {"apiVersion": RESOURCE, "kind": "ResourceClaim", "metadata": {"name": name, "namespace": namespace},
            "spec": {"devices": {"requests": [request]}}}


def claim_pod(namespace: str, name: str, *, template: str = "", claim: str = "", node: str = "",
              annotations: dict[str, str] | None = None) -> dict[str, Any]:
    """A pod whose container uses one claim, from ``template`` (the controller makes it) or the
    existing ``claim``; ``node``: kept there by a nodeSelector (the scheduler still allocates)."""
    source = {"resourceClaimTemplateName": template} if template else {"resourceClaimName": claim}
    spec: dict[str, Any] = {
        "resourceClaims": [{"name": "gpus", **source}],
        "containers": [{"name": "main", "image": PAUSE_IMAGE, "resources": {"claims": [{"name": "gpus"}]}}],
        "terminationGracePeriodSeconds": 0,
    }
    if node:
        spec["nodeSelector"] = {"kubernetes.io/hostname": node}
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace, "annotations": dict(annotations or {})}, "spec": spec}


def hold_devices(api: Api, namespace: str, node: str, indices: list[int]) -> list[str]:
    """Other tenants' pods holding GPUs ``indices`` of ``node`` through one-GPU claims; their names."""
    names = []
    for index in indices:
        name = f"tenant-{node}-gpu{index}"
        api.create(pinned_claim(namespace, name, index))
        api.create(claim_pod(namespace, name, claim=name, node=node))
        names.append(name)
    return names


def allocated_devices(claim: dict[str, Any]) -> list[int]:
    """The device indices (gpu-<i>) a claim was allocated, in the allocation's order."""
    results = (((claim.get("status") or {}).get("allocation") or {}).get("devices") or {}).get("results") or []
    return [int(r["device"].rsplit("-", 1)[1]) for r in results if r.get("driver") == DRIVER]


def pod_claims(api: Api, pod: dict[str, Any]) -> list[dict[str, Any]]:
    """The pod's ResourceClaims, from its status (template claims, and the scheduler's own
    extended-resource claim)."""
    namespace = pod["metadata"]["namespace"]
    status = pod.get("status") or {}
    names = [s["resourceClaimName"] for s in status.get("resourceClaimStatuses") or [] if s.get("resourceClaimName")]
    names += [c["name"] for c in (pod.get("spec", {}).get("resourceClaims") or []) if c.get("resourceClaimName")]
    extended = (status.get("extendedResourceClaimStatus") or {}).get("resourceClaimName")
    if extended:
        names.append(extended)
    return [api.get(RESOURCE, "ResourceClaim", n, namespace) for n in dict.fromkeys(names)]


def remove_claims(api: Api, namespace: str) -> None:
    """Every claim in ``namespace`` gone, its delete protection taken off (no controller may be
    running to take it off)."""
    for claim in api.list(RESOURCE, "ResourceClaim", namespace):
        path = api.path(RESOURCE, "ResourceClaim", claim["metadata"]["name"], namespace)
        api.request("PATCH", path, {"metadata": {"finalizers": None}}, "application/merge-patch+json", ok=(200, 404))
        api.delete(path)


def remove_slices(api: Api, node: str) -> None:
    for obj in api.list(RESOURCE, "ResourceSlice", field_selector=f"spec.nodeName={node}"):
        api.delete(api.path(RESOURCE, "ResourceSlice", obj["metadata"]["name"]))


def dra_nodes_with_tenants(api: Api, sim: Kubelets, namespace: str, free: dict[str, set[int]],
                           timeout: float = 90.0, topology=seed_topology_file) -> None:
    """DRA nodes in this order (seed-like, slices published, no device plugin), every GPU outside
    ``free`` held by a tenant's one-GPU claim pod, which the test's kube-scheduler must be
    running to place (tests/dra_support.FRAGMENTED is the acceptance's table)."""
    for node in free:
        sim.add_node(node, topology(sim.directory, node), gpus=None)
    publish_slices(api, list(free))
    tenants = [name for node, keep in free.items() for name in hold_devices(api, namespace, node, sorted(set(range(8)) - keep))]
    api.wait_for(lambda: all(api.get("v1", "Pod", n, namespace)["spec"].get("nodeName") for n in tenants),
                 timeout, "the tenants' claim pods bound")


def run_rounds(api: Api, namespace: str, make_pod, rounds: int = 10, per_round: int = 2,
               timeout: float = 60.0, on_bound=None) -> list[tuple[str, str, list[int]]]:
    """Rounds of ``per_round`` pods created together (``make_pod(namespace, name)``), each round
    bound (``on_bound(pod)`` then called for each, before the pods go), its pods deleted and
    their claims deallocated by the resourceclaim controller before the next; (pod, node,
    devices allocated to its claims) for every pod, in order."""
    grants = []
    for round_number in range(1, rounds + 1):
        names = [f"r{round_number:02d}-{n}" for n in range(1, per_round + 1)]
        for name in names:
            api.create(make_pod(namespace, name))
        pods = api.wait_for(lambda: (lambda ps: ps if all(p["spec"].get("nodeName") for p in ps) else None)(
            [api.get("v1", "Pod", n, namespace) for n in names]), timeout, f"round {round_number}'s pods bound")
        claims = []
        for pod in pods:
            mine = pod_claims(api, pod)
            claims += [c["metadata"]["name"] for c in mine]
            grants.append((pod["metadata"]["name"], pod["spec"]["nodeName"], [d for c in mine for d in allocated_devices(c)]))
            if on_bound is not None:
                on_bound(pod)
        for name in names:
            api.delete(api.path("v1", "Pod", name, namespace), grace=0)
        wait_gone(api, namespace, names)
        api.wait_for(lambda: not [n for n in claims if allocated_devices(api.find(RESOURCE, "ResourceClaim", n, namespace) or {})],
                     timeout, f"round {round_number}'s claims deallocated")
    return grants


def cross_numa(grants: list[tuple[str, str, list[int]]], per_numa: int = 4) -> list[tuple[str, str, list[int]]]:
    """The grants spanning both sockets of a seed-like node (GPU0-3 NUMA0, GPU4-7 NUMA1)."""
    return [g for g in grants if len({d // per_numa for d in g[2]}) > 1]


def bound_pods(api: Api, namespace: str, names: list[str]) -> list[str]:
    return [n for n in names if api.get("v1", "Pod", n, namespace)["spec"].get("nodeName")]


def frag(api: Api, namespace: str, settle: float = 15.0) -> tuple[list[str], dict[str, tuple[str, list[int]]]]:
    """Issue 25's FRAG: four one-GPU claim pods, one after another (each bound before the next),
    then eight four-GPU claim pods at once whose template asks for one NUMA node. On four empty
    seed-like nodes seven of the eight can fit, if the one-GPU claims share a NUMA node. Returns
    the four-GPU pods bound once ``settle`` seconds pass with no new binding, and where each
    one-GPU pod went (node, devices)."""
    api.create(claim_template(namespace, "one", 1, constraint=None))
    api.create(claim_template(namespace, "four", 4))
    ones = [f"one-{i}" for i in range(1, 5)]
    for name in ones:
        api.create(claim_pod(namespace, name, template="one"))
        api.wait_for(lambda: bound_pods(api, namespace, [name]), 60, f"{name} bound")
    fours = [f"four-{i}" for i in range(1, 9)]
    for name in fours:
        api.create(claim_pod(namespace, name, template="four"))
    placed: list[str] = []
    quiet_until = time.monotonic() + settle
    while time.monotonic() < quiet_until:
        now = bound_pods(api, namespace, fours)
        if now != placed:
            placed, quiet_until = now, time.monotonic() + settle
        time.sleep(0.5)
    where = {}
    for name in ones:
        pod = api.get("v1", "Pod", name, namespace)
        where[name] = (pod["spec"]["nodeName"], [d for c in pod_claims(api, pod) for d in allocated_devices(c)])
    return placed, where
