"""The extender's whole request path per pod, as kube-scheduler drives it, against a floor.

A client that behaves as kube-scheduler's HTTP extender client does (keep-alive connections, the
bodies recorded from kube-scheduler v1.36.2 in tests/fixtures/real-k8s/, for each pod a filter,
then a prioritize of the nodes that passed, then a bind sent without waiting: the scheduler's
binding cycle runs on its own while the next pod's scheduling cycle starts; pods one after
another) is pointed at four servers, each in its own process, interleaved in one run:

- ``floor``: bench/floor.c, the smallest HTTP server this machine runs (C, epoll, a fixed
  answer): what is left is the kernel's loopback and this client. The physical floor.
- ``python floor``: the same server as an asyncio Protocol on the extender's event loop: the
  least an HTTP server in CPython costs.
- ``aiohttp floor``: an aiohttp handler that reads the body and answers the same fixed JSON:
  the least an aiohttp handler costs (the extender served on aiohttp before extender/http_server.py).
- ``gpupair stubbed``: the real extender app (its HTTP server, the wire checks, metrics, logs, the
  Binding through its Binding client) with the decisions stubbed out: every node passes, every
  score is 0, every bind reserves a fixed pair.
- ``gpupair``: the real extender, the node cache holding reported nodes.

gpupair's Bindings go to a second floor server standing in for the API server, so a bind costs
the extender's own work plus one loopback round trip, the one kube-scheduler's own Binding
would make too. The per-pod figure is the time from one pod's filter to the next pod's filter
(its median over every pod), at 32 names (a small cluster, as on the real control plane) and
500 (what kube-scheduler sends at 5,000 nodes). The figures are medians of blocks run
round-robin (server order rotating), so load changes hit every server alike.

    .venv/bin/python bench/request_path.py                      # 32 and 500 names, 20 rounds
    .venv/bin/python bench/request_path.py --sizes 32 --rounds 40 --profile /tmp/extender.txt
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# After the installed packages: gpupair comes from the install (the checkout's gpupair/ holds
# the core alone), tests/ and bench/ from the checkout.
sys.path.append(str(ROOT))

from bench.extender import FIXTURES, _free_port, _kubeconfig, cluster  # noqa: E402

FILTER_FIXTURE = "cache-true-filter-01-gpu2.json"
PRIORITIZE_FIXTURE = "cache-true-prioritize-01-gpu2.json"
BIND_FIXTURE = "bind-cache-true-01-gpu2.json"
UIDS = 8  # pods in flight by UID: at most this many reservations live, as in a burst between reports
TARGET_ADDED_MS = 1.0  # issue 21: at most 1 ms per pod over the floor at 32 names
USER_AGENT = b"kube-scheduler/v1.36.2 (linux/amd64) kubernetes/bench"


# ---------------------------------------------------------------- servers


def _build_floor(scratch: Path) -> Path | None:
    """bench/floor.c compiled here; None without a C compiler."""
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        return None
    binary = scratch / "floor"
    subprocess.run([compiler, "-O2", "-o", str(binary), str(ROOT / "bench" / "floor.c")], check=True)
    return binary


class _FloorProtocol(asyncio.Protocol):
    """bench/floor.c in Python: read a whole request by Content-Length, answer a fixed body."""

    ANSWER = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 12\r\n\r\n{\"Error\":\"\"}"

    def connection_made(self, transport) -> None:
        self.transport, self.buffer = transport, bytearray()

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        while (end := self.buffer.find(b"\r\n\r\n")) >= 0:
            length = 0
            for line in bytes(self.buffer[:end]).split(b"\r\n")[1:]:
                name, _, value = line.partition(b":")
                if name.strip().lower() == b"content-length":
                    length = int(value)
            if len(self.buffer) < end + 4 + length:
                return
            del self.buffer[:end + 4 + length]
            self.transport.write(self.ANSWER)


def _serve_python_floor(port: int) -> None:
    from gpupair.command.service import run_loop

    async def main() -> None:
        server = await asyncio.get_running_loop().create_server(_FloorProtocol, "127.0.0.1", port)
        await server.serve_forever()

    run_loop(main())


def _serve_aiohttp_floor(port: int) -> None:
    """The least an aiohttp handler costs: read the body, answer the floor's fixed JSON."""
    from aiohttp import web

    from gpupair.command.service import run_loop

    async def answer(request: web.Request) -> web.Response:
        await request.read()
        return web.Response(body=b'{"Error":""}', content_type="application/json")

    async def main() -> None:
        app = web.Application()
        for verb in ("filter", "prioritize", "bind"):
            app.router.add_post(f"/{verb}", answer)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", port).start()
        await asyncio.Event().wait()

    run_loop(main())


