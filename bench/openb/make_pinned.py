"""Write ``openb_pod_list_pinned.csv``: the ``default`` pod list with GPU pods pinned to GPU
products the way teams pin them on a fleet of mixed generations, unlike FGD's ``gpuspec`` lists.
With ``--source multigpu30``, ``openb_pod_list_pinned-multigpu30.csv``: the same pins on FGD's
``multigpu30`` list, where pods asking several GPUs are 30% of the GPU demand (about 2,400 GPUs
of training jobs on the 8-GPU boards' 4,908, beside the same shares on the T4s).

What it models (a nodeSelector or required node affinity on ``nvidia.com/gpu.product``):
- training jobs: every pod asking 2 or more GPUs accepts only the 8-GPU boards' products
  (``G2|G3|V100M32``), as a team pins its jobs to the boxes with the most GPUs;
- inference replicas: every share pod asking half a GPU or less accepts only ``T4``, the card
  they are sized for. That is some 610 GPUs of demand on the 842 T4s: the scarce product, which a
  scheduler must keep for them, not fill first with pods that could run anywhere;
- teams with a habit: a third of the other GPU pods (whole one-GPU pods and larger shares),
  drawn at random, accept only the product of a GPU drawn at random from the fleet (weighted by
  GPUs: mostly G2), as if each had first run on some node and pinned to what it found there.
CPU pods, and every other column, are left as ``default`` has them.

Why: FGD's ``gpuspec`` lists pin one-GPU pods only, mostly to T4 and P100, and leave multi-GPU
pods free. The issue this serves (gpupair#44) asks for a model-pinned workload of our own, so
that a score tuned on FGD's lists is also checked on pins shaped another way.

Deterministic: one fixed seed, Python's own ``random`` (its draws do not change between releases).
Run: python3 bench/openb/make_pinned.py [--fixtures DIR] [--source default|multigpu30] [--out FILE]
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
SEED = 44
EIGHT_GPU_PRODUCTS = ("G2", "G3", "V100M32")
SHARE_PRODUCT, SHARE_AT_MOST = "T4", 500  # milli of one GPU
SOURCES = ("default", "multigpu30")  # FGD's pod lists it pins


def pinned(pods: list[dict[str, str]], nodes: list[dict[str, str]], seed: int = SEED) -> list[dict[str, str]]:
    """The pods with ``gpu_spec`` set as the module docstring says; the input is not changed."""
    rng = random.Random(seed)
    gpus = Counter()
    for node in nodes:
        gpus[node["model"]] += int(node["gpu"])
    products = sorted(gpus)
    out = [dict(pod) for pod in pods]
    rest = []
    for pod in out:
        count, milli = int(pod["num_gpu"]), int(pod["gpu_milli"] or 1000)
        if count >= 2:
            pod["gpu_spec"] = "|".join(EIGHT_GPU_PRODUCTS)
        elif count == 1 and milli <= SHARE_AT_MOST:
            pod["gpu_spec"] = SHARE_PRODUCT
        elif count == 1:
            rest.append(pod)
    for pod in rng.sample(rest, len(rest) // 3):
        pod["gpu_spec"] = rng.choices(products, weights=[gpus[p] for p in products])[0]
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fixtures", type=Path, default=FIXTURES,
                        help="the folder with openb_pod_list_default.csv and the node list")
    parser.add_argument("--source", default="default", choices=SOURCES,
                        help="FGD's pod list to pin (default: in --fixtures; multigpu30: in bench/openb)")
    parser.add_argument("--out", type=Path, help="default: openb_pod_list_pinned.csv, or "
                        "openb_pod_list_pinned-SOURCE.csv for another source, beside this script")
    args = parser.parse_args()
    source = args.fixtures / "openb_pod_list_default.csv" if args.source == "default" else \
        HERE / f"openb_pod_list_{args.source}.csv"
    out = args.out or HERE / ("openb_pod_list_pinned.csv" if args.source == "default"
                              else f"openb_pod_list_pinned-{args.source}.csv")
    try:
        with source.open(newline="") as handle:
            reader = csv.DictReader(handle)
            columns, pods = reader.fieldnames, list(reader)
        with (args.fixtures / "openb_node_list_gpu_node.csv").open(newline="") as handle:
            nodes = list(csv.DictReader(handle))
    except OSError as error:
        print(f"make_pinned.py: error: cannot read the fixtures: {error}", file=sys.stderr)
        return 2
    if not columns or "num_gpu" not in columns or "gpu_milli" not in columns:
        print(f"make_pinned.py: error: {source} is not an openb pod list (num_gpu, gpu_milli)", file=sys.stderr)
        return 2
    if "gpu_spec" not in columns:  # FGD's multigpu lists have none: no pod pinned
        columns = [*columns, "gpu_spec"]
    rows = pinned([{"gpu_spec": "", **pod} for pod in pods], nodes)
    with out.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, columns, lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)
    counts = Counter(row["gpu_spec"] for row in rows if row["gpu_spec"])
    print(f"{out}: {len(rows)} pods, {sum(counts.values())} pinned: "
          + ", ".join(f"{spec} {n}" for spec, n in counts.most_common()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
