"""The fault matrix on device-plugin nodes (marker ``chaos``): each fault in the middle of a
burst of 40 GPU pods on eight nodes, on the real etcd, kube-apiserver and kube-scheduler, with
gpupair as deploy/ runs it. burst.py has the shared cluster and the burst, faults.py how each
fault is made, chaos_rows.py what every row asserts and records; the DRA rows are in
test_chaos_dra.py.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gpupair.topology.report import FREE_KEY
from gpupair.webhook.sidecar import CONTAINER_NAME
from tests.controlplane.burst import BurstCluster
from tests.controlplane.chaos_rows import check, counter, running
from tests.controlplane.containers import base_env, gpupair_argv
from tests.controlplane.faults import compact_etcd, metric_total, stalled
from tests.controlplane.gpupair_install import NAMESPACE as GPUPAIR_NAMESPACE
from tests.controlplane.kubelet import gpu_ask
from tests.controlplane.workloads import gpu_pod
from tests.controlplane.processes import Process, kill, terminate

pytestmark = pytest.mark.chaos

@pytest.fixture(scope="module")
def cluster(control_plane, deploy_renders) -> Iterator[BurstCluster]:
    directory = control_plane.directory / "chaos"
    directory.mkdir()
    yield from running(BurstCluster(control_plane, deploy_renders("device-plugin"), directory), "chaos")


@pytest.fixture
def fresh(cluster: BurstCluster) -> BurstCluster:
    """The shared cluster, emptied of the last row's pods (and their holds)."""
    cluster.clear()
    return cluster


def test_apiserver_killed_and_restarted_mid_burst(fresh: BurstCluster):
    def fault() -> None:
        fresh.plane.restart_apiserver()

    before = counter(fresh, "gpupair_extender_watch_restarts_total")
    outcome = fresh.burst("apiserver", fault)
    check(fresh, outcome, ("stale",), "gpupair_extender_watch_restarts_total",
          counter(fresh, "gpupair_extender_watch_restarts_total") - before)
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
    """etcd stopped with a bind in flight, for longer than the extender's --api-timeout (4 s):
    that bind gives up and answers an error while its Binding is still queued at the apiserver,
    and lands when etcd continues. The pod is bound though the extender rolled its plan back;
    its GPUs must stay held (the pod watch holds a pod bound by "someone else" by count)."""
    caught: dict[str, str] = {}

    def fault() -> None:
        fresh.balancer.hold_answers(b"/bind", request_too=True)
        assert fresh.balancer.held.wait(60), "no bind reached the extender"
        caught["pod"] = re.search(rb'"PodName":\s*"([^"]+)"', fresh.balancer.held_request).group(1).decode()
        with stalled(fresh.plane.etcd):
            fresh.balancer.release()
            time.sleep(5)

    errors_before = counter(fresh, "gpupair_extender_decisions_total", verb="bind", outcome="failed")
    outcome = fresh.burst("etcd", fault)
    failed = counter(fresh, "gpupair_extender_decisions_total", verb="bind", outcome="failed") - errors_before
    outcome.notes["bind_in_flight"] = caught["pod"]
    check(fresh, outcome, ("stale",), 'gpupair_extender_decisions_total{verb="bind",outcome="failed"}', failed)
    assert len(outcome.placed) == outcome.pods
    assert failed >= 1, "the bind in flight did not time out: the stall did not meet it"


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
        fresh.api.wait_for(lambda: fresh.api.get("v1", "Pod", caught["pod"], fresh.namespace)["spec"].get("nodeName"),
                           30, f"the Binding of {caught['pod']} written")
        fresh.restart_extender(name, while_down=lambda: fresh.balancer.release(drop=True))

    outcome = fresh.burst("extender", fault)
    failures = fresh.failed_scheduling("extender")
    outcome.notes["unanswered_bind"] = caught["pod"]
    check(fresh, outcome, ("connection refused", "EOF"), "FailedScheduling events", len(failures))
    assert len(outcome.placed) == outcome.pods
    assert caught["pod"] in {g.pod for g in outcome.grants}


