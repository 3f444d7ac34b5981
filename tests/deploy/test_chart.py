"""charts/gpupair: `helm lint --strict` passes; every documented combination of the overlays and
components renders, through `kubectl kustomize`, the very objects the chart renders under the
matching values, field for field, apart from the labels only Helm adds; every documented values
combination renders and validates against the Kubernetes 1.36 schemas; values.schema.json
refuses bad values at `helm template` (so at `helm install`) with a message naming the value.

The real helm 4 and kubectl 1.35 (tests/k8s_tools.py): without them these skip, saying so in one
line; with CI=true they fail (.ci/run fetches them)."""

from __future__ import annotations

import copy
import json
import re

import kubernetes_validate
import pytest
import yaml

from tests.deploy.test_deploy import CRD_GROUPS, K8S_VERSION, api_group
from tests.deploy_manifests import (
    CHART,
    DEPLOY,
    HELM_LABELS,
    KUBE_VERSION,
    container,
    env_of,
    find,
    helm,
    helm_template,
    needs_kubectl,
    of_kind,
    pod_spec,
    render,
    render_consumer,
    workloads,
)

pytestmark = needs_kubectl

MONITORING_GROUP = "monitoring.coreos.com"
GPU_NODES = {"key": "feature.node.kubernetes.io/pci-10de.present", "value": "true"}
ALL_OPTIONS = {  # every choice away from the default at once
    "scheduler": {"mode": "second-scheduler"}, "certificates": {"source": "cert-manager"},
    "dra": {"enabled": True}, "monitoring": {"enabled": True}, "defrag": {"enabled": True},
    "reporter": {"gpuNodeLabel": GPU_NODES, "runtimeClassName": "nvidia"}, "image": {"tag": "9.9.9"},
}


def overlay_values(overlay: str) -> dict:
    values: dict = {}
    if overlay.startswith("second-scheduler"):
        values["scheduler"] = {"mode": "second-scheduler"}
    if overlay.endswith("cert-manager"):
        values["certificates"] = {"source": "cert-manager"}
    return values


OVERLAYS = ["self-managed", "cert-manager", "second-scheduler", "second-scheduler-cert-manager"]

# (case, overlay, components, extra kustomization, values): each a combination deploy/README.md
# names (an overlay, with the components it says to add in your own kustomization), and the
# chart's values for the same choices.
CASES = (
    [(overlay, overlay, [], {}, overlay_values(overlay)) for overlay in OVERLAYS]
    + [(f"{overlay}+dra", overlay, ["dra"], {}, {**overlay_values(overlay), "dra": {"enabled": True}})
       for overlay in OVERLAYS]
    + [(f"{overlay}+monitoring", overlay, ["monitoring"], {}, {**overlay_values(overlay), "monitoring": {"enabled": True}})
       for overlay in ("self-managed", "second-scheduler-cert-manager")]
    # defrag before dra, as deploy/README.md says: dra then gives the defrag service its driver and RBAC
    + [(f"{overlay}+defrag", overlay, ["defrag"], {}, {**overlay_values(overlay), "defrag": {"enabled": True}})
       for overlay in ("self-managed", "second-scheduler")]
    + [("self-managed+defrag+dra", "self-managed", ["defrag", "dra"], {},
        {"defrag": {"enabled": True}, "dra": {"enabled": True}}),
       ("cert-manager+defrag+monitoring", "cert-manager", ["defrag", "monitoring"], {},
        {**overlay_values("cert-manager"), "defrag": {"enabled": True}, "monitoring": {"enabled": True}}),
       ("self-managed+defrag+image", "self-managed", ["defrag"],
        {"images": [{"name": "ghcr.io/gpupair/gpupair", "newName": "registry.example.com/gpupair", "newTag": "9.9.9"}]},
        {"defrag": {"enabled": True}, "image": {"repository": "registry.example.com/gpupair", "tag": "9.9.9"}})]
    + [("self-managed+gpu-node-label", "self-managed", ["gpu-node-label"], {"gpu-nodes": GPU_NODES},
        {"reporter": {"gpuNodeLabel": GPU_NODES}}),
       ("second-scheduler+nvidia-runtime-class", "second-scheduler", ["nvidia-runtime-class"], {},
        {**overlay_values("second-scheduler"), "reporter": {"runtimeClassName": "nvidia"}}),
       ("self-managed+image", "self-managed", [], {"images": [{"name": "ghcr.io/gpupair/gpupair", "newTag": "9.9.9"}]},
        {"image": {"tag": "9.9.9"}}),
       ("everything", "second-scheduler-cert-manager",
        ["defrag", "dra", "monitoring", "nvidia-runtime-class", "gpu-node-label"],
        {"gpu-nodes": GPU_NODES, "images": [{"name": "ghcr.io/gpupair/gpupair", "newTag": "9.9.9"}]}, ALL_OPTIONS)]
)


def kustomize_case(tmp_path, overlay: str, components: list[str], extra: dict) -> list[dict]:
    kustomization: dict = {"resources": [f"{{deploy}}/overlays/{overlay}"],
                           "components": [f"{{deploy}}/components/{c}" for c in components]}
    files = {}
    if "gpu-nodes" in extra:  # the gpu-node-label component's settings, as its comment shows
        kustomization["resources"].append("gpu-nodes.yaml")
        files["gpu-nodes.yaml"] = {
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "gpupair-gpu-nodes", "annotations": {"config.kubernetes.io/local-config": "true"}},
            "data": extra["gpu-nodes"]}
    if "images" in extra:
        kustomization["images"] = extra["images"]
    return render_consumer(tmp_path, kustomization, files)


# --------------------------------------------------------------------------- one source of truth

GENERATED_NAME = re.compile(r"^(gpupair-scheduler-config)-[a-z0-9]{10}$")  # named after their content
REVISION_NAME = re.compile(r"^(gpupair-certs)-\d+$")  # the chart's one-time Job, one per revision


def without_helm_labels(obj: dict) -> dict:
    """The object as deploy/ would have it: Helm's own labels dropped wherever labels sit."""
    obj = copy.deepcopy(obj)

    def strip(meta: dict | None) -> None:
        if meta and "labels" in meta:
            meta["labels"] = {k: v for k, v in meta["labels"].items() if k not in HELM_LABELS}

    strip(obj["metadata"])
    spec = obj.get("spec") or {}
    strip((spec.get("template") or {}).get("metadata"))
    job = spec.get("jobTemplate") or {}
    strip(job.get("metadata"))
    strip(((job.get("spec") or {}).get("template") or {}).get("metadata"))
    return obj