def _stub_decisions(extender) -> None:
    """Every node passes, every score is 0, every bind plans GPUs 0 and 1: what is left of a
    request is the stack, the wire checks, the metrics, the logs and the Binding."""
    import gpupair.extender.app as app
    from gpupair.extender.cache.decision_tables import host_priority_json
    from gpupair.extender.filter import FilterAnswer
    from gpupair.extender.protocol import ExtenderFilterResult
    from gpupair.decide.judge.decisions import NodeDecision

    def filter_all(evaluator, args, gpus, intent):
        names = list(args.node_names())
        result = ExtenderFilterResult.model_construct(Nodes=None, NodeNames=names, FailedNodes={},
                                                      FailedAndUnresolvableNodes={}, Error="")
        return FilterAnswer(result, len(names), 0, 0)

    answers: dict[tuple[str, ...], str] = {}  # the answer's JSON costs what the real tables save

    class ScoreAll:
        def answer(self, args, gpus, intent):
            names = tuple(args.node_names())
            if names not in answers:
                answers[names] = "[" + ",".join(host_priority_json(name, 0) for name in names) + "]"
            return answers[names]

    app.filter_nodes, extender.score = filter_all, ScoreAll()
    # A tree from before the score was chosen at assembly (--before) scores in prioritize_nodes.
    app.prioritize_nodes = lambda evaluator, args, gpus, intent: extender.score.answer(args, gpus, intent)
    extender.evaluator.decide_one = lambda gpus, node, exclude_uid=None, intent=None, own=frozenset(): NodeDecision(
        node, True, plan=(0, 1))


def _serve_gpupair(port: int, count: int, kubeconfig: str, stub: bool, log_path: str, fast_loop: bool = True,
                   source: str | None = None) -> None:
    """The extender as `gpupair extender` runs it (its loop, its JSON logs at info, its API
    client), over a node cache holding ``count`` reported nodes; ``fast_loop`` False: on
    asyncio's own loop instead of uvloop; ``source``: the code of another tree (``--before``)."""
    sys.stderr = open(log_path, "a", buffering=1)  # noqa: SIM115 - the process's whole life
    if source:
        sys.path.insert(0, _as_installed(source, Path(log_path).with_suffix(".tree")))
    from gpupair.extender.app import assemble, build_app
    from gpupair.extender.main import freeze_long_lived
    from gpupair.command import service
    from gpupair.kubeclient import kube
    from gpupair.decide.judge.decisions import Decider

    service.setup_logging("info")
    run_loop = getattr(service, "run_loop", lambda main, fast: asyncio.run(main))  # trees from before it
    serve = service.serve

    async def main() -> None:
        api = await kube.api_client(kubeconfig)
        extender = assemble(decider=Decider(), resource="nvidia.com/gpu", api=api, stale_after=300.0,
                            node_cache=True)
        extender.node_cache.replace(cluster(count))  # what the node list+watch would hold
        if stub:
            _stub_decisions(extender)
        freeze_long_lived()
        app = build_app(extender)
        if hasattr(app, "router"):  # a tree from before extender/http_server.py (--before)
            await serve(app, "127.0.0.1", port)
        else:
            from gpupair.extender.http_server import serve_http

            await serve_http(app, "127.0.0.1", port)

    run_loop(main(), fast=fast_loop)


