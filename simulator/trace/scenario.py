"""`gpupair simulate --scenario trace`: a node list and a pod list in the openb CSV format,
replayed in FGD's protocol under each policy, with and without gpupair, on each device path."""

from __future__ import annotations

import argparse
import sys
from collections import Counter

from gpupair.command.flags import UsageError

SCORES = ("shipped", "whole-gpus", "best-fit", "filter")  # replay.SCORE_LABELS
# What each configuration's row is, printed under the table for the rows it has.
LEGEND = {"shipped": "gpupair: the extender as deployed (--score fragmentation, every pod, each GPU's share known)",
          "whole-gpus": "gpupair-whole-gpus: the same with shares not reported (a shared GPU looks taken)",
          "best-fit": "gpupair-bestfit: --score best-fit, GPU pods only",
          "filter": "gpupair-filter: the GPU entry alone, no score"}


def parse_percentage(text: str) -> int | None:
    """``--percentage-of-nodes-to-score``: None when unset (every node), else 0-100."""
    if not str(text).strip():
        return None
    try:
        value = int(str(text).strip())
    except ValueError:
        raise ValueError(f"--percentage-of-nodes-to-score: {text!r} is not a whole number") from None
    if not 0 <= value <= 100:
        raise ValueError(f"--percentage-of-nodes-to-score: {value} is not in 0-100")
    return value


def run(args: argparse.Namespace, paths: list[str]) -> int:
    from tqdm import tqdm

    from gpupair.command.outputs import check_output
    from gpupair.simulator.output import check_plotting, text_table, write_summary
    from gpupair.simulator.trace import replay_output
    from gpupair.simulator.trace.files import read_nodes, read_pods, workload_name
    from gpupair.simulator.trace.numa import NumaSplits
    from gpupair.simulator.trace.models.scoring_policies import make_policy
    from gpupair.simulator.trace.replay import ReplayConfig
    from gpupair.simulator.trace.runs import parse_seeds, run_all

    if not args.trace_nodes or not args.trace_pods:
        raise UsageError("--scenario trace needs --trace-nodes FILE and --trace-pods FILE (the openb CSV format)")
    try:
        splits = NumaSplits.parse(args.numa_split)
        seeds = parse_seeds(args.seeds)
        policies = [p.strip() for p in args.policies.split(",") if p.strip()]
        for name in policies:
            make_policy(name)
        scores = [s.strip() for s in args.gpupair_scores.split(",") if s.strip()]
        unknown = [s for s in scores if s not in SCORES]
        if unknown:
            raise ValueError(f"--gpupair-scores: unknown {', '.join(unknown)}; known: {', '.join(SCORES)}")
        percentage = parse_percentage(args.percentage_of_nodes_to_score)
    except ValueError as error:
        raise UsageError(str(error)) from None
    if not policies:
        raise UsageError("--policies: name at least one policy")
    as_json = args.output == "json"
    tsv = None if as_json else check_output(args.output, "--output", (".tsv",))
    plot = check_output(args.plot, "--plot", (".png",)) if args.plot else None
    if plot is not None:
        check_plotting()
    nodes, pods = read_nodes(args.trace_nodes), read_pods(args.trace_pods)

    configs = [ReplayConfig(policy, gpupair, seed, path, args.plugin, args.tune, splits, args.policy_weight, score,
                            percentage, args.move_budget / 100)
               for path in paths for policy in policies
               for gpupair, score in ((False, SCORES[0]), *((True, s) for s in scores))
               for seed in seeds]
    single = len(configs) == 1 or args.workers == 1  # then the bar counts pods, else runs
    bar = tqdm(total=None if single else len(configs), desc="pods" if single else "runs",
               disable=None if args.progress else True, file=sys.stderr, leave=False)
    runs = run_all(nodes, pods, configs, args.workers, bar.update)
    bar.close()

    sizes = Counter(node.gpus for node in nodes)
    about = {
        "nodes": args.trace_nodes, "pods": args.trace_pods, "node_count": len(nodes),
        "gpus": sum(node.gpus for node in nodes), "pod_count": len(pods), "tune": args.tune,
        "numa_split": {str(n): "+".join(map(str, splits.split(n))) for n in sorted(sizes, reverse=True) if n},
        "plugin": args.plugin, "policy_weight": args.policy_weight, "seeds": seeds,
        "percentage_of_nodes_to_score": percentage, "move_budget_percent": args.move_budget,
    }
    if as_json:
        print(replay_output.document(about, runs))
        return 0
    shape = ", ".join(f"{count} x {n} GPU" for n, count in sorted(sizes.items(), reverse=True))
    print(f"trace: {len(nodes)} nodes ({shape}), {about['gpus']} GPUs; {len(pods)} pods, sampled to "
          f"{100 * args.tune:g}% of the GPUs (FGD's protocol); NUMA: {splits.describe(list(sizes))}; "
          f"device plugin: {args.plugin}; policy plugin weight {args.policy_weight}; seeds {args.seeds}"
          + ("" if percentage is None else f"; percentageOfNodesToScore {percentage}")
          + (f"; move budget {args.move_budget:g}% of arrived pods" if args.move_budget else ""))
    header, rows = replay_output.table(runs)
    print(text_table(header, rows))
    written = [write_summary(tsv, (header, rows), "trace.summary"),
               write_summary(tsv, replay_output.run_rows(runs), "trace.runs")]
    legend = ["alloc@N%: GPUs allocated when N% of the cluster's GPUs have arrived as demand (FGD's figure 9a)",
              *(LEGEND[score] for score in dict.fromkeys(scores))]
    print("; ".join(legend) + " (docs/simulate.md)")
    print("TSV: " + ", ".join(map(str, written)))
    if plot is not None:
        replay_output.plot(plot, runs, workload_name(args.trace_pods))
        print(f"plot: {plot}")
    return 0