def normalized(objs: list[dict], *, helm_side: bool) -> dict[tuple, dict]:
    """(kind, namespace, name) -> object, with the names either side derives (a content hash, a
    revision) spelled alike."""
    renames = {}
    for o in objs:
        name = o["metadata"]["name"]
        if o["kind"] == "ConfigMap" and (m := GENERATED_NAME.match(name)):
            renames[name] = m.group(1) + "-HASH"
        if helm_side and o["kind"] == "Job" and (m := REVISION_NAME.match(name)):
            renames[name] = m.group(1)
    out = {}
    for o in objs:
        if helm_side:
            o = without_helm_labels(o)
        text = json.dumps(o, sort_keys=True)
        for old, new in renames.items():
            text = text.replace(f'"{old}"', f'"{new}"')
        o = json.loads(text)
        out[(o["kind"], o["metadata"].get("namespace", ""), o["metadata"]["name"])] = o
    return out


CEL_FIELDS = ("expression", "messageExpression")


def env_by_name(env: list[dict]) -> dict[str, dict]:
    """A container's env keyed by name, its merge key: kustomize's patches put the variables they
    add or change first, the chart writes them in place. The order would matter only to a
    $(VAR) reference, and there is none."""
    assert len({e["name"] for e in env}) == len(env), "a variable set twice"
    assert "$(" not in json.dumps(env), "a $(VAR) reference: the order matters, compare it as a list"
    return {e["name"]: e for e in env}


def differences(a, b, path="") -> list[str]:
    """Every path where the two differ, with both values (for a readable failure). CEL is
    compared with its white space folded: kustomize's YAML writer puts a blank line before a
    more-indented line of a folded (>-) scalar, which only changes the white space in a CEL
    expression, where it means nothing."""
    if path.endswith(CEL_FIELDS) and isinstance(a, str) and isinstance(b, str):
        return [] if a.split() == b.split() else [f"{path}: kustomize {a!r} != helm {b!r}"]
    if path.endswith(".env") and isinstance(a, list) and isinstance(b, list):
        return differences(env_by_name(a), env_by_name(b), path)
    if isinstance(a, dict) and isinstance(b, dict):
        return [d for k in sorted(set(a) | set(b), key=str)
                for d in (differences(a.get(k, "<absent>"), b.get(k, "<absent>"), f"{path}.{k}"))]
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        return [d for i, (x, y) in enumerate(zip(a, b)) for d in differences(x, y, f"{path}[{i}]")]
    return [] if a == b else [f"{path}: kustomize {json.dumps(a)[:200]} != helm {json.dumps(b)[:200]}"]


def namespace_of_deploy() -> dict:
    (namespace,) = of_kind(render("self-managed"), "Namespace")
    return namespace


@pytest.mark.parametrize("case,overlay,components,extra,values", CASES, ids=[c[0] for c in CASES])
def test_the_chart_renders_what_kustomize_renders(tmp_path, case, overlay, components, extra, values):
    """All but deploy/'s Namespace: the chart's namespace is the release's (`helm install -n
    gpupair-system --create-namespace`), whose labels test_the_pod_security_labels_are_deploys
    holds to deploy/'s."""
    kustomized = normalized([o for o in kustomize_case(tmp_path, overlay, components, extra)
                             if o["kind"] != "Namespace"], helm_side=False)
    charted = normalized(helm_template(values), helm_side=True)
    assert sorted(charted) == sorted(kustomized), "the same objects"
    diffs = [f"{key}: {d}" for key in sorted(kustomized) for d in differences(kustomized[key], charted[key])]
    assert not diffs, "\n".join(diffs)


def test_the_comparison_sees_a_changed_field_and_ignores_only_helms_labels():
    """Guards the test above: a field the chart got wrong, a label of deploy/'s changed and a
    label deploy/ lacks are differences; the labels it drops are Helm's alone, never deploy/'s."""
    raw = helm_template()
    charted = normalized(raw, helm_side=True)
    key = ("DaemonSet", "gpupair-system", "gpupair-reporter")
    broken = copy.deepcopy(charted[key])
    pod_spec(broken)["containers"][0]["ports"][0]["hostPort"] = 9401
    broken["metadata"]["labels"]["app.kubernetes.io/component"] = "agent"
    broken["spec"]["template"]["metadata"]["labels"]["team"] = "gpu"
    assert differences(charted[key], broken) == [
        '.metadata.labels.app.kubernetes.io/component: kustomize "reporter" != helm "agent"',
        ".spec.template.metadata.labels.team: kustomize \"<absent>\" != helm \"gpu\"",
        ".spec.template.spec.containers[0].ports[0].hostPort: kustomize 9400 != helm 9401"]
    assert all(set(o["metadata"]["labels"]) >= HELM_LABELS for o in raw), "Helm labels every object"
    deploy_labels = {k for o in render("self-managed") for k in o["metadata"].get("labels", {})}
    assert deploy_labels and not deploy_labels & HELM_LABELS


def test_every_overlay_and_component_has_a_case():
    overlays = {p.name for p in (DEPLOY / "overlays").iterdir() if (p / "kustomization.yaml").exists()}
    components = {p.name for p in (DEPLOY / "components").iterdir()} - {"second-scheduler", "cert-manager"}
    assert overlays == set(OVERLAYS)
    assert {c for _, _, used, _, _ in CASES for c in used} == components


# charts/gpupair/files/NAME: the deploy/ file it is a copy of. The chart holds real files, not
# links, so a copy of charts/gpupair (or `helm pull`'s) renders on its own; this test keeps them equal.
CHART_FILES = {
    "dashboard.json": "components/monitoring/dashboard.json",
    "prometheusrule.yaml": "components/monitoring/prometheusrule.yaml",
    "reporter-admission-policy.yaml": "base/reporter/admission-policy.yaml",
    "second-scheduler-config.yaml": "components/second-scheduler/scheduler-config.yaml",
    "self-managed-scheduler-config.yaml": "overlays/self-managed/scheduler-config.yaml",
    "verdict-policy.yaml": "base/verdict-policy.yaml",
}


def test_the_charts_files_are_deploys_own():
    """The chart reads deploy/'s policies, rules, dashboard and scheduler configurations from
    copies in files/: each is a plain file, byte for byte deploy/'s (a change to one side fails
    here, naming the command that copies it)."""
    assert sorted(p.name for p in (CHART / "files").iterdir()) == sorted(CHART_FILES)
    for name, source in CHART_FILES.items():
        copy_ = CHART / "files" / name
        assert not copy_.is_symlink(), f"{copy_} is a link: a chart copied or packaged alone loses it"
        assert copy_.read_bytes() == (DEPLOY / source).read_bytes(), \
            f"charts/gpupair/files/{name} differs from deploy/{source}: cp deploy/{source} charts/gpupair/files/{name}"


# --------------------------------------------------------------------------- helm itself


