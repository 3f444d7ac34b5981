"""The command-line contract every `gpupair` subcommand follows (docs/cli.md), kept in one place.

- **Every flag reads an environment variable.** A concept every command means the same way
  (``SHARED_FLAGS``: the kubeconfig, the GPU resource name, the reporter's port, ...) has one
  name, ``GPUPAIR_<FLAG>``. Every other flag reads ``GPUPAIR_<COMMAND>_<FLAG>``, so a value
  meant for one command never reaches another: ``GPUPAIR_TIMEOUT`` used to be 180 s for audit
  and 10 s for verify.
- **One flag name per concept.** The shared concepts are declared once, as flag groups
  (``add_kube_flags``, ``add_tls_flags``, ...), with their defaults from gpupair.kubewire.defaults.
- **A rename keeps the old name working.** ``add_flag(..., deprecated=..., old_env=...)`` reads a
  renamed flag or variable as a deprecated alias, with a warning naming the new spelling. None is
  declared now: the names of the unreleased 0.1 were dropped, not kept.
- **Every value is checked once, at the boundary, whatever its source.** A flag, its variable and
  a deprecated alias go through one converter: its type, ``bounds`` (a ``Range``) and choices; a
  float is finite. A bad variable is reported by its name (``GPUPAIR_LOG_LEVEL: ...``), a bad flag
  by its flag (``--arrivals: must be positive, got 0``).
- **One error format, three exit statuses.** A usage error (``UsageError``: a value or combination
  the command cannot work with) prints one line, ``gpupair CMD: error: ...``, and exits 2; so does
  a bad input file (``InputError``); both are declared in gpupair.kubewire.usage_errors, since the
  layers below the command line raise them too. A runtime failure (``Failure``: the API server
  unreachable, a port in use) is one line and exit 1. Ctrl-C is one line and exit 130. gpupair.command.cli
  does the printing.

tests/core/command/test_cli_contract.py walks every subcommand's parser and fails where a command breaks one
of these rules. This module stays on the standard library: every ``configure`` imports it.
"""

from __future__ import annotations

import argparse
import ipaddress
import logging
import math
import os
import re
from dataclasses import dataclass, field
from typing import Any

from gpupair.kubewire import defaults
from gpupair.kubewire.usage_errors import InputError, UsageError  # raised below the command line too

ENV_PREFIX = "GPUPAIR_"
LOG_LEVELS = ("debug", "info", "warning", "error")

# Concepts that mean one thing to every command that has them: one flag name, one variable.
SHARED_FLAGS = frozenset({
    "--log-level", "--kubeconfig", "--context", "--resource-name", "--reporter-port", "--token-audience",
    "--lease-namespace", "--default-placement", "--plans-namespace",
})

# Names a concept had (or might be given) -> the contract's name. The contract test refuses them
# as flags of their own.
SYNONYMS = {
    "--resource": "--resource-name",
    "--tls-cert": "--tls-cert-file",
    "--tls-key": "--tls-private-key-file",
    "--tls-key-file": "--tls-private-key-file",
    "--topology": "--topology-file",
    "--layout": "--topology-file",
    "--kube-config": "--kubeconfig",
    "--kube-context": "--context",
    "--loglevel": "--log-level",
    "--heartbeat-namespace": "--lease-namespace",
}

_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off", "")

log = logging.getLogger("gpupair.flags")


class Failure(RuntimeError):
    """A runtime failure the user cannot fix by retyping the command (the API server unreachable, a
    port in use): one line naming what and where, exit 1."""


@dataclass(frozen=True)
class Range:
    """The values a number flag accepts; ``why`` says what is wrong with one outside them."""

    low: float | None = None
    high: float | None = None
    low_open: bool = False  # low itself refused: "positive" rather than "0 or more"

    def why(self, value: float) -> str | None:
        too_low = self.low is not None and (value <= self.low if self.low_open else value < self.low)
        too_high = self.high is not None and value > self.high
        if not (too_low or too_high):
            return None
        return f"must be {self.describe()}, got {_number(value)}"

    def describe(self) -> str:
        if self.low == 0 and self.low_open and self.high is None:
            return "positive"
        low = None if self.low is None else f"{'above' if self.low_open else 'at least'} {_number(self.low)}"
        if self.high is None:
            return low or "any number"
        if low and not self.low_open:
            return f"between {_number(self.low)} and {_number(self.high)}"
        return f"{low} and at most {_number(self.high)}" if low else f"at most {_number(self.high)}"


