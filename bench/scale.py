"""The API load of liveness at scale, before (heartbeats on Node annotations) and after (Leases).

A kube-apiserver double (tests/kube_double.py, own process) holds ``--nodes`` GPU nodes with
gpupair reports. In it, a driver writes what that many reporters write (the same bodies:
gpupair.topology.report's annotations as a merge patch, gpupair.kubewire.leases' Lease as a PUT-style replace),
straight into the double's store: 5,000 reporters' HTTP clients would need more CPU than the
machine has, and the writes are what is being counted. Every reader is real and over HTTP: the
real `gpupair extender` process (its own list+watches of nodes, pods and, after, Leases), a raw
Node watcher and a raw Lease watcher that count the bytes delivered to them.

Three configurations, each measured at steady state (nothing changes on any node) and under churn
(``--churn`` pods a second start or end on random nodes: each a Pod create/delete and a changed
report):

* ``before``: every reporter re-writes its annotations every 30 s (the pre-Lease reporter), the
  extender judges freshness from reportedAt (no Lease watch);
* ``after-compat``: Lease renewed every 30 s, annotations re-written every 90 s for extenders
  older than the Lease (the reporter's default --annotation-refresh 90);
* ``after``: Lease renewed every 30 s, annotations written only on change (--annotation-refresh 0),
  reports an hour old from the start: only the Leases keep the nodes fresh.

Per configuration and state it prints API writes per second by kind (and Node writes with nothing
changed, per hour), bytes per second delivered to a Node watcher and to a Lease watcher, the
extender's CPU (share of one core over the window) and resident memory, how many nodes the
extender holds fresh, and the time from a changed report being written to the first filter answer
that uses it (p50/p99 over ``--probes`` changes). Real time, not simulated: the windows are
``--seconds`` long; per-hour figures are the window's rate times 3,600.

    .venv/bin/python bench/scale.py                      # 5,000 nodes, 45 s windows
    .venv/bin/python bench/scale.py --nodes 500 --seconds 10 --configs after
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# After the installed packages: gpupair comes from the install (the checkout's gpupair/ holds
# the core alone), tests/ and bench/ from the checkout.
sys.path.append(str(ROOT))

from bench.extender import _free_port, _kubeconfig, _percentile, _stop, _wait_up, cluster  # noqa: E402

NS = "gpupair-system"
INTERVAL = 30.0  # the reporter's --heartbeat: Lease renewals (after) or annotation re-writes (before)
CONFIGS = {  # name -> (Lease renewals?, seconds between re-writes of unchanged annotations or None)
    "before": (False, INTERVAL),
    "after-compat": (True, 90.0),
    "after": (True, None),
}
TICKS = 20  # driver ticks a second
CLK_TCK = os.sysconf("SC_CLK_TCK")


# ---------------------------------------------------------------- the double and the reporters' writes


class Reporters:
    """What ``count`` reporters write, spread evenly over each interval, into the double's store."""

    def __init__(self, store, names: list[str], leases: bool, refresh: float | None, churn: float, seed: int = 3):
        from gpupair.topology.report import FREE_KEY
        from tests.layouts import seed_layout

        self.store, self.names, self.leases, self.refresh, self.churn = store, names, leases, refresh, churn
        self.free_key = FREE_KEY
        self.layouts = {name: seed_layout(uuid_prefix=f"GPU-{name[-5:]}") for name in names}
        self.free = {name: set(json.loads(self._annotations(name)[FREE_KEY])["free"]) for name in names}
        self.pods: dict[str, list[str]] = {}  # node -> bench pods running there
        self.running: list[tuple[str, str]] = []  # (pod, node) of every bench pod running
        self.generation = {name: 1 for name in names}
        self.rng = random.Random(seed)
        self.counts: dict[str, int] = {}
        self.churning = False
        self.pod_serial = 0

    def _annotations(self, name: str) -> dict:
        return self.store.objects["nodes"][("", name)]["metadata"]["annotations"]

    def count(self, kind: str) -> None:
        self.counts[kind] = self.counts.get(kind, 0) + 1

    def report(self, name: str, why: str, at: datetime | None = None) -> None:
        """The reporter's merge patch of its annotations (free set, ledger, reportedAt)."""
        from gpupair.topology.report import PodHolding, encode_annotations

        self.generation[name] += 1
        holders = [PodHolding("bench", pod, frozenset({gpu})) for pod, gpu in
                   zip(self.pods.get(name, []), sorted(set(range(8)) - self.free[name]))]
        annotations = encode_annotations(self.layouts[name], frozenset(self.free[name]), self.generation[name],
                                         at or datetime.now(timezone.utc), holders=holders)
        self.store.patch("nodes", name, {"metadata": {"annotations": annotations}})
        self.count(f"Node patch ({why})")

    def renew(self, name: str, at_ns: int | None = None) -> None:
        from gpupair.kubewire.leases import lease_body

        previous = self.store.objects["leases"].get((NS, name))
        body = lease_body(name, NS, 120, at_ns or time.time_ns(), previous=previous)
        if previous is None:
            self.store.create("leases", body, NS)
            self.count("Lease create")
        else:
            self.store.update("leases", name, NS, body)
            self.count("Lease renewal (PUT)")

    def seed(self) -> None:
        """Start as a cluster in its steady state: Leases renewed over the last interval; reports
        re-written over the last interval (before) or an hour old (after)."""
        now = time.time()
        old = datetime.now(timezone.utc) - timedelta(hours=1)
        for index, name in enumerate(self.names):
            phase = INTERVAL * index / len(self.names)
            if self.leases:
                self.renew(name, int((now - INTERVAL + phase) * 1e9))
                if self.refresh is None:
                    self.report(name, "seed", at=old)
            elif self.refresh:
                self.report(name, "seed", at=datetime.fromtimestamp(now - self.refresh + phase, timezone.utc))
        self.counts.clear()

    def due(self, start: float, end: float) -> None:
        """Every periodic write whose time falls in [start, end): node i's at i/N of each period."""
        n = len(self.names)
        for period, write in ((INTERVAL if self.leases else None, self.renew),
                              (self.refresh, lambda name: self.report(name, "unchanged, refreshed"))):
            if not period:
                continue
            first, last = int(start / period * n), int(end / period * n)
            for k in range(first, last):
                write(self.names[k % n])

    def churn_once(self) -> None:
        """A pod ends (one of ours, at random) or starts on a random node with a free GPU, as
        often one as the other; either way the node's report changes."""
        if self.running and self.rng.random() < 0.5:
            pod, name = self.running.pop(self.rng.randrange(len(self.running)))
            self.pods[name].remove(pod)
            self.store.delete("pods", pod, "bench")
            self.count("Pod delete")
            self.free[name].add(min(set(range(8)) - self.free[name]))
        else:
            name = self.rng.choice(self.names)
            if not self.free[name]:
                return
            self.pod_serial += 1
            pod = f"churn-{self.pod_serial:07d}"
            self.store.create("pods", {"metadata": {"name": pod, "namespace": "bench"},
                                       "spec": {"nodeName": name, "containers": [{"name": "main", "image": "x"}]},
                                       "status": {"phase": "Running"}}, "bench")
            self.count("Pod create")
            self.pods.setdefault(name, []).append(pod)
            self.running.append((pod, name))
            self.free[name].discard(min(self.free[name]))
        self.report(name, "changed")

    def probe(self, name: str, full: bool) -> float:
        """A changed report for the latency probe: every GPU free, or none."""
        self.free[name] = set(range(8)) if full else set()
        for pod in self.pods.pop(name, []):  # the probe's report lists none of them: gone
            self.running.remove((pod, name))
            self.store.delete("pods", pod, "bench")
        self.report(name, "probe")
        return time.monotonic()