def test_helm_lint_strict():
    for values in ({}, ALL_OPTIONS):
        args = ["lint", "--strict", str(CHART), "--namespace", "gpupair-system"]
        if values:
            args += ["--set-json", f"scheduler={json.dumps(values['scheduler'])}",
                     "--set-json", f"certificates={json.dumps(values['certificates'])}",
                     "--set", "dra.enabled=true,monitoring.enabled=true,defrag.enabled=true"]
        result = helm(*args)
        assert "1 chart(s) linted, 0 chart(s) failed" in result.stdout, result.stdout


# Each value away from its default (values.yaml documents them), alone or in the groups they go in.
REPORTER_SETTINGS = {"reporter": {"port": 9410, "nodeSelector": {"gpupair.io/pool": "a"},
                                  "priorityClassName": "system-node-critical", "tolerations": [{"operator": "Exists"}]}}
DEPLOYMENT_SETTINGS = {
    "extender": {"score": "best-fit", "replicas": 3, "priorityClassName": "system-cluster-critical",
                 "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "infra", "effect": "NoSchedule"}],
                 "nodeSelector": {"node-role.kubernetes.io/infra": ""},
                 "resources": {"requests": {"cpu": "200m", "memory": "256Mi"}, "limits": {"cpu": "2", "memory": "1Gi"}}},
    "webhook": {"replicas": 3, "priorityClassName": "system-cluster-critical"},
    "scheduler": {"mode": "second-scheduler", "replicas": 3, "image": "registry.k8s.io/kube-scheduler:v1.35.4",
                  "priorityClassName": "system-cluster-critical"}}
GLOBAL_SETTINGS = {"resourceName": "nvidia.com/mig-3g.40gb", "defaultPlacement": "preferred", "logLevel": "debug"}
DRA_SETTINGS = {"dra": {"enabled": True, "driver": "gpu.example.com",
                        "gpuDeviceClasses": ["gpu.example.com", "big-gpu.example.com"], "gpusPerNumaNode": 8,
                        "nvlinkPairs": "0+1,2+3"}}
DEFRAG_SETTINGS = {"defrag": {"enabled": True, "interval": 10, "movesPerMinute": 0.5, "holdSeconds": 300,
                              "maxMoves": 2, "priorityClassName": "system-cluster-critical",
                              "nodeSelector": {"node-role.kubernetes.io/infra": ""},
                              "tolerations": [{"key": "dedicated", "operator": "Exists"}],
                              "resources": {"requests": {"cpu": "100m", "memory": "256Mi"},
                                            "limits": {"cpu": "1", "memory": "1Gi"}}}}
MONITORING_SETTINGS = {"monitoring": {"enabled": True, "labels": {"release": "kube-prometheus-stack"},
                                      "podMonitor": {"enabled": False},
                                      "dashboard": {"labels": {"grafana_dashboard": "1", "team": "gpu"}}}}
DOCUMENTED = [values for _, _, _, _, values in CASES] + [
    GLOBAL_SETTINGS, REPORTER_SETTINGS, DEPLOYMENT_SETTINGS, DRA_SETTINGS, MONITORING_SETTINGS, DEFRAG_SETTINGS,
    {"image": {"repository": "registry.example.com/gpupair", "tag": "0.2.0", "pullPolicy": "Always"},
     "certificates": {"days": 90, "schedule": "0 4 * * *"}, "imagePullSecrets": [{"name": "regcred"}]},
    # the staged rollout's stages (deploy/README.md), and the emergency bypass
    {"scheduler": {"mode": "none"}},
    {"scheduler": {"mode": "second-scheduler", "gpuEntry": {"ignorable": True}, "everyPodEntry": {"enabled": False}},
     "defaultPlacement": "preferred"},
    {"extender": {"clusterIP": "10.96.0.50", "replicas": 1}, "webhook": {"replicas": 1},
     "scheduler": {"mode": "second-scheduler", "replicas": 1}},
]


@pytest.mark.parametrize("values", DOCUMENTED, ids=[json.dumps(v, sort_keys=True)[:60] for v in DOCUMENTED])
def test_every_documented_combination_renders_and_validates(values):
    objs = helm_template(values)
    keys = [(o["kind"], o["metadata"].get("namespace", ""), o["metadata"]["name"]) for o in objs]
    assert len(keys) == len(set(keys)), "duplicate objects"
    checked = 0
    for obj in objs:
        assert obj["metadata"]["labels"]["app.kubernetes.io/part-of"] == "gpupair"
        if api_group(obj) in CRD_GROUPS | {MONITORING_GROUP}:
            continue
        kubernetes_validate.validate(obj, K8S_VERSION, strict=True)
        checked += 1
    assert checked >= 20


def test_values_reach_their_fields():
    objs = helm_template(REPORTER_SETTINGS | DEPLOYMENT_SETTINGS | GLOBAL_SETTINGS)
    reporter = pod_spec(find(objs, "DaemonSet", "gpupair-reporter"))
    assert reporter["priorityClassName"] == "system-node-critical"
    assert reporter["nodeSelector"] == {"gpupair.io/pool": "a"} and reporter["tolerations"] == [{"operator": "Exists"}]
    (port,) = reporter["containers"][0]["ports"]
    assert port["containerPort"] == port["hostPort"] == 9410
    for name in ("gpupair-reporter", "gpupair-webhook"):
        kind = "DaemonSet" if name == "gpupair-reporter" else "Deployment"
        env = env_of(container(objs, kind, name, name.removeprefix("gpupair-")))
        assert env["GPUPAIR_REPORTER_PORT"] == "9410"
    extender = find(objs, "Deployment", "gpupair-extender")
    assert extender["spec"]["replicas"] == 3 and pod_spec(extender)["priorityClassName"] == "system-cluster-critical"
    assert pod_spec(extender)["containers"][0]["resources"]["limits"] == {"cpu": "2", "memory": "1Gi"}
    assert pod_spec(extender)["nodeSelector"] == {"node-role.kubernetes.io/infra": ""}
    assert env_of(pod_spec(extender)["containers"][0])["GPUPAIR_EXTENDER_SCORE"] == "best-fit"
    scheduler = find(objs, "Deployment", "gpupair-scheduler")
    assert scheduler["spec"]["replicas"] == 3
    assert pod_spec(scheduler)["containers"][0]["image"] == "registry.k8s.io/kube-scheduler:v1.35.4"
    (config_map,) = [o for o in of_kind(objs, "ConfigMap") if o["metadata"]["name"].startswith("gpupair-scheduler-config")]
    config = yaml.safe_load(config_map["data"]["config.yaml"])
    assert config["extenders"][0]["managedResources"][0]["name"] == "nvidia.com/mig-3g.40gb"
    hook = find(objs, "MutatingWebhookConfiguration", "gpupair-webhook")
    for entry in hook["webhooks"]:
        condition = next(c for c in entry["matchConditions"] if c["name"].startswith("asks-for-gpus"))
        assert "'nvidia.com/mig-3g.40gb' in c.resources.limits" in condition["expression"]
        assert "nvidia.com/gpu'" not in condition["expression"]
    for kind, name in (("Deployment", "gpupair-extender"), ("DaemonSet", "gpupair-reporter"),
                       ("Deployment", "gpupair-webhook")):
        assert env_of(pod_spec(find(objs, kind, name))["containers"][0])["GPUPAIR_RESOURCE_NAME"] == "nvidia.com/mig-3g.40gb"