def _number(value: float) -> str:
    return str(value) if isinstance(value, int) else f"{value:g}"


NON_NEGATIVE = Range(0)
SHARE = Range(0, 1)  # a probability or a share of pods
DURATION = Range(0, 7 * 86400, low_open=True)  # seconds, more than 0 and at most a week
OPTIONAL_DURATION = Range(0, 7 * 86400)  # the same, or 0 for off
PORT = Range(1, 65535)

def ip_address(text: str) -> str:
    """An IP address (v4, or v6 with or without brackets) as text; empty for none given."""
    return str(ipaddress.ip_address(text.strip().strip("[]"))) if text.strip() else ""


# RFC 1123 host names, as a listen address may be one ("localhost"); 253 characters at most.
_HOST_LABEL = re.compile(r"(?!-)[A-Za-z0-9-]{1,63}(?<!-)")


def listen_address(text: str) -> str:
    """An address to listen on: an IP address or a host name (resolved when the server binds)."""
    text = text.strip()
    try:
        return ip_address(text) if text else ""
    except ValueError:
        pass
    if len(text) > 253 or not all(_HOST_LABEL.fullmatch(label) for label in text.rstrip(".").split(".")):
        raise ValueError(text)
    return text


# An extended resource: a domain-prefixed name outside kubernetes.io (the apiserver's rule).
_EXTENDED_RESOURCE = re.compile(r"[a-z0-9]([-a-z0-9.]*[a-z0-9])?/[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?")


def extended_resource(text: str) -> str:
    """An extended resource name (``gpupair.io/claim``); empty for none given."""
    text = text.strip()
    if text and (not _EXTENDED_RESOURCE.fullmatch(text) or text.split("/")[0].endswith("kubernetes.io")):
        raise ValueError(text)
    return text


def index_pairs(text: str) -> tuple[tuple[int, int], ...]:
    """``0+1,2+3`` -> ((0, 1), (2, 3)): pairs of distinct device indices, none used twice."""
    pairs, seen = [], set()
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        a, b = (int(n) for n in item.split("+"))  # ValueError unless exactly two integers
        if a < 0 or b < 0 or a == b or {a, b} & seen:
            raise ValueError(text)
        seen |= {a, b}
        pairs.append((min(a, b), max(a, b)))
    return tuple(pairs)


# An object name (a Secret's, for one): an RFC 1123 subdomain, as the apiserver checks it.
_OBJECT_NAME = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


def object_names(text: str) -> tuple[str, ...]:
    """Comma-separated Kubernetes object names (``name_list``), each one the apiserver accepts:
    a bad one written into pods would have the apiserver refuse every pod it reaches."""
    names = name_list(text)
    if any(len(name) > 253 or not _OBJECT_NAME.fullmatch(name) for name in names):
        raise ValueError(text)
    return names


_KIND_WORDS = {int: "an integer", float: "a number", ip_address: "an IP address",
               listen_address: "an IP address or a host name",
               extended_resource: "an extended resource name (domain/name, outside kubernetes.io)",
               index_pairs: "pairs of GPU indices joined by +, comma-separated, each index once (0+1,2+3)",
               object_names: "object names, comma-separated (lowercase letters, digits, '-' and '.')"}


class BadValue:
    """The default of a flag whose variable held a bad value: an error only if the flag is not
    given on the command line (a flag beats its variable), so it is reported after parsing."""

    def __init__(self, source: str, why: str) -> None:
        self.source, self.why = source, why

    def __repr__(self) -> str:  # what --help would show as the default
        return f"<bad {self.source}>"


