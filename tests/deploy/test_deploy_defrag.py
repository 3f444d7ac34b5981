"""deploy/components/defrag: off unless added; added after an overlay it renders and validates
strictly, runs `gpupair defrag --act` as one replica that is never two (Recreate), locked down as
every gpupair container, with settings `gpupair defrag` reads, and its ServiceAccount gets exactly
what the service calls; listed before the dra component, it gains the driver and read access to
slices and claims, and nothing else; the monitoring component's PodMonitor scrapes it."""

from __future__ import annotations

import copy
import json

import kubernetes_validate
import pytest

from tests.deploy.test_deploy import CRD_GROUPS, GPUPAIR_IMAGE, K8S_VERSION, api_group, rules_of
from tests.deploy_manifests import OVERLAYS, container, env_of, find, needs_kubectl, pod_spec, render, render_consumer

pytestmark = needs_kubectl

NAME = "gpupair-defrag"
NS = "gpupair-system"
PLANS = "gpupair-defrag-plans"
_rendered: dict[tuple, list[dict]] = {}


@pytest.fixture
def with_components(tmp_path_factory):
    """(overlay, *components) -> the objects of an operator's kustomization that lists them."""
    def render_with(overlay: str, *components: str) -> list[dict]:
        key = (overlay, *components)
        if key not in _rendered:
            _rendered[key] = render_consumer(tmp_path_factory.mktemp("defrag"), {
                "resources": [f"{{deploy}}/overlays/{overlay}"],
                "components": [f"{{deploy}}/components/{c}" for c in components]})
        return copy.deepcopy(_rendered[key])
    return render_with


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_no_overlay_runs_it(overlay):
    assert not [o["metadata"]["name"] for o in render(overlay)
                if o["metadata"]["name"].startswith("gpupair-defrag")]


@pytest.mark.parametrize("overlay", ["self-managed", "second-scheduler-cert-manager"])
def test_the_component_adds_only_its_objects_and_they_validate(overlay, with_components):
    objs, plain = with_components(overlay, "defrag"), render(overlay)
    key = lambda o: (o["kind"], o["metadata"].get("namespace", ""), o["metadata"]["name"])  # noqa: E731
    added = sorted(set(map(key, objs)) - set(map(key, plain)))
    assert added == sorted([("ServiceAccount", NS, NAME), ("ClusterRole", "", NAME), ("ClusterRoleBinding", "", NAME),
                            ("Role", NS, NAME), ("RoleBinding", NS, NAME), ("Deployment", NS, NAME)])
    assert {json.dumps(o, sort_keys=True) for o in plain} <= {json.dumps(o, sort_keys=True) for o in objs}, \
        "nothing of the overlay changed"
    for obj in objs:
        assert obj["metadata"]["labels"]["app.kubernetes.io/part-of"] == "gpupair"
        if api_group(obj) not in CRD_GROUPS:
            kubernetes_validate.validate(obj, K8S_VERSION, strict=True)


