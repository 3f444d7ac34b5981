"""deploy/components/dra on every overlay: it renders, every object validates strictly, the claim
webhook entries are the pod entries' twins for resource.k8s.io claims, and the extender and the
reporter gain exactly the read access the DRA picture and verdicts need."""

from __future__ import annotations

import copy

import celpy
import kubernetes_validate
import pytest

from gpupair.decide.pod.intent import Intent
from tests.deploy.test_deploy import CRD_GROUPS, K8S_VERSION, api_group, rules_of
from tests.deploy_manifests import (
    DEPLOY,
    OVERLAYS,
    container,
    env_of,
    find,
    needs_kubectl,
    of_kind,
    pod_spec,
    render,
    render_consumer,
)
from tests.webhook.claim_shapes import plain_claim
from gpupair.kubewire.defaults import GPU_DEVICE_CLASSES
from gpupair.topology.node_links import FILE_KEY
from gpupair.webhook.claim_defaults import DEFAULT_GPUS_PER_NUMA_NODE
from gpupair.webhook.claim_pods import CLAIM_POD_RESOURCE

pytestmark = needs_kubectl

CLAIM_RULES = [{"apiGroups": ["resource.k8s.io"], "apiVersions": ["v1"], "operations": ["CREATE"],
                "resources": ["resourceclaims", "resourceclaimtemplates"], "scope": "Namespaced"}]
_rendered: dict[str, list[dict]] = {}
NODE_LINKS = "gpupair-node-links"
NODE_LINKS_OBJECTS = [("ConfigMap", "gpupair-system", NODE_LINKS),
                      ("Role", "gpupair-system", "gpupair-extender-node-links"),
                      ("RoleBinding", "gpupair-system", "gpupair-extender-node-links")]


@pytest.fixture
def with_dra(tmp_path_factory):
    """overlay -> its objects with the dra component added, as an operator's kustomization adds it."""
    def render_with(overlay: str) -> list[dict]:
        if overlay not in _rendered:
            _rendered[overlay] = render_consumer(tmp_path_factory.mktemp(f"dra-{overlay}"), {
                "resources": [f"{{deploy}}/overlays/{overlay}"],
                "components": ["{deploy}/components/dra"],
            })
        return copy.deepcopy(_rendered[overlay])
    return render_with


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_the_component_renders_and_validates_on_every_overlay(overlay, with_dra):
    objs = with_dra(overlay)
    keys = [(o["kind"], o["metadata"].get("namespace", ""), o["metadata"]["name"]) for o in objs]
    assert len(keys) == len(set(keys))
    plain = render(overlay)
    assert sorted(set(keys) - set(NODE_LINKS_OBJECTS)) == sorted(
        [(o["kind"], o["metadata"].get("namespace", ""), o["metadata"]["name"]) for o in plain]
        + [("ClusterRole", "", "gpupair-webhook"), ("ClusterRoleBinding", "", "gpupair-webhook")]), \
        "it changes objects, and adds only the webhook's read of claims' pods, the node-links ConfigMap and its writer's Role"
    assert set(NODE_LINKS_OBJECTS) <= set(keys)
    for obj in objs:
        if api_group(obj) not in CRD_GROUPS:
            kubernetes_validate.validate(obj, K8S_VERSION, strict=True)


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_each_claim_entry_is_its_pod_entrys_twin(overlay, with_dra):
    (config,) = of_kind(with_dra(overlay), "MutatingWebhookConfiguration")
    (plain,) = of_kind(render(overlay), "MutatingWebhookConfiguration")
    names = [h["name"] for h in config["webhooks"]]
    scope_claims, rest = config["webhooks"][:2], config["webhooks"][2:]
    assert [h["name"] for h in scope_claims] == ["pcie-switch.scope.claims.gpupair.io", "nvlink.scope.claims.gpupair.io"], \
        "first: the claim entries plan a claim under the scope it carries"
    assert rest[:len(plain["webhooks"])] == plain["webhooks"], "the pod entries are left as they are"
    pods, claims = plain["webhooks"][:4], rest[len(plain["webhooks"]):len(plain["webhooks"]) + 4]
    assert len(names) == len(set(names))
    for value, entry in zip(("pcie-switch", "nvlink"), scope_claims):
        assert entry["rules"] == CLAIM_RULES and entry["clientConfig"]["service"]["path"] == f"/mutate/scope/{value}"
        assert entry["namespaceSelector"]["matchExpressions"][-1] == {"key": "gpupair.io/scope", "operator": "In",
                                                                       "values": [value]}
    assert [h["name"] for h in claims] == ["claims.gpupair.io"] + [f"{i.value}.claims.gpupair.io" for i in Intent]
    for pod_entry, claim_entry in zip(pods, claims):
        assert claim_entry["rules"] == CLAIM_RULES
        assert "matchConditions" not in claim_entry
        twin = {k: v for k, v in pod_entry.items() if k not in ("name", "rules", "matchConditions")}
        assert {k: v for k, v in claim_entry.items() if k not in ("name", "rules")} == twin
        assert claim_entry["failurePolicy"] == "Ignore" and claim_entry["timeoutSeconds"] == 5
    assert "caBundle" not in str(claims)


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_the_claim_pod_entry_marks_claim_pods_in_every_namespace_but_gpupairs(overlay, with_dra):
    """The last entry: pods with resourceClaims and no nvidia.com/gpu (those reach the extender
    already), in every namespace but gpupair-system and kube-system, opted in or not (as
    managedResources reaches every nvidia.com/gpu pod)."""
    (config,) = of_kind(with_dra(overlay), "MutatingWebhookConfiguration")
    entry = config["webhooks"][-1]
    assert entry["name"] == "claim-pods.gpupair.io" and len(config["webhooks"]) == 13
    assert entry["rules"] == [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"],
                               "resources": ["pods"], "scope": "Namespaced"}]
    assert entry["failurePolicy"] == "Ignore" and entry["clientConfig"]["service"]["path"] == "/mutate"
    assert entry["namespaceSelector"] == {"matchExpressions": [
        {"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": ["gpupair-system", "kube-system"]}]}
    env = celpy.Environment()
    programs = [env.program(env.compile(c["expression"])) for c in entry["matchConditions"]]

    def matches(spec: dict) -> bool:
        pod = celpy.json_to_cel({"metadata": {"name": "p"}, "spec": spec})
        return all(bool(p.evaluate({"object": pod})) for p in programs)

    main = {"name": "main", "image": "pause"}
    claims = [{"name": "gpus", "resourceClaimTemplateName": "two"}]
    gpus = {**main, "resources": {"limits": {"nvidia.com/gpu": "2"}}}
    assert matches({"containers": [main], "resourceClaims": claims})
    assert not matches({"containers": [main]}), "a CPU-only pod never reaches it"
    assert not matches({"containers": [main], "resourceClaims": []})
    assert not matches({"containers": [gpus], "resourceClaims": claims})
    assert not matches({"containers": [main], "initContainers": [gpus], "resourceClaims": claims})


