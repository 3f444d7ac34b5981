"""A trace on the real control plane, beside the simulator's replay of the same seed (gpupair#45).

On a real etcd + kube-apiserver + kube-scheduler v1.36.2 (tests/controlplane, binaries from
GPUPAIR_K8S_BIN), kube-scheduler's default profile with gpupair installed as deploy/ ships it
(the self-managed overlay applied, its extender run as the Deployment runs it, both scheduler
entries, ``--score fragmentation``), the trace's nodes and FGD's protocol as
tests/controlplane/trace_fleet.py plays them: pods in the seed's order, one at a time, one that
kube-scheduler finds unschedulable deleted and counted as arrived and dropped.

``simulated`` is ``gpupair simulate --scenario trace``'s replay of the same nodes, pods and seed
(kube-default with gpupair as shipped, ``--numa-split`` default, device plugin aligned).

``--nodes N``: N of the trace's nodes with its mix of (GPUs, model), drawn with the seed
(simulator/trace/sample.py); the pods are sampled to 130% of their GPUs.
``--percentage-of-nodes-to-score P``: kube-scheduler's setting (default: its own, unset).

Output: a table, or with ``--output json`` one document: ``real`` and ``simulated``, each with
``allocation`` (arrival % -> allocation %), ``multi_gpu_placed``, ``multi_gpu_numa_local``,
``arrived_pods``, ``failed_pods``; ``real`` also ``latency_p50``/``latency_p99`` (seconds from
the pod's create to kube-scheduler's answer seen on a pod watch: bound, or unschedulable),
``refused_pods`` (bound where the stand-in device plugin or sharing layer had nothing: 0 unless
kube-scheduler's view lagged), ``cpu_seconds`` per process (extender, kube-scheduler,
kube-apiserver, etcd) and ``apiserver_requests`` (apiserver_request_total over the run by verb
and resource, with ``total``).

    GPUPAIR_K8S_BIN=.k8s-bin .venv/bin/python bench/trace_real.py \\
        --trace-nodes tests/fixtures/trace/openb_node_list_gpu_node.csv \\
        --trace-pods tests/fixtures/trace/openb_pod_list_multigpu50.csv --seed 42 --nodes 100

Bad input (a trace file, --nodes below 1, no binaries) is one line, exit 2.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import numpy as np  # noqa: E402

from gpupair.command.flags import UsageError  # noqa: E402
from gpupair.simulator.trace.files import read_nodes, read_pods, workload_name  # noqa: E402
from gpupair.simulator.trace.replay import SHIPPED, ReplayConfig, replay  # noqa: E402
from gpupair.simulator.trace.sample import sample_nodes  # noqa: E402
from tests.controlplane.control_plane import ControlPlane, find_binaries, session_directory  # noqa: E402
from tests.controlplane.gpupair_install import Install, scheduler_extenders  # noqa: E402
from tests.controlplane.processes import stop_all  # noqa: E402
from tests.controlplane.trace_fleet import TraceFleet, replay_real  # noqa: E402

NAMESPACE = "trace"
POINTS = (50, 70, 90, 100, 110, 130)


def cpu_seconds(pid: int) -> float:
    import os

    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return sum(int(v) for v in fields[11:15]) / os.sysconf("SC_CLK_TCK")


REQUEST = re.compile(r'^apiserver_request_total\{(.*)\} ([0-9.e+]+)$')


def apiserver_requests(text: str) -> dict[str, float]:
    """apiserver_request_total summed by ``VERB resource[/subresource]``."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        found = REQUEST.match(line)
        if not found:
            continue
        labels = dict(re.findall(r'(\w+)="([^"]*)"', found.group(1)))
        key = f"{labels.get('verb', '?')} {labels.get('resource', '?')}"
        if labels.get("subresource"):
            key += "/" + labels["subresource"]
        out[key] = out.get(key, 0.0) + float(found.group(2))
    return out


def sampled(args) -> tuple[list, list]:
    nodes, pods = read_nodes(args.trace_nodes), read_pods(args.trace_pods)
    if args.nodes is not None:
        nodes = sample_nodes(nodes, args.nodes, np.random.default_rng([args.seed, 3]))
    return nodes, pods


