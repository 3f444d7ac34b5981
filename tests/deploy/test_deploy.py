"""deploy/: every overlay renders with `kubectl kustomize`, every object validates against the
Kubernetes OpenAPI schemas offline (kubernetes-validate, strict), and the rendered objects keep
the security, RBAC, webhook and wiring promises the manifests' comments make."""

from __future__ import annotations

import copy
import re
from urllib.parse import urlparse

import kubernetes_validate
import pytest
import yaml
from kubernetes_validate import utils as kv_utils

from gpupair.decide.pod.intent import PLACEMENT_KEY, Intent
from gpupair.webhook.claim_pods import CLAIM_POD_RESOURCE

from tests.deploy_manifests import (
    DEPLOY,
    OVERLAYS,
    container,
    containers,
    env_of,
    find,
    needs_kubectl,
    of_kind,
    pod_spec,
    render,
    render_consumer,
    workloads,
)

pytestmark = needs_kubectl

# The cluster version the project's recorded fixtures come from; fall back to the newest
# schemas the installed kubernetes-validate ships.
WANTED_VERSION = "1.36.0"
K8S_VERSION = WANTED_VERSION if WANTED_VERSION in kv_utils.all_versions() else kv_utils.latest_version()

# Custom resources: no schema in kubernetes-validate; checked field by field below.
CRD_GROUPS = {"cert-manager.io"}
GPUPAIR_IMAGE = "ghcr.io/gpupair/gpupair:0.2.0"
SCHEDULER_IMAGE = "registry.k8s.io/kube-scheduler:v1.36.2"
# The only container allowed to run as uid 0 (documented in its manifest).
ROOT_EXCEPTION = ("DaemonSet", "gpupair-reporter", "reporter")
WEBHOOK_NAMES = ["gpupair-webhook", "gpupair-webhook.gpupair-system", "gpupair-webhook.gpupair-system.svc",
                 "gpupair-webhook.gpupair-system.svc.cluster.local"]


def api_group(obj: dict) -> str:
    return obj["apiVersion"].rpartition("/")[0]


# --------------------------------------------------------------------------- render + schema


def test_there_are_the_four_overlays():
    assert set(OVERLAYS) == {"self-managed", "second-scheduler", "cert-manager", "second-scheduler-cert-manager"}


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_overlay_renders_unique_objects(overlay):
    objs = render(overlay)
    keys = [(o["kind"], o["metadata"].get("namespace", ""), o["metadata"]["name"]) for o in objs]
    assert len(keys) == len(set(keys)), "duplicate objects"
    assert find(objs, "Namespace", "gpupair-system")
    # local-config helpers and kustomize's own files never reach the cluster
    assert not [o for o in objs if "config.kubernetes.io/local-config" in (o["metadata"].get("annotations") or {})]
    assert all(o["metadata"]["labels"]["app.kubernetes.io/part-of"] == "gpupair" for o in objs)


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_builtin_object_validates_strictly(overlay):
    checked = 0
    for obj in render(overlay):
        if api_group(obj) in CRD_GROUPS:
            continue
        # SchemaNotFoundError would fail the test: every non-CRD object must have a schema.
        kubernetes_validate.validate(obj, K8S_VERSION, strict=True)
        checked += 1
    assert checked >= 20


def test_the_validator_catches_mistakes():
    """Guards the test above: strict validation really rejects an unknown field, a wrong type and
    a missing required field in the rendered objects."""
    objs = render("self-managed")
    daemonset = find(objs, "DaemonSet", "gpupair-reporter")
    unknown = copy.deepcopy(daemonset)
    pod_spec(unknown)["containers"][0]["securityContext"]["readOnlyRootFilesytem"] = True  # typo
    wrong_type = copy.deepcopy(daemonset)
    pod_spec(wrong_type)["containers"][0]["ports"][0]["containerPort"] = "9400"
    missing = copy.deepcopy(find(objs, "MutatingWebhookConfiguration", "gpupair-webhook"))
    del missing["webhooks"][0]["sideEffects"]
    for broken in (unknown, wrong_type, missing):
        with pytest.raises(kubernetes_validate.ValidationError):
            kubernetes_validate.validate(broken, K8S_VERSION, strict=True)


# --------------------------------------------------------------------------- pod security


