"""The command-line contract every `gpupair` subcommand follows (docs/cli.md), kept in one place.

- **Every flag reads an environment variable.** A concept every command means the same way
  (``SHARED_FLAGS``: the kubeconfig, the GPU resource name, the reporter's port, ...) has one
  name, ``GPUPAIR_<FLAG>``. Every other flag reads ``GPUPAIR_<COMMAND>_<FLAG>``, so a value
  meant for one command never reaches another: ``GPUPAIR_TIMEOUT`` used to be 180 s for audit
  and 10 s for verify.
- **One flag name per concept.** The shared concepts are declared once, as flag groups
  (``add_kube_flags``, ``add_tls_flags``, ...), with their defaults from gpupair.defaults.
- **Old names keep working.** A renamed flag (``--resource``, ``--tls-cert``, ...) and the
  unprefixed variables of the commands that existed before this contract are read as deprecated
  aliases; using one logs a warning that names the new spelling.
- **One usage-error format.** ``run`` raises ``UsageError``; gpupair.cli prints it the way
  argparse prints its own (``gpupair CMD: error: ...``, after the usage line) and exits 2.

tests/core/test_cli_contract.py walks every subcommand's parser and fails where a command breaks one
of these rules. This module stays on the standard library: every ``configure`` imports it.
"""

from __future__ import annotations

import argparse
import logging
import os
from dataclasses import dataclass, field
from typing import Any

from gpupair import defaults

ENV_PREFIX = "GPUPAIR_"
LOG_LEVELS = ("debug", "info", "warning", "error")

# Concepts that mean one thing to every command that has them: one flag name, one variable.
SHARED_FLAGS = frozenset({
    "--log-level", "--kubeconfig", "--context", "--resource-name", "--reporter-port", "--token-audience",
    "--lease-namespace", "--default-placement",
})

# Names a concept had (or might be given) -> the contract's name. A command may accept the old
# name only as a deprecated alias; the contract test refuses it as a flag of its own.
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

# Commands released before the contract read GPUPAIR_<FLAG> for every flag; those names stay
# accepted (deprecated) so an upgrade keeps existing manifests working. Newer commands never had them.
LEGACY_ENV_COMMANDS = frozenset({"webhook", "verify", "certs", "extender", "simulate", "audit", "reporter"})

_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off", "")

log = logging.getLogger("gpupair.flags")


class UsageError(ValueError):
    """A flag value or combination the command cannot work with (exit 2, argparse's format)."""


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
    """The subcommand this parser configures (gpupair.cli names it), or None for a bare parser."""
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
             deprecated: tuple[str, ...] = (), old_env: tuple[str, ...] | None = None,
             fallback_env: tuple[str, ...] = (), **kwargs: Any) -> argparse.Action:
    """Add ``--flag`` with its default from the environment (see the module docstring for the
    variable's name). ``deprecated`` are the flag's old names, still accepted. ``old_env`` are the
    variables it was read from before the contract, still read with a warning; by default, in a
    command older than the contract, GPUPAIR_<OLD NAME> (the flag's own when not renamed).
    ``fallback_env`` are read last and silently (the downward API's, named by manifests).

    A non-boolean env value goes to argparse as a string default, which argparse converts with the
    flag's type: a bad value is a usage error naming the flag, not a traceback."""
    command = command_of(parser)
    env = env_name(flag, command)
    if old_env is None:
        old_env = tuple(ENV_PREFIX + name.lstrip("-").replace("-", "_").upper() for name in deprecated or (flag,)) \
            if command in LEGACY_ENV_COMMANDS else ()
    old_env = tuple(name for name in dict.fromkeys(old_env) if name != env)
    source, raw = _read_environment(parser, env, old_env, fallback_env)
    value = default
    if isinstance(default, bool):
        kwargs.setdefault("action", argparse.BooleanOptionalAction)
        if raw is not None:
            word = raw.strip().lower()
            if word not in _TRUE + _FALSE:
                parser.error(f"{source}={raw!r}: expected one of {', '.join(_TRUE + _FALSE[:-1])}")
            value = word in _TRUE
    else:
        if default is not None:
            kwargs.setdefault("type", type(default))
        if raw is not None:
            value = raw
    action = parser.add_argument(flag, default=value, help=f"{help} (env {env}, default %(default)s)", **kwargs)
    action.gpupair_env = FlagEnv(command, env, old_env, tuple(fallback_env), default)  # type: ignore[attr-defined]
    for old in deprecated:
        alias_kwargs = {key: kwargs[key] for key in ("type", "choices", "metavar") if key in kwargs}
        parser.add_argument(old, dest=action.dest, action=_DeprecatedAlias, new_flag=flag,
                            default=argparse.SUPPRESS, help=f"deprecated: use {flag}", **alias_kwargs)
    return action


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
    order is gpupair.kube.api_client's."""
    add_flag(parser, "--kubeconfig", "",
             "kubeconfig file; empty: $KUBECONFIG, then the in-cluster service account, then ~/.kube/config")
    add_flag(parser, "--context", "", "kubeconfig context; empty: the kubeconfig's current context")


