"""`gpupair simulate` on the DRA path: kube-scheduler's allocator picks the devices (first fit in
ResourceSlice order), for claim pods with and without the numaNode constraint, firstAvailable
claims and extended-resource pods, each with and without gpupair."""

import random
import subprocess
import sys
from pathlib import Path

from gpupair.simulator.cluster import Cluster
from gpupair.simulator.configs import DRA, Config
from gpupair.simulator.models.dynamic_resources import FORMS, dynamic_resources_scores
from gpupair.simulator.scenarios.fleet_scenario import FleetScenario, run_fleet
from gpupair.simulator.scenarios.fragmentation_scenario import FragmentationScenario, run_fragmentation
from gpupair.simulator.models.kube_scoring import PerGpu, PodRequest
from gpupair.simulator.scenarios.seed_scenario import SeedScenario, run_seed_scenario
from gpupair.simulator.shapes import seed_layout

ROOT = Path(__file__).parents[2]
# tests/fixtures/real-k8s/dra/README.md: the four seed-like DRA nodes' free sets.
RECORDED_FREE = ({3, 4}, {2, 3, 4, 5}, {0, 1}, {4, 5, 6, 7})


def simulate(*args):
    return subprocess.run([sys.executable, "-m", "gpupair.command.cli", "simulate", "--no-progress", *args],
                          capture_output=True, text=True, cwd=ROOT, timeout=120)


def dra(pair: str, profile: str = "default") -> Config:
    return Config.parse(pair, profile, DRA)


def fragmented_cluster() -> Cluster:
    cluster = Cluster.of({f"dra-node-{i + 1}": seed_layout() for i in range(len(RECORDED_FREE))})
    for sim, free in zip(cluster.nodes.values(), RECORDED_FREE):
        for device in set(range(8)) - free:
            sim.bound[f"busy-{sim.name}-{device}"] = PodRequest(1)
            sim.allocated[f"busy-{sim.name}-{device}"] = (device,)
    cluster.report_all()
    return cluster


def recorded_rounds(config: Config) -> list[str]:
    """The recorded session: 10 rounds of 2 two-GPU pods created together on the fragmented
    nodes, deleted before the next round; each grant's link."""
    cluster, scheduler, ties, links = fragmented_cluster(), config.new_scheduler(), random.Random(1), []
    scheduler.reported(cluster)
    for round_number in range(10):
        placed = []
        for n in range(2):
            pod = f"pod-{round_number}-{n}"
            node = scheduler.schedule(pod, PodRequest(2), cluster, ties)
            if node is None:
                links.append("pending")
                continue
            cluster.bind(pod, PodRequest(2), node)
            granted = cluster.allocate(pod, node, config.policy)
            links.append(seed_layout().worst_link(granted))
            placed.append((pod, node))
        cluster.report_all()
        scheduler.reported(cluster)
        for pod, node in placed:
            cluster.remove(pod, node)
            scheduler.forget(pod)
        cluster.report_all()
        scheduler.reported(cluster)
    return links


def test_recorded_fragmented_nodes_the_allocator_alone_takes_sys_pairs_gpupair_none():
    # Recorded: 9 of 20 SYS without a constraint and for extended-resource pods, 0 of 20 with the
    # constraint. The model gives 10: each round's first pod ties on every node and goes to
    # dra-node-1, whose only free pair GPU3+GPU4 spans the sockets.
    for form in ("claim", "extended"):
        assert recorded_rounds(dra(f"kube+{form}")).count("SYS") == 10
    assert recorded_rounds(dra("kube+claim-numa")).count("SYS") == 0
    for pair in ("gpupair+extended", "gpupair+claim", "gpupair+claim-numa"):
        links = recorded_rounds(dra(pair))
        assert links.count("SYS") == 0 and "pending" not in links, pair


def test_gpupair_refuses_a_dra_node_whose_first_fit_is_sys_with_the_allocators_pick():
    cluster = fragmented_cluster()
    cluster.remove("busy-dra-node-1-5", "dra-node-1")  # free {3,4,5}: a close pair, but GPU3+GPU4 first
    cluster.report_all()
    scheduler = dra("gpupair+extended").new_scheduler()
    scheduler.reported(cluster)
    decision = scheduler.extender.decide(2, cluster, ["dra-node-1"])["dra-node-1"]
    assert not decision.passes
    assert decision.reason == "the allocator would take GPU3+GPU4 (SYS); free: NUMA0=1 NUMA1=2"
    assert dra("kube+extended").new_scheduler().schedule("p", PodRequest(2), cluster, None) == "dra-node-1"
    cluster.bind("p", PodRequest(2), "dra-node-1")
    assert cluster.allocate("p", "dra-node-1", dra("kube+extended").policy) == (3, 4)  # alone: the SYS pair


