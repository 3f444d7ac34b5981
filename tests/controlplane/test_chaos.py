"""The fault matrix (marker ``chaos``): each fault in the middle of a burst of 40 GPU pods on
eight nodes, on the real etcd, kube-apiserver and kube-scheduler, with gpupair as deploy/ runs it
(tests/controlplane/burst.py has the cluster and the burst; faults.py how each fault is made).

Every row asserts what must hold whatever the fault: no GPU handed out twice (the harness
kubelet refused no pod, and every node's allocation ledger equals what its kubelet handed out),
no SYS pair for a pod under ``required`` (the default), and every pod placed or waiting with
a reason that names the fault's effect. Every row records the time from the fault's end to the
next bind, the apiserver's lists, watches and writes until the last pod was bound, and the signal
an operator would watch; with GPUPAIR_CHAOS_RESULTS set to a file the rows are written there as
JSON, which bench/chaos_table.py renders into docs/reliability.md.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gpupair.topology.report import FREE_KEY
from gpupair.webhook.sidecar import CONTAINER_NAME
from tests.controlplane.burst import NAMESPACE, BurstCluster, Outcome
from tests.controlplane.faults import compact_etcd, metric_total, stalled
from tests.controlplane.kubelet import gpu_ask
from tests.controlplane.processes import Process, kill, terminate

pytestmark = pytest.mark.chaos

RESULTS_ENV = "GPUPAIR_CHAOS_RESULTS"
_results: list[dict[str, Any]] = []


@pytest.fixture(scope="module")
def cluster(control_plane, deploy_renders) -> Iterator[BurstCluster]:
    directory = control_plane.directory / "chaos"
    directory.mkdir()
    made = BurstCluster(control_plane, deploy_renders("device-plugin"), directory)
    began = time.time()
    try:
        made.start()
        yield made
    finally:
        made.close()
        keep = os.environ.get("GPUPAIR_CONTROLPLANE_LOGS")
        if keep:
            from tests.controlplane.conftest import copy_logs

            copy_logs(control_plane.directory, began, Path(keep) / "chaos")
        target = os.environ.get(RESULTS_ENV)
        if target and _results:
            with open(target, "w") as out:
                json.dump(_results, out, indent=1)


@pytest.fixture
def fresh(cluster: BurstCluster) -> BurstCluster:
    """The shared cluster, emptied of the last row's pods (and their holds)."""
    cluster.clear()
    return cluster


def check(cluster: BurstCluster, outcome: Outcome, effects: tuple[str, ...], signal: str, value: float) -> None:
    """The row's invariants, then its figures recorded."""
    assert not outcome.refusals, f"{outcome.row}: the kubelet was sent pods it could not admit: {outcome.refusals}"
    assert outcome.sys_grants == [], f"{outcome.row}: SYS pairs under required: {outcome.sys_grants}"
    for pod, messages in outcome.waiting.items():
        assert messages and any(effect in messages[-1] for effect in effects), \
            f"{outcome.row}: {pod} waits without a reason naming {effects}: {messages[-1:]}"
    ledgers = cluster.wait_ledgers_match()
    for node, pods in ledgers.items():
        devices = [i for held in pods.values() for i in held]
        assert len(devices) == len(set(devices)), f"{outcome.row}: {node}'s ledger lists a GPU twice: {pods}"
    record = {
        "row": outcome.row, "pods": outcome.pods, "placed": len(outcome.placed), "waiting": len(outcome.waiting),
        "gpus_twice": 0, "sys": 0, "fault_s": outcome.fault_s, "next_bind_s": outcome.next_bind_s,
        "all_placed_s": outcome.all_placed_s, **outcome.requests, "signal": signal, "signal_value": value,
        **outcome.notes,
    }
    _results.append(record)
    print(json.dumps(record))


def counter(cluster: BurstCluster, name: str, **labels: str) -> float:
    return sum(metric_total(text, name, **labels) for text in cluster.extender_metrics().values())


def test_apiserver_killed_and_restarted_mid_burst(fresh: BurstCluster):
    def fault() -> None:
        fresh.plane.restart_apiserver()

    outcome = fresh.burst("apiserver", fault)
    check(fresh, outcome, ("stale",), "gpupair_extender_watch_restarts_total",
          counter(fresh, "gpupair_extender_watch_restarts_total"))
    assert len(outcome.placed) == outcome.pods


def test_watches_expire_mid_burst(fresh: BurstCluster):
    """etcd compacted past every resourceVersion the extender and the reporters hold, then every
    connection dropped (the apiserver restarted): each watch resumes from a compacted version,
    gets 410 Gone and lists again."""
    gone_before = counter(fresh, "gpupair_extender_watch_restarts_total", reason="gone")

    def fault() -> None:
        compact_etcd(fresh.plane)
        fresh.plane.restart_apiserver()

    outcome = fresh.burst("watches", fault)
    gone = counter(fresh, "gpupair_extender_watch_restarts_total", reason="gone") - gone_before
    check(fresh, outcome, ("stale",), 'gpupair_extender_watch_restarts_total{reason="gone"}', gone)
    assert gone >= 1, "no watch of the extender was answered 410 Gone and relisted"
    assert len(outcome.placed) == outcome.pods


