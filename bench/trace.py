"""The trace comparison: FGD's six policies against FGD's published results, and gpupair on
kube-scheduler's default profile, FGD and BestFit, on Alibaba's GPU trace.

Fidelity: each of the six over ten seeds (42-51, as FGD ran them), allocation at 90, 100, 110
and 130% arrival against the ten-seed mean FGD published (``fgd_published_allocation.csv``,
its ``analysis_allo_discrete.csv``), with the gap and the published seeds' spread.

Goal: kube-default, FGD and BestFit alone and with gpupair under each of --goal-scores (as
shipped, with the fragmentation score), on default and multigpu50; allocation, multi-GPU pods on
the fewest NUMA nodes, and the published FGD figure beside them.

Run: .venv/bin/python bench/trace.py [--fixtures DIR] [--seeds 42-51] [--traces default,...]
     [--skip-fidelity] [--skip-goal] [--goal-policies ...] [--goal-scores shipped,fragmentation]
     [--path device-plugin|dra]
Prints markdown (docs/simulate.md quotes it) and writes every run as JSON with --json FILE.
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
import time
from pathlib import Path
from statistics import mean, pstdev

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from gpupair.simulator.trace.files import read_nodes, read_pods  # noqa: E402
from gpupair.simulator.trace.replay import SCORE_LABELS, ReplayConfig  # noqa: E402
from gpupair.simulator.trace.runs import parse_seeds, run_all  # noqa: E402

FIXTURES = Path(__file__).resolve().parents[2] / "shared" / "fixtures" / "alibaba-gpu-v2023"
SIX = {"random": "01-Random", "dotprod": "02-DotProd", "gpuclustering": "03-GpuClustering",
       "gpupacking": "04-GpuPacking", "bestfit": "05-BestFit", "fgd": "06-FGD"}
POINTS = (90, 100, 110, 130)
GOAL_TRACES = ("default", "multigpu50")
GOAL_POLICIES = ("kube-default", "fgd", "bestfit")


def published(path: Path) -> dict[tuple[str, str], list[dict[int, float]]]:
    table: dict[tuple[str, str], list[dict[int, float]]] = {}
    with path.open() as handle:
        for row in csv.DictReader(handle):
            workload = row["workload"].removeprefix("openb_pod_list_")
            table.setdefault((workload, row["sc_policy"]), []).append({p: float(row[str(p)]) for p in POINTS})
    return table


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fixtures", type=Path, default=FIXTURES)
    parser.add_argument("--seeds", default="42-51")
    parser.add_argument("--traces", default="default,multigpu20,multigpu50")
    parser.add_argument("--skip-goal", action="store_true")
    parser.add_argument("--skip-fidelity", action="store_true")
    parser.add_argument("--goal-policies", default=",".join(GOAL_POLICIES))
    parser.add_argument("--goal-scores", default="shipped,fragmentation")
    parser.add_argument("--path", default="device-plugin", choices=("device-plugin", "dra"))
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    seeds = parse_seeds(args.seeds)
    traces = [t for t in args.traces.split(",") if t]
    nodes = read_nodes(args.fixtures / "openb_node_list_gpu_node.csv")
    reference = published(args.fixtures / "fgd_published_allocation.csv")
    everything = []
    started = time.monotonic()

    if not args.skip_fidelity:
        everything += fidelity(args, nodes, reference, seeds, traces)
    if not args.skip_goal:
        everything += goal(args, nodes, reference, seeds, traces)
    print(f"\n{len(everything)} runs in {time.monotonic() - started:.0f} s")
    if args.json:
        args.json.write_text(json.dumps(everything, indent=1))
    return 0


def fidelity(args, nodes, reference, seeds, traces) -> list[dict]:
    everything = []
    print(f"## Fidelity: the six policies, seeds {args.seeds}, against FGD's published ten-seed means\n")
    print("| trace | policy | " + " | ".join(f"@{p}: ours / published (gap)" for p in POINTS) + " | published sd@130 |")
    print("|---|---|" + "---|" * (len(POINTS) + 1))
    worst = 0.0
    for trace in traces:
        pods = read_pods(args.fixtures / f"openb_pod_list_{trace}.csv")
        configs = [ReplayConfig(policy, False, seed, plugin="naive") for policy in SIX for seed in seeds]
        runs = run_all(nodes, pods, configs)
        everything += [{"trace": trace, **run.as_json()} for run in runs]
        for policy, name in SIX.items():
            mine = [run for run in runs if run.policy.lower() == policy]
            theirs = reference.get((trace, name), [])
            cells = []
            for point in POINTS:
                ours = mean(run.allocation[point] for run in mine)
                if theirs:
                    pub = mean(r[point] for r in theirs)
                    gap = ours - pub
                    worst = max(worst, abs(gap)) if policy not in ("gpuclustering", "gpupacking") else worst
                    cells.append(f"{ours:.2f} / {pub:.2f} ({gap:+.2f})")
                else:
                    cells.append(f"{ours:.2f} / -")
            spread = f"{pstdev(r[130] for r in theirs):.2f}" if theirs else "-"
            print(f"| {trace} | {name[3:]} | " + " | ".join(cells) + f" | {spread} |")
        sys.stdout.flush()
    print(f"\nLargest gap of Random, DotProd, BestFit and FGD: {worst:.2f} points.\n")
    return everything


def least_gain(runs, alone) -> float:
    """The smallest difference, over arrival 1-130%, between the runs' mean allocation and the
    policy alone's (negative: below it somewhere)."""
    def at(group, point):
        return mean(v for r in group if (v := r.allocation.get(point)) is not None)
    return min(at(runs, p) - at(alone, p) for p in range(1, 131))


