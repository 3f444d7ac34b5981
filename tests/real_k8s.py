"""Bodies recorded from a real Kubernetes v1.36.2 control plane (see fixtures/real-k8s/README.md).

Copied from the project's shared fixtures so the suite runs from any clone."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

REAL_K8S = Path(__file__).parent / "fixtures" / "real-k8s"


def load(name: str) -> Any:
    return json.loads((REAL_K8S / name).read_text())