def add_resource_name(parser: argparse.ArgumentParser, *, deprecated: tuple[str, ...] = ()) -> None:
    add_flag(parser, "--resource-name", defaults.RESOURCE_NAME,
             "extended resource the device plugin advertises for a GPU", deprecated=deprecated)


def add_tls_flags(parser: argparse.ArgumentParser, cert: str = "", key: str = "", *,
                  deprecated_cert: tuple[str, ...] = (), deprecated_key: tuple[str, ...] = ()) -> None:
    """The serving certificate, as Kubernetes' own binaries name it; gpupair.tls reloads it."""
    add_flag(parser, "--tls-cert-file", cert, "serving certificate (PEM, chain first); reloaded when it changes",
             deprecated=deprecated_cert)
    add_flag(parser, "--tls-private-key-file", key, "private key of --tls-cert-file (PEM); reloaded with it",
             deprecated=deprecated_key)


def add_reporter_port(parser: argparse.ArgumentParser) -> None:
    add_flag(parser, "--reporter-port", defaults.REPORTER_PORT,
             "port of the node reporter's /v1/verify (host network; the reporter's --port)")


def add_token_audience(parser: argparse.ArgumentParser, help: str) -> None:
    add_flag(parser, "--token-audience", defaults.TOKEN_AUDIENCE, help)


def add_lease_namespace(parser: argparse.ArgumentParser, help: str, *, deprecated: tuple[str, ...] = ()) -> None:
    """Where the reporters' node Leases live: the reporter renews its own there, the extender watches them."""
    from gpupair import leases  # standard library only

    add_flag(parser, "--lease-namespace", leases.own_namespace(),
             f"namespace of the reporters' node Leases (default: this pod's); {help}", deprecated=deprecated)


def add_default_placement(parser: argparse.ArgumentParser) -> None:
    """The cluster default placement intent; the extender and the webhook must agree on it."""
    from gpupair.intent import Intent  # standard library only

    add_flag(parser, "--default-placement", Intent.REQUIRED.value,
             "placement intent of pods with no gpupair.io/placement annotation (and, at the webhook, "
             "no namespace default): required, preferred or none", choices=tuple(i.value for i in Intent))


def add_topology_file(parser: argparse.ArgumentParser, help: str, *, deprecated: tuple[str, ...] = (),
                      old_env: tuple[str, ...] | None = None) -> None:
    """A node's layout from a file, in any format gpupair.layout_file reads."""
    add_flag(parser, "--topology-file", "", help, deprecated=deprecated, old_env=old_env)


def add_dra_driver(parser: argparse.ArgumentParser, help: str, *, on: bool = True) -> None:
    """The DRA driver whose devices are GPUs (resource.k8s.io/v1 ResourceSlices). ``on=False``:
    off unless set, for services whose RBAC for DRA comes with deploy/components/dra."""
    from gpupair.defaults import DRA_DRIVER

    add_flag(parser, "--dra-driver", DRA_DRIVER if on else "",
             f"DRA driver that publishes the GPUs as devices (e.g. {DRA_DRIVER}); {help}")
