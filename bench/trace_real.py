"""A trace on the real control plane, beside the simulator's replay of the same seed (gpupair#45).

On a real etcd + kube-apiserver + kube-scheduler v1.36.2 (tests/controlplane, binaries from
GPUPAIR_K8S_BIN), kube-scheduler's default profile with gpupair installed as deploy/ ships it
(the self-managed overlay applied, its extender run as the Deployment runs it, both scheduler
entries, ``--score fragmentation``), the trace's nodes and FGD's protocol as
tests/controlplane/trace_fleet.py plays them: pods in the seed's order, one at a time, one that
kube-scheduler finds unschedulable deleted and counted as arrived and dropped.

``simulated`` is ``gpupair simulate --scenario trace``'s replay of the same nodes, pods and seed
(kube-default with gpupair as shipped, ``--numa-split`` default, device plugin aligned), with
kube-scheduler's percentageOfNodesToScore modelled (``--percentage-of-nodes-to-score``; unset on
kube-scheduler is 0 there).

``--nodes N``: N of the trace's nodes with its mix of (GPUs, model), drawn with the seed
(simulator/trace/node_sample.py); the pods are sampled to 130% of their GPUs.
``--percentage-of-nodes-to-score P``: kube-scheduler's setting (default: its own, unset).
``--without-gpupair``: kube-scheduler alone (no extender, no gpupair objects): the baseline of
the cost ratio. ``--floor``: gpupair installed, both entries pointed at bench/floor_extender.py
(passes every node, scores none, makes the Binding): what the extender protocol alone adds;
``--floor-scores``: the same floor listing every node it is offered at 1, so kube-scheduler
also decodes and adds a prioritize answer as long as gpupair's.
``--replicate K``: the fleet K times over (node names suffixed ``-r1``...), the pods to 130% of
its GPUs; ``--max-pods N`` stops after N arrivals (the cost at a size whose full
replay would take hours); ``--skip-simulated``: the real side only; ``--cpu-profile FILE``: the
extender's stacks sampled by CPU time over the replay (bench/cpu_sampler.py's collapsed stacks).

Output: a table, or with ``--output json`` one document: ``real`` and ``simulated``, each with
``allocation`` (arrival % -> allocation %), ``multi_gpu_placed``, ``multi_gpu_numa_local``,
``arrived_pods``, ``failed_pods``; ``real`` also ``latency_p50``/``latency_p99`` (seconds from
the pod's create to kube-scheduler's answer seen on a pod watch: bound, or unschedulable),
``refused_pods`` (bound where the stand-in device plugin or sharing layer had nothing: 0 unless
kube-scheduler's view lagged), ``cpu_seconds`` per process (extender, kube-scheduler,
kube-apiserver, etcd), ``apiserver_requests`` (apiserver_request_total over the run by verb
and resource, with ``total``) and ``scheduler`` (kube-scheduler's own histograms over the run,
read from its /metrics: per attempt, the mean of ``scheduling_attempt_duration_seconds`` and
``scheduling_algorithm_duration_seconds`` (which holds the extender's filter and prioritize calls),
and per extension point, the mean milliseconds, the count and the total seconds) and ``extender``
(the same of ``gpupair_extender_request_seconds`` by verb: the time gpupair took to answer, and of
``gpupair_extender_answer_cpu_seconds``: the CPU it spent on filter and prioritize).

    GPUPAIR_K8S_BIN=.k8s-bin .venv/bin/python bench/trace_real.py \\
        --trace-nodes tests/fixtures/trace/openb_node_list_gpu_node.csv \\
        --trace-pods tests/fixtures/trace/openb_pod_list_multigpu50.csv --seed 42 --nodes 100

Bad input (a trace file, --nodes below 1, no binaries) is one line, exit 2.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import socket
import ssl
import sys
import time
import urllib.request
from dataclasses import replace
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
# After the installed packages: gpupair comes from the install (the checkout's gpupair/ holds
# the core alone), tests/ and bench/ from the checkout.
sys.path.append(str(REPO))

import numpy as np  # noqa: E402

from gpupair.command.flags import UsageError  # noqa: E402
from gpupair.simulator.trace.files import read_nodes, read_pods, workload_name  # noqa: E402
from gpupair.simulator.trace.models.nodes_to_score import ADAPTIVE  # noqa: E402
from gpupair.simulator.trace.replay import SHIPPED, ReplayConfig, replay  # noqa: E402
from gpupair.simulator.trace.node_sample import sample_nodes  # noqa: E402
from tests.controlplane.control_plane import ControlPlane, find_binaries, session_directory  # noqa: E402
from tests.controlplane.gpupair_install import Install, scheduler_extenders  # noqa: E402
from tests.controlplane.processes import Process, free_port, stop_all  # noqa: E402
from tests.controlplane.trace_fleet import TraceFleet, replay_real  # noqa: E402
from bench.metrics_page import cpu_seconds, sum_count, sums_by  # noqa: E402

NAMESPACE = "trace"
POINTS = (50, 70, 90, 100, 110, 130)


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


# kube-scheduler's histograms the cost is read from, and the label that splits each
SCHEDULER_HISTOGRAMS = {
    "scheduler_scheduling_attempt_duration_seconds": "result",
    "scheduler_scheduling_algorithm_duration_seconds": None,
    "scheduler_framework_extension_point_duration_seconds": "extension_point",
}
# the time gpupair takes to answer, and the CPU it spends on filter and prioritize
EXTENDER_HISTOGRAMS = {"gpupair_extender_request_seconds": "verb", "gpupair_extender_answer_cpu_seconds": "verb"}


def metrics_text(url: str) -> str:
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE  # kube-scheduler's self-signed serving certificate
    with urllib.request.urlopen(f"{url}/metrics", context=context, timeout=10) as response:
        return response.read().decode()


def histogram_cost(before: str, after: str, histograms: dict[str, str | None]) -> dict[str, dict[str, float]]:
    """Per histogram (name: the label that splits it, or None) over the run: mean milliseconds,
    count and total seconds, keyed ``name`` or ``name/label value``, the ``scheduler_`` prefix dropped."""
    out = {}
    for name, label in histograms.items():
        short = name.removeprefix("scheduler_")
        if label is None:
            ends = {short: (sum_count(before, name), sum_count(after, name))}
        else:
            start, end = sums_by(before, name, label), sums_by(after, name, label)
            ends = {f"{short}/{value}": (start.get(value, (0.0, 0.0)), cell) for value, cell in end.items()}
        for key, ((total0, count0), (total1, count1)) in sorted(ends.items()):
            if count1 > count0:
                total = total1 - total0
                out[key] = {"mean_ms": round(1000 * total / (count1 - count0), 3), "count": int(count1 - count0),
                            "seconds": round(total, 3)}
    return out


def replicated(nodes: list, times: int) -> list:
    """The fleet ``times`` over; copies named ``NAME-r1``..., in the list's order."""
    return [*nodes, *(replace(node, name=f"{node.name}-r{copy}") for copy in range(1, times) for node in nodes)]


