"""`gpupair simulate`: compare placement policies on simulated nodes, no cluster needed."""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from gpupair.topology import limits
from gpupair.command.flags import NON_NEGATIVE, SHARE, DURATION, Range, UsageError, add_log_level, add_topology_file
from gpupair.command.service import add_flag
from gpupair.simulator.models.dynamic_resources import DEFAULT_DRA_PAIRS
from gpupair.simulator.trace.numa import DEFAULT_SPLITS

TRACE_POLICIES = ("random", "dotprod", "gpuclustering", "gpupacking", "bestfit", "fgd",
                  "kube-default", "kube-gpu-binpack", "kube-gpu-spread")


def configure(parser: argparse.ArgumentParser) -> None:
    add_flag(parser, "--scenario", "seed", "seed: replay the field report; fleet: many nodes over time; "
              "replay: a recorded cluster state (--state) pod by pod; fragmentation: on empty nodes, one-GPU pods "
              "first, then large pods (--small-pods, --large-pods, --large-gpus): how many large pods fit; "
              "trace: a node list and a pod list in the openb CSV format (--trace-nodes, --trace-pods) in FGD's "
              "protocol, under each of --policies with and without gpupair",
              choices=["seed", "fleet", "replay", "fragmentation", "trace"])
    add_flag(parser, "--path", "device-plugin",
             "how the nodes hand out GPUs: device-plugin (kube-scheduler counts GPUs, the plugin on the node picks "
             "them: --configs), dra (a DRA driver publishes them, kube-scheduler's allocator picks the first fit in "
             "ResourceSlice order: --dra-configs), or both, one table each", choices=["device-plugin", "dra", "both"])
    add_flag(parser, "--seed", 1, "random seed; the same seed gives the same results", bounds=NON_NEGATIVE)
    add_flag(parser, "--configs", "kube+naive,kube+aligned,gpupair+aligned",
             "comma-separated SCHEDULER+PLUGIN pairs (schedulers: kube = kube-scheduler alone, gpupair = "
             "with gpupair's extender, its holds reconciled with each node's allocation ledger, and its preempt verb, "
             "gpupair-nopreempt = the same extender without the preempt verb, gpupair-legacy = "
             "the extender's accounting before the ledger, as a baseline: guessed sets held until shown taken "
             "or --reservation-ttl, gpupair-nonic = the extender that does not read gpupair.io/nic, a baseline "
             "for --nic-share; plugins: naive, aligned). With --nic-share above 0 the default adds "
             "gpupair-nonic+aligned")
    add_flag(parser, "--dra-configs", DEFAULT_DRA_PAIRS,
             "with --path dra or both: comma-separated SCHEDULER+FORM pairs (schedulers as in --configs; forms: "
             "extended = pods asking limits nvidia.com/gpu served from DRA, the claim made by kube-scheduler; "
             "claim = a claim without constraint; claim-numa = with matchAttribute resource.kubernetes.io/numaNode, "
             "the webhook's required rewrite; claim-first-available = firstAvailable [numa, any], its preferred "
             "rewrite)")
    add_flag(parser, "--scheduler-profile", "default,gpu-binpack,gpu-spread",
             "comma-separated kube-scheduler profiles to run every configuration under: default (the default "
             "profile: cpu and memory scored, GPUs not), gpu-binpack (NodeResourcesFit MostAllocated with "
             "nvidia.com/gpu), gpu-spread (LeastAllocated with nvidia.com/gpu)")
    add_flag(parser, "--cpu-per-gpu", 0.0, "CPU cores every pod requests per GPU it asks for (0: no CPU request, "
             "as the seed's pods)", bounds=Range(0, 1024))
    add_flag(parser, "--memory-per-gpu", 0.0, "memory (GiB) every pod requests per GPU (0: no memory request)", bounds=Range(0, 65536))
    add_flag(parser, "--node-cpu", 32.0, "allocatable CPU cores per node", bounds=Range(0, 65536, low_open=True))
    add_flag(parser, "--node-memory", 256.0, "allocatable memory (GiB) per node", bounds=Range(0, 1 << 20, low_open=True))
    add_flag(parser, "--plugin-deviation", 0.0,
             "chance (0-1) that the simulated device plugin grants another set than its policy picks (and the "
             "extender planned): another valid set of the node's free GPUs, as tight (as few NUMA nodes) as the "
             "policy's; models a plugin whose policy or tie-breaking differs from the one the extender predicts with",
             bounds=SHARE)
    add_flag(parser, "--pinned-share", 0.0,
             "share (0-1) of pods created with spec.nodeName already set (DaemonSets, pinned pods, other "
             "schedulers): seed: of the background 1-GPU pods; fleet: of all arrivals, put on a node they fit by "
             "count. The extender sees them only through its pod watch", bounds=SHARE)
    add_flag(parser, "--reservation-ttl", 120.0,
             "seconds of simulated time after which a hold nothing ended expires, as the extender's flag "
             "(fleet: 60 s per step); what bounds gpupair-legacy's wrong guesses", bounds=DURATION)
    add_flag(parser, "--high-priority-share", 0.0,
             "fleet scenario: share (0-1) of arrivals at a high priority that may preempt the others when they fit "
             "no node (kube-scheduler's default preemption; with gpupair, its preempt verb first judges the "
             "victims; gpupair-nopreempt: the extender without the verb); adds evictions, wasted evictions and the "
             "high-priority pods' wait to the table", bounds=SHARE)
    add_flag(parser, "--intent-mix", "required=1",
             "fleet scenario: placement intents of the pods (gpupair.io/placement) as INTENT=SHARE pairs summing "
             "to 1, e.g. required=0.7,preferred=0.2,none=0.1")
    add_flag(parser, "--nic-share", 0.0,
             "seed and fleet scenarios: share (0-1) of the pods that ask for the network (gpupair.io/nic: required); "
             "fleet: among the sizes the node shape can serve near a NIC. Adds a table of their GDR-capable "
             "grants (every granted GPU at PXB or closer to a NIC, NCCL's default NCCL_NET_GDR_LEVEL)", bounds=SHARE)
    add_flag(parser, "--nic-level", "PXB", "the network pods' gpupair.io/nic-level: the farthest GPU x NIC link "
             "they accept", choices=["PIX", "PXB", "PHB", "NODE"])
    add_flag(parser, "--nics", "auto",
             "the NICs every node's reporter publishes: auto (the NIC columns of a --topology-file in "
             "nvidia-smi topo -m form, else none), lopsided (one NIC, mlx5_bond_0, PIX to the GPUs of GPU0's "
             "NUMA node, SYS to the rest; on the default node PIX to GPU0-3), none (no "
             "gpupair.io/nics: reporters older than the network issue)", choices=["auto", "lopsided", "none"])
    add_flag(parser, "--trace-nodes", "", "trace scenario: the node list, CSV sn,cpu_milli,memory_mib,gpu,model "
             "(e.g. Alibaba's cluster-trace-gpu-v2023 openb_node_list_gpu_node.csv)")
    add_flag(parser, "--trace-pods", "", "trace scenario: the pod list, CSV name,cpu_milli,memory_mib,num_gpu,gpu_milli"
             "[,gpu_spec,...] (e.g. openb_pod_list_default.csv)")
    add_flag(parser, "--policies", ",".join(TRACE_POLICIES),
             "trace scenario: the scheduler's scoring, comma-separated, any case: FGD's six (random, dotprod, "
             "gpuclustering, gpupacking, bestfit, fgd) and kube-scheduler's profiles (kube-default, "
             "kube-gpu-binpack, kube-gpu-spread)")
    add_flag(parser, "--seeds", "42", "trace scenario: seeds, e.g. 42-51 or 42,45; runs spread over the cores")
    add_flag(parser, "--tune", 1.3, "trace scenario: pods are sampled until their GPU demand is this many times "
             "the cluster's GPUs (FGD's -tune)", bounds=Range(0, 100, low_open=True))
    add_flag(parser, "--numa-split", DEFAULT_SPLITS,
             "trace scenario: GPUs per NUMA node by a node's GPU count, GPUS=A+B,...; a count not named is "
             "halved when even, one NUMA node when odd")
    add_flag(parser, "--plugin", "aligned", "trace scenario, device-plugin path: how the device plugin picks "
             "whole GPUs: aligned (nvidia-device-plugin's best-effort policy) or naive (the lowest-indexed free "
             "GPUs, as FGD's simulator)", choices=["aligned", "naive"])
    add_flag(parser, "--gpupair-scores", "shipped",
             "trace scenario: gpupair configurations beside each policy alone: shipped (the extender as deployed: "
             "--score fragmentation, the GPU entry filtering whole-GPU pods and the every-pod entry scoring every pod, "
             "each GPU's share taken known), whole-gpus (the same with shares not reported: a GPU with a share "
             "taken looks taken), best-fit (--score best-fit, GPU pods only, as shipped before), filter (the GPU "
             "entry alone, beside a plugin that scores GPUs itself)")
    add_flag(parser, "--percentage-of-nodes-to-score", "",
             "trace scenario: kube-scheduler's percentageOfNodesToScore: 0 (its default: 50 - nodes/125, at least "
             "5) to 100; the filter stops after that share of nodes is found feasible, from where the last pod's "
             "search stopped, and only those are scored. Unset: every node, as FGD's protocol and 100")
    add_flag(parser, "--move-budget", 0.0, "trace scenario: moves allowed, in percent of the pods arrived so far: "
             "a pod no node takes gets a plan of gpupair's defrag planner (the fewest movable pods moved, each to "
             "a close set free now) within it, instead of being dropped; every GPU pod is taken as movable. "
             "0: none, FGD's protocol", type=float, bounds=Range(0, 100))
    add_flag(parser, "--policy-weight", 1000, "trace scenario: the weight of FGD's six as a score plugin (its "
             "published configuration: 1000); kube-scheduler's profiles keep their own", bounds=Range(1, 1_000_000))
    add_flag(parser, "--workers", 0, "trace scenario: processes for the runs (0: one per core)",
             bounds=Range(0, 1024))
    add_flag(parser, "--state", "", "replay scenario: recorded state JSON (e.g. simulator/recorded/*.json)")
    add_topology_file(parser, "node shape from a layout file: `nvidia-smi topo -m` output, gpupair's topology JSON, "
                      "a Node, or `gpupair reporter --once --dry-run` output (default: the field report's 8-GPU node)")
    add_flag(parser, "--nodes", 0, "number of nodes; 0: the scenario's own (4 for seed, 64 for fleet)",
             bounds=Range(0, limits.MAX_NODES))
    add_flag(parser, "--runs", 2, "seed scenario: runs per configuration", bounds=Range(1, 1000))
    add_flag(parser, "--rounds", 10, "seed scenario: rounds per run", bounds=Range(1, 10000))
    add_flag(parser, "--pods-per-round", 2, "seed scenario: pods created together each round", bounds=Range(1, 1000))
    add_flag(parser, "--gpus", 2, "seed scenario: GPUs each pod asks for", bounds=Range(1, limits.MAX_GPUS))
    add_flag(parser, "--small-pods", 4, "fragmentation scenario: one-GPU pods created first", bounds=Range(0, 1000))
    add_flag(parser, "--large-pods", 8, "fragmentation scenario: large pods created after them", bounds=Range(0, 1000))
    add_flag(parser, "--large-gpus", 4, "fragmentation scenario: GPUs each large pod asks for",
             bounds=Range(2, limits.MAX_GPUS))
    add_flag(parser, "--steps", 400, "fleet scenario: time steps", bounds=Range(1, 100_000))
    add_flag(parser, "--arrivals", 5.5, "fleet scenario: mean pod arrivals per step", bounds=Range(0, 1000, low_open=True))
    add_flag(parser, "--output", "gpupair-simulate.tsv",
             "TSV path (.tsv), or json (trace scenario: one JSON document on stdout instead of the table): the "
             "summary table as <stem>.summary.tsv (other scenarios: "
             "<stem>.<scenario>.summary.tsv, so one run does not overwrite another's); seed scenario: also one "
             "file per configuration, named <stem>.<profile>.<configuration>.tsv")
    add_flag(parser, "--verdicts", "", "seed scenario: also write each pod's verdict annotations as JSON lines here (.jsonl or .json)")
    add_flag(parser, "--plot", "", "draw the comparison into this PNG file (.png; needs the plot extra, matplotlib)")
    add_flag(parser, "--progress", True, "show a progress bar on stderr when it is a terminal")
    add_log_level(parser)