def _converter(kind: Any, bounds: Range | None) -> Any:
    """argparse's ``type`` for a flag: parse, then refuse inf/nan and values outside ``bounds``."""
    def convert(text: str) -> Any:
        try:
            value = kind(text)
        except (TypeError, ValueError):
            raise argparse.ArgumentTypeError(f"expected {_KIND_WORDS.get(kind, kind.__name__)}, got {text!r}") from None
        if isinstance(value, float) and not math.isfinite(value):
            raise argparse.ArgumentTypeError(f"must be a finite number, got {text!r}")
        why = bounds.why(value) if bounds is not None and isinstance(value, (int, float)) else None
        if why:
            raise argparse.ArgumentTypeError(why)
        return value

    convert.__name__ = getattr(kind, "__name__", "value")
    convert.bounds = bounds  # type: ignore[attr-defined]  # for docs/cli.md
    return convert


def _checked(raw: str, source: str, convert: Any, choices: Any) -> Any:
    """The value of a variable, or a BadValue saying why it is none."""
    try:
        value = convert(raw) if convert is not None else raw
    except argparse.ArgumentTypeError as error:
        return BadValue(source, f"{error}")
    if choices is not None and value not in choices:
        return BadValue(source, f"{raw!r} is not one of {', '.join(map(str, choices))}")
    return value


def bad_value(args: argparse.Namespace) -> BadValue | None:
    """The first flag default that is a bad variable's value (checked by gpupair.command.cli after parsing)."""
    return next((value for value in vars(args).values() if isinstance(value, BadValue)), None)


@dataclass(frozen=True)
class FlagEnv:
    """Where a flag's default comes from, for the contract test and docs/cli.md."""

    command: str | None
    env: str
    deprecated_env: tuple[str, ...] = ()
    fallback_env: tuple[str, ...] = ()  # not ours, not deprecated (the downward API's NODE_NAME)
    default: Any = None  # the code's default, before any environment


@dataclass
class _Deprecations:
    used: list[tuple[str, str]] = field(default_factory=list)  # (old spelling, new spelling)


def command_of(parser: argparse.ArgumentParser) -> str | None:
    """The subcommand this parser configures (gpupair.command.cli names it), or None for a bare parser."""
    return getattr(parser, "gpupair_command", None)


def env_name(flag: str, command: str | None) -> str:
    stem = flag.lstrip("-").replace("-", "_").upper()
    if command is None or flag in SHARED_FLAGS:
        return ENV_PREFIX + stem
    return f"{ENV_PREFIX}{command.upper()}_{stem}"


def _deprecations(parser: argparse.ArgumentParser) -> _Deprecations:
    found = getattr(parser, "_gpupair_deprecations", None)
    if found is None:
        found = _Deprecations()
        parser._gpupair_deprecations = found  # type: ignore[attr-defined]
    return found


class _DeprecatedAlias(argparse.Action):
    """An old flag name: stores into the new flag's dest and leaves a warning to log."""

    def __init__(self, option_strings, dest, new_flag: str, **kwargs) -> None:
        self.new_flag = new_flag
        super().__init__(option_strings, dest, **kwargs)

    def __call__(self, parser, namespace, values, option_string=None) -> None:
        _deprecations(parser).used.append((option_string or self.option_strings[0], self.new_flag))
        setattr(namespace, self.dest, values)


