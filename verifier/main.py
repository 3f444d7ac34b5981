"""`gpupair verify`: the sidecar that asks its node's reporter for the pod's GPU verdict.

It proves who it is and nothing more: it sends the pod's projected, audience-bound
service-account token to the reporter on its own node (``http://$HOST_IP:$PORT/v1/verify``).
The reporter checks the token, reads the pod's devices from the kubelet itself, writes the
verdict annotations with its own credentials, and answers with the verdict; this process prints
the seed's TSV row and then idles until SIGTERM. While the reporter is unreachable, or the pod's
devices are not visible yet, it retries with exponential backoff.

It runs beside every multi-GPU pod, so it stays small: this module imports only the standard
library (about 21 MiB RSS when idle). ``--dry-run`` classifies given inputs with the gpupair core, which
is imported only on that path.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
import urllib.error
import urllib.request

DEFAULT_TOKEN_PATH = "/var/run/secrets/gpupair.io/serviceaccount/token"
VERIFY_PATH = "/v1/verify"
USER_AGENT = "gpupair-verify/0.1"
MAX_ANSWER_BYTES = 1024 * 1024


class _Stop(Exception):
    """Raised from the signal handler: leave whatever we are waiting on and exit cleanly."""


def _env(*names: str, default: str = "") -> str:
    for name in names:
        value = os.environ.get(name)
        if value:
            return value
    return default


def configure(parser: argparse.ArgumentParser) -> None:
    # String defaults from the environment go through ``type`` like typed-in values, so a bad
    # GPUPAIR_* value is reported by argparse rather than crashing.
    parser.add_argument("--host-ip", default=_env("GPUPAIR_HOST_IP", "HOST_IP"),
                        help="this node's IP, where the reporter listens (env GPUPAIR_HOST_IP or HOST_IP)")
    parser.add_argument("--reporter-port", type=int, default=_env("GPUPAIR_REPORTER_PORT", default="9400"),
                        help="the reporter's port (env GPUPAIR_REPORTER_PORT, default %(default)s)")
    parser.add_argument("--token-path", default=_env("GPUPAIR_TOKEN_PATH", default=DEFAULT_TOKEN_PATH),
                        help="projected service-account token for audience gpupair-reporter "
                             "(env GPUPAIR_TOKEN_PATH, default %(default)s)")
    parser.add_argument("--timeout", type=float, default=_env("GPUPAIR_TIMEOUT", default="10"),
                        help="seconds to wait for one answer (env GPUPAIR_TIMEOUT, default %(default)s)")
    parser.add_argument("--initial-backoff", type=float, default=_env("GPUPAIR_INITIAL_BACKOFF", default="1"),
                        help="first retry delay in seconds; doubles up to --max-backoff (default %(default)s)")
    parser.add_argument("--max-backoff", type=float, default=_env("GPUPAIR_MAX_BACKOFF", default="60"),
                        help="longest retry delay in seconds (default %(default)s)")
    parser.add_argument("--dry-run", action="store_true",
                        help="print the annotations a device set would get, from --layout and --devices; no network")
    parser.add_argument("--layout", help="dry run: the node's layout (gpupair.io/topology JSON, a Node JSON, "
                                         "or `nvidia-smi topo -m` output)")
    parser.add_argument("--devices", help="dry run: granted devices, e.g. 1,2 or GPU1+GPU2 or GPU UUIDs or PCI bus ids")
    parser.add_argument("--planned", help="dry run: the extender's plan, e.g. GPU1+GPU2")
    parser.add_argument("--placement", default="required",
                        help="dry run: the placement intent the pod asked: required (default), preferred or none")


def run(args: argparse.Namespace) -> int:
    if args.dry_run:
        return dry_run(args)
    if not args.host_ip:
        _log("error", "no reporter address: set HOST_IP from status.hostIP, or pass --host-ip")
        return 2
    if args.initial_backoff <= 0 or args.max_backoff < args.initial_backoff:
        _log("error", "need 0 < --initial-backoff <= --max-backoff")
        return 2

    def stop(signum, frame):
        raise _Stop()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    try:
        answer = _verify_until_answered(args)
        print(answer["tsvRow"], flush=True)
        _log("info", "verdict", verdict=answer.get("verdict"), pod=answer.get("pod"), node=answer.get("node"))
        while True:  # a native sidecar stays up; the kubelet stops it after the app containers
            signal.pause()
    except _Stop:
        return 0


def reporter_url(host_ip: str, port: int) -> str:
    host = f"[{host_ip}]" if ":" in host_ip and not host_ip.startswith("[") else host_ip
    return f"http://{host}:{port}{VERIFY_PATH}"


class Retry(Exception):
    def __init__(self, message: str, after: float | None = None) -> None:
        super().__init__(message)
        self.after = after


def _opener() -> urllib.request.OpenerDirector:
    # The reporter is on this node: never send the token through a cluster-wide HTTP proxy.
    return urllib.request.build_opener(urllib.request.ProxyHandler({}))


def ask(url: str, token_path: str, timeout: float, opener: urllib.request.OpenerDirector | None = None) -> dict:
    """One attempt. Returns the reporter's answer; raises Retry saying why not."""
    try:
        with open(token_path, encoding="ascii") as handle:
            token = handle.read().strip()  # re-read each time: the kubelet rotates it
    except (OSError, UnicodeDecodeError) as exc:
        raise Retry(f"cannot read the token at {token_path}: {exc}") from None
    if not token:
        raise Retry(f"the token file {token_path} is empty")
    request = urllib.request.Request(
        url,
        data=b"{}",
        method="POST",
        headers={
            "Authorization": f"Bearer {token}",
            "Content-Type": "application/json",
            "Accept": "application/json",
            "User-Agent": USER_AGENT,
        },
    )
    try:
        with (opener or _opener()).open(request, timeout=timeout) as response:
            body = response.read(MAX_ANSWER_BYTES)
    except urllib.error.HTTPError as exc:
        raise Retry(_refusal(exc), _retry_after(exc.headers.get("Retry-After"))) from None
    except (urllib.error.URLError, OSError) as exc:  # refused, unreachable, timed out
        reason = getattr(exc, "reason", exc)
        raise Retry(f"reporter at {url} unreachable: {reason}") from None
    try:
        answer = json.loads(body)
    except ValueError:
        raise Retry(f"reporter at {url} answered something that is not JSON") from None
    if not isinstance(answer, dict) or not isinstance(answer.get("tsvRow"), str):
        raise Retry(f"reporter at {url} answered without a verdict row; is it a gpupair reporter?")
    return answer


