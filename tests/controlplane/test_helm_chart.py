"""charts/gpupair on a real control plane (tests/controlplane's etcd + kube-apiserver v1.36): the
real helm 4 installs it, upgrades it to changed values and back, and uninstalls it. The pods never run
(there is no kubelet), but every object the chart renders is created as rendered, the apiserver
admits the webhook configuration and the admission policies (their CEL type-checks against the
real schemas, and the verdict policy refuses a forged verdict), an upgrade adds, changes and
removes objects as the new values say, and uninstall leaves nothing of gpupair behind but the
namespace, which Helm never deletes (the certs Job's Secret is owned by the webhook configuration,
so the garbage collector removes it). The chart checks the
namespace's Pod Security labels with `lookup`, and refuses to upgrade a release of the layout
before 0.2.0 (gpupair kept in a namespace other than the release's).

cert-manager's and prometheus-operator's kinds are stand-in CRDs with open schemas (no operator
runs here); what the chart writes into them is compared with what it rendered. The chart goes
into a namespace of its own (`helm install -n gpupair-helm --create-namespace`), as another
release of it could: deploy/'s tests keep gpupair-system."""

from __future__ import annotations

import copy
import json
import shlex
import subprocess
import sys
import time
from typing import Any

import pytest
import yaml

from gpupair.extender.every_pod import EVERY_POD_VERB
from tests.controlplane.api import Api, ApiError
from tests.deploy_manifests import CHART, env_of, helm_template
from tests.k8s_tools import helm_path, kubectl_path, require

RELEASE = "gpupair"
# The release's namespace, where the chart puts everything: not deploy/'s gpupair-system, which
# other tests of the session use.
CHART_NAMESPACE = RELEASE_NAMESPACE = "gpupair-helm"
DEPLOY_NAMESPACE = "gpupair-system"
INSTALL: dict = {}
UPGRADE = {  # every kind of change: objects added (scheduler, DRA entries, monitors), changed, removed (certs)
    "image": {"tag": "0.2.0"}, "scheduler": {"mode": "second-scheduler"},
    "certificates": {"source": "cert-manager"}, "dra": {"enabled": True}, "monitoring": {"enabled": True},
    "reporter": {"port": 9410}, "extender": {"replicas": 3, "score": "best-fit"}, "resourceName": "nvidia.com/mig-1g.10gb",
}
STAND_IN_CRDS = [("cert-manager.io", "v1", kind) for kind in ("Issuer", "Certificate")] + [
    ("monitoring.coreos.com", "v1", kind) for kind in ("ServiceMonitor", "PodMonitor", "PrometheusRule")]
# kube-controller-manager's controller that type-checks a policy's CEL against the real schemas
# and writes the warnings into its status.
POLICY_STATUS_CONTROLLER = "validatingadmissionpolicy-status-controller"


def key(obj: dict) -> tuple[str, str, str, str]:
    return obj["apiVersion"], obj["kind"], obj["metadata"].get("namespace", ""), obj["metadata"]["name"]


def stand_in_crd(group: str, version: str, kind: str) -> dict:
    plural = kind.lower() + ("es" if kind.endswith("s") else "s")
    return {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": f"{plural}.{group}"},
            "spec": {"group": group, "scope": "Namespaced",
                     "names": {"kind": kind, "plural": plural, "singular": kind.lower(), "listKind": kind + "List"},
                     "versions": [{"name": version, "served": True, "storage": True,
                                   "schema": {"openAPIV3Schema": {"type": "object",
                                                                  "x-kubernetes-preserve-unknown-fields": True}}}]}}


