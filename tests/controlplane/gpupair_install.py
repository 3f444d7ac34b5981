"""gpupair installed on the test's control plane as deploy/ installs it, its processes started
as its manifests start them.

``Install`` applies the rendered overlay (namespace, RBAC, ServiceAccounts, the admission
policies, Services, the workloads as inert objects since no controllers run them, and the
MutatingWebhookConfiguration with its ``service`` reference swapped for a URL on 127.0.0.1 and
a caBundle from the session's CA). Each process is then the manifest's container run here:
``gpupair`` with the container's args and env, downward-API values resolved the way the kubelet
would (``spec.nodeName``, ``status.hostIP``, ``metadata.namespace``), and only what must differ
on one machine overridden (listen addresses, ports, kubelet paths, TLS file paths). It calls
the apiserver with a token of the workload's ServiceAccount from TokenRequest; a reporter's
token is bound to a reporter Pod made from the DaemonSet's template and pinned to its node, so
it carries the node's name as a kubelet-minted token does (the admission policies need it).
A ConfigMap volume the webhook's Deployment mounts is kept by ``ConfigMapVolume``, the kubelet's
part: the ConfigMap read through the apiserver, its keys written as files in a directory that
stands for the mount path (env values under the mount path are pointed there).
"""

from __future__ import annotations

import base64
import copy
import os
import ssl
import sys
import threading
import urllib.request
from pathlib import Path
from typing import Any

import yaml

from tests.controlplane.api import Api, ApiError
from tests.controlplane.containers import base_env, gpupair_argv, resolved_env
from tests.controlplane.control_plane import ControlPlane
from tests.controlplane.kubelet import SimNode
from tests.controlplane.pki import LOOPBACK, CertPair
from tests.controlplane.processes import Process, free_port, wait_until
from tests.deploy_manifests import DEPLOY, container, find, pod_spec

REPO = Path(__file__).resolve().parents[2]

NAMESPACE = "gpupair-system"
VERDICT_POLICY = "gpupair-pod-verdicts"
SCHEDULER_CONFIG = DEPLOY / "overlays" / "self-managed" / "scheduler-config.yaml"


def url_webhooks(webhooks_config: dict[str, Any], url: str, ca_pem: bytes) -> dict[str, Any]:
    """The MutatingWebhookConfiguration with each webhook's Service swapped for ``url`` + path."""
    config = copy.deepcopy(webhooks_config)
    for hook in config["webhooks"]:
        path = hook["clientConfig"].get("service", {}).get("path", "")
        hook["clientConfig"] = {"url": url + path, "caBundle": base64.b64encode(ca_pem).decode()}
    return config


def scheduler_extenders(url: str) -> list[dict[str, Any]]:
    """Both entries of deploy/overlays/self-managed/scheduler-config.yaml, as gpupair ships them
    (the GPU entry, and the every-pod entry that scores every pod), pointed at ``url``."""
    shipped = yaml.safe_load(SCHEDULER_CONFIG.read_text())
    return [{**entry, "urlPrefix": url} for entry in shipped["extenders"]]


def _ready(url: str, context=None) -> bool:
    with urllib.request.urlopen(url, timeout=2, context=context) as response:
        return response.status == 200


def wait_extender_ready(process: Process, url: str) -> None:
    wait_until(lambda: _ready(f"{url}/readyz"), 60, "gpupair extender /readyz", process, interval=0.1)


def wait_reporter_ready(process: Process, node: SimNode, port: int) -> None:
    wait_until(lambda: _ready(f"http://{node.ip}:{port}/readyz"), 60, f"gpupair reporter on {node.name} /readyz",
               process, interval=0.1)