def test_one_of_two_replicas_killed_behind_the_round_robin(fresh: BurstCluster):
    """Two replicas behind a round robin, both answering; the one serving a bind dies between
    its Binding and its answer. The other must hold that pod's GPUs (its pod watch sees the pod
    bound by "someone else") and take every call from then on."""
    added = fresh.add_extender()
    caught: dict[str, str] = {}

    def fault() -> None:
        fresh.balancer.hold_answers(b"/bind")
        assert fresh.balancer.held.wait(60), "no bind reached an extender"
        caught["pod"] = re.search(rb'"PodName":\s*"([^"]+)"', fresh.balancer.held_request).group(1).decode()
        fresh.api.wait_for(lambda: fresh.api.get("v1", "Pod", caught["pod"], fresh.namespace)["spec"].get("nodeName"),
                           30, f"the Binding of {caught['pod']} written")
        port = fresh.balancer.held_backend[1]
        caught["replica"] = next(name for name, (_, url) in fresh.extenders.items() if url.endswith(f":{port}"))
        kill(fresh.extenders[caught["replica"]][0])
        fresh.balancer.release(drop=True)

    try:
        outcome = fresh.burst("replica", fault)
        outcome.notes.update(unanswered_bind=caught["pod"],
                             connections={f"{host}:{port}": n for (host, port), n in fresh.balancer.connections.items()})
        check(fresh, outcome, ("connection refused", "EOF"), "FailedScheduling events",
              len(fresh.failed_scheduling("replica")))
        assert len(outcome.placed) == outcome.pods
        assert caught["pod"] in {g.pod for g in outcome.grants}
    finally:  # one replica stays for the later rows
        fresh.remove_extender(caught.get("replica") or added)


def test_the_extender_down_cpu_pods_bind_and_gpu_pods_wait_with_the_reason(fresh: BurstCluster):
    """The extender down (SIGKILL; no replica answers) mid-burst, with the two entries deploy/
    ships: CPU pods created meanwhile reach only the every-pod entry, whose failed prioritize
    kube-scheduler drops, so they bind; GPU pods fail at the GPU entry's filter (ignorable: false)
    and wait, each with a FailedScheduling event that names the extender's filter URL. Started
    again, the extender places them, nothing promised twice."""
    [name] = fresh.extenders
    filter_url = f"{fresh.balancer.url}/filter"
    cpu_pods = [f"down-cpu-{i}" for i in range(8)]
    gpu_pods = set(fresh.pod_names("extender-down"))
    seen: dict[str, Any] = {}

    def gpu_pods_told_why() -> list[str] | None:
        """This row's GPU pods with a FailedScheduling naming the filter URL (earlier rows' events stay)."""
        told = sorted({e["regarding"]["name"] for e in fresh.api.list("events.k8s.io/v1", "Event", fresh.namespace)
                       if e.get("reason") == "FailedScheduling" and filter_url in (e.get("note") or "")
                       and e["regarding"]["name"] in gpu_pods})
        return told or None

    def while_down() -> None:
        began = time.monotonic()
        for pod in cpu_pods:
            fresh.api.create(gpu_pod(fresh.namespace, pod, 0))
        fresh.api.wait_for(lambda: all(fresh.api.get("v1", "Pod", pod, fresh.namespace)["spec"].get("nodeName")
                                       for pod in cpu_pods), 60, "the CPU pods bound with the extender down")
        seen["cpu_bound_s"] = round(time.monotonic() - began, 2)
        seen["told"] = fresh.api.wait_for(gpu_pods_told_why, 60, f"a GPU pod's FailedScheduling naming {filter_url}")
        seen["unbound_gpu_pods"] = [p["metadata"]["name"] for p in fresh.api.list("v1", "Pod", fresh.namespace)
                                    if p["metadata"]["name"] in seen["told"] and not p["spec"].get("nodeName")]

    def fault() -> None:
        fresh.restart_extender(name, while_down=while_down)

    outcome = fresh.burst("extender-down", fault)
    cpu_waited = [e for e in fresh.api.list("events.k8s.io/v1", "Event", fresh.namespace)
                  if e.get("reason") == "FailedScheduling" and e["regarding"]["name"] in cpu_pods]
    outcome.notes.update(cpu_pods_bound_s=seen["cpu_bound_s"], gpu_pods_told=len(seen["told"]))
    check(fresh, outcome, ("connection refused", "EOF"), "CPU pods bound while it was down", len(cpu_pods))
    assert not cpu_waited, [e.get("note") for e in cpu_waited]
    assert seen["unbound_gpu_pods"], "no GPU pod waited while the extender was down"
    sim = fresh.sim
    assert sim is not None
    sim.wait_admitted(fresh.namespace, cpu_pods, timeout=60)
    assert len(outcome.placed) == outcome.pods


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
    unverified = [p["metadata"]["name"] for p in fresh.api.list("v1", "Pod", fresh.namespace)
                  if gpu_ask(p["spec"]["containers"][0]) > 1 and not has_verifier(p)]
    outcome.notes["without_verifier"] = len(unverified)
    assert fail_open >= 1 and unverified, "no pod was created while the webhook was down"
    shown = status_json(fresh)["summary"]["notVerified"]
    assert sorted(p["name"] for p in shown) == sorted(unverified)
    assert {p["verdict"] for p in shown} == {"not verified"}