def add_flag(parser: argparse.ArgumentParser, flag: str, default: Any, help: str, *,
             deprecated: tuple[str, ...] = (), old_env: tuple[str, ...] = (),
             fallback_env: tuple[str, ...] = (), bounds: Range | None = None, short: str = "",
             **kwargs: Any) -> argparse.Action:
    """Add ``--flag`` with its default from the environment (see the module docstring for the
    variable's name). ``deprecated`` are the flag's old names, still accepted. ``old_env`` are the
    variables it was read from before a rename, still read with a warning.
    ``fallback_env`` are read last and silently (the downward API's, named by manifests).

    ``short`` is a one-letter spelling sharing the flag's help entry (``-o, --output``).
    ``bounds`` is the range a number must fall in. The variable's value goes through the flag's
    own converter and choices here; a bad one becomes a ``BadValue`` default that gpupair.command.cli
    reports by the variable's name, unless the flag itself is given."""
    command = command_of(parser)
    env = env_name(flag, command)
    old_env = tuple(name for name in dict.fromkeys(old_env) if name != env)
    source, raw = _read_environment(parser, env, old_env, fallback_env)
    value = default
    if isinstance(default, bool):
        kwargs.setdefault("action", argparse.BooleanOptionalAction)
        if raw is not None:
            word = raw.strip().lower()
            value = word in _TRUE if word in _TRUE + _FALSE else \
                BadValue(source, f"expected one of {', '.join(_TRUE + _FALSE[:-1])}, got {raw!r}")
    else:
        kind = kwargs.get("type", type(default) if default is not None else None)
        if kind is not None:
            kwargs["type"] = _converter(kind, bounds)
        if raw is not None:
            value = _checked(raw, source, kwargs.get("type"), kwargs.get("choices"))
    shown = f"env {env}" if default in ("", None) else f"env {env}, default %(default)s"  # no empty default
    action = parser.add_argument(*((short,) if short else ()), flag, default=value, help=f"{help} ({shown})", **kwargs)
    action.gpupair_env = FlagEnv(command, env, old_env, tuple(fallback_env), default)  # type: ignore[attr-defined]
    for old in deprecated:
        alias_kwargs = {key: kwargs[key] for key in ("type", "choices", "metavar") if key in kwargs}
        parser.add_argument(old, dest=action.dest, action=_DeprecatedAlias, new_flag=flag,
                            default=argparse.SUPPRESS, help=argparse.SUPPRESS, **alias_kwargs)  # hidden, as kubectl does
    return action


def long_name(action: argparse.Action) -> str:
    """A flag's --long spelling (a short one may come first: ``-o, --output``)."""
    return next((s for s in action.option_strings if s.startswith("--") and not s.startswith("--no-")),
                action.option_strings[0])


def _read_environment(parser, env: str, old_env: tuple[str, ...], fallback_env: tuple[str, ...]):
    """(variable, value) of the first of ``env``, ``old_env``, ``fallback_env`` that is set."""
    if env in os.environ:
        return env, os.environ[env]
    for name in old_env:
        if name in os.environ:
            _deprecations(parser).used.append((name, env))
            return name, os.environ[name]
    for name in fallback_env:
        if os.environ.get(name):
            return name, os.environ[name]
    return env, None


def warn_deprecated(parser: argparse.ArgumentParser) -> None:
    """Log each old name the command was given, once (after logging is set up)."""
    found = _deprecations(parser)
    for old, new in dict.fromkeys(found.used):
        log.warning(f"{old} is deprecated; use {new}", extra={"deprecated": old, "use": new})
    found.used.clear()


# --- the shared flag groups ---------------------------------------------------------------------


def add_log_level(parser: argparse.ArgumentParser) -> None:
    add_flag(parser, "--log-level", "info", "log level: " + ", ".join(LOG_LEVELS), type=str.lower,
             choices=LOG_LEVELS)


def add_kube_flags(parser: argparse.ArgumentParser) -> None:
    """--kubeconfig and --context, for every command that talks to the API server; the search
    order is gpupair.kubeclient.kube.api_client's."""
    add_flag(parser, "--kubeconfig", "",
             "kubeconfig file; empty: $KUBECONFIG, then the in-cluster service account, then ~/.kube/config")
    add_flag(parser, "--context", "", "kubeconfig context; empty: the kubeconfig's current context")


def add_resource_name(parser: argparse.ArgumentParser) -> None:
    add_flag(parser, "--resource-name", defaults.RESOURCE_NAME,
             "extended resource the device plugin advertises for a GPU")


def add_tls_flags(parser: argparse.ArgumentParser, cert: str = "", key: str = "") -> None:
    """The serving certificate, as Kubernetes' own binaries name it; gpupair.command.tls reloads it."""
    add_flag(parser, "--tls-cert-file", cert, "serving certificate (PEM, chain first); reloaded when it changes")
    add_flag(parser, "--tls-private-key-file", key, "private key of --tls-cert-file (PEM); reloaded with it")


def add_reporter_port(parser: argparse.ArgumentParser) -> None:
    add_flag(parser, "--reporter-port", defaults.REPORTER_PORT,
             "port of the node reporter's /v1/verify (host network; the reporter's --port)", bounds=PORT)


