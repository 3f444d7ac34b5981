"""Benchmark the extender's filter and prioritize verbs against a no-op handler, in one run.

For 100, 1,000 and 5,000 nodes, in NodeNames mode (nodeCacheCapable: true; reports from the
extender's node cache) and in full Nodes mode (every Node object, with its gpupair report
annotations, in each body), it sends kube-scheduler's request bodies one after another over a
keep-alive loopback connection, first to the extender and then to a no-op aiohttp handler that
only decodes the same body and answers a fixed tiny JSON. It prints p50/p99 latency as the
client sees it, requests per second, and extender/no-op ratios.

Each server runs in its own process, so client and server do not share a CPU; prioritize gets
the nodes that passed filter, as kube-scheduler sends it.

``--burst`` measures bind instead: the real `gpupair extender` process, watching a kube-apiserver
double (tests/kube_double.py, own process) that holds the cluster's Nodes, answers each
Binding after ``--binding-delay`` and streams Node report rewrites (``--churn`` a second) to the
extender's watch. Rounds of ``--pods`` fresh pods go through kube-scheduler's pattern: filter
and prioritize over ``--offered`` names, one pod at a time, each bind sent without waiting
(``paced``); then the same again with every bind of the round sent at once while filter and
prioritize keep going (``wave``). Each round is run twice, binding through the extender and
with a plain client creating the same Bindings directly (the baseline), alternately.

    .venv/bin/python bench/extender.py                 # all sizes, both modes
    .venv/bin/python bench/extender.py --sizes 5000 --modes names --seconds 5
    .venv/bin/python bench/extender.py --burst         # 5,000 nodes, 200-pod rounds
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import random
import shutil
import signal
import socket
import statistics
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# After the installed packages: gpupair comes from the install (the checkout's gpupair/ holds
# the core alone), tests/ and bench/ from the checkout.
sys.path.append(str(ROOT))

FIXTURES = ROOT / "tests" / "fixtures" / "real-k8s"  # recorded from kube-scheduler v1.36.2
POD_FIXTURE = "cache-true-filter-01-gpu2.json"
NODE_FIXTURE = "cache-false-filter-02-init1-app2.json"
FREE_CHANCE = 0.6  # each GPU free with this chance: a mix of passing, failing and broken nodes


# ---------------------------------------------------------------- cluster


def cluster(count: int, seed: int = 7) -> list[dict]:
    """``count`` Node objects shaped like the recorded ones, each with a gpupair report."""
    from gpupair.topology.report import encode_annotations
    from tests.layouts import seed_layout

    template = json.loads((FIXTURES / NODE_FIXTURE).read_text())["Nodes"]["items"][0]
    rng = random.Random(seed)
    now = datetime.now(timezone.utc)
    nodes = []
    for index in range(count):
        name = f"gpu-node-{index:05d}"  # _run_burst names them the same way
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
    from gpupair.extender.app import assemble, build_app
    from gpupair.decide.judge.decisions import Decider
    from gpupair.extender.http_server import serve_http
    from gpupair.extender.main import freeze_long_lived
    from gpupair.command.service import run_loop

    extender = assemble(decider=Decider(), resource="nvidia.com/gpu", api=None, stale_after=300.0, node_cache=True)
    extender.node_cache.replace(cluster(count))  # what the node list+watch would hold
    freeze_long_lived()  # as `gpupair extender` does after its first node list
    run_loop(serve_http(build_app(extender), "127.0.0.1", port))


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


async def _wait_up(session, base: str, timeout: float = 120.0, path: str = "/healthz", ok_only: bool = False) -> None:
    import aiohttp

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            async with session.get(f"{base}{path}") as response:
                await response.read()
                if response.status == 200 or not ok_only:
                    return
                await asyncio.sleep(0.1)
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


# ---------------------------------------------------------------- burst mode: bind under load

BURST_NAMESPACE = "bench"
BIND_P50_MS, BIND_P99_MS, BIND_RATIO = 10.0, 50.0, 1.5  # issue 10's targets


def _serve_double(port: int, count: int, binding_delay: float, churn: float) -> None:
    """The API double with ``count`` reported nodes; rewrites ``churn`` reports a second (as
    reporters did every 30 s before liveness moved to Leases: a pessimistic load), each a Node
    MODIFIED event on every Node watch."""
    from gpupair.topology.report import FREE_KEY
    from tests.kube_double import KubeDouble, Store

    store = Store()
    for node in cluster(count):
        store.create("nodes", node)
    double = KubeDouble(store)
    double.port, double.binding_delay = port, binding_delay

    def heartbeat(name: str) -> None:
        free = json.loads(store.objects["nodes"][("", name)]["metadata"]["annotations"][FREE_KEY])
        free["reportedAt"] = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        store.patch("nodes", name, {"metadata": {"annotations": {FREE_KEY: json.dumps(free, separators=(",", ":"))}}})

    async def run() -> None:
        await double.start()
        names = [name for _, name in store.objects["nodes"]]
        done, owed, last, compacted = 0, 0.0, time.monotonic(), time.monotonic()
        while True:
            await asyncio.sleep(0.01)
            now = time.monotonic()
            # Heartbeats missed while this process waited for a CPU are dropped, not caught up
            # in one go (which would stall the double's answers for the length of the backlog).
            owed = min(owed + (now - last) * churn, churn * 0.05)
            last = now
            while owed >= 1:
                heartbeat(names[done % len(names)])
                done, owed = done + 1, owed - 1
            if now - compacted > 5:  # bound the double's memory; watches resume within a minute
                store.compact(keep=int(churn * 60) + 1000)
                double.requests.clear()
                compacted = time.monotonic()

    asyncio.run(run())


def _kubeconfig(path: Path, server: str) -> None:
    path.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "bench",
        "clusters": [{"name": "double", "cluster": {"server": server}}],
        "users": [{"name": "bench", "user": {"token": "bench"}}],
        "contexts": [{"name": "bench", "context": {"cluster": "double", "user": "bench"}}],
    }))


def _pod(index: int, round_: int) -> dict:
    pod = json.loads((FIXTURES / POD_FIXTURE).read_text())["Pod"]
    name = f"burst-{round_:03d}-{index:04d}"
    pod["metadata"] = {"name": name, "namespace": BURST_NAMESPACE,
                       "uid": f"00000000-0000-4000-8000-{round_:04d}{index:08d}"}
    pod.pop("status", None)
    return pod


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))] if ordered else float("nan")


class _Burst:
    """The bench client: scheduler's side of filter, prioritize and bind, plus the baseline."""

    def __init__(self, session, extender: str, api: str, names: list[str], offered: int):
        self.session, self.extender, self.api = session, extender, api
        self.names, self.offered = names, offered
        self.used: set[str] = set()  # one pod per node: no reservation conflicts in any round
        self.cycles: dict[str, list[float]] = {"filter": [], "prioritize": []}
        self.errors: list[str] = []

    async def _post(self, url: str, body: bytes) -> tuple[int, bytes, float]:
        t0 = time.perf_counter()
        async with self.session.post(url, data=body, headers={"Content-Type": "application/json"}) as response:
            payload = await response.read()
        return response.status, payload, (time.perf_counter() - t0) * 1e3

    async def schedule(self, pod: dict, index: int) -> str:
        """One scheduling cycle; the best-scored node that passed filter and no pod got yet."""
        start = (index * 131) % len(self.names)
        window = (self.names + self.names)[start:start + self.offered]
        args = {"Pod": pod, "Nodes": None, "NodeNames": window}
        status, payload, ms = await self._post(f"{self.extender}/filter", json.dumps(args).encode())
        self.cycles["filter"].append(ms)
        passed = [n for n in json.loads(payload)["NodeNames"] or [] if n not in self.used]
        status, payload, ms = await self._post(f"{self.extender}/prioritize",
                                               json.dumps({**args, "NodeNames": passed}).encode())
        self.cycles["prioritize"].append(ms)
        scores = {entry["Host"]: entry["Score"] for entry in json.loads(payload)}
        node = max(passed, key=lambda n: (scores.get(n, 0), n))
        self.used.add(node)
        return node

    async def bind(self, via: str, pod: dict, node: str) -> float:
        meta = pod["metadata"]
        if via == "extender":
            body = {"PodName": meta["name"], "PodNamespace": meta["namespace"], "PodUID": meta["uid"], "Node": node}
            status, payload, ms = await self._post(f"{self.extender}/bind", json.dumps(body).encode())
            ok = status == 200 and json.loads(payload) == {"Error": ""}
        else:  # what kube-scheduler's DefaultBinder sends
            body = {"apiVersion": "v1", "kind": "Binding",
                    "metadata": {"name": meta["name"], "namespace": meta["namespace"], "uid": meta["uid"]},
                    "target": {"apiVersion": "v1", "kind": "Node", "name": node}}
            url = f"{self.api}/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}/binding"
            status, payload, ms = await self._post(url, json.dumps(body).encode())
            ok = status == 201
        if not ok:
            self.errors.append(f"{via} bind {meta['name']}: HTTP {status} {payload[:200]!r}")
        return ms

    async def create_pods(self, round_: int, count: int) -> list[dict]:
        pods = [_pod(i, round_) for i in range(count)]
        url = f"{self.api}/api/v1/namespaces/{BURST_NAMESPACE}/pods"
        for pod in pods:
            status, payload, _ = await self._post(url, json.dumps(pod).encode())
            if status != 201:
                raise RuntimeError(f"creating {pod['metadata']['name']}: HTTP {status} {payload[:200]!r}")
        return pods

    async def paced(self, via: str, pods: list[dict]) -> list[float]:
        """kube-scheduler: scheduling cycles one after another, each binding cycle on its own."""
        binds = []
        for index, pod in enumerate(pods):
            node = await self.schedule(pod, index)
            binds.append(asyncio.create_task(self.bind(via, pod, node)))
        return list(await asyncio.gather(*binds))

    async def wave(self, via: str, pods: list[dict]) -> list[float]:
        """Every bind of the round at once, while scheduling cycles for other pods go on."""
        nodes = [await self.schedule(pod, index) for index, pod in enumerate(pods)]
        bound = asyncio.Event()

        async def keep_scheduling() -> None:
            index = 0
            while not bound.is_set():
                await self.schedule(pods[index % len(pods)], 10_000 + index)
                index += 1

        background = asyncio.create_task(keep_scheduling())
        try:
            return list(await asyncio.gather(*(self.bind(via, pod, node) for pod, node in zip(pods, nodes))))
        finally:
            bound.set()
            await background


