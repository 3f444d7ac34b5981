"""A manifest's container as a process here: `gpupair` with the container's args, its env
with downward-API values filled in the way the kubelet fills them, and nothing of the test
process's own environment but what Python needs to run."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any


def gpupair_argv(args: list[str]) -> list[str]:
    """The image's entrypoint, `gpupair`, from this interpreter's environment."""
    script = Path(sys.executable).with_name("gpupair")
    if script.exists():
        return [str(script), *args]
    return [sys.executable, "-c", "from gpupair.command.cli import main; main()", *args]


def resolved_env(spec_container: dict[str, Any], fields: dict[str, str]) -> dict[str, str]:
    """The container's env with downward-API fieldRefs filled in from ``fields``."""
    env: dict[str, str] = {}
    for entry in spec_container.get("env") or []:
        if "value" in entry:
            env[entry["name"]] = str(entry["value"])
            continue
        path = ((entry.get("valueFrom") or {}).get("fieldRef") or {}).get("fieldPath")
        if path not in fields:
            raise ValueError(f"env {entry['name']}: the harness cannot resolve {entry.get('valueFrom')}")
        env[entry["name"]] = fields[path]
    return env


def base_env() -> dict[str, str]:
    """What a container starts from: no proxy, no kubeconfig and no in-cluster variables of ours."""
    keep = ("PATH", "HOME", "LANG", "LC_ALL", "PYTHONPATH", "VIRTUAL_ENV", "TMPDIR")
    return {k: v for k, v in os.environ.items() if k in keep}