class ConfigMapVolume:
    """The kubelet's ConfigMap volume, here: a thread that reads ConfigMap ``name`` every
    ``interval`` seconds through the apiserver and writes each key as a file of ``directory``,
    swapping it in whole by a rename (a new inode, as the kubelet's symlink swap); a key gone, or
    the ConfigMap gone (an optional volume), removes its file."""

    def __init__(self, api: Api, namespace: str, name: str, directory: Path, interval: float = 0.5) -> None:
        self.api, self.namespace, self.name, self.directory, self.interval = api, namespace, name, directory, interval
        directory.mkdir(parents=True, exist_ok=True)
        self._stop = threading.Event()
        self.sync()
        self._thread = threading.Thread(target=self._run, name=f"configmap-volume-{name}", daemon=True)
        self._thread.start()

    def sync(self) -> None:
        found = self.api.find("v1", "ConfigMap", self.name, self.namespace)
        data = dict((found or {}).get("data") or {})
        for key, value in data.items():
            path = self.directory / key
            if path.exists() and path.read_text(encoding="utf-8") == value:
                continue
            staged = self.directory / f"..{key}.tmp"
            staged.write_text(value, encoding="utf-8")
            os.replace(staged, path)
        for path in self.directory.iterdir():
            if not path.name.startswith("..") and path.name not in data:
                path.unlink()

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.sync()
            except Exception:  # the apiserver going away at teardown; the next round retries
                pass

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)


