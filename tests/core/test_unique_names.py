"""A name found in a log, a traceback or a search points at one file: no module name and no class
name is used twice across the product (the core and every part pyproject.toml installs).

Read from the tree as it is, so a module added or moved is checked without a list to keep. A
service's entry points (``main.py``, ``app.py``, ``metrics.py``) and ``__init__.py`` are the same
role in each part and are allowed in each.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

from tests.deploy.test_dockerfile import packages_in_pyproject

REPO = Path(__file__).resolve().parents[2]
SHARED_ROLES = {"__init__.py", "main.py", "app.py", "metrics.py"}


def product_folders() -> list[Path]:
    return [REPO / folder for folder in packages_in_pyproject()]


def product_files() -> list[Path]:
    return [path for folder in product_folders() for path in sorted(folder.rglob("*.py"))
            if "__pycache__" not in path.parts]


def by_name(pairs) -> dict[str, set[str]]:
    found: dict[str, set[str]] = defaultdict(set)
    for name, path in pairs:
        found[name].add(str(path.relative_to(REPO)))
    return found


def used_twice(found: dict[str, set[str]]) -> dict[str, set[str]]:
    return {name: files for name, files in sorted(found.items()) if len(files) > 1}


def test_the_walk_reads_the_core_and_every_part():
    tops = {folder.name for folder in product_folders()}
    assert {"gpupair", "extender", "webhook", "reporter", "simulator", "status"} <= tops
    assert len(product_files()) > 100


def test_no_module_name_is_used_twice():
    modules = by_name((path.name, path) for path in product_files() if path.name not in SHARED_ROLES)
    assert used_twice(modules) == {}


def test_no_class_name_is_used_twice():
    classes = by_name((node.name, path) for path in product_files()
                      for node in ast.parse(path.read_text(), str(path)).body if isinstance(node, ast.ClassDef))
    assert used_twice(classes) == {}


def test_a_name_used_twice_is_found():
    assert used_twice(by_name([("a.py", REPO / "x" / "a.py"), ("a.py", REPO / "y" / "a.py"),
                               ("b.py", REPO / "x" / "b.py")])) == {"a.py": {"x/a.py", "y/a.py"}}