def run(args: argparse.Namespace) -> int:
    if args.log_level == "info":
        # The modelled extender logs each simulated reservation as the service does: in a
        # simulation that is a line per simulated pod on stderr. --log-level debug shows them.
        logging.getLogger("gpupair").setLevel(logging.WARNING)
    from tqdm import tqdm

    from gpupair.topology.layout_file import read_layout
    from gpupair.command.outputs import check_output
    from gpupair.simulator import output
    from gpupair.simulator.configs import DEFAULT_PAIRS, DEVICE_PLUGIN, DRA, NIC_PAIRS, parse_configs, parse_paths
    from gpupair.simulator.scenarios.fleet_scenario import FleetScenario, run_fleet
    from gpupair.simulator.interference import Interference
    from gpupair.simulator.scenarios.seed_scenario import SeedScenario, run_seed_scenario
    from gpupair.simulator.shapes import seed_layout
    from gpupair.simulator.workload import PodMix, parse_intent_mix

    if args.scenario == "trace":
        from gpupair.simulator.trace.scenario import run as run_trace

        try:
            paths = parse_paths(args.path)
        except ValueError as exc:
            raise UsageError(str(exc)) from None
        return run_trace(args, paths)
    try:
        if args.nic_share and args.configs == DEFAULT_PAIRS:
            args.configs = NIC_PAIRS
        paths = parse_paths(args.path)
        by_path = {DEVICE_PLUGIN: parse_configs(args.configs, args.scheduler_profile) if DEVICE_PLUGIN in paths else [],
                   DRA: parse_configs(args.dra_configs, args.scheduler_profile, DRA) if DRA in paths else []}
        configs = by_path[DEVICE_PLUGIN] + by_path[DRA]
        layout = read_layout(args.topology_file) if args.topology_file else seed_layout()
        resources = _resources(args)
        resources["interference"] = Interference(args.plugin_deviation, args.pinned_share, args.reservation_ttl)
        mix = PodMix(args.high_priority_share, parse_intent_mix(args.intent_mix))
        if args.scenario != "fleet" and mix != PodMix():
            raise ValueError("--high-priority-share and --intent-mix apply to --scenario fleet only")
        resources.update(_network(args, layout))
    except ValueError as exc:  # LayoutFileError is one
        raise UsageError(str(exc)) from None
    # Every output is checked before a run that takes seconds: the path printed is the path written.
    tsv = check_output(args.output, "--output", (".tsv",))
    verdicts = check_output(args.verdicts, "--verdicts", (".jsonl", ".json")) if args.verdicts else None
    plot = check_output(args.plot, "--plot", (".png",)) if args.plot else None
    if plot is not None:
        output.check_plotting()

    network = {key: resources.pop(key) for key in ("nics", "nic_share", "nic_level")}
    if args.scenario == "replay":
        return _replay(args, configs, layout)
    if args.scenario == "fragmentation":
        return _fragmentation(args, by_path, layout, resources, tsv)

    if args.scenario == "seed":
        scenario = SeedScenario(
            nodes=args.nodes or 4,
            runs=args.runs,
            rounds=args.rounds,
            pods_per_round=args.pods_per_round,
            gpus_per_pod=args.gpus,
            **resources,
            **network,
        )
        bar = tqdm(total=len(configs) * scenario.runs * scenario.rounds, desc="rounds",
                   disable=None if args.progress else True, file=sys.stderr, leave=False)
        runs = {path: [run_seed_scenario(c, layout, scenario, args.seed, bar.update) for c in group]
                for path, group in by_path.items() if group}
        bar.close()
        results = [result for group in runs.values() for result in group]
        written = output.write_tsv(tsv, results)
        summaries = [output.write_summary(tsv, output.seed_table(group), _summary_part(path))
                     for path, group in runs.items()]
        print(f"{scenario.nodes} nodes x {layout.size} GPUs; {scenario.runs} runs x {scenario.rounds} rounds x "
              f"{scenario.pods_per_round} pods x {scenario.gpus_per_pod} GPUs per configuration; "
              f"{_describe(resources)}{_describe_network(network, layout.size)}; seed {args.seed}")
        for path, group in runs.items():
            _heading(path, len(runs))
            print(output.seed_summary(group))
        if scenario.nic_share:
            summaries += _network_tables(tsv, runs, output.nic_seed_table)
        print("TSV: " + ", ".join(map(str, summaries)) + ", " + ", ".join(str(p) for p in written))
        if verdicts is not None:
            output.write_verdicts(verdicts, results)
            print(f"verdict annotations: {verdicts}")
        if plot is not None:
            output.plot_seed(plot, results)
            print(f"plot: {plot}")
        return 0

    scenario = FleetScenario(nodes=args.nodes or 64, steps=args.steps, arrivals_per_step=args.arrivals, mix=mix,
                             **resources, **network)
    bar = tqdm(total=len(configs) * scenario.steps, desc="steps", disable=None if args.progress else True,
               file=sys.stderr, leave=False)
    runs = {path: [run_fleet(c, layout, scenario, args.seed, bar.update) for c in group]
            for path, group in by_path.items() if group}
    bar.close()
    fleet = [result for group in runs.values() for result in group]
    print(f"fleet: {scenario.nodes} nodes x {layout.size} GPUs, {scenario.steps} steps, "
          f"{scenario.arrivals_per_step} arrivals/step, pod sizes "
          + ", ".join(f"{k} GPU {int(w * 100)}%" for k, w in scenario.sizes)
          + "".join(f"; {part}" for part in (_describe(resources), mix.describe()) if part)
          + f"{_describe_network(network, layout.size)}; seed {args.seed}")
    written = []
    for path, group in runs.items():
        _heading(path, len(runs))
        print(output.fleet_summary(group))
        written.append(output.write_summary(tsv, output.fleet_table(group), f"fleet.{_summary_part(path)}"))
    if scenario.nic_share:
        written += _network_tables(tsv, runs, output.nic_fleet_table, "fleet.")
    preemption = mix.high_priority_share > 0
    if preemption:
        for path, group in runs.items():
            print("\npreemption (high-priority pods)" + (", DRA path:" if path == DRA else ":"))
            print(output.preemption_summary(group))
            written.append(output.write_summary(tsv, output.preemption_table(group),
                                                "fleet.dra.preemption" if path == DRA else "fleet.preemption"))
    print("TSV: " + ", ".join(map(str, written)))
    if plot is not None:
        output.plot_fleet(plot, fleet, preemption)
        print(f"plot: {plot}")
    return 0