def goal(args, nodes, reference, seeds, traces) -> list[dict]:
    everything = []
    policies = [p for p in args.goal_policies.split(",") if p]
    variants = [(False, "shipped")] * ("shipped" in args.goal_scores.split(",")) + [
        (True, score) for score in args.goal_scores.split(",") if score]
    print(f"## gpupair beside FGD's published result, seeds {args.seeds}, {args.path} path\n")
    print("| trace | policy | gpupair | @100 | @130 | published FGD @100 / @130 | multi-GPU on fewest NUMA nodes "
          "| least gain over the policy alone, any arrival % |")
    print("|---|---|---|---|---|---|---|---|")
    for trace in (t for t in GOAL_TRACES if t in traces):
        pods = read_pods(args.fixtures / f"openb_pod_list_{trace}.csv")
        configs = [ReplayConfig(policy, gpupair, seed, args.path, score=score) for policy in policies
                   for gpupair, score in variants for seed in seeds]
        runs = run_all(nodes, pods, configs)
        everything += [{"trace": trace, **run.as_json()} for run in runs]
        fgd = reference.get((trace, "06-FGD"), [])
        pub = " / ".join(f"{mean(r[p] for r in fgd):.2f}" for p in (100, 130)) if fgd else "-"
        for policy in policies:
            for gpupair, score in variants:
                mine = [r for r in runs if r.policy.lower() == policy and r.gpupair == gpupair
                        and (not gpupair or r.score == score)]
                placed = sum(r.multi_gpu_placed for r in mine)
                local = sum(r.multi_gpu_numa_local for r in mine)
                label = SCORE_LABELS[score] if gpupair else "-"
                alone = [r for r in runs if r.policy.lower() == policy and not r.gpupair]
                least = (f"{least_gain(mine, alone):+.2f}" if gpupair and alone else "-")
                print(f"| {trace} | {mine[0].policy} | {label} | {mean(r.allocation[100] for r in mine):.2f} | "
                      f"{mean(r.allocation[130] for r in mine):.2f} | {pub} | {local} of {placed} | {least} |")
        sys.stdout.flush()
    return everything


if __name__ == "__main__":
    raise SystemExit(main())
