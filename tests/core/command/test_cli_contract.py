"""The command-line contract (docs/cli.md, gpupair.command.flags), checked by walking every subcommand's
parser: a command added or changed later is held to it without anyone remembering to."""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import pytest

from gpupair.command import cli, flags
from gpupair.command.cli_reference import command_parsers, reference

REPO = Path(__file__).resolve().parents[3]
# Pairs of flags whose names look alike but that name different things.
DISTINCT = {
    frozenset({"--node", "--node-name"}): "audit's node to pin test pods to; the reporter's own node",
    frozenset({"--output", "--output-dir"}): "a form or file to print to; snapshot's folder for its two CSV files",
}


@pytest.fixture(scope="module")
def commands() -> dict[str, argparse.ArgumentParser]:
    return command_parsers()


def options(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    return [a for a in parser._actions if a.option_strings and not isinstance(a, argparse._HelpAction)]


def contract_flags(parser: argparse.ArgumentParser) -> dict[str, argparse.Action]:
    """Each flag of the contract (its --long name) -> its action; aliases left out."""
    return {flags.long_name(a): a for a in options(parser) if hasattr(a, "gpupair_env")}


def is_alias(action: argparse.Action, parser: argparse.ArgumentParser) -> bool:
    """An old name or a short form (-o) that stores into a contract flag's dest and sets no default."""
    targets = {a.dest for a in contract_flags(parser).values()}
    return action.dest in targets and action.default is argparse.SUPPRESS


def kind(action: argparse.Action) -> tuple:
    """What a flag's converter accepts: its type and bounds (each flag has a converter of its own)."""
    return getattr(action.type, "__name__", None), getattr(action.type, "bounds", None)


def stem(flag: str) -> str:
    """What a flag names, less the words that only say its kind: --tls-key-file ~ --tls-private-key."""
    name = re.sub(r"-(file|name|path|dir)$", "", flag.lstrip("-"))
    return name.replace("private-", "")


def test_every_command_is_walked(commands):
    assert set(commands) == set(cli.COMMANDS)
    assert all(contract_flags(parser) for parser in commands.values())


def test_every_flag_reads_an_environment_variable(commands):
    missing = [f"gpupair {name} {action.option_strings[0]}" for name, parser in commands.items()
               for action in options(parser)
               if not hasattr(action, "gpupair_env") and not is_alias(action, parser)]
    assert missing == [], "add these with gpupair.command.flags.add_flag (or a flag group)"


def test_every_flag_help_names_its_variable(commands):
    for name, parser in commands.items():
        for flag, action in contract_flags(parser).items():
            env = action.gpupair_env.env
            # an empty default is not printed: "(env X)", else "(env X, default ...)"
            shown = f"(env {env})" if action.gpupair_env.default in ("", None) else f"(env {env}, default %(default)s)"
            assert action.help.endswith(shown), (name, flag, action.help)


def test_no_two_commands_name_one_concept_differently(commands):
    names: dict[str, set[str]] = defaultdict(set)
    for name, parser in commands.items():
        for flag in contract_flags(parser):
            names[flag].add(name)
    synonyms = {flag: flags.SYNONYMS[flag] for flag in names if flag in flags.SYNONYMS}
    assert synonyms == {}, "use the contract's name; accept the old one as a deprecated alias"
    by_stem: dict[str, set[str]] = defaultdict(set)
    for flag in names:
        by_stem[stem(flag)].add(flag)
    clashes = [spellings for spellings in by_stem.values()
               if len(spellings) > 1 and frozenset(spellings) not in DISTINCT]
    assert clashes == [], f"one concept, several names: {clashes}"


def test_shared_concepts_come_in_groups_with_one_default(commands):
    for name, parser in commands.items():
        have = set(contract_flags(parser))
        assert "--log-level" in have, f"gpupair {name} has no --log-level"
        assert ("--kubeconfig" in have) == ("--context" in have), f"gpupair {name}: --kubeconfig with --context"
        assert ("--tls-cert-file" in have) == ("--tls-private-key-file" in have), name
    for flag in flags.SHARED_FLAGS:
        seen = {(name, repr(parser_flags[flag].gpupair_env.default), kind(parser_flags[flag]))
                for name, parser in commands.items() if flag in (parser_flags := contract_flags(parser))}
        assert len({(default, kind) for _, default, kind in seen}) <= 1, (flag, seen)


def test_one_variable_means_one_thing(commands):
    readers: dict[str, list[tuple[str, str, argparse.Action]]] = defaultdict(list)
    for name, parser in commands.items():
        for flag, action in contract_flags(parser).items():
            readers[action.gpupair_env.env].append((name, flag, action))
    for env, group in readers.items():
        if len(group) == 1:
            continue
        meanings = {(repr(a.gpupair_env.default), kind(a), tuple(a.choices or ())) for _, _, a in group}
        assert len(meanings) == 1, f"{env} read with different meanings: {[(n, f) for n, f, _ in group]}"
        # a shared concept's variable; a command may know it under its own flag (the reporter's --port)
        assert any(f in flags.SHARED_FLAGS for _, f, _ in group), (env, group)
    # and no current name is an old name another flag still answers to, which would make it two things
    for name, parser in commands.items():
        for flag, action in contract_flags(parser).items():
            for old in action.gpupair_env.deprecated_env:
                assert old not in readers, f"gpupair {name} {flag}: {old} is also read as a current name"


def test_each_command_reads_only_its_own_or_shared_variables(commands):
    for name, parser in commands.items():
        for flag, action in contract_flags(parser).items():
            env = action.gpupair_env.env
            assert env.startswith(f"GPUPAIR_{name.upper()}_") or flag in flags.SHARED_FLAGS, (name, flag, env)


def gpupair(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(flags.ENV_PREFIX) and k != "KUBECONFIG"}
    return subprocess.run([sys.executable, "-m", "gpupair.command.cli", *args], cwd=REPO, env={**clean, **(env or {})},
                          capture_output=True, text=True, timeout=120)


# One usage error per command, found after argparse (in ``run``): each prints the one-line format.
USAGE_ERRORS = {
    "webhook": (["--token-audience", ""], "--token-audience must not be empty"),
    "verify": ([], "no reporter address"),
    "certs": (["--days", "10", "--renew-within-days", "10"], "--renew-within-days: must be less than --days"),
    "extender": (["--tls-private-key-file", "k.pem"], "go together"),
    "simulate": (["--topology-file", "/nonexistent/topo.txt"], "cannot read layout file"),
    "audit": (["--output", "/nonexistent/r.tsv"], "--output: /nonexistent does not exist"),
    "reporter": (["--dry-run", "--topology-file", "/nonexistent/topo.txt"], "cannot read layout file"),
    "status": (["--now", "yesterday"], "--now 'yesterday' is not an RFC 3339 time"),
    "snapshot": (["--output-dir", "/dev/null"], "--output-dir /dev/null is not a folder"),
    "defrag": ([], "say --plan"),
}


def test_usage_errors_have_one_format_and_exit_2():
    assert set(USAGE_ERRORS) == set(cli.COMMANDS), "give the new command a usage error here"
    for name, (args, says) in USAGE_ERRORS.items():
        done = gpupair(name, *args)
        assert done.returncode == 2, (name, done.stderr)
        [line] = done.stderr.splitlines()
        assert line.startswith(f"gpupair {name}: error: ") and says in line, (name, line)


def test_a_bad_environment_value_is_the_same_usage_error_naming_the_variable():
    done = gpupair("status", env={"GPUPAIR_STATUS_FAILS": "many"})
    assert done.returncode == 2
    assert done.stderr == "gpupair status: error: GPUPAIR_STATUS_FAILS: expected an integer, got 'many'\n"


def test_a_renamed_flag_or_variable_still_works_and_says_what_replaced_it(monkeypatch, caplog):
    """The rename path a later release takes: the old names are read, with a warning for each."""
    def parser() -> argparse.ArgumentParser:
        p = argparse.ArgumentParser()
        p.gpupair_command = "demo"
        flags.add_flag(p, "--topology-file", "", "layout", deprecated=("--layout",), old_env=("GPUPAIR_DEMO_LAYOUT",))
        return p

    old = parser()
    assert old.parse_args(["--layout", "t.txt"]).topology_file == "t.txt"
    assert "--layout" not in old.format_help()  # hidden, as kubectl hides its own
    monkeypatch.setenv("GPUPAIR_DEMO_LAYOUT", "old.txt")
    assert parser().parse_args([]).topology_file == "old.txt"
    monkeypatch.setenv("GPUPAIR_DEMO_TOPOLOGY_FILE", "new.txt")
    assert parser().parse_args([]).topology_file == "new.txt"  # the current name wins
    with caplog.at_level("WARNING", logger="gpupair.flags"):
        flags.warn_deprecated(old)
    assert [(r.deprecated, r.use) for r in caplog.records] == [("--layout", "--topology-file")]


def test_no_command_reads_the_unprefixed_name_of_its_own_flag(monkeypatch):
    """GPUPAIR_TIMEOUT is neither audit's nor verify's: a value meant for one command never
    reaches another (the unreleased 0.1 read GPUPAIR_<FLAG> everywhere)."""
    monkeypatch.setenv("GPUPAIR_TIMEOUT", "5")
    monkeypatch.setenv("GPUPAIR_OUTPUT", "elsewhere.tsv")
    assert cli.build_parser("audit").parse_args(["audit"]).timeout == 180.0
    assert cli.build_parser("audit").parse_args(["audit"]).output == "results.tsv"
    assert cli.build_parser("verify").parse_args(["verify"]).timeout == 10.0


def test_docs_cli_md_lists_every_flag_and_variable(commands):
    text = (REPO / "docs" / "cli.md").read_text()
    assert reference(commands) in text, "docs/cli.md is out of date: run `python -m gpupair.command.cli_reference --write`"
