"""Benchmark `gpupair status` on a 5,000-node fleet served by the API double, in one run.

The double (tests/kube_double.py, a real HTTP server) runs in its own process with
tests/status_fleet.large_fleet: seed-shaped 8-GPU nodes with their reports and allocation
ledgers, the GPU pods those list, some pending. The client side then times, several rounds each:

- baseline: one list of the nodes, read and JSON-decoded (what any tool pays to look at them);
- status: the command's own path: the three lists (nodes, pods, Warning Events) together,
  decoding every report with the codec, building the view, rendering text and JSON;
- the command as a user runs it (`gpupair status --kubeconfig ...` in a subprocess, Python start included).

It prints median seconds per phase and status/baseline. The double's own serialization is part
of every list figure (a real apiserver's differs); the ratio is what compares like with like.

    .venv/bin/python bench/status.py                 # 5,000 nodes, 5 rounds
    .venv/bin/python bench/status.py --nodes 1000 --rounds 3
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# After the installed packages: gpupair comes from the install (the checkout's gpupair/ holds
# the core alone), tests/ and bench/ from the checkout.
sys.path.append(str(ROOT))


def serve(nodes: int, ready, stop) -> None:
    from tests.kube_double import KubeDouble, Store
    from tests.status_fleet import large_fleet

    async def main() -> None:
        store = Store()
        large_fleet(store, nodes)
        store.history.clear()  # a watch cache's history is not what this measures
        double = KubeDouble(store)
        await double.start()
        ready.send(double.url)
        while not stop.poll():
            await asyncio.sleep(0.05)
        await double.stop()

    asyncio.run(main())


async def measure(url: str, rounds: int) -> dict[str, list[float]]:
    import orjson
    from kubernetes_asyncio import client as k8s

    from gpupair.status.build import LayoutCache, Options, build
    from gpupair.status.fetch import list_cluster
    from gpupair.status.main import paused_gc
    from gpupair.status.render import render_text

    config = type.__call__(k8s.Configuration)
    config.host = url
    times: dict[str, list[float]] = {k: [] for k in ("baseline", "list", "build", "text", "json", "status")}
    async with k8s.ApiClient(configuration=config) as api:
        core = k8s.CoreV1Api(api)
        for _ in range(rounds):
            started = time.perf_counter()
            response = await core.list_node(_preload_content=False)
            orjson.loads(await response.read())
            times["baseline"].append(time.perf_counter() - started)

            started = time.perf_counter()
            with paused_gc():  # as the command does
                listing = await list_cluster(api, timeout=120)
                listed = time.perf_counter()
                view = build(listing, datetime.now(timezone.utc), Options(), LayoutCache())
                built = time.perf_counter()
                text = render_text(view)
                rendered = time.perf_counter()
                view.model_dump_json()
                dumped = time.perf_counter()
            times["list"].append(listed - started)
            times["build"].append(built - listed)
            times["text"].append(rendered - built)
            times["json"].append(dumped - rendered)
            times["status"].append(rendered - started)
    assert len(view.nodes) > 0 and text
    return times


def command(url: str) -> float:
    with tempfile.TemporaryDirectory() as tmp:
        kubeconfig = Path(tmp) / "kubeconfig"
        kubeconfig.write_text(
            "apiVersion: v1\nkind: Config\ncurrent-context: b\n"
            f"clusters: [{{name: b, cluster: {{server: '{url}'}}}}]\n"
            "users: [{name: u, user: {}}]\ncontexts: [{name: b, context: {cluster: b, user: u}}]\n")
        started = time.perf_counter()
        # -P: not the working directory (this checkout) first on sys.path, so gpupair is the install's
        subprocess.run([sys.executable, "-P", "-m", "gpupair.command.cli", "status", "--kubeconfig", str(kubeconfig)],
                       cwd=ROOT, check=True, stdout=subprocess.DEVNULL, timeout=600)
        return time.perf_counter() - started


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args(argv)

    ready_recv, ready_send = multiprocessing.Pipe(duplex=False)
    stop_recv, stop_send = multiprocessing.Pipe(duplex=False)
    started = time.perf_counter()
    server = multiprocessing.Process(target=serve, args=(args.nodes, ready_send, stop_recv), daemon=True)
    server.start()
    url = ready_recv.recv()
    print(f"python {sys.version.split()[0]}, {multiprocessing.cpu_count()} CPUs; {args.nodes} nodes with "
          f"reports and ledgers, their GPU pods, {args.nodes // 20} pending; fleet built in "
          f"{time.perf_counter() - started:.1f}s; median of {args.rounds} rounds", flush=True)
    try:
        times = asyncio.run(measure(url, args.rounds))
        whole = command(url)
    finally:
        stop_send.send(True)
        server.join(10)
    median = {k: statistics.median(v) for k, v in times.items()}
    print(f"baseline (list nodes, decode)        {median['baseline']:8.3f}s")
    print(f"status: 3 lists together            {median['list']:8.3f}s")
    print(f"status: decode reports + build view {median['build']:8.3f}s")
    print(f"status: render text                 {median['text']:8.3f}s")
    print(f"status: total (lists+build+text)    {median['status']:8.3f}s   "
          f"ratio status/baseline {median['status'] / median['baseline']:.2f}")
    print(f"-o json serialization (extra)       {median['json']:8.3f}s")
    print(f"`gpupair status` process, once      {whole:8.3f}s (Python start and imports included)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
