"""`gpupair verify`: the sidecar that asks its node's reporter for the pod's GPU verdict.

It proves who it is and nothing more: it sends the pod's projected, audience-bound
service-account token to the reporter on its own node (``http://$HOST_IP:$PORT/v1/verify``).
The reporter checks the token, reads the pod's devices from the kubelet itself, writes the
verdict annotations with its own credentials, and answers with the verdict; this process prints
the seed's TSV row and then idles until SIGTERM. While the reporter is unreachable, or the pod's
devices are not visible yet, it retries with exponential backoff.

It runs beside every multi-GPU pod, so it stays small: this module imports only the standard
library and gpupair's flag and log helpers, which do the same (about 21 MiB RSS when idle). ``--dry-run`` classifies given inputs with the gpupair core, which
is imported only on that path.
"""

from __future__ import annotations

import argparse
import base64
import binascii
import json
import logging
import select
import signal
import socket
import urllib.error
import urllib.request

from gpupair.command.flags import DURATION, UsageError, add_reporter_port, add_token_audience, add_topology_file, ip_address
from gpupair.command.service import add_common_flags, add_flag

DEFAULT_TOKEN_PATH = "/var/run/secrets/gpupair.io/serviceaccount/token"
VERIFY_PATH = "/v1/verify"
USER_AGENT = "gpupair-verify/0.1"
MAX_ANSWER_BYTES = 1024 * 1024

log = logging.getLogger("gpupair.verify")


class _Stop(BaseException):
    """Raised from the signal handler: leave whatever we are waiting on and exit cleanly. Not an
    Exception, like KeyboardInterrupt: a SIGTERM that lands while a log line is written must not be
    swallowed by logging's error handler (which catches Exception)."""


def configure(parser: argparse.ArgumentParser) -> None:
    add_flag(parser, "--host-ip", "", "this node's IP, where the reporter listens (also env HOST_IP, from the "
                                      "downward API's status.hostIP)", fallback_env=("HOST_IP",), type=ip_address)
    add_reporter_port(parser)
    add_flag(parser, "--token-path", DEFAULT_TOKEN_PATH, "projected service-account token (for --token-audience)")
    add_token_audience(parser, "audience the token must carry (the webhook sets it to its own --token-audience)")
    add_flag(parser, "--timeout", 10.0, "seconds to wait for one answer", bounds=DURATION)
    add_flag(parser, "--initial-backoff", 1.0, "first retry delay in seconds; doubles up to --max-backoff", bounds=DURATION)
    add_flag(parser, "--max-backoff", 60.0, "longest retry delay in seconds", bounds=DURATION)
    add_flag(parser, "--dry-run", False,
             "print the annotations a device set would get, from --topology-file and --devices; no network")
    add_topology_file(parser, "dry run: the node's layout (`nvidia-smi topo -m` output, topology JSON, a Node, "
                              "or `gpupair reporter --once --dry-run` output)")
    add_flag(parser, "--devices", "", "dry run: granted devices, e.g. 1,2 or GPU1+GPU2 or GPU UUIDs or PCI bus ids")
    add_flag(parser, "--planned", "", "dry run: the extender's plan, e.g. GPU1+GPU2")
    add_flag(parser, "--placement", "required",
             "dry run: the placement intent the pod asked: required, preferred or none")
    add_common_flags(parser)


def run(args: argparse.Namespace) -> int:
    if args.dry_run:
        return dry_run(args)
    if not args.host_ip:
        raise UsageError("no reporter address: set HOST_IP from status.hostIP, or pass --host-ip")
    if args.initial_backoff <= 0 or args.max_backoff < args.initial_backoff:
        raise UsageError("need 0 < --initial-backoff <= --max-backoff")

    def stop(signum, frame):
        raise _Stop()

    signal.signal(signal.SIGTERM, stop)  # the kubelet stopping the sidecar: exit 0
    signal.signal(signal.SIGINT, signal.default_int_handler)  # Ctrl-C: KeyboardInterrupt, exit 130 (gpupair.command.cli)
    try:
        with SignalWait() as waiter:
            answer = _verify_until_answered(args, waiter)
            print(answer["tsvRow"], flush=True)
            log.info("verdict", extra={"verdict": answer.get("verdict"), "pod": answer.get("pod"),
                                       "node": answer.get("node")})
            while True:  # a native sidecar stays up; the kubelet stops it after the app containers
                waiter.wait(None)
    except _Stop:
        return 0