def status_json(cluster: BurstCluster) -> dict[str, Any]:
    """`gpupair status -o json` on the burst's namespace, run as a user runs it."""
    done = subprocess.run(gpupair_argv(["status", "-o", "json", "-n", cluster.namespace,
                                        "--kubeconfig", str(cluster.plane.admin_kubeconfig)]),
                          capture_output=True, text=True, timeout=60, env=base_env())
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def has_verifier(pod: dict[str, Any]) -> bool:
    return any(c["name"] == CONTAINER_NAME for c in (pod["spec"].get("initContainers") or []) + pod["spec"]["containers"])


def apiserver_requests_metric(cluster: BurstCluster, name: str) -> float:
    return metric_total(cluster.api.request("GET", "/metrics"), name)


def test_extender_sigterm_mid_burst_finishes_the_binds_in_flight(fresh: BurstCluster):
    """SIGTERM while a Binding waits on etcd: the extender stops taking requests, finishes that
    bind, answers it, and exits 0; every bind it answered as bound is a pod bound there."""
    [name] = fresh.extenders
    process, _ = fresh.extenders[name]
    offset = process.log.stat().st_size
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
    answered = bound_after_shutdown(process.log, offset)
    check(fresh, outcome, ("connection refused", "EOF"), "binds answered while draining", len(answered))
    assert seen["exit"] == 0, f"the extender exited {seen['exit']} on SIGTERM"
    assert seen["pod"] in answered, f"the bind in flight ({seen['pod']}) was not finished: {answered}"
    for pod, node in answered.items():
        assert fresh.api.get("v1", "Pod", pod, fresh.namespace)["spec"].get("nodeName") == node, (pod, node)
    scheduler_log = fresh.scheduler.log.read_text(errors="replace")
    assert f'"Failed to bind pod" pod="{fresh.namespace}/{seen["pod"]}"' not in scheduler_log
    assert len(outcome.placed) == outcome.pods