def _as_installed(source: str, scratch: Path) -> str:
    """A directory to import another tree's ``gpupair`` from, laid out as its wheel installs it:
    its pyproject's package-dir puts extender/, webhook/ ... under gpupair/. On sys.path alone,
    ``gpupair.extender`` would not be found in the tree and this checkout's editable install
    would supply it: the new extender over the old core."""
    import tomllib

    tree = Path(source)
    package_dir = (tomllib.loads((tree / "pyproject.toml").read_text()).get("tool", {}).get("setuptools", {})
                   .get("package-dir", {}))
    if not package_dir:
        return source  # a tree from before the package-dir layout imports as it lies
    root = scratch / "gpupair"
    root.mkdir(parents=True, exist_ok=True)
    for entry in (tree / "gpupair").iterdir():
        if not (root / entry.name).exists():
            (root / entry.name).symlink_to(entry.resolve())
    for package, folder in package_dir.items():
        link = root / package.split(".", 1)[1]
        if package.startswith("gpupair.") and "." not in package.split(".", 1)[1] and not link.exists():
            link.symlink_to((tree / folder).resolve())
    return str(scratch)


# ---------------------------------------------------------------- client


class _Connection:
    """One keep-alive HTTP/1.1 connection, as Go's net/http keeps them: one request at a time."""

    def __init__(self, reader, writer, host: bytes):
        self.reader, self.writer, self.host = reader, writer, host

    @classmethod
    async def open(cls, port: int) -> "_Connection":
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        return cls(reader, writer, b"127.0.0.1:%d" % port)

    async def post(self, path: bytes, body: bytes) -> tuple[int, bytes]:
        self.writer.write(b"POST %s HTTP/1.1\r\nHost: %s\r\nUser-Agent: %s\r\nContent-Length: %d\r\n"
                          b"Content-Type: application/json\r\nAccept-Encoding: gzip\r\n\r\n%s"
                          % (path, self.host, USER_AGENT, len(body), body))
        head = await self.reader.readuntil(b"\r\n\r\n")
        lines = head.split(b"\r\n")
        status, length = int(lines[0].split()[1]), 0
        for line in lines[1:]:
            name, _, value = line.partition(b":")
            if name.lower() == b"content-length":
                length = int(value)
        return status, await self.reader.readexactly(length)

    def close(self) -> None:
        self.writer.close()


class _Pool:
    """Idle connections to one server, reused; a new one when all are busy (Go's Transport)."""

    def __init__(self, port: int):
        self.port, self.idle = port, []

    async def post(self, path: bytes, body: bytes) -> tuple[int, bytes]:
        conn = self.idle.pop() if self.idle else await _Connection.open(self.port)
        try:
            answer = await conn.post(path, body)
        except BaseException:
            conn.close()
            raise
        self.idle.append(conn)
        return answer

    def close(self) -> None:
        for conn in self.idle:
            conn.close()


def _bodies(size: int, passing: list[str] | None, bind_nodes: list[str], cpu_only: bool = False) -> dict[str, list[bytes]]:
    """The recorded bodies for ``UIDS`` pods over ``size`` names: filter, prioritize (of
    ``passing``, else of every name) and bind (to ``bind_nodes`` in turn). ``cpu_only``: the pod
    asks for no GPU, as every other pod of the cluster does when the extender is registered
    without managedResources (for DRA claim pods)."""
    names = [f"gpu-node-{i:05d}" for i in range(size)]
    out: dict[str, list[bytes]] = {"filter": [], "prioritize": [], "bind": []}
    for index in range(UIDS):
        uid = f"5fd8153a-1b23-448d-8a4b-{index:012d}"
        for verb, fixture, offered in (("filter", FILTER_FIXTURE, names),
                                       ("prioritize", PRIORITIZE_FIXTURE, passing or names)):
            args = json.loads((FIXTURES / fixture).read_text())
            args["Pod"]["metadata"]["uid"] = uid
            # The recording cluster's version: no pod watch runs here to read that far, and
            # filter would wait for it (gpupair/kubeclient/watch_progress.py).
            args["Pod"]["metadata"].pop("resourceVersion", None)
            args["NodeNames"] = offered
            if cpu_only:
                for container in args["Pod"]["spec"]["containers"]:
                    container["resources"] = {"requests": {"cpu": "100m", "memory": "64Mi"}}
            out[verb].append(json.dumps(args).encode())
        bind = json.loads((FIXTURES / BIND_FIXTURE).read_text())
        bind.update(PodUID=uid, Node=bind_nodes[index % len(bind_nodes)])
        out["bind"].append(json.dumps(bind).encode())
    return out


