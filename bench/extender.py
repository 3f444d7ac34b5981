"""Benchmark the extender's filter and prioritize verbs against a no-op handler, in one run.

For 100, 1,000 and 5,000 nodes, in NodeNames mode (nodeCacheCapable: true; reports from the
extender's node cache) and in full Nodes mode (every Node object, with its gpupair report
annotations, in each body), it sends kube-scheduler's request bodies one after another over a
keep-alive loopback connection, first to the extender and then to a no-op aiohttp handler that
only decodes the same body and answers a fixed tiny JSON. It prints p50/p99 latency as the
client sees it, requests per second, and extender/no-op ratios.

Each server runs in its own process, so client and server do not share a CPU; prioritize gets
the nodes that passed filter, as kube-scheduler sends it.

    .venv/bin/python bench/extender.py                 # all sizes, both modes
    .venv/bin/python bench/extender.py --sizes 5000 --modes names --seconds 5
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import random
import socket
import statistics
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

FIXTURES = ROOT / "tests" / "fixtures" / "real-k8s"  # recorded from kube-scheduler v1.36.2
POD_FIXTURE = "cache-true-filter-01-gpu2.json"
NODE_FIXTURE = "cache-false-filter-02-init1-app2.json"
FREE_CHANCE = 0.6  # each GPU free with this chance: a mix of passing, failing and broken nodes


# ---------------------------------------------------------------- cluster


def cluster(count: int, seed: int = 7) -> list[dict]:
    """``count`` Node objects shaped like the recorded ones, each with a gpupair report."""
    from gpupair.report import encode_annotations
    from tests.layouts import seed_layout

    template = json.loads((FIXTURES / NODE_FIXTURE).read_text())["Nodes"]["items"][0]
    rng = random.Random(seed)
    now = datetime.now(timezone.utc)
    nodes = []
    for index in range(count):
        name = f"gpu-node-{index:05d}"
        layout = seed_layout(uuid_prefix=f"GPU-{index:05d}")
        free = {i for i in range(8) if rng.random() < FREE_CHANCE}
        node = json.loads(json.dumps(template))
        node["metadata"]["name"] = name
        node["metadata"]["uid"] = f"00000000-0000-0000-0000-{index:012d}"
        node["metadata"]["labels"]["kubernetes.io/hostname"] = name
        node["metadata"]["annotations"] = {"node.alpha.kubernetes.io/ttl": "0",
                                           **encode_annotations(layout, free, 1, now)}
        nodes.append(node)
    return nodes


def bodies(nodes: list[dict], mode: str) -> bytes:
    args = json.loads((FIXTURES / POD_FIXTURE).read_text())
    if mode == "names":
        args["Nodes"], args["NodeNames"] = None, [n["metadata"]["name"] for n in nodes]
    else:
        args["Nodes"], args["NodeNames"] = {"metadata": {}, "items": nodes}, None
    return json.dumps(args).encode()


# ---------------------------------------------------------------- servers (own processes)


def _serve_extender(port: int, count: int) -> None:
    from aiohttp import web

    from extender.app import assemble, build_app
    from extender.decisions import Decider
    from extender.main import freeze_long_lived

    extender = assemble(decider=Decider(), resource="nvidia.com/gpu", api=None, stale_after=300.0, node_cache=True)
    extender.node_cache.replace(cluster(count))  # what the node list+watch would hold
    freeze_long_lived()  # as `gpupair extender` does after its first node list
    web.run_app(build_app(extender), host="127.0.0.1", port=port, print=None, handle_signals=True,
                access_log=None, reuse_address=True)


def _serve_noop(port: int) -> None:
    from aiohttp import web

    import orjson

    async def decode_only(request: web.Request) -> web.Response:
        orjson.loads(await request.read())  # as the extender decodes its bodies
        return web.Response(body=b"{}", content_type="application/json")

    app = web.Application(client_max_size=256 * 1024 * 1024)
    app.router.add_post("/filter", decode_only)
    app.router.add_post("/prioritize", decode_only)
    app.router.add_get("/healthz", lambda request: _ok())
    web.run_app(app, host="127.0.0.1", port=port, print=None, access_log=None, reuse_address=True)


async def _ok():
    from aiohttp import web

    return web.Response(text="ok")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ---------------------------------------------------------------- client


async def _wait_up(session, base: str, timeout: float = 120.0) -> None:
    import aiohttp

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            async with session.get(f"{base}/healthz") as response:
                await response.read()
                return
        except aiohttp.ClientConnectionError:
            await asyncio.sleep(0.1)
    raise RuntimeError(f"server at {base} did not come up")


async def _measure(session, url: str, body: bytes, seconds: float, max_requests: int, warmup: int) -> dict:
    headers = {"Content-Type": "application/json"}
    for _ in range(warmup):
        async with session.post(url, data=body, headers=headers) as response:
            await response.read()
    latencies = []
    started = time.perf_counter()
    while len(latencies) < max_requests and (len(latencies) < 20 or time.perf_counter() - started < seconds):
        t0 = time.perf_counter()
        async with session.post(url, data=body, headers=headers) as response:
            payload = await response.read()
            if response.status != 200:
                raise RuntimeError(f"{url}: HTTP {response.status}: {payload[:200]!r}")
        latencies.append(time.perf_counter() - t0)
    elapsed = time.perf_counter() - started
    latencies.sort()
    return {
        "n": len(latencies),
        "p50": statistics.median(latencies) * 1e3,
        "p99": latencies[min(len(latencies) - 1, int(round(0.99 * (len(latencies) - 1))))] * 1e3,
        "rps": len(latencies) / elapsed,
        "response": payload,
    }


async def _run(args) -> list[dict]:
    import aiohttp

    sizes = sorted(args.sizes)
    nodes = cluster(max(sizes))
    ctx = multiprocessing.get_context("spawn")
    ports = {"extender": _free_port(), "noop": _free_port()}
    servers = [ctx.Process(target=_serve_extender, args=(ports["extender"], max(sizes)), daemon=True),
               ctx.Process(target=_serve_noop, args=(ports["noop"],), daemon=True)]
    for process in servers:
        process.start()
    rows = []
    timeout = aiohttp.ClientTimeout(total=600)
    try:
        async with aiohttp.ClientSession(timeout=timeout, connector=aiohttp.TCPConnector(limit=1)) as session:
            bases = {name: f"http://127.0.0.1:{port}" for name, port in ports.items()}
            for base in bases.values():
                await _wait_up(session, base)
            for mode in args.modes:
                for size in sizes:
                    offered = nodes[:size]
                    filter_body = bodies(offered, mode)
                    warmup = 3 if (mode == "nodes" and size >= 1000) else 20
                    cap = args.max_requests if mode == "names" else max(20, args.max_requests // 20)
                    result = {}
                    for server in ("extender", "noop"):
                        result[server] = await _measure(session, f"{bases[server]}/filter", filter_body,
                                                        args.seconds, cap, warmup)
                    answer = json.loads(result["extender"]["response"])
                    if mode == "names":
                        passed = set(answer["NodeNames"])
                    else:
                        passed = {n["metadata"]["name"] for n in answer["Nodes"]["items"]}
                    rows.append({"verb": "filter", "mode": mode, "nodes": size, "passed": len(passed), **result})
                    prio_body = bodies([n for n in offered if n["metadata"]["name"] in passed], mode)
                    result = {}
                    for server in ("extender", "noop"):
                        result[server] = await _measure(session, f"{bases[server]}/prioritize", prio_body,
                                                        args.seconds, cap, warmup)
                    rows.append({"verb": "prioritize", "mode": mode, "nodes": size, "passed": len(passed), **result})
                    _print_row(rows[-2])
                    _print_row(rows[-1])
    finally:
        for process in servers:
            process.terminate()
            process.join(10)
    return rows


HEADER = (f"{'verb':<11}{'mode':<6}{'nodes':>6}{'offered':>8} | {'extender p50':>12}{'p99':>8}{'req/s':>8}"
          f" | {'no-op p50':>10}{'p99':>8}{'req/s':>8} | {'ratio p50':>9}{'p99':>6}{'req/s':>7}  n")


def _print_row(row: dict) -> None:
    ext, noop = row["extender"], row["noop"]
    offered = row["passed"] if row["verb"] == "prioritize" else row["nodes"]
    print(f"{row['verb']:<11}{row['mode']:<6}{row['nodes']:>6}{offered:>8} | {ext['p50']:>10.3f}ms{ext['p99']:>6.2f}ms"
          f"{ext['rps']:>8.0f} | {noop['p50']:>8.3f}ms{noop['p99']:>6.2f}ms{noop['rps']:>8.0f} | "
          f"{ext['p50'] / noop['p50']:>9.2f}{ext['p99'] / noop['p99']:>6.2f}{noop['rps'] / ext['rps']:>7.2f}  {ext['n']}",
          flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=lambda s: [int(x) for x in s.split(",")], default=[100, 1000, 5000])
    parser.add_argument("--modes", type=lambda s: s.split(","), default=["names", "nodes"])
    parser.add_argument("--seconds", type=float, default=1.5, help="time per measurement (at least 20 requests)")
    parser.add_argument("--max-requests", type=int, default=3000)
    parser.add_argument("--json", help="also write the rows here")
    args = parser.parse_args(argv)
    print(f"python {sys.version.split()[0]}, {multiprocessing.cpu_count()} CPUs; latency as the client sees it,"
          " sequential requests on one keep-alive connection")
    print(HEADER, flush=True)
    rows = asyncio.run(_run(args))
    print("ratio: extender/no-op for p50 and p99 latency, no-op/extender for req/s (lower is better)")
    if args.json:
        Path(args.json).write_text(json.dumps(
            [{k: v for k, v in r.items() if k not in ("extender", "noop")}
             | {s: {k: v for k, v in r[s].items() if k != "response"} for s in ("extender", "noop")} for r in rows],
            indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
