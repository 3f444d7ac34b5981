"""`gpupair audit` against the kube-apiserver double, over loopback, with a scripted kubelet.

The double stores pods; ``Kubelet`` below plays the cluster's side: it binds unscheduled pods (the
scheduler's part), moves each pod one phase per tick (Pending -> Running -> Succeeded/Failed),
writes the container log built from a recorded topo -m fixture and, where the test says so, the
verifier's annotations. The audit itself runs unchanged: the Auditor with a real kubernetes-asyncio
client, or the whole `gpupair audit` command in a subprocess with a kubeconfig.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

import pytest

from gpupair.topology import report
from gpupair.decide.judge import verdict as verdicts

from gpupair.audit.manifest import CONTAINER, ROUND_LABEL, RUN_LABEL, PodTemplate
from gpupair.audit.runner import AuditError, AuditPlan, Auditor
from gpupair.audit.sample import FAIL_TIMEOUT
from tests.audit_logs import container_log, host_layout
from tests.kube_double import ApiError, kube_client_for, make_node, running_kube_double

NS = "gpupair-audit"
SEED = "seed-5090d.txt"
REPO = Path(__file__).resolve().parents[2]


@dataclass
class Play:
    """How the fake cluster treats one audit pod."""

    gpus: list[int] = field(default_factory=lambda: [0, 1])  # host GPUs the device plugin grants
    node: str = "gpu-a"  # where the "scheduler" binds a pod that has no nodeName
    log: str | None = None  # None: the container's view of ``gpus`` on the seed node
    annotations: dict[str, str] | None = None  # the verifier's, when it is installed
    final: str | None = "Succeeded"  # None: the pod never finishes
    stuck_in: str = "Pending"  # where a pod that never finishes stays


class Kubelet:
    """Plays audit pods through their phases, one step per tick; records what it saw."""

    def __init__(self, store, plays: Callable[[str, int], Play], tick: float = 0.005):
        self.store = store
        self.plays = plays
        self.tick = tick
        self.steps: dict[str, int] = {}
        self.live_per_round: dict[str, int] = {}  # most pods of a round alive at once
        self.rounds_alive_together: set[tuple[str, ...]] = set()

    def _audit_pods(self) -> list[dict]:
        return [p for p in self.store.items("pods", NS) if RUN_LABEL in (p["metadata"].get("labels") or {})]

    async def run(self) -> None:
        while True:
            pods = self._audit_pods()
            rounds = tuple(sorted({p["metadata"]["labels"][ROUND_LABEL] for p in pods}))
            if rounds:
                self.rounds_alive_together.add(rounds)
            for r in rounds:
                alive = sum(1 for p in pods if p["metadata"]["labels"][ROUND_LABEL] == r)
                self.live_per_round[r] = max(self.live_per_round.get(r, 0), alive)
            for pod in pods:
                try:
                    self._step(pod)
                except ApiError:  # deleted by the audit in between
                    pass
            await asyncio.sleep(self.tick)

    def _step(self, pod: dict) -> None:
        name = pod["metadata"]["name"]
        labels = pod["metadata"]["labels"]
        play = self.plays(labels[ROUND_LABEL], int(name.rsplit("-", 1)[1]))
        step = self.steps.get(name, 0)
        patch: dict = {}
        if play.final is None:
            if play.stuck_in == "Running" and step == 0:
                patch = {"spec": {"nodeName": pod["spec"].get("nodeName") or play.node},
                         "status": {"phase": "Running"}}
        elif step == 0:  # scheduled (nodeName set by the test pod itself, or bound here)
            patch = {"spec": {"nodeName": pod["spec"].get("nodeName") or play.node},
                     "status": {"conditions": [{"type": "PodScheduled", "status": "True"}]}}
        elif step == 1:
            patch = {"status": {"phase": "Running"}}
            text = play.log if play.log is not None else container_log(SEED, play.gpus)
            self.store.set_log(NS, name, text, container=CONTAINER)
        elif step == 2 and play.annotations:
            patch = {"metadata": {"annotations": play.annotations}}
        elif step == 3:
            patch = {"status": {"phase": play.final}}
        if patch:
            self.store.patch("pods", name, patch, NS)
        self.steps[name] = step + 1


def seed_node(name: str = "gpu-a", with_report: bool = True) -> dict:
    annotations = (report.encode_annotations(host_layout(SEED), frozenset(range(8)), 1,
                                             datetime.now(timezone.utc)) if with_report else {})
    return make_node(name, annotations=annotations)


def plan(**overrides) -> AuditPlan:
    template = overrides.pop("template", PodTemplate(namespace=NS, image="nvidia/cuda:12.4.1-base-ubuntu22.04",
                                                     gpus=2, node=overrides.pop("node", "gpu-a")))
    values = dict(rounds=3, pods_per_round=2, timeout=10.0, poll_interval=0.01, delete_timeout=5.0)
    values.update(overrides)
    return AuditPlan(template=template, **values)


@pytest.fixture
async def cluster():
    async with running_kube_double() as double:
        double.store.create("nodes", seed_node("gpu-a"))
        double.store.create("nodes", seed_node("gpu-b", with_report=False))
        yield double


class RecordingProgress:
    """Stands in for the tqdm bar: what the audit told it."""

    def __init__(self):
        self.count = 0
        self.descriptions: list[str] = []

    def update(self, n: int = 1) -> None:
        self.count += n

    def set_description(self, desc: str) -> None:
        self.descriptions.append(desc)


async def run_audit(double, audit_plan: AuditPlan, plays: Callable[[str, int], Play], progress=None):
    kubelet = Kubelet(double.store, plays)
    task = asyncio.create_task(kubelet.run())
    try:
        async with kube_client_for(double) as api:
            samples = await Auditor(api, audit_plan, progress=progress).run()
    finally:
        task.cancel()
    return samples, kubelet


def audit_pods(double) -> list[dict]:
    return [p for p in double.store.items("pods", NS) if RUN_LABEL in (p["metadata"].get("labels") or {})]


# ---- rounds


async def test_all_pass_rounds_create_in_parallel_and_clean_up(cluster):
    # In each round pod 1 gets GPU0+GPU1 and pod 2 GPU4+GPU5: both inside one NUMA node.
    audit_plan = plan()
    progress = RecordingProgress()
    samples, kubelet = await run_audit(cluster, audit_plan, lambda r, n: Play(gpus=[0, 1] if n == 1 else [4, 5]),
                                       progress)
    assert (progress.count, progress.descriptions) == (6, ["round 1/3", "round 2/3", "round 3/3"])

    rows = [s.tsv_row().split("\t") for s in samples]
    prefix = f"gpupair-audit-{audit_plan.run_id}"
    assert [r[:3] for r in rows] == [[r, f"{prefix}-{r}-{n}", "Succeeded"] for r in ("1", "2", "3") for n in (1, 2)]
    assert {tuple(r[3:]) for r in rows} == {
        ("GPU0+GPU1", "00000000:21:00.0+00000000:31:00.0", "NUMA0+NUMA0", "NODE", "PASS"),
        ("GPU4+GPU5", "00000000:81:00.0+00000000:A1:00.0", "NUMA1+NUMA1", "NODE", "PASS"),
    }
    assert all(s.source == "log" and s.node == "gpu-a" for s in samples)
    # A round's two pods lived together; two rounds never overlapped; nothing is left.
    assert kubelet.live_per_round == {"1": 2, "2": 2, "3": 2}
    assert all(len(together) == 1 for together in kubelet.rounds_alive_together)
    assert audit_pods(cluster) == []
    # The node's report was read once for the whole run.
    assert len(cluster.requests_to("/api/v1/nodes/gpu-a", "GET")) == 1


async def test_pod_is_the_seeds_pod(cluster):
    await run_audit(cluster, plan(rounds=1, pods_per_round=1), lambda r, n: Play())
    created = cluster.requests_to(f"/api/v1/namespaces/{NS}/pods", "POST")[0].json()
    spec = created["spec"]
    assert spec["restartPolicy"] == "Never" and spec["nodeName"] == "gpu-a"
    (container,) = spec["containers"]
    assert container["image"] == "nvidia/cuda:12.4.1-base-ubuntu22.04"
    assert container["command"] == ["/bin/bash", "-lc"]
    assert container["args"] == ["nvidia-smi --query-gpu=index,uuid,pci.bus_id --format=csv\nnvidia-smi topo -m\n"]
    assert container["resources"] == {"requests": {"nvidia.com/gpu": "2"}, "limits": {"nvidia.com/gpu": "2"}}
    assert container["securityContext"]["allowPrivilegeEscalation"] is False
    assert spec["securityContext"]["runAsNonRoot"] is True
    assert created["metadata"]["labels"][RUN_LABEL]


async def test_failed_polls_are_retried(cluster):
    # The first two status polls get 500s; the round still waits for its pods instead of
    # taking "not in the list" for "gone".
    cluster.fail_next(f"/api/v1/namespaces/{NS}/pods", 500, times=2, method="GET")
    samples, _ = await run_audit(cluster, plan(rounds=1), lambda r, n: Play())
    assert [(s.phase, s.result) for s in samples] == [("Succeeded", "PASS")] * 2


async def test_sys_pair_fails(cluster):
    samples, _ = await run_audit(cluster, plan(rounds=1), lambda r, n: Play(gpus=[3, 4] if n == 2 else [0, 1]))
    assert [(s.gpu_pair, s.numa_pair, s.topo, s.result) for s in samples] == [
        ("GPU0+GPU1", "NUMA0+NUMA0", "NODE", "PASS"), ("GPU3+GPU4", "NUMA0+NUMA1", "SYS", "FAIL")]


async def test_pod_that_never_finishes_times_out_and_is_deleted(cluster):
    audit_plan = plan(rounds=1, timeout=0.5, node=None)
    progress = RecordingProgress()
    samples, _ = await run_audit(cluster, audit_plan, lambda r, n: Play(final=None) if n == 2 else Play(), progress)
    assert progress.count == 2  # the bar completes, the stuck pod counted when time ran out
    done, stuck = samples
    assert (done.result, done.phase) == ("PASS", "Succeeded")
    assert (stuck.phase, stuck.node, stuck.result) == ("Pending", "", FAIL_TIMEOUT)
    assert stuck.tsv_row().split("\t")[3:] == ["UNKNOWN"] * 4 + [FAIL_TIMEOUT]
    stuck_path = f"/api/v1/namespaces/{NS}/pods/{stuck.pod}"
    assert cluster.requests_to(stuck_path, "DELETE")
    assert audit_pods(cluster) == []


async def test_log_that_does_not_parse_is_fail_parse(cluster):
    broken = ("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
              "Make sure that the latest NVIDIA driver is installed and running.\n")
    samples, _ = await run_audit(cluster, plan(rounds=1),
                                 lambda r, n: Play(log=broken, final="Failed") if n == 1 else Play())
    assert [(s.phase, s.result) for s in samples] == [("Failed", verdicts.FAIL_PARSE), ("Succeeded", "PASS")]
    assert samples[0].tsv_row().split("\t")[3:7] == ["UNKNOWN"] * 4
    assert "no GPU rows" in samples[0].reason


async def test_verifier_annotations_are_preferred_over_the_log(cluster):
    annotations = {verdicts.GRANTED_KEY: "GPU6+GPU7", verdicts.PCI_KEY: "00000000:C1:00.0+00000000:E1:00.0",
                   verdicts.NUMA_KEY: "NUMA1+NUMA1", verdicts.LINK_KEY: "NODE",
                   verdicts.P2P_KEY: "not-supported", verdicts.VERDICT_KEY: "PASS"}
    # The log would say SYS; the verifier, which saw the grant on the node, says GPU6+GPU7 NODE.
    samples, _ = await run_audit(cluster, plan(rounds=1, pods_per_round=1),
                                 lambda r, n: Play(gpus=[3, 4], annotations=annotations))
    (sample,) = samples
    assert (sample.gpu_pair, sample.topo, sample.result, sample.source) == ("GPU6+GPU7", "NODE", "PASS", "annotations")
    assert not cluster.requests_to(f"/api/v1/namespaces/{NS}/pods/{sample.pod}/log")


async def test_scheduler_placed_pods_on_a_node_without_report(cluster):
    # No --node: the "scheduler" binds pod 2 to gpu-b, which has no gpupair report.
    samples, _ = await run_audit(cluster, plan(rounds=1, node=None),
                                 lambda r, n: Play(gpus=[4, 6], node="gpu-a" if n == 1 else "gpu-b"))
    a, b = samples
    assert (a.node, a.gpu_pair, a.numa_pair, a.result) == ("gpu-a", "GPU4+GPU6", "NUMA1+NUMA1", "PASS")
    assert (b.node, b.gpu_pair, b.numa_pair, b.result) == ("gpu-b", "UNKNOWN", "NUMA1+NUMA1", "PASS")
    created = cluster.requests_to(f"/api/v1/namespaces/{NS}/pods", "POST")[0].json()
    assert "nodeName" not in created["spec"]


async def test_node_that_cannot_be_read_falls_back_to_topo(cluster):
    cluster.fail_next("/api/v1/nodes/gpu-a", 403, method="GET", reason="Forbidden",
                      message='nodes "gpu-a" is forbidden: User "alice" cannot get resource "nodes"')
    samples, _ = await run_audit(cluster, plan(rounds=1, pods_per_round=1), lambda r, n: Play(gpus=[2, 3]))
    (sample,) = samples
    assert (sample.gpu_pair, sample.numa_pair, sample.topo, sample.result) == ("UNKNOWN", "NUMA0+NUMA0", "NODE", "PASS")


# ---- ending early


async def test_cancel_deletes_the_running_pods(cluster):
    kubelet = Kubelet(cluster.store, lambda r, n: Play(final=None, stuck_in="Running"))
    kube_task = asyncio.create_task(kubelet.run())
    try:
        async with kube_client_for(cluster) as api:
            audit = asyncio.create_task(Auditor(api, plan(timeout=60)).run())
            while len([p for p in audit_pods(cluster) if p["status"].get("phase") == "Running"]) < 2:
                await asyncio.sleep(0.01)
            audit.cancel()
            with pytest.raises(asyncio.CancelledError):
                await audit
    finally:
        kube_task.cancel()
    assert audit_pods(cluster) == []
    assert len([r for r in cluster.requests if r.method == "DELETE"]) == 2


async def test_refused_pod_stops_the_run_and_cleans_up(cluster):
    cluster.fail_next(f"/api/v1/namespaces/{NS}/pods", 403, method="POST",
                      message='pods is forbidden: User "alice" cannot create resource "pods"', reason="Forbidden")
    kubelet = Kubelet(cluster.store, lambda r, n: Play(final=None))
    kube_task = asyncio.create_task(kubelet.run())
    try:
        async with kube_client_for(cluster) as api:
            with pytest.raises(AuditError, match='cannot create resource "pods".*needs create'):
                await Auditor(api, plan()).run()
    finally:
        kube_task.cancel()
    # The round's two creates go out together: the refused one, and the other, which got through
    # unless the refusal stopped the round before it was sent (seen on a loaded machine). Either
    # way nothing is left behind.
    assert len(cluster.requests_to(f"/api/v1/namespaces/{NS}/pods", "POST")) in (1, 2)
    assert audit_pods(cluster) == []


async def test_missing_namespace_says_how_to_create_it(cluster):
    cluster.fail_next(f"/api/v1/namespaces/{NS}/pods", 404, times=2, method="POST",
                      message=f'namespaces "{NS}" not found', reason="NotFound")
    async with kube_client_for(cluster) as api:
        with pytest.raises(AuditError, match=f'namespaces "{NS}" not found.*kubectl create namespace {NS}'):
            await Auditor(api, plan()).run()
    assert audit_pods(cluster) == []


# ---- the command, end to end in a subprocess


def write_kubeconfig(path: Path, url: str) -> Path:
    path.write_text(
        "apiVersion: v1\nkind: Config\n"
        f"clusters:\n- name: double\n  cluster:\n    server: {url}\n"
        "users:\n- name: audit\n  user:\n    token: audit-token\n"
        "contexts:\n- name: double\n  context:\n    cluster: double\n    user: audit\n"
        "current-context: double\n")
    return path


async def start_command(tmp_path: Path, double, *flags: str) -> asyncio.subprocess.Process:
    kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", double.url)
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUPAIR_") and k != "KUBECONFIG"}
    return await asyncio.create_subprocess_exec(
        sys.executable, "-m", "gpupair.command.cli", "audit", "--kubeconfig", str(kubeconfig),
        "--namespace", NS, "--output", str(tmp_path / "results.tsv"), "--poll-interval", "0.02",
        "--delete-timeout", "5", "--log-level", "warning", *flags,
        cwd=REPO, env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)


async def run_command(tmp_path, double, plays, *flags) -> tuple[int, str, str]:
    kubelet = asyncio.create_task(Kubelet(double.store, plays).run())
    try:
        proc = await start_command(tmp_path, double, *flags)
        out, err = await asyncio.wait_for(proc.communicate(), 60)
    finally:
        kubelet.cancel()
    return proc.returncode, out.decode(), err.decode()


async def test_command_all_pass_exits_zero_with_tsv_and_summary(cluster, tmp_path):
    code, out, err = await run_command(tmp_path, cluster, lambda r, n: Play(gpus=[0, 1] if n == 1 else [4, 5]),
                                       "--rounds", "10", "--pods-per-round", "2", "--gpus", "2", "--node", "gpu-a")
    assert code == 0, err
    tsv = (tmp_path / "results.tsv").read_text().splitlines()
    assert tsv[0] == "round\tpod\tphase\tgpu_pair\tpci_pair\tnuma_pair\ttopo\tresult"
    assert len(tsv) == 21 and [row.split("\t")[0] for row in tsv[1:3]] == ["01", "01"]
    assert all(row.endswith("\tNODE\tPASS") for row in tsv[1:])
    assert out.splitlines()[: len(tsv)] == tsv  # the rows are echoed to stdout as the seed's tee did
    assert out.rstrip().endswith("20 samples, 0 SYS, 20 PASS (100.0%)")
    assert "gpu-a" in out and "NODE=20" in out
    assert audit_pods(cluster) == []
    (tmp_path / "sample-output.txt").write_text(out)  # docs/audit.md quotes a run like this one


async def test_command_sys_pair_exits_nonzero(cluster, tmp_path):
    code, out, _ = await run_command(tmp_path, cluster, lambda r, n: Play(gpus=[3, 4] if r == "2" and n == 1 else [0, 1]),
                                     "--rounds", "3", "--node", "gpu-a")
    assert code == 1
    assert "\n3\tgpupair-audit-" in out and "\n03\t" not in out  # seq -w 1 3 pads nothing
    assert "\tGPU3+GPU4\t00000000:61:00.0+00000000:81:00.0\tNUMA0+NUMA1\tSYS\tFAIL" in out
    assert "6 samples, 1 SYS, 5 PASS (83.3%): 1 failed" in out


def mixed_plays(r: str, n: int) -> Play:
    """Scheduler-placed pods on two nodes: one SYS grant, one broken driver, one pod stuck Pending."""
    node = "gpu-a" if n == 1 else "gpu-b"
    if (r, n) == ("2", 1):
        return Play(gpus=[3, 4], node=node)
    if (r, n) == ("3", 1):
        return Play(log="NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\n",
                    final="Failed", node=node)
    if (r, n) == ("3", 2):
        return Play(final=None)
    return Play(gpus=[4, 5] if n == 1 else [0, 2], node=node)


async def test_command_mixed_run_reports_per_node(cluster, tmp_path):
    code, out, err = await run_command(tmp_path, cluster, mixed_plays, "--rounds", "3", "--timeout", "1")
    assert code == 1, err
    rows = [line.split("\t") for line in (tmp_path / "results.tsv").read_text().splitlines()[1:]]
    assert [(r[0], r[2], r[6], r[7]) for r in rows] == [
        ("1", "Succeeded", "NODE", "PASS"), ("1", "Succeeded", "NODE", "PASS"),
        ("2", "Succeeded", "SYS", "FAIL"), ("2", "Succeeded", "NODE", "PASS"),
        ("3", "Failed", "UNKNOWN", "FAIL_PARSE"), ("3", "Pending", "UNKNOWN", "FAIL_TIMEOUT")]
    assert [r[3] for r in rows[:4]] == ["GPU4+GPU5", "UNKNOWN", "GPU3+GPU4", "UNKNOWN"]  # gpu-b has no report
    table = {line.split()[0]: line.split() for line in out.split("\n\n")[-1].splitlines()[1:-1]}
    assert table["gpu-a"][1:4] == ["3", "1", "1"]  # samples, SYS, PASS
    assert table["gpu-b"][1:4] == ["2", "0", "2"]
    assert table["(unscheduled)"][1:4] == ["1", "0", "0"]
    assert out.rstrip().endswith("6 samples, 1 SYS, 3 PASS (50.0%): 3 failed (1 timed out)")
    assert '"result":"FAIL_TIMEOUT"' in err and '"result":"FAIL_PARSE"' in err  # why, on stderr
    assert audit_pods(cluster) == []
    (tmp_path / "sample-output.txt").write_text(out)


# Bounds for a loaded machine (2 cores, other suites running): deadlines, not timings. An audit that
# ignored the signal would poll for its --timeout of 600 s per round, far past them.
STARTUP_S, EXIT_S = 120, 120


@pytest.mark.parametrize("delay", [0.0, 0.05, 0.3])  # the signal lands mid-poll, mid-request, mid-sleep
async def test_command_sigint_deletes_pods_and_exits_130(cluster, tmp_path, delay):
    kubelet = asyncio.create_task(Kubelet(cluster.store, lambda r, n: Play(final=None, stuck_in="Running")).run())
    (tmp_path / "results.tsv").write_text("an earlier audit's rows\n")
    try:
        proc = await start_command(tmp_path, cluster, "--rounds", "5", "--timeout", "600", "--node", "gpu-a")
        async def two_running():
            while len([p for p in audit_pods(cluster) if p["status"].get("phase") == "Running"]) < 2:
                await asyncio.sleep(0.02)
        await asyncio.wait_for(two_running(), STARTUP_S)
        await asyncio.sleep(delay)
        proc.send_signal(signal.SIGINT)
        out, err = await asyncio.wait_for(proc.communicate(), EXIT_S)
    finally:
        kubelet.cancel()
    assert proc.returncode == 130, err.decode()
    assert audit_pods(cluster) == []
    assert "no samples (interrupted)" in out.decode() and "Traceback" not in err.decode()
    # no sample, nothing to write: the earlier file is left as it was, not cut to its header
    assert (tmp_path / "results.tsv").read_text() == "an earlier audit's rows\n"


async def test_command_without_cluster_config_exits_2(tmp_path):
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("GPUPAIR_") and k not in ("KUBECONFIG", "KUBERNETES_SERVICE_HOST")}
    env["HOME"] = str(tmp_path)  # no ~/.kube/config
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "gpupair.command.cli", "audit", "--output", str(tmp_path / "r.tsv"),
        cwd=REPO, env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    _, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 2
    assert "no Kubernetes configuration" in err.decode()