class SignalWait:
    """Sleeps that a signal always ends. ``signal.pause()`` or ``time.sleep()`` miss a signal that
    lands after the interpreter last looked for one and before the call blocks: the handler then
    waits for the next signal (pause) or the whole sleep. Here the C-level handler also writes a byte
    to a socket (``signal.set_wakeup_fd``), so a wait that starts after the signal returns at once
    and the Python handler runs as it returns."""

    def __enter__(self) -> SignalWait:
        self._read, self._write = socket.socketpair()
        self._read.setblocking(False)
        self._write.setblocking(False)
        self._previous = signal.set_wakeup_fd(self._write.fileno(), warn_on_full_buffer=False)
        return self

    def __exit__(self, *exc: object) -> None:
        signal.set_wakeup_fd(self._previous)
        self._read.close()
        self._write.close()

    def wait(self, seconds: float | None) -> bool:
        """Return after ``seconds`` (None: no limit) or once a signal came, whichever is first:
        True when a signal ended it. A signal whose handler raises (SIGTERM here) raises here."""
        ready, _, _ = select.select([self._read], [], [], seconds)
        if not ready:
            return False
        try:
            self._read.recv(64)
        except BlockingIOError:
            pass
        return True


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


def token_audiences(token: str) -> list[str] | None:
    """The ``aud`` claim of a JWT, read without checking it (the reporter's TokenReview does);
    None when the token does not show one."""
    try:
        payload = token.split(".")[1]
        claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    except (IndexError, ValueError, binascii.Error):
        return None
    aud = claims.get("aud") if isinstance(claims, dict) else None
    if isinstance(aud, str):
        return [aud]
    if isinstance(aud, list) and all(isinstance(a, str) for a in aud):
        return aud
    return None


def ask(url: str, token_path: str, timeout: float, opener: urllib.request.OpenerDirector | None = None,
        audience: str | None = None) -> dict:
    """One attempt. Returns the reporter's answer; raises Retry saying why not."""
    try:
        with open(token_path, encoding="ascii") as handle:
            token = handle.read().strip()  # re-read each time: the kubelet rotates it
    except (OSError, UnicodeDecodeError) as exc:
        raise Retry(f"cannot read the token at {token_path}: {exc}") from None
    if not token:
        raise Retry(f"the token file {token_path} is empty")
    audiences = token_audiences(token) if audience else None
    if audiences is not None and audience not in audiences:
        raise Retry(f"the token at {token_path} is for audience {', '.join(audiences)}, not {audience}: "
                    "the webhook's and the reporter's --token-audience differ")
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


def _verify_until_answered(args: argparse.Namespace, waiter: SignalWait) -> dict:
    url = reporter_url(args.host_ip, args.reporter_port)
    opener = _opener()
    delay = args.initial_backoff
    attempt = 0
    while True:
        attempt += 1
        try:
            return ask(url, args.token_path, args.timeout, opener, args.token_audience)
        except Retry as retry:
            wait = min(args.max_backoff, retry.after if retry.after is not None else delay)
            log.warning("no verdict yet; retrying", extra={"reason": str(retry), "attempt": attempt, "retry_in": wait})
            waiter.wait(wait)
            delay = min(args.max_backoff, delay * 2)


# --- dry run: the gpupair core, imported only here ----------------------------------------------


def dry_run(args: argparse.Namespace) -> int:
    if not args.topology_file or not args.devices:
        raise UsageError("--dry-run needs --topology-file FILE and --devices LIST")
    from gpupair.verifier.dry_run import annotations_for

    try:
        annotations = annotations_for(args.topology_file, args.devices, args.planned or None, args.placement)
    except ValueError as exc:  # LayoutFileError is one
        raise UsageError(str(exc)) from None
    print(json.dumps(annotations, indent=2, sort_keys=True))
    return 0
