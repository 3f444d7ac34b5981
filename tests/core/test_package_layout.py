"""The core's folders, the services beside it, and what each may import, read from the source
with ``ast``.

gpupair/ holds five subpackages by concern, in layers: each imports only the layers below it
(``LAYERS``), so no import runs back up (the Kubernetes client importing the command line did);
the pure ones (kubewire, topology, decide) import nothing that does I/O, so the extender, the
simulator and the tests run the same decisions; and no file of the core imports another that
imports it back, at module level or inside a function.
The services (the top-level folders pyproject maps to gpupair.extender, gpupair.reporter, ...)
stand on the core and on the few services named in ``SERVICE_USES``; the core stands on none.
"""

from __future__ import annotations

import ast
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CORE = ROOT / "gpupair"
# The core's layers, lowest first: each may import the ones before it, never one after it.
LAYERS = ("kubewire", "topology", "decide", "kubeclient", "command")
SUBPACKAGES = set(LAYERS)
PURE = {"kubewire", "topology", "decide"}
# Libraries that reach the network, the disk of another process or the event loop.
IO_LIBRARIES = {"aiohttp", "kubernetes_asyncio", "pynvml", "grpc", "socket", "ssl", "urllib", "http",
                "subprocess", "asyncio", "httptools", "uvloop", "prometheus_client"}
