"""The extender's cost on the real kube-scheduler v1.36: pods placed with it, against without it.

On a real etcd + kube-apiserver + kube-scheduler (tests/controlplane, binaries from
GPUPAIR_K8S_BIN), 32 seed-like 8-GPU nodes whose reports sit in their annotations (no kubelet,
no reporter: nothing changes them during a run) and N pods asking 1 or 2 GPUs, created before
kube-scheduler starts. Three configurations, run interleaved, the order rotating each round
(alone, floor, gpupair; floor, gpupair, alone; ...): the control plane slows as a session goes on
(etcd's history grows with every round of pods), and a fixed order put gpupair last every round.

- ``alone``: kube-scheduler, no extender;
- ``floor``: kube-scheduler with the same extender entry pointed at bench/floor_extender.py, the
  least an extender can be (every node passes, every score 0, bind makes the Binding): what any
  extender costs on this machine, the protocol's own price;
- ``gpupair``: kube-scheduler with gpupair's extender entry from deploy/ (filter, prioritize,
  bind, nodeCacheCapable, managedResources nvidia.com/gpu), the extender a process of its own.
- ``gpupair-before`` (``--before TREE``): the same, with the extender of another checkout, run
  by that tree's own ``.venv/bin/python`` from that tree: a change measured against the tree
  before it in one interleaved set.

Both with the client rate limit lifted (qps 5000). The figure per run is the time from the first
pod bound to the last, from kube-scheduler's own log ("Successfully bound pod to node", klog's
microsecond stamps). Printed per configuration: that span, the time gpupair adds per bound pod
(mean of its runs less mean of alone's, over the pods bound), the same for the floor, gpupair
over the floor, the ratio, the bind latency
percentiles (alone: kube-scheduler's own Bind extension point,
``scheduler_framework_extension_point_duration_seconds{extension_point="Bind"}``; gpupair: the
extender's bind handler, ``gpupair_extender_request_seconds{verb="bind"}``, as kube-scheduler
does not time an extender's bind in that metric), both read from histograms, interpolated within
a bucket; and the same per pod from the logs, without buckets or cap: kube-scheduler runs with
``--vmodule=default_binder=3``, so DefaultBinder logs the start of each Binding, timed to its
"Successfully bound" line, and the extender's ``bound`` line carries its bind's seconds), and the
CPU seconds per bound pod of each process, so the machine's noise shows; and kube-scheduler's
scheduling algorithm per attempt (``scheduler_scheduling_algorithm_duration_seconds``, its mean),
where an extender's filter and prioritize calls sit, beside gpupair's own handler times for them.

``--cpu-pods``: the pods ask CPU only, and the extender (and the floor) is registered with both
entries deploy/ ships (deploy/overlays/self-managed/scheduler-config.yaml): the GPU entry, which
no CPU pod reaches, and the every-pod entry, prioritize only, which every CPU pod reaches. What
it adds to a CPU pod is gpupair's span over alone's (the ratio ``gpupair/alone``).

    GPUPAIR_K8S_BIN=.k8s-bin .venv/bin/python bench/real_scheduler.py
    GPUPAIR_K8S_BIN=.k8s-bin .venv/bin/python bench/real_scheduler.py --cpu-pods --runs 3
    GPUPAIR_K8S_BIN=.k8s-bin .venv/bin/python bench/real_scheduler.py --profile /tmp/extender.svg  # py-spy
    GPUPAIR_K8S_BIN=.k8s-bin .venv/bin/python bench/real_scheduler.py --runs 10 --before ../main-before
"""

from __future__ import annotations

import argparse
import json
import random
import re
import shutil
import signal
import ssl
import statistics
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
# After the installed packages: gpupair comes from the install (the checkout's gpupair/ holds
# the core alone), tests/ and bench/ from the checkout.
sys.path.append(str(REPO))

