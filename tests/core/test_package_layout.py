"""The core's folders and what each may import, read from the source with ``ast``.

gpupair/ holds five subpackages by concern; the pure ones (kubewire, topology, decide) import
nothing that does I/O, so the extender, the simulator and the tests run the same decisions; and no
file of the core imports another that imports it back, at module level or inside a function.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

CORE = Path(__file__).resolve().parents[2] / "gpupair"
SUBPACKAGES = {"kubewire", "topology", "decide", "kubeclient", "command"}
PURE = {"kubewire", "topology", "decide"}
# Libraries that reach the network, the disk of another process or the event loop.
IO_LIBRARIES = {"aiohttp", "kubernetes_asyncio", "pynvml", "grpc", "socket", "ssl", "urllib", "http",
                "subprocess", "asyncio", "httptools", "uvloop", "prometheus_client"}
# What each pure package may take from the rest of the core.
ALLOWED_CORE = {
    "kubewire": set(),
    "topology": {"kubewire"},
    "decide": {"kubewire", "topology"},
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
            # `from gpupair.decide import policies` imports the module gpupair.decide.policies
            found.update(f"{base}.{alias.name}" for alias in node.names)
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


@pytest.mark.parametrize("package", sorted(PURE))
def test_a_pure_package_imports_no_io_and_only_the_core_it_stands_on(package):
    broken = []
    for path in sorted((CORE / package).rglob("*.py")):
        for imported in imports_of(path):
            top = imported.split(".")[0]
            if top in IO_LIBRARIES:
                broken.append(f"{module_name(path)} imports {imported}")
            parts = imported.split(".")
            if top == "gpupair" and len(parts) > 1 and parts[1] != package:
                if parts[1] not in ALLOWED_CORE[package]:
                    broken.append(f"{module_name(path)} imports {imported}")
    assert broken == []


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