async def _pods(pool: _Pool, bodies: dict[str, list[bytes]], count: int, errors: list[str]) -> dict[str, list[float]]:
    """``count`` pods, serially: filter, prioritize, then bind without waiting for it."""
    times: dict[str, list[float]] = {"pod": [], "filter": [], "prioritize": [], "bind": []}
    binds = []

    async def bind(body: bytes) -> None:
        t0 = time.perf_counter()
        status, payload = await pool.post(b"/bind", body)
        times["bind"].append((time.perf_counter() - t0) * 1e3)
        if status != 200 or payload != b'{"Error":""}':
            errors.append(f"bind: HTTP {status} {payload[:200]!r}")

    starts = []
    for index in range(count):
        k = index % UIDS
        starts.append(time.perf_counter())
        for verb in ("filter", "prioritize"):
            t0 = time.perf_counter()
            status, payload = await pool.post(b"/" + verb.encode(), bodies[verb][k])
            times[verb].append((time.perf_counter() - t0) * 1e3)
            if status != 200:
                errors.append(f"{verb}: HTTP {status} {payload[:200]!r}")
        binds.append(asyncio.create_task(bind(bodies["bind"][k])))
    starts.append(time.perf_counter())
    await asyncio.gather(*binds)
    times["pod"] = [(b - a) * 1e3 for a, b in zip(starts, starts[1:])]
    return times


async def _wait_port(port: int, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            conn = await _Connection.open(port)
            conn.close()
            return
        except OSError:
            if time.monotonic() > deadline:
                raise RuntimeError(f"nothing listens on port {port}") from None
            await asyncio.sleep(0.1)


async def _passing(port: int, size: int) -> tuple[list[str], list[str]]:
    """The names the real extender passes for the recorded pod, and those with 8 GPUs free (bind
    targets that no handful of 2-GPU reservations can fill)."""
    from gpupair.topology.report import FREE_KEY

    pool = _Pool(port)
    status, payload = await pool.post(b"/filter", _bodies(size, None, ["x"])["filter"][0])
    pool.close()
    passing = json.loads(payload)["NodeNames"] or []
    free = {n["metadata"]["name"]: len(json.loads(n["metadata"]["annotations"][FREE_KEY])["free"])
            for n in cluster(size)}
    return passing, [name for name in passing if free[name] == 8] or passing


SERVERS = ("floor", "python floor", "aiohttp floor", "gpupair stubbed", "gpupair", "gpupair on asyncio",
           "gpupair before")


def _cpu_ms(pid: int) -> float:
    """CPU time of ``pid``'s main thread, in ms (ns resolution, unlike /proc/PID/stat's ticks):
    what a server spends per pod, however loaded the machine is."""
    return int(Path(f"/proc/{pid}/schedstat").read_text().split()[0]) / 1e6


async def _run(args, ports: dict[str, int], pids: dict[str, int]) -> dict:
    for port in ports.values():
        await _wait_port(port)
    bodies = {}
    for size in args.sizes:
        passing, targets = await _passing(ports["gpupair"], size)
        if args.cpu_pods:  # a pod asking no GPU passes every node
            passing = [f"gpu-node-{i:05d}" for i in range(size)]
        bodies[size] = (_bodies(size, passing, targets, args.cpu_pods), len(passing))
    results: dict = {size: {server: {"pod": [], "filter": [], "prioritize": [], "bind": [], "cpu": []}
                            for server in ports}
                     for size in args.sizes}
    errors: list[str] = []
    pools = {server: _Pool(port) for server, port in ports.items()}
    order = [server for server in SERVERS if server in ports]
    try:
        for server in order:  # warm every path up (connections, caches, the Binding client's pool)
            for size in args.sizes:
                await _pods(pools[server], bodies[size][0], 2 * UIDS, errors)
        for round_ in range(args.rounds):
            turn = order[round_ % len(order):] + order[:round_ % len(order)]
            for size in args.sizes:
                for server in turn:
                    cpu = _cpu_ms(pids[server])
                    times = await _pods(pools[server], bodies[size][0], args.pods, errors)
                    times["cpu"] = [(_cpu_ms(pids[server]) - cpu) / args.pods]
                    for key, values in times.items():
                        results[size][server][key] += values
    finally:
        for pool in pools.values():
            pool.close()
    return {"results": results, "errors": errors, "passing": {size: bodies[size][1] for size in args.sizes}}


def _p(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))] if ordered else float("nan")