def effective(spec: dict, c: dict, key: str):
    """A securityContext setting as the kubelet applies it: the container's, else the pod's."""
    value = (c.get("securityContext") or {}).get(key)
    return value if value is not None else (spec.get("securityContext") or {}).get(key)


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_container_is_locked_down(overlay):
    seen_root = []
    for w in workloads(render(overlay)):
        spec = pod_spec(w)
        for _, c in containers(spec):
            where = f"{w['kind']} {w['metadata']['name']} container {c['name']}"
            sc = c.get("securityContext") or {}
            assert sc.get("readOnlyRootFilesystem") is True, where
            assert sc.get("allowPrivilegeEscalation") is False, where
            assert sc.get("privileged") in (None, False), where
            caps = sc.get("capabilities") or {}
            assert caps.get("drop") == ["ALL"] and not caps.get("add"), where
            seccomp = effective(spec, c, "seccompProfile") or {}
            assert seccomp.get("type") == "RuntimeDefault", where
            for part in ("requests", "limits"):
                assert set((c.get("resources") or {}).get(part) or {}) >= {"cpu", "memory"}, f"{where}: {part}"
            if (w["kind"], w["metadata"]["name"], c["name"]) == ROOT_EXCEPTION:
                seen_root.append(where)
                assert effective(spec, c, "runAsUser") == 0 and effective(spec, c, "runAsNonRoot") is False
                continue
            assert effective(spec, c, "runAsNonRoot") is True, where
            uid = effective(spec, c, "runAsUser")
            assert uid is not None and uid != 0, f"{where}: runAsNonRoot needs a numeric uid it can check"
    assert len(seen_root) == 1, "the reporter is the one root container"


def test_the_root_exception_is_explained_in_the_manifest():
    text = (DEPLOY / "base/reporter/daemonset.yaml").read_text()
    block = text[:text.index("runAsUser: 0")]
    comment = block[block.rindex("resources:"):]
    assert "exception to non-root" in comment and "PodResources socket" in comment and "checkpoint" in comment


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_only_the_reporter_touches_the_host(overlay):
    for w in workloads(render(overlay)):
        spec = pod_spec(w)
        host_paths = {v["hostPath"]["path"]: v for v in spec.get("volumes") or [] if "hostPath" in v}
        if w["metadata"]["name"] == "gpupair-reporter":
            assert spec["hostNetwork"] is True and not spec.get("hostPID") and not spec.get("hostIPC")
            assert set(host_paths) == {"/var/lib/kubelet/pod-resources", "/var/lib/kubelet/device-plugins",
                                       "/run/gpupair"}
            mounts = {m["name"]: m for m in spec["containers"][0]["volumeMounts"]}
            for path in ("/var/lib/kubelet/pod-resources", "/var/lib/kubelet/device-plugins"):
                vol = host_paths[path]
                assert vol["hostPath"]["type"] == "Directory", "the directory, not the socket file"
                assert mounts[vol["name"]]["readOnly"] is True
                assert mounts[vol["name"]]["mountPath"] == path
        else:
            assert not host_paths, w["metadata"]["name"]
            assert not spec.get("hostNetwork") and not spec.get("hostPID") and not spec.get("hostIPC")


def test_namespace_admits_the_reporter_and_audits_the_rest():
    ns = find(render("self-managed"), "Namespace", "gpupair-system")
    labels = ns["metadata"]["labels"]
    assert labels["pod-security.kubernetes.io/enforce"] == "privileged"
    assert labels["pod-security.kubernetes.io/audit"] == "restricted"


# --------------------------------------------------------------------------- RBAC


def rules_of(objs: list[dict], subject_sa: str) -> set[tuple]:
    """Every (apiGroup, resource, verb, resourceName-or-'*', namespace-or-'*') the ServiceAccount gets
    from the roles bound to it in the rendered objects."""
    granted = set()
    for binding in of_kind(objs, "RoleBinding") + of_kind(objs, "ClusterRoleBinding"):
        if not any(s["kind"] == "ServiceAccount" and s["name"] == subject_sa for s in binding["subjects"]):
            continue
        ref = binding["roleRef"]
        scope = binding["metadata"].get("namespace", "*")
        roles = [o for o in objs if o["kind"] == ref["kind"] and o["metadata"]["name"] == ref["name"]]
        if not roles:  # a built-in role (system:kube-scheduler, ...)
            granted.add(("builtin", ref["kind"], ref["name"], "", scope))
            continue
        for rule in roles[0]["rules"]:
            for group in rule.get("apiGroups", []):
                for resource in rule.get("resources", []):
                    for verb in rule["verbs"]:
                        for name in rule.get("resourceNames") or ["*"]:
                            granted.add((group, resource, verb, name, scope))
    return granted


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_rbac_has_no_wildcards_or_escalation(overlay):
    for role in of_kind(render(overlay), "Role") + of_kind(render(overlay), "ClusterRole"):
        assert "aggregationRule" not in role
        for rule in role["rules"]:
            for field in ("apiGroups", "resources", "verbs", "resourceNames", "nonResourceURLs"):
                assert "*" not in (rule.get(field) or []), (role["metadata"]["name"], field)
            assert not {"escalate", "bind", "impersonate", "deletecollection", "delete"} & set(rule["verbs"])
            assert not rule.get("nonResourceURLs")