def test_first_available_ranks_the_node_where_the_numa_subrequest_fits_higher():
    cluster = fragmented_cluster()
    del cluster.nodes["dra-node-3"], cluster.nodes["dra-node-4"]  # dra-node-1 {3,4} first, dra-node-2 {2,3,4,5}
    plain = dra("kube+claim").new_scheduler()
    first_available = dra("kube+claim-first-available").new_scheduler()
    assert plain.schedule("p", PodRequest(2), cluster, None) == "dra-node-1"  # a tie: node order
    assert first_available.schedule("p", PodRequest(2), cluster, None) == "dra-node-2"
    assert dynamic_resources_scores(FORMS["claim-first-available"], {"a": 0, "b": 1}) == {"a": 100, "b": 87}
    assert dynamic_resources_scores(FORMS["claim"], {"a": 0, "b": 0}) == {"a": 0, "b": 0}


def test_claim_numa_is_filtered_by_the_allocator_and_large_requests_stay_unconstrained():
    cluster = fragmented_cluster()
    numa = dra("kube+claim-numa").new_scheduler()
    assert numa.schedule("p", PodRequest(2), cluster, None) == "dra-node-2"  # dra-node-1 cannot allocate
    empty = Cluster.of({"n": seed_layout()})
    # The webhook leaves a request larger than a NUMA node as written: it still schedules.
    assert dra("kube+claim-numa").new_scheduler().schedule("big", PodRequest(8), empty, None) == "n"
    assert FORMS["claim-numa"].policy.pick(seed_layout(), frozenset(range(8)), 8) == tuple(range(8))


def test_claim_pods_gpus_are_not_scored_extended_pods_are():
    cluster = Cluster.of({"a": seed_layout(), "b": seed_layout()})
    cluster.nodes["b"].bound["x"] = PodRequest(4)
    cluster.nodes["b"].allocated["x"] = (0, 1, 2, 3)
    usages = {name: sim.usage() for name, sim in cluster.nodes.items()}
    claim, extended = (dra(f"kube+{form}", "gpu-binpack").new_scheduler() for form in ("claim", "extended"))
    assert len(set(claim.scores(PodRequest(2), usages).values())) == 1  # GPUs unscored: a tie
    scores = extended.scores(PodRequest(2), usages)
    assert scores["b"] > scores["a"]  # MostAllocated counts the DRA-backed nvidia.com/gpu


def test_four_one_gpu_then_eight_four_gpu_claims_gpupair_places_seven_the_allocator_alone_six():
    scenario = FragmentationScenario()
    assert scenario.large_fit(seed_layout()) == 7
    for seed in (1, 2):
        alone = run_fragmentation(dra("kube+claim-numa"), seed_layout(), scenario, seed)
        gpupair = run_fragmentation(dra("gpupair+claim-numa"), seed_layout(), scenario, seed)
        # No requests: each pod counts 100m, so a node with 3 of them scores 98 against 99 and the
        # fourth one-GPU pod breaks a second node's NUMA node.
        assert (alone.large_placed, len(alone.nodes_with_small)) == (6, 2)
        assert (gpupair.large_placed, len(gpupair.nodes_with_small)) == (7, 1)
        assert alone.sys_grants == gpupair.sys_grants == 0
    spread = run_fragmentation(dra("kube+claim-numa"), seed_layout(), FragmentationScenario(per_gpu=PerGpu(1000)))
    assert spread.large_placed == 4  # with CPU requests the one-GPU pods go one per node


def test_seed_and_fleet_on_dra_gpupair_grants_no_avoidable_sys():
    seed = {pair: run_seed_scenario(dra(pair), seed_layout(), SeedScenario(runs=1), seed=1)
            for pair in ("kube+extended", "gpupair+extended", "kube+claim-numa")}
    assert seed["kube+extended"].sys_count > 0
    assert seed["gpupair+extended"].sys_count == seed["kube+claim-numa"].sys_count == 0
    scenario = FleetScenario(nodes=12, steps=80, arrivals_per_step=2.0)
    kube = run_fleet(dra("kube+extended"), seed_layout(), scenario, seed=3)
    gpupair = run_fleet(dra("gpupair+extended"), seed_layout(), scenario, seed=3)
    assert kube.granted > 50 and gpupair.granted > 50
    assert kube.avoidable_sys > 0 and gpupair.avoidable_sys == 0