class Install:
    """gpupair from one rendering of deploy/ (``objects``) on ``plane``."""

    def __init__(self, plane: ControlPlane, objects: list[dict[str, Any]], directory: Path) -> None:
        self.plane = plane
        self.api: Api = plane.admin
        self.objects = objects
        self.directory = directory
        self.processes: list[Process] = []
        self.volumes: list[ConfigMapVolume] = []
        self.reporter_port = free_port()  # one port for every node's reporter, each node its own IP
        self.webhook_port = free_port()
        self.webhook_tls: CertPair = plane.ca.issue("webhook", "gpupair-webhook", server=True, hosts=(LOOPBACK,))

    # --- objects

    def apply(self) -> None:
        """Apply every object, then wait until the admission policies are enforced: the
        apiserver compiles new policies in the background, and for a second or two after the
        apply (measured: 0.75-1.5 s on two cores) it still admits what they refuse."""

        def order(obj: dict[str, Any]) -> tuple[bool, bool, bool]:
            last_policy = obj["metadata"]["name"] == VERDICT_POLICY and "ValidatingAdmissionPolicy" in obj["kind"]
            return obj["kind"] != "Namespace", last_policy, obj["kind"] == "MutatingWebhookConfiguration"

        for obj in sorted(self.objects, key=order):
            if obj["kind"] == "MutatingWebhookConfiguration":
                obj = url_webhooks(obj, f"https://{LOOPBACK}:{self.webhook_port}", self.plane.ca.cert_pem)
            self.api.apply(obj)
        # The policies applied last is in force once a pod carrying a verdict is refused; the
        # apiserver reloads its policies all together, so the earlier ones are then too.
        probe = {"apiVersion": "v1", "kind": "Pod",
                 "metadata": {"name": "policy-probe", "namespace": NAMESPACE, "annotations": {"gpupair.io/verdict": "PASS"}},
                 "spec": {"serviceAccountName": "gpupair-webhook", "automountServiceAccountToken": False,
                          "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}]}}
        path = self.api.path("v1", "Pod", namespace=NAMESPACE) + "?dryRun=All"
        outcome = self.api.wait_for(lambda: self._refused(path, probe), 30, f"the {VERDICT_POLICY} policy enforced",
                                    interval=0.1)
        if outcome is not True:
            raise RuntimeError(f"probing the {VERDICT_POLICY} policy: {outcome}")

    def _refused(self, path: str, probe: dict[str, Any]) -> bool | str:
        try:
            self.api.request("POST", path, probe)
        except ApiError as exc:
            return VERDICT_POLICY in str(exc) or str(exc)  # truthy either way: an error that is not the policy's ends the wait
        return False

    def remove_webhook_configuration(self) -> None:
        for obj in self.objects:
            if obj["kind"] == "MutatingWebhookConfiguration":
                self.api.delete(obj)

    # --- processes

    def _container(self, kind: str, name: str, container_name: str) -> dict[str, Any]:
        return container(self.objects, kind, name, container_name)

    def _start(self, name: str, spec_container: dict[str, Any], env: dict[str, str],
               cpu_profile: str | None = None) -> Process:
        args = list(spec_container.get("args") or [])
        # bench/cpu_sampler.py runs the same entry point with its stacks sampled by CPU time
        argv = [sys.executable, str(REPO / "bench/cpu_sampler.py"), cpu_profile, "-m", "gpupair.command.cli", *args] \
            if cpu_profile else gpupair_argv(args)
        process = Process(name, argv, self.directory / f"{name}.log", env={**base_env(), **env})
        self.processes.append(process)
        return process

    def service_account_kubeconfig(self, name: str, service_account: str,
                                   bound_pod: dict[str, Any] | None = None) -> str:
        token = self.api.request_token(NAMESPACE, service_account, bound_pod=bound_pod)
        return str(self.plane.token_kubeconfig(name, token))

    def extender(self, env: dict[str, str] | None = None, name: str = "extender",
                 cpu_profile: str | None = None) -> tuple[Process, str]:
        """`gpupair extender` as the gpupair-extender Deployment runs it; (process, its URL);
        ``name``: its log's, for a second replica; ``cpu_profile``: a file for its CPU samples."""
        spec = self._container("Deployment", "gpupair-extender", "extender")
        port = free_port()
        values = resolved_env(spec, {"metadata.namespace": NAMESPACE})
        values.update(GPUPAIR_EXTENDER_HOST=LOOPBACK, GPUPAIR_EXTENDER_PORT=str(port),
                      KUBECONFIG=self.service_account_kubeconfig(name, "gpupair-extender"))
        values.update(env or {})
        process = self._start(name, spec, values, cpu_profile)
        url = f"http://{LOOPBACK}:{port}"
        wait_extender_ready(process, url)
        return process, url

    def defrag(self, env: dict[str, str] | None = None) -> Process:
        """`gpupair defrag --act` as the gpupair-defrag Deployment runs it (the defrag component),
        with its service account's token: what it may do is what deploy/ grants it. Returns once
        /readyz answers (its first round has run)."""
        spec = self._container("Deployment", "gpupair-defrag", "defrag")
        port = free_port()
        values = resolved_env(spec, {"metadata.namespace": NAMESPACE})
        values.update(GPUPAIR_DEFRAG_HOST=LOOPBACK, GPUPAIR_DEFRAG_PORT=str(port),
                      KUBECONFIG=self.service_account_kubeconfig("defrag", "gpupair-defrag"))
        values.update(env or {})
        process = self._start("defrag", spec, values)
        wait_until(lambda: _ready(f"http://{LOOPBACK}:{port}/readyz"), 60, "gpupair defrag /readyz", process,
                   interval=0.1)
        return process

    def webhook(self, env: dict[str, str] | None = None) -> Process:
        """`gpupair webhook` with TLS, as the gpupair-webhook Deployment runs it: with its service
        account's token where the Deployment mounts one (the dra component), else no API access."""
        spec = self._container("Deployment", "gpupair-webhook", "webhook")
        values = resolved_env(spec, {"metadata.namespace": NAMESPACE})
        if pod_spec(find(self.objects, "Deployment", "gpupair-webhook")).get("automountServiceAccountToken", True):
            values["KUBECONFIG"] = self.service_account_kubeconfig("webhook", "gpupair-webhook")
        values.update(GPUPAIR_WEBHOOK_HOST=LOOPBACK, GPUPAIR_WEBHOOK_PORT=str(self.webhook_port),
                      GPUPAIR_WEBHOOK_TLS_CERT_FILE=str(self.webhook_tls.cert),
                      GPUPAIR_WEBHOOK_TLS_PRIVATE_KEY_FILE=str(self.webhook_tls.key),
                      GPUPAIR_REPORTER_PORT=str(self.reporter_port))
        values.update(self._configmap_volumes("Deployment", "gpupair-webhook", spec, values))
        values.update(env or {})
        process = self._start("webhook", spec, values)
        context = ssl.create_default_context(cafile=str(self.plane.ca.cert_file))
        wait_until(lambda: _ready(f"https://{LOOPBACK}:{self.webhook_port}/readyz", context), 60,
                   "gpupair webhook /readyz", process, interval=0.1)
        return process

    def _configmap_volumes(self, kind: str, name: str, spec_container: dict[str, Any],
                           values: dict[str, str]) -> dict[str, str]:
        """Each ConfigMap volume the container mounts kept in a directory of its own here (a
        ``ConfigMapVolume``); the env values under its mount path, pointed into that directory."""
        volumes = {v["name"]: v for v in pod_spec(find(self.objects, kind, name)).get("volumes") or []}
        changed: dict[str, str] = {}
        for mount in spec_container.get("volumeMounts") or []:
            source = volumes.get(mount["name"], {}).get("configMap")
            if source is None:
                continue
            directory = self.directory / f"{name}-volume-{mount['name']}"
            self.volumes.append(ConfigMapVolume(self.api, NAMESPACE, source["name"], directory))
            prefix = mount["mountPath"].rstrip("/") + "/"
            changed.update({key: str(directory / value[len(prefix):])
                            for key, value in values.items() if value.startswith(prefix)})
        return changed

    def reporter_pod(self, node: SimNode) -> dict[str, Any]:
        """A gpupair-reporter Pod from the DaemonSet's template, on ``node`` (as the DaemonSet
        controller would make it, with spec.nodeName set); the one there already, if any."""
        existing = self.api.find("v1", "Pod", f"gpupair-reporter-{node.name}", NAMESPACE)
        if existing is not None:
            return existing
        daemonset = find(self.objects, "DaemonSet", "gpupair-reporter")
        template = daemonset["spec"]["template"]
        pod = {"apiVersion": "v1", "kind": "Pod",
               "metadata": {"name": f"gpupair-reporter-{node.name}", "namespace": NAMESPACE,
                            "labels": dict(template["metadata"].get("labels") or {})},
               "spec": {**copy.deepcopy(pod_spec(daemonset)), "nodeName": node.name}}
        return self.api.create(pod)

    def reporter(self, node: SimNode, env: dict[str, str] | None = None, wait_ready: bool = True) -> Process:
        """`gpupair reporter --topology-file` for ``node``, as the DaemonSet runs it there, with a
        token bound to its reporter Pod; ``wait_ready``: return once it has published."""
        pod = self.reporter_pod(node)
        spec = self._container("DaemonSet", "gpupair-reporter", "reporter")
        values = resolved_env(spec, {"spec.nodeName": node.name, "status.hostIP": node.ip,
                                     "metadata.namespace": NAMESPACE})
        values.update(
            GPUPAIR_REPORTER_PORT=str(self.reporter_port),
            GPUPAIR_REPORTER_POD_RESOURCES_SOCKET=node.socket,
            GPUPAIR_REPORTER_CHECKPOINT_FILE=str(node.checkpoint),
            GPUPAIR_REPORTER_LAYOUT_FILE=str(node.directory / "layout.json"),
            GPUPAIR_REPORTER_TOPOLOGY_FILE=str(node.topology_file),
            KUBECONFIG=self.service_account_kubeconfig(f"reporter-{node.name}", "gpupair-reporter", bound_pod=pod),
        )
        values.update(env or {})
        process = self._start(f"reporter-{node.name}", spec, values)
        if wait_ready:
            wait_reporter_ready(process, node, self.reporter_port)
        return process

    def stop(self) -> None:
        for volume in self.volumes:
            volume.stop()
        self.volumes.clear()
        for process in reversed(self.processes):
            process.stop()
        self.processes.clear()