def test_the_pod_entries_match_conditions_would_skip_every_claim():
    """Why the claims have entries of their own: on a claim the pod entries' CEL fails
    (no spec.containers), and an erroring matchCondition under failurePolicy Ignore skips the
    webhook."""
    (config,) = of_kind(render("self-managed"), "MutatingWebhookConfiguration")
    condition = next(c for c in config["webhooks"][0]["matchConditions"] if c["name"] == "asks-for-gpus")
    env = celpy.Environment()
    program = env.program(env.compile(condition["expression"]))
    with pytest.raises(celpy.CELEvalError, match="containers"):
        program.evaluate({"object": celpy.json_to_cel(plain_claim())})


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_rbac_adds_read_access_to_slices_and_claims_and_the_node_links_configmap_alone(overlay, with_dra):
    objs, plain = with_dra(overlay), render(overlay)
    added = {account: rules_of(objs, account) - rules_of(plain, account)
             for account in ("gpupair-extender", "gpupair-reporter", "gpupair-webhook", "gpupair-certs")}
    dra = "resource.k8s.io"
    assert added["gpupair-extender"] == {(dra, resource, verb, "*", "*") for resource in ("resourceslices", "resourceclaims")
                                         for verb in ("get", "list", "watch")} | {
        ("", "configmaps", "get", NODE_LINKS, "gpupair-system"), ("", "configmaps", "patch", NODE_LINKS, "gpupair-system")}
    assert added["gpupair-reporter"] == {(dra, "resourceslices", "list", "*", "*"),
                                         (dra, "resourceclaims", "get", "*", "*"),
                                         ("", "pods", "list", "*", "*"),
                                         ("", "pods", "watch", "*", "*")}
    assert added["gpupair-webhook"] == {("", "pods", "get", "*", "*")}, "the pod a claim was made for, by name"
    assert added["gpupair-certs"] == set()
    assert all(rules_of(plain, a) <= rules_of(objs, a) for a in added), "nothing taken away"
    assert find(objs, "ServiceAccount", "gpupair-webhook")["automountServiceAccountToken"] is False
    assert pod_spec(find(objs, "Deployment", "gpupair-webhook"))["automountServiceAccountToken"] is True, \
        "only the webhook's own pods mount its token"


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_the_dra_driver_and_the_webhooks_settings(overlay, with_dra):
    objs = with_dra(overlay)
    extender = env_of(container(objs, "Deployment", "gpupair-extender", "extender"))
    reporter = env_of(container(objs, "DaemonSet", "gpupair-reporter", "reporter"))
    webhook = env_of(container(objs, "Deployment", "gpupair-webhook", "webhook"))
    assert extender["GPUPAIR_EXTENDER_DRA_DRIVER"] == reporter["GPUPAIR_REPORTER_DRA_DRIVER"] == "gpu.nvidia.com"
    assert webhook["GPUPAIR_WEBHOOK_GPU_DEVICE_CLASSES"] == ",".join(sorted(GPU_DEVICE_CLASSES))
    assert webhook["GPUPAIR_WEBHOOK_GPUS_PER_NUMA_NODE"] == str(DEFAULT_GPUS_PER_NUMA_NODE)
    assert webhook["GPUPAIR_WEBHOOK_CLAIM_POD_RESOURCE"] == CLAIM_POD_RESOURCE
    assert "GPUPAIR_WEBHOOK_NVLINK_PAIRS" not in webhook, "the measured links, not one list for every node"
    assert extender["GPUPAIR_EXTENDER_NODE_LINKS_CONFIGMAP"] == NODE_LINKS
    # added to each container's environment; the rest is the overlay's
    plain = render(overlay)
    for kind, name, c, new in (
            ("Deployment", "gpupair-extender", "extender", {"GPUPAIR_EXTENDER_DRA_DRIVER",
                                                             "GPUPAIR_EXTENDER_NODE_LINKS_CONFIGMAP"}),
            ("DaemonSet", "gpupair-reporter", "reporter", {"GPUPAIR_REPORTER_DRA_DRIVER"}),
            ("Deployment", "gpupair-webhook", "webhook",
             {"GPUPAIR_WEBHOOK_GPU_DEVICE_CLASSES", "GPUPAIR_WEBHOOK_GPUS_PER_NUMA_NODE",
               "GPUPAIR_WEBHOOK_CLAIM_POD_RESOURCE", "GPUPAIR_WEBHOOK_NODE_LINKS_FILE",
               "GPUPAIR_WEBHOOK_CLAIM_POD_ASKS"})):
        before, after = env_of(container(plain, kind, name, c)), env_of(container(objs, kind, name, c))
        assert set(after) - set(before) == new and before.items() <= after.items(), name
    assert webhook["GPUPAIR_WEBHOOK_CLAIM_POD_ASKS"] == "true"


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_the_webhook_reads_the_node_links_configmap_the_extender_writes(overlay, with_dra):
    objs = with_dra(overlay)
    webhook = container(objs, "Deployment", "gpupair-webhook", "webhook")
    spec = pod_spec(find(objs, "Deployment", "gpupair-webhook"))
    path = env_of(webhook)["GPUPAIR_WEBHOOK_NODE_LINKS_FILE"]
    mount = next(m for m in webhook["volumeMounts"] if path.startswith(m["mountPath"] + "/"))
    volume = next(v for v in spec["volumes"] if v["name"] == mount["name"])
    assert mount["readOnly"] is True and path == f"{mount['mountPath']}/{FILE_KEY}"
    assert volume["configMap"] == {"name": NODE_LINKS, "optional": True}, "the webhook starts without it"
    configmap = find(objs, "ConfigMap", NODE_LINKS)
    assert "data" not in configmap, "re-applying the manifests must leave what the extender wrote"
    extender = env_of(container(objs, "Deployment", "gpupair-extender", "extender"))
    assert extender["GPUPAIR_EXTENDER_NODE_LINKS_CONFIGMAP"] == configmap["metadata"]["name"]
    assert configmap["metadata"]["namespace"] == find(objs, "Deployment", "gpupair-extender")["metadata"]["namespace"]


