"""Allocation against moves: the defrag planner in FGD's protocol (gpupair#53 item 4), beside a
packing of the same arrived pods made with hindsight.

For each workload: kube-default with gpupair as shipped, under each move budget (moves as a share
of the pods arrived; `simulate --move-budget`), allocation at 100 and 130% arrival and the moves
spent by then; and the hindsight packing of the pods that arrived by 130% (the same stream, seed
by seed), the best of several offline orders (``ORDERS``), each placing every pod where it leaves
the least GPU behind (or by ``FITS``' other rules) under gpupair's NUMA rule, with each node's
CPU and memory (a share: on the GPU with the least left that holds it). Any such packing is a
lower bound on what a placement could reach; the best found is the goal's reference.

Pod lists are found as bench/trace.py finds them (the shared fixtures first, then bench/openb).

Run: .venv/bin/python bench/defrag.py [--traces default,multigpu50|all] [--budgets 0,0.1,0.5,1,2]
     [--seeds 42] [--policy kube-default] [--workers N] [--json FILE]
Prints markdown (bench/RESULTS.md keeps the sets); bad input is one line, exit 2.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from statistics import mean

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from gpupair.command.flags import UsageError  # noqa: E402
from gpupair.simulator.trace import fgd_protocol  # noqa: E402
from gpupair.simulator.trace.files import MILLI, TracePod, read_nodes, read_pods  # noqa: E402
from gpupair.simulator.trace.models.devices import Tables  # noqa: E402
from gpupair.decide.devices.policies import POLICIES  # noqa: E402
from gpupair.simulator.trace.node_arrays import TraceCluster  # noqa: E402
from gpupair.simulator.trace.numa import NumaSplits  # noqa: E402
from gpupair.simulator.trace.replay import ReplayConfig  # noqa: E402
from gpupair.simulator.trace.runs import parse_seeds, run_all  # noqa: E402

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))
from trace import FIXTURES, OPENB, pod_lists  # noqa: E402

GOAL_TRACES = ("default", "multigpu50")
BUDGETS = "0,0.1,0.5,1,2"  # % of arrived pods
# Offline orders: each a sort key over pods, largest first by what it names.
ORDERS = {
    "GPUs, then share": lambda p: (-p.gpus, -p.milli_per_gpu, -p.milli_cpu),
    "GPU milli": lambda p: (-p.gpu_milli, -p.gpus, -p.milli_cpu),
    "CPU per GPU milli": lambda p: (-p.gpus, -(p.milli_cpu / max(p.gpu_milli, 1)), -p.milli_per_gpu),
}


# Where each pod goes: best fit on GPU then CPU; on the two together as shares of the node's;
# or on CPU first.
FITS = {
    "gpu": lambda c, rows, gpu_left, pod: np.lexsort((c.cpu_left[rows], gpu_left))[0],
    "both": lambda c, rows, gpu_left, pod: np.argmin(
        gpu_left / np.maximum(MILLI * c.gpus[rows], 1) + (c.cpu_left[rows] - pod.milli_cpu) / c.cpu_capacity[rows]),
    "cpu": lambda c, rows, gpu_left, pod: np.lexsort((gpu_left, c.cpu_left[rows]))[0],
}


def hindsight(nodes, pods, seed: int, tune: float, splits: NumaSplits, order, fit: str = "gpu") -> float:
    """Allocation % of the stream's pods packed offline in ``order``, each on the node ``fit``
    names (``FITS``)."""
    stream = fgd_protocol.arrivals(pods, nodes, np.random.default_rng(seed), tune)
    cluster = TraceCluster(nodes, splits, np.arange(len(nodes)))
    tables = Tables(cluster.layouts, POLICIES["aligned"])
    used = 0
    for pod in sorted(stream, key=order):
        fits = cluster.fits(pod)
        whole = pod.gpus and pod.milli_per_gpu == MILLI
        if whole:
            fits &= tables.lookup("fits", cluster.layout_id, cluster.free_mask, pod.gpus)
        rows = np.flatnonzero(fits)
        if not len(rows):
            continue
        gpu_left = cluster.left[rows].sum(axis=1) - pod.gpu_milli
        row = int(rows[FITS[fit](cluster, rows, gpu_left, pod)])
        if whole:
            devices = _close(cluster, row, pod.gpus)
        elif pod.gpus:
            left = cluster.left[row]
            devices = (int(np.argmin(np.where(left >= pod.milli_per_gpu, left, MILLI + 1))),)
        else:
            devices = ()
        cluster.place(row, pod, devices)
        used += pod.gpu_milli
    return round(100 * used / (MILLI * cluster.total_gpus), 2)


def _close(cluster: TraceCluster, row: int, gpus: int) -> tuple[int, ...]:
    from gpupair.decide.defrag.close_sets import close_set
    layout = cluster.layouts[int(cluster.layout_id[row])]
    return close_set(layout, tuple(int(v) for v in cluster.left[row][:layout.size]), gpus, MILLI)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fixtures", type=Path, default=FIXTURES)
    parser.add_argument("--openb", type=Path, default=OPENB)
    parser.add_argument("--traces", default=",".join(GOAL_TRACES), help="workloads, comma-separated, or all")
    parser.add_argument("--budgets", default=BUDGETS, help="move budgets, % of arrived pods")
    parser.add_argument("--seeds", default="42")
    parser.add_argument("--policy", default="kube-default")
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    try:
        return run(args)
    except ValueError as error:
        print(f"defrag.py: error: {error}", file=sys.stderr)
        return 2


def run(args) -> int:
    seeds = parse_seeds(args.seeds)
    found = pod_lists([args.fixtures, args.openb])
    traces = list(found) if args.traces == "all" else [t for t in args.traces.split(",") if t]
    unknown = [t for t in traces if t not in found]
    if unknown or not traces:
        raise UsageError(f"--traces: no pod list for {', '.join(unknown) or '(none named)'}; found: {', '.join(found)}")
    try:
        budgets = [float(b) for b in args.budgets.split(",") if b.strip()]
    except ValueError:
        raise UsageError(f"--budgets: {args.budgets!r} is not a list of percentages") from None
    if not budgets or any(b < 0 or b > 100 for b in budgets):
        raise UsageError("--budgets: percentages of arrived pods, 0-100")
    nodes = read_nodes(args.fixtures / "openb_node_list_gpu_node.csv")
    splits = NumaSplits()
    started = time.monotonic()
    everything = []
    print(f"## Allocation against moves: {args.policy} + gpupair (shipped), seeds {args.seeds}\n")
    print("| workload | hindsight @130 (largest first / best order) | "
          + " | ".join(f"{b:g}%: @100 / @130 (moves)" for b in budgets) + " | best less hindsight |")
    print("|---|---|" + "---|" * (len(budgets) + 1))
    for trace in traces:
        pods = read_pods(found[trace])
        packed = {f"{name}, {fit}": mean(hindsight(nodes, pods, seed, 1.3, splits, key, fit) for seed in seeds)
                  for name, key in ORDERS.items() for fit in FITS}
        configs = [ReplayConfig(args.policy, True, seed, move_budget=b / 100) for b in budgets for seed in seeds]
        runs = run_all(nodes, pods, configs, args.workers)
        cells = []
        for b in budgets:
            mine = [r for r, c in zip(runs, configs) if c.move_budget == b / 100]
            cells.append(f"{mean(r.allocation[100] for r in mine):.2f} / {mean(r.allocation[130] for r in mine):.2f} "
                         f"({mean(r.moves for r in mine):.0f}, {100 * mean(r.moves / r.arrived_pods for r in mine):.2f}%)")
            everything += [{"trace": trace, "budget": b, **r.as_json()} for r in mine]
        best = max(packed.values())
        top = max(mean(r.allocation[130] for r, c in zip(runs, configs) if c.move_budget == b / 100) for b in budgets)
        print(f"| {trace} | {packed['GPUs, then share, gpu']:.2f} / {best:.2f} | " + " | ".join(cells)
              + f" | {top - best:+.2f} |")
        everything.append({"trace": trace, "hindsight": packed})
        sys.stdout.flush()
    print(f"\n{time.monotonic() - started:.0f} s")
    if args.json:
        args.json.write_text(json.dumps(everything, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