def _serve(port: int, count: int, config: str, churn: float, conn) -> None:
    from tests.kube_double import KubeDouble, Store

    leases, refresh = CONFIGS[config]
    store = Store()
    for node in cluster(count):
        store.create("nodes", node)
    names = [name for _, name in sorted(store.objects["nodes"])]
    reporters = Reporters(store, names, leases, refresh, churn)
    reporters.seed()
    double = KubeDouble(store)
    double.port = port

    async def run() -> None:
        await double.start()
        conn.send(("up", store.rv))
        began = last = time.monotonic()
        owed, compacted = 0.0, began
        while True:
            await asyncio.sleep(1 / TICKS)
            now = time.monotonic()
            reporters.due(last - began, now - began)
            if reporters.churning:
                owed += (now - last) * churn
                while owed >= 1:
                    reporters.churn_once()
                    owed -= 1
            last = now
            if now - compacted > 5:  # bound the double's memory; watches resume within a minute
                store.compact(keep=int((count / INTERVAL + churn * 3) * 60) + 1000)
                double.requests.clear()
                compacted = now
            while conn.poll():
                command, *rest = conn.recv()
                if command == "counts":
                    conn.send(dict(reporters.counts))
                elif command == "churn":
                    reporters.churning = bool(rest[0])
                elif command == "probe":
                    conn.send(reporters.probe(*rest))
                elif command == "stop":
                    await double.stop()
                    return

    asyncio.run(run())


# ---------------------------------------------------------------- readers