def test_each_component_gets_exactly_what_it_needs():
    objs = render("second-scheduler")
    assert rules_of(objs, "gpupair-reporter") == {
        ("", "nodes", "get", "*", "*"), ("", "nodes", "patch", "*", "*"),
        ("", "pods", "get", "*", "*"), ("", "pods", "patch", "*", "*"),
        ("authentication.k8s.io", "tokenreviews", "create", "*", "*"),
        ("events.k8s.io", "events", "create", "*", "*"),
        # its node's Lease (which one: the gpupair-reporter-leases policy), in its namespace only
        ("coordination.k8s.io", "leases", "get", "*", "gpupair-system"),
        ("coordination.k8s.io", "leases", "create", "*", "gpupair-system"),
        ("coordination.k8s.io", "leases", "update", "*", "gpupair-system"),
    }
    assert rules_of(objs, "gpupair-extender") == {
        ("", "nodes", "list", "*", "*"), ("", "nodes", "watch", "*", "*"),
        ("", "pods", "get", "*", "*"), ("", "pods", "list", "*", "*"), ("", "pods", "watch", "*", "*"),
        ("", "pods/binding", "create", "*", "*"),
        ("events.k8s.io", "events", "create", "*", "*"),
        # the reporters' Leases, in their namespace only
        ("coordination.k8s.io", "leases", "list", "*", "gpupair-system"),
        ("coordination.k8s.io", "leases", "watch", "*", "gpupair-system"),
        # the defrag plans ConfigMap, read only, in gpupair's namespace only
        ("", "configmaps", "list", "gpupair-defrag-plans", "gpupair-system"),
        ("", "configmaps", "watch", "gpupair-defrag-plans", "gpupair-system"),
    }
    assert rules_of(objs, "gpupair-certs") == {
        ("", "secrets", "get", "gpupair-webhook-tls", "gpupair-system"),
        ("", "secrets", "update", "gpupair-webhook-tls", "gpupair-system"),
        ("", "secrets", "create", "*", "gpupair-system"),
        ("admissionregistration.k8s.io", "mutatingwebhookconfigurations", "get", "gpupair-webhook", "*"),
        ("admissionregistration.k8s.io", "mutatingwebhookconfigurations", "patch", "gpupair-webhook", "*"),
    }
    assert rules_of(objs, "gpupair-scheduler") == {
        ("builtin", "ClusterRole", "system:kube-scheduler", "", "*"),
        ("builtin", "ClusterRole", "system:volume-scheduler", "", "*"),
        ("builtin", "Role", "extension-apiserver-authentication-reader", "", "kube-system"),
        ("coordination.k8s.io", "leases", "create", "*", "gpupair-system"),
        ("coordination.k8s.io", "leases", "get", "gpupair-scheduler", "gpupair-system"),
        ("coordination.k8s.io", "leases", "update", "gpupair-scheduler", "gpupair-system"),
    }


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_webhook_has_no_api_access(overlay):
    objs = render(overlay)
    assert rules_of(objs, "gpupair-webhook") == set()
    assert find(objs, "ServiceAccount", "gpupair-webhook")["automountServiceAccountToken"] is False
    spec = pod_spec(find(objs, "Deployment", "gpupair-webhook"))
    assert spec["serviceAccountName"] == "gpupair-webhook" and spec["automountServiceAccountToken"] is False


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_pod_runs_as_its_own_service_account(overlay):
    objs = render(overlay)
    accounts = {o["metadata"]["name"] for o in of_kind(objs, "ServiceAccount")}
    for w in workloads(objs):
        name = pod_spec(w).get("serviceAccountName")
        assert name in accounts and name != "default", w["metadata"]["name"]


