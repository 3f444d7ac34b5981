"""etcd, kube-apiserver, kube-scheduler and kube-controller-manager on loopback, as envtest
starts them: binaries from one folder, own certificates, nothing else.

The apiserver runs with ``--authorization-mode=Node,RBAC``, so RBAC is real: the test's admin
is in ``system:masters``, kube-scheduler calls as ``system:kube-scheduler`` with its bootstrap
roles, and gpupair's processes call with their service accounts' tokens. Facts for running
v1.36 on one machine without kubelets: /work/shared/k8s/README.md (copied into the docstring
of each piece below where it matters).
"""

from __future__ import annotations

import os
import shutil
import ssl
import tempfile
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from tests.controlplane.api import Api
from tests.controlplane.pki import LOOPBACK, Authority, CertPair, service_account_keys
from tests.controlplane.processes import Process, free_port, kill, wait_until

BIN_ENV = "GPUPAIR_K8S_BIN"
BINARIES = ("kube-apiserver", "kube-scheduler", "kube-controller-manager")
HOW_TO_PROVIDE = (f"set {BIN_ENV} to a folder with kube-apiserver, kube-scheduler and kube-controller-manager "
                  "v1.36 (.ci/run unpacks ../shared/k8s into .k8s-bin/) and install etcd (Debian etcd-server)")
# etcd 3.4 (Debian's) lacks RequestWatchProgress, which these two gates lean on.
APISERVER_GATES = "WatchList=false,SizeBasedListCostEstimate=false"
ISSUER = "https://kubernetes.default.svc.cluster.local"
START_TIMEOUT = 60.0  # the apiserver comes up in about 4 s on two cores; a busy machine gets room


def find_binaries() -> tuple[dict[str, str], str]:
    """({name: path}, "") when everything is there; ({}, why not) otherwise."""
    folder = os.environ.get(BIN_ENV, "")
    if not folder:
        return {}, f"{BIN_ENV} is not set"
    found: dict[str, str] = {}
    for name in BINARIES:
        path = Path(folder) / name
        if not (path.is_file() and os.access(path, os.X_OK)):
            return {}, f"{BIN_ENV}={folder} has no executable {name}"
        found[name] = str(path)
    beside = Path(folder) / "etcd"
    etcd = (str(beside) if os.access(beside, os.X_OK) else None) or shutil.which("etcd") \
        or ("/usr/bin/etcd" if os.access("/usr/bin/etcd", os.X_OK) else None)
    if etcd is None:
        return {}, f"no etcd in {folder}, on PATH or at /usr/bin/etcd"
    found["etcd"] = etcd
    return found, ""


def session_directory() -> Path:
    """A fresh directory for the session's files; on tmpfs where there is one (etcd fsyncs)."""
    shm = "/dev/shm"
    base = shm if os.path.isdir(shm) and os.access(shm, os.W_OK) else None
    return Path(tempfile.mkdtemp(prefix="gpupair-cp-", dir=base))


def write_kubeconfig(path: Path, server: str, ca_file: Path, *, cert: CertPair | None = None,
                     token: str | None = None) -> Path:
    user: dict[str, Any] = {}
    if cert is not None:
        user = {"client-certificate": str(cert.cert), "client-key": str(cert.key)}
    if token is not None:
        user = {"token": token}
    config = {
        "apiVersion": "v1", "kind": "Config", "current-context": "test",
        "clusters": [{"name": "test", "cluster": {"server": server, "certificate-authority": str(ca_file)}}],
        "users": [{"name": "test", "user": user}],
        "contexts": [{"name": "test", "context": {"cluster": "test", "user": "test"}}],
    }
    path.write_text(yaml.safe_dump(config))
    path.chmod(0o600)
    return path


def _healthy(url: str, context: ssl.SSLContext) -> bool:
    with urllib.request.urlopen(url, context=context, timeout=2) as response:
        return response.status == 200


