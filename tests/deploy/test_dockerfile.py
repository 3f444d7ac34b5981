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
import tempfile
import tomllib
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


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
    venv = re.search(r"python -m venv (?:--\S+ )*(\S+)", " ".join(builder.all("RUN"))).group(1)
    assert venv == "/opt/gpupair"
    assert not final.all("ADD")
    run = " ".join(final.all("RUN"))
    for tool in ("apt-get", "apk", "gcc", "g++", "make", "build-essential", "pip install", "curl", "wget"):
        assert tool not in run, f"final stage runs {tool}"
    assert re.search(r"pip uninstall --yes (?:--quiet )?pip setuptools wheel\b", run), "the base image's installers go"
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


def test_the_venv_gets_no_installer_of_its_own(stages):
    """No pip, setuptools (pkg_resources) or wheel in the shipped venv: it is made without pip,
    and the builder's own pip installs into it."""
    run = " ".join(stages[0].all("RUN"))
    assert "python -m venv --without-pip /opt/gpupair" in run
    installs = re.findall(r"python -m pip (--python \S+ )?install", run)
    assert installs and all(target == "--python /opt/gpupair/bin/python " for target in installs), installs
    assert "/opt/gpupair/bin/pip" not in run


def test_pip_never_runs_as_root_with_its_warning(stages):
    for stage in stages:
        env = " ".join(stage.all("ENV"))
        for run in stage.all("RUN"):
            if "pip " in run:
                assert "PIP_ROOT_USER_ACTION=ignore" in env or "PIP_ROOT_USER_ACTION=ignore" in run, run


def test_dependencies_are_a_layer_that_survives_source_changes(stages, tmp_path):
    """The builder installs the dependencies from pyproject.toml alone, before it copies any
    source: a source change reuses that layer. Its requirement list is run here and compared."""
    builder = stages[0]
    ops = builder.instructions
    first_install = next(i for i, (op, arg) in enumerate(ops) if op == "RUN" and "--requirement" in arg)
    copied_before = [arg for op, arg in ops[:first_install] if op == "COPY"]
    assert copied_before == ["pyproject.toml constraints.txt ./"], copied_before
    assert any(op == "COPY" and "gpupair/" in arg for op, arg in ops[first_install:])
    run = ops[first_install][1]
    listed, requirements = builder_requirements(builder, tmp_path)
    wanted = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    assert listed == wanted and f"--requirement {requirements}" in run
    assert "--constraint constraints.txt" in run


def builder_requirements(builder: Stage, folder: Path) -> tuple[list[str], str]:
    """The dependency list the builder's first install reads, made by its own command from
    pyproject.toml (copied into ``folder``), and the file the builder writes it to."""
    run = next(arg for op, arg in builder.instructions if op == "RUN" and "--requirement" in arg)
    extract = re.search(r'(python -c "[^"]*")\s*>\s*(\S+)', run)
    assert extract, run
    shutil.copy(REPO / "pyproject.toml", folder / "pyproject.toml")
    listed = subprocess.run(extract.group(1).replace("python ", f"{sys.executable} ", 1), shell=True, cwd=folder,
                            capture_output=True, text=True, timeout=60, check=True).stdout.split()
    return listed, extract.group(2)


def test_the_constraints_pin_every_runtime_dependency_and_what_it_needs():
    """constraints.txt pins the whole closure of [project] dependencies, each pin within its
    requirement: a dependency added to pyproject.toml without re-running
    scripts/refresh-constraints.sh fails here. The closure is read from this venv's metadata."""
    from importlib.metadata import PackageNotFoundError, requires
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    pins = {}
    for line in (REPO / "constraints.txt").read_text().splitlines():
        if line and not line.startswith("#"):
            name, _, version = line.partition("==")
            assert version, f"not a pin: {line}"
            pins[canonicalize_name(name)] = version
    wanted = [Requirement(r) for r in tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]]
    seen: set[str] = set()
    while wanted:
        requirement = wanted.pop()
        name = canonicalize_name(requirement.name)
        if name in seen or (requirement.marker and not requirement.marker.evaluate({"extra": ""})):
            continue
        seen.add(name)
        assert name in pins, f"{name} is needed but not pinned: run scripts/refresh-constraints.sh"
        assert requirement.specifier.contains(pins[name], prereleases=True), (requirement, pins[name])
        try:
            wanted += [Requirement(r) for r in requires(requirement.name) or []]
        except PackageNotFoundError:
            pass
    assert len(seen) > 10