def test_dra_settings_reach_the_containers():
    objs = helm_template(DRA_SETTINGS)
    assert env_of(container(objs, "Deployment", "gpupair-extender", "extender"))["GPUPAIR_EXTENDER_DRA_DRIVER"] == "gpu.example.com"
    assert env_of(container(objs, "DaemonSet", "gpupair-reporter", "reporter"))["GPUPAIR_REPORTER_DRA_DRIVER"] == "gpu.example.com"
    webhook = env_of(container(objs, "Deployment", "gpupair-webhook", "webhook"))
    assert webhook["GPUPAIR_WEBHOOK_GPU_DEVICE_CLASSES"] == "gpu.example.com,big-gpu.example.com"
    assert webhook["GPUPAIR_WEBHOOK_GPUS_PER_NUMA_NODE"] == "8"
    assert webhook["GPUPAIR_WEBHOOK_NVLINK_PAIRS"] == "0+1,2+3"
    assert webhook["GPUPAIR_WEBHOOK_NODE_LINKS_FILE"] == "/node-links/node-links.json"


def test_dra_node_links_off_leaves_no_configmap_role_mount_or_override():
    on = helm_template({"dra": {"enabled": True}})
    assert "GPUPAIR_WEBHOOK_NVLINK_PAIRS" not in env_of(container(on, "Deployment", "gpupair-webhook", "webhook"))
    assert find(on, "Role", "gpupair-extender-node-links")["rules"] == [
        {"apiGroups": [""], "resources": ["configmaps"], "resourceNames": ["gpupair-node-links"],
         "verbs": ["get", "patch"]}]
    objs = helm_template({"dra": {"enabled": True, "nodeLinks": False}})
    assert not [o for o in objs if o["metadata"]["name"] in ("gpupair-node-links", "gpupair-extender-node-links")]
    webhook = container(objs, "Deployment", "gpupair-webhook", "webhook")
    assert "GPUPAIR_WEBHOOK_NODE_LINKS_FILE" not in env_of(webhook)
    assert [m["name"] for m in webhook["volumeMounts"]] == ["tls", "tmp"]
    assert "GPUPAIR_EXTENDER_NODE_LINKS_CONFIGMAP" not in env_of(container(objs, "Deployment", "gpupair-extender", "extender"))


def test_defrag_is_off_by_default():
    """No defrag object unless defrag.enabled, whatever else is on; the monitoring PodMonitor for it
    alone stays (it selects no pod), as the monitoring component renders it without the defrag one."""
    for values in ({}, {k: v for k, v in ALL_OPTIONS.items() if k != "defrag"}):
        objs = helm_template(values)
        defrag = [(o["kind"], o["metadata"]["name"]) for o in objs
                  if o["metadata"]["name"].startswith("gpupair-defrag")]
        assert defrag == ([("PodMonitor", "gpupair-defrag")] if "monitoring" in values else []), defrag
        assert not any("defrag" in c.get("args", []) for w in workloads(objs) for c in pod_spec(w)["containers"])


def test_defrag_settings_reach_the_container():
    objs = helm_template(DEFRAG_SETTINGS | GLOBAL_SETTINGS)
    deployment = find(objs, "Deployment", "gpupair-defrag")
    assert deployment["spec"]["replicas"] == 1 and deployment["spec"]["strategy"] == {"type": "Recreate"}
    spec = pod_spec(deployment)
    assert spec["serviceAccountName"] == "gpupair-defrag"
    assert spec["priorityClassName"] == "system-cluster-critical"
    assert spec["nodeSelector"] == {"node-role.kubernetes.io/infra": ""}
    assert spec["tolerations"] == [{"key": "dedicated", "operator": "Exists"}]
    (defrag,) = spec["containers"]
    assert defrag["args"] == ["defrag", "--act"] and defrag["resources"]["limits"] == {"cpu": "1", "memory": "1Gi"}
    env = env_of(defrag)
    assert {k: env[k] for k in ("GPUPAIR_DEFRAG_INTERVAL", "GPUPAIR_DEFRAG_MOVES_PER_MINUTE", "GPUPAIR_DEFRAG_HOLD_SECONDS",
                                "GPUPAIR_DEFRAG_MAX_MOVES", "GPUPAIR_RESOURCE_NAME", "GPUPAIR_LOG_LEVEL",
                                "GPUPAIR_DEFRAG_DRA_DRIVER")} == {
        "GPUPAIR_DEFRAG_INTERVAL": "10", "GPUPAIR_DEFRAG_MOVES_PER_MINUTE": "0.5", "GPUPAIR_DEFRAG_HOLD_SECONDS": "300",
        "GPUPAIR_DEFRAG_MAX_MOVES": "2", "GPUPAIR_RESOURCE_NAME": "nvidia.com/mig-3g.40gb", "GPUPAIR_LOG_LEVEL": "debug",
        "GPUPAIR_DEFRAG_DRA_DRIVER": ""}
    with_dra = helm_template({"defrag": {"enabled": True}, "dra": {"enabled": True, "driver": "gpu.example.com"}})
    assert env_of(container(with_dra, "Deployment", "gpupair-defrag", "defrag"))["GPUPAIR_DEFRAG_DRA_DRIVER"] == \
        "gpu.example.com"


def test_the_defrag_settings_are_what_the_command_reads():
    """Each GPUPAIR_DEFRAG_* variable the chart sets parses as `gpupair defrag` reads it: under the
    settings above and the defaults, the parser's values are the chart's."""
    from gpupair.command.cli_reference import command_parsers

    for values in (DEFRAG_SETTINGS, {"defrag": {"enabled": True}}):
        env = env_of(container(helm_template(values), "Deployment", "gpupair-defrag", "defrag"))
        parser = command_parsers()["defrag"]
        names = {a.gpupair_env.env: a.dest for a in parser._actions if hasattr(a, "gpupair_env")}
        set_here = {k: v for k, v in env.items() if isinstance(v, str) and k.startswith("GPUPAIR_DEFRAG_")}
        assert set(set_here) <= set(names), set(set_here) - set(names)
        v = {**yaml.safe_load((CHART / "values.yaml").read_text())["defrag"], **values["defrag"]}
        assert float(set_here["GPUPAIR_DEFRAG_INTERVAL"]) == v["interval"]
        assert float(set_here["GPUPAIR_DEFRAG_MOVES_PER_MINUTE"]) == v["movesPerMinute"]
        assert float(set_here["GPUPAIR_DEFRAG_HOLD_SECONDS"]) == v["holdSeconds"]
        assert int(set_here["GPUPAIR_DEFRAG_MAX_MOVES"]) == v["maxMoves"]