GIB = 1024**3
NETWORK_HEADING = ("network pods (gpupair.io/nic: required; GDR-capable: every granted GPU at PXB or closer to a "
                   "NIC, NCCL's default NCCL_NET_GDR_LEVEL)")


def _network(args: argparse.Namespace, layout) -> dict:
    """The nodes' NICs and the pods that ask for the network, from --nics, --nic-share, --nic-level."""
    from gpupair.simulator.shapes import lopsided_nics

    nics = None
    if args.nics == "lopsided":
        nics = lopsided_nics(layout)
    elif args.nics == "auto" and args.topology_file:
        from gpupair.reporter.topology_source import nics_of_file

        nics = nics_of_file(args.topology_file)
    if args.nic_share:
        if args.scenario not in ("seed", "fleet"):
            raise ValueError("--nic-share: applies to --scenario seed and fleet only")
        if args.high_priority_share:
            raise ValueError("--nic-share: not with --high-priority-share (preemption does not model the NIC ask)")
        if nics is None and args.nics == "auto":
            raise ValueError("--nic-share: the nodes publish no NICs; pass --nics lopsided, a --topology-file "
                             "in nvidia-smi topo -m form with NIC columns, or --nics none to model reporters "
                             "that publish none")
    return {"nics": nics, "nic_share": args.nic_share, "nic_level": args.nic_level}