def test_path_both_prints_the_two_tables_side_by_side(tmp_path):
    done = simulate("--path", "both", "--scheduler-profile", "default", "--runs", "1",
                    "--dra-configs", "kube+claim,gpupair+claim-numa", "--output", str(tmp_path / "o.tsv"))
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    headers = [line for line in lines if line.startswith("profile ")]
    assert len(headers) == 2 and len(set(h.split() == headers[0].split() for h in headers)) == 1
    assert any(line.startswith("DRA path:") for line in lines)
    assert any(line.split()[:2] == ["default", "gpupair+claim-numa"] for line in lines)
    assert (tmp_path / "o.dra.summary.tsv").read_text().splitlines()[1].split("\t")[:2] == ["default", "kube+claim"]
    assert (tmp_path / "o.summary.tsv").exists()
    default = simulate("--scheduler-profile", "default", "--runs", "1", "--output", str(tmp_path / "d.tsv"))
    assert "DRA path" not in default.stdout and "device-plugin path" not in default.stdout


def test_fragmentation_command_and_bad_dra_flags(tmp_path):
    done = simulate("--scenario", "fragmentation", "--path", "dra", "--scheduler-profile", "default",
                    "--dra-configs", "kube+claim-numa,gpupair+claim-numa", "--output", str(tmp_path / "f.tsv"))
    assert done.returncode == 0, done.stderr
    rows = {line.split()[1]: line.split() for line in done.stdout.splitlines() if line.startswith("default ")}
    assert rows["kube+claim-numa"][4] == "6" and rows["gpupair+claim-numa"][4] == "7"
    assert "7 large pods fit with the one-GPU pods packed best" in done.stdout
    assert (tmp_path / "f.fragmentation.dra.summary.tsv").exists()
    for args, says in ((("--path", "rdma"), "--path: invalid choice"),
                       (("--path", "dra", "--dra-configs", "kube+aligned"), "--dra-configs: unknown DRA form"),
                       (("--scenario", "fragmentation", "--large-gpus", "1"), "--large-gpus: must be between 2 and 16, got 1")):
        bad = simulate(*args)
        assert bad.returncode == 2, args
        assert "gpupair simulate: error: " in bad.stderr and says in bad.stderr, bad.stderr


def test_preemption_dry_run_on_dra_runs_the_allocator_on_what_the_victims_free():
    from gpupair.simulator.models.default_preemption import Running, select_victims

    sim = Cluster.of({"n": seed_layout()}).nodes["n"]
    running = {}
    for pod, device, priority, start in (("a", 0, 0, 1), ("b", 4, 0, 2), ("h5", 5, 1000, 0), ("h6", 6, 1000, 0),
                                          ("h7", 7, 1000, 0)):
        sim.bound[pod], sim.allocated[pod], running[pod] = PodRequest(1), (device,), Running(priority, start)
    big = PodRequest(4)
    # By count, "a" (started first) is reprieved and "b" evicted: GPU1-4 free, no NUMA node with 4.
    assert select_victims(sim, big, 1000, running) == ["b"]
    # DynamicResources' Filter in the dry run: only evicting "a" frees NUMA0 whole.
    assert select_victims(sim, big, 1000, running, allocator=FORMS["claim-numa"].policy) == ["a"]


def test_the_forms_allocators_pick_what_the_extenders_claim_policies_predict():
    # The extender decides a claim pod with gpupair.decide.devices.policies' policy for its claim (dra-first-fit,
    # dra-first-fit-numa, dra-first-available); the simulated allocator must pick the same sets,
    # a request above a NUMA node being unconstrained (the webhook leaves it as written).
    from gpupair.decide.devices.policies import POLICIES

    layout = seed_layout()
    for mask in range(256):
        free = frozenset(i for i in range(8) if mask >> i & 1)
        for k in range(1, 9):
            assert FORMS["claim"].policy.pick(layout, free, k) == POLICIES["dra-first-fit"].pick(layout, free, k)
            numa = POLICIES["dra-first-fit-numa" if k <= 4 else "dra-first-fit"]
            assert FORMS["claim-numa"].policy.pick(layout, free, k) == numa.pick(layout, free, k)
            first_available = POLICIES["dra-first-available"].pick(layout, free, k)
            assert FORMS["claim-first-available"].policy.pick(layout, free, k) == first_available
