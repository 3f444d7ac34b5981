"""The simulator's fragmentation score (simulator/trace/models/gpupair_score.py) over the fleet
state a real control plane shows, so a test can compare kube-scheduler's placements with the
ones the simulator would make, node for node.

The state is what the extender reads, taken from the apiserver: each node's report (its free
GPUs, each GPU's shares in gpupair.io/shares), its allocatable CPU and memory less the requests
of the pods bound there, and every pod not finished as a shape of the workload (the pod watch's). The
simulator's cluster is built from it with the nodes' own layout in place of a NUMA split, and
graded by the simulator's score, which runs the fragmentation code the extender runs.
"""

from __future__ import annotations

import json

from collections.abc import Callable

import numpy as np

from gpupair.decide.pod.pod_request import cpu_request, gpu_request, parse_bytes, parse_milli
from gpupair.extender.cache.cluster_usage import MIB, memory_mib
from gpupair.decide.score.fragmentation import MILLI
from gpupair.simulator.trace.files import TraceNode, TracePod
from gpupair.simulator.trace.models.devices import Tables, gpupair_decider, picker
from gpupair.simulator.trace.models.gpupair_score import FragmentationScore
from gpupair.simulator.trace.node_arrays import TraceCluster
from gpupair.simulator.trace.numa import DEFAULT_SPLITS, NumaSplits
from gpupair.topology.report import FREE_KEY
from gpupair.topology.shares import SHARES_KEY
from tests.controlplane.api import Api
from tests.controlplane.kubelet import GPU, SHARED, Kubelets

MODEL = "seed"  # one product across the fleet: the grades depend only on products' ranks
TERMINAL = ("Succeeded", "Failed")


def trace_pod(pod: dict, share_milli: int) -> TracePod:
    """The pod as the simulator's trace has it: its CPU and memory, its whole GPUs or its
    shares of ``share_milli`` each."""
    name, cpu, memory = pod["metadata"]["name"], cpu_request(pod), memory_mib(pod)
    gpus, shares = gpu_request(pod, GPU), gpu_request(pod, SHARED)
    if gpus:
        return TracePod(name, cpu, memory, gpus, MILLI)
    if shares:
        return TracePod(name, cpu, memory, shares, share_milli)
    return TracePod(name, cpu, memory, 0, 0)


def _left(annotations: dict[str, str], size: int) -> np.ndarray:
    """Each GPU's milli left as the node's report shows it (nothing left before a report)."""
    left = np.zeros(size, dtype=np.int64)
    raw = annotations.get(FREE_KEY)
    for index in json.loads(raw)["free"] if raw else ():
        left[index] = MILLI
    shares = json.loads(annotations[SHARES_KEY]) if SHARES_KEY in annotations else None
    for index, (of, taken) in enumerate(zip(shares["of"], shares["taken"]) if shares else ()):
        if of > 1 and 0 < taken:
            left[index] = MILLI * (of - taken) // of
    return left


def simulated_grades(api: Api, sim: Kubelets, pod: dict, share_milli: int) -> dict[str, int]:
    """The simulator's grade of ``pod`` (not created yet) on each node kube-scheduler and
    gpupair's filter would offer it: the nodes offering what it asks, with room for it."""
    names = list(sim.nodes)
    layouts = {sim.nodes[name].layout for name in names}
    assert len(layouts) == 1, "one layout across the fleet"
    objects = {name: api.get("v1", "Node", name) for name in names}
    nodes = [TraceNode(name, parse_milli(objects[name]["status"]["allocatable"]["cpu"], name),
                       parse_bytes(objects[name]["status"]["allocatable"]["memory"], name) // MIB,
                       sim.nodes[name].layout.size, MODEL) for name in names]
    cluster = TraceCluster(nodes, NumaSplits.parse(DEFAULT_SPLITS), np.arange(len(nodes)))
    cluster.layouts[:] = list(layouts)
    for row, name in enumerate(names):
        cluster.left[row, :nodes[row].gpus] = _left(objects[name]["metadata"].get("annotations") or {}, nodes[row].gpus)
        cluster.free_mask[row] = int((cluster.left[row] == MILLI).astype(np.int64) @ cluster.bits)
    asked = trace_pod(pod, share_milli)
    kinds = np.array([sim.nodes[name].resource == (SHARED if asked.milli_per_gpu < MILLI else GPU) for name in names])
    return grades_on(api, cluster, names, asked, lambda other: trace_pod(other, share_milli), kinds)


def grades_on(api: Api, cluster: TraceCluster, names: list[str], asked: TracePod,
              to_trace: Callable[[dict], TracePod], offers: np.ndarray) -> dict[str, int]:
    """The simulator's grades for ``asked`` over the ``names`` rows of ``cluster`` that ``offers``
    and kube-scheduler's fit let through, its workload every pod on the apiserver (``to_trace``)
    and the bound ones' CPU and memory taken off their node."""
    tables = Tables(cluster.layouts, picker("device-plugin", "aligned", True), gpupair_decider("device-plugin", "aligned"))
    score = FragmentationScore(cluster, tables)
    for other in api.list("v1", "Pod"):
        if (other.get("status") or {}).get("phase") in TERMINAL:
            continue
        shape = to_trace(other)
        score.seen(shape)
        node = other["spec"].get("nodeName")
        if node in names:
            cluster.cpu_left[names.index(node)] -= shape.milli_cpu
            cluster.memory_left[names.index(node)] -= shape.memory_mib
    score.seen(asked)
    offers = offers & (cluster.cpu_left >= asked.milli_cpu) & (cluster.memory_left >= asked.memory_mib)
    if asked.milli_per_gpu < MILLI:
        offers &= (cluster.left >= asked.milli_per_gpu).sum(axis=1) >= asked.gpus
    else:
        offers &= tables.lookup("passes", cluster.layout_id, cluster.free_mask, asked.gpus)
    rows = np.flatnonzero(offers)
    return dict(zip((names[row] for row in rows), score.scores(asked, rows).tolist()))
