"""deploy/'s RBAC and admission policies as a real apiserver enforces them (their CEL run by the
apiserver itself, not a model of it), with the tokens gpupair's processes call with."""

from __future__ import annotations

import pytest

from tests.controlplane.api import ApiError
from tests.controlplane.gpupair_install import NAMESPACE
from tests.controlplane.workloads import SEED_TOPO, gpu_pod


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