class ByteCounter:
    """A raw watch (as any other Node or Lease watcher in the cluster), counting bytes received."""

    def __init__(self, session, url: str):
        self.session, self.url, self.bytes, self.events = session, url, 0, 0

    async def run(self) -> None:
        async with self.session.get(self.url, timeout=None) as response:
            async for chunk in response.content.iter_any():
                self.bytes += len(chunk)
                self.events += chunk.count(b"\n")


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def _rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def _filter_body(names: list[str]) -> bytes:
    from tests.extender_support import args_body, pod_object

    return json.dumps(args_body(pod_object(2), names=names)).encode()


async def _filter(session, ext: str, body: bytes) -> dict:
    async with session.post(f"{ext}/filter", data=body, headers={"Content-Type": "application/json"}) as response:
        return json.loads(await response.read())


async def _probes(session, ext: str, conn, names: list[str], count: int) -> list[float]:
    """Write a changed report, then ask filter until the answer uses it: seconds from write to answer."""
    latencies = []
    for index in range(count):
        name = names[(index * 7919) % len(names)]
        body = _filter_body([name])
        full = not (await _filter(session, ext, body))["NodeNames"]  # flip whatever it is now
        conn.send(("probe", name, full))
        written = conn.recv()
        deadline = written + 30
        while time.monotonic() < deadline:
            if bool((await _filter(session, ext, body))["NodeNames"]) == full:
                latencies.append(time.monotonic() - written)
                break
            await asyncio.sleep(0.002)
        await asyncio.sleep(0.2)
    return latencies


async def _measure_config(args, config: str) -> dict:
    import aiohttp

    ctx = multiprocessing.get_context("spawn")
    api_port, ext_port = _free_port(), _free_port()
    here, there = ctx.Pipe()
    double = ctx.Process(target=_serve, args=(api_port, args.nodes, config, args.churn, there), daemon=True)
    double.start()
    _, rv = here.recv()
    scratch = Path(tempfile.mkdtemp(prefix="gpupair-scale-"))
    _kubeconfig(scratch / "kubeconfig", f"http://127.0.0.1:{api_port}")
    gpupair = Path(sys.executable).parent / "gpupair"
    command = [str(gpupair)] if gpupair.exists() else [sys.executable, "-P", "-m", "gpupair.command.cli"]
    leases, _ = CONFIGS[config]
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUPAIR_")}
    log_path = scratch / "extender.log"
    if args.profile:
        command = [str(Path(sys.executable).parent / "py-spy"), "record", "--format", "raw", "--rate", "100",
                   "--output", f"{args.profile}.{config}.txt", "--", *command]
    with log_path.open("wb") as log_file:
        extender = subprocess.Popen(
            [*command, "extender", "--host", "127.0.0.1", "--port", str(ext_port), "--kubeconfig",
             str(scratch / "kubeconfig"), "--stale-after", "120", "--log-level", "info",
             # before: an extender from before the Lease, judging freshness from reportedAt alone
             "--lease-namespace", NS if leases else ""],
            cwd=ROOT, env=env, stdout=log_file, stderr=subprocess.STDOUT)
    pid = extender.pid
    if args.profile:  # py-spy's child is the extender
        await asyncio.sleep(2)
        children = Path(f"/proc/{extender.pid}/task/{extender.pid}/children").read_text().split()
        pid = int(children[0]) if children else pid
    result: dict = {"config": config}
    names = [f"gpu-node-{i:05d}" for i in range(args.nodes)]
    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=120)) as session:
            api, ext = f"http://127.0.0.1:{api_port}", f"http://127.0.0.1:{ext_port}"
            await _wait_up(session, ext, path="/readyz", ok_only=True, timeout=300)
            counters = {
                "node": ByteCounter(session, f"{api}/api/v1/nodes?watch=1&resourceVersion={rv}"),
                "lease": ByteCounter(session, f"{api}/apis/coordination.k8s.io/v1/namespaces/{NS}/leases"
                                              f"?watch=1&resourceVersion={rv}&labelSelector=gpupair.io%2Fheartbeat%3Dnode"),
            }
            tasks = [asyncio.create_task(c.run()) for c in counters.values()]
            await asyncio.sleep(args.settle)  # the startup list behind us, watches streaming
            all_names = _filter_body(names)
            for state in ("steady", "churn"):
                here.send(("churn", state == "churn"))
                await asyncio.sleep(2 if state == "churn" else 0)
                here.send(("counts",))
                counts0 = here.recv()
                bytes0 = {k: c.bytes for k, c in counters.items()}
                events0 = {k: c.events for k, c in counters.items()}
                cpu0, t0 = _cpu_seconds(pid), time.monotonic()
                await asyncio.sleep(args.seconds)
                cpu1, t1 = _cpu_seconds(pid), time.monotonic()
                bytes1 = {k: c.bytes for k, c in counters.items()}
                events1 = {k: c.events for k, c in counters.items()}
                here.send(("counts",))
                counts1 = here.recv()
                window = t1 - t0
                answer = await _filter(session, ext, all_names)
                stale = sum(1 for reason in answer["FailedNodes"].values() if "older than" in reason)
                latencies = await _probes(session, ext, here, names, args.probes)
                result[state] = {
                    "window_s": window,
                    "writes": {k: (counts1.get(k, 0) - counts0.get(k, 0)) / window for k in counts1},
                    "bytes": {k: (bytes1[k] - bytes0[k]) / window for k in counters},
                    "events": {k: (events1[k] - events0[k]) / window for k in counters},
                    "cpu": (cpu1 - cpu0) / window,
                    "rss_mib": _rss_mib(pid),
                    "fresh": len(names) - stale, "stale": stale,
                    "latency": latencies,
                }
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
    finally:
        _stop(extender, profiled=bool(args.profile))
        here.send(("stop",))
        double.join(20)
        if double.is_alive():
            double.terminate()
    log_lines = log_path.read_text(errors="replace").splitlines()
    result["relists"] = sum(1 for line in log_lines if "listing again" in line)
    result["watch_errors"] = sum(1 for line in log_lines if "list/watch failed" in line)
    shutil.rmtree(scratch, ignore_errors=True)
    return result