def test_one_actor_never_two_locked_down(with_components):
    objs = with_components("self-managed", "defrag")
    deployment = find(objs, "Deployment", NAME)
    assert deployment["spec"]["replicas"] == 1 and deployment["spec"]["strategy"] == {"type": "Recreate"}
    assert deployment["spec"]["template"]["metadata"]["labels"]["app.kubernetes.io/part-of"] == "gpupair"
    spec = pod_spec(deployment)
    assert spec["serviceAccountName"] == NAME
    assert spec["securityContext"] == {"runAsNonRoot": True, "runAsUser": 65532, "runAsGroup": 65532,
                                       "seccompProfile": {"type": "RuntimeDefault"}}
    (c,) = spec["containers"]
    assert c["image"] == GPUPAIR_IMAGE and c["args"] == ["defrag", "--act"]
    assert c["securityContext"] == container(objs, "Deployment", "gpupair-extender", "extender")["securityContext"]
    (port,) = c["ports"]
    assert (port["name"], port["containerPort"]) == ("http", int(env_of(c)["GPUPAIR_DEFRAG_PORT"]))
    assert c["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "http"}
    assert c["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "http"}


def test_its_settings_are_the_commands_and_find_its_namespace(with_components):
    """Every GPUPAIR_* it sets is a current variable of `gpupair defrag` (none silently ignored),
    the plans and the Leases are read in the pod's own namespace (the downward API), and without
    the dra component it plans on no DRA node (no driver, whose slices it may not list)."""
    from gpupair.command.cli_reference import command_parsers

    current = {a.gpupair_env.env for a in command_parsers()["defrag"]._actions if hasattr(a, "gpupair_env")}
    env = env_of(container(with_components("self-managed", "defrag"), "Deployment", NAME, "defrag"))
    assert {k for k in env if k.startswith("GPUPAIR_")} <= current
    own = {"fieldRef": {"fieldPath": "metadata.namespace"}}
    assert env["GPUPAIR_PLANS_NAMESPACE"] == env["GPUPAIR_LEASE_NAMESPACE"] == own
    assert env["GPUPAIR_DEFRAG_DRA_DRIVER"] == ""
    extender = env_of(container(with_components("self-managed", "defrag"), "Deployment", "gpupair-extender", "extender"))
    assert env["GPUPAIR_DEFRAG_STALE_AFTER"] == extender["GPUPAIR_EXTENDER_STALE_AFTER"]
    assert env["GPUPAIR_RESOURCE_NAME"] == extender["GPUPAIR_RESOURCE_NAME"]


def test_it_gets_exactly_what_it_calls(with_components):
    objs = with_components("second-scheduler", "defrag")
    assert rules_of(objs, NAME) == {
        ("", "nodes", "list", "*", "*"), ("", "pods", "list", "*", "*"), ("", "pods", "patch", "*", "*"), ("", "namespaces", "list", "*", "*"),
        ("policy", "poddisruptionbudgets", "list", "*", "*"),
        ("", "pods/eviction", "create", "*", "*"),
        ("events.k8s.io", "events", "create", "*", "*"),
        # in gpupair's namespace only: the reporters' Leases and the plans ConfigMap
        ("coordination.k8s.io", "leases", "list", "*", NS),
        ("", "configmaps", "get", PLANS, NS), ("", "configmaps", "patch", PLANS, NS),
        ("", "configmaps", "create", "*", NS),  # RBAC cannot restrict create by name
    }
    for role in (find(objs, "ClusterRole", NAME), find(objs, "Role", NAME)):
        for rule in role["rules"]:
            assert "*" not in json.dumps(rule)
    for account in ("gpupair-extender", "gpupair-reporter", "gpupair-webhook", "gpupair-certs", "gpupair-scheduler"):
        assert rules_of(objs, account) == rules_of(render("second-scheduler"), account), account


def test_listed_before_dra_it_gets_the_driver_and_reads_slices_and_claims(with_components):
    plain, objs = with_components("self-managed", "defrag"), with_components("self-managed", "defrag", "dra")
    assert rules_of(objs, NAME) - rules_of(plain, NAME) == {
        ("resource.k8s.io", resource, "list", "*", "*") for resource in ("resourceslices", "resourceclaims")}
    assert rules_of(plain, NAME) <= rules_of(objs, NAME)
    env = env_of(container(objs, "Deployment", NAME, "defrag"))
    extender = env_of(container(objs, "Deployment", "gpupair-extender", "extender"))
    assert env["GPUPAIR_DEFRAG_DRA_DRIVER"] == extender["GPUPAIR_EXTENDER_DRA_DRIVER"] == "gpu.nvidia.com"


def test_the_monitoring_components_pod_monitor_scrapes_it(with_components):
    objs = with_components("self-managed", "defrag", "monitoring")
    monitor = find(objs, "PodMonitor", NAME, NS)
    deployment = find(objs, "Deployment", NAME, NS)
    assert monitor["spec"]["namespaceSelector"]["matchNames"] == [deployment["metadata"]["namespace"]]
    assert monitor["spec"]["selector"]["matchLabels"].items() <= deployment["spec"]["template"]["metadata"]["labels"].items()
    ports = {p["name"] for p in container(objs, "Deployment", NAME, "defrag")["ports"]}
    assert [(e["port"], e["path"]) for e in monitor["spec"]["podMetricsEndpoints"]] == [("http", "/metrics")]
    assert {e["port"] for e in monitor["spec"]["podMetricsEndpoints"]} <= ports
