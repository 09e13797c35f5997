"""A user's mistake is one line and exit 2, for every command the CLI has.

The commands are enumerated from the Typer app, so a new one is tested as soon as it exists: each
gets what a hurried user gets wrong — a database in a folder that does not exist, a URL of a
database agentjournal does not speak, a session that is not there, an option that does not
exist, a number that is not one, a choice that is not offered, a missing argument — and must
answer with a single `error:` line on stderr that names what to fix, nothing on stdout, no
traceback, exit 2. The commands run in-process (Typer's CliRunner); `app`'s error handling is
the same there as in a shell.
"""

from __future__ import annotations

import os
import types
import typing
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import typer.main
from click.testing import Result
from typer.testing import CliRunner

from agentjournal import Journal
from agentjournal.cli import app

SESSION = "sess_missing"

# What each required parameter gets when a case is about something else, by parameter name.
# Paths are relative to the test's folder; FILE names a journal file that exists.
FILE = "journal.db"
REQUIRED = {
    "session_id": SESSION,
    "destination": "out.copy",
    "backup_file": FILE,
    "source": "empty.jsonl",
    "target": FILE,
    "key_id": "nokey",
    "until": "3",
    "summary": "a summary",
    "tenant": "acme",
    "type": "user_message",
    "payload": '{"content": "hi"}',
    "otlp_endpoint": "http://127.0.0.1:9/v1/traces",
}
# Options a case adds so that a command that wrongly went ahead would not take a fixed port.
CALM = {"serve": ["--port", "0"]}


def _commands(command: Any, prefix: tuple[str, ...] = ()) -> Iterator[tuple[str, Any]]:
    """Every command that runs something, as typed after `agentjournal` (groups by `commands`,
    Typer having its own copy of Click's classes)."""
    for name, sub in sorted(getattr(command, "commands", {}).items()):
        path = (*prefix, name)
        if getattr(sub, "commands", None) is not None:
            yield from _commands(sub, path)
        else:
            yield " ".join(path), sub


COMMANDS = dict(_commands(typer.main.get_command(app)))


def _kind(param: Any) -> Any:
    """The type a parameter is annotated with, `int | None` as int."""
    annotation = param.type_descriptor.annotation
    if isinstance(annotation, types.UnionType) or typing.get_origin(annotation) is typing.Union:
        kinds = [a for a in typing.get_args(annotation) if a is not type(None)]
        return kinds[0] if len(kinds) == 1 else annotation
    return annotation


def required_args(path: str) -> list[str]:
    """The arguments and required options of `path`, each with a value that is not the mistake
    being tested."""
    argv: list[str] = []
    for param in COMMANDS[path].params:
        if not param.required and param.name != "session_id":
            continue
        if param.name not in REQUIRED:
            pytest.fail(
                f"`agentjournal {path}` takes {param.name!r}: give it a value in REQUIRED of"
                f" {Path(__file__).name}, so that its mistakes are tested"
            )
        value = REQUIRED[param.name]
        argv += [value] if type(param).__name__ == "TyperArgument" else [param.opts[0], value]
    return argv + CALM.get(path, [])


@dataclass(frozen=True)
class Case:
    path: str
    argv: list[str]
    names: tuple[str, ...]  # what the line must mention (each, any case)


def _cases() -> Iterator[Any]:
    for path, command in COMMANDS.items():
        words = path.split()
        base = [*words, *required_args(path)]
        names = {p.name for p in command.params}
        if "db" in names:
            folder = "no-such-folder/j.db"
            yield Case(path, [*base, "--db", folder], ("no-such-folder",)), "missing-db"
            yield (
                Case(path, [*base, "--db", "mysql://h/db"], ("mysql://", "not supported")),
                "bad-scheme",
            )
        # `create` makes the session its --session-id names: a new id is no mistake there.
        if ("session_id" in names or "session" in names) and path != "create":
            where = ["--db", FILE] if "db" in names else []
            extra = [] if "session_id" in names else ["--session", SESSION]
            yield Case(path, [*base, *extra, *where], (SESSION, "not found")), "no-session"
        yield (
            Case(path, [*base, "--no-such-option"], ("--no-such-option", f"{path} --help")),
            "unknown-option",
        )
        for param in command.params:
            kind = _kind(param)
            if type(param).__name__ != "TyperOption" or param.is_flag:
                continue
            if kind in (int, float):
                bad = "abc"
            elif typing.get_origin(kind) is typing.Literal:
                bad = "bogus"
            else:
                continue
            flag = param.opts[0]
            yield Case(path, [*base, flag, bad], (flag,)), f"bad{flag}"
        for param in command.params:
            if type(param).__name__ == "TyperArgument" and param.required:
                yield (
                    Case(path, words, ("missing", param.metavar or param.name.upper())),
                    "no-argument",
                )
                break