def _network_tables(tsv: Path, runs: dict, table, scenario: str = "") -> list[Path]:
    """The network pods' table per path, printed and written as ``<stem>.<scenario>nic.tsv``
    (``.dra.nic.tsv``)."""
    from gpupair.simulator import output
    from gpupair.simulator.configs import DRA

    written = []
    for path, group in runs.items():
        print(f"\n{NETWORK_HEADING}" + (", DRA path:" if path == DRA else ":"))
        print(output.text_table(*table(group)))
        written.append(output.write_summary(tsv, table(group), scenario + ("dra.nic" if path == DRA else "nic")))
    return written


def _describe_network(network: dict, gpus: int) -> str:
    """For the run's header line; empty without network pods."""
    if not network["nic_share"]:
        return ""
    nics = network["nics"]
    if nics is None:
        where = "no NICs published"
    else:
        names = ", ".join(nic.name for nic in nics.nics) or "none"
        links = " ".join(f"GPU{g}={'/'.join(row)}" for g, row in enumerate(nics.links[:gpus]))
        where = f"NICs {names} ({links})"
    return (f"; {100 * network['nic_share']:g}% of pods ask gpupair.io/nic: required at {network['nic_level']}; "
            f"{where}")


def _summary_part(path: str) -> str:
    """``<stem>.summary.tsv`` for the device-plugin path, as before the DRA path; ``<stem>.dra.summary.tsv``."""
    return "dra.summary" if path == "dra" else "summary"