def test_final_stage_has_a_working_directory_the_user_owns(stages):
    """`gpupair simulate` writes to the working directory: as uid 65532 in / it could not."""
    final = stages[-1]
    (workdir,) = final.all("WORKDIR")
    uid, _, gid = final.all("USER")[0].partition(":")
    made = re.search(rf"install -d -o {uid} -g {gid} -m (0?[0-7]{{3}}) {re.escape(workdir)}(?:\s|$)",
                     " ".join(final.all("RUN")))
    assert made and workdir != "/", "the final stage's WORKDIR is created owned by its USER"
    assert int(made.group(1), 8) & 0o700 == 0o700


def test_pyproject_has_an_spdx_license_and_a_bounded_build_requirement():
    from packaging.requirements import Requirement
    from packaging.version import Version

    config = tomllib.loads((REPO / "pyproject.toml").read_text())
    assert config["project"]["license"] == "Apache-2.0"  # PEP 639: a string, not a {text = ...} table
    label = re.search(r'org.opencontainers.image.licenses="([^"]+)"', (REPO / "Dockerfile").read_text())
    assert label and label.group(1) == config["project"]["license"]
    (requirement,) = [Requirement(r) for r in config["build-system"]["requires"]]
    assert requirement.name == "setuptools"
    spec = requirement.specifier
    assert not spec.contains("77.0.2") and spec.contains("77.0.3"), "SPDX license strings need setuptools 77.0.3+"
    assert any(s.operator in ("<", "<=", "~=", "==") for s in spec), "an upper bound"
    assert not spec.contains(Version("999"))


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
    assert excluded("tests/deploy/test_deploy.py", patterns)
    assert not excluded("webhook/certs.py", patterns)
    assert excluded("webhook/__pycache__/certs.cpython-311.pyc", patterns)
    assert excluded("reporter/podresources/x.pyo", patterns)


def test_context_is_what_the_wheel_needs(context):
    assert {"pyproject.toml", "README.md", "gpupair/command/cli.py", "webhook/certs.py",
            "reporter/podresources/api.proto"} <= context
    for path in context:
        top = path.split("/")[0]
        assert top not in {".venv", ".git", "tests", "deploy", "bench", "docs", ".ci", "out", "build", "dist"}, path
        assert "__pycache__" not in path and not path.endswith(".pyc") and ".egg-info" not in path, path


def packages_in_pyproject() -> list[str]:
    """The top-level folders the wheel's packages come from (package-dir maps gpupair.X to X/)."""
    config = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]
    folders = {config.get("package-dir", {}).get(name, name.replace(".", "/")) for name in config["packages"]}
    return sorted({folder.split("/")[0] for folder in folders})


def test_every_package_is_copied_into_the_builder(stages, context):
    copied = {arg.split()[0].rstrip("/") for arg in stages[0].all("COPY")}
    for package in packages_in_pyproject():
        assert package in copied, f"{package}/ is a package in pyproject.toml but the Dockerfile does not COPY it"
    for source in copied:
        assert source in context or any(p.startswith(source + "/") for p in context), \
            f"COPY {source} is not in the build context"


def local_setuptools_builds_wheels() -> bool:
    """When this venv's setuptools meets pyproject.toml's build requirement, the wheel builds
    offline from it; an older one (a fresh Python 3.11 venv has 65.x) needs pip's isolated build
    environment, fetched from the package index as the Dockerfile's builder does."""
    from packaging.requirements import Requirement

    try:
        version = importlib.metadata.version("setuptools")
    except importlib.metadata.PackageNotFoundError:
        return False
    requires = tomllib.loads((REPO / "pyproject.toml").read_text())["build-system"]["requires"]
    return all(Requirement(r).specifier.contains(version) for r in requires if Requirement(r).name == "setuptools")


@dataclass
class Built:
    src: Path  # a copy of exactly the build context, as the builder's /src
    wheel: Path


