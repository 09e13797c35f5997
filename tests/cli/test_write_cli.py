"""`agentjournal create | append`: a shell user writes sessions and events through the journal's
verbs, with their rules and errors; a rejected write leaves nothing behind. In-process through
Typer's CliRunner; tests with `journal_url` run on SQLite and PostgreSQL."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import Result
from typer.testing import CliRunner

from agentjournal import Journal
from agentjournal.cli import app


def run(*args: str, stdin: str | None = None) -> Result:
    return CliRunner().invoke(app, list(args), input=stdin)


def ok(*args: str, stdin: str | None = None) -> Result:
    result = run(*args, stdin=stdin)
    assert result.exit_code == 0, (result.exit_code, result.output, result.exception)
    return result


def refused(*args: str, stdin: str | None = None) -> str:
    """Exit 2 with one line on stderr (no traceback) and nothing on stdout: that line."""
    result = run(*args, stdin=stdin)
    assert result.exit_code == 2, (result.output, result.exception)
    assert result.stdout == ""
    assert len(result.stderr.splitlines()) == 1, result.stderr
    assert result.stderr.startswith("error: ")
    assert "Traceback" not in result.output
    return result.stderr


@pytest.mark.parametrize("command", ["create", "append"])
def test_help_shows_an_example(command: str) -> None:
    assert f"Example: agentjournal {command} " in ok(command, "--help").stdout


# -- create -----------------------------------------------------------------------------------


def test_create_with_every_option_prints_the_session(journal_url: str) -> None:
    db = ("--db", journal_url)
    printed = ok(
        "create",
        "Refund desk",
        "--session-id",
        "refund-1",
        "--model",
        "gpt-test",
        "--system-prompt",
        "You handle refunds.",
        "--metadata",
        '{"customer": "c-42", "tier": 2}',
        "--tenant",
        "acme",
        "--json",
        *db,
    )
    session = json.loads(printed.stdout)
    with Journal.open(journal_url, tenant="acme") as journal:
        assert session == journal.get_session("refund-1").to_dict()
        assert [(e.seq, e.type) for e in journal.events("refund-1")] == [(1, "session_created")]
    assert (session["title"], session["model"]) == ("Refund desk", "gpt-test")
    assert session["system_prompt"] == "You handle refunds."
    assert session["metadata"] == {"customer": "c-42", "tier": 2}
    assert "refund-1" in refused("show", "refund-1", *db)  # the default tenant has no such one

    line = ok("create", "Second", *db).stdout
    assert line.startswith("created session sess_")
    assert line.rstrip().endswith('"Second"')


def test_create_makes_the_database_it_is_pointed_at(tmp_path: Path) -> None:
    db = tmp_path / "new.db"
    sid = json.loads(ok("create", "--json", "--db", str(db)).stdout)["session_id"]
    with Journal.open(db) as journal:
        assert journal.get_session(sid).title == ""


def test_create_with_an_idempotency_key_creates_once(journal_url: str) -> None:
    db = ("--db", journal_url)
    first = json.loads(ok("create", "Once", "--idempotency-key", "k-1", "--json", *db).stdout)
    again = ok("create", "Once", "--idempotency-key", "k-1", *db).stdout
    assert again.startswith(f"already created under this key: session {first['session_id']}")
    assert "different event" in refused("create", "Twice", "--idempotency-key", "k-1", *db)
    with Journal.open(journal_url) as journal:
        assert [s.session_id for s in journal.sessions()] == [first["session_id"]]


def test_create_refuses_a_taken_id(journal_url: str) -> None:
    ok("create", "First", "--session-id", "taken", "--db", journal_url)
    assert "already taken" in refused(
        "create", "Second", "--session-id", "taken", "--db", journal_url
    )
    with Journal.open(journal_url) as journal:
        assert journal.get_session("taken").title == "First"


@pytest.mark.parametrize(
    ("metadata", "says"),
    [
        ('{"customer": ', "--metadata: not valid JSON"),
        ('{"a": 1, "a": 2}', "twice"),
        ('{"a": NaN}', "NaN"),
        ("[1, 2]", "--metadata must be a JSON object"),
        ('"text"', "--metadata must be a JSON object"),
    ],
)
def test_create_with_bad_metadata_writes_nothing(tmp_path: Path, metadata: str, says: str) -> None:
    db = tmp_path / "agent.db"
    assert says in refused("create", "x", "--metadata", metadata, "--db", str(db))
    assert list(tmp_path.iterdir()) == []  # not even the database file


# -- append -----------------------------------------------------------------------------------


@pytest.fixture
def chat(journal_url: str) -> str:
    with Journal.open(journal_url) as journal:
        sid = journal.create_session("Order help").session_id
        journal.append(sid, "user_message", {"content": "Where is order A1?"})  # 2
        journal.append(
            sid, "tool_call", {"call_id": "c1", "name": "get_order", "arguments": "{}"}
        )  # 3
    return sid


def stored(journal_url: str, sid: str) -> list[dict[str, object]]:
    with Journal.open(journal_url) as journal:
        return [event.to_dict() for event in journal.events(sid)]


def test_append_from_an_argument_and_from_stdin(journal_url: str, chat: str) -> None:
    db = ("--db", journal_url)
    result = json.loads(
        ok(
            "append", chat, "tool_result", '{"call_id": "c1", "content": "SHIPPED"}', "--json", *db
        ).stdout
    )
    reply = ok("append", chat, "assistant_message", "-", *db, stdin='{"content": "Shipped."}\n')
    assert reply.stdout.split()[0] == "#5"
    assert "assistant_message Shipped." in reply.stdout
    custom = json.loads(
        ok("append", chat, "myapp.note", "-", "--json", *db, stdin='{"kept": true}').stdout
    )
    events = stored(journal_url, chat)
    assert events[3] == result
    assert events[-1] == custom
    assert [(e["seq"], e["type"]) for e in events[3:]] == [
        (4, "tool_result"),
        (5, "assistant_message"),
        (6, "myapp.note"),
    ]
    assert events[4]["payload"] == {"content": "Shipped."}


def test_append_with_an_idempotency_key_and_expected_seq(journal_url: str, chat: str) -> None:
    db = ("--db", journal_url)
    args = ("append", chat, "user_message", '{"content": "Hello?"}', "--json", *db)
    first = json.loads(ok(*args, "--idempotency-key", "msg-1").stdout)
    assert json.loads(ok(*args, "--idempotency-key", "msg-1").stdout) == first  # a safe retry
    assert first["seq"] == 4
    assert json.loads(ok(*args, "--expected-seq", "4").stdout)["seq"] == 5
    assert "expected_seq=4" in refused(*args, "--expected-seq", "4")
    assert len(stored(journal_url, chat)) == 5


@pytest.mark.parametrize(
    ("type_", "payload", "says"),
    [
        ("user_message", '{"content": ', "PAYLOAD: not valid JSON"),
        ("user_message", "", "PAYLOAD: not valid JSON"),
        ("user_message", '{"content": "a", "content": "b"}', "twice"),
        ("user_message", '{"content": "a", "n": Infinity}', "Infinity"),
        ("user_message", '["content"]', "PAYLOAD must be a JSON object"),
        ("user_message", "{}", "user_message needs 'content'"),
        ("session_created", '{"title": "x"}', "session_created events are written"),
        ("Not A Type", "{}", "unknown event type"),
        ("tool_result", '{"call_id": "nope", "content": "x"}', "has no tool_call with that id"),
        ("tool_call", '{"call_id": "c1", "name": "again", "arguments": "{}"}', "already used"),
    ],
)
def test_a_bad_append_writes_nothing(
    journal_url: str, chat: str, type_: str, payload: str, says: str
) -> None:
    before = stored(journal_url, chat)
    assert says in refused("append", chat, type_, payload, "--db", journal_url)
    assert says in refused("append", chat, type_, "-", "--db", journal_url, stdin=payload)
    assert stored(journal_url, chat) == before


def test_append_to_a_missing_session_or_database(
    tmp_path: Path, journal_url: str, chat: str
) -> None:
    assert "sess_missing" in refused(
        "append", "sess_missing", "user_message", '{"content": "x"}', "--db", journal_url
    )
    missing = tmp_path / "typo.db"
    assert "no database" in refused(
        "append", "s1", "user_message", '{"content": "x"}', "--db", str(missing)
    )
    assert not missing.exists()