CASES = [pytest.param(case, id=f"{case.path}-{kind}") for case, kind in _cases()]


@pytest.fixture
def folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The test's working folder: a journal file (FILE) and an empty export beside it."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("AGENTJOURNAL_DB", raising=False)
    Journal.open(tmp_path / FILE).close()
    (tmp_path / "empty.jsonl").write_text("")
    return tmp_path


def run(argv: list[str]) -> Result:
    return CliRunner().invoke(app, argv)


def assert_one_line(result: Result, *names: str) -> str:
    """Exit 2, nothing on stdout, one `error:` line on stderr naming each of `names`."""
    shown = f"exit {result.exit_code}\nstdout: {result.stdout}\nstderr: {result.stderr}"
    assert result.exception is None or isinstance(result.exception, SystemExit), (
        shown,
        result.exception,
    )
    assert "Traceback" not in result.output, shown
    assert result.exit_code == 2, shown
    assert result.stdout == "", shown
    lines = result.stderr.splitlines()
    assert len(lines) == 1, shown
    [line] = lines
    assert line.startswith("error: "), shown
    for name in names:
        assert name.lower() in line.lower(), (name, shown)
    return line


def test_the_enumeration_finds_the_commands() -> None:
    """A Typer upgrade that hid commands from `_commands` would make the cases below vacuous."""
    assert {"serve", "sessions", "show", "keys create", "migrate", "import"} <= set(COMMANDS)
    ids = {param.id for param in CASES}
    for path, command in COMMANDS.items():
        assert f"{path}-unknown-option" in ids
        if any(param.name == "db" for param in command.params):
            assert {f"{path}-missing-db", f"{path}-bad-scheme"} <= ids


@pytest.mark.parametrize("case", CASES)
def test_a_mistake_is_one_line_and_exit_2(case: Case, folder: Path) -> None:
    line = assert_one_line(run(case.argv), *case.names)
    if "--db" in case.argv:  # the user named a database: telling them to is no help
        assert "pass --db" not in line
    assert not (folder / "mysql:").exists()  # a URL is never taken for a SQLite path
    assert sorted(p.name for p in folder.iterdir() if not p.name.startswith(FILE)) == [
        "empty.jsonl"
    ]  # a refused command leaves nothing behind


def test_the_db_hint_only_when_no_database_was_named(
    folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    os.remove(folder / FILE)
    line = assert_one_line(run(["sessions"]), "agent.db")
    assert "(pass --db or set AGENTJOURNAL_DB)" in line
    line = assert_one_line(run(["sessions", "--db", "other.db"]), "other.db")
    assert "pass --db" not in line
    monkeypatch.setenv("AGENTJOURNAL_DB", "from-env.db")
    line = assert_one_line(run(["sessions"]), "from-env.db")
    assert "pass --db" not in line


def test_backup_and_export_over_a_file_name_overwrite(folder: Path) -> None:
    (folder / "taken").write_text("x")
    assert_one_line(run(["backup", "taken", "--db", FILE]), "'taken' exists", "--overwrite")
    assert_one_line(run(["export", "taken", "--db", FILE]), "'taken' exists", "--overwrite")


def test_restore_over_events_names_force(folder: Path) -> None:
    with Journal.open(folder / "held.db") as journal:
        journal.create_session("kept")
    assert_one_line(run(["restore", FILE, "--db", "held.db"]), "held.db", "--force")


def test_a_bug_is_not_passed_off_as_a_mistake(
    folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Only what a user can fix becomes a line: anything else keeps its traceback, exit 1."""

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("a bug in agentjournal")

    monkeypatch.setattr(Journal, "sessions", broken)
    result = run(["sessions", "--db", FILE])
    assert result.exit_code == 1
    assert isinstance(result.exception, RuntimeError)
    assert "error:" not in result.stderr
