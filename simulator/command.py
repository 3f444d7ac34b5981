"""`gpupair simulate`: compare placement policies on simulated nodes, no cluster needed."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from gpupair.service import add_flag


def configure(parser: argparse.ArgumentParser) -> None:
    add_flag(parser, "--scenario", "seed", "seed: replay the field report; fleet: many nodes over time",
             choices=["seed", "fleet"])
    add_flag(parser, "--seed", 1, "random seed; the same seed gives the same results")
    add_flag(parser, "--configs", "default+naive,default+aligned,gpupair+aligned",
             "comma-separated SCHEDULER+PLUGIN pairs (schedulers: default, gpupair; plugins: naive, aligned)")
    add_flag(parser, "--topology", "", "node shape from a real `nvidia-smi topo -m` output or gpupair topology JSON "
             "(default: the field report's 8-GPU node)")
    add_flag(parser, "--nodes", 0, "number of nodes (default: 4 for seed, 64 for fleet)")
    add_flag(parser, "--runs", 2, "seed scenario: runs per configuration")
    add_flag(parser, "--rounds", 10, "seed scenario: rounds per run")
    add_flag(parser, "--pods-per-round", 2, "seed scenario: pods created together each round")
    add_flag(parser, "--gpus", 2, "seed scenario: GPUs each pod asks for")
    add_flag(parser, "--steps", 400, "fleet scenario: time steps")
    add_flag(parser, "--arrivals", 5.5, "fleet scenario: mean pod arrivals per step")
    add_flag(parser, "--output", "gpupair-simulate.tsv",
             "seed scenario: TSV path; one file per configuration, named <stem>.<configuration>.tsv")
    add_flag(parser, "--verdicts", "", "seed scenario: also write each pod's verdict annotations as JSON lines here")
    add_flag(parser, "--plot", "", "draw the comparison into this PNG file")
    add_flag(parser, "--progress", True, "show a progress bar on stderr when it is a terminal")


def run(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    from gpupair.smi_topo import TopoParseError
    from gpupair.report import ReportError
    from simulator import output
    from simulator.configs import Config
    from simulator.fleet import FleetScenario, run_fleet
    from simulator.seed_scenario import SeedScenario, run_seed_scenario
    from simulator.shapes import layout_from_file, seed_layout

    try:
        configs = [Config.parse(text.strip()) for text in args.configs.split(",") if text.strip()]
        layout = layout_from_file(args.topology) if args.topology else seed_layout()
    except (ValueError, OSError, TopoParseError, ReportError) as exc:
        print(f"gpupair simulate: {exc}", file=sys.stderr)
        return 2

    if args.scenario == "seed":
        scenario = SeedScenario(
            nodes=args.nodes or 4,
            runs=args.runs,
            rounds=args.rounds,
            pods_per_round=args.pods_per_round,
            gpus_per_pod=args.gpus,
        )
        bar = tqdm(total=len(configs) * scenario.runs * scenario.rounds, desc="rounds",
                   disable=None if args.progress else True, file=sys.stderr, leave=False)
        results = [run_seed_scenario(c, layout, scenario, args.seed, bar.update) for c in configs]
        bar.close()
        written = output.write_tsv(Path(args.output), results)
        print(f"{scenario.nodes} nodes x {layout.size} GPUs; {scenario.runs} runs x {scenario.rounds} rounds x "
              f"{scenario.pods_per_round} pods x {scenario.gpus_per_pod} GPUs per configuration; seed {args.seed}")
        print(output.seed_summary(results))
        print("TSV: " + ", ".join(str(p) for p in written))
        if args.verdicts:
            output.write_verdicts(Path(args.verdicts), results)
            print(f"verdict annotations: {args.verdicts}")
        if args.plot:
            output.plot_seed(Path(args.plot), results)
            print(f"plot: {args.plot}")
        return 0

    scenario = FleetScenario(nodes=args.nodes or 64, steps=args.steps, arrivals_per_step=args.arrivals)
    bar = tqdm(total=len(configs) * scenario.steps, desc="steps", disable=None if args.progress else True,
               file=sys.stderr, leave=False)
    fleet = [run_fleet(c, layout, scenario, args.seed, bar.update) for c in configs]
    bar.close()
    print(f"fleet: {scenario.nodes} nodes x {layout.size} GPUs, {scenario.steps} steps, "
          f"{scenario.arrivals_per_step} arrivals/step, pod sizes "
          + ", ".join(f"{k} GPU {int(w * 100)}%" for k, w in scenario.sizes) + f"; seed {args.seed}")
    print(output.fleet_summary(fleet))
    if args.plot:
        output.plot_fleet(Path(args.plot), fleet)
        print(f"plot: {args.plot}")
    return 0