async def _run_burst(args) -> dict:
    import subprocess

    import aiohttp

    ctx = multiprocessing.get_context("spawn")
    api_port, ext_port = _free_port(), _free_port()
    double = ctx.Process(target=_serve_double, args=(api_port, args.nodes, args.binding_delay / 1e3, args.churn),
                         daemon=True)
    double.start()
    scratch = Path(tempfile.mkdtemp(prefix="gpupair-burst-"))
    _kubeconfig(scratch / "kubeconfig", f"http://127.0.0.1:{api_port}")
    gpupair = Path(sys.executable).parent / "gpupair"
    command = [str(gpupair)] if gpupair.exists() else [sys.executable, "-P", "-m", "gpupair.command.cli"]
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUPAIR_")}
    log_path = scratch / "extender.log"
    if args.profile:  # py-spy starts the extender as its child and samples it (CPU, not idle)
        command = [str(Path(sys.executable).parent / "py-spy"), "record", "--format", "raw", "--rate", "250",
                   "--output", str(Path(args.profile).resolve()), "--", *command]
    with log_path.open("wb") as log_file:
        extender = subprocess.Popen([*command, "extender", "--host", "127.0.0.1", "--port", str(ext_port),
                                     "--kubeconfig", str(scratch / "kubeconfig")],
                                    cwd=ROOT, env=env, stdout=log_file, stderr=subprocess.STDOUT)
    results: dict = {"paced": {"extender": [], "direct": []}, "wave": {"extender": [], "direct": []},
                     "load": [os.getloadavg()[0]]}
    try:
        connector = aiohttp.TCPConnector(limit=0)  # as many connections as binds in flight, both paths
        async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=60)) as session:
            api, ext = f"http://127.0.0.1:{api_port}", f"http://127.0.0.1:{ext_port}"
            await _wait_up(session, api, path="/version")
            await _wait_up(session, ext, path="/readyz", ok_only=True)
            burst = _Burst(session, ext, api, [f"gpu-node-{i:05d}" for i in range(args.nodes)], args.offered)
            await burst.paced("extender", await burst.create_pods(0, 20))  # warm both paths up
            await burst.paced("direct", await burst.create_pods(1, 20))
            burst.cycles = {verb: [] for verb in burst.cycles}
            round_ = 2
            for _ in range(args.rounds):
                for pattern in args.patterns:
                    for via in ("extender", "direct"):
                        pods = await burst.create_pods(round_, args.pods)
                        round_ += 1
                        results[pattern][via] += await getattr(burst, pattern)(via, pods)
            results["cycles"] = burst.cycles
            results["errors"] = burst.errors
            results["clients"] = await _client_overhead(burst, scratch / "kubeconfig", round_, args.client_binds)
            results["load"].append(os.getloadavg()[0])
    finally:
        _stop(extender, profiled=bool(args.profile))
        double.terminate()
        double.join(10)
    results["extender_log_tail"] = log_path.read_text(errors="replace").splitlines()[-5:]
    shutil.rmtree(scratch, ignore_errors=True)
    return results


