"""The error half of the command-line contract (docs/cli.md, "Errors and exit statuses"), walked for
every subcommand: bad values from flags and from the environment, ranges, output and input
paths, kubeconfigs, ports, Ctrl-C and the exit statuses. Each case asserts the exit status, the
one-line form and no traceback.

The exhaustive walks (every flag of every command) run in-process through ``gpupair.command.cli.main``,
the real entry point, as they stop at parsing; the cases that need a process (a port in use, a
signal, a network that never answers) run ``python -m gpupair.command.cli`` once per command."""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpupair.command import cli, flags
from gpupair.command.cli_reference import command_parsers
from tests.core.command.test_cli_contract import REPO, contract_flags, gpupair

SEED_TOPO = str(REPO / "tests" / "fixtures" / "topo" / "seed-5090d.txt")
KUBE_COMMANDS = ("certs", "extender", "audit", "reporter", "status", "snapshot")
SERVICES = {  # command -> what it needs to reach its listener
    "extender": ["--host", "127.0.0.1", "--no-node-cache", "--lease-namespace", ""],
    "reporter": ["--host", "127.0.0.1", "--node-name", "n", "--topology-file", SEED_TOPO, "--allocated", "",
                 "--lease-namespace", ""],
    "webhook": ["--host", "127.0.0.1"],
}
DEADLINE_S = 120  # for a loaded machine: a bound on a start-up, never a timing assertion


@pytest.fixture(scope="module")
def commands() -> dict[str, argparse.ArgumentParser]:
    return command_parsers()


def one_error_line(text: str, command: str) -> str:
    """The single line a usage or input error prints; fails on a traceback or any other line."""
    assert "Traceback" not in text, text
    lines = text.splitlines()
    assert len(lines) == 1, text
    assert lines[0].startswith(f"gpupair {command}: error: "), lines[0]
    return lines[0][len(f"gpupair {command}: error: "):]


def main_exits(argv: list[str], capsys) -> tuple[int, str]:
    """gpupair.command.cli.main in this process: its exit status and stderr (logging set back as it was)."""
    import logging

    root, ours = logging.getLogger(), logging.getLogger("gpupair")  # simulate quiets its own at info
    handlers, levels = root.handlers[:], (root.level, ours.level)
    try:
        with pytest.raises(SystemExit) as exit_:
            cli.main(argv)
    finally:
        root.handlers[:] = handlers
        root.setLevel(levels[0])
        ours.setLevel(levels[1])
    return exit_.value.code, capsys.readouterr().err


def bad_values(action: argparse.Action) -> list[str]:
    """Values no flag of this kind may take: wrong type, not finite, far outside any range."""
    if action.choices:
        return ["bogus-choice"]
    kind = getattr(action.type, "__name__", None)
    high = getattr(action.type, "bounds", None) and action.type.bounds.high
    if kind == "int":
        return ["many", "1.5", "-99999999999"] + ([str(int(high) + 1)] if high is not None else [])
    if kind == "float":
        return ["many", "nan", "inf", "-1e300"] + (["1e300"] if high is not None else [])
    return []


def number_and_choice_flags(commands) -> Iterator[tuple[str, str, argparse.Action]]:
    for name, parser in commands.items():
        for flag, action in contract_flags(parser).items():
            if bad_values(action):
                yield name, flag, action


# --- values: every flag, from the command line and from its variable ------------------------------


def test_every_number_flag_states_its_range(commands):
    unbounded = [f"gpupair {name} {flag}" for name, parser in commands.items()
                 for flag, action in contract_flags(parser).items()
                 if getattr(action.type, "__name__", None) in ("int", "float") and action.type.bounds is None]
    assert unbounded == [], "give these add_flag(..., bounds=...)"


def test_a_bad_value_is_one_line_and_exit_2_from_flag_or_variable(commands, capsys, monkeypatch):
    for key in [k for k in os.environ if k.startswith(flags.ENV_PREFIX) or k == "KUBECONFIG"]:
        monkeypatch.delenv(key)
    walked = 0
    for name, flag, action in number_and_choice_flags(commands):
        for value in bad_values(action):
            code, err = main_exits([name, flag, value], capsys)
            assert code == 2 and one_error_line(err, name).startswith(f"{flag}: "), (name, flag, value, err)
            env = action.gpupair_env.env
            monkeypatch.setenv(env, value)
            code, err = main_exits([name], capsys)
            monkeypatch.delenv(env)
            assert code == 2 and one_error_line(err, name).startswith(f"{env}: "), (name, env, value, err)
            walked += 1
    assert walked > 150  # every number and choice flag of every command, several values each


