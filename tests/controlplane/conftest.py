"""Fixtures for tests on a real control plane (marker ``controlplane``).

One etcd + kube-apiserver per session (``control_plane``). Per test: ``namespace`` (fresh, with
its default ServiceAccount; no namespace controller runs, so the harness deletes what it made),
``kubelets`` (simulated nodes, removed afterwards), ``scheduler`` and ``controller_manager``
(started with what the test asks, stopped after it), and ``gpupair`` (deploy/ applied, its
processes started on demand and stopped after the test).

A test, in short (helpers in workloads.py, dra.py and gpupair_install.py)::

    def test_a_pair_is_close(api, namespace, kubelets, scheduler, gpupair):
        install = gpupair("device-plugin")      # deploy/ applied; "dra" ("defrag") adds that component
        install.webhook()                       # label the namespace gpupair.io/inject=enabled to use it
        sim = kubelets(policy="aligned")        # how the device plugin picks GPUs
        sim.add_node("n1", SEED_TOPO)           # Ready, 8 nvidia.com/gpu, PodResources socket
        install.reporter(sim.nodes["n1"])       # its node-bound token, --topology-file
        _, url = install.extender()
        scheduler({"profiles": [{"schedulerName": "default-scheduler"}],
                   "extenders": scheduler_extenders(url)})
        api.create(gpu_pod(namespace, "p", 2))
        [grant] = sim.wait_admitted(namespace, ["p"], timeout=30)
        assert grant.link == "NODE"

Set GPUPAIR_CONTROLPLANE_LOGS to a folder to keep every test's process logs there (a failing
test prints their last lines anyway). Without the binaries every test here skips with one line saying how to provide them; with
CI=true they fail instead (.ci/run provides them).
"""

from __future__ import annotations

import itertools
import os
import shutil
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from gpupair.kubewire.defrag_plans import PLANS_CONFIGMAP
from tests.controlplane.api import Api
from tests.controlplane.control_plane import HOW_TO_PROVIDE, ControlPlane, find_binaries, session_directory
from tests.controlplane.dra import RESOURCE, device_class, remove_claims, remove_slices
from tests.controlplane.gpupair_install import NAMESPACE, Install
from tests.controlplane.kubelet import Kubelets
from tests.controlplane.processes import Process, stop_all
from tests.deploy_manifests import KUBECTL, render, render_consumer

HERE = Path(__file__).parent
_names = itertools.count(1)
_skipped: list[str] = []


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:  # the harness's own tests need no binaries and stay in the fast loop
        if HERE in Path(str(item.fspath)).parents and "control_plane" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.controlplane)


def pytest_terminal_summary(terminalreporter, exitstatus, config) -> None:
    if _skipped:
        skipped = [r for r in terminalreporter.stats.get("skipped", []) if _skipped[0] in str(r.longrepr)]
        terminalreporter.write_line(f"{len(skipped)} control-plane tests skipped: {_skipped[0]}")


def _unavailable(why: str) -> None:
    message = f"no Kubernetes control plane to test on ({why}): {HOW_TO_PROVIDE}"
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"CI=true and {message}")
    _skipped.append(message)
    pytest.skip(message)


@pytest.fixture(scope="session")
def control_plane() -> Iterator[ControlPlane]:
    binaries, why = find_binaries()
    if not binaries:
        _unavailable(why)
    if KUBECTL is None:
        _unavailable("kubectl, which renders deploy/ with kustomize, is not on PATH")
    plane = ControlPlane(binaries, session_directory())
    try:
        plane.start()
        yield plane
    finally:
        plane.stop()
        stop_all()
        shutil.rmtree(plane.directory, ignore_errors=True)


@pytest.fixture
def api(control_plane: ControlPlane) -> Api:
    return control_plane.admin


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    report = yield
    if report.when == "call":
        item.stash[_failed] = report.failed
    return report


_failed = pytest.StashKey[bool]()
LOGS_ENV = "GPUPAIR_CONTROLPLANE_LOGS"  # a folder: every test's process logs are copied there, by test
SESSION_LOGS = {"etcd.log", "kube-apiserver.log"}  # written all session long; in the session directory


def print_log_tails(directory: Path, since: float, lines: int = 30) -> None:
    """The end of every process log written to since ``since`` (a failed test's evidence)."""
    for log in sorted(directory.rglob("*.log")):
        if log.stat().st_mtime >= since and log.name not in SESSION_LOGS:
            tail = log.read_text(errors="replace").splitlines()[-lines:]
            print(f"--- last {len(tail)} lines of {log.name}", *tail, sep="\n")


@pytest.fixture
def workdir(request: pytest.FixtureRequest, control_plane: ControlPlane) -> Iterator[Path]:
    """A directory for this test's sockets, logs and files, inside the session's (short paths).
    When the test fails, the ends of the logs of the processes it ran are printed first."""
    path = control_plane.directory / f"t{next(_names)}"
    path.mkdir()
    began = time.time()
    yield path
    if request.node.stash.get(_failed, False):
        print_log_tails(control_plane.directory, began)
    keep = os.environ.get(LOGS_ENV)
    if keep:
        copy_logs(control_plane.directory, began, Path(keep) / request.node.name)
    shutil.rmtree(path, ignore_errors=True)