# --------------------------------------------------------------------------- admission


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_scope_entries_record_a_namespaces_default_scope(overlay):
    """After the four verifier entries: one per gpupair.io/scope namespace label value, as the
    first verifier entry but for its name, path, the label it selects, and pods with GPUs or
    claims."""
    (config,) = of_kind(render(overlay), "MutatingWebhookConfiguration")
    hook, scopes = config["webhooks"][0], config["webhooks"][4:]
    assert [h["name"] for h in scopes] == ["pcie-switch.scope.gpupair.io", "nvlink.scope.gpupair.io"]
    for value, entry in zip(("pcie-switch", "nvlink"), scopes):
        assert entry["clientConfig"]["service"]["path"] == f"/mutate/scope/{value}"
        expressions = entry["namespaceSelector"]["matchExpressions"]
        assert expressions[-1] == {"key": "gpupair.io/scope", "operator": "In", "values": [value]}
        assert expressions[:-1] == hook["namespaceSelector"]["matchExpressions"][:-1]
        assert [c["name"] for c in entry["matchConditions"]] == ["asks-for-gpus-or-claims"]
        same = {k: v for k, v in entry.items() if k not in ("name", "clientConfig", "namespaceSelector", "matchConditions")}
        assert same == {k: v for k, v in hook.items() if k not in ("name", "clientConfig", "namespaceSelector", "matchConditions")}


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_mutating_webhook_configuration(overlay):
    objs = render(overlay)
    (config,) = of_kind(objs, "MutatingWebhookConfiguration")
    hook, *by_placement = config["webhooks"][:4]
    # One entry per namespace placement default, the same as the first but for name, path and
    # the label value it selects (the first takes every other namespace).
    assert [h["name"] for h in by_placement] == [f"{i.value}.verifier.gpupair.io" for i in Intent]
    placement_rule = {"key": PLACEMENT_KEY, "operator": "NotIn", "values": [i.value for i in Intent]}
    assert placement_rule in hook["namespaceSelector"]["matchExpressions"]
    for intent, other in zip(Intent, by_placement):
        same = copy.deepcopy(other)
        same["name"] = hook["name"]
        assert same["clientConfig"]["service"].pop("path") == f"/mutate/placement/{intent.value}"
        same["clientConfig"]["service"]["path"] = "/mutate"
        expressions = same["namespaceSelector"]["matchExpressions"]
        assert expressions[-1] == {"key": PLACEMENT_KEY, "operator": "In", "values": [intent.value]}
        expressions[-1] = placement_rule
        assert same == hook
    assert len(hook["name"].split(".")) >= 3
    assert hook["failurePolicy"] == "Ignore"
    assert hook["sideEffects"] == "None"
    assert hook["timeoutSeconds"] == 5
    assert hook["reinvocationPolicy"] == "IfNeeded"
    assert hook["admissionReviewVersions"] == ["v1"]
    assert hook["rules"] == [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"],
                              "resources": ["pods"], "scope": "Namespaced"}]
    selector = hook["namespaceSelector"]
    assert not selector.get("matchLabels")
    assert {"key": "gpupair.io/inject", "operator": "In", "values": ["enabled"]} in selector["matchExpressions"]
    excluded = [e for e in selector["matchExpressions"] if e["key"] == "kubernetes.io/metadata.name"]
    assert excluded == [{"key": "kubernetes.io/metadata.name", "operator": "NotIn",
                         "values": ["gpupair-system", "kube-system"]}]
    service = hook["clientConfig"]["service"]
    svc = find(objs, "Service", service["name"], service["namespace"])
    assert service["path"] == "/mutate"
    (port,) = [p for p in svc["spec"]["ports"] if p["port"] == service["port"]]
    webhook = find(objs, "Deployment", "gpupair-webhook")
    target = next(p for p in pod_spec(webhook)["containers"][0]["ports"] if p["name"] == port["targetPort"])
    assert str(target["containerPort"]) == env_of(pod_spec(webhook)["containers"][0])["GPUPAIR_WEBHOOK_PORT"]
    assert "caBundle" not in hook["clientConfig"], "filled in at run time, never shipped"


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_reporter_admission_policies_are_bound_and_deny(overlay):
    objs = render(overlay)
    policies = {p["metadata"]["name"]: p for p in of_kind(objs, "ValidatingAdmissionPolicy")}
    assert set(policies) == {"gpupair-reporter-nodes", "gpupair-reporter-pods", "gpupair-reporter-leases",
                             "gpupair-pod-verdicts"}
    bindings = of_kind(objs, "ValidatingAdmissionPolicyBinding")
    assert sorted(b["spec"]["policyName"] for b in bindings) == sorted(policies)
    assert all(b["spec"]["validationActions"] == ["Deny"] and "paramRef" not in b["spec"] for b in bindings)
    sa = find(objs, "ServiceAccount", "gpupair-reporter")
    username = f"system:serviceaccount:{sa['metadata']['namespace']}:{sa['metadata']['name']}"
    for name, resource in (("gpupair-reporter-nodes", "nodes"), ("gpupair-reporter-pods", "pods")):
        spec = policies[name]["spec"]
        assert spec["failurePolicy"] == "Fail"
        assert spec["matchConstraints"]["resourceRules"] == [
            {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["UPDATE"], "resources": [resource]}]
        (condition,) = spec["matchConditions"]
        assert f"'{username}'" in condition["expression"]
        assert "authentication.kubernetes.io/node-name" in spec["variables"][0]["expression"]
    leases = policies["gpupair-reporter-leases"]["spec"]
    assert leases["failurePolicy"] == "Fail" and leases["matchConstraints"]["resourceRules"] == [
        {"apiGroups": ["coordination.k8s.io"], "apiVersions": ["v1"], "operations": ["CREATE", "UPDATE"],
         "resources": ["leases"]}]
    assert f"'{username}'" in leases["matchConditions"][0]["expression"]


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_pod_verdict_policy_holds_everyone_but_the_reporter(overlay):
    objs = render(overlay)
    spec = find(objs, "ValidatingAdmissionPolicy", "gpupair-pod-verdicts")["spec"]
    assert spec["failurePolicy"] == "Fail"
    # pods/status too: a status write may change a pod's annotations; pods/binding stays unmatched
    assert spec["matchConstraints"]["resourceRules"] == [
        {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE", "UPDATE"],
         "resources": ["pods", "pods/status"]}]
    assert "namespaceSelector" not in spec["matchConstraints"], "a verdict forged in any namespace counts"
    sa = find(objs, "ServiceAccount", "gpupair-reporter")
    (condition,) = spec["matchConditions"]
    assert condition["expression"] == (
        f"request.userInfo.username != 'system:serviceaccount:{sa['metadata']['namespace']}:{sa['metadata']['name']}'")
    for validation in spec["validations"]:
        assert validation["reason"] == "Forbidden"
        assert "\n" not in validation["message"] and "\n" not in validation["messageExpression"]