def test_etcd_stalls_for_five_seconds_mid_burst(fresh: BurstCluster):
    def fault() -> None:
        with stalled(fresh.plane.etcd):
            time.sleep(5)

    errors_before = counter(fresh, "gpupair_extender_decisions_total", verb="bind", outcome="failed")
    outcome = fresh.burst("etcd", fault)
    failed = counter(fresh, "gpupair_extender_decisions_total", verb="bind", outcome="failed") - errors_before
    check(fresh, outcome, ("stale",), 'gpupair_extender_decisions_total{verb="bind",outcome="failed"}', failed)
    assert len(outcome.placed) == outcome.pods


def test_extender_killed_between_a_binding_and_its_answer(fresh: BurstCluster):
    """The Binding is written, the extender dies before kube-scheduler reads its answer: the
    scheduler sees a failed bind for a pod that is bound; the restarted extender must hold
    that pod's GPUs (it rebuilds its holds from the pods bound and not in a ledger yet)."""
    [name] = fresh.extenders
    caught: dict[str, str] = {}

    def fault() -> None:
        fresh.balancer.hold_answers(b"/bind")
        assert fresh.balancer.held.wait(60), "no bind reached the extender"
        pod = re.search(rb'"PodName":\s*"([^"]+)"', fresh.balancer.held_request)
        assert pod is not None, fresh.balancer.held_request
        caught["pod"] = pod.group(1).decode()
        fresh.api.wait_for(lambda: fresh.api.get("v1", "Pod", caught["pod"], NAMESPACE)["spec"].get("nodeName"),
                           30, f"the Binding of {caught['pod']} written")
        fresh.restart_extender(name, while_down=lambda: fresh.balancer.release(drop=True))

    outcome = fresh.burst("extender", fault)
    failures = fresh.failed_scheduling("extender")
    outcome.notes["unanswered_bind"] = caught["pod"]
    check(fresh, outcome, ("connection refused", "EOF"), "FailedScheduling events", len(failures))
    assert len(outcome.placed) == outcome.pods
    assert caught["pod"] in {g.pod for g in outcome.grants}


def test_one_of_two_replicas_killed_behind_the_round_robin(fresh: BurstCluster):
    [first] = fresh.extenders
    second = fresh.add_extender()
    try:
        def fault() -> None:
            kill(fresh.extenders[first][0])

        outcome = fresh.burst("replica", fault)
        check(fresh, outcome, ("connection refused", "EOF"), "FailedScheduling events",
              len(fresh.failed_scheduling("replica")))
        assert len(outcome.placed) == outcome.pods
        assert fresh.balancer.connections[("127.0.0.1", int(fresh.extenders[second][1].rsplit(":", 1)[1]))] > 0
    finally:
        fresh.remove_extender(first)


def test_a_reporter_restarted_mid_burst(fresh: BurstCluster):
    node = "chaos-1"

    def fault() -> None:
        fresh.restart_reporter(node)

    outcome = fresh.burst("reporter", fault)
    stale = counter(fresh, "gpupair_extender_nodes", state="stale")
    check(fresh, outcome, ("stale",), 'gpupair_extender_nodes{state="stale"}', stale)
    assert len(outcome.placed) == outcome.pods


def test_the_webhook_down_for_ten_seconds(fresh: BurstCluster):
    """failurePolicy Ignore: pods created while the webhook is down are created without the
    verifier sidecar; they are scheduled as any other."""
    def fault() -> None:
        fresh.restart_webhook(down=10)

    before = apiserver_requests_metric(fresh, "apiserver_admission_webhook_fail_open_count")
    outcome = fresh.burst("webhook", fault)
    fail_open = apiserver_requests_metric(fresh, "apiserver_admission_webhook_fail_open_count") - before
    check(fresh, outcome, ("stale",), "apiserver_admission_webhook_fail_open_count", fail_open)
    assert len(outcome.placed) == outcome.pods
    unverified = [p["metadata"]["name"] for p in fresh.api.list("v1", "Pod", NAMESPACE)
                  if gpu_ask(p["spec"]["containers"][0]) > 1 and not has_verifier(p)]
    outcome.notes["without_verifier"] = len(unverified)
    assert fail_open >= 1 and unverified, "no pod was created while the webhook was down"


def has_verifier(pod: dict[str, Any]) -> bool:
    return any(c["name"] == CONTAINER_NAME for c in (pod["spec"].get("initContainers") or []) + pod["spec"]["containers"])


