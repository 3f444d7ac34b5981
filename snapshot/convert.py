"""From a live cluster's objects to the openb rows `simulate --scenario trace` replays. Pure: the
listed objects in, rows and findings out; the command logs the findings and writes the files.

Nodes (``sn,cpu_milli,memory_mib,gpu,model``): every Node, CPU-only ones too (with 0 GPUs), so
that the cluster's CPU pods have where they run now and do not crowd the GPU nodes in the replay.
- CPU and memory are allocatable less what the node's DaemonSet and static pods request: those
  run on their node whatever the scheduler does, so they are capacity, not workload.
- GPUs: allocatable ``--resource-name``; where the node has none, the GPUs of its gpupair report
  (the topology annotation) or of the DRA driver's ResourceSlices (the node picture the extender
  and `gpupair status` read), else its time-sliced shares over GFD's replica count. Where
  time-slicing replicates the resource under its own name (no ``renameByDefault``), allocatable
  counts replicas: it is divided by the replica count, and the pods asking it are written as
  whole GPUs (a line says so).
- model: the report's product (``gpupair.io/product``, or DRA's ``productName``), else GFD's
  ``nvidia.com/gpu.product`` label, in the label's form (gpupair/decide/score/gpu_products.py).

Pods (``name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec``): every pod not Succeeded or
Failed, bound or pending, in creation order, named ``namespace/name``, except DaemonSet and static
(mirror) pods (above).
- CPU and memory: what kube-scheduler counts (gpupair/decide/pod/pod_request.py: the effective
  request, pod-level resources, overhead), memory rounded up to MiB.
- GPUs: the whole GPUs it asks (``--resource-name``, plus what its DRA claims ask), at 1000 milli.
- Shares (``--shared-resources``, time-slicing's ``nvidia.com/gpu.shared``): one GPU at
  1000 / R milli a share, R the replicas a GPU of its node has (GFD's ``nvidia.com/gpu.replicas``,
  else the shares its reporter counted per GPU (``gpupair.io/shares``), else shares / GPUs), for a
  pending pod the cluster's most common R; at most 1000. FGD's
  convention is that ``gpu_milli`` is the part of one GPU a pod takes, so that the GPUs' capacity
  holds what the sharing layer lets onto it: R shares of 1000 / R fill a GPU, as R replicas do.
  Time-slicing isolates nothing, so this is capacity, not speed.
- Shares by DRA consumable capacity (a claim's ``capacity.requests``, KEP-5075): one GPU at the
  thousandths its claims' allocation results consume of the GPU they share, measured as the node
  picture measures it (``consumedCapacity`` over the device's capacity,
  gpupair/decide/picture/dra_capacity.py), several shares summed; for a pending pod each share
  sized as the allocator would size it on the cluster's most common shared GPU capacity
  (dra_capacity.pending_share), k shares k times that; at most 1000. Where no GPU is shared by capacity,
  each share is a whole GPU (the allocator takes one there); where that most common GPU cannot
  serve the ask, the pod is left out with a line. A pod asking whole GPUs too is written as
  whole GPUs, its shares among them (a row has one ``gpu_milli``).
- MIG profiles (``nvidia.com/mig-3g.20gb``, the device plugin's mig.strategy mixed; any but
  ``--resource-name`` and ``--shared-resources``): one GPU at the profile's compute slices out of
  the GPU's, 3 x 1000 / 7 milli, the GPU's slices the most shares a GPU of its node is in its
  ``gpupair.io/shares`` (for a pending pod the cluster's most common such count), else 7 (the
  A100's, H100's and H200's); at most 1000.
- gpu_spec: the products it accepts (nodeSelector and required node affinity on the product
  label, its claims' CEL selectors), ``A|B``; empty for any.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from gpupair.decide.picture.dra_capacity import most_common_capacity, pending_share
from gpupair.decide.picture.dra_picture import SOURCE as DRA_SOURCE, Demand
from gpupair.decide.score.fragmentation import MILLI
from gpupair.decide.score.gpu_products import label_product, node_product, pod_accepts
from gpupair.decide.pod.mig_ask import mig_slices_asked, slices_milli
from gpupair.decide.pod.pod_request import PodRequestError, gpu_request, parse_bytes, parse_count, parse_milli, pod_request
from gpupair.kubewire.defaults import GPU_DEVICE_CLASSES, RESOURCE_NAME, SHARED_RESOURCE_NAMES
from gpupair.simulator.trace.files import TraceNode, TracePod
from gpupair.status.build import Listing, Options, listed_picture
from gpupair.status.objects import annotations, is_terminal, meta, parse_time
from gpupair.topology import limits
from gpupair.topology.mig_slices import COMMON_GPU_SLICES
from gpupair.topology.shares import SharedCapacity

MIB = 2**20
REPLICAS_LABEL = "nvidia.com/gpu.replicas"  # GPU feature discovery's, under time-slicing
MIRROR_ANNOTATION = "kubernetes.io/config.mirror"  # the kubelet's, on a static pod's mirror

# What a finding is about, as the summary counts it
KINDS = {
    "node-unreadable": "node left out: no name, or allocatable CPU or memory unreadable",
    "node-no-gpus": "node without GPUs (written with 0, for CPU pods)",
    "node-no-report": "GPU node without a gpupair report (GPUs from allocatable)",
    "node-no-product": "GPU node without a product (no report, no GFD label)",
    "node-replicated": "node whose GPU resource counts time-slicing replicas",
    "node-gpus-unknown": "node with shares but no GPU count (no report, no replica label)",
    "node-too-many-gpus": f"node with more than {limits.MAX_GPUS} GPUs (capped)",
    "pod-unreadable": "pod left out: spec unreadable",
    "pod-share-unknown": "share pod left out: no node says how many shares a GPU has",
    "pod-share-unservable": "capacity share pod left out: the cluster's most common shared GPU cannot serve its ask",
    "pod-no-requests": "pod without CPU or memory requests (written with 0)",
    "pod-no-product": "GPU pod accepting no product of the fleet (fits nowhere in the replay)",
}


@dataclass(frozen=True)
class Finding:
    kind: str  # a KINDS key
    subject: str  # node NAME or pod NAMESPACE/NAME
    detail: str

    @property
    def line(self) -> str:
        return f"{self.subject}: {self.detail}"


@dataclass
class Snapshot:
    nodes: list[TraceNode] = field(default_factory=list)
    pods: list[TracePod] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)
    daemon_pods: int = 0  # DaemonSet and static pods, taken off their nodes' capacity

    def counts(self) -> Counter[str]:
        return Counter(f.kind for f in self.findings)


@dataclass(frozen=True)
class SnapshotOptions:
    resource: str = RESOURCE_NAME
    shared: tuple[str, ...] = SHARED_RESOURCE_NAMES
    dra_driver: str = ""
    gpu_classes: frozenset[str] = GPU_DEVICE_CLASSES


def _allocatable(node: Mapping[str, Any]) -> Mapping[str, Any]:
    value = (node.get("status") or {}).get("allocatable") if isinstance(node.get("status"), Mapping) else None
    return value if isinstance(value, Mapping) else {}


def _count(table: Mapping[str, Any], resource: str) -> int:
    try:
        return parse_count(table[resource], resource) if resource in table else 0
    except PodRequestError:
        return 0


def _replicas_label(node: Mapping[str, Any]) -> int:
    labels = meta(node).get("labels")
    value = labels.get(REPLICAS_LABEL) if isinstance(labels, Mapping) else None
    return int(value) if isinstance(value, str) and value.isdigit() and int(value) >= 1 else 0


def is_daemon_pod(pod: Mapping[str, Any]) -> bool:
    """A DaemonSet's pod, or a static pod's mirror: placed by their node, not by the scheduler."""
    if MIRROR_ANNOTATION in annotations(pod):
        return True
    owners = meta(pod).get("ownerReferences")
    return isinstance(owners, list) and any(isinstance(o, Mapping) and o.get("kind") in ("DaemonSet", "Node")
                                            for o in owners)


def _pod_name(pod: Mapping[str, Any]) -> str:
    m = meta(pod)
    return f"{m.get('namespace') or ''}/{m.get('name') or ''}"


_EPOCH = datetime.min.replace(tzinfo=timezone.utc)


def convert(nodes: Sequence[Mapping[str, Any]], pods: Sequence[Mapping[str, Any]],
            slices: Sequence[Mapping[str, Any]] = (), claims: Sequence[Mapping[str, Any]] = (),
            options: SnapshotOptions = SnapshotOptions()) -> Snapshot:
    out = Snapshot()
    picture = listed_picture(
        Listing(nodes=nodes, pods=None, events=None, slices=slices, claims=claims, dra_driver=options.dra_driver),
        datetime.now(timezone.utc), Options(stale_after=0, resource=options.resource, gpu_classes=options.gpu_classes))
    live = [p for p in pods if isinstance(p, Mapping) and not is_terminal(p)]

    # DaemonSet and static pods: capacity of their node, not workload.
    held: dict[str, list[int]] = {}
    for pod in live:
        if not is_daemon_pod(pod):
            continue
        out.daemon_pods += 1
        node = str((pod.get("spec") or {}).get("nodeName") or "")
        try:
            asks = (pod_request(pod, "cpu"), pod_request(pod, "memory"), gpu_request(pod, options.resource))
        except PodRequestError as error:
            out.findings.append(Finding("pod-unreadable", _pod_name(pod), f"DaemonSet or static pod: {error}"))
            continue
        if node:
            total = held.setdefault(node, [0, 0, 0])
            for i, value in enumerate(asks):
                total[i] += value

    # Nodes
    replicas: dict[str, int] = {}  # node -> shares a GPU has there, where it shares
    mig_slices: dict[str, int] = {}  # node -> the most shares a GPU is there (a MIG GPU's compute slices)
    replicated: set[str] = set()  # nodes whose --resource-name counts replicas
    capacities: list[tuple[SharedCapacity, ...] | None] = []  # each GPU's, where DRA shares it by capacity
    for node in sorted((n for n in nodes if isinstance(n, Mapping)), key=lambda n: str(meta(n).get("name") or "")):
        name = str(meta(node).get("name") or "")
        if not name:
            out.findings.append(Finding("node-unreadable", "(a node)", "left out: no metadata.name"))
            continue
        table = _allocatable(node)
        try:
            cpu = parse_milli(table.get("cpu", 0), "status.allocatable.cpu")
            memory = parse_bytes(table.get("memory", 0), "status.allocatable.memory")
        except PodRequestError as error:
            out.findings.append(Finding("node-unreadable", name, f"left out: {error}"))
            continue
        taken = held.get(name, [0, 0, 0])
        entry = picture.entry_of(name, annotations(node))
        report = entry.report if entry is not None else None
        whole = _count(table, options.resource)
        shares = sum(_count(table, s) for s in options.shared)
        # Shares a GPU has there: GFD's label, else the reporter's count (gpupair.io/shares).
        counted = report.shares if report is not None else None
        label_r = _replicas_label(node) or (max(counted.of) if counted is not None else 0)
        if counted is not None:
            if report.source != DRA_SOURCE:  # a DRA GPU counts thousandths, not MIG slices
                mig_slices[name] = max(counted.size(i) for i in range(len(counted.of)))
            capacities += counted.capacity
        if whole and label_r > 1 and not shares and (counted is None or counted.replicated):
            gpus = whole // label_r
            replicated.add(name)
            replicas[name] = label_r
            out.findings.append(Finding("node-replicated", name, (
                f"{options.resource} {whole} counts time-slicing replicas ({REPLICAS_LABEL}={label_r}, no "
                f"renameByDefault): written as {gpus} GPUs; pods asking {options.resource} are written as whole GPUs")))
        elif whole:
            gpus = whole
        elif report is not None:
            gpus = report.layout.size
        elif shares and label_r:
            gpus = shares // label_r
        else:
            gpus = 0
        if shares:
            r = label_r or (shares // gpus if gpus else 0)
            if r:
                replicas[name] = r
            elif not gpus:
                out.findings.append(Finding("node-gpus-unknown", name, (
                    f"advertises {shares} GPU shares, but neither a gpupair report nor {REPLICAS_LABEL} says how many "
                    "GPUs: written with 0 GPUs")))
        gpus = max(0, gpus - taken[2])
        if gpus > limits.MAX_GPUS:
            out.findings.append(Finding("node-too-many-gpus", name,
                                        f"{gpus} GPUs: written as {limits.MAX_GPUS}, the most a trace node may have"))
            gpus = limits.MAX_GPUS
        model = node_product(report.product if report is not None else "", label_product(node)) if gpus else ""
        if not gpus:
            if not shares:
                out.findings.append(Finding("node-no-gpus", name, "no GPUs: written with 0, a place for CPU pods"))
        else:
            if report is None:
                why = entry.cause if entry is not None and entry.cause else "no gpupair report"
                out.findings.append(Finding("node-no-report", name, f"{why}: GPUs from allocatable {options.resource}"))
            if not model:
                out.findings.append(Finding("node-no-product", name, (
                    "no GPU product: neither the gpupair report (gpupair.io/product) nor the label "
                    "nvidia.com/gpu.product names one; written with an empty model, which no pinned pod accepts")))
        out.nodes.append(TraceNode(name, max(0, cpu - taken[0]), max(0, (memory - taken[1]) // MIB), gpus, model))

    products = sorted({n.model for n in out.nodes if n.gpus and n.model})
    common = Counter(replicas.values()).most_common()
    cluster_r = min((r for r, c in common if c == common[0][1]), default=0)
    common_mig = Counter(mig_slices.values()).most_common(1)
    cluster_mig = common_mig[0][0] if common_mig else COMMON_GPU_SLICES
    cluster_capacity = most_common_capacity(capacities)

    # Pods
    def created(pod: Mapping[str, Any]) -> tuple[datetime, str]:
        return parse_time(meta(pod).get("creationTimestamp")) or _EPOCH, _pod_name(pod)

    for pod in sorted((p for p in live if not is_daemon_pod(p)), key=created):
        name = _pod_name(pod)
        if name.startswith("/") or name.endswith("/"):
            out.findings.append(Finding("pod-unreadable", name, "left out: no metadata.namespace or name"))
            continue
        node = str((pod.get("spec") or {}).get("nodeName") or "") if isinstance(pod.get("spec"), Mapping) else ""
        try:
            cpu, memory = pod_request(pod, "cpu"), pod_request(pod, "memory")
            whole = gpu_request(pod, options.resource)
            shares = sum(gpu_request(pod, s) for s in options.shared)
            mig = mig_slices_asked(pod, {options.resource, *options.shared})
            accepted = pod_accepts(pod)
            demand = picture.pod_demand(pod, known_only=True)
        except PodRequestError as error:
            out.findings.append(Finding("pod-unreadable", name, f"left out: {error}"))
            continue
        capacity_shares = demand.shares if demand is not None else 0
        if demand is not None:
            whole += demand.gpus
            accepted = accepted.both(demand.accepts)
        if whole:
            gpus, milli = whole + capacity_shares, MILLI
        elif capacity_shares:
            assert demand is not None
            held = picture.held_shares(pod).get(node) if node else None
            sized = _capacity_share(demand, held, cluster_capacity)
            if sized is None:
                out.findings.append(Finding("pod-share-unservable", name, (
                    f"asks {capacity_shares} GPU share(s) by capacity (capacity.requests), which the cluster's most "
                    "common GPU shared by capacity cannot serve: left out")))
                continue
            gpus, milli = sized
        elif shares:
            r = replicas.get(node) or cluster_r
            if not r:
                out.findings.append(Finding("pod-share-unknown", name, (
                    f"asks {shares} GPU share(s), but no node says how many shares a GPU has ({REPLICAS_LABEL}, or "
                    "shares and GPUs advertised): left out")))
                continue
            gpus, milli = 1, min(MILLI, shares * (MILLI // r))
        elif mig:
            gpus, milli = 1, slices_milli(mig, mig_slices.get(node) or cluster_mig)
        else:
            gpus, milli = 0, 0
        models = accepted.among(products) if gpus else ()
        if gpus and models and not set(models) & set(products):
            out.findings.append(Finding("pod-no-product", name, (
                f"accepts only {'|'.join(models)}, which no node has: it fits nowhere in the replay")))
        if not cpu and not memory:
            out.findings.append(Finding("pod-no-requests", name, "requests no CPU or memory: written with 0"))
        out.pods.append(TracePod(name, cpu, -(-memory // MIB), gpus, milli, models))
    return out


def _capacity_share(demand: Demand, held: Mapping[int, int] | None,
                    common: tuple[SharedCapacity, ...] | None) -> tuple[int, int] | None:
    """(GPUs, milli each) of a pod whose claims ask shares by consumable capacity: what they hold
    on its node (``held``: thousandths by GPU), else each share sized on the cluster's ``common``
    shared GPU; None where that one cannot serve it."""
    if held:
        if len(held) > 1 and all(part >= MILLI for part in held.values()):
            return len(held), MILLI  # shares of GPUs not shared by capacity: each taken whole
        return 1, min(MILLI, sum(held.values()))
    return pending_share(demand.shares, demand.asked, common)


def summary(snapshot: Snapshot) -> list[str]:
    """The printed summary: what was written, then each kind of finding with its count."""
    gpu_nodes = [n for n in snapshot.nodes if n.gpus]
    shapes = Counter((n.gpus, n.model or "(no product)") for n in gpu_nodes)
    fleet = ", ".join(f"{count} x {gpus} {model}"
                      for (gpus, model), count in sorted(shapes.items(), key=lambda s: (-s[0][0], s[0][1])))
    whole = sum(1 for p in snapshot.pods if p.gpus and p.milli_per_gpu == MILLI)
    share = sum(1 for p in snapshot.pods if p.gpus and p.milli_per_gpu < MILLI)
    lines = [
        f"nodes: {len(snapshot.nodes)} ({len(gpu_nodes)} with GPUs{': ' + fleet if fleet else ''}; "
        f"{sum(n.gpus for n in gpu_nodes)} GPUs)",
        f"pods: {len(snapshot.pods)} ({whole} whole-GPU, {share} share, {len(snapshot.pods) - whole - share} CPU-only), "
        f"in creation order; {snapshot.daemon_pods} DaemonSet or static pod(s) left out, their requests taken "
        "off their nodes",
    ]
    counts = snapshot.counts()
    for kind, text in KINDS.items():
        if counts[kind]:
            lines.append(f"{counts[kind]} x {text}")
    if not snapshot.nodes:
        lines.append("no nodes written: simulate --scenario trace needs at least one")
    if not snapshot.pods:
        lines.append("no pods written: simulate --scenario trace needs at least one")
    return lines
