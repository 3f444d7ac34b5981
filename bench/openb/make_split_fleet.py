"""Write ``openb_node_list_split30.csv``: the openb fleet (Alibaba's ``cluster-trace-gpu-v2023``
node list, in the shared fixtures) with 30% of its 8-GPU boards split into two 4-GPU nodes.

What it models: the same GPUs bought as smaller boxes, or 8-GPU hosts carved into two VMs of one
socket each. Each half keeps the product and half the board's CPU and memory (a 96-core,
8-GPU node becomes two 48-core, 4-GPU nodes). The fleet keeps its 6,212 GPUs and its products;
what changes is the shape: more 4-GPU nodes (54 in the trace), fewer 8-GPU ones (617), so
8-GPU pods have fewer homes and a 4-GPU pod has a node of its own size to fill.

Why: a score tuned on one fleet's shape can lean on it (gpupair#52 item 5 asks for a fleet of
another shape, measured against FGD replayed on the same fleet).

Deterministic: one fixed seed, Python's own ``random``. The split nodes are named
``<node>-a`` and ``<node>-b``.
Run: python3 bench/openb/make_split_fleet.py [--fixtures DIR] [--share 0.3] [--out FILE]
"""

from __future__ import annotations

import argparse
import csv
import random
import sys
from collections import Counter
from pathlib import Path

HERE = Path(__file__).resolve().parent
FIXTURES = HERE.parents[2] / "shared" / "fixtures" / "alibaba-gpu-v2023"
SEED = 52
COLUMNS = ("sn", "cpu_milli", "memory_mib", "gpu", "model")


def split(nodes: list[dict[str, str]], share: float, seed: int = SEED) -> list[dict[str, str]]:
    """The fleet with ``share`` of its 8-GPU nodes (drawn at random) each replaced, in place, by
    two 4-GPU halves; the input is not changed."""
    eight = [i for i, node in enumerate(nodes) if int(node["gpu"]) == 8]
    chosen = set(random.Random(seed).sample(eight, round(share * len(eight))))
    out: list[dict[str, str]] = []
    for i, node in enumerate(nodes):
        if i not in chosen:
            out.append(dict(node))
            continue
        for half in ("a", "b"):
            out.append({**node, "sn": f"{node['sn']}-{half}", "gpu": "4",
                        "cpu_milli": str(int(node["cpu_milli"]) // 2),
                        "memory_mib": str(int(node["memory_mib"]) // 2)})
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fixtures", type=Path, default=FIXTURES, help="the folder with the openb node list")
    parser.add_argument("--share", type=float, default=0.3, help="the share of 8-GPU nodes split (0-1)")
    parser.add_argument("--out", type=Path, help="default: openb_node_list_split<percent>.csv beside this script")
    args = parser.parse_args()
    if not 0 <= args.share <= 1:
        print(f"make_split_fleet.py: error: --share: {args.share} is not in 0-1", file=sys.stderr)
        return 2
    source = args.fixtures / "openb_node_list_gpu_node.csv"
    try:
        with source.open(newline="") as handle:
            reader = csv.DictReader(handle)
            columns, nodes = reader.fieldnames, list(reader)
    except OSError as error:
        print(f"make_split_fleet.py: error: cannot read the node list: {error}", file=sys.stderr)
        return 2
    if tuple(columns or ()) != COLUMNS:
        print(f"make_split_fleet.py: error: {source}: columns {columns}, expected {list(COLUMNS)}", file=sys.stderr)
        return 2
    rows = split(nodes, args.share)
    out = args.out or HERE / f"openb_node_list_split{round(100 * args.share)}.csv"
    with out.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, COLUMNS, lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)
    sizes = Counter(int(row["gpu"]) for row in rows)
    print(f"{out}: {len(rows)} nodes, {sum(n * c for n, c in sizes.items())} GPUs: "
          + ", ".join(f"{c} x {n} GPU" for n, c in sorted(sizes.items(), reverse=True)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
