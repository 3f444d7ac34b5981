"""The Dockerfile and .dockerignore, checked without a container engine: the instructions are
parsed (multi-stage, slim base, only the venv in the final stage, numeric non-root user,
`gpupair` entrypoint), the build context is computed with Docker's .dockerignore rules, and the
builder's wheel is built from exactly that context and imported."""

from __future__ import annotations

import fnmatch
import importlib.metadata
import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


@dataclass
class Stage:
    base: str
    name: str | None
    instructions: list[tuple[str, str]] = field(default_factory=list)

    def all(self, op: str) -> list[str]:
        return [arg for o, arg in self.instructions if o == op]


def parse_dockerfile(text: str) -> tuple[dict[str, str], list[Stage]]:
    """(global ARG defaults, stages), joining continuation lines and dropping comments."""
    lines, buf = [], ""
    for raw in text.splitlines():
        stripped = raw.strip()
        if not buf and (not stripped or stripped.startswith("#")):
            continue
        if buf and stripped.startswith("#"):  # comments inside a continued instruction
            continue
        if stripped.endswith("\\"):
            buf += stripped[:-1] + " "
            continue
        lines.append(buf + stripped)
        buf = ""
    assert not buf, "dangling line continuation"
    args: dict[str, str] = {}
    stages: list[Stage] = []
    for line in lines:
        op, _, rest = line.partition(" ")
        op, rest = op.upper(), rest.strip()
        if op == "FROM":
            m = re.fullmatch(r"(?:--platform=\S+\s+)?(\S+)(?:\s+AS\s+(\S+))?", rest, re.IGNORECASE)
            assert m, line
            base = re.sub(r"\$\{(\w+)\}|\$(\w+)", lambda v: args[v.group(1) or v.group(2)], m.group(1))
            stages.append(Stage(base, m.group(2)))
        elif op == "ARG" and not stages:
            name, _, default = rest.partition("=")
            args[name] = default
        else:
            assert stages, f"{op} before FROM"
            stages[-1].instructions.append((op, rest))
    return args, stages


@pytest.fixture(scope="module")
def stages() -> list[Stage]:
    return parse_dockerfile((REPO / "Dockerfile").read_text())[1]


def test_multi_stage_on_a_slim_python(stages):
    assert len(stages) == 2
    builder, final = stages
    assert builder.name == "builder" and final.name is None
    assert builder.base == final.base == "python:3.11-slim"


def test_final_stage_holds_only_the_venv(stages):
    builder, final = stages
    copies = final.all("COPY")
    assert copies == ["--from=builder /opt/gpupair /opt/gpupair"]
    venv = re.search(r"python -m venv (\S+)", " ".join(builder.all("RUN"))).group(1)
    assert venv == "/opt/gpupair"
    assert not final.all("ADD")
    run = " ".join(final.all("RUN"))
    for tool in ("apt-get", "apk", "gcc", "g++", "make", "build-essential", "pip install", "curl", "wget"):
        assert tool not in run, f"final stage runs {tool}"
    assert re.search(r"pip uninstall --yes pip\b", run), "the base image's pip is removed"
    env = " ".join(final.all("ENV"))
    assert "PATH=/opt/gpupair/bin:$PATH" in env


def test_runs_as_a_numeric_non_root_user(stages):
    final = stages[-1]
    (user,) = final.all("USER")
    uid, _, gid = user.partition(":")
    assert uid.isdigit() and int(uid) == 65532 and gid.isdigit() and int(gid) != 0
    ops = [op for op, _ in final.instructions]
    assert ops.index("USER") > max(i for i, op in enumerate(ops) if op in ("RUN", "COPY")), \
        "nothing runs as root after USER"


def test_entrypoint_is_gpupair(stages):
    final = stages[-1]
    (entrypoint,) = final.all("ENTRYPOINT")
    assert json.loads(entrypoint) == ["gpupair"], "exec form, so signals reach gpupair as PID 1"
    (cmd,) = final.all("CMD")
    assert json.loads(cmd) == ["--help"]


def test_builder_keeps_no_pip_cache(stages):
    builder = stages[0]
    env = " ".join(builder.all("ENV"))
    run = " ".join(builder.all("RUN"))
    assert "PIP_NO_CACHE_DIR=1" in env or run.count("--no-cache-dir") == run.count("pip install")
    assert "/opt/gpupair/bin/pip uninstall --yes pip" in run


# --------------------------------------------------------------------------- build context


def dockerignore_patterns() -> list[tuple[bool, re.Pattern]]:
    """(is_exception, regex) per .dockerignore line, as moby/patternmatcher reads them."""
    patterns = []
    for raw in (REPO / ".dockerignore").read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        exception = line.startswith("!")
        line = os.path.normpath(line.lstrip("!").strip()).lstrip("/")
        regex, i = "", 0
        while i < len(line):
            if line.startswith("**/", i):
                regex += "(?:.*/)?"
                i += 3
            elif line.startswith("**", i):
                regex += ".*"
                i += 2
            elif line[i] == "*":
                regex += "[^/]*"
                i += 1
            elif line[i] == "?":
                regex += "[^/]"
                i += 1
            elif line[i] == "[":
                end = line.index("]", i)
                regex += line[i:end + 1]
                i = end + 1
            else:
                regex += re.escape(line[i])
                i += 1
        patterns.append((exception, re.compile(regex + r"\Z")))
    return patterns


