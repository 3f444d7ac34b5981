"""Time whole `gpupair` processes against `python -c pass`, in one run.

Start-up is what an operator and every multi-GPU pod pay: `gpupair verify` starts in each
pod's sidecar, `gpupair --help` is the first thing anyone types. Each case is a fresh process
of this interpreter (the installed `gpupair` console script where there is one); the cases run
round-robin so machine noise falls on all of them alike. It prints the median and p90 wall
time, the ratio to the baseline's median, and the target (0.3 s) for the two that have one.

`verify` is timed up to the moment it prints the verdict row it got from a reporter stand-in
on a loopback port (the sidecar's whole job; it then idles until SIGTERM, which is not
timed). The other subcommands' `--help` are printed for reference: they import what their
service needs, by design.

    .venv/bin/python bench/startup.py               # 15 runs of each case
    .venv/bin/python bench/startup.py --runs 40 --json startup.json
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TARGET_S = 0.3
TSV_ROW = "1\tbench-pod\tverify\tGPU0+GPU1\t0000:01:00.0+0000:02:00.0\t0+0\tNV12\tPASS"
OTHER_HELPS = ("extender", "webhook", "reporter", "certs", "audit", "simulate")


def gpupair_command() -> list[str]:
    """The console script next to this interpreter (as installed in the image), else -m (-P: not
    the working directory, this checkout, first on sys.path)."""
    script = Path(sys.executable).parent / "gpupair"
    return [str(script)] if script.exists() else [sys.executable, "-P", "-m", "gpupair.command.cli"]


class _Reporter(BaseHTTPRequestHandler):
    """Answers /v1/verify at once, as the node's reporter does once a pod's devices are known."""

    def do_POST(self) -> None:  # noqa: N802 - http.server's naming
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        body = json.dumps({"tsvRow": TSV_ROW, "verdict": "PASS", "pod": "bench/bench-pod", "node": "n1"}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args) -> None:
        pass


def time_exit(argv: list[str], env: dict[str, str]) -> float:
    """Seconds from spawn to exit; the command must succeed."""
    started = time.perf_counter()
    result = subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env, cwd=ROOT)
    elapsed = time.perf_counter() - started
    if result.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} exited {result.returncode}: {result.stderr.decode()[-500:]}")
    return elapsed


def time_verdict(argv: list[str], env: dict[str, str]) -> float:
    """Seconds from spawn to the sidecar's verdict row on stdout; then stop it with SIGTERM."""
    started = time.perf_counter()
    process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env, cwd=ROOT)
    try:
        line = process.stdout.readline().decode().rstrip("\n")
        elapsed = time.perf_counter() - started
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(10)
    if line != TSV_ROW:
        raise RuntimeError(f"verify printed {line!r}, not the reporter's row (exit {process.returncode})")
    return elapsed


def summary(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    return {"n": len(ordered), "median": statistics.median(ordered),
            "p90": ordered[min(len(ordered) - 1, round(0.9 * (len(ordered) - 1)))], "min": ordered[0]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=15, help="processes per case (default %(default)s)")
    parser.add_argument("--no-others", action="store_true", help="skip the other subcommands' --help")
    parser.add_argument("--json", help="also write the figures here")
    args = parser.parse_args(argv)

    gpupair = gpupair_command()
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Reporter)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    scratch = Path(tempfile.mkdtemp(prefix="gpupair-startup-"))
    token = scratch / "token"
    token.write_text("bench-token\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUPAIR_")}
    env |= {"GPUPAIR_VERIFY_HOST_IP": "127.0.0.1", "GPUPAIR_REPORTER_PORT": str(server.server_address[1]),
            "GPUPAIR_VERIFY_TOKEN_PATH": str(token)}

    cases: dict[str, tuple] = {
        "python -c pass": (time_exit, [sys.executable, "-c", "pass"], None),
        "gpupair --help": (time_exit, [*gpupair, "--help"], TARGET_S),
        "gpupair verify": (time_verdict, [*gpupair, "verify"], TARGET_S),
        "gpupair verify --help": (time_exit, [*gpupair, "verify", "--help"], TARGET_S),
    }
    if not args.no_others:
        cases |= {f"gpupair {name} --help": (time_exit, [*gpupair, name, "--help"], None) for name in OTHER_HELPS}
    samples: dict[str, list[float]] = {name: [] for name in cases}
    try:
        for name, (timer, command, _) in cases.items():  # one unmeasured run each: warm the page cache
            timer(command, env)
        for _ in range(args.runs):
            for name, (timer, command, _) in cases.items():
                samples[name].append(timer(command, env))
    finally:
        server.shutdown()
        shutil.rmtree(scratch, ignore_errors=True)

    base = summary(samples["python -c pass"])
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.2f}; "
          f"{args.runs} processes per case, round-robin; gpupair = {' '.join(gpupair)}")
    print(f"{'case':<26}{'median':>9}{'p90':>9}{'min':>9}{'x baseline':>12}{'target':>9}  met")
    rows = []
    for name, (_, _, target) in cases.items():
        figures = summary(samples[name])
        ratio = figures["median"] / base["median"]
        met = "" if target is None else ("yes" if figures["p90"] <= target else "NO")
        print(f"{name:<26}{figures['median']:>8.3f}s{figures['p90']:>8.3f}s{figures['min']:>8.3f}s{ratio:>11.1f}x"
              f"{'' if target is None else f'{target:.1f}s':>9}  {met}")
        rows.append({"case": name, **figures, "ratio": ratio, "target": target})
    print("wall time of whole processes; verify until its verdict row is printed; "
          "'met' checks p90 against the target")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