@pytest.fixture(scope="module")
def built(tmp_path_factory, context) -> Built:
    """The builder's `pip wheel .`, from a copy of exactly the build context."""
    root = tmp_path_factory.mktemp("build")
    src = root / "src"
    for rel in context:
        (src / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / rel, src / rel)
    result = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--wheel-dir", str(root / "wheels"), str(src)]
        + (["--no-build-isolation"] if local_setuptools_builds_wheels() else []),
        capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    (wheel,) = (root / "wheels").glob("gpupair-*.whl")
    return Built(src, wheel)


def test_the_wheel_builds_from_the_context_and_imports(tmp_path, built):
    """Every subcommand imported from the wheel (not from this checkout)."""
    wheel = built.wheel
    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
        entry_points = next(z.read(n).decode() for n in names if n.endswith("entry_points.txt"))
        metadata = next(z.read(n).decode() for n in names if n.endswith(".dist-info/METADATA"))
        z.extractall(tmp_path / "site")
    assert "gpupair = gpupair.command.cli:main" in entry_points
    assert "kubectl-gpupair = gpupair.command.cli:kubectl_main" in entry_points
    assert "License-Expression: Apache-2.0" in metadata.splitlines()
    assert {"gpupair/command/cli.py", "gpupair/webhook/certs.py", "gpupair/reporter/podresources/api.proto",
            "gpupair/extender/cache/node_cache.py"} <= names
    assert not [n for n in names if n.startswith(("tests/", "deploy/"))]
    # Everything installs under gpupair/: no top-level "status" or "audit" to collide with another package's.
    tops = {n.split("/")[0] for n in names if not n.split("/")[0].endswith(".dist-info")}
    assert tops == {"gpupair"}, tops
    probe = (
        "import sys; sys.path.insert(0, sys.argv[1]);"
        "import gpupair, importlib; from gpupair.command import cli;"
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


# --------------------------------------------------------------------------- the image's user


def final_stage_env(final: Stage) -> dict[str, str]:
    env: dict[str, str] = {}
    for arg in final.all("ENV"):
        for name, value in re.findall(r"(\w+)=(\S+)", arg):
            env[name] = value
    return env


@dataclass
class ImageVenv:
    root: Path  # the image's / in miniature, mode 755
    venv: Path  # its /opt/gpupair
    python: Path
    site_dir: Path


@pytest.fixture(scope="module")
def image_venv(stages, built) -> Iterator[ImageVenv]:
    """A venv made the builder's way (no pip of its own; the dependencies, then the wheel,
    installed by an outside pip with the builder's requirement list and constraints), under a
    folder any user can read, wherever this checkout lies: one reaching into this test venv failed
    from a clone under a mode-700 home (/root)."""
    root = Path(tempfile.mkdtemp(prefix="gpupair-image-"))  # not pytest's tmp_path: that is 0700 root's
    try:
        root.chmod(0o755)
        venv = root / "opt" / "gpupair"
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
        python = venv / "bin" / "python"
        listed, _ = builder_requirements(stages[0], root)
        (root / "requirements.txt").write_text("\n".join(listed) + "\n")
        for install in (["--requirement", str(root / "requirements.txt"), "--constraint", str(REPO / "constraints.txt")],
                        ["--no-deps", str(built.wheel)]):
            installed = subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "--quiet",
                                        "--disable-pip-version-check", *install],
                                       capture_output=True, text=True, timeout=600)
            assert installed.returncode == 0, installed.stderr
        site_dir = Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                                       capture_output=True, text=True, check=True).stdout.strip())
        yield ImageVenv(root, venv, python, site_dir)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def test_the_image_venv_holds_gpupair_and_its_pinned_dependencies_alone(image_venv):
    site_dir = image_venv.site_dir
    assert (site_dir / "gpupair").is_dir() and not (image_venv.venv / "bin" / "pip").exists()
    pinned = {line.partition("==")[0].lower().replace("_", "-") for line in
              (REPO / "constraints.txt").read_text().splitlines() if line and not line.startswith("#")}
    shipped = {p.name.split("-")[0].lower().replace("_", "-") for p in site_dir.glob("*.dist-info")}
    assert shipped - pinned == {"gpupair"}, shipped - pinned
    assert not {"pip", "setuptools", "wheel", "pkg_resources"} & {p.name for p in site_dir.iterdir()}