def copy_logs(directory: Path, since: float, target: Path) -> None:
    for log in directory.rglob("*.log"):
        if log.stat().st_mtime >= since:
            where = target / log.relative_to(directory)
            where.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(log, where)


def delete_pods(api: Api, namespace: str = "", **query: str) -> None:
    for pod in api.list("v1", "Pod", namespace, **query):
        api.delete(f"/api/v1/namespaces/{pod['metadata']['namespace']}/pods/{pod['metadata']['name']}", grace=0)


@pytest.fixture
def namespace(api: Api) -> Iterator[str]:
    name = f"test-{next(_names)}"
    api.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    api.create({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "default", "namespace": name}})
    yield name
    delete_pods(api, name)
    remove_claims(api, name)
    api.delete(f"/api/v1/namespaces/{name}")


@pytest.fixture
def kubelets(api: Api, workdir: Path) -> Iterator[Callable[..., Kubelets]]:
    """``kubelets(policy="aligned")``: this test's simulated nodes (one set per test)."""
    made: list[Kubelets] = []

    def make(policy: str = "aligned", **options: Any) -> Kubelets:
        sim = Kubelets(api, workdir / f"nodes{len(made) + 1}", policy=policy, **options)
        made.append(sim)
        return sim

    yield make
    for sim in made:
        sim.close()
        for name in sim.nodes:
            delete_pods(api, field_selector=f"spec.nodeName={name}")
            remove_slices(api, name)
            api.delete(f"/apis/coordination.k8s.io/v1/namespaces/{NAMESPACE}/leases/{name}")
            api.delete(f"/api/v1/nodes/{name}")


def _per_test(start: Callable[..., Process]) -> Iterator[Callable[..., Process]]:
    """A starter whose processes are stopped when the test ends."""
    started: list[Process] = []

    def run(*args: Any, **kwargs: Any) -> Process:
        started.append(start(*args, **kwargs, name=f"{start.__name__}-{next(_names)}"))
        return started[-1]

    yield run
    for process in started:
        process.stop()


@pytest.fixture
def scheduler(control_plane: ControlPlane) -> Iterator[Callable[..., Process]]:
    """``scheduler(config)``: kube-scheduler with that KubeSchedulerConfiguration, for this test."""
    yield from _per_test(control_plane.scheduler)


@pytest.fixture
def controller_manager(control_plane: ControlPlane) -> Iterator[Callable[..., Process]]:
    """``controller_manager("resourceclaim-controller")``: only those controllers, for this test."""
    yield from _per_test(control_plane.controller_manager)


@pytest.fixture
def gpu_device_class(api: Api) -> Iterator[dict[str, Any]]:
    """The DeviceClass gpu.nvidia.com (with extendedResourceName nvidia.com/gpu), removed after
    the test so later tests see no DRA-served GPUs."""
    obj = device_class(api)
    yield obj
    api.delete(api.path_of({**obj, "apiVersion": RESOURCE, "kind": "DeviceClass"}))


@pytest.fixture(scope="session")
def deploy_renders(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], list[dict[str, Any]]]:
    """``deploy_renders("device-plugin" | "dra" | "defrag")``: the self-managed overlay, alone or
    with that component (defrag: the defrag service, on the device plugin's GPUs)."""
    components = {"dra": ["dra"], "defrag": ["defrag"]}

    def rendered(flavour: str) -> list[dict[str, Any]]:
        if flavour == "device-plugin":
            return render("self-managed")
        if flavour in components:
            return render_consumer(tmp_path_factory.mktemp(f"{flavour}-render"), {
                "apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization",
                "resources": ["{deploy}/overlays/self-managed"],
                "components": [f"{{deploy}}/components/{c}" for c in components[flavour]]})
        raise ValueError(f"unknown deploy flavour {flavour!r}")

    return rendered


@pytest.fixture
def gpupair(control_plane: ControlPlane, deploy_renders, workdir: Path) -> Iterator[Callable[[str], Install]]:
    """``gpupair("device-plugin" | "dra" | "defrag")``: deploy/ applied in that flavour; start its
    processes with ``.extender()``, ``.webhook()``, ``.reporter(node)``, ``.defrag()`` (the defrag
    flavour). All stopped after the test."""
    installs: list[Install] = []

    def install(flavour: str = "device-plugin") -> Install:
        made = Install(control_plane, deploy_renders(flavour), workdir)
        made.apply()
        installs.append(made)
        return made

    yield install
    for made in installs:
        made.stop()
        made.remove_webhook_configuration()
    if installs:  # what gpupair wrote at run time in its namespace, which the next install would find
        control_plane.admin.delete(f"/api/v1/namespaces/{NAMESPACE}/configmaps/{PLANS_CONFIGMAP}")
    for made in installs:  # the defrag flavour's objects: later tests install gpupair without them
        for obj in made.objects:
            if obj["metadata"]["name"].startswith("gpupair-defrag"):
                control_plane.admin.delete(obj)