def _heading(path: str, paths: int) -> None:
    """A line above each table when it is not the device-plugin table alone (the output before DRA)."""
    if path == "dra":
        print(("\n" if paths > 1 else "") + "DRA path: kube-scheduler's allocator picks the devices (first fit in "
              "ResourceSlice order); configuration = SCHEDULER+FORM")
    elif paths > 1:
        print("device-plugin path: kube-scheduler counts GPUs, the device plugin picks them; "
              "configuration = SCHEDULER+PLUGIN")


def _fragmentation(args: argparse.Namespace, by_path: dict, layout, resources: dict, tsv: Path) -> int:
    """Small pods, then large ones, on empty nodes, each configuration of each path."""
    from gpupair.simulator import output
    from gpupair.simulator.scenarios.fragmentation_scenario import FragmentationScenario, run_fragmentation

    scenario = FragmentationScenario(nodes=args.nodes or 4, small=args.small_pods, large=args.large_pods,
                                     large_gpus=args.large_gpus, per_gpu=resources["per_gpu"],
                                     node_milli_cpu=resources["node_milli_cpu"], node_memory=resources["node_memory"])
    if scenario.large_gpus > layout.size:
        raise UsageError(f"--large-gpus: {scenario.large_gpus} is more than a node's {layout.size} GPUs")
    runs = {path: [run_fragmentation(c, layout, scenario, args.seed) for c in group]
            for path, group in by_path.items() if group}
    fit = scenario.large_fit(layout)
    print(f"fragmentation: {scenario.nodes} empty nodes x {layout.size} GPUs; {scenario.small} one-GPU pods, then "
          f"{scenario.large} pods x {scenario.large_gpus} GPUs, one at a time; "
          + (f"{fit} large pods fit with the one-GPU pods packed best; " if fit is not None else "")
          + f"{_describe(resources)}; seed {args.seed}")
    written = []
    for path, group in runs.items():
        _heading(path, len(runs))
        print(output.fragmentation_summary(group))
        written.append(output.write_summary(tsv, output.fragmentation_table(group),
                                            f"fragmentation.{_summary_part(path)}"))
    print("TSV: " + ", ".join(map(str, written)))
    return 0