async def _client_overhead(burst: _Burst, kubeconfig: Path, round_: int, count: int) -> dict[str, list[float]]:
    """The API-call path alone, in this process: ``count`` Bindings one at a time by the plain
    client, through gpupair.kubeclient.binding_client (the extender's binds), through gpupair.kubeclient.kube.bind_pod
    on the client `gpupair extender` makes (its fallback behind a proxy), and through
    the same call on kubernetes-asyncio's own session (the environment consulted in a worker
    thread before each request, as before issue 10); each on an idle event loop and on one kept
    busy in 1 ms slices, as filter and prioritize keep the extender's."""
    from kubernetes_asyncio import client as k8s

    from gpupair.kubeclient import kube
    from gpupair.kubeclient.binding_client import BindingClient

    api = await kube.api_client(str(kubeconfig))
    stock = k8s.ApiClient(configuration=api.configuration)
    lean = BindingClient(api)  # what the extender's binds go through
    clients = {"plain aiohttp": None, "gpupair.kubeclient.binding_client": lean, "gpupair.kubeclient.kube": api,
               "kubernetes-asyncio stock": stock}
    times: dict[str, list[float]] = {}
    stop = asyncio.Event()

    async def keep_loop_busy() -> None:
        while not stop.is_set():
            until = time.perf_counter() + 0.001
            while time.perf_counter() < until:
                pass
            await asyncio.sleep(0)

    loop = asyncio.get_running_loop()
    run_in_executor, handoffs = loop.run_in_executor, {"n": 0}

    def counted(*args, **kwargs):  # asyncio.to_thread goes through here too
        handoffs["n"] += 1
        return run_in_executor(*args, **kwargs)

    loop.run_in_executor = counted
    try:
        for busy in (False, True):
            spinner = asyncio.create_task(keep_loop_busy()) if busy else None
            for label, client in clients.items():
                key = f"{label}, {'busy' if busy else 'idle'} loop"
                times[key] = []
                pods = await burst.create_pods(round_, count)
                round_ += 1
                handoffs["n"] = 0
                for index, pod in enumerate(pods):
                    meta, node = pod["metadata"], burst.names[index % len(burst.names)]
                    if client is None:
                        times[key].append(await burst.bind("direct", pod, node))
                        continue
                    t0 = time.perf_counter()
                    if isinstance(client, BindingClient):
                        await client.bind(meta["namespace"], meta["name"], node, meta["uid"])
                    else:
                        await kube.bind_pod(client, meta["namespace"], meta["name"], node, meta["uid"])
                    times[key].append((time.perf_counter() - t0) * 1e3)
                times[f"{label} thread hand-offs"] = [handoffs["n"] / count]
            if spinner is not None:
                stop.set()
                await spinner
    finally:
        loop.run_in_executor = run_in_executor
        await lean.close()
        await api.close()
        await stock.close()
    return times