from gpupair.topology.report import encode_annotations  # noqa: E402
from tests.controlplane.control_plane import ControlPlane, find_binaries, session_directory  # noqa: E402
from tests.controlplane.processes import Process, free_port, stop_all, wait_until  # noqa: E402
from tests.layouts import seed_layout  # noqa: E402
from bench.metrics_page import counts, cpu_seconds, histogram, mean, minus, quantile  # noqa: E402

NAMESPACE = "bench"
RESOURCE = "nvidia.com/gpu"
BOUND = re.compile(r'^I(\d{4}) (\d\d:\d\d:\d\d\.\d{6}).*"Successfully bound pod to node"')
# DefaultBinder's line as it starts a Binding, at verbosity 3: turned on for its file alone, so
# the scheduler logs one more line per pod and each bind's own time can be read, uncapped.
BINDER_VERBOSITY = "--vmodule=default_binder=3"
ATTEMPT = re.compile(r'^I\d{4} (\d\d:\d\d:\d\d\.\d{6}).*"Attempting to bind pod to node".*? pod="([^"]+)"')
BOUND_POD = re.compile(r'^I\d{4} (\d\d:\d\d:\d\d\.\d{6}).*"Successfully bound pod to node".*? pod="([^"]+)"')
CLIENT = {"qps": 5000, "burst": 5000}
CPU_PROCESSES = ("extender", "kube-scheduler", "kube-apiserver", "etcd")
CONFIGS = ("alone", "floor", "gpupair")
BEFORE = "gpupair-before"  # --before's configuration


def is_gpupair(config: str) -> bool:
    return config in ("gpupair", BEFORE)


@dataclass
class Run:
    config: str
    bound: int
    span: float  # seconds, first bound to last
    bind_p50: float | None
    bind_p99: float | None
    cpu: dict[str, float] = field(default_factory=dict)  # seconds per process, whole run
    requests: dict[str, float] = field(default_factory=dict)  # the extender's requests by verb (gpupair)
    # The apiserver's own time for this run's Bindings (kube-scheduler's alone, the extender's
    # otherwise), uncapped: kube-scheduler's Bind histogram stops at 204.8 ms.
    server_p50: float | None = None
    server_p99: float | None = None
    # Each bind's own time, per pod from the logs (kube-scheduler's DefaultBinder alone, the
    # extender's ``bound`` lines with gpupair): the same figure as the histograms, without buckets.
    binds: list[float] = field(default_factory=list)
    algorithm: float | None = None  # kube-scheduler's scheduling algorithm, mean per attempt (ALGORITHM)
    handled: float | None = None  # the extender's filter and prioritize handlers, their means added (gpupair)
    seed: int = 0  # the round: its pods, the same for every configuration of the round


def node(name: str) -> dict:
    annotations = encode_annotations(seed_layout(f"GPU-{name}"), frozenset(range(8)), 1,
                                     datetime.now(timezone.utc), holders=())
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "annotations": annotations}}


def ready_status(gpus: int) -> dict:
    resources = {"cpu": "32", "memory": "256Gi", "pods": "110", **({RESOURCE: str(gpus)} if gpus else {})}
    now = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {"status": {"capacity": resources, "allocatable": resources, "conditions": [
        {"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "bench",
         "lastHeartbeatTime": now, "lastTransitionTime": now}]}}


def pod(name: str, gpus: int) -> dict:
    resources = ({"limits": {RESOURCE: str(gpus)}, "requests": {RESOURCE: str(gpus)}} if gpus
                 else {"requests": {"cpu": "100m", "memory": "64Mi"}})
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": NAMESPACE},
            "spec": {"containers": [{"name": "main", "image": "registry.k8s.io/pause:3.10", "resources": resources}],
                     "restartPolicy": "Never"}}