def apiserver_requests_metric(cluster: BurstCluster, name: str) -> float:
    return metric_total(cluster.api.request("GET", "/metrics"), name)


def test_extender_sigterm_mid_burst_finishes_the_binds_in_flight(fresh: BurstCluster):
    """SIGTERM while a Binding waits on etcd: the extender stops taking requests, finishes that
    bind, answers it, and exits 0; every bind it answered as bound is a pod bound there."""
    [name] = fresh.extenders
    process, _ = fresh.extenders[name]
    seen: dict[str, Any] = {}

    def fault() -> None:
        def stop(extender: Process) -> None:
            fresh.balancer.hold_answers(b"/bind", request_too=True)
            assert fresh.balancer.held.wait(60), "no bind reached the extender"
            seen["pod"] = re.search(rb'"PodName":\s*"([^"]+)"', fresh.balancer.held_request).group(1).decode()
            with stalled(fresh.plane.etcd):
                fresh.balancer.release()  # the bind reaches the extender; its Binding waits on etcd
                time.sleep(0.5)
                os.killpg(extender.pid, signal.SIGTERM)
                time.sleep(1)
            seen["exit"] = terminate(extender, signalled=True)

        fresh.restart_extender(name, stop=stop)

    outcome = fresh.burst("sigterm", fault)
    answered = bound_after_shutdown(process.log, process.pid)
    check(fresh, outcome, ("connection refused", "EOF"), "binds answered while draining", len(answered))
    assert seen["exit"] == 0, f"the extender exited {seen['exit']} on SIGTERM"
    assert seen["pod"] in answered, f"the bind in flight ({seen['pod']}) was not finished: {answered}"
    for pod, node in answered.items():
        assert fresh.api.get("v1", "Pod", pod, NAMESPACE)["spec"].get("nodeName") == node, (pod, node)
    scheduler_log = fresh.scheduler.log.read_text(errors="replace")
    assert f'"Failed to bind pod" pod="{NAMESPACE}/{seen["pod"]}"' not in scheduler_log
    assert len(outcome.placed) == outcome.pods


def bound_after_shutdown(log: Path, pid: int) -> dict[str, str]:
    """The pods (name -> node) a process's log says it bound after its "shutting down" line;
    ``pid`` picks the run of that process out of a log that restarts append to."""
    lines = log.read_text(errors="replace").splitlines()
    bound: dict[str, str] = {}
    draining = False
    for line in lines:
        with contextlib.suppress(ValueError):
            entry = json.loads(line)
            if entry.get("msg") == "shutting down":
                draining = True
            elif draining and entry.get("msg") == "bound":
                bound[entry["pod"].split("/", 1)[1]] = entry["node"]
            elif draining and entry.get("msg") == "serving":
                break  # the next run
    return bound


def test_reporter_sigterm_leaves_its_lease_to_expire(fresh: BurstCluster):
    """SIGTERM to a reporter mid-burst: it exits 0 and leaves its Lease as it was (the node
    goes stale after --stale-after if it does not come back), and the report it leaves names
    no GPU free that a pod held when it stopped."""
    node = "chaos-2"
    left: dict[str, Any] = {}

    def fault() -> None:
        def stop(reporter: Process) -> None:
            held = fresh.held()[node]
            left["exit"] = terminate(reporter)
            left["lease"] = lease_of(fresh, node)
            left["held"] = held
            annotations = fresh.api.get("v1", "Node", node)["metadata"].get("annotations") or {}
            left["free"] = json.loads(annotations[FREE_KEY])["free"]
            left["ledger"] = fresh.ledgers()[node]
            time.sleep(2)
            left["lease_after"] = lease_of(fresh, node)

        fresh.restart_reporter(node, stop=stop)

    outcome = fresh.burst("reporter-sigterm", fault)
    assert left["exit"] == 0
    assert left["lease"] is not None and left["lease_after"] == left["lease"], "the Lease changed after the reporter stopped"
    taken = {i for devices in left["held"].values() for i in devices}
    assert not taken & set(left["free"]), f"the report left names taken GPUs free: {left['free']} of {left['held']}"
    now = fresh.held()[node]
    for pod, devices in left["ledger"].items():
        assert now.get(pod, devices) == devices, f"the ledger left names {pod} on {devices}, the kubelet {now.get(pod)}"
    check(fresh, outcome, ("stale",), "the Lease's renewTime, unchanged while stopped (s)", outcome.fault_s)
    assert len(outcome.placed) == outcome.pods


def lease_of(cluster: BurstCluster, node: str) -> str | None:
    lease = cluster.api.find("coordination.k8s.io/v1", "Lease", node, cluster.install_namespace)
    return None if lease is None else lease["spec"].get("renewTime")