def run_real(args, nodes, pods) -> dict:
    binaries, why = find_binaries()
    if not binaries:
        raise UsageError(f"{why}: set GPUPAIR_K8S_BIN to a folder with kube-apiserver, kube-scheduler and "
                         "kube-controller-manager v1.36, and install etcd")
    from tests.deploy_manifests import render

    plane = ControlPlane(binaries, session_directory())
    try:
        plane.start()
        api = plane.admin
        api.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}})
        api.create({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "default", "namespace": NAMESPACE}})
        install = Install(plane, render("self-managed"), plane.directory)
        install.apply()
        fleet = TraceFleet(api, nodes)
        fleet.create()
        extender, url = install.extender()
        config = {"profiles": [{"schedulerName": "default-scheduler"}], "extenders": scheduler_extenders(url)}
        if args.percentage_of_nodes_to_score is not None:
            config["percentageOfNodesToScore"] = args.percentage_of_nodes_to_score
        scheduler = plane.scheduler(config)
        time.sleep(2)  # the scheduler's and the extender's informers list the nodes
        processes = {"extender": extender.pid, "kube-scheduler": scheduler.pid,
                     "kube-apiserver": plane.apiserver.pid, "etcd": plane.etcd.pid}
        cpu0 = {name: cpu_seconds(pid) for name, pid in processes.items()}
        requests0 = apiserver_requests(api.request("GET", "/metrics"))

        def progress(done: int, total: int) -> None:
            if not args.quiet and (done % 500 == 0 or done == total):
                print(f"trace_real: {done}/{total} pods", file=sys.stderr, flush=True)

        result = replay_real(api, fleet, pods, args.seed, NAMESPACE, tune=args.tune, progress=progress)
        cpu = {name: round(cpu_seconds(pid) - cpu0[name], 2) for name, pid in processes.items()}
        requests1 = apiserver_requests(api.request("GET", "/metrics"))
        requests = {k: v - requests0.get(k, 0.0) for k, v in requests1.items() if v - requests0.get(k, 0.0) > 0}
        requests = dict(sorted(requests.items(), key=lambda kv: -kv[1]))
        return {
            "allocation": {str(k): v for k, v in result.allocation.items()},
            "multi_gpu_placed": result.multi_gpu_placed, "multi_gpu_numa_local": result.multi_gpu_numa_local,
            "arrived_pods": result.arrived_pods, "failed_pods": result.failed_pods,
            "refused_pods": result.refused_pods, "refusals": result.refusals,
            "latency_p50": round(result.percentile(50) or 0.0, 4), "latency_p99": round(result.percentile(99) or 0.0, 4),
            "seconds": round(result.seconds, 1), "cpu_seconds": cpu,
            "apiserver_requests": {"total": sum(requests.values()), **{k: int(v) for k, v in requests.items()}},
            "percentage_of_nodes_to_score": args.percentage_of_nodes_to_score,
        }
    finally:
        plane.stop()
        stop_all()
        shutil.rmtree(plane.directory, ignore_errors=True)  # etcd's data: ~150 MB on tmpfs at full size


def run_simulated(args, nodes, pods) -> dict:
    result = replay(nodes, pods, ReplayConfig("kube-default", True, args.seed, tune=args.tune, score=SHIPPED))
    doc = result.as_json()
    keep = ("allocation", "multi_gpu_placed", "multi_gpu_numa_local", "arrived_pods", "failed_pods", "seconds")
    return {k: doc[k] for k in keep}


def table(doc: dict) -> str:
    lines = [f"{doc['workload']}: {doc['nodes']} nodes, {doc['gpus']} GPUs, seed {doc['seed']}; "
             f"kube-default + gpupair as shipped",
             "run        " + "  ".join(f"@{p}%".rjust(7) for p in POINTS) + "  multi-GPU  NUMA-local  dropped"]
    for side in ("real", "simulated"):
        run = doc[side]
        cells = "  ".join(f"{run['allocation'].get(str(p)) or float('nan'):7.2f}" for p in POINTS)
        lines.append(f"{side:<10} {cells}  {run['multi_gpu_placed']:9d}  {run['multi_gpu_numa_local']:10d}  "
                     f"{run['failed_pods']:7d}")
    real = doc["real"]
    lines.append(f"real: latency p50 {real['latency_p50'] * 1000:.1f} ms, p99 {real['latency_p99'] * 1000:.1f} ms; "
                 f"CPU s {real['cpu_seconds']}; apiserver requests {int(real['apiserver_requests']['total'])}; "
                 f"refused by the node {real['refused_pods']}; {real['seconds']} s")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trace-nodes", required=True, type=Path)
    parser.add_argument("--trace-pods", required=True, type=Path)
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--nodes", type=int, help="sample this many nodes, keeping the GPU mix")
    parser.add_argument("--tune", type=float, default=1.3)
    parser.add_argument("--percentage-of-nodes-to-score", type=int)
    parser.add_argument("--output", choices=("text", "json"), default="text")
    parser.add_argument("--skip-real", action="store_true", help="the simulated side only")
    parser.add_argument("--quiet", action="store_true")
    args = parser.parse_args()
    try:
        if args.percentage_of_nodes_to_score is not None and not 0 <= args.percentage_of_nodes_to_score <= 100:
            raise UsageError("--percentage-of-nodes-to-score must be 0-100")
        nodes, pods = sampled(args)
        doc = {"workload": workload_name(args.trace_pods), "seed": args.seed, "nodes": len(nodes),
               "gpus": sum(n.gpus for n in nodes), "simulated": run_simulated(args, nodes, pods)}
        if args.skip_real:
            print(json.dumps(doc, indent=1))
            return 0
        doc["real"] = run_real(args, nodes, pods)
    except ValueError as error:  # UsageError and TraceFileError are ValueErrors
        print(f"trace_real.py: error: {error}", file=sys.stderr)
        return 2
    print(json.dumps(doc, indent=1) if args.output == "json" else table(doc))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
