"""deploy/'s RBAC and admission policies as a real apiserver enforces them (their CEL run by the
apiserver itself, not a model of it), with the tokens gpupair's processes call with; what a fresh
`kubectl apply -k` ships, and its scheduler entries on the real kube-scheduler."""

from __future__ import annotations

import json
import subprocess

import pytest

from gpupair.extender.every_pod import EVERY_POD_VERB
from tests.controlplane.api import ApiError
from tests.controlplane.faults import metric_total, scrape
from tests.controlplane.gpupair_install import NAMESPACE, scheduler_extenders
from tests.controlplane.workloads import SEED_TOPO, gpu_pod
from tests.deploy_manifests import DEPLOY, container, env_of, find
from tests.k8s_tools import kubectl_path, require


def refused(call) -> ApiError:
    with pytest.raises(ApiError) as caught:
        call()
    return caught.value


@pytest.fixture
def two_nodes(api, kubelets, gpupair, namespace):
    """Nodes a and b, gpupair applied, a reporter Pod on a, and that pod's node-bound token."""
    install = gpupair("device-plugin")
    sim = kubelets()
    for name in ("policy-a", "policy-b"):
        sim.add_node(name, SEED_TOPO)
    pod = install.reporter_pod(sim.nodes["policy-a"])
    reporter = api.as_token(api.request_token(NAMESPACE, "gpupair-reporter", bound_pod=pod))
    return install, reporter


def test_a_reporter_may_annotate_its_own_node_only_and_only_under_gpupair_io(api, two_nodes):
    _, reporter = two_nodes
    own = {"metadata": {"annotations": {"gpupair.io/probe": "1"}}}
    reporter.patch("/api/v1/nodes/policy-a", own)
    assert api.get("v1", "Node", "policy-a")["metadata"]["annotations"]["gpupair.io/probe"] == "1"

    other = refused(lambda: reporter.patch("/api/v1/nodes/policy-b", own))
    assert other.status == 403 and "may not change node policy-b" in str(other), other
    foreign = refused(lambda: reporter.patch("/api/v1/nodes/policy-a", {"metadata": {"annotations": {"x.io/y": "1"}}}))
    assert foreign.status == 403 and "only gpupair.io/ annotations" in str(foreign), foreign
    labels = refused(lambda: reporter.patch("/api/v1/nodes/policy-a", {"metadata": {"labels": {"a": "b"}}}))
    assert labels.status == 403, labels


def test_a_reporter_token_without_a_node_is_refused(api, two_nodes):
    unbound = api.as_token(api.request_token(NAMESPACE, "gpupair-reporter"))
    error = refused(lambda: unbound.patch("/api/v1/nodes/policy-a", {"metadata": {"annotations": {"gpupair.io/p": "1"}}}))
    assert error.status == 403 and "node-bound service-account token" in str(error), error


def test_only_the_reporter_writes_verdicts_and_nobody_creates_a_pod_with_one(api, two_nodes, namespace):
    _, reporter = two_nodes
    forged = gpu_pod(namespace, "forged", 2, annotations={"gpupair.io/verdict": "PASS"})
    error = refused(lambda: api.create(forged))
    assert error.status == 422 or error.status == 403, error
    assert "gpupair.io/verdict" in str(error), error

    api.create(gpu_pod(namespace, "honest", 2, node="policy-a"))
    verdict = {"metadata": {"annotations": {"gpupair.io/verdict": "PASS"}}}
    error = refused(lambda: api.patch(f"/api/v1/namespaces/{namespace}/pods/honest", verdict))
    assert "only the gpupair reporter may set" in str(error), error
    reporter.patch(f"/api/v1/namespaces/{namespace}/pods/honest", verdict)
    assert api.get("v1", "Pod", "honest", namespace)["metadata"]["annotations"]["gpupair.io/verdict"] == "PASS"


def test_the_extender_may_read_nodes_but_not_change_them(api, two_nodes):
    extender = api.as_token(api.request_token(NAMESPACE, "gpupair-extender"))
    assert {n["metadata"]["name"] for n in extender.list("v1", "Node")} >= {"policy-a", "policy-b"}
    error = refused(lambda: extender.patch("/api/v1/nodes/policy-a", {"metadata": {"annotations": {"gpupair.io/p": "1"}}}))
    assert error.status == 403, error


def test_a_fresh_kubectl_apply_ships_the_fragmentation_score(control_plane):
    """`kubectl apply -k deploy/overlays/self-managed`, as the install guide says, judged by the
    apiserver (server-side dry run: the namespace is the session's): the extender it creates
    ranks by the fragmentation score."""
    kubectl = require("kubectl", kubectl_path())
    done = subprocess.run([kubectl, "--kubeconfig", str(control_plane.admin_kubeconfig), "apply", "-k",
                           str(DEPLOY / "overlays" / "self-managed"), "--dry-run=server", "-o", "json"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    items = json.loads(done.stdout)["items"]
    extender = find(items, "Deployment", "gpupair-extender", NAMESPACE)
    assert env_of(container(items, "Deployment", "gpupair-extender", "extender"))["GPUPAIR_EXTENDER_SCORE"] == \
        "fragmentation", extender


def test_the_shipped_entries_score_every_pod_once(api, namespace, kubelets, scheduler, gpupair):
    """deploy/'s scheduler configuration, both entries, on the real kube-scheduler with the
    extender as deploy/ runs it: a CPU pod reaches the every-pod entry only; a GPU pod reaches the
    GPU entry's filter and bind, and is scored by the every-pod entry alone."""
    install = gpupair("device-plugin")
    sim = kubelets(policy="aligned")
    for name in ("entries-a", "entries-b"):
        sim.add_node(name, SEED_TOPO)
        install.reporter(sim.nodes[name])
    _, url = install.extender()
    scheduler({"profiles": [{"schedulerName": "default-scheduler"}], "extenders": scheduler_extenders(url)})

    api.create(gpu_pod(namespace, "web", 0))
    sim.wait_admitted(namespace, ["web"], timeout=60)
    after_cpu = scrape(url)
    api.create(gpu_pod(namespace, "train", 2))
    [grant] = sim.wait_admitted(namespace, ["train"], timeout=60)
    after_gpu = scrape(url)

    def requests(text: str, verb: str) -> float:
        return metric_total(text, "gpupair_extender_requests_total", verb=verb, outcome="ok")

    assert {v: requests(after_cpu, v) for v in ("filter", "prioritize", "bind", EVERY_POD_VERB)} == {
        "filter": 0, "prioritize": 0, "bind": 0, EVERY_POD_VERB: 1}
    assert metric_total(after_cpu, "gpupair_extender_decisions_total", verb=EVERY_POD_VERB, outcome="scored") == 2
    assert {v: requests(after_gpu, v) for v in ("filter", "prioritize", "bind", EVERY_POD_VERB)} == {
        "filter": 1, "prioritize": 0, "bind": 1, EVERY_POD_VERB: 2}
    assert metric_total(after_gpu, "gpupair_extender_decisions_total", verb=EVERY_POD_VERB, outcome="scored") == 4
    assert grant.link == "NODE" and not sim.errors, sim.errors