# --------------------------------------------------------------------------- workloads and wiring


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_one_image_name(overlay):
    objs = render(overlay)
    for w in workloads(objs):
        for _, c in containers(pod_spec(w)):
            expected = SCHEDULER_IMAGE if c["name"] == "kube-scheduler" else GPUPAIR_IMAGE
            assert c["image"] == expected, (w["metadata"]["name"], c["name"])
    assert env_of(container(objs, "Deployment", "gpupair-webhook", "webhook"))["GPUPAIR_WEBHOOK_VERIFIER_IMAGE"] == GPUPAIR_IMAGE


def test_an_operator_sets_the_image_tag_once(tmp_path):
    objs = render_consumer(tmp_path, {
        "resources": ["{deploy}/overlays/second-scheduler"],
        "images": [{"name": "ghcr.io/gpupair/gpupair", "newTag": "9.9.9"}],
    })
    images = {c["image"] for w in workloads(objs) for _, c in containers(pod_spec(w))}
    assert images == {"ghcr.io/gpupair/gpupair:9.9.9", SCHEDULER_IMAGE}
    webhook_env = env_of(container(objs, "Deployment", "gpupair-webhook", "webhook"))
    assert webhook_env["GPUPAIR_WEBHOOK_VERIFIER_IMAGE"] == "ghcr.io/gpupair/gpupair:9.9.9"
    assert webhook_env["GPUPAIR_LOG_LEVEL"] == "info", "other env values are left alone"


def test_reporter_daemonset_on_gpu_nodes_with_nvml():
    objs = render("self-managed")
    spec = pod_spec(find(objs, "DaemonSet", "gpupair-reporter"))
    (term,) = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert term["matchExpressions"] == [{"key": "nvidia.com/gpu.present", "operator": "In", "values": ["true"]}]
    assert {"key": "nvidia.com/gpu", "operator": "Exists"} in spec["tolerations"]
    assert "runtimeClassName" not in spec
    c = spec["containers"][0]
    env = env_of(c)
    assert env["NVIDIA_VISIBLE_DEVICES"] == "all" and env["NVIDIA_DRIVER_CAPABILITIES"] == "utility"
    assert env["NODE_NAME"] == {"fieldRef": {"fieldPath": "spec.nodeName"}}
    assert env["GPUPAIR_REPORTER_NODE_NAME"] == {"fieldRef": {"fieldPath": "spec.nodeName"}}
    assert env["GPUPAIR_REPORTER_HOST"] == {"fieldRef": {"fieldPath": "status.hostIP"}}
    assert "nvidia.com/gpu" not in str(c["resources"]), "the reporter must not take a GPU"
    assert env["GPUPAIR_REPORTER_POD_RESOURCES_SOCKET"].startswith("/var/lib/kubelet/pod-resources/")
    assert env["GPUPAIR_REPORTER_CHECKPOINT_FILE"].startswith("/var/lib/kubelet/device-plugins/")
    (port,) = c["ports"]
    assert port["containerPort"] == port["hostPort"] == int(env["GPUPAIR_REPORTER_PORT"])
    # the verifier sidecar calls the reporter at hostIP:GPUPAIR_REPORTER_PORT
    webhook_env = env_of(container(objs, "Deployment", "gpupair-webhook", "webhook"))
    assert webhook_env["GPUPAIR_REPORTER_PORT"] == env["GPUPAIR_REPORTER_PORT"]
    assert webhook_env["GPUPAIR_TOKEN_AUDIENCE"] == env["GPUPAIR_TOKEN_AUDIENCE"]
    assert webhook_env["GPUPAIR_RESOURCE_NAME"] == env["GPUPAIR_RESOURCE_NAME"] == "nvidia.com/gpu"


def test_gpu_node_label_component(tmp_path):
    objs = render_consumer(tmp_path, {
        "resources": ["{deploy}/overlays/self-managed", "gpu-nodes.yaml"],
        "components": ["{deploy}/components/gpu-node-label"],
    }, files={"gpu-nodes.yaml": {
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "gpupair-gpu-nodes", "annotations": {"config.kubernetes.io/local-config": "true"}},
        "data": {"key": "feature.node.kubernetes.io/pci-10de.present", "value": "yes"},
    }})
    spec = pod_spec(find(objs, "DaemonSet", "gpupair-reporter"))
    (term,) = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert term["matchExpressions"] == [{"key": "feature.node.kubernetes.io/pci-10de.present", "operator": "In",
                                         "values": ["yes"]}]
    assert not [o for o in objs if o["kind"] == "ConfigMap"], "the settings ConfigMap is never applied"


