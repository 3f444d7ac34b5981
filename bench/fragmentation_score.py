"""The fragmentation score's prioritize in process, at a trace's fleet size: the extender as
assembled with a node cache (reports written by the reporter's own encoding, CPU, memory and GFD
labels as the trace says), the first pods of a trace seen by its workload (most of them bound to
random nodes), and prioritize asked about random windows of names, as kube-scheduler's search offers
them. It prints ms of CPU a call for a CPU-only pod and a one-GPU pod, read from the kept rows
(extender/cache/score_rows.py) and node by node, and checks that both give the same grades. Each
figure is the best of ``--rounds`` rounds of the same calls by the process's CPU time, which other
work on the machine moves less than the clock.

    .venv/bin/python bench/fragmentation_score.py
    .venv/bin/python bench/fragmentation_score.py --pods 10000 --names 582 --calls 300
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# After the installed packages: gpupair comes from the install (the checkout's gpupair/ holds
# the core alone), tests/ and bench/ from the checkout.
sys.path.append(str(ROOT))

from gpupair.decide.devices.policies import policy_named  # noqa: E402
from gpupair.decide.judge.decisions import Decider  # noqa: E402
from gpupair.decide.score.gpu_products import PRODUCT_LABEL  # noqa: E402
from gpupair.extender.app import assemble  # noqa: E402
from gpupair.extender.fragmentation_score import fragmentation_scores  # noqa: E402
from gpupair.extender.protocol import parse_args  # noqa: E402
from gpupair.simulator.trace.files import read_nodes, read_pods  # noqa: E402
from gpupair.simulator.trace.numa import NumaSplits  # noqa: E402
from gpupair.topology.report import encode_annotations  # noqa: E402
from tests.controlplane.trace_fleet import pod_manifest  # noqa: E402

NODES = ROOT / "tests/fixtures/trace/openb_node_list_gpu_node.csv"
PODS = ROOT.parent / "shared/fixtures/alibaba-gpu-v2023/openb_pod_list_default.csv"
FREE_CHANCE = 0.6  # each GPU free with this chance


def fleet(args):
    rng = random.Random(args.seed)
    extender = assemble(decider=Decider(policy=policy_named("aligned")), resource="nvidia.com/gpu", api=None,
                        stale_after=None, fragmentation=True)
    nodes, splits, now, objects = read_nodes(args.nodes), NumaSplits(), datetime.now(timezone.utc), []
    for node in nodes:
        obj = {"metadata": {"name": node.name, "labels": {}},
               "status": {"allocatable": {"cpu": f"{node.milli_cpu}m", "memory": f"{node.memory_mib}Mi"}}}
        if node.gpus:
            if node.model:
                obj["metadata"]["labels"][PRODUCT_LABEL] = node.model
            free = frozenset(g for g in range(node.gpus) if rng.random() < FREE_CHANCE)
            obj["metadata"]["annotations"] = encode_annotations(splits.layout(node.gpus), free, 1, now)
        objects.append(obj)
    extender.node_cache.replace(objects)
    names = [node.name for node in nodes]
    pods = read_pods(args.pods_file)
    for number, pod in enumerate(pods[:args.pods]):
        manifest = pod_manifest("bench", f"p{number}", pod)
        manifest["metadata"]["uid"] = f"uid-{number}"
        if rng.random() < 0.8:
            manifest["spec"]["nodeName"] = rng.choice(names)
        extender.score.usage.pod_seen(manifest)
    return extender, names, pods, rng


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=Path, default=NODES, help="openb node list")
    parser.add_argument("--pods-file", type=Path, default=PODS, help="openb pod list")
    parser.add_argument("--pods", type=int, default=3000, help="pods the workload has seen")
    parser.add_argument("--names", type=int, default=497, help="names a call offers (kube-scheduler's search at 1,213)")
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=15, help="rounds of the calls; the best is reported")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    for path, flag in ((args.nodes, "--nodes"), (args.pods_file, "--pods-file")):
        if not path.is_file():
            parser.error(f"no file at {path}: give {flag}")
    if args.pods < 0 or args.calls < 1 or args.names < 1 or args.rounds < 1:
        parser.error("--pods is 0 or more, --calls, --names and --rounds 1 or more")
    extender, names, pods, rng = fleet(args)
    if args.names > len(names):
        parser.error(f"--names {args.names}: the fleet has {len(names)} nodes")
    evaluator, score, usage = extender.evaluator, extender.score, extender.score.usage
    print(f"{len(names)} nodes, {args.pods} pods seen, {len(usage.workload.shapes)} shapes, {args.names} names a call")
    for kind, gpus in (("CPU pod", 0), ("1-GPU pod", 1)):
        trace_pod = next(p for p in pods if p.gpus == gpus and (gpus == 0 or p.milli_per_gpu == 1000))
        pod = pod_manifest("bench", kind.replace(" ", "-").lower(), trace_pod)
        pod["metadata"].update(uid=f"scored-{gpus}", resourceVersion="1")
        bodies = [json.dumps({"Pod": pod, "NodeNames": rng.sample(names, args.names)}).encode()
                  for _ in range(args.calls)]
        timed = {}
        for reading in ("rows", "node by node"):
            rows = score.rows
            if reading != "rows":
                score.rows = None
            best = float("inf")
            for _ in range(args.rounds):
                requests = [parse_args(body) for body in bodies]  # fresh strings, as each request's are
                started = time.process_time()
                for request in requests:
                    score.answer(request, gpus)
                best = min(best, (time.process_time() - started) / len(requests) * 1000)
            timed[reading] = best
            score.rows = rows
        differ = 0
        for body in bodies[:20]:
            offer = evaluator.offer(parse_args(body))
            kept = fragmentation_scores(evaluator, usage, offer, gpus, 1000, rows=score.rows)
            read = fragmentation_scores(evaluator, usage, offer, gpus, 1000)
            differ += kept != read
        print(f"{kind}: {timed['rows']:.3f} ms of CPU a call from the rows, {timed['node by node']:.3f} node by node; "
              f"grades differ on {differ} of 20 calls")
    return 0


if __name__ == "__main__":
    sys.exit(main())