def contained(rendered: Any, live: Any, path: str = "") -> list[str]:
    """Where ``live`` lacks or differs from what ``rendered`` says (the apiserver may add
    defaults, never change a value the chart set; an empty value it drops, as Go's omitempty)."""
    if live == "<absent>" and rendered in ("", [], {}):
        return []
    if isinstance(rendered, dict):
        if not isinstance(live, dict):
            return [f"{path}: rendered a mapping, live {live!r}"]
        return [d for k, v in rendered.items() for d in contained(v, live.get(k, "<absent>"), f"{path}.{k}")]
    if isinstance(rendered, list):
        if not isinstance(live, list) or len(live) != len(rendered):
            return [f"{path}: rendered {rendered!r}, live {live!r}"]
        return [d for i, (r, v) in enumerate(zip(rendered, live)) for d in contained(r, v, f"{path}[{i}]")]
    return [] if rendered == live else [f"{path}: rendered {rendered!r}, live {live!r}"]


def live_objects(api: Api, kinds: set[tuple[str, str]]) -> dict[tuple, dict]:
    """Every object of these kinds that belongs to the release, cluster-wide."""
    found = {}
    for api_version, kind in kinds:
        for obj in api.list(api_version, kind, label_selector=f"app.kubernetes.io/instance={RELEASE}"):
            obj.setdefault("apiVersion", api_version)
            obj.setdefault("kind", kind)
            found[key(obj)] = obj
    return found


def gpupair_leftovers(api: Api, kinds: set[tuple[str, str]], names: set[tuple]) -> list[str]:
    """Anything of gpupair the cluster still holds: objects Helm labelled for the release, objects
    labelled part-of gpupair (but those deploy/'s own tests keep in gpupair-system), every name
    the chart ever rendered whatever its labels, the chart's namespace and Helm's release records."""
    left = []
    for api_version, kind in kinds | {("v1", "Secret"), ("v1", "ConfigMap"), ("v1", "Namespace")}:
        for selector in (f"app.kubernetes.io/instance={RELEASE}", "app.kubernetes.io/part-of=gpupair"):
            for obj in api.list(api_version, kind, label_selector=selector):
                namespace, name = obj["metadata"].get("namespace", ""), obj["metadata"]["name"]
                if selector.startswith("app.kubernetes.io/part-of") and DEPLOY_NAMESPACE in (namespace, name):
                    continue  # the harness's install of deploy/, which other tests share
                left.append(f"{kind} {namespace}/{name}")
    for api_version, kind, namespace, name in names:
        if api.find(api_version, kind, name, namespace) is not None:
            left.append(f"{kind} {namespace}/{name}")
    for secret in api.list("v1", "Secret", RELEASE_NAMESPACE):  # Helm's release records
        if secret["metadata"]["name"].startswith(f"sh.helm.release.v1.{RELEASE}."):
            left.append(f"Secret {RELEASE_NAMESPACE}/{secret['metadata']['name']}")
    if api.find("v1", "Namespace", CHART_NAMESPACE) is not None:
        left.append(f"Namespace {CHART_NAMESPACE}")
    return sorted(set(left))


def rendered_objects(values: dict) -> list[dict]:
    return helm_template(values, namespace=CHART_NAMESPACE)


@pytest.fixture
def helm_cli(control_plane):
    binary = require("helm", helm_path())

    def run(*args: str, refused: bool = False) -> str:
        """helm's stdout; with ``refused``, helm must fail, and this is its stderr."""
        result = subprocess.run([binary, "--kubeconfig", str(control_plane.admin_kubeconfig), *args],
                                capture_output=True, text=True, timeout=300)
        if refused:
            assert result.returncode != 0, f"helm {' '.join(args)} passed:\n{result.stdout}"
            return result.stderr
        assert result.returncode == 0, f"helm {' '.join(args)}:\n{result.stdout}\n{result.stderr}"
        return result.stdout

    return run