def extender_entries(port: int, cpu_pods: bool) -> list[dict]:
    url = f"http://127.0.0.1:{port}"
    if cpu_pods:  # as deploy/ ships them
        from tests.controlplane.gpupair_install import scheduler_extenders

        return scheduler_extenders(url)
    return [{"urlPrefix": url, "filterVerb": "filter", "prioritizeVerb": "prioritize",
             "bindVerb": "bind", "weight": 5, "enableHTTPS": False, "nodeCacheCapable": True,
             "httpTimeout": "5s", "ignorable": False, "managedResources": [{"name": RESOURCE, "ignoredByScheduler": False}]}]


def _connects(port: int) -> bool:
    import socket

    with socket.create_connection(("127.0.0.1", port), timeout=1):
        return True


# apiserver_request_duration_seconds for POST pods/binding (labels in the order Go prints them).
BINDINGS = ("apiserver_request_duration_seconds", 'resource="pods",scope="resource",subresource="binding",verb="POST"')


# kube-scheduler's time to pick a node for a pod: its filter and score plugins and, where one is
# registered, the extender's filter and prioritize calls. The scheduling cycle runs one pod at a
# time, so this is the part of the time added per pod that an extender adds in series.
ALGORITHM = "scheduler_scheduling_algorithm_duration_seconds"


def _clock(stamp: str) -> float:
    clock = datetime.strptime(stamp, "%H:%M:%S.%f")
    return clock.hour * 3600 + clock.minute * 60 + clock.second + clock.microsecond / 1e6


def scheduler_binds(log: str) -> list[float]:
    """Seconds from DefaultBinder's "Attempting to bind" to "Successfully bound", per pod, from
    kube-scheduler's klog lines (the Bind extension point, as its histogram times it)."""
    started: dict[str, float] = {}
    out = []
    for line in log.splitlines():
        if found := ATTEMPT.match(line):
            started[found.group(2)] = _clock(found.group(1))
        elif (found := BOUND_POD.match(line)) and found.group(2) in started:
            out.append(_clock(found.group(1)) - started.pop(found.group(2)))
    return out


def extender_binds(log: str) -> list[float]:
    """The ``seconds`` of each ``bound`` line in the extender's JSON log."""
    out = []
    for line in log.splitlines():
        if '"msg":"bound"' in line:
            try:
                out.append(float(json.loads(line)["seconds"]))
            except (ValueError, KeyError, TypeError):
                continue
    return out


def percentile(values: list[float], q: float) -> float | None:
    """The q-quantile of exact values, linear between the two nearest."""
    if len(values) < 2:
        return values[0] if values else None
    return statistics.quantiles(values, n=100, method="inclusive")[round(q * 100) - 1]