def test_a_reporter_address_that_is_not_an_ip_is_one_line_and_exit_2(capsys, monkeypatch):
    # It used to retry for ever, logging a reason about the token.
    for key in [k for k in os.environ if k.startswith(flags.ENV_PREFIX) or k == "HOST_IP"]:
        monkeypatch.delenv(key)
    code, err = main_exits(["verify", "--host-ip", "not an ip"], capsys)
    assert code == 2 and one_error_line(err, "verify") == "--host-ip: expected an IP address, got 'not an ip'"
    for env in ("HOST_IP", "GPUPAIR_VERIFY_HOST_IP"):
        monkeypatch.setenv(env, "node-1.example")
        code, err = main_exits(["verify"], capsys)
        monkeypatch.delenv(env)
        assert code == 2 and one_error_line(err, "verify") == f"{env}: expected an IP address, got 'node-1.example'"
    assert flags.ip_address("[fd00::1]") == "fd00::1" and flags.ip_address("10.0.0.7") == "10.0.0.7"


def test_a_listen_address_that_is_neither_an_ip_nor_a_host_name_is_one_line_and_exit_2(capsys, monkeypatch):
    for key in [k for k in os.environ if k.startswith(flags.ENV_PREFIX)]:
        monkeypatch.delenv(key)
    for command in ("extender", "webhook", "reporter"):
        for bad in ("not a host", "a..b", "-edge", "x" * 64, "10.0.0.300:80"):
            code, err = main_exits([command, f"--host={bad}"], capsys)
            assert code == 2 and one_error_line(err, command) == \
                f"--host: expected an IP address or a host name, got {bad!r}", (command, bad, err)
        env = f"GPUPAIR_{command.upper()}_HOST"
        monkeypatch.setenv(env, "bad host")
        code, err = main_exits([command], capsys)
        monkeypatch.delenv(env)
        assert code == 2 and one_error_line(err, command) == f"{env}: expected an IP address or a host name, got 'bad host'"
    assert [flags.listen_address(a) for a in ("0.0.0.0", "[::]", "localhost", "gpupair.svc.")] == \
        ["0.0.0.0", "::", "localhost", "gpupair.svc."]


def test_a_pull_secret_name_the_apiserver_would_refuse_is_one_line_and_exit_2(capsys, monkeypatch):
    """Written into every opted-in pod, a bad Secret name would have the apiserver refuse them all."""
    for key in [k for k in os.environ if k.startswith(flags.ENV_PREFIX)]:
        monkeypatch.delenv(key)
    for bad in ("Bad_Name!", "regcred,UPPER", "-edge", "x" * 254):
        code, err = main_exits(["webhook", f"--verifier-image-pull-secrets={bad}"], capsys)
        assert code == 2 and one_error_line(err, "webhook").startswith(
            "--verifier-image-pull-secrets: expected object names"), (bad, err)
    assert flags.object_names("regcred, mirror.example,regcred") == ("regcred", "mirror.example")


def test_a_misspelt_boolean_variable_and_a_deprecated_variable_are_checked_the_same(commands, capsys, monkeypatch):
    for name, parser in commands.items():
        for flag, action in contract_flags(parser).items():
            if isinstance(action.gpupair_env.default, bool):
                monkeypatch.setenv(action.gpupair_env.env, "maybe")
                code, err = main_exits([name], capsys)
                monkeypatch.delenv(action.gpupair_env.env)
                assert code == 2 and "expected one of 1, true" in one_error_line(err, name), (name, flag)
            for old in action.gpupair_env.deprecated_env:
                if bad_values(action):
                    monkeypatch.setenv(old, bad_values(action)[0])
                    code, err = main_exits([name], capsys)
                    monkeypatch.delenv(old)
                    assert code == 2 and one_error_line(err, name).startswith(f"{old}: "), (name, old)


def test_an_unknown_flag_is_said_by_the_command(commands, capsys):
    for name in commands:
        code, err = main_exits([name, "--no-such-flag"], capsys)
        assert code == 2 and one_error_line(err, name) == "unrecognized arguments: --no-such-flag"