@dataclass
class ControlPlane:
    """The session's etcd and apiserver; ``scheduler()`` and ``controller_manager()`` start the rest."""

    binaries: dict[str, str]
    directory: Path
    processes: list[Process] = field(default_factory=list)

    def start(self) -> None:
        d = self.directory
        self.ca = Authority(d)
        self.serving = self.ca.issue("apiserver", "kube-apiserver", server=True,
                                     hosts=(LOOPBACK, "localhost", "kubernetes.default.svc"))
        self.admin_cert = self.ca.issue("admin", "gpupair-test-admin", organization="system:masters")
        self.scheduler_cert = self.ca.issue("scheduler", "system:kube-scheduler")
        self.sa_keys = service_account_keys(d)
        etcd_port, peer_port, self.port = free_port(), free_port(), free_port()
        etcd_url = f"http://{LOOPBACK}:{etcd_port}"
        self.etcd = self._start("etcd", [
            self.binaries["etcd"], "--name", "test", "--data-dir", str(d / "etcd"),
            "--listen-client-urls", etcd_url, "--advertise-client-urls", etcd_url,
            "--listen-peer-urls", f"http://{LOOPBACK}:{peer_port}",
            "--initial-advertise-peer-urls", f"http://{LOOPBACK}:{peer_port}",
            "--initial-cluster", f"test=http://{LOOPBACK}:{peer_port}", "--log-level", "warn",
        ])
        wait_until(lambda: urllib.request.urlopen(f"{etcd_url}/health", timeout=2).status == 200,
                   START_TIMEOUT, "etcd /health", self.etcd)
        self.server = f"https://{LOOPBACK}:{self.port}"
        self.apiserver = self._start("kube-apiserver", [
            self.binaries["kube-apiserver"],
            f"--etcd-servers={etcd_url}",
            f"--bind-address={LOOPBACK}", f"--advertise-address={LOOPBACK}", f"--secure-port={self.port}",
            f"--tls-cert-file={self.serving.cert}", f"--tls-private-key-file={self.serving.key}",
            f"--client-ca-file={self.ca.cert_file}",
            # an aggregation CA, so kube-scheduler's and the controller-manager's
            # authentication delegation finds one and stops logging its absence
            f"--requestheader-client-ca-file={self.ca.cert_file}", "--requestheader-allowed-names=front-proxy-client",
            "--requestheader-username-headers=X-Remote-User", "--requestheader-group-headers=X-Remote-Group",
            "--requestheader-extra-headers-prefix=X-Remote-Extra-",
            f"--service-account-key-file={self.sa_keys.cert}",
            f"--service-account-signing-key-file={self.sa_keys.key}",
            f"--service-account-issuer={ISSUER}",
            "--service-cluster-ip-range=10.96.0.0/16",
            "--endpoint-reconciler-type=none",
            "--authorization-mode=Node,RBAC",
            f"--feature-gates={APISERVER_GATES}",
            "--allow-privileged=true",
            f"--cert-dir={d / 'apiserver-certs'}",
            "--profiling=false",
            "--v=1",
        ])
        self.wait_apiserver_ready()
        self.admin = Api(LOOPBACK, self.port, str(self.ca.cert_file),
                         cert=(str(self.admin_cert.cert), str(self.admin_cert.key)))
        self.admin_kubeconfig = write_kubeconfig(d / "admin.kubeconfig", self.server, self.ca.cert_file,
                                                 cert=self.admin_cert)
        self.scheduler_kubeconfig = write_kubeconfig(d / "scheduler.kubeconfig", self.server, self.ca.cert_file,
                                                     cert=self.scheduler_cert)

    def wait_apiserver_ready(self) -> None:
        context = ssl.create_default_context(cafile=str(self.ca.cert_file))
        context.load_cert_chain(str(self.admin_cert.cert), str(self.admin_cert.key))
        wait_until(lambda: _healthy(f"{self.server}/readyz", context), START_TIMEOUT,
                   "kube-apiserver /readyz", self.apiserver, interval=0.2)

    def restart_apiserver(self) -> None:
        """SIGKILL the apiserver and start it again on the same port and etcd, as a static pod's
        kubelet would; returns once it is ready."""
        old = self.apiserver
        kill(old)
        self.apiserver = old.respawn()
        self.processes[self.processes.index(old)] = self.apiserver
        self.wait_apiserver_ready()

    def _start(self, name: str, argv: list[str], env: dict[str, str] | None = None) -> Process:
        process = Process(name, argv, self.directory / f"{name}.log", env=env)
        self.processes.append(process)
        return process

    def token_kubeconfig(self, name: str, token: str) -> Path:
        return write_kubeconfig(self.directory / f"{name}.kubeconfig", self.server, self.ca.cert_file, token=token)

    def _wait_serving(self, process: Process, port: int, what: str) -> None:
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE  # the component's self-signed serving certificate
        wait_until(lambda: _healthy(f"https://{LOOPBACK}:{port}/healthz", context), START_TIMEOUT, what, process,
                   interval=0.1)

    def scheduler(self, config: dict[str, Any], name: str = "kube-scheduler", flags: Sequence[str] = ()) -> Process:
        """kube-scheduler with ``config`` (a KubeSchedulerConfiguration) and any further ``flags``;
        the harness sets its client connection and turns leader election off (one instance)."""
        config = dict(config)
        config.setdefault("apiVersion", "kubescheduler.config.k8s.io/v1")
        config.setdefault("kind", "KubeSchedulerConfiguration")
        config["clientConnection"] = {**(config.get("clientConnection") or {}),
                                      "kubeconfig": str(self.scheduler_kubeconfig)}
        config["leaderElection"] = {"leaderElect": False}
        path = self.directory / f"{name}.yaml"
        path.write_text(yaml.safe_dump(config))
        port = free_port()
        process = self._start(name, [
            self.binaries["kube-scheduler"], f"--config={path}",
            f"--bind-address={LOOPBACK}", f"--secure-port={port}",
            f"--authentication-kubeconfig={self.scheduler_kubeconfig}",
            f"--authorization-kubeconfig={self.scheduler_kubeconfig}",
            f"--cert-dir={self.directory / (name + '-certs')}",
            # /metrics readable without a token, as /healthz is: the benches read its histograms
            "--authorization-always-allow-paths=/healthz,/readyz,/livez,/metrics",
            "--v=2", *flags,
        ])
        self._wait_serving(process, port, "kube-scheduler /healthz")
        process.url = f"https://{LOOPBACK}:{port}"
        return process

    def controller_manager(self, controllers: str = "resourceclaim-controller", name: str = "kube-controller-manager") -> Process:
        """kube-controller-manager running only ``controllers`` (comma-separated, as its flag);
        it calls as the admin (without --use-service-account-credentials a controller acts with
        the manager's own identity, and no token controller runs here to mint per-controller ones)."""
        port = free_port()
        process = self._start(name, [
            self.binaries["kube-controller-manager"], f"--kubeconfig={self.admin_kubeconfig}",
            f"--controllers={controllers}", "--leader-elect=false",
            f"--bind-address={LOOPBACK}", f"--secure-port={port}",
            f"--authentication-kubeconfig={self.admin_kubeconfig}",
            f"--authorization-kubeconfig={self.admin_kubeconfig}",
            f"--cert-dir={self.directory / (name + '-certs')}",
            "--v=2",
        ])
        self._wait_serving(process, port, "kube-controller-manager /healthz")
        return process

    def stop(self) -> None:
        for process in reversed(self.processes):
            process.stop()
        self.processes.clear()