def test_monitoring_labels_and_parts():
    objs = helm_template(MONITORING_SETTINGS)
    assert not of_kind(objs, "PodMonitor")
    for kind in ("ServiceMonitor", "PrometheusRule"):
        for obj in of_kind(objs, kind):
            assert obj["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    board = find(objs, "ConfigMap", "gpupair-grafana-dashboard")
    assert board["metadata"]["labels"]["team"] == "gpu" and board["metadata"]["labels"]["grafana_dashboard"] == "1"


def test_another_release_namespace_leaves_no_trace_of_gpupair_system():
    objs = helm_template(ALL_OPTIONS, namespace="gpu-placement")
    text = json.dumps(objs)
    assert "gpupair-system" not in text
    assert not of_kind(objs, "Namespace"), "the release's namespace is Helm's (--create-namespace), not the chart's"
    assert {o["metadata"].get("namespace") for o in objs if "namespace" in o["metadata"]} == {"gpu-placement",
                                                                                              "kube-system"}
    for policy in of_kind(objs, "ValidatingAdmissionPolicy"):
        assert "system:serviceaccount:gpu-placement:gpupair-reporter" in json.dumps(policy["spec"]["matchConditions"])
    serving = find(objs, "Certificate", "gpupair-webhook")
    assert "gpupair-webhook.gpu-placement.svc" in serving["spec"]["dnsNames"]


def test_the_pod_security_labels_are_deploys():
    """The command NOTES.txt prints (and the chart's refusal of a namespace that enforces a
    stricter level names) sets the Pod Security labels deploy/base/namespace.yaml sets."""
    text = notes({}, namespace="gpu-placement")
    (command,) = [line.strip() for line in text.splitlines() if line.strip().startswith("kubectl label namespace gpu-placement ")]
    words = command.split()
    assert words[:4] == ["kubectl", "label", "namespace", "gpu-placement"] and words[-1] == "--overwrite"
    deploys = {k: v for k, v in namespace_of_deploy()["metadata"]["labels"].items()
               if k.startswith("pod-security.kubernetes.io/")}
    assert deploys and dict(w.split("=", 1) for w in words[4:-1]) == deploys
    assert "the reporter needs the privileged pod security level" in " ".join(text.lower().split())


def test_an_old_values_file_with_namespace_settings_is_refused():
    """namespace.name and namespace.create are gone: the release's namespace is the chart's (-n)."""
    result = helm("template", "gpupair", str(CHART), "--set-json", 'namespace={"name": "gpupair-system", "create": true}',
                  check=False)
    assert result.returncode != 0 and "additional properties 'namespace' not allowed" in result.stderr, result.stderr


def test_every_gpupair_container_is_locked_down_whatever_the_values():
    objs = helm_template(ALL_OPTIONS)
    for w in workloads(objs):
        spec = pod_spec(w)
        for c in spec["containers"]:
            sc = c["securityContext"]
            assert sc["readOnlyRootFilesystem"] is True and sc["allowPrivilegeEscalation"] is False
            assert sc["capabilities"] == {"drop": ["ALL"]}
            root = w["metadata"]["name"] == "gpupair-reporter"
            assert (sc.get("runAsUser", spec.get("securityContext", {}).get("runAsUser")) == 0) is root


# --------------------------------------------------------------------------- the schema refuses

BAD_VALUES = [
    ('imagePullSecrets=["regcred"]', "/imagePullSecrets/0"),
    ('imagePullSecrets=[{"name": "Reg_Cred"}]', "/imagePullSecrets/0/name"),
    ('extender={"clusterIP": "gpupair-extender"}', "/extender/clusterIP"),
    ('scheduler={"mode": "none", "gpuEntry": {"ignorable": "yes"}}', "/scheduler/gpuEntry/ignorable"),
    # (--set-json value, what helm's message must name)
    ('scheduler={"mode": "kube-scheduler"}', "/scheduler/mode"),
    ('certificates={"source": "vault"}', "/certificates/source"),
    ('defaultPlacement="strict"', "/defaultPlacement"),
    ('dra={"enabled": true, "gpusPerNumaNode": 0}', "/dra/gpusPerNumaNode"),
    ('dra={"nvlinkPairs": "0,1"}', "/dra/nvlinkPairs"),
    ('dra={"gpuDeviceClasses": []}', "/dra/gpuDeviceClasses"),
    ('dra={"driver": "Not A DNS Name"}', "/dra/driver"),
    ('reporter={"port": 70000}', "/reporter/port"),
    ('extender={"replicas": "two"}', "/extender/replicas"),
    ('extender={"score": "first-fit"}', "/extender/score"),
    ('webhook={"resources": {"requests": {"cpu": "lots", "memory": "64Mi"}, "limits": {"cpu": "1", "memory": "1Gi"}}}',
     "/webhook/resources/requests/cpu"),
    ('extender={"resources": {"requests": {"memory": null}}}', "/extender/resources/requests"),
    ('certificates={"days": 30}', "/certificates/days"),
    ('image={"tag": "has space"}', "/image/tag"),
    ('image={"pullPolicy": "Sometimes"}', "/image/pullPolicy"),
    ('logLevel="verbose"', "/logLevel"),
    ('reporter={"gpuNodeLabel": {"key": "", "value": "true"}}', "/reporter/gpuNodeLabel/key"),
    ('reporter={"tolerations": [{"operator": "Sometimes"}]}', "/reporter/tolerations/0/operator"),
    ('monitoring={"enabeld": true}', "enabeld"),
    ('resourceName="gpu"', "/resourceName"),
    ('certificates={"schedule": "weekly"}', "/certificates/schedule"),
    ('defrag={"enabled": "yes"}', "/defrag/enabled"),
    ('defrag={"interval": 0}', "/defrag/interval"),
    ('defrag={"movesPerMinute": 0}', "/defrag/movesPerMinute"),
    ('defrag={"maxMoves": 17}', "/defrag/maxMoves"),
    ('defrag={"replicas": 2}', "replicas"),
]


@pytest.mark.parametrize("setting,named", BAD_VALUES, ids=[b[0][:40] for b in BAD_VALUES])
def test_the_schema_refuses_a_bad_value(setting, named):
    result = helm("template", "gpupair", str(CHART), "--set-json", setting, check=False)
    assert result.returncode != 0, f"{setting} was accepted"
    assert "values don't meet the specifications of the schema" in result.stderr, result.stderr
    assert named in result.stderr, result.stderr


def test_the_schema_accepts_every_documented_combination():
    # test_every_documented_combination_renders_and_validates renders them; here the defaults
    # themselves, as values.yaml states them, pass the schema's own check.
    schema = json.loads((CHART / "values.schema.json").read_text())
    import jsonschema

    jsonschema.validate(yaml.safe_load((CHART / "values.yaml").read_text()), schema)
    for values in DOCUMENTED:
        merged = copy.deepcopy(yaml.safe_load((CHART / "values.yaml").read_text()))
        for key, value in values.items():
            merged[key] = merged[key] | value if isinstance(value, dict) else value
        jsonschema.validate(merged, schema)


# --------------------------------------------------------------------------- NOTES.txt


def notes(values: dict, namespace: str = "gpupair-system") -> str:
    args = ["install", "gpupair", str(CHART), "--dry-run=client", "--namespace", namespace]
    for key, value in values.items():
        args += ["--set-json", f"{key}={json.dumps(value)}"]
    return helm(*args).stdout.split("NOTES:", 1)[1]


def test_notes_say_what_to_do_next():
    self_managed = notes({})
    # the scheduler entry to merge, with the extender's address and the resource it manages
    assert "extenders:" in self_managed and "urlPrefix: http://EXTENDER_IP:8888" in self_managed
    assert "kubectl -n gpupair-system get service gpupair-extender -o jsonpath='{.spec.clusterIP}'" in self_managed
    assert "managedResources:" in self_managed and "name: nvidia.com/gpu" in self_managed
    assert "prioritizeVerb: prioritize-every-pod" in self_managed  # and the every-pod entry
    assert "kubectl label namespace NAMESPACE gpupair.io/inject=enabled" in self_managed
    assert "job/gpupair-certs-1" in self_managed
    assert "leaves the namespace gpupair-system" in self_managed
    assert "goes with the webhook configuration that owns it" in self_managed  # the certs Job's Secret
    second = notes({"scheduler": {"mode": "second-scheduler"}, "certificates": {"source": "cert-manager"}})
    assert "gpupair-webhook-ca" in second and "kubectl delete namespace gpupair-system" in second
    assert "extenders:" not in second and "deployment/gpupair-scheduler" in second
    assert "kubectl delete mutatingwebhookconfiguration gpupair-webhook" in second  # before uninstall
    assert "spec.schedulerName=gpupair-scheduler,status.phase=Pending" in second
    assert "job/gpupair-certs" not in second and "certificate/gpupair-webhook" in second
    assert "kubectl label namespace NAMESPACE gpupair.io/inject=enabled" in second


def test_notes_scheduler_entry_is_deploys():
    """The entries NOTES.txt prints are the two extenders entries of
    deploy/overlays/self-managed/scheduler-config.yaml, with the Service's ClusterIP to fill in."""
    text = notes({})
    block = text[text.index("extenders:"):]
    block = block[:block.index("\n\n")]
    printed = yaml.safe_load(block)["extenders"]
    ours = yaml.safe_load((DEPLOY / "overlays/self-managed/scheduler-config.yaml").read_text())["extenders"]
    for entry in ours:
        entry["urlPrefix"] = entry["urlPrefix"].replace("gpupair-extender.gpupair-system.svc.cluster.local",
                                                        "EXTENDER_IP")
    assert len(printed) == 2 and printed == ours


def test_global_settings_and_the_image_reach_every_container():
    objs = helm_template(GLOBAL_SETTINGS | {"image": {"repository": "registry.example.com/gpupair", "tag": "0.2.0",
                                                      "pullPolicy": "Always"}})
    for name in ("gpupair-extender", "gpupair-webhook"):
        assert env_of(container(objs, "Deployment", name, name.removeprefix("gpupair-")))[
            "GPUPAIR_DEFAULT_PLACEMENT"] == "preferred"
    seen = set()
    for w in workloads(objs):
        for c in pod_spec(w)["containers"]:
            assert c["image"] == "registry.example.com/gpupair:0.2.0" and c["imagePullPolicy"] == "Always"
            assert env_of(c)["GPUPAIR_LOG_LEVEL"] == "debug"
            seen.add(c["args"][0])
    assert seen == {"reporter", "extender", "webhook", "certs"}
    webhook = env_of(container(objs, "Deployment", "gpupair-webhook", "webhook"))
    assert webhook["GPUPAIR_WEBHOOK_VERIFIER_IMAGE"] == "registry.example.com/gpupair:0.2.0"


def test_pull_secrets_reach_every_pod_and_the_verifier():
    """imagePullSecrets: every gpupair pod (the second scheduler's too) names them, and the webhook
    is told to name them on the pods it gives the verifier; none set, none rendered."""
    secrets = [{"name": "regcred"}, {"name": "mirror-creds"}]
    objs = helm_template({"imagePullSecrets": secrets, "scheduler": {"mode": "second-scheduler"}})
    named = {w["metadata"]["name"]: pod_spec(w).get("imagePullSecrets") for w in workloads(objs)}
    assert named and all(v == secrets for v in named.values()), named
    assert {"gpupair-reporter", "gpupair-extender", "gpupair-webhook", "gpupair-scheduler"} <= set(named)
    webhook = env_of(container(objs, "Deployment", "gpupair-webhook", "webhook"))
    assert webhook["GPUPAIR_WEBHOOK_VERIFIER_IMAGE_PULL_SECRETS"] == "regcred,mirror-creds"
    plain = helm_template({"scheduler": {"mode": "second-scheduler"}})
    assert not any("imagePullSecrets" in pod_spec(w) for w in workloads(plain))
    assert "GPUPAIR_WEBHOOK_VERIFIER_IMAGE_PULL_SECRETS" not in env_of(
        container(plain, "Deployment", "gpupair-webhook", "webhook"))


def test_one_replica_gets_no_disruption_budget():
    """minAvailable 1 of 1 replica blocks every node drain: a PodDisruptionBudget only from 2 on."""
    def budgets(values):
        return {o["metadata"]["name"] for o in of_kind(helm_template(values), "PodDisruptionBudget")}

    second = {"mode": "second-scheduler"}
    assert budgets({"scheduler": second}) == {"gpupair-extender", "gpupair-webhook", "gpupair-scheduler"}
    assert budgets({"scheduler": {**second, "replicas": 1}, "extender": {"replicas": 1}}) == {"gpupair-webhook"}
    assert budgets({"scheduler": second, "webhook": {"replicas": 1}}) == {"gpupair-extender", "gpupair-scheduler"}


def test_the_extenders_cluster_ip_can_be_pinned_and_the_notes_name_it():
    service = find(helm_template({"extender": {"clusterIP": "10.96.0.50"}}), "Service", "gpupair-extender")
    assert service["spec"]["clusterIP"] == "10.96.0.50"
    assert "clusterIP" not in find(helm_template(), "Service", "gpupair-extender")["spec"]
    printed = notes({"extender": {"clusterIP": "10.96.0.50"}})
    assert "urlPrefix: http://10.96.0.50:8888" in printed and "EXTENDER_IP" not in printed


def test_the_second_scheduler_follows_the_clusters_version():
    """scheduler.image "" is upstream kube-scheduler at the cluster's major.minor.patch (a
    provider's suffix dropped), never newer than its apiserver; a set image wins."""
    def image(*args):
        out = helm("template", "gpupair", str(CHART), "--set", "scheduler.mode=second-scheduler", *args).stdout
        deployment = next(d for d in yaml.safe_load_all(out) if d and d["kind"] == "Deployment"
                          and d["metadata"]["name"] == "gpupair-scheduler")
        return pod_spec(deployment)["containers"][0]["image"]

    assert image("--kube-version", "v1.30.4-eks-a737599") == "registry.k8s.io/kube-scheduler:v1.30.4"
    assert image("--kube-version", "1.33.1") == "registry.k8s.io/kube-scheduler:v1.33.1"
    assert image("--kube-version", "1.33.1", "--set", "scheduler.image=mirror.example/kube-scheduler:v1.33.0") == \
        "mirror.example/kube-scheduler:v1.33.0"


def second_scheduler_entries(values: dict) -> list[dict]:
    objs = helm_template({"scheduler": {"mode": "second-scheduler", **values}})
    config = next(o for o in of_kind(objs, "ConfigMap") if o["metadata"]["name"].startswith("gpupair-scheduler-config"))
    return yaml.safe_load(config["data"]["config.yaml"])["extenders"]


def test_the_bypass_and_the_every_pod_entry_shape_both_schedulers_entries():
    """scheduler.gpuEntry.ignorable makes the GPU entry ignorable, and nothing else changes;
    everyPodEntry.enabled false drops the every-pod entry and the GPU entry scores GPU pods
    itself; the second scheduler's configuration and the entries NOTES.txt prints agree."""
    shipped = second_scheduler_entries({})
    bypass = second_scheduler_entries({"gpuEntry": {"ignorable": True}})
    assert bypass == [{**shipped[0], "ignorable": True}, shipped[1]]
    gpu_only = second_scheduler_entries({"everyPodEntry": {"enabled": False}})
    assert gpu_only == [{**shipped[0], "prioritizeVerb": "prioritize", "weight": shipped[1]["weight"]}]
    for values, expected in (({"gpuEntry": {"ignorable": True}}, bypass), ({"everyPodEntry": {"enabled": False}}, gpu_only)):
        text = notes({"scheduler": values})
        block = text[text.index("extenders:"):]
        printed = yaml.safe_load(block[:block.index("\n\n")])["extenders"]
        assert [{k: v for k, v in e.items() if k != "urlPrefix"} for e in printed] == \
            [{k: v for k, v in e.items() if k != "urlPrefix"} for e in expected]


def test_mode_none_registers_no_scheduler_and_routes_no_pod():
    """The verdicts-only stage: no gpupair-scheduler, no entry printed, the webhook routes nothing
    and still injects the verifier in opted-in namespaces."""
    objs = helm_template({"scheduler": {"mode": "none"}})
    assert not [o for o in objs if "gpupair-scheduler" in o["metadata"]["name"]]
    webhook = env_of(container(objs, "Deployment", "gpupair-webhook", "webhook"))
    assert webhook["GPUPAIR_WEBHOOK_SCHEDULER_NAME"] == ""
    hook = find(objs, "MutatingWebhookConfiguration", "gpupair-webhook")
    assert hook["webhooks"] == find(helm_template(), "MutatingWebhookConfiguration", "gpupair-webhook")["webhooks"]
    text = notes({"scheduler": {"mode": "none"}})
    assert "extenders:" not in text and "No scheduler entry" in text


def test_the_schemas_bounds_are_the_commands():
    """What the schema accepts is what the containers' commands accept (no value that passes
    `helm install` and then stops a pod at start)."""
    from gpupair.command.cli_reference import command_parsers
    from gpupair.command.flags import LOG_LEVELS
    from gpupair.decide.pod.intent import Intent

    props = json.loads((CHART / "values.schema.json").read_text())["properties"]
    assert props["logLevel"]["enum"] == list(LOG_LEVELS)
    assert props["defaultPlacement"]["enum"] == [i.value for i in Intent]
    parsers = command_parsers()

    def bounds(command: str, flag: str):
        action = next(a for a in parsers[command]._actions if flag in a.option_strings)
        return action.type.bounds

    per_numa = bounds("webhook", "--gpus-per-numa-node")
    assert (props["dra"]["properties"]["gpusPerNumaNode"]["minimum"],
            props["dra"]["properties"]["gpusPerNumaNode"]["maximum"]) == (per_numa.low, per_numa.high)
    renew = next(a for a in parsers["certs"]._actions if "--renew-within-days" in a.option_strings).default
    days = props["certificates"]["properties"]["days"]
    assert (days["minimum"], days["maximum"]) == (renew + 1, bounds("certs", "--days").high)
    score = next(a for a in parsers["extender"]._actions if "--score" in a.option_strings)
    assert props["extender"]["properties"]["score"]["enum"] == list(score.choices)
    defrag = props["defrag"]["properties"]
    for value, flag in (("interval", "--interval"), ("holdSeconds", "--hold-seconds"),
                        ("movesPerMinute", "--moves-per-minute"), ("maxMoves", "--max-moves")):
        accepted = bounds("defrag", flag)
        low = defrag[value].get("exclusiveMinimum", defrag[value].get("minimum"))
        assert (low, "exclusiveMinimum" in defrag[value], defrag[value]["maximum"]) == \
            (accepted.low, accepted.low_open, accepted.high), value


def test_the_install_docs_lead_with_helm_and_keep_kustomize():
    readme = (DEPLOY.parent / "README.md").read_text()
    install = readme[readme.index("## Install\n"):]
    install = install[:install.index("\n## ", 1)]
    assert install.index("helm install gpupair charts/gpupair") < install.index("kubectl apply -k deploy/overlays/")
    guide = (DEPLOY / "README.md").read_text()
    assert "tests/deploy/test_chart.py" in guide and "## Helm and kustomize: one set of objects" in guide
    for _, overlay, components, _, values in CASES:  # the guide's table names each pairing the test holds equal
        assert f"overlays/{overlay}" in guide
        for component in components:
            assert f"`components/{component}`" in guide
    values_text = (CHART / "values.yaml").read_text()
    for key in json.loads((CHART / "values.schema.json").read_text())["properties"]:
        if key != "global":
            assert re.search(rf"^{key}:", values_text, re.M), f"values.yaml does not document {key}"


def test_the_staged_rollouts_values_are_the_charts():
    """deploy/README.md's staged rollout: each stage's values, as written, render under the schema,
    and together they walk from no scheduler entry to both entries as shipped."""
    guide = (DEPLOY / "README.md").read_text()
    for heading in ("## The image: build it, push it", "## Supported versions", "## What it touches: the blast radius",
                    "## A staged rollout", "## What it costs", "## Turning it off", "### The emergency bypass",
                    "## Neighbours"):
        assert heading in guide, heading
    table = guide[guide.index("## A staged rollout"):guide.index("## What it costs")]
    stages = re.findall(r"^\| (\d)\. [^|]+\| ([^|]+) \|", table, re.M)
    assert [n for n, _ in stages] == ["1", "2", "3", "4"], stages
    args: list[str] = []
    shapes = []
    for number, values in stages:
        for setting in re.findall(r"`([\w.]+=[\w-]+)`", values):
            args += ["--set", setting]
        # stages 2-4 as the second scheduler runs them, to read the entries the chart writes
        mode = [] if number == "1" else ["--set", "scheduler.mode=second-scheduler"]
        out = helm("template", "gpupair", str(CHART), "--kube-version", KUBE_VERSION, *args, *mode).stdout
        objs = [d for d in yaml.safe_load_all(out) if d]
        configs = [o for o in objs if o["kind"] == "ConfigMap" and o["metadata"]["name"].startswith("gpupair-scheduler-config")]
        extenders = yaml.safe_load(configs[0]["data"]["config.yaml"])["extenders"] if configs else []
        placement = env_of(container(objs, "Deployment", "gpupair-extender", "extender"))["GPUPAIR_DEFAULT_PLACEMENT"]
        shapes.append((len(extenders), extenders[0]["ignorable"] if extenders else None, placement))
    # verdicts only; the GPU entry alone, ignorable, preferred; then not ignorable, required; then both entries
    assert shapes == [(0, None, "required"), (1, True, "preferred"), (1, False, "required"), (2, False, "required")]


def test_the_chart_packs_and_renders_on_its_own(tmp_path):
    """`helm package` (what a chart repository serves) packs the chart with no note about links,
    the archive holds every file of the chart, and the archive, and a copy of the chart directory
    alone, render what the chart in this repository renders."""
    import shutil
    import tarfile

    packed = helm("package", str(CHART), "--destination", str(tmp_path / "repo"))
    assert "symbolic link" not in packed.stderr + packed.stdout, packed.stderr
    (archive,) = (tmp_path / "repo").glob("gpupair-*.tgz")
    with tarfile.open(archive) as tar:
        members = {m.name: m for m in tar.getmembers()}
        for path in CHART.rglob("*"):
            if path.is_file():
                member = members[f"gpupair/{path.relative_to(CHART)}"]
                assert member.isfile(), path
                if path.name != "Chart.yaml":  # helm writes Chart.yaml anew, the same fields
                    assert tar.extractfile(member).read() == path.read_bytes(), path
    alone = tmp_path / "elsewhere" / "gpupair"
    shutil.copytree(CHART, alone, symlinks=True)
    for values in ({}, ALL_OPTIONS, {"imagePullSecrets": [{"name": "registry-creds"}]}):
        for chart in (archive, alone):
            args = ["template", "gpupair", str(chart), "--namespace", "gpupair-system", "--kube-version", KUBE_VERSION]
            for k, v in values.items():
                args += ["--set-json", f"{k}={json.dumps(v)}"]
            result = helm(*args)
            assert "symbolic link" not in result.stderr, result.stderr
            assert [d for d in yaml.safe_load_all(result.stdout) if d] == helm_template(values), chart


def test_one_version_names_the_image_everywhere():
    """The package's version is the image tag the chart (appVersion), deploy/ (newTag, the base's
    and the defrag component's), the webhook's default verifier image and the Dockerfile's build
    line name, and CHANGELOG.md's newest entry; the chart's own version is the same number, so one
    release is one version."""
    import tomllib

    from gpupair.command.cli_reference import command_parsers

    root = DEPLOY.parent
    version = tomllib.loads((root / "pyproject.toml").read_text())["project"]["version"]
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert chart["appVersion"] == chart["version"] == version
    for kustomization in ("base", "components/defrag"):  # a component's objects take no image from the base
        images = yaml.safe_load((DEPLOY / kustomization / "kustomization.yaml").read_text())["images"]
        assert [i["newTag"] for i in images] == [version], kustomization
    verifier = next(a for a in command_parsers()["webhook"]._actions if "--verifier-image" in a.option_strings)
    assert verifier.default == f"ghcr.io/gpupair/gpupair:{version}"
    assert f"docker build -t ghcr.io/gpupair/gpupair:{version} ." in (root / "Dockerfile").read_text()
    entries = re.findall(r"^## (\S+)", (root / "CHANGELOG.md").read_text(), re.M)
    assert entries and entries[0] == version, entries


def test_an_older_kubernetes_is_refused():
    """Chart.yaml's kubeVersion is deploy/README.md's floor (ValidatingAdmissionPolicy v1, webhook
    matchConditions, node-bound tokens: 1.30)."""
    assert "Kubernetes 1.30 or newer" in (DEPLOY / "README.md").read_text()
    refused = helm("template", "gpupair", str(CHART), "--kube-version", "1.29.9", check=False)
    assert refused.returncode != 0 and "kubeVersion" in refused.stderr and ">=1.30.0-0" in refused.stderr
    helm("template", "gpupair", str(CHART), "--kube-version", "1.30.0")


def value_leaves(values: dict, prefix: str = "") -> dict[str, object]:
    """values.yaml's settings by path; a map of names (labels, selectors, resources) is one setting."""
    out = {}
    for key, value in values.items():
        path = f"{prefix}{key}"
        if isinstance(value, dict) and value and key not in ("labels", "nodeSelector", "resources"):
            out |= value_leaves(value, path + ".")
        else:
            out[path] = value
    return out


def test_the_charts_readme_documents_every_value_with_its_default():
    rows = {}
    for line in (CHART / "README.md").read_text().splitlines():
        if m := re.match(r"\| `([\w.]+)` \| `(.*?)` \| (.+) \|$", line):
            rows[m.group(1)] = json.loads(m.group(2))
    assert rows == value_leaves(yaml.safe_load((CHART / "values.yaml").read_text()))