@pytest.fixture
def stand_in_crds(api: Api):
    made = [stand_in_crd(*spec) for spec in STAND_IN_CRDS]
    for crd in made:
        if api.find("apiextensions.k8s.io/v1", "CustomResourceDefinition", crd["metadata"]["name"]) is None:
            api.create(crd)
    for crd in made:
        api.wait_for(lambda c=crd: any(cond["type"] == "Established" and cond["status"] == "True" for cond in
                                       (api.get("apiextensions.k8s.io/v1", "CustomResourceDefinition",
                                                c["metadata"]["name"]).get("status") or {}).get("conditions", [])),
                     30, f"CRD {crd['metadata']['name']} established")
    yield
    for crd in made:
        api.delete(f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{crd['metadata']['name']}")


def clear_deploy_leftovers(api: Api, rendered: list[dict]) -> None:
    """Cluster-scoped objects of the same names that a deploy/ test of this session applied (the
    harness keeps them between tests, and re-applies them): Helm adopts nothing it did not make."""
    for obj in rendered:
        if "namespace" in obj["metadata"]:
            continue
        live = api.find(obj["apiVersion"], obj["kind"], obj["metadata"]["name"])
        if live is not None and (live["metadata"].get("labels") or {}).get("app.kubernetes.io/managed-by") != "Helm":
            api.delete(live)


def check_release(api: Api, values: dict, revision: int, kinds: set[tuple[str, str]]) -> dict[tuple, dict]:
    """The cluster holds exactly the objects `helm template` renders for ``values``, each as rendered."""
    rendered = {key(o): o for o in rendered_objects(values)}
    for obj in rendered.values():  # helm template says revision 1; the Job is named after the revision
        if obj["kind"] == "Job":
            obj["metadata"]["name"] = obj["metadata"]["name"].rsplit("-", 1)[0] + f"-{revision}"
    rendered = {key(o): o for o in rendered.values()}
    live = live_objects(api, kinds)
    assert sorted(live) == sorted(rendered), "the release's objects are the rendered ones"
    problems = [f"{k}: {d}" for k, obj in rendered.items() for d in contained(
        {f: v for f, v in obj.items() if f not in ("apiVersion", "kind")}, live[k])]
    assert not problems, "\n".join(problems[:40])
    return rendered


def check_admitted(api: Api, rendered: dict[tuple, dict]) -> None:
    """The apiserver type-checked each policy's CEL against the real schemas without a warning."""
    for k, obj in rendered.items():
        if obj["kind"] != "ValidatingAdmissionPolicy":
            continue
        status = api.wait_for(
            lambda: (lambda p: p.get("status") if (p.get("status") or {}).get("observedGeneration")
                     == p["metadata"]["generation"] else None)(api.get(*k[:2], k[3])),
            60, f"{k[3]} type-checked")
        warnings = (status.get("typeChecking") or {}).get("expressionWarnings") or []
        assert not warnings, f"{k[3]}: {warnings}"


def forged_verdict_refused(api: Api, namespace: str) -> str:
    """A pod created with a verdict annotation: the gpupair-pod-verdicts policy refuses it."""
    pod = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {"generateName": "forged-", "namespace": namespace,
                        "annotations": {"gpupair.io/verdict": "PASS"}},
           "spec": {"containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}]}}
    def attempt():
        try:
            made = api.create(copy.deepcopy(pod))
        except ApiError as exc:
            return str(exc) if exc.status in (403, 422) and "gpupair" in str(exc) else None
        api.delete(made)  # the policy was not loaded yet: try again
        return None

    return api.wait_for(attempt, 30, "a pod with a forged verdict refused", interval=0.5)


def set_json(values: dict) -> list[str]:
    return [arg for k, v in values.items() for arg in ("--set-json", f"{k}={json.dumps(v)}")]


def labelled_as_told(control_plane, message: str, namespace: str) -> None:
    """Runs the one `kubectl label namespace` command the chart printed, as printed."""
    start = message.index(f"kubectl label namespace {namespace} ")
    words = shlex.split(message[start:].splitlines()[0])
    kubectl = require("kubectl", kubectl_path())
    subprocess.run([kubectl, "--kubeconfig", str(control_plane.admin_kubeconfig), *words[1:]], check=True,
                   capture_output=True, timeout=60)


def extender_score(api: Api) -> str:
    deployment = api.get("apps/v1", "Deployment", "gpupair-extender", CHART_NAMESPACE)
    return env_of(deployment["spec"]["template"]["spec"]["containers"][0])["GPUPAIR_EXTENDER_SCORE"]


def printed_entries(notes: str) -> list[dict]:
    """The scheduler entries NOTES.txt prints, EXTENDER_IP and all."""
    block = notes[notes.index("extenders:"):]
    return yaml.safe_load(block[:block.index("\n\n")])["extenders"]


def test_install_upgrade_uninstall(control_plane, api, controller_manager, scheduler, namespace, helm_cli,
                                   stand_in_crds):
    every_step = [rendered_objects(INSTALL), rendered_objects(UPGRADE)]  # the third step is the first again
    kinds = {(o["apiVersion"], o["kind"]) for objs in every_step for o in objs}
    names = {key(o) for objs in every_step for o in objs}
    clear_deploy_leftovers(api, every_step[0] + every_step[1])
    controller_manager(POLICY_STATUS_CONTROLLER)

    # install, as any chart: into the release's namespace, which Helm creates
    notes = helm_cli("install", RELEASE, str(CHART), "--namespace", RELEASE_NAMESPACE, "--create-namespace",
                     *set_json(INSTALL))
    rendered = check_release(api, INSTALL, 1, kinds)
    check_admitted(api, rendered)
    # the fragmentation score, and the two scheduler entries to merge, which the real
    # kube-scheduler takes (the address filled in: nothing listens there, nothing is scheduled)
    assert extender_score(api) == "fragmentation"
    entries = printed_entries(notes)
    assert [(e.get("prioritizeVerb"), e["ignorable"], "managedResources" in e) for e in entries] == [
        (None, False, True), (EVERY_POD_VERB, True, False)]
    scheduler({"profiles": [{"schedulerName": "helm-notes-scheduler"}],
               "extenders": [{**e, "urlPrefix": e["urlPrefix"].replace("EXTENDER_IP", "127.0.0.1")} for e in entries]})
    # Helm made the namespace after rendering, so NOTES.txt found no Pod Security label on it
    assert f"kubectl label namespace {CHART_NAMESPACE} pod-security.kubernetes.io/enforce=privileged" in notes
    hook = api.get("admissionregistration.k8s.io/v1", "MutatingWebhookConfiguration", "gpupair-webhook")
    assert [w["name"] for w in hook["webhooks"]] == [w["name"] for w in rendered[
        ("admissionregistration.k8s.io/v1", "MutatingWebhookConfiguration", "", "gpupair-webhook")]["webhooks"]]
    assert "gpupair.io/verdict" in forged_verdict_refused(api, namespace)
    # what the certs Job does (no kubelet runs it), run here: the Secret, owned by the configuration
    certs = subprocess.run([sys.executable, "-m", "gpupair.command.cli", "certs", "--namespace", CHART_NAMESPACE,
                            "--kubeconfig", str(control_plane.admin_kubeconfig)],
                           capture_output=True, text=True, timeout=120)
    assert certs.returncode == 0, certs.stderr
    owners = api.get("v1", "Secret", "gpupair-webhook-tls", CHART_NAMESPACE)["metadata"]["ownerReferences"]
    assert [(o["kind"], o["name"]) for o in owners] == [("MutatingWebhookConfiguration", "gpupair-webhook")]

    # a namespace that enforces a level the reporter cannot meet: refused, with the command to run
    api.patch(f"/api/v1/namespaces/{CHART_NAMESPACE}",
              {"metadata": {"labels": {"pod-security.kubernetes.io/enforce": "baseline"}}})
    refusal = helm_cli("upgrade", RELEASE, str(CHART), "--namespace", RELEASE_NAMESPACE, *set_json(UPGRADE),
                       refused=True)
    assert f"namespace {CHART_NAMESPACE} enforces Pod Security level baseline" in refusal, refusal
    labelled_as_told(control_plane, refusal, CHART_NAMESPACE)
    labels = api.get("v1", "Namespace", CHART_NAMESPACE)["metadata"]["labels"]
    assert labels["pod-security.kubernetes.io/enforce"] == "privileged"
    assert labels["pod-security.kubernetes.io/audit"] == "restricted"

    # upgrade to changed values: objects added, changed and removed
    notes = helm_cli("upgrade", RELEASE, str(CHART), "--namespace", RELEASE_NAMESPACE, *set_json(UPGRADE))
    assert "pod-security.kubernetes.io" not in notes, "labelled privileged: nothing more to do"
    upgraded = check_release(api, UPGRADE, 2, kinds)
    assert extender_score(api) == "best-fit"
    check_admitted(api, upgraded)
    removed = set(rendered) - set(upgraded)
    assert ("batch/v1", "Job", CHART_NAMESPACE, "gpupair-certs-1") in removed
    assert ("rbac.authorization.k8s.io/v1", "ClusterRole", "", "gpupair-certs") in removed, "cluster-scoped removed"
    assert ("apps/v1", "Deployment", CHART_NAMESPACE, "gpupair-scheduler") in upgraded
    hook = api.get("admissionregistration.k8s.io/v1", "MutatingWebhookConfiguration", "gpupair-webhook")
    # 4 verifier + 2 scope entries for pods; dra: 2 scope + 4 claim entries and the claim-pod entry
    assert len(hook["webhooks"]) == 13 and hook["metadata"]["annotations"]["cert-manager.io/inject-ca-from"] == \
        f"{CHART_NAMESPACE}/gpupair-webhook"
    assert "gpupair.io/verdict" in forged_verdict_refused(api, namespace)

    # a release of the layout before 0.2.0 (its webhook served from another namespace, here
    # made so by hand): an upgrade would move gpupair into the release's namespace; refused
    old_layout = copy.deepcopy(hook["webhooks"])
    for entry in old_layout:
        entry["clientConfig"]["service"]["namespace"] = DEPLOY_NAMESPACE
    api.patch(hook, {"webhooks": old_layout})
    refusal = helm_cli("upgrade", RELEASE, str(CHART), "--namespace", RELEASE_NAMESPACE, "--reset-values",
                       *set_json(INSTALL), refused=True)
    assert (f"helm uninstall {RELEASE} -n {RELEASE_NAMESPACE} --wait && helm install {RELEASE} charts/gpupair "
            f"-n {DEPLOY_NAMESPACE} --create-namespace") in refusal, refusal
    api.patch(hook, {"webhooks": hook["webhooks"]})

    # and back: the certs Job returns under this revision's name, the scheduler's objects go
    helm_cli("upgrade", RELEASE, str(CHART), "--namespace", RELEASE_NAMESPACE, "--reset-values", *set_json(INSTALL))
    back = check_release(api, INSTALL, 3, kinds)
    assert extender_score(api) == "fragmentation"
    assert ("batch/v1", "Job", CHART_NAMESPACE, "gpupair-certs-3") in back
    assert ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding", "", "gpupair-scheduler-as-kube-scheduler") in \
        set(upgraded) - set(back)

    # uninstall leaves only the namespace Helm created: the garbage collector removes the Secret
    # with its owner; deleting the namespace then leaves nothing (its controller does that part)
    controller_manager("namespace-controller,garbage-collector-controller")
    helm_cli("uninstall", RELEASE, "--namespace", RELEASE_NAMESPACE, "--wait", "--timeout", "120s")
    deadline = time.monotonic() + 120
    while api.find("v1", "Secret", "gpupair-webhook-tls", CHART_NAMESPACE) is not None:
        assert time.monotonic() < deadline, "the certificate Secret outlived its webhook configuration"
        time.sleep(0.5)
    assert gpupair_leftovers(api, kinds, names) == [f"Namespace {CHART_NAMESPACE}"]
    api.delete(f"/api/v1/namespaces/{CHART_NAMESPACE}")
    deadline = time.monotonic() + 120
    while (left := gpupair_leftovers(api, kinds, names)) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not left, f"left behind: {left}"
