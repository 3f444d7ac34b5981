"""Run the chaos matrix on the real control plane and put its figures into docs/reliability.md.

It runs `pytest -m chaos tests/controlplane` with GPUPAIR_CHAOS_RESULTS pointing at a file, so
the rows the tests measured (tests/controlplane/chaos_rows.py) are written there as JSON, then
renders that file into the page's table (tests/controlplane/chaos_table.py). With --results it
renders a file from an earlier run instead of running. Without --write it prints the table.

    GPUPAIR_K8S_BIN=$PWD/.k8s-bin .venv/bin/python bench/chaos_table.py --write
    .venv/bin/python bench/chaos_table.py --results chaos.json --write
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# After the installed packages: gpupair comes from the install (the checkout's gpupair/ holds
# the core alone), tests/ and bench/ from the checkout.
sys.path.append(str(ROOT))
PAGE = ROOT / "docs" / "reliability.md"


def run_matrix(results: Path) -> None:
    env = {**os.environ, "GPUPAIR_CHAOS_RESULTS": str(results)}
    done = subprocess.run([sys.executable, "-m", "pytest", "-m", "chaos", "tests/controlplane", "-q"], cwd=ROOT, env=env)
    if done.returncode != 0:
        raise SystemExit(f"the chaos matrix failed (pytest exited {done.returncode}); the page is left as it was")


def main() -> None:
    from tests.controlplane.chaos_table import render, replace_table

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--results", type=Path, help="a run's JSON (GPUPAIR_CHAOS_RESULTS) instead of running")
    parser.add_argument("--write", action="store_true", help=f"rewrite the table in {PAGE.relative_to(ROOT)}")
    args = parser.parse_args()
    results = args.results
    if results is None:
        results = Path(tempfile.mkdtemp(prefix="gpupair-chaos-")) / "chaos.json"
        run_matrix(results)
    table = render(json.loads(results.read_text()))
    if args.write:
        PAGE.write_text(replace_table(PAGE.read_text(), table))
        print(f"wrote the table in {PAGE.relative_to(ROOT)} from {results}")
    else:
        print(table)


if __name__ == "__main__":
    main()