def test_nvidia_runtime_class_component(tmp_path):
    objs = render_consumer(tmp_path, {
        "resources": ["{deploy}/overlays/second-scheduler"],
        "components": ["{deploy}/components/nvidia-runtime-class"],
    })
    assert pod_spec(find(objs, "DaemonSet", "gpupair-reporter"))["runtimeClassName"] == "nvidia"
    for obj in objs:
        kubernetes_validate.validate(obj, K8S_VERSION, strict=True)


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_deployments_are_highly_available_with_probes(overlay):
    objs = render(overlay)
    pdbs = of_kind(objs, "PodDisruptionBudget")
    for d in of_kind(objs, "Deployment"):
        name = d["metadata"]["name"]
        assert d["spec"]["replicas"] == 2, name
        labels = d["spec"]["template"]["metadata"]["labels"]
        selector = d["spec"]["selector"]["matchLabels"]
        assert selector.items() <= labels.items()
        (pdb,) = [p for p in pdbs if p["spec"]["selector"]["matchLabels"].items() <= labels.items()]
        assert pdb["spec"]["minAvailable"] == 1
        for _, c in containers(pod_spec(d)):
            assert c.get("livenessProbe") and c.get("readinessProbe"), name
    for svc in of_kind(objs, "Service"):
        pods = [d for d in of_kind(objs, "Deployment")
                if svc["spec"]["selector"].items() <= d["spec"]["template"]["metadata"]["labels"].items()]
        assert len(pods) == 1, svc["metadata"]["name"]
        port_names = {p["name"] for _, c in containers(pod_spec(pods[0])) for p in c.get("ports", [])}
        assert {p["targetPort"] for p in svc["spec"]["ports"]} <= port_names


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_probes_use_declared_ports(overlay):
    for w in workloads(render(overlay)):
        for _, c in containers(pod_spec(w)):
            names = {p["name"] for p in c.get("ports", [])}
            for probe in ("livenessProbe", "readinessProbe"):
                if probe in c:
                    assert c[probe]["httpGet"]["port"] in names, (w["metadata"]["name"], probe)


def test_the_extender_and_the_webhook_share_one_default_placement():
    objs = render("self-managed")
    defaults = {name: env_of(pod_spec(find(objs, "Deployment", name))["containers"][0])["GPUPAIR_DEFAULT_PLACEMENT"]
                for name in ("gpupair-extender", "gpupair-webhook")}
    assert set(defaults.values()) == {Intent.REQUIRED.value}


def test_env_matches_the_commands_flags():
    """Every GPUPAIR_* variable set for a `gpupair SUBCOMMAND` container is the current name of a
    flag of that subcommand (docs/cli.md): no setting is silently ignored, and none relies on a
    deprecated name."""
    from gpupair.command import cli
    from gpupair.command.cli_reference import command_parsers

    current = {name: {a.gpupair_env.env for a in parser._actions if hasattr(a, "gpupair_env")}
               for name, parser in command_parsers().items()}

    checked = set()
    for overlay in OVERLAYS:
        for w in workloads(render(overlay)):
            for _, c in containers(pod_spec(w)):
                if c["image"] != GPUPAIR_IMAGE:
                    continue
                command = c["args"][0]
                assert command in cli.COMMANDS, command
                for name in env_of(c):
                    if name.startswith("GPUPAIR_"):
                        assert name in current[command], f"{command}: {name} is no current flag variable"
                checked.add(command)
    assert {"webhook", "certs", "extender", "reporter"} <= checked


# --------------------------------------------------------------------------- certificates


def test_certs_job_and_cronjob_match_the_webhook():
    objs = render("self-managed")
    hook = find(objs, "MutatingWebhookConfiguration", "gpupair-webhook")
    secret_volume = next(v for v in pod_spec(find(objs, "Deployment", "gpupair-webhook"))["volumes"] if "secret" in v)
    role = find(objs, "Role", "gpupair-certs")
    for kind in ("Job", "CronJob"):
        c = container(objs, kind, "gpupair-certs", "certs")
        assert c["args"] == ["certs"]
        env = env_of(c)
        assert env["GPUPAIR_CERTS_SERVICE"] == hook["webhooks"][0]["clientConfig"]["service"]["name"]
        assert env["GPUPAIR_CERTS_NAMESPACE"] == hook["webhooks"][0]["clientConfig"]["service"]["namespace"]
        assert env["GPUPAIR_CERTS_WEBHOOK_CONFIG"] == hook["metadata"]["name"]
        assert env["GPUPAIR_CERTS_SECRET"] == secret_volume["secret"]["secretName"]
        assert [env["GPUPAIR_CERTS_SECRET"]] in [r.get("resourceNames") for r in role["rules"]]
    job = find(objs, "Job", "gpupair-certs")
    assert job["spec"]["backoffLimit"] >= 3 and job["spec"]["ttlSecondsAfterFinished"] > 0