def test_deprecated_aliases_work_but_are_hidden_from_help(commands):
    for name, parser in commands.items():
        shown = parser.format_help()
        for action in parser._actions:
            if hasattr(action, "new_flag"):
                assert all(f"{spelling} " not in shown for spelling in action.option_strings), (name, action)


def test_version():
    done = gpupair("--version")
    assert done.returncode == 0 and done.stdout.strip() == f"gpupair {cli.version()}" != "gpupair unknown"


# --- paths: outputs checked before the run, inputs with one message per failure -------------------

OUTPUTS = [("simulate", "--output", ".tsv"), ("simulate", "--verdicts", ".jsonl"), ("simulate", "--plot", ".png"),
           ("audit", "--output", ".tsv")]


@pytest.mark.parametrize("command,flag,suffix", OUTPUTS)
def test_an_output_path_that_cannot_be_written_is_refused_before_the_run(command, flag, suffix, tmp_path, capsys,
                                                                      monkeypatch):
    monkeypatch.delenv("KUBECONFIG", raising=False)
    cases = {str(tmp_path): "is a directory", str(tmp_path / "missing" / f"x{suffix}"): "does not exist",
             str(tmp_path / "x.txt"): f"must end in {suffix}", f"/proc/x{suffix}": "cannot write in /proc"}
    for path, says in cases.items():
        code, err = main_exits([command, flag, path], capsys)
        assert code == 2 and one_error_line(err, command).startswith(f"{flag}: ") and says in err, (path, err)
    assert list(tmp_path.iterdir()) == []  # nothing created on the way, not even a parent


def write_kubeconfigs(root: Path) -> dict[str, tuple[Path, str]]:
    """One kubeconfig per way of being wrong -> (path, what the error says)."""
    contexts = "clusters: [{name: c, cluster: {server: 'https://127.0.0.1:1'}}]\nusers: [{name: u, user: {}}]\n"
    files = {
        "missing": (root / "nope", b"", "no such file"),
        "directory": (root / "dir", None, "is a directory"),
        "empty": (root / "empty", b"", "is not a kubeconfig"),
        "binary": (root / "binary", bytes(range(256)) * 4, "is not text"),
        "not YAML": (root / "garbage", b"{{{ nope: [", "is not YAML"),
        "no current-context": (root / "nocontext", (contexts + "contexts: [{name: x, context: {cluster: c, user: u}}]\n")
                               .encode(), "has no current-context"),
        "unknown context": (root / "wrongcontext", (contexts + "contexts: []\ncurrent-context: gone\n").encode(),
                            "has no context 'gone'"),
        "bad CA data": (root / "badca", (contexts.replace("{server:", "{certificate-authority-data: '!!notbase64', server:")
                                         + "contexts: [{name: x, context: {cluster: c, user: u}}]\n"
                                         + "current-context: x\n").encode(), "cannot load Kubernetes configuration"),
        "huge": (root / "huge", None, "larger than 4 MiB"),
    }
    for name, (path, content, _) in files.items():
        if name == "directory":
            path.mkdir()
        elif name == "huge":
            with path.open("wb") as out:
                out.truncate(5 * 1024 * 1024)
        elif name != "missing":
            path.write_bytes(content)
    return {name: (path, says) for name, (path, _, says) in files.items()}


async def test_every_kind_of_bad_kubeconfig_is_one_sentence(tmp_path):
    from gpupair.kubeclient.kube import KubeConfigError, api_client

    for name, (path, says) in write_kubeconfigs(tmp_path).items():
        with pytest.raises(KubeConfigError) as error:
            await api_client(str(path))
        assert says in str(error.value) and "\n" not in str(error.value), (name, error.value)


@pytest.mark.parametrize("command", KUBE_COMMANDS)
def test_a_bad_kubeconfig_is_one_line_and_exit_2_in_every_command(command, tmp_path):
    files = write_kubeconfigs(tmp_path)
    extra = {"reporter": ["--node-name", "n", "--once", "--topology-file", SEED_TOPO, "--allocated", ""],
             "audit": ["--output", str(tmp_path / "r.tsv")],
             "snapshot": ["--output-dir", str(tmp_path / "out")]}.get(command, [])
    path, says = files["not YAML"]  # every other kind takes the same path (the test above)
    done = gpupair(command, "--kubeconfig", str(path), *extra)
    assert done.returncode == 2 and says in one_error_line(done.stderr, command), done.stderr
    assert done.stdout == ""