def _stop(process, profiled: bool) -> None:
    """SIGTERM the extender (under py-spy: py-spy's child, so py-spy writes its profile)."""
    target = process.pid
    if profiled:
        children = Path(f"/proc/{process.pid}/task/{process.pid}/children")
        pids = children.read_text().split() if children.exists() else []
        target = int(pids[0]) if pids else process.pid
    os.kill(target, signal.SIGTERM)
    process.wait(30)


def _print_burst(args, results: dict) -> None:
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs, load {results['load'][0]:.2f} before, "
          f"{results['load'][1]:.2f} after")
    print(f"bind: {args.nodes} nodes, {args.rounds} rounds of {args.pods} pods per pattern and path, "
          f"Binding answered after {args.binding_delay:g} ms, {args.churn:g} Node report rewrites/s streaming; "
          f"filter/prioritize over {args.offered} names")
    print(f"{'pattern':<8}{'path':<10}{'n':>6}{'p50':>9}{'p99':>9}{'max':>9}{'ratio p50':>11}{'p99':>6}  targets")
    for pattern in args.patterns:
        direct = results[pattern]["direct"]
        for via in ("extender", "direct"):
            ms = results[pattern][via]
            p50, p99 = _percentile(ms, 0.5), _percentile(ms, 0.99)
            line = f"{pattern:<8}{via:<10}{len(ms):>6}{p50:>7.2f}ms{p99:>7.2f}ms{max(ms):>7.2f}ms"
            if via == "extender":
                r50, r99 = p50 / _percentile(direct, 0.5), p99 / _percentile(direct, 0.99)
                met = (p50 <= BIND_P50_MS, p99 <= BIND_P99_MS, max(r50, r99) <= BIND_RATIO)
                line += f"{r50:>11.2f}{r99:>6.2f}  " + " ".join(
                    f"{label}:{'yes' if ok else 'NO'}" for label, ok in zip(("p50<=10ms", "p99<=50ms", "ratio<=1.5"), met))
            print(line)
    print(f"API client alone, one Binding at a time, {args.binding_delay:g} ms in the double:")
    for label, ms in results["clients"].items():
        if label.endswith("hand-offs"):
            continue
        plain = results["clients"]["plain aiohttp" + label[label.index(","):]]
        print(f"  {label:<39}{len(ms):>5}  p50 {_percentile(ms, 0.5):6.2f} ms  p99 {_percentile(ms, 0.99):6.2f} ms"
              f"  x plain p50 {_percentile(ms, 0.5) / _percentile(plain, 0.5):.2f}"
              f" p99 {_percentile(ms, 0.99) / _percentile(plain, 0.99):.2f}")
    print("  worker-thread hand-offs per Binding: " + ", ".join(
        f"{label.removesuffix(' thread hand-offs')} {value[0]:g}" for label, value in results["clients"].items()
        if label.endswith("hand-offs")))
    for verb, ms in results["cycles"].items():
        print(f"{verb} during the bursts ({args.offered} names): p50 {_percentile(ms, 0.5):.2f} ms, "
              f"p99 {_percentile(ms, 0.99):.2f} ms, n {len(ms)}")
    if results["errors"]:
        print(f"{len(results['errors'])} binds failed, e.g. {results['errors'][0]}; the extender's log ends:")
        print("\n".join(results["extender_log_tail"]))
    print("latency as the scheduler sees it: extender = POST /bind to the extender, which creates the Binding; "
          "direct = a plain aiohttp client POSTing the same Binding to the API double")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=lambda s: [int(x) for x in s.split(",")], default=[100, 500, 1000, 5000])
    parser.add_argument("--modes", type=lambda s: s.split(","), default=["names", "nodes"])
    parser.add_argument("--seconds", type=float, default=1.5, help="time per measurement (at least 20 requests)")
    parser.add_argument("--max-requests", type=int, default=3000)
    parser.add_argument("--json", help="also write the rows here")
    burst = parser.add_argument_group("burst mode")
    burst.add_argument("--burst", action="store_true", help="measure bind under a burst instead (see above)")
    burst.add_argument("--nodes", type=int, default=5000, help="nodes in the API double (default %(default)s)")
    burst.add_argument("--pods", type=int, default=200, help="pods per round (default %(default)s)")
    burst.add_argument("--rounds", type=int, default=3, help="rounds per pattern and path (default %(default)s)")
    burst.add_argument("--offered", type=int, default=500, help="names per filter call (default %(default)s)")
    burst.add_argument("--binding-delay", type=float, default=3.0,
                       help="ms the API double takes per Binding (default %(default)s)")
    burst.add_argument("--churn", type=float, default=167.0,
                       help="Node report rewrites per second (5,000 nodes every 30 s, the pre-Lease "
                            "heartbeat: %(default)s)")
    burst.add_argument("--client-binds", type=int, default=200,
                       help="Bindings one at a time per API client compared (default %(default)s)")
    burst.add_argument("--patterns", type=lambda s: s.split(","), default=["paced", "wave"],
                       help="paced, wave or both, comma-separated (default paced,wave)")
    burst.add_argument("--profile", help="run the extender under py-spy and write its raw profile here")
    args = parser.parse_args(argv)
    if args.burst:
        results = asyncio.run(_run_burst(args))
        _print_burst(args, results)
        if args.json:
            Path(args.json).write_text(json.dumps(results, indent=2))
        return 1 if results["errors"] else 0
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