@pytest.mark.parametrize("overlay", ["cert-manager", "second-scheduler-cert-manager"])
def test_cert_manager_overlay(overlay):
    objs = render(overlay)
    assert not [o for o in objs if o["metadata"]["name"] == "gpupair-certs"], "no certs Job, CronJob or RBAC"
    hook = find(objs, "MutatingWebhookConfiguration", "gpupair-webhook")
    ns, name = hook["metadata"]["annotations"]["cert-manager.io/inject-ca-from"].split("/")
    serving = find(objs, "Certificate", name, ns)
    issuers = {i["metadata"]["name"]: i for i in of_kind(objs, "Issuer")}
    certs = {c["metadata"]["name"]: c for c in of_kind(objs, "Certificate")}
    # cert-manager's required fields (its CRD schema is not in kubernetes-validate)
    for obj in list(issuers.values()) + list(certs.values()):
        assert obj["apiVersion"] == "cert-manager.io/v1" and obj["metadata"]["namespace"] == "gpupair-system"
    for issuer in issuers.values():
        kinds = set(issuer["spec"]) & {"selfSigned", "ca", "acme", "vault", "venafi"}
        assert len(kinds) == 1, "an Issuer has exactly one issuing method"
        if "ca" in issuer["spec"]:
            backing = [c for c in certs.values() if c["spec"]["secretName"] == issuer["spec"]["ca"]["secretName"]]
            assert len(backing) == 1 and backing[0]["spec"]["isCA"] is True
    for cert in certs.values():
        assert cert["spec"]["secretName"] and cert["spec"]["issuerRef"]["name"] in issuers
        assert cert["spec"]["issuerRef"].get("kind", "Issuer") == "Issuer"
        assert cert["spec"].get("dnsNames") or cert["spec"].get("commonName")
    webhook_secret = next(v for v in pod_spec(find(objs, "Deployment", "gpupair-webhook"))["volumes"] if "secret" in v)
    assert serving["spec"]["secretName"] == webhook_secret["secret"]["secretName"]
    assert serving["spec"]["dnsNames"] == WEBHOOK_NAMES
    assert "server auth" in serving["spec"]["usages"]
    assert issuers[serving["spec"]["issuerRef"]["name"]]["spec"].get("ca"), "issued by the CA, not self-signed"


# --------------------------------------------------------------------------- schedulers

EXTENDER_FIELDS = {  # k8s.io/kube-scheduler/config/v1 Extender: json name -> type
    "urlPrefix": str, "filterVerb": str, "preemptVerb": str, "prioritizeVerb": str, "weight": int,
    "bindVerb": str, "enableHTTPS": bool, "tlsConfig": dict, "httpTimeout": str, "nodeCacheCapable": bool,
    "managedResources": list, "ignorable": bool,
}


def check_extender_stanzas(extenders: list[dict], objs: list[dict], host_forms: set[str]) -> None:
    """The two entries gpupair ships: the GPU entry (filter, bind and preempt, managedResources,
    not ignorable) and the every-pod entry (prioritize only, every pod, ignorable): each pod
    scored once, by one entry. Both to the extender's Service, both routes the extender serves."""
    from gpupair.extender.app import build_app
    from gpupair.extender.every_pod import EVERY_POD_VERB
    from gpupair.simulator.models.schedulers import EXTENDER_WEIGHT
    from tests.extender_support import make_extender

    gpu, every_pod = extenders
    for extender in extenders:
        for key, value in extender.items():
            assert key in EXTENDER_FIELDS and isinstance(value, EXTENDER_FIELDS[key]), key
        assert extender["nodeCacheCapable"] is True
        assert re.fullmatch(r"\d+(ms|s|m)", extender["httpTimeout"])
        url = urlparse(extender["urlPrefix"])
        svc = find(objs, "Service", "gpupair-extender", "gpupair-system")
        assert url.scheme == "http" and extender["enableHTTPS"] is False
        assert url.hostname in host_forms
        assert url.port in {p["port"] for p in svc["spec"]["ports"]}
        env = env_of(container(objs, "Deployment", "gpupair-extender", "extender"))
        assert str(url.port) == env["GPUPAIR_EXTENDER_PORT"]
        assert url.path in ("", "/")
    assert gpu["urlPrefix"] == every_pod["urlPrefix"]
    assert env["GPUPAIR_EXTENDER_SCORE"] == "fragmentation"
    routes = {path for method, path in build_app(make_extender()).routes if method == "POST"}
    assert (gpu["filterVerb"], gpu["bindVerb"], gpu["preemptVerb"]) == ("filter", "bind", "preempt")
    assert {"/" + gpu[verb] for verb in ("filterVerb", "bindVerb", "preemptVerb")} <= routes
    assert gpu["ignorable"] is False
    assert not {"prioritizeVerb", "weight"} & set(gpu)  # scored by the every-pod entry alone
    # The second is what the dra component's webhook marks claim pods with (webhook.claim_pods):
    # ignored by NodeResourcesFit through this entry, whatever the other entries say.
    assert gpu["managedResources"] == [{"name": env["GPUPAIR_RESOURCE_NAME"], "ignoredByScheduler": False},
                                       {"name": CLAIM_POD_RESOURCE, "ignoredByScheduler": True}]
    # Every pod, scores only: nothing of a pod's scheduling waits on it.
    assert every_pod["prioritizeVerb"] == EVERY_POD_VERB and "/" + EVERY_POD_VERB in routes
    assert every_pod["ignorable"] is True and every_pod["weight"] == EXTENDER_WEIGHT  # the one simulate models
    assert not {"managedResources", "filterVerb", "bindVerb", "preemptVerb"} & set(every_pod)