@pytest.mark.parametrize("command,flag,make,says", [
    ("simulate", "--topology-file", lambda p: p.mkdir(), "cannot read layout file"),
    ("simulate", "--topology-file", lambda p: p.write_bytes(b"\xff\xfe" * 100), "is not UTF-8 text"),
    ("verify", "--topology-file", lambda p: p.write_text("no matrix here"), "no nvidia-smi topo -m matrix"),
    ("simulate", "--state", lambda p: p.write_text('{"nodes": [{"name": 3}]}'), "recorded state"),
    ("simulate", "--state", lambda p: p.mkdir(), "Is a directory"),
    ("reporter", "--topology-file", lambda p: p.write_bytes(b" " * (2 * 1024 * 1024)), "is larger than"),
    ("webhook", "--tls-cert-file", lambda p: p.write_text("not a certificate"), "cannot load TLS certificate"),
    ("extender", "--tls-cert-file", lambda p: p.mkdir(), "cannot load TLS certificate"),
])
def test_a_bad_input_file_is_one_line_and_exit_2(command, flag, make, says, tmp_path):
    path = tmp_path / "input"
    make(path)
    extra = {"verify": ["--dry-run", "--devices", "0,1"], "simulate": ["--scenario", "replay"] if flag == "--state" else [], "reporter": ["--dry-run", "--allocated", ""],
             "webhook": ["--tls-private-key-file", str(path)],
             "extender": ["--tls-private-key-file", str(path)]}.get(command, [])
    done = gpupair(command, flag, str(path), *extra)
    assert done.returncode == 2 and says in one_error_line(done.stderr, command), done.stderr


def test_a_layout_larger_than_the_stated_bound_is_refused(tmp_path):
    from gpupair.topology.limits import MAX_GPUS

    n = MAX_GPUS + 1
    header = "\t" + "\t".join(f"GPU{j}" for j in range(n)) + "\tCPU Affinity\tNUMA Affinity\n"
    rows = "".join(f"GPU{i}\t" + "\t".join("X" if i == j else "SYS" for j in range(n)) + f"\t0-1\t{i % 2}\n"
                   for i in range(n))
    (tmp_path / "big.txt").write_text(header + rows)
    done = gpupair("simulate", "--topology-file", str(tmp_path / "big.txt"), "--output", str(tmp_path / "x.tsv"))
    assert done.returncode == 2 and f"at most {MAX_GPUS}" in one_error_line(done.stderr, "simulate")


# --- runtime failures: one line, exit 1; services say it as their JSON error line -------------------


@contextlib.contextmanager
def black_hole() -> Iterator[tuple[int, threading.Event]]:
    """A TCP port that accepts connections and never answers: a request waits until interrupted.
    The event is set once something has connected (the command is waiting on the network)."""
    server = socket.create_server(("127.0.0.1", 0))
    connected, held = threading.Event(), []

    def accept() -> None:
        with contextlib.suppress(OSError):
            while True:
                held.append(server.accept()[0])
                connected.set()

    threading.Thread(target=accept, daemon=True).start()
    try:
        yield server.getsockname()[1], connected
    finally:
        server.close()
        for conn in held:
            conn.close()


@contextlib.contextmanager
def refused_port() -> Iterator[int]:
    """A port bound but not listening: every connection to it is refused, for as long as it is held."""
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        yield held.getsockname()[1]


def kubeconfig_for(path: Path, port: int) -> Path:
    path.write_text("apiVersion: v1\nkind: Config\ncurrent-context: x\n"
                    f"clusters: [{{name: c, cluster: {{server: 'http://127.0.0.1:{port}'}}}}]\n"
                    "users: [{name: u, user: {token: t}}]\ncontexts: [{name: x, context: {cluster: c, user: u}}]\n")
    return path


def tls_pair(tmp_path: Path) -> list[str]:
    import trustme

    cert = trustme.CA().issue_cert("127.0.0.1")
    cert.cert_chain_pems[0].write_to_path(tmp_path / "tls.crt")
    cert.private_key_pem.write_to_path(tmp_path / "tls.key")
    return ["--tls-cert-file", str(tmp_path / "tls.crt"), "--tls-private-key-file", str(tmp_path / "tls.key")]


