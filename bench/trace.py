"""The trace comparison: FGD's six policies against FGD's published results, gpupair on
kube-scheduler's default profile, FGD and BestFit, and the floor gpupair must hold, on Alibaba's
GPU trace.

Pod lists are found by name (``openb_pod_list_<workload>.csv``) in the shared fixtures first, then
in bench/openb; FGD's published figures are its full result file,
bench/openb/fgd_published_allocation_all.csv (all 17 workloads, seeds 42-51).

Fidelity: each of the six over ten seeds (42-51, as FGD ran them), allocation at 90, 100, 110
and 130% arrival against the ten-seed mean FGD published (its ``analysis_allo_discrete.csv``),
with the gap and the published seeds' spread.

Goal: kube-default, FGD and BestFit alone and with gpupair under each of --goal-scores (as
shipped, and with shares not reported), on default and multigpu50; allocation, multi-GPU pods on
the fewest NUMA nodes, and the published FGD figure beside them.

Floor (--floor; gpupair#44 item 3): on every workload found (or --traces), kube-default alone and
with gpupair under each of --goal-scores (default: shipped), one table a workload: allocation at
100 and 130% arrival, FGD's published ten-seed mean there and the gap (with its standard error
where the same seeds ran on both sides: the gap per seed, whose spread says how far a ten-seed
mean can be trusted to tell a workload above FGD from below it), the worst gap to
kube-default alone at any arrival from 50 to 130% and where, multi-GPU pods on the fewest NUMA
nodes; then which workloads pass each check. Where FGD published nothing (a workload of our own),
FGD is replayed over the same seeds and stands in, marked "replayed".

A fleet of another shape (--nodes FILE): every table against FGD replayed over the same seeds on
that fleet.

Run: .venv/bin/python bench/trace.py [--fixtures DIR] [--nodes FILE] [--seeds 42-51] [--traces default,...|all]
     [--skip-fidelity] [--skip-goal] [--floor] [--goal-policies ...] [--goal-scores shipped,...]
     [--path device-plugin|dra] [--workers N] [--json FILE]
Prints markdown (docs/simulate.md quotes it) and writes every run as JSON with --json FILE.
Bad input (an unknown workload, score or policy, a file that cannot be read) is one line, exit 2.
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
import time
from pathlib import Path
from statistics import mean, pstdev, stdev

# After the installed packages: gpupair comes from the install (the checkout's gpupair/ holds
# the core alone), tests/ and bench/ from the checkout.
sys.path.append(str(Path(__file__).resolve().parents[1]))

from gpupair.command.flags import UsageError  # noqa: E402
from gpupair.command.cli import EXIT_INTERRUPTED  # noqa: E402
from gpupair.simulator.trace.files import read_nodes, read_pods, workload_name  # noqa: E402
from gpupair.simulator.trace.models.scoring_policies import make_policy  # noqa: E402
from gpupair.simulator.trace.replay import SCORE_LABELS, ReplayConfig  # noqa: E402
from gpupair.simulator.trace.runs import parse_seeds, run_all  # noqa: E402

FIXTURES = Path(__file__).resolve().parents[2] / "shared" / "fixtures" / "alibaba-gpu-v2023"
OPENB = Path(__file__).resolve().parent / "openb"
PUBLISHED = OPENB / "fgd_published_allocation_all.csv"
# FGD's order (its figures and result file); workloads of our own follow by name.
FGD_WORKLOADS = ("default", "multigpu20", "multigpu30", "multigpu40", "multigpu50", "gpushare40", "gpushare60",
                 "gpushare80", "gpushare100", "gpuspec10", "gpuspec20", "gpuspec25", "gpuspec33", "cpu050",
                 "cpu100", "cpu200", "cpu250")
SIX = {"random": "01-Random", "dotprod": "02-DotProd", "gpuclustering": "03-GpuClustering",
       "gpupacking": "04-GpuPacking", "bestfit": "05-BestFit", "fgd": "06-FGD"}
POINTS = (90, 100, 110, 130)
GOAL_TRACES = ("default", "multigpu50")
GOAL_POLICIES = ("kube-default", "fgd", "bestfit")
FLOOR_BELOW, FGD_WITHIN, FLOOR_FROM = 0.5, 0.3, 50  # gpupair#52 item 5: points, points, arrival %


def published(path: Path) -> dict[tuple[str, str], dict[int, dict[int, float]]]:
    """(workload, policy) -> seed -> that seed's allocation by arrival %, from FGD's result file."""
    table: dict[tuple[str, str], dict[int, dict[int, float]]] = {}
    try:
        with path.open() as handle:
            for row in csv.DictReader(handle):
                workload = row["workload"].removeprefix("openb_pod_list_")
                table.setdefault((workload, row["sc_policy"]), {})[int(row["seed"])] = {
                    int(k): float(v) for k, v in row.items() if k.isdigit() and v}
    except (OSError, KeyError, ValueError) as error:
        raise UsageError(f"{path}: cannot read FGD's result file: {error}") from None
    return table


def paired_error(mine: dict[int, dict[int, float]], theirs: dict[int, dict[int, float]], point: int) -> float | None:
    """The standard error of the mean gap at an arrival %, seed by seed (each seed's arrivals are
    the same pods in the same order for both, so the gap varies less than either figure). None
    unless both ran the same two or more seeds: against FGD's published ten, a run of fewer seeds
    shows its gap to their mean, which no per-seed spread describes."""
    if set(mine) != set(theirs) or len(mine) < 2:
        return None
    gaps = [mine[seed][point] - theirs[seed][point] for seed in mine
            if mine[seed].get(point) is not None and theirs[seed].get(point) is not None]
    return stdev(gaps) / len(gaps) ** 0.5 if len(gaps) >= 2 else None


def pod_lists(folders: list[Path]) -> dict[str, Path]:
    """Workload -> its pod list, the first folder that holds it winning; FGD's order, then ours."""
    found: dict[str, Path] = {}
    for folder in folders:
        for path in sorted(folder.glob("openb_pod_list_*.csv")):
            found.setdefault(workload_name(path), path)
    order = {name: i for i, name in enumerate(FGD_WORKLOADS)}
    return dict(sorted(found.items(), key=lambda item: (order.get(item[0], len(order)), item[0])))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fixtures", type=Path, default=FIXTURES,
                        help="the node list, and the pod lists looked for first")
    parser.add_argument("--openb", type=Path, default=OPENB, help="the pod lists looked for second")
    parser.add_argument("--published", type=Path, default=PUBLISHED, help="FGD's full result file")
    parser.add_argument("--nodes", type=Path, help="a node list other than the fixtures' openb fleet (such as "
                        "bench/openb/openb_node_list_split30.csv); FGD is then replayed on it, never its "
                        "published figures")
    parser.add_argument("--seeds", default="42-51")
    parser.add_argument("--traces", help="workloads, comma-separated, or all (default: all with --floor, "
                        "else default,multigpu20,multigpu50)")
    parser.add_argument("--skip-goal", action="store_true")
    parser.add_argument("--skip-fidelity", action="store_true")
    parser.add_argument("--floor", action="store_true", help="the floor of gpupair#44 item 3, and nothing else")
    parser.add_argument("--goal-policies", default=",".join(GOAL_POLICIES))
    parser.add_argument("--goal-scores", help="gpupair's scores, comma-separated (default: shipped with --floor, "
                        "else shipped,whole-gpus)")
    parser.add_argument("--path", default="device-plugin", choices=("device-plugin", "dra"))
    parser.add_argument("--workers", type=int, default=0, help="replays at once (0: one per core)")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    try:
        return run(args)
    except ValueError as error:  # UsageError and TraceFileError are ValueErrors
        print(f"trace.py: error: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # the workers ignore SIGINT and go with the pool
        print("trace.py: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED


def run(args) -> int:
    seeds = parse_seeds(args.seeds)
    found = pod_lists([args.fixtures, args.openb])
    traces = [t for t in (args.traces or ("all" if args.floor else "default,multigpu20,multigpu50")).split(",") if t]
    traces = list(found) if traces == ["all"] else traces
    unknown = [t for t in traces if t not in found]
    if unknown or not traces:
        raise UsageError(f"--traces: no pod list for {', '.join(unknown) or '(none named)'} in {args.fixtures} "
                         f"or {args.openb}; found: {', '.join(found) or 'none'}")
    args.goal_scores = args.goal_scores or ("shipped" if args.floor else "shipped,whole-gpus")
    scores = [s for s in args.goal_scores.split(",") if s]
    wrong = [s for s in scores if s not in SCORE_LABELS]
    if wrong or not scores:
        raise UsageError(f"--goal-scores: unknown {', '.join(wrong) or '(none named)'}; "
                         f"known: {', '.join(SCORE_LABELS)}")
    try:
        for policy in (p for p in args.goal_policies.split(",") if p):
            make_policy(policy)
    except ValueError as error:
        raise UsageError(str(error).replace("--policies", "--goal-policies")) from None
    if args.workers < 0:
        raise UsageError("--workers: 0 (one per core) or more")
    nodes = read_nodes(args.nodes or args.fixtures / "openb_node_list_gpu_node.csv")
    reference = {} if args.nodes else published(args.published)  # FGD published the openb fleet's only
    pods_of = {trace: read_pods(found[trace]) for trace in traces}
    everything = []
    started = time.monotonic()

    if args.floor:
        everything += floor(args, nodes, reference, seeds, pods_of, scores)
    else:
        if not args.skip_fidelity:
            everything += fidelity(args, nodes, reference, seeds, pods_of)
        if not args.skip_goal:
            everything += goal(args, nodes, reference, seeds, pods_of)
    print(f"\n{len(everything)} runs in {time.monotonic() - started:.0f} s, "
          f"{sum(run['seconds'] for run in everything):.0f} s of CPU")
    if args.json:
        args.json.write_text(json.dumps(everything, indent=1))
    return 0


def fidelity(args, nodes, reference, seeds, pods_of) -> list[dict]:
    everything = []
    print(f"## Fidelity: the six policies, seeds {args.seeds}, against FGD's published ten-seed means\n")
    print("| trace | policy | " + " | ".join(f"@{p}: ours / published (gap)" for p in POINTS) + " | published sd@130 |")
    print("|---|---|" + "---|" * (len(POINTS) + 1))
    worst = 0.0
    for trace, pods in pods_of.items():
        configs = [ReplayConfig(policy, False, seed, plugin="naive") for policy in SIX for seed in seeds]
        runs = run_all(nodes, pods, configs, args.workers)
        everything += [{"trace": trace, **run.as_json()} for run in runs]
        for policy, name in SIX.items():
            mine = [run for run in runs if run.policy.lower() == policy]
            theirs = list(reference.get((trace, name), {}).values())
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


def mean_at(runs, point: int) -> float | None:
    """The runs' mean allocation at an arrival %, over those that have the point."""
    values = [v for r in runs if (v := r.allocation.get(point)) is not None]
    return mean(values) if values else None


def least_gain(runs, alone, points=range(1, 131)) -> tuple[float, int]:
    """The smallest difference, over ``points`` (arrival %), between the runs' mean allocation
    and the policy alone's (negative: below it somewhere), and where it is."""
    gaps = [(here - there, p) for p in points
            if (here := mean_at(runs, p)) is not None and (there := mean_at(alone, p)) is not None]
    return min(gaps, key=lambda gap: gap[0])


def goal(args, nodes, reference, seeds, pods_of) -> list[dict]:
    everything = []
    policies = [p for p in args.goal_policies.split(",") if p]
    variants = [(False, "shipped")] * ("shipped" in args.goal_scores.split(",")) + [
        (True, score) for score in args.goal_scores.split(",") if score]
    print(f"## gpupair beside FGD's published result, seeds {args.seeds}, {args.path} path\n")
    print("| trace | policy | gpupair | @100 | @130 | published FGD @100 / @130 | multi-GPU on fewest NUMA nodes "
          "| least gain over the policy alone, any arrival % |")
    print("|---|---|---|---|---|---|---|---|")
    for trace in (t for t in GOAL_TRACES if t in pods_of):
        configs = [ReplayConfig(policy, gpupair, seed, args.path, score=score) for policy in policies
                   for gpupair, score in variants for seed in seeds]
        runs = run_all(nodes, pods_of[trace], configs, args.workers)
        everything += [{"trace": trace, **run.as_json()} for run in runs]
        fgd = list(reference.get((trace, "06-FGD"), {}).values())
        pub = " / ".join(f"{mean(r[p] for r in fgd):.2f}" for p in (100, 130)) if fgd else "-"
        for policy in policies:
            for gpupair, score in variants:
                mine = [r for r in runs if r.policy.lower() == policy and r.gpupair == gpupair
                        and (not gpupair or r.score == score)]
                placed = sum(r.multi_gpu_placed for r in mine)
                local = sum(r.multi_gpu_numa_local for r in mine)
                label = SCORE_LABELS[score] if gpupair else "-"
                alone = [r for r in runs if r.policy.lower() == policy and not r.gpupair]
                least = (f"{least_gain(mine, alone)[0]:+.2f}" if gpupair and alone else "-")
                print(f"| {trace} | {mine[0].policy} | {label} | {mean(r.allocation[100] for r in mine):.2f} | "
                      f"{mean(r.allocation[130] for r in mine):.2f} | {pub} | {local} of {placed} | {least} |")
        sys.stdout.flush()
    return everything


def floor(args, nodes, reference, seeds, pods_of, scores) -> list[dict]:
    """gpupair#44 item 3 on each workload: kube-default alone and with gpupair under each score."""
    everything = []
    checks: dict[str, dict[str, list[str]]] = {score: {} for score in scores}
    print(f"## The floor: kube-default with gpupair, seeds {args.seeds}, {args.path} path\n")
    print(f"FGD: its published ten-seed mean, or replayed over the same seeds where it published none. "
          f"Worst gap: the least, at any arrival from {FLOOR_FROM} to 130%, of the mean allocation less "
          f"kube-default alone's (at that arrival %).")
    for trace, pods in pods_of.items():
        theirs = reference.get((trace, "06-FGD"), {})
        configs = [ReplayConfig("kube-default", False, seed, args.path) for seed in seeds]
        configs += [ReplayConfig("kube-default", True, seed, args.path, score=score) for score in scores
                    for seed in seeds]
        configs += [] if theirs else [ReplayConfig("fgd", False, seed, args.path) for seed in seeds]
        runs = run_all(nodes, pods, configs, args.workers)
        everything += [{"trace": trace, **run.as_json()} for run in runs]
        alone = [r for r in runs if r.policy == "kube-default" and not r.gpupair]
        fgd = theirs or {r.seed: r.allocation for r in runs if r.policy == "FGD"}
        fgd_at = {p: mean(r[p] for r in fgd.values()) for p in (100, 130)}
        kind = "published" if theirs else "replayed"
        print(f"\n### {trace}\n")
        print(f"| kube-default | @100 | @130 | FGD {kind} @100 / @130 (gap ± its standard error) | worst gap to alone, "
              f"{FLOOR_FROM}-130% | multi-GPU on fewest NUMA nodes |")
        print("|---|---|---|---|---|---|")
        for score in (None, *scores):
            mine = alone if score is None else [r for r in runs if r.gpupair and r.score == score]
            at = {p: mean_at(mine, p) for p in (100, 130)}
            gap = {p: at[p] - fgd_at[p] for p in (100, 130)}
            by_seed = {r.seed: r.allocation for r in mine}
            shown = {p: f"{gap[p]:+.2f}" + ("" if (error := paired_error(by_seed, fgd, p)) is None
                                            else f" ± {error:.2f}") for p in (100, 130)}
            placed, local = sum(r.multi_gpu_placed for r in mine), sum(r.multi_gpu_numa_local for r in mine)
            worst = "-"
            if score is not None:
                least, where = least_gain(mine, alone, range(FLOOR_FROM, 131))
                worst = f"{least:+.2f} @{where}"
                record = checks[score]
                verdicts = {"floor": least >= -FLOOR_BELOW,
                            "fgd": min(gap.values()) >= -FGD_WITHIN,
                            "stretch": min(gap.values()) >= 0,
                            "numa": local == placed}
                for check, ok in verdicts.items():
                    record.setdefault(check, [])
                    record.setdefault(check + " failed", [])
                    if ok:
                        record[check].append(trace)
                    else:
                        detail = {"floor": worst, "fgd": f"{shown[100]} / {shown[130]}",
                                  "stretch": f"{shown[100]} / {shown[130]}",
                                  "numa": f"{local} of {placed}"}[check]
                        record[check + " failed"].append(f"{trace} ({detail})")
            label = "alone" if score is None else f"+ {SCORE_LABELS[score]} ({score})"
            print(f"| {label} | {at[100]:.2f} | {at[130]:.2f} | {fgd_at[100]:.2f} / {fgd_at[130]:.2f} "
                  f"({shown[100]} / {shown[130]}) | {worst} | {local} of {placed} |")
        sys.stdout.flush()
    names = {"floor": f"never more than {FLOOR_BELOW} below kube-default alone ({FLOOR_FROM}-130%)",
             "fgd": f"within {FGD_WITHIN:g} of FGD at 100 and 130%",
             "stretch": "at or above FGD at 100 and 130% (the goal: 14 of 18; the stretch: all)",
             "numa": "every multi-GPU pod on the fewest NUMA nodes"}
    print(f"\n### Which workloads pass ({len(pods_of)} workloads)\n")
    for score, record in checks.items():
        for check, name in names.items():
            passed, failed = record[check], record[check + " failed"]
            print(f"- {SCORE_LABELS[score]} ({score}), {name}: {len(passed)} of {len(pods_of)}"
                  + (f"; fails on {', '.join(failed)}" if failed else ""))
    return everything


if __name__ == "__main__":
    raise SystemExit(main())