def test_a_bench_runs_from_a_regular_install(image_venv):
    """The benches put this checkout after the installed packages: with gpupair installed from its
    wheel (not editable), the checkout's gpupair/ (the core alone) shadowed the install and a
    bench failed with No module named 'gpupair.simulator'."""
    run = subprocess.run([str(image_venv.python), str(REPO / "bench" / "trace.py"), "--help"], cwd=REPO,
                         env={"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"}, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert run.stdout.startswith("usage: trace.py")


def test_simulate_runs_from_the_wheel_as_the_images_user(stages, built, image_venv):
    """As near the image as a machine without a container engine gets: the image's venv
    (``image_venv``), the source tree read-only, the working directory made as the final stage
    makes it, the final stage's environment, and `gpupair simulate` run as its USER. CI runs as
    root; elsewhere the uid cannot be switched."""
    if os.geteuid() != 0:
        pytest.skip("switching to the image's uid 65532 needs root (CI runs as root)")
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        pytest.skip("setpriv (util-linux) is not installed")
    final = stages[-1]
    uid, _, gid = final.all("USER")[0].partition(":")
    (workdir,) = final.all("WORKDIR")
    env = final_stage_env(final)
    root, venv, python, site_dir = image_venv.root, image_venv.venv, image_venv.python, image_venv.site_dir
    try:
        for path in sorted(built.src.rglob("*"), reverse=True) + [built.src]:  # read-only source tree
            path.chmod(path.stat().st_mode & ~0o222)
        home = root / workdir.lstrip("/")
        made = re.search(r"install -d -o \S+ -g \S+ -m (\S+) " + re.escape(workdir), " ".join(final.all("RUN")))
        home.mkdir(parents=True)
        for parent in [home] + list(home.relative_to(root).parents)[:-1]:
            (root / parent).chmod(0o755)
        os.chown(home, int(uid), int(gid))
        home.chmod(int(made.group(1), 8))
        run_env = {"PATH": env["PATH"].replace("/opt/gpupair", str(venv)).replace("$PATH", "/usr/bin:/bin"),
                   "HOME": env["HOME"], "PYTHONUNBUFFERED": env["PYTHONUNBUFFERED"],
                   "PYTHONDONTWRITEBYTECODE": env["PYTHONDONTWRITEBYTECODE"], "LANG": "C.UTF-8"}
        simulate = subprocess.run(
            [setpriv, f"--reuid={uid}", f"--regid={gid}", "--clear-groups", "--", "gpupair", "simulate",
             "--runs", "1", "--rounds", "2", "--no-progress"],
            cwd=home, env=run_env, capture_output=True, text=True, timeout=300)
        assert simulate.returncode == 0, simulate.stderr
        written = sorted(p.name for p in home.glob("gpupair-simulate.*.tsv"))
        assert written and all((home / name).stat().st_uid == int(uid) for name in written)
        assert "TSV: " in simulate.stdout
        where = subprocess.run([setpriv, f"--reuid={uid}", f"--regid={gid}", "--clear-groups", "--", str(python),
                                "-c", "import gpupair; print(gpupair.__file__)"],
                               cwd=home, env=run_env, capture_output=True, text=True, timeout=60, check=True)
        assert where.stdout.startswith(str(site_dir)), where.stdout  # the wheel, not a source tree
        # Where it cannot write (the old image's cwd was /), it says so before the run, not with a traceback.
        refused = subprocess.run([setpriv, f"--reuid={uid}", f"--regid={gid}", "--clear-groups", "--", "gpupair",
                                  "simulate", "--runs", "1", "--rounds", "1", "--no-progress"],
                                 cwd=built.src, env=run_env, capture_output=True, text=True, timeout=300)
        assert refused.returncode == 2 and refused.stderr.startswith("gpupair simulate: error: --output: cannot write in")
        assert "Traceback" not in refused.stderr
    finally:
        shutil.rmtree(root / workdir.lstrip("/"), ignore_errors=True)  # the venv is image_venv's