def service_args(command: str, tmp_path: Path, port: int) -> list[str]:
    args = [*SERVICES[command], "--port", str(port)]
    if command == "webhook":
        return args + tls_pair(tmp_path)
    # an API server that refuses: the services start without it and retry in the background
    return args + ["--kubeconfig", str(kubeconfig_for(tmp_path / "kubeconfig", 1))]


def last_json_error(stderr: str) -> dict:
    import json

    assert "Traceback" not in stderr, stderr
    entries = [json.loads(line) for line in stderr.splitlines()]  # every line is a JSON log line
    assert entries[-1]["level"] == "error", entries[-1]
    return entries[-1]


@pytest.mark.parametrize("command", sorted(SERVICES))
def test_a_port_in_use_is_the_services_json_error_line_and_exit_1(command, tmp_path):
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        done = gpupair(command, *service_args(command, tmp_path, port))
    assert done.returncode == 1
    assert last_json_error(done.stderr)["msg"].startswith(f"cannot listen on 127.0.0.1:{port}: ")


def test_an_encrypted_tls_key_fails_at_once_instead_of_prompting(tmp_path):
    import trustme
    from cryptography.hazmat.primitives import serialization

    cert = trustme.CA().issue_cert("127.0.0.1")
    key = serialization.load_pem_private_key(cert.private_key_pem.bytes(), None)
    (tmp_path / "enc.key").write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                                         serialization.BestAvailableEncryption(b"secret")))
    cert.cert_chain_pems[0].write_to_path(tmp_path / "tls.crt")
    done = gpupair("webhook", "--tls-cert-file", str(tmp_path / "tls.crt"),
                   "--tls-private-key-file", str(tmp_path / "enc.key"))  # stdin is not a terminal; no prompt
    assert done.returncode == 1 and "needs" not in done.stdout
    assert "the private key is encrypted" in last_json_error(done.stderr)["msg"]


@pytest.mark.parametrize("command", ["status", "certs", "audit"])
def test_an_unreachable_api_server_is_one_line_and_exit_1(command, tmp_path):
    with refused_port() as port:
        kubeconfig = kubeconfig_for(tmp_path / "kubeconfig", port)
        done = gpupair(command, "--kubeconfig", str(kubeconfig), *(["--output", str(tmp_path / "r.tsv")]
                                                                     if command == "audit" else []))
    assert done.returncode == 1 and "Traceback" not in done.stderr
    if command == "certs":  # an in-cluster Job: its JSON log
        assert "Cannot connect to host 127.0.0.1" in last_json_error(done.stderr)["msg"]
    else:
        assert done.stderr.splitlines()[-1].startswith(f"gpupair {command}: ")
        assert "Cannot connect to host 127.0.0.1" in done.stderr.splitlines()[-1]
    assert not (tmp_path / "r.tsv").exists()  # nothing to write, nothing written


# --- Ctrl-C: exit 130, one line, no partial file -------------------------------------------------


@contextlib.contextmanager
def sigint_at_default_in_children() -> Iterator[None]:
    """Children started inside get SIGINT at its default disposition, however this run was started.

    A shell that runs a job in the background without job control (a CI runner, ``cmd &`` in a
    script) starts it with SIGINT ignored, and an ignored signal stays ignored through exec: the
    child's Python then installs no KeyboardInterrupt handler and Ctrl-C does nothing. A handled
    signal is reset to its default at exec, so the runner's SIGINT is handled here meanwhile (not
    preexec_fn: the black hole's thread runs beside the fork)."""
    if signal.getsignal(signal.SIGINT) is not signal.SIG_IGN:
        yield
        return
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)