def bound_after_shutdown(log: Path, offset: int) -> dict[str, str]:
    """The pods (name -> node) a process's log says it bound after the first "shutting down"
    line past ``offset`` (and before it served again: restarts append to the same log)."""
    with log.open("rb") as text:
        text.seek(offset)
        lines = text.read().decode(errors="replace").splitlines()
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
    goes stale after --stale-after if it does not come back), and the report it leaves is one
    it scanned: every pod its ledger names holds those GPUs, and it names the rest free."""
    node = "chaos-2"
    left: dict[str, Any] = {}

    def fault() -> None:
        def stop(reporter: Process) -> None:
            left["exit"] = terminate(reporter)
            left["lease"] = lease_of(fresh, node)
            annotations = fresh.api.get("v1", "Node", node)["metadata"].get("annotations") or {}
            left["free"] = json.loads(annotations[FREE_KEY])["free"]
            left["ledger"] = fresh.ledgers()[node]
            time.sleep(2)
            left["lease_after"] = lease_of(fresh, node)

        fresh.restart_reporter(node, stop=stop)

    outcome = fresh.burst("reporter-sigterm", fault)
    assert left["exit"] == 0
    assert left["lease"] is not None and left["lease_after"] == left["lease"], "the Lease changed after the reporter stopped"
    # The report it leaves is the last it scanned (pods admitted since are held by the extender
    # until a report lists them): a true picture of that moment, not one made up on the way out.
    in_ledger = {i for devices in left["ledger"].values() for i in devices}
    assert not in_ledger & set(left["free"]) and in_ledger | set(left["free"]) == set(range(8)), left
    now = fresh.held()[node]
    for pod, devices in left["ledger"].items():
        assert now.get(pod, devices) == devices, f"the ledger left names {pod} on {devices}, the kubelet {now.get(pod)}"
    check(fresh, outcome, ("stale",), "the Lease's renewTime, unchanged while stopped (s)", outcome.fault_s)
    assert len(outcome.placed) == outcome.pods


def lease_of(cluster: BurstCluster, node: str) -> str | None:
    lease = cluster.api.find("coordination.k8s.io/v1", "Lease", node, GPUPAIR_NAMESPACE)
    return None if lease is None else lease["spec"].get("renewTime")


def test_extender_killed_while_a_defrag_plan_holds_a_set(fresh: BurstCluster):
    """A defrag plan in flight holds chaos-1's NUMA0 for a 4-GPU pod (gated, as one waiting for
    its plan's evictions); the extender is SIGKILLed and restarted mid-burst. The restarted
    extender reads the plan again from the plans ConfigMap: no burst pod gets a held GPU, and
    the waiting pod, released, gets the set."""
    from gpupair.kubewire.defrag_plans import PLANS_CONFIGMAP, PlanInFlight

    [name] = fresh.extenders
    node, held = f"{fresh.namespace}-1", [0, 1, 2, 3]
    waiting = gpu_pod(fresh.namespace, "defrag-waiting", 4)
    waiting["spec"]["schedulingGates"] = [{"name": "gpupair.io/test-waits"}]
    uid = fresh.api.create(waiting)["metadata"]["uid"]
    now = time.time()
    plan = PlanInFlight(namespace=fresh.namespace, name="defrag-waiting", uid=uid, node=node, devices=held, moves=[],
                        startedAt=now, heldUntil=now + 600)
    plans = fresh.api.create({"apiVersion": "v1", "kind": "ConfigMap", "data": {uid: plan.model_dump_json()},
                              "metadata": {"name": PLANS_CONFIGMAP, "namespace": GPUPAIR_NAMESPACE}})
    try:
        outcome = fresh.burst("defrag", lambda: fresh.restart_extender(name))
        on_held = [g for g in outcome.grants if g.node == node and set(g.devices) & set(held)]
        outcome.notes["held_gpus_taken"] = len(on_held)
        check(fresh, outcome, ("connection refused", "EOF"), "burst pods on the held GPUs", len(on_held))
        assert len(outcome.placed) == outcome.pods
        assert on_held == [], on_held
        fresh.api.patch(fresh.api.path("v1", "Pod", "defrag-waiting", fresh.namespace), {"spec": {"schedulingGates": None}})
        [grant] = fresh.sim.wait_admitted(fresh.namespace, ["defrag-waiting"], timeout=60)
        assert (grant.node, grant.devices) == (node, tuple(held))
    finally:
        fresh.api.delete(plans)