class Bench:
    def __init__(self, args: argparse.Namespace):
        self.args = args
        binaries, why = find_binaries()
        if not binaries:
            print(f"bench/real_scheduler.py: {why}: {HOW}", file=sys.stderr)
            raise SystemExit(2)
        self.plane = ControlPlane(binaries, session_directory())

    def start(self) -> None:
        self.plane.start()
        api = self.plane.admin
        api.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}})
        # no controller-manager here makes a namespace's default ServiceAccount, which pods need
        api.create({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "default", "namespace": NAMESPACE}})
        for i in range(self.args.nodes):
            created = api.create(node(f"node-{i:02d}"))
            api.patch(api.path_of(created, "status"), ready_status(8))
            api.patch(created, {"spec": {"taints": None}})  # the not-ready taint admission added; no kubelet clears it
        self.context = ssl.create_default_context()
        self.context.check_hostname = False
        self.context.verify_mode = ssl.CERT_NONE  # kube-scheduler's self-signed serving certificate
        self.context.load_cert_chain(str(self.plane.admin_cert.cert), str(self.plane.admin_cert.key))

    def create_pods(self, seed: int) -> None:
        rng = random.Random(seed)
        api = self.plane.admin
        for i in range(self.args.pods):
            api.create(pod(f"p-{i:03d}", 0 if self.args.cpu_pods else rng.choice((1, 2))))

    def delete_pods(self) -> None:
        api = self.plane.admin
        for item in api.list("v1", "Pod", NAMESPACE):  # list items carry no kind
            api.delete(api.path("v1", "Pod", item["metadata"]["name"], NAMESPACE), grace=0)
        api.wait_for(lambda: not api.list("v1", "Pod", NAMESPACE), 60, "pods deleted")

    def extender(self, config: str, seed: int) -> tuple[Process, int]:
        """gpupair's extender, or the floor (bench/floor_extender.py), serving on a free port."""
        port = free_port()
        tree = Path(self.args.before).resolve() if config == BEFORE else REPO
        python = str(tree / ".venv/bin/python") if (tree / ".venv/bin/python").exists() else sys.executable
        kubeconfig = str(self.plane.admin_kubeconfig)
        if config == "floor":
            argv = [python, str(REPO / "bench/floor_extender.py"), str(port), kubeconfig]
            ready = f"http://127.0.0.1:{port}/"
        else:
            sampler = [str(REPO / "bench/cpu_sampler.py"), self.args.cpu_profile] if self.args.cpu_profile else []
            # -P: this checkout's gpupair from its install, not its folder (the cwd) first on sys.path
            argv = [python, *(sampler or (["-P"] if tree == REPO else [])), "-m", "gpupair.command.cli", "extender", "--kubeconfig", kubeconfig,
                    "--host", "127.0.0.1", "--port", str(port)]
            ready = f"http://127.0.0.1:{port}/readyz"
        process = Process(config, argv, self.plane.directory / f"{config}-{seed}.log", cwd=tree)
        if config == "floor":
            wait_until(lambda: _connects(port), 60, "floor extender listening", process)
        else:
            wait_until(lambda: urllib.request.urlopen(ready, timeout=2).status == 200, 60, "extender /readyz", process)
        return process, port

    def scrape(self, url: str, context: ssl.SSLContext | None = None, tries: int = 6) -> str:
        """GET ``url``'s text. kube-scheduler asks the apiserver whether the caller may read its
        /metrics (a SubjectAccessReview); one that fails under the burst's load answers 403, so a
        refusal is tried again after a pause (a denial is cached for 10 s) before a run is lost."""
        for attempt in range(1, tries + 1):
            try:
                with urllib.request.urlopen(url, context=context, timeout=10) as response:
                    return response.read().decode()
            except urllib.error.HTTPError as exc:
                if exc.code not in (403, 500, 503) or attempt == tries:
                    raise
                why = exc.read().decode(errors="replace")[:300]
                print(f"  {url}: HTTP {exc.code} ({why.strip()}); trying again", file=sys.stderr)
                time.sleep(min(2.0 * attempt, 6.0))
        raise AssertionError("unreachable")

    def run(self, config: str, seed: int) -> Run:
        self.create_pods(seed)
        procs: dict[str, Process] = {}
        requests: dict[str, float] = {}
        handled = None
        profiler = None
        config_doc: dict = {"clientConnection": dict(CLIENT), "profiles": [{"schedulerName": "default-scheduler"}]}
        if config != "alone":
            procs["extender"], port = self.extender(config, seed)
            config_doc["extenders"] = extender_entries(port, self.args.cpu_pods)
            if self.args.profile and is_gpupair(config):
                spy = REPO / ".venv/bin/py-spy"
                fmt = "raw" if self.args.profile.endswith(".txt") else "flamegraph"  # raw: collapsed stacks
                profiler = subprocess.Popen([str(spy) if spy.exists() else "py-spy", "record", "--pid",
                                             str(procs["extender"].pid), "--rate", "500", "--format", fmt,
                                             "--output", self.args.profile, "--nonblocking"],
                                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        before_ext = self.scrape(f"http://127.0.0.1:{port}/metrics") if is_gpupair(config) else ""
        marks = {"kube-apiserver": self.plane.apiserver.pid, "etcd": self.plane.etcd.pid}
        cpu0 = {name: cpu_seconds(pid) for name, pid in marks.items()}
        if "extender" in procs:
            cpu0["extender"] = cpu_seconds(procs["extender"].pid)
            if self.args.cpu_profile and is_gpupair(config):
                procs["extender"].popen.send_signal(signal.SIGUSR1)  # the sampler starts afresh here
        before_api = self.plane.admin.request("GET", "/metrics")
        scheduler = self.plane.scheduler(config_doc, name=f"kube-scheduler-{config}-{seed}", flags=[BINDER_VERBOSITY])
        cpu0["kube-scheduler"] = 0.0
        expected = self.args.expect
        self.plane.admin.wait_for(lambda: self._settled(scheduler, expected), 120, "binds settled", interval=0.25)
        cpu = {name: cpu_seconds(pid) - cpu0[name] for name, pid in marks.items()}
        cpu["kube-scheduler"] = cpu_seconds(scheduler.pid)
        if "extender" in procs:
            cpu["extender"] = cpu_seconds(procs["extender"].pid) - cpu0["extender"]
        times = self._bound_times(scheduler)
        server = minus(histogram(self.plane.admin.request("GET", "/metrics"), *BINDINGS), histogram(before_api, *BINDINGS))
        if is_gpupair(config):
            after = self.scrape(f"http://127.0.0.1:{port}/metrics")
            name, label = "gpupair_extender_request_seconds", 'verb="bind"'
            buckets = minus(histogram(after, name, label), histogram(before_ext, name, label))
            handled = sum(mean(after, name, f'verb="{verb}"', before_ext) or 0.0
                          for verb in ("filter", "prioritize", "prioritize-every-pod"))
            total, earlier = counts(after, "gpupair_extender_requests_total", "verb"), \
                counts(before_ext, "gpupair_extender_requests_total", "verb")
            requests = {verb: n - earlier.get(verb, 0.0) for verb, n in total.items()}
            waits, waited = counts(after, "gpupair_extender_pod_watch_waits_total", "outcome"), \
                counts(before_ext, "gpupair_extender_pod_watch_waits_total", "outcome")
            requests.update({f"pod-watch wait ({outcome})": n - waited.get(outcome, 0.0)
                             for outcome, n in waits.items()})
        elif config == "floor":
            buckets = []
        page = self.scrape(f"https://127.0.0.1:{self._scheduler_port(scheduler)}/metrics", self.context)
        algorithm = mean(page, ALGORITHM)
        if config == "alone":
            buckets = histogram(page, "scheduler_framework_extension_point_duration_seconds",
                                'extension_point="Bind"')
        binds = (extender_binds(procs["extender"].log.read_text(errors="replace")) if is_gpupair(config)
                 else scheduler_binds(scheduler.log.read_text(errors="replace")) if config == "alone" else [])
        if profiler is not None:
            profiler.send_signal(signal.SIGINT)  # py-spy writes its output on SIGINT
            profiler.wait(60)
        scheduler.stop()
        self.plane.processes.remove(scheduler)
        for process in procs.values():
            process.stop()
        self.delete_pods()
        span = (max(times) - min(times)) if len(times) > 1 else 0.0
        return Run(config, len(times), span, quantile(buckets, 0.5), quantile(buckets, 0.99), cpu, requests,
                   quantile(server, 0.5), quantile(server, 0.99), seed=seed, binds=binds, algorithm=algorithm, handled=handled)

    def _scheduler_port(self, scheduler: Process) -> int:
        return int(next(a.split("=", 1)[1] for a in scheduler.argv if a.startswith("--secure-port=")))

    def _bound_times(self, scheduler: Process) -> list[float]:
        stamps = []
        for line in scheduler.log.read_text(errors="replace").splitlines():
            found = BOUND.match(line)
            if found:
                clock = datetime.strptime(found.group(2), "%H:%M:%S.%f")
                stamps.append(clock.hour * 3600 + clock.minute * 60 + clock.second + clock.microsecond / 1e6)
        return stamps

    def _settled(self, scheduler: Process, expected: int | None) -> bool:
        """Every pod bound, or (some fit nowhere) no new bind for two seconds."""
        count = len(self._bound_times(scheduler))
        now = time.monotonic()
        if count != getattr(self, "_last_count", -1):
            self._last_count, self._last_change = count, now
        if expected is not None:
            return count >= expected
        return count >= self.args.pods or (count > 0 and now - self._last_change > 2.0)


HOW = ("set GPUPAIR_K8S_BIN to a folder with kube-apiserver, kube-scheduler and kube-controller-manager v1.36 "
       "(.ci/run unpacks ../shared/k8s into .k8s-bin/) and install etcd (Debian etcd-server)")


def report(runs: list[Run], args: argparse.Namespace) -> None:
    kind = "CPU-only pods, both shipped entries" if args.cpu_pods else "GPU pods (1 or 2 GPUs)"
    print(f"{args.pods} {kind} on {args.nodes} seed-like nodes, created before kube-scheduler starts; "
          f"client qps {CLIENT['qps']}; runs interleaved")
    print(f"{'run':<4} {'config':<14} {'bound':>5} {'first->last':>11} {'algorithm':>9} {'bind p50':>9} {'bind p99':>9} "
          f"{'logs p50':>9} {'logs p99':>9} {'apiserver p50':>13} {'apiserver p99':>13}  " + "  ".join(f"{'cpu ' + name:>18}" for name in CPU_PROCESSES))
    for i, run in enumerate(runs, 1):
        cells = "  ".join(f"{run.cpu.get(name, 0.0) * 1000 / max(run.bound, 1):>15.2f} ms" if name in run.cpu
                          else f"{'-':>18}" for name in CPU_PROCESSES)
        print(f"{i:<4} {run.config:<14} {run.bound:>5} {run.span:>9.3f} s {_ms(run.algorithm):>9} {_ms(run.bind_p50):>9} {_ms(run.bind_p99):>9} "
              f"{_ms(percentile(run.binds, 0.5)):>9} {_ms(percentile(run.binds, 0.99)):>9} {_ms(run.server_p50):>13} {_ms(run.server_p99):>13}  {cells}")
    print("(algorithm: kube-scheduler's scheduling algorithm, mean per attempt, the extender's filter and "
          "prioritize calls in it; bind: the histograms, kube-scheduler's Bind extension point alone, the extender's bind "
          "with gpupair; logs: the same per pod from the logs, uncapped; cpu: seconds of CPU per bound pod, "
          "over the whole run; apiserver: its own time for the run's Bindings, kube-scheduler's alone, the "
          "extender's otherwise)")
    for i, run in enumerate(runs, 1):
        if run.requests:  # kube-scheduler retries a pod no node fits: more calls than pods bound
            verbs = sorted(verb for verb in run.requests if not verb.startswith("pod-watch"))
            waits = ", ".join(f"{int(n)} {name}" for name, n in sorted(run.requests.items())
                              if name.startswith("pod-watch"))
            print(f"run {i}: the extender answered " + ", ".join(
                f"{run.requests[verb] / max(run.bound, 1):.2f} {verb}" for verb in verbs)
                + " per bound pod" + (f"; filter's {waits}" if waits else ""))
    configs = configurations(args)
    extenders = [c for c in configs if is_gpupair(c)]
    spans = {c: [r.span for r in runs if r.config == c] for c in configs}
    bound = {c: [r.bound for r in runs if r.config == c] for c in configs}
    if not all(spans.values()):
        return
    mean = {c: statistics.mean(v) for c, v in spans.items()}
    a = mean["alone"]
    print(f"first->last, mean: " + ", ".join(f"{c} {mean[c]:.3f} s" for c in configs)
          + f"; gpupair/alone {mean['gpupair'] / a:.2f}x")
    for c in ("floor", *extenders):
        per_run = [(r.span - a) * 1000 / max(r.bound, 1) for r in runs if r.config == c]
        print(f"added per bound pod over kube-scheduler alone, {c}: {statistics.mean(per_run):.2f} ms"
              f"{_standard_error(runs, (c, 'alone'))} (per run: {', '.join(f'{v:.2f}' for v in per_run)})")
    pairs = [(c, "floor") for c in extenders] + ([("gpupair", BEFORE)] if BEFORE in configs else [])
    for config, base in pairs:
        over = (mean[config] - mean[base]) * 1000 / max(statistics.mean(bound[config]), 1)
        print(f"{config} over {base}: {over:.2f} ms per bound pod{_standard_error(runs, (config, base))}")
        paired = _paired(runs, config, base)
        if len(paired) > 1:
            print(f"{config} over {base}, round by round (the same pods, back to back): median "
                  f"{statistics.median(paired):.2f} ms, mean {statistics.mean(paired):.2f} ms "
                  f"± {statistics.stdev(paired) / len(paired) ** 0.5:.2f} "
                  f"(per round: {', '.join(f'{v:.2f}' for v in paired)})")
    with_, alone = [r for r in runs if r.config == "gpupair"], [r for r in runs if r.config == "alone"]
    algorithm = {c: [r.algorithm for r in runs if r.config == c and r.algorithm is not None] for c in configs}
    if all(algorithm.values()):
        cycle = {c: statistics.mean(v) for c, v in algorithm.items()}
        for c in extenders:
            handled = [r.handled for r in runs if r.config == c and r.handled is not None]
            print(f"scheduling algorithm per attempt, mean (one pod at a time; an extender's filter and prioritize "
                  f"calls in it): alone {_ms(cycle['alone'])}, floor {_ms(cycle['floor'])}, {c} {_ms(cycle[c])}; "
                  f"{c} over the floor {_ms(cycle[c] - cycle['floor'])}"
                  + (f", its filter and prioritize handlers {_ms(statistics.mean(handled))}" if handled else ""))
    for c in extenders:
        cpu = [r.cpu["extender"] * 1000 / max(r.bound, 1) for r in runs if r.config == c and "extender" in r.cpu]
        if cpu:
            print(f"extender CPU per bound pod, {c}: mean {statistics.mean(cpu):.2f} ms "
                  f"(range {min(cpu):.2f}-{max(cpu):.2f})")
    for q in ("p50", "p99"):
        ours = [getattr(r, f"bind_{q}") for r in with_ if getattr(r, f"bind_{q}") is not None]
        theirs = [getattr(r, f"bind_{q}") for r in alone if getattr(r, f"bind_{q}") is not None]
        if ours and theirs:
            print(f"bind {q}: gpupair's bind {_ms(statistics.mean(ours))}, kube-scheduler's own Bind "
                  f"{_ms(statistics.mean(theirs))}: {statistics.mean(ours) / statistics.mean(theirs):.2f}x"
                  + (" (kube-scheduler's histogram tops out at 204.8 ms: its figure is a lower bound)"
                     if statistics.mean(theirs) >= 0.2048 else ""))
        served = [getattr(r, f"server_{q}") for r in alone if getattr(r, f"server_{q}") is not None]
        if ours and served:
            print(f"bind {q}: gpupair's bind {_ms(statistics.mean(ours))}, the apiserver's own time for "
                  f"kube-scheduler's Bindings {_ms(statistics.mean(served))} (uncapped; its Bind takes at least "
                  f"that): {statistics.mean(ours) / statistics.mean(served):.2f}x")
        q_value = 0.5 if q == "p50" else 0.99
        ours = [v for r in with_ if (v := percentile(r.binds, q_value)) is not None]
        theirs = [v for r in alone if (v := percentile(r.binds, q_value)) is not None]
        if ours and theirs:
            print(f"bind {q}, per pod from the logs (no buckets, no cap): gpupair's bind "
                  f"{_ms(statistics.mean(ours))}, kube-scheduler's own Bind {_ms(statistics.mean(theirs))}: "
                  f"{statistics.mean(ours) / statistics.mean(theirs):.2f}x")


def configurations(args: argparse.Namespace) -> tuple[str, ...]:
    return CONFIGS + ((BEFORE,) if args.before else ())


def _paired(runs: list[Run], config: str, base: str) -> list[float]:
    """Per round, ``config``'s span per bound pod less ``base``'s, in ms: a round's runs share
    their pods and the control plane's state, which drift from round to round, and one slow run
    moves one round's difference, where it moves a configuration's mean."""
    by_seed: dict[int, dict[str, Run]] = {}
    for run in runs:
        by_seed.setdefault(run.seed, {})[run.config] = run
    return [(pair[config].span / max(pair[config].bound, 1) - pair[base].span / max(pair[base].bound, 1)) * 1000
            for _, pair in sorted(by_seed.items()) if config in pair and base in pair]


def _standard_error(runs: list[Run], pair: tuple[str, str]) -> str:
    """`` ± x`` for the difference of two configurations' mean span per bound pod, in ms (the
    runs' own spread; empty below two runs each)."""
    spread = []
    for config in pair:
        per_pod = [r.span * 1000 / max(r.bound, 1) for r in runs if r.config == config]
        if len(per_pod) < 2:
            return ""
        spread.append(statistics.variance(per_pod) / len(per_pod))
    return f" ± {sum(spread) ** 0.5:.2f}"


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value * 1000:.2f} ms"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=32)
    parser.add_argument("--pods", type=int, default=200)
    # One run's span moves by a millisecond per pod from the next on two shared cores: the mean of
    # two cannot tell 0.3 ms apart, so six by default (each configuration twice in each place of
    # the rotating order), and the report prints the standard error.
    parser.add_argument("--runs", type=int, default=6, help="runs per configuration, interleaved (default 6)")
    parser.add_argument("--cpu-pods", action="store_true", help="CPU-only pods; the extender with both shipped entries")
    parser.add_argument("--expect", type=int, default=None, help="binds to wait for (default: until two quiet seconds)")
    parser.add_argument("--profile", default="", help="record the extender with py-spy into this file (gpupair runs)")
    parser.add_argument("--cpu-profile", default="",
                        help="sample the extender by CPU time (bench/cpu_sampler.py) into this file (gpupair runs)")
    parser.add_argument("--before", default="", metavar="TREE",
                        help="a fourth configuration, gpupair-before: the extender of the checkout TREE, run by "
                             "TREE/.venv/bin/python from TREE")
    args = parser.parse_args(argv)
    if args.before and not (Path(args.before) / "extender").is_dir():
        parser.error(f"--before {args.before}: not a gpupair checkout (no extender/ in it)")
    configs = configurations(args)
    bench = Bench(args)
    runs: list[Run] = []
    try:
        bench.start()
        for i in range(args.runs):
            for config in configs[i % len(configs):] + configs[:i % len(configs)]:
                runs.append(bench.run(config, seed=i + 1))
                print(f"  {config} run {i + 1}: {runs[-1].bound} bound in {runs[-1].span:.3f} s"
                      + (f", {len(runs[-1].binds)} binds timed in the logs" if runs[-1].binds else ""),
                      file=sys.stderr)
    finally:
        bench.plane.stop()
        stop_all()
        shutil.rmtree(bench.plane.directory, ignore_errors=True)
    report(runs, args)
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:  # the control plane is stopped by main's finally
        print("bench/real_scheduler.py: interrupted", file=sys.stderr)
        sys.exit(130)