def _print(args, out: dict, load: tuple[float, float], floor_kind: str) -> None:
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs, load {load[0]:.2f} before, {load[1]:.2f} after; "
          f"{args.rounds} rounds of {args.pods} pods per server and size, servers round-robin; floor: {floor_kind}")
    print(f"{'names':>5} {'server':<16}{'per pod p50':>12}{'p90':>8} | {'filter p50':>10}{'prioritize':>11}"
          f"{'bind p50':>9}{'p99':>8} | {'server CPU/pod':>14} | {'added over floor':>16}")
    for size in args.sizes:
        rows = out["results"][size]
        floor = statistics.median(rows["floor"]["pod"]) if "floor" in rows else None
        for server in (s for s in SERVERS if s in rows):
            r = rows[server]
            pod = statistics.median(r["pod"])
            added = f"{pod - floor:>14.3f}ms" if floor is not None else ""
            print(f"{size:>5} {server:<16}{pod:>10.3f}ms{_p(r['pod'], 0.9):>6.2f}ms | "
                  f"{statistics.median(r['filter']):>8.3f}ms{statistics.median(r['prioritize']):>9.3f}ms"
                  f"{statistics.median(r['bind']):>7.2f}ms{_p(r['bind'], 0.99):>6.2f}ms | "
                  f"{statistics.median(r['cpu']):>12.3f}ms | {added}")
        print(f"{'':>5} ({out['passing'][size]} of {size} names pass filter and go to prioritize)")
    if args.cpu_pods and 32 in args.sizes:
        rows = out["results"][32]
        verbs = {verb: statistics.median(rows["gpupair"][verb]) for verb in ("filter", "prioritize", "bind")}
        noop = statistics.median(rows["aiohttp floor"]["pod"])
        print(f"a pod that asks for no GPU: {statistics.median(rows['gpupair']['pod']):.3f} ms per pod through gpupair "
              f"(filter {verbs['filter']:.3f}, prioritize {verbs['prioritize']:.3f}, bind {verbs['bind']:.3f} ms), "
              f"{noop:.3f} ms through a no-op aiohttp handler, 0 without an extender")
    if 32 in args.sizes and "floor" in out["results"][32]:
        rows = out["results"][32]
        added = statistics.median(rows["gpupair"]["pod"]) - statistics.median(rows["floor"]["pod"])
        stack = statistics.median(rows["gpupair stubbed"]["pod"]) - statistics.median(rows["floor"]["pod"])
        print(f"at 32 names gpupair adds {added:.3f} ms per pod over the floor (target <= {TARGET_ADDED_MS:g} ms: "
              f"{'met' if added <= TARGET_ADDED_MS else 'NOT met'}); the stack without decisions adds {stack:.3f} ms")
    if out["errors"]:
        print(f"{len(out['errors'])} requests failed, e.g. {out['errors'][0]}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=lambda s: [int(x) for x in s.split(",")], default=[32, 500])
    parser.add_argument("--rounds", type=int, default=20, help="blocks per server and size (default %(default)s)")
    parser.add_argument("--pods", type=int, default=50, help="pods per block (default %(default)s)")
    parser.add_argument("--profile", help="sample a server with py-spy; its raw stacks (or .svg) go here")
    parser.add_argument("--profile-server", default="gpupair", choices=SERVERS[1:], help="(default %(default)s)")
    parser.add_argument("--compare-loops", action="store_true",
                        help="also run the real gpupair server on asyncio's own loop (not uvloop)")
    parser.add_argument("--before", help="also run the extender from this source tree (e.g. `git archive` of "
                                         "an older commit, unpacked), interleaved: before and after in one run")
    parser.add_argument("--json", help="also write every sample here")
    parser.add_argument("--cpu-pods", action="store_true",
                        help="pods that ask for no GPU: what every other pod pays when the extender is registered "
                             "without managedResources (for DRA claim pods); without an extender they pay nothing")
    args = parser.parse_args(argv)
    scratch = Path(tempfile.mkdtemp(prefix="gpupair-request-path-"))
    ctx = multiprocessing.get_context("spawn")
    processes: list = []
    popen: list[subprocess.Popen] = []
    servers = [s for s in SERVERS if (s != "gpupair on asyncio" or args.compare_loops)
               and (s != "gpupair before" or args.before)]
    ports = {server: _free_port() for server in servers}
    api_port = _free_port()
    pids: dict[str, int] = {}
    try:
        binary = _build_floor(scratch)
        if binary is not None:
            floor_kind = "bench/floor.c"
            for port in (ports["floor"], api_port):
                popen.append(subprocess.Popen([str(binary), str(port)]))
            pids["floor"] = popen[0].pid
        else:  # no compiler: the Python floor stands in, and the table says so
            floor_kind = "no C compiler: the python floor stands in"
            del ports["floor"]
            processes.append(ctx.Process(target=_serve_python_floor, args=(api_port,), daemon=True))
        _kubeconfig(scratch / "kubeconfig", f"http://127.0.0.1:{api_port}")
        kubeconfig = str(scratch / "kubeconfig")
        targets = {
            "python floor": (_serve_python_floor, (ports["python floor"],)),
            "aiohttp floor": (_serve_aiohttp_floor, (ports["aiohttp floor"],)),
            **{server: (_serve_gpupair, (ports[server], max(args.sizes), kubeconfig, server == "gpupair stubbed",
                                         str(scratch / f"{server}.log"), server != "gpupair on asyncio",
                                         args.before if server == "gpupair before" else None))
               for server in SERVERS[3:] if server in ports},
        }
        for server, (target, target_args) in targets.items():
            process = ctx.Process(target=target, args=target_args, daemon=True)
            process.start()
            processes.append(process)
            pids[server] = process.pid
        if args.profile:
            popen.append(subprocess.Popen([str(Path(sys.executable).parent / "py-spy"), "record", "--pid",
                                           str(pids[args.profile_server]), "--rate", "500", "--format",
                                           "flamegraph" if args.profile.endswith(".svg") else "raw",
                                           "--output", args.profile, "--nonblocking"]))
        load_before = os.getloadavg()[0]
        out = asyncio.run(_run(args, ports, pids))
        load = (load_before, os.getloadavg()[0])
    finally:
        for proc in reversed(popen):  # py-spy first: it writes its profile on SIGINT
            proc.send_signal(signal.SIGINT)
            proc.wait(30)
        for process in processes:
            process.terminate()
            process.join(10)
    _print(args, out, load, floor_kind)
    if out["errors"]:
        for log in scratch.glob("*.log"):
            print(f"--- {log.name}:\n" + "\n".join(log.read_text(errors="replace").splitlines()[-5:]))
    if args.json:
        Path(args.json).write_text(json.dumps({**out, "load": load}, indent=1))
    shutil.rmtree(scratch, ignore_errors=True)
    return 1 if out["errors"] else 0


if __name__ == "__main__":
    sys.exit(main())