# ---------------------------------------------------------------- printout


def _print(args, results: list[dict]) -> None:
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.2f}; "
          f"{args.nodes} nodes, Lease/heartbeat interval {INTERVAL:g} s, churn {args.churn:g} pod starts+ends/s; "
          f"real time, {args.seconds:g} s windows (per-hour figures: the window's rate x 3,600)")
    print("reporters' writes: applied to the double's store in its process (the reporter's bodies); "
          "extender, Node watcher and Lease watcher: real HTTP watches")
    for result in results:
        for state in ("steady", "churn"):
            r = result[state]
            lat = r["latency"]
            unchanged = r["writes"].get("Node patch (unchanged, refreshed)", 0.0)
            print(f"\n{result['config']} / {state}")
            for kind, rate in sorted(r["writes"].items()):
                if "probe" in kind:
                    continue  # the bench's own latency probes
                print(f"  writes/s  {kind:<34} {rate:8.1f}")
            print(f"  Node writes with nothing changed      {unchanged * 3600:8.0f} per hour")
            for kind in ("node", "lease"):
                print(f"  bytes/s to a {kind.title()} watcher  {' ' * (5 - len(kind))}           "
                      f"{r['bytes'][kind] / 1024:8.1f} KiB/s ({r['events'][kind]:.1f} events/s)")
            print(f"  extender CPU                          {r['cpu'] * 100:8.1f} % of one core")
            print(f"  extender resident memory              {r['rss_mib']:8.1f} MiB")
            print(f"  nodes fresh / stale                   {r['fresh']} / {r['stale']}")
            print(f"  report -> decision (n={len(lat)})        p50 {_percentile(lat, 0.5) * 1e3:.1f} ms, "
                  f"p99 {_percentile(lat, 0.99) * 1e3:.1f} ms")
        print(f"  extender watch relists (410) / failures over the run: {result['relists']} / {result['watch_errors']}")
    by = {r["config"]: r for r in results}
    if "before" in by:
        print("\nratios against before (steady state)")
        base = by["before"]["steady"]
        for config in [c for c in by if c != "before"]:
            s = by[config]["steady"]
            print(f"  {config:<13} Node watcher bytes x{s['bytes']['node'] / max(base['bytes']['node'], 1):.3f}, "
                  f"extender CPU x{s['cpu'] / max(base['cpu'], 1e-9):.2f}, RSS x{s['rss_mib'] / base['rss_mib']:.2f}")
    print("\ntargets: Node writes with nothing changed 0/hour (after); one Lease renewal per interval per node "
          f"({args.nodes / INTERVAL:.0f}/s); extender steady state <= 5% of one core, <= 300 MiB")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--seconds", type=float, default=45.0, help="length of each measured window")
    parser.add_argument("--settle", type=float, default=10.0, help="seconds between the extender's readiness and the first window")
    parser.add_argument("--churn", type=float, default=10.0, help="pod starts+ends a second under churn")
    parser.add_argument("--probes", type=int, default=15, help="report -> decision samples per window")
    parser.add_argument("--configs", nargs="+", default=list(CONFIGS), choices=list(CONFIGS))
    parser.add_argument("--profile", default="", help="py-spy the extender into PREFIX.<config>.txt (raw)")
    parser.add_argument("--json", default="", help="also write the results here")
    args = parser.parse_args(argv)
    results = [asyncio.run(_measure_config(args, config)) for config in args.configs]
    _print(args, results)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