def test_the_components_variables_are_current_flag_variables(with_dra):
    from gpupair.command.cli_reference import command_parsers

    current = {name: {a.gpupair_env.env for a in parser._actions if hasattr(a, "gpupair_env")}
               for name, parser in command_parsers().items()}
    objs = with_dra("self-managed")
    webhook = env_of(container(objs, "Deployment", "gpupair-webhook", "webhook"))
    assert {"GPUPAIR_WEBHOOK_GPU_DEVICE_CLASSES", "GPUPAIR_WEBHOOK_GPUS_PER_NUMA_NODE"} <= current["webhook"]
    assert {k for k in webhook if k.startswith("GPUPAIR_")} <= current["webhook"]
    for command, kind, name in (("extender", "Deployment", "gpupair-extender"), ("reporter", "DaemonSet", "gpupair-reporter")):
        env = env_of(container(objs, kind, name, command))
        assert {k for k in env if k.startswith("GPUPAIR_")} <= current[command], command


def test_the_install_guide_says_how_to_add_it():
    guide = (DEPLOY / "README.md").read_text()
    assert "components/dra" in guide and "resource.k8s.io" in guide
    text = (DEPLOY / "components/dra/kustomization.yaml").read_text()
    assert "components: [<path-or-url>/deploy/components/dra]" in text