def sampled(args) -> tuple[list, list]:
    nodes, pods = read_nodes(args.trace_nodes), read_pods(args.trace_pods)
    if args.nodes is not None:
        nodes = sample_nodes(nodes, args.nodes, np.random.default_rng([args.seed, 3]))
    return replicated(nodes, args.replicate), pods


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
        config: dict = {"profiles": [{"schedulerName": "default-scheduler"}]}
        processes = {}
        if not args.without_gpupair:
            install = Install(plane, render("self-managed"), plane.directory)
            install.apply()
        fleet = TraceFleet(api, nodes)
        fleet.create()
        if not args.without_gpupair:
            extender, url = floor_extender(install, plane, args.floor_scores) if args.floor or args.floor_scores \
                else install.extender(
                cpu_profile=args.cpu_profile)
            config["extenders"] = scheduler_extenders(url)
            processes["extender"] = extender.pid
        if args.percentage_of_nodes_to_score is not None:
            config["percentageOfNodesToScore"] = args.percentage_of_nodes_to_score
        scheduler = plane.scheduler(config)
        time.sleep(2 + len(nodes) / 1000)  # the scheduler's and the extender's informers list the nodes
        processes.update({"kube-scheduler": scheduler.pid, "kube-apiserver": plane.apiserver.pid,
                          "etcd": plane.etcd.pid})
        cpu0 = {name: cpu_seconds(pid) for name, pid in processes.items()}
        requests0 = apiserver_requests(api.request("GET", "/metrics"))
        histograms0 = metrics_text(scheduler.url)
        measured = not (args.without_gpupair or args.floor or args.floor_scores)  # gpupair's own /metrics
        extender0 = metrics_text(url) if measured else ""
        if args.cpu_profile and measured:
            os.kill(extender.pid, signal.SIGUSR1)  # the sampler forgets start-up and the first lists

        def progress(done: int, total: int) -> None:
            if not args.quiet and (done % 500 == 0 or done == total):
                print(f"trace_real: {done}/{total} pods", file=sys.stderr, flush=True)

        result = replay_real(api, fleet, pods, args.seed, NAMESPACE, tune=args.tune, progress=progress,
                             limit=args.max_pods)
        cpu = {name: round(cpu_seconds(pid) - cpu0[name], 2) for name, pid in processes.items()}
        cost = histogram_cost(histograms0, metrics_text(scheduler.url), SCHEDULER_HISTOGRAMS)
        answers = histogram_cost(extender0, metrics_text(url), EXTENDER_HISTOGRAMS) if measured else {}
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
            "gpupair": measured, "floor": args.floor or args.floor_scores, "floor_scores": args.floor_scores,
            "scheduler": cost, "extender": answers,
        }
    finally:
        plane.stop()
        stop_all()
        shutil.rmtree(plane.directory, ignore_errors=True)  # etcd's data: ~150 MB on tmpfs at full size