def add_token_audience(parser: argparse.ArgumentParser, help: str) -> None:
    add_flag(parser, "--token-audience", defaults.TOKEN_AUDIENCE, help)


def add_lease_namespace(parser: argparse.ArgumentParser, help: str) -> None:
    """Where the reporters' node Leases live: the reporter renews its own there, the extender and
    `gpupair status` read them."""
    from gpupair.kubewire import leases  # standard library only

    add_flag(parser, "--lease-namespace", leases.own_namespace(),
             f"namespace of the reporters' node Leases (default: this pod's); {help}")


def add_plans_namespace(parser: argparse.ArgumentParser, help: str) -> None:
    """Where the defrag plans ConfigMap lives (gpupair/kubewire/defrag_plans.py): the defrag
    service writes it, the extender reads it; both must name one namespace, gpupair's."""
    from gpupair.kubewire import leases  # standard library only (defrag_plans would import pydantic)

    add_flag(parser, "--plans-namespace", leases.own_namespace(),
             f"namespace of the defrag plans ConfigMap, gpupair-defrag-plans (default: this pod's); {help}")


def add_default_placement(parser: argparse.ArgumentParser) -> None:
    """The cluster default placement intent; the extender and the webhook must agree on it."""
    from gpupair.decide.pod.intent import Intent  # standard library only

    add_flag(parser, "--default-placement", Intent.REQUIRED.value,
             "placement intent of pods with no gpupair.io/placement annotation (and, at the webhook, "
             "no namespace default): required, preferred or none", choices=tuple(i.value for i in Intent))


def add_topology_file(parser: argparse.ArgumentParser, help: str) -> None:
    """A node's layout from a file, in any format gpupair.topology.layout_file reads."""
    add_flag(parser, "--topology-file", "", help)


def name_list(text: str) -> tuple[str, ...]:
    """A comma-separated list of names (``a,b``) in its order, each once; blanks and empty items
    dropped."""
    return tuple(dict.fromkeys(name.strip() for name in text.split(",") if name.strip()))


def name_set(text: str) -> frozenset[str]:
    """A comma-separated list of names (``a,b``) as a set; blanks and empty items dropped."""
    return frozenset(name.strip() for name in text.split(",") if name.strip())


def add_gpu_device_classes(parser: argparse.ArgumentParser, help: str) -> None:
    """The DRA DeviceClasses whose devices are GPUs: what a claim asks of them is a GPU request.
    The value is a set (``name_set``)."""
    add_flag(parser, "--gpu-device-classes", ",".join(sorted(defaults.GPU_DEVICE_CLASSES)),
             f"DRA DeviceClasses whose devices are GPUs (comma-separated): {help}", type=name_set)


def add_shared_resources(parser: argparse.ArgumentParser, help: str) -> None:
    """The extended resources of GPU shares (time-slicing's renamed resource). The value is a
    set (``name_set``)."""
    add_flag(parser, "--shared-resources", ",".join(defaults.SHARED_RESOURCE_NAMES),
             f"extended resources of GPU shares (comma-separated; time-slicing's renamed resource): {help}",
             type=name_set)


def add_stale_after(parser: argparse.ArgumentParser, help: str = "") -> None:
    """How old a node's newest heartbeat may be before its report counts as stale; ``gpupair
    status`` judges as the extender does, so both take one default and one range."""
    add_flag(parser, "--stale-after", defaults.STALE_AFTER,
             "seconds after which a node's report counts as stale (0: never), from the newest of the "
             f"report's reportedAt and the node's Lease renewal{help}", bounds=OPTIONAL_DURATION)


def add_dra_driver(parser: argparse.ArgumentParser, help: str, *, on: bool = True) -> None:
    """The DRA driver whose devices are GPUs (resource.k8s.io/v1 ResourceSlices). ``on=False``:
    off unless set, for services whose RBAC for DRA comes with deploy/components/dra."""
    from gpupair.kubewire.defaults import DRA_DRIVER

    add_flag(parser, "--dra-driver", DRA_DRIVER if on else "",
             f"DRA driver that publishes the GPUs as devices (e.g. {DRA_DRIVER}); {help}")