def test_self_managed_scheduler_config_file():
    path = DEPLOY / "overlays/self-managed/scheduler-config.yaml"
    config = yaml.safe_load(path.read_text())
    assert config["apiVersion"] == "kubescheduler.config.k8s.io/v1"
    assert config["kind"] == "KubeSchedulerConfiguration"
    objs = render("self-managed")
    assert not [o for o in objs if o["kind"] == "KubeSchedulerConfiguration"], "a file, not a cluster object"
    check_extender_stanzas(config["extenders"], objs, {"gpupair-extender.gpupair-system.svc.cluster.local"})
    # every choice carries a comment: the lines above each key in each entry are comments
    lines = path.read_text().splitlines()
    starts = [i for i, line in enumerate(lines) if line.strip().startswith("- urlPrefix:")]
    for start, extender in zip(starts, config["extenders"], strict=True):
        for key in extender:
            i = next(j for j in range(start, len(lines)) if re.match(rf"\s*(- )?{key}:", lines[j]))
            assert lines[i - 1].strip().startswith("#"), f"{key} has no comment"


def test_second_scheduler():
    objs = render("second-scheduler")
    deploy = find(objs, "Deployment", "gpupair-scheduler", "gpupair-system")
    spec = pod_spec(deploy)
    (c,) = spec["containers"]
    assert c["image"] == SCHEDULER_IMAGE
    config_flag = next(a for a in c["command"] if a.startswith("--config="))
    mount = next(m for m in c["volumeMounts"] if config_flag.removeprefix("--config=").startswith(m["mountPath"]))
    volume = next(v for v in spec["volumes"] if v["name"] == mount["name"])
    configmap = find(objs, "ConfigMap", volume["configMap"]["name"], "gpupair-system")
    config = yaml.safe_load(configmap["data"][config_flag.rsplit("/", 1)[1]])
    assert config["apiVersion"] == "kubescheduler.config.k8s.io/v1" and config["kind"] == "KubeSchedulerConfiguration"
    assert [p["schedulerName"] for p in config["profiles"]] == ["gpupair-scheduler"]
    # kube-scheduler's adaptive search, measured against 100 on the trace (docs/extender.md)
    assert config["percentageOfNodesToScore"] == 0
    election = config["leaderElection"]
    assert election["leaderElect"] is True and election["resourceLock"] == "leases"
    assert (election["resourceName"], election["resourceNamespace"]) == ("gpupair-scheduler", "gpupair-system")
    check_extender_stanzas(config["extenders"], objs, {"gpupair-extender.gpupair-system.svc",
                                                       "gpupair-extender.gpupair-system.svc.cluster.local"})
    self_managed = yaml.safe_load((DEPLOY / "overlays/self-managed/scheduler-config.yaml").read_text())["extenders"]
    for ours, theirs in zip(config["extenders"], self_managed, strict=True):  # the same entries but the address
        assert {**ours, "urlPrefix": ""} == {**theirs, "urlPrefix": ""}
    assert spec["serviceAccountName"] == "gpupair-scheduler"
    env = env_of(container(objs, "Deployment", "gpupair-webhook", "webhook"))
    assert env["GPUPAIR_WEBHOOK_SCHEDULER_NAME"] == "gpupair-scheduler"
    assert env_of(container(render("self-managed"), "Deployment", "gpupair-webhook", "webhook"))[
        "GPUPAIR_WEBHOOK_SCHEDULER_NAME"] == ""


def test_install_guide_covers_every_overlay_and_component():
    guide = (DEPLOY / "README.md").read_text()
    for overlay in OVERLAYS:
        assert f"overlays/{overlay}" in guide, overlay
    for component in (DEPLOY / "components").iterdir():
        if component.name not in ("second-scheduler", "cert-manager"):  # reached through their overlays
            assert f"components/{component.name}" in guide, component.name
    for path in re.findall(r"\]\(([^)#]+)\)", guide):
        assert (DEPLOY / path).exists(), path