# What each subpackage may take from the rest of the core: the layers below it.
ALLOWED_CORE = {package: set(LAYERS[:i]) for i, package in enumerate(LAYERS)}
MAX_FOLDER = 8  # modules in one folder of decide/
# gpupair.<service> -> its folder, as pyproject maps them.
SERVICES = {name.split(".", 1)[1]: ROOT / folder for name, folder in tomllib.loads(
    (ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"].items() if name.startswith("gpupair.")}
# What each service may take from the other services; anything shared by more goes to the core.
SERVICE_USES = {
    "extender": set(),
    "webhook": set(),
    "reporter": set(),
    "verifier": {"reporter"},  # the reporter's topo -m reader, for its dry run
    "simulator": {"reporter"},  # the same reader, for --topology files
    "audit": set(),
    "status": set(),
    "snapshot": {"simulator", "status"},  # the trace files it writes; the listing it reads
    "defrag": {"status"},  # the listing it reads
}


def module_name(path: Path) -> str:
    parts = path.relative_to(CORE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(path: Path) -> set[str]:
    package = module_name(path) if path.name == "__init__.py" else module_name(path).rsplit(".", 1)[0]
    return imports_in(path.read_text(), package)


def imports_in(source: str, package: str) -> set[str]:
    """Every module ``source`` (a file of ``package``) imports, anywhere in it, as dotted names."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join([*anchor, *([base] if base else [])])
            found.add(base)
            # `from gpupair.decide.devices import policies` imports the module ...devices.policies
            found.update(f"{base}.{alias.name}" for alias in node.names)
    return found


def crossed(layer: str, imported: set[str]) -> list[str]:
    """The services among ``imported`` that ``layer`` (a service, or "core") may not import."""
    allowed = SERVICE_USES.get(layer, set()) | {layer}
    return sorted(name for name in imported
                  if name.split(".")[:1] == ["gpupair"] and len(name.split(".")) > 1
                  and name.split(".")[1] in SERVICES and name.split(".")[1] not in allowed)


def service_imports(service: str) -> dict[str, set[str]]:
    """Every file of the service (by its path) and what it imports."""
    folder = SERVICES[service]
    found = {}
    for path in sorted(folder.rglob("*.py")):
        parts = path.relative_to(folder).with_suffix("").parts
        module = ".".join(["gpupair", service, *(parts[:-1] if parts[-1] == "__init__" else parts)])
        package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
        found[str(path.relative_to(ROOT))] = imports_in(path.read_text(), package)
    return found


def core_files() -> dict[str, Path]:
    return {module_name(path): path for path in sorted(CORE.rglob("*.py"))}


def core_graph(files: dict[str, Path]) -> dict[str, set[str]]:
    return {name: {imported for imported in imports_of(path) if imported in files and imported != name}
            for name, path in files.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph[node]):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_the_core_is_five_subpackages_and_its_init():
    entries = {p.name for p in CORE.iterdir() if p.name != "__pycache__"}
    assert entries == {"__init__.py", *SUBPACKAGES}
    for package in SUBPACKAGES:
        init = CORE / package / "__init__.py"
        assert ast.get_docstring(ast.parse(init.read_text())), f"gpupair/{package}/__init__.py says what it holds"


def test_decide_is_folders_a_reader_can_take_in():
    """decide/ holds no module of its own, only folders of a concern each, of at most
    MAX_FOLDER modules, each saying in its __init__ what it holds."""
    decide = CORE / "decide"
    assert {p.name for p in decide.glob("*.py")} == {"__init__.py"}
    folders = [p for p in decide.iterdir() if p.is_dir() and p.name != "__pycache__"]
    assert len(folders) > 1
    for folder in folders:
        modules = [p for p in folder.glob("*.py") if p.name != "__init__.py"]
        assert 0 < len(modules) <= MAX_FOLDER, f"{folder.name}: {len(modules)} modules"
        assert ast.get_docstring(ast.parse((folder / "__init__.py").read_text())), f"decide/{folder.name} says what it holds"


def above(package: str, imported: set[str]) -> list[str]:
    """The subpackages of the core among ``imported`` that ``package`` may not import: its own
    layer and those above it, which stand on it."""
    return sorted(name for name in imported
                  if name.split(".")[:1] == ["gpupair"] and len(name.split(".")) > 1
                  and name.split(".")[1] in SUBPACKAGES
                  and name.split(".")[1] not in ALLOWED_CORE[package] | {package})


@pytest.mark.parametrize("package", LAYERS)
def test_a_subpackage_imports_only_the_layers_below_it(package):
    broken = [f"{module_name(path)} imports {name}" for path in sorted((CORE / package).rglob("*.py"))
              for name in above(package, imports_of(path))]
    assert broken == []


@pytest.mark.parametrize("package", sorted(PURE))
def test_a_pure_package_imports_no_io(package):
    broken = [f"{module_name(path)} imports {imported}" for path in sorted((CORE / package).rglob("*.py"))
              for imported in imports_of(path) if imported.split(".")[0] in IO_LIBRARIES]
    assert broken == []


@pytest.mark.parametrize("package, source", [
    ("kubeclient", "from gpupair.command.flags import InputError\n"),
    ("kubeclient", "def later():\n    from ..command import flags\n"),
    ("decide", "import gpupair.kubeclient.kube\n"),
    ("kubewire", "from gpupair.topology.links import Link\n"),
])
def test_an_import_that_runs_back_up_is_named(package, source):
    assert above(package, imports_in(source, f"gpupair.{package}")) != []


def test_an_import_down_the_layers_is_not_named():
    assert above("command", imports_in("from gpupair.kubeclient import kube\nfrom . import flags\n",
                                       "gpupair.command")) == []
    assert above("kubeclient", imports_in("from gpupair.kubewire.usage_errors import InputError\n",
                                          "gpupair.kubeclient")) == []


def test_no_import_cycle_between_the_cores_files():
    assert cycles(core_graph(core_files())) == []


def test_the_cycle_finder_names_a_cycle():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(graph) == [["a", "b", "c"]]


def test_imports_are_read_from_function_bodies_and_relative_forms():
    source = ("import socket\n"
              "def later():\n    from gpupair.kubeclient import kube\n"
              "from . import links\nfrom ..kubewire.wire import Pod\n")
    assert imports_in(source, "gpupair.topology") == {
        "socket", "gpupair.kubeclient", "gpupair.kubeclient.kube", "gpupair.topology", "gpupair.topology.links",
        "gpupair.kubewire.wire", "gpupair.kubewire.wire.Pod"}


def test_the_services_are_the_folders_pyproject_maps():
    assert set(SERVICES) == set(SERVICE_USES)
    assert all(folder.is_dir() for folder in SERVICES.values())


def test_every_package_folder_is_listed_for_the_wheel():
    """A folder with an __init__.py under gpupair/ or a service's folder that pyproject's package
    list leaves out is missing from the wheel and the image (gpupair.decide.defrag was, once)."""
    setuptools = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    roots = {"gpupair": ROOT / "gpupair", **{f"gpupair.{name}": folder for name, folder in SERVICES.items()}}
    found = {f"{package}.{'.'.join(init.parent.relative_to(folder).parts)}".rstrip(".")
             for package, folder in roots.items() for init in folder.rglob("__init__.py")
             if "__pycache__" not in init.parts}
    assert found - set(setuptools["packages"]) == set()


def test_the_core_imports_no_service():
    broken = [f"{module_name(path)} imports {name}" for path in sorted(CORE.rglob("*.py"))
              for name in crossed("core", imports_of(path))]
    assert broken == []


@pytest.mark.parametrize("service", sorted(SERVICE_USES))
def test_a_service_imports_the_core_and_only_the_services_it_stands_on(service):
    broken = [f"{path} imports {name}" for path, imported in service_imports(service).items()
              for name in crossed(service, imported)]
    assert broken == []


@pytest.mark.parametrize("layer, source", [
    ("reporter", "def later():\n    from gpupair.extender.list_watch import ListWatch\n"),
    ("simulator", "from gpupair.extender import evaluation\n"),
    ("status", "import gpupair.extender.app\n"),
    ("core", "from gpupair.status.build import build\n"),
])
def test_a_crossed_layer_is_named(layer, source):
    package = "gpupair.decide" if layer == "core" else f"gpupair.{layer}"
    assert crossed(layer, imports_in(source, package)) != []


def test_what_a_layer_may_import_is_not_named():
    assert crossed("snapshot", imports_in("from gpupair.status.build import Listing\n", "gpupair.snapshot")) == []
    assert crossed("extender", imports_in("from gpupair.kubeclient.list_watch import ListWatch\n"
                                          "from . import filter\n", "gpupair.extender")) == []