def _refusal(error: urllib.error.HTTPError) -> str:
    try:
        detail = json.loads(error.read(MAX_ANSWER_BYTES)).get("message", "")
    except (ValueError, AttributeError, OSError):
        detail = ""
    return f"reporter answered HTTP {error.code}" + (f": {detail}" if detail else "")


def _retry_after(value: str | None) -> float | None:
    try:
        return max(0.0, float(value)) if value else None
    except ValueError:
        return None


def _verify_until_answered(args: argparse.Namespace) -> dict:
    url = reporter_url(args.host_ip, args.reporter_port)
    opener = _opener()
    delay = args.initial_backoff
    attempt = 0
    while True:
        attempt += 1
        try:
            return ask(url, args.token_path, args.timeout, opener)
        except Retry as retry:
            wait = min(args.max_backoff, retry.after if retry.after is not None else delay)
            _log("warning", "no verdict yet; retrying", reason=str(retry), attempt=attempt, retry_in=wait)
            time.sleep(wait)
            delay = min(args.max_backoff, delay * 2)


def _log(level: str, message: str, **fields) -> None:
    entry = {"ts": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "level": level,
             "logger": "gpupair.verify", "msg": message, **fields}
    print(json.dumps(entry, default=str), file=sys.stderr, flush=True)


# --- dry run: the gpupair core, imported only here ----------------------------------------------


def dry_run(args: argparse.Namespace) -> int:
    if not args.layout or not args.devices:
        print("gpupair verify --dry-run needs --layout FILE and --devices LIST", file=sys.stderr)
        return 2
    from verifier.dry_run import annotations_for

    try:
        annotations = annotations_for(args.layout, args.devices, args.planned, args.placement)
    except (OSError, ValueError) as exc:
        print(f"gpupair verify --dry-run: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(annotations, indent=2, sort_keys=True))
    return 0