def _resources(args: argparse.Namespace) -> dict:
    """Pods' cpu/memory requests and nodes' allocatable, in kube-scheduler's units (millicores, bytes)."""
    from gpupair.simulator.models.kube_scoring import PerGpu

    return {
        "per_gpu": PerGpu(round(args.cpu_per_gpu * 1000), round(args.memory_per_gpu * GIB)),
        "node_milli_cpu": round(args.node_cpu * 1000),
        "node_memory": round(args.node_memory * GIB),
    }


def _describe(resources: dict) -> str:
    per_gpu = resources["per_gpu"]
    asks = (f"pods request {per_gpu.milli_cpu / 1000:g} CPU and {per_gpu.memory / GIB:g}Gi per GPU"
            if per_gpu.milli_cpu or per_gpu.memory else "pods request no CPU or memory")
    described = f"nodes {resources['node_milli_cpu'] / 1000:g} CPU, {resources['node_memory'] / GIB:g}Gi; {asks}"
    interference = resources["interference"].describe()
    return f"{described}; {interference}" if interference else described


def _replay(args: argparse.Namespace, configs: list, layout) -> int:
    """The recorded state, pod by pod, under each profile (kube-scheduler alone: what was recorded)."""
    from gpupair.simulator.scenarios.replay_scenario import StateError, load_state, replay, summary

    if not args.state:
        raise UsageError("--scenario replay needs --state FILE")
    try:
        state = load_state(args.state)
        profiles = list(dict.fromkeys(config.scheduler_profile for config in configs))
        results = [(profile, replay(state, profile, layout)) for profile in profiles]
    except StateError as exc:
        raise UsageError(str(exc)) from None
    print(state.what or args.state)
    for profile, steps in results:
        print(f"\nprofile {profile.name}: {summary(steps)}")
        print("pod\trecorded\tpredicted\tverdict\tscores")
        for step in steps:
            scores = " ".join(f"{node}={score}" for node, score in step.scores.items())
            print(f"{step.pod}\t{step.recorded or '-'}\t{step.predicted or 'pending'}\t{step.verdict}\t{scores}")
    return 0