def excluded(path: str, patterns) -> bool:
    """A path is excluded when the last pattern matching it or one of its parent directories is
    not an exception."""
    parts = path.split("/")
    prefixes = ["/".join(parts[:i]) for i in range(1, len(parts) + 1)]
    result = False
    for exception, regex in patterns:
        if any(regex.match(p) for p in prefixes):
            result = not exception
    return result


@pytest.fixture(scope="module")
def context() -> set[str]:
    patterns = dockerignore_patterns()
    files = set()
    for root, dirs, names in os.walk(REPO):
        dirs[:] = [d for d in dirs if d != ".git"]
        for name in names:
            rel = os.path.relpath(os.path.join(root, name), REPO)
            if not excluded(rel, patterns):
                files.add(rel)
    return files


def test_matcher_follows_docker_rules():
    patterns = dockerignore_patterns()
    assert excluded("tests/test_deploy.py", patterns)
    assert not excluded("webhook/certs.py", patterns)
    assert excluded("webhook/__pycache__/certs.cpython-311.pyc", patterns)
    assert excluded("reporter/podresources/x.pyo", patterns)


def test_context_is_what_the_wheel_needs(context):
    assert {"pyproject.toml", "README.md", "gpupair/cli.py", "webhook/certs.py",
            "reporter/podresources/api.proto"} <= context
    for path in context:
        top = path.split("/")[0]
        assert top not in {".venv", ".git", "tests", "deploy", "bench", "docs", ".ci", "out", "build", "dist"}, path
        assert "__pycache__" not in path and not path.endswith(".pyc") and ".egg-info" not in path, path


def packages_in_pyproject() -> list[str]:
    config = tomllib.loads((REPO / "pyproject.toml").read_text())
    include = config["tool"]["setuptools"]["packages"]["find"]["include"]
    return sorted(d.name for d in REPO.iterdir()
                  if (d / "__init__.py").exists() and any(fnmatch.fnmatch(d.name, p) for p in include))


def test_every_package_is_copied_into_the_builder(stages, context):
    copied = {arg.split()[0].rstrip("/") for arg in stages[0].all("COPY")}
    for package in packages_in_pyproject():
        assert package in copied, f"{package}/ is a package in pyproject.toml but the Dockerfile does not COPY it"
    for source in copied:
        assert source in context or any(p.startswith(source + "/") for p in context), \
            f"COPY {source} is not in the build context"


def local_setuptools_builds_wheels() -> bool:
    """setuptools 70.1+ has bdist_wheel built in, so the wheel builds offline from this venv;
    an older one (a fresh Python 3.11 venv has 65.x and no `wheel`) needs pip's isolated build
    environment, fetched from the package index as the Dockerfile's builder does."""
    try:
        version = importlib.metadata.version("setuptools")
    except importlib.metadata.PackageNotFoundError:
        return False
    return tuple(int(x) for x in re.findall(r"\d+", version)[:2]) >= (70, 1)


def test_the_wheel_builds_from_the_context_and_imports(tmp_path, context):
    """The builder's `pip wheel .`, from a copy of exactly the build context, then every subcommand
    imported from the wheel (not from this checkout)."""
    src = tmp_path / "src"
    for rel in context:
        (src / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / rel, src / rel)
    result = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--wheel-dir", str(tmp_path / "wheels"), str(src)]
        + (["--no-build-isolation"] if local_setuptools_builds_wheels() else []),
        capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    (wheel,) = (tmp_path / "wheels").glob("gpupair-*.whl")
    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
        entry_points = next(z.read(n).decode() for n in names if n.endswith("entry_points.txt"))
        z.extractall(tmp_path / "site")
    assert "gpupair = gpupair.cli:main" in entry_points
    assert {"gpupair/cli.py", "webhook/certs.py", "reporter/podresources/api.proto"} <= names
    assert not [n for n in names if n.startswith(("tests/", "deploy/"))]
    probe = (
        "import sys; sys.path.insert(0, sys.argv[1]);"
        "import gpupair, importlib; from gpupair import cli;"
        "assert gpupair.__file__.startswith(sys.argv[1]), gpupair.__file__;"
        "mods = [importlib.import_module(m) for m, _ in cli.COMMANDS.values()];"
        "stray = [m.__file__ for m in mods if not m.__file__.startswith(sys.argv[1])];"
        "assert not stray, stray;"
        "cli.build_parser(); print('ok', len(cli.COMMANDS))"
    )
    run = subprocess.run([sys.executable, "-c", probe, str(tmp_path / "site")], capture_output=True, text=True,
                         cwd=tmp_path, timeout=120)
    assert run.returncode == 0, run.stderr
    assert run.stdout.startswith("ok")