def interrupted(args: list[str], ready: threading.Event | None = None, marker: str = "") -> tuple[int, str, str]:
    """Start ``gpupair ARGS``, wait until it is at work (``ready`` set, or ``marker`` on stderr), Ctrl-C it."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith(flags.ENV_PREFIX) and k != "KUBECONFIG"}
    with sigint_at_default_in_children():
        proc = subprocess.Popen([sys.executable, "-m", "gpupair.command.cli", *args], cwd=REPO, env=clean, text=True,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    seen: list[str] = []
    try:
        if ready is not None:
            for _ in range(DEADLINE_S * 10):
                if ready.wait(0.1) or proc.poll() is not None:
                    break
            assert ready.is_set(), f"the command never reached the network: {proc.poll()} {proc.stderr.read()}"
        else:
            for line in proc.stderr:
                seen.append(line)
                if marker in line:
                    break
            else:
                raise AssertionError(f"never logged {marker!r}: {''.join(seen)}")
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=DEADLINE_S)
    finally:
        proc.kill()
    return proc.returncode, out, "".join(seen) + err


def assert_interrupted(code: int, err: str, command: str) -> None:
    assert code == 130, err
    assert "Traceback" not in err, err
    assert err.splitlines()[-1] == f"gpupair {command}: interrupted", err


@pytest.mark.parametrize("command", ["status", "certs", "verify"])
def test_ctrl_c_while_waiting_on_the_network_exits_130(command, tmp_path):
    (tmp_path / "token").write_text("a-token")
    with black_hole() as (port, connected):
        args = (["--reporter-port", str(port), "--host-ip", "127.0.0.1", "--token-path", str(tmp_path / "token")]
                if command == "verify" else ["--kubeconfig", str(kubeconfig_for(tmp_path / "kubeconfig", port))])
        code, out, err = interrupted([command, *args], ready=connected)
    assert_interrupted(code, err, command)
    assert out == ""


@pytest.mark.parametrize("command", sorted(SERVICES))
def test_ctrl_c_stops_a_service_with_130(command, tmp_path):
    with socket.create_server(("127.0.0.1", 0)) as probe:
        port = probe.getsockname()[1]
    code, _, err = interrupted([command, *service_args(command, tmp_path, port)], marker='"msg":"serving"')
    assert_interrupted(code, err, command)
    import json

    serving = next(json.loads(line) for line in err.splitlines() if '"msg":"serving"' in line)
    assert serving["version"] == cli.version() and serving["port"] == port  # the version, at start


def test_ctrl_c_in_simulate_exits_130_and_leaves_no_file(tmp_path):
    code, out, err = interrupted(["simulate", "--runs", "1000", "--configs", "gpupair+aligned", "--log-level", "debug",
                                  "--no-progress",
                                  "--output", str(tmp_path / "s.tsv")], marker="{")
    assert_interrupted(code, err, "simulate")
    assert list(tmp_path.iterdir()) == []  # no TSV, no temporary file


def test_plot_without_matplotlib_names_the_extra_before_the_run(tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # `import matplotlib` fails, as where it is not installed
    code, err = main_exits(["simulate", "--plot", str(tmp_path / "p.png"), "--output", str(tmp_path / "s.tsv")],
                           capsys)
    assert code == 2 and one_error_line(err, "simulate") == (
        "--plot: needs matplotlib, which is not installed: pip install 'gpupair[plot]'")
    assert list(tmp_path.iterdir()) == []


# --- the docs' examples run as written ----------------------------------------------------------


def documented_errors() -> list[tuple[dict[str, str], list[str], str]]:
    """The ``$ gpupair ...`` lines of docs/cli.md's error examples and the line each prints
    (those that need a cluster, marked with a comment, left out)."""
    import shlex

    text = (REPO / "docs" / "cli.md").read_text()
    block = text.split("**Errors and exit statuses", 1)[1].split("```", 2)[1]
    lines = block.strip().splitlines()
    examples = []
    for command, printed in zip(lines, lines[1:]):
        if command.startswith("$ ") and "#" not in command:
            words = shlex.split(command[2:])
            start = words.index("gpupair")  # what comes before it sets variables: NAME=value
            examples.append((dict(w.split("=", 1) for w in words[:start]), words[start:], printed))
    return examples


def test_the_documented_error_examples_print_what_the_docs_say():
    examples = documented_errors()
    assert len(examples) >= 4
    for env, argv, printed in examples:
        assert argv[0] == "gpupair", argv
        done = gpupair(*argv[1:], env=env)
        assert done.returncode == 2 and done.stderr == printed + "\n", (argv, done.stderr)


def test_the_documented_reporter_dry_run_works_off_a_gpu_node(tmp_path):
    """docs/cli.md: `gpupair reporter --once --dry-run --topology-file topo.txt > node.json`, with no
    kubelet here: every GPU free, and a warning saying so."""
    done = gpupair("reporter", "--once", "--dry-run", "--topology-file", SEED_TOPO,
                   "--pod-resources-socket", str(tmp_path / "no-kubelet.sock"))
    assert done.returncode == 0, done.stderr
    import json

    free = json.loads(json.loads(done.stdout)["gpupair.io/free"])["free"]
    assert free == list(range(8)) and "every GPU free" in done.stderr