def floor_extender(install: Install, plane: ControlPlane, score_every_node: bool = False) -> tuple[Process, str]:
    """bench/floor_extender.py with the extender's service account, as (process, its URL)."""
    port = free_port()
    kubeconfig = install.service_account_kubeconfig("floor", "gpupair-extender")
    argv = [sys.executable, str(REPO / "bench/floor_extender.py"), str(port), kubeconfig]
    process = Process("floor", argv + ["--score-every-node"] * score_every_node, plane.directory / "floor.log")
    deadline = time.monotonic() + 30
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return process, f"http://127.0.0.1:{port}"
        except OSError:
            if not process.alive():
                raise RuntimeError(process.describe_exit()) from None
            if time.monotonic() > deadline:
                raise RuntimeError("the floor extender never listened") from None
            time.sleep(0.1)


def run_simulated(args, nodes, pods) -> dict:
    # kube-scheduler unset is its adaptive default, which the simulator models as 0
    percentage = ADAPTIVE if args.percentage_of_nodes_to_score is None else args.percentage_of_nodes_to_score
    result = replay(nodes, pods, ReplayConfig("kube-default", not args.without_gpupair, args.seed, tune=args.tune,
                                              score=SHIPPED, percentage_of_nodes_to_score=percentage))
    doc = result.as_json()
    keep = ("allocation", "multi_gpu_placed", "multi_gpu_numa_local", "arrived_pods", "failed_pods", "missed_by_search",
            "seconds")
    return {**{k: doc[k] for k in keep}, "percentage_of_nodes_to_score": percentage}


def table(doc: dict) -> str:
    alone = not doc.get("real", {}).get("gpupair", True)
    lines = [f"{doc['workload']}: {doc['nodes']} nodes, {doc['gpus']} GPUs, seed {doc['seed']}; "
             f"kube-default{' alone (real)' if alone else ' + gpupair as shipped'}",
             "run        " + "  ".join(f"@{p}%".rjust(7) for p in POINTS) + "  multi-GPU  NUMA-local  dropped"]
    for side in ("real", "simulated"):
        if side not in doc:
            continue
        run = doc[side]
        cells = "  ".join(f"{run['allocation'].get(str(p)) or float('nan'):7.2f}" for p in POINTS)
        lines.append(f"{side:<10} {cells}  {run['multi_gpu_placed']:9d}  {run['multi_gpu_numa_local']:10d}  "
                     f"{run['failed_pods']:7d}")
    if "real" not in doc:
        return "\n".join(lines)
    real = doc["real"]
    lines.append(f"real: latency p50 {real['latency_p50'] * 1000:.1f} ms, p99 {real['latency_p99'] * 1000:.1f} ms; "
                 f"CPU s {real['cpu_seconds']}; apiserver requests {int(real['apiserver_requests']['total'])}; "
                 f"refused by the node {real['refused_pods']}; {real['seconds']} s")
    lines += [f"kube-scheduler {key}: {cell['mean_ms']:.3f} ms x {cell['count']}" for key, cell in real["scheduler"].items()]
    lines += [f"gpupair {key}: {cell['mean_ms']:.3f} ms x {cell['count']}" for key, cell in real["extender"].items()]
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
    parser.add_argument("--skip-simulated", action="store_true", help="the real side only")
    parser.add_argument("--without-gpupair", action="store_true", help="kube-scheduler alone (the cost's baseline)")
    parser.add_argument("--floor", action="store_true", help="the entries pointed at bench/floor_extender.py")
    parser.add_argument("--floor-scores", action="store_true",
                        help="the same floor, listing every node it is offered at score 1 (an answer as long as gpupair's)")
    parser.add_argument("--replicate", type=int, default=1, help="the fleet this many times over")
    parser.add_argument("--max-pods", type=int, help="stop after this many arrivals")
    parser.add_argument("--cpu-profile", help="sample the extender by CPU time into this file (bench/cpu_sampler.py)")
    parser.add_argument("--quiet", action="store_true")
    args = parser.parse_args()
    try:
        if args.percentage_of_nodes_to_score is not None and not 0 <= args.percentage_of_nodes_to_score <= 100:
            raise UsageError("--percentage-of-nodes-to-score must be 0-100")
        if (args.floor or args.floor_scores) and args.without_gpupair:
            raise UsageError("--floor or --floor-scores, and --without-gpupair: one or the other")
        if args.replicate < 1 or (args.max_pods is not None and args.max_pods < 1):
            raise UsageError("--replicate and --max-pods must be at least 1")
        nodes, pods = sampled(args)
        doc = {"workload": workload_name(args.trace_pods), "seed": args.seed, "nodes": len(nodes),
               "gpus": sum(n.gpus for n in nodes)}
        if not args.skip_simulated:
            doc["simulated"] = run_simulated(args, nodes, pods)
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
