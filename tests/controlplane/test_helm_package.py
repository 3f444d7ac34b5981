"""The packaged chart (`helm package`, what a chart repository serves) on the real control plane
(etcd + kube-apiserver v1.36), installed from its archive with a private registry's pull secret
and the extender's ClusterIP pinned, as deploy/README.md's "Private registry" says.

Every object of the release is the one the chart directory renders for the same values, so the
archive installs the same objects; every gpupair pod names the pull secret; the Service has the
pinned address. The webhook, run as the installed Deployment runs it and called by the real
apiserver, gives a multi-GPU pod of an opted-in namespace the verifier sidecar from the chart's
image and the same pull secret. Uninstall then leaves nothing of gpupair behind.
"""

from __future__ import annotations

import time

from gpupair.kubewire.defaults import VERIFIER_CONTAINER
from tests.controlplane.gpupair_install import Install, url_webhooks
from tests.controlplane.pki import LOOPBACK
from tests.controlplane.test_helm_chart import (  # noqa: F401 (helm_cli is a fixture)
    CHART_NAMESPACE, RELEASE, check_release, clear_deploy_leftovers, gpupair_leftovers, helm_cli, key,
    rendered_objects, set_json,
)
from tests.controlplane.workloads import gpu_pod
from tests.deploy_manifests import CHART, helm, pod_spec, workloads

PULL_SECRETS = [{"name": "registry-creds"}]
PINNED_IP = "10.96.77.77"  # in the test apiserver's --service-cluster-ip-range, 10.96.0.0/16
VALUES = {"imagePullSecrets": PULL_SECRETS, "extender": {"clusterIP": PINNED_IP},
          "image": {"repository": "registry.example.com/gpupair", "tag": "0.2.0"}}
WEBHOOK_CONFIG = ("admissionregistration.k8s.io/v1", "MutatingWebhookConfiguration", "", "gpupair-webhook")


def test_the_packaged_chart_installs_with_a_pull_secret(control_plane, api, controller_manager, namespace, helm_cli,
                                                       workdir, tmp_path):
    helm("package", str(CHART), "--destination", str(tmp_path))
    (archive,) = tmp_path.glob("gpupair-*.tgz")
    rendered = rendered_objects(VALUES)
    kinds = {(o["apiVersion"], o["kind"]) for o in rendered}
    clear_deploy_leftovers(api, rendered)

    helm_cli("install", RELEASE, str(archive), "--namespace", CHART_NAMESPACE, "--create-namespace", *set_json(VALUES))
    live = check_release(api, VALUES, 1, kinds)  # the chart directory's rendering, object for object
    for workload in workloads(list(live.values())):
        assert pod_spec(workload).get("imagePullSecrets") == PULL_SECRETS, workload["metadata"]["name"]
    assert api.get("v1", "Service", "gpupair-extender", CHART_NAMESPACE)["spec"]["clusterIP"] == PINNED_IP

    # the webhook as the installed Deployment runs it, called by the apiserver for a pod created
    # in an opted-in namespace
    installed = list(live.values())
    webhook = Install(control_plane, installed, workdir)
    webhook.webhook()
    hook = api.get(*WEBHOOK_CONFIG[:2], WEBHOOK_CONFIG[3])
    api.patch(hook, {"webhooks": url_webhooks(hook, f"https://{LOOPBACK}:{webhook.webhook_port}",
                                              control_plane.ca.cert_pem)["webhooks"]})
    api.patch(f"/api/v1/namespaces/{namespace}", {"metadata": {"labels": {"gpupair.io/inject": "enabled"}}})
    try:
        made = api.wait_for(lambda: _injected(api, namespace), 30, "a pod given the verifier")
    finally:
        webhook.stop()
    sidecar = next(c for c in made["spec"]["initContainers"] if c["name"] == VERIFIER_CONTAINER)
    assert sidecar["image"] == "registry.example.com/gpupair:0.2.0"
    assert made["spec"]["imagePullSecrets"] == PULL_SECRETS

    controller_manager("namespace-controller,garbage-collector-controller")
    helm_cli("uninstall", RELEASE, "--namespace", CHART_NAMESPACE, "--wait", "--timeout", "120s")
    api.delete(f"/api/v1/namespaces/{CHART_NAMESPACE}")
    names = {key(o) for o in rendered}
    deadline = time.monotonic() + 120
    while (left := gpupair_leftovers(api, kinds, names)) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not left, f"left behind: {left}"


def _injected(api, namespace: str):
    """A 2-GPU pod created now, once the webhook configuration is in force (the apiserver
    reloads it in the background): the pod with the verifier, else None (and it is deleted)."""
    made = api.create({**gpu_pod(namespace, "", 2), "metadata": {"generateName": "sidecar-", "namespace": namespace}})
    if any(c["name"] == VERIFIER_CONTAINER for c in made["spec"].get("initContainers") or []):
        return made
    api.delete(made)
    return None
