"""The SQLite schema: versioned with PRAGMA user_version, migrated forward, refused when newer."""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path

import pytest

from agentjournal import Journal, StorageError
from agentjournal.backends import sqlite as sqlite_backend
from agentjournal.projection import Message, ToolCall, message_tokens


def user_version(path: Path) -> int:
    with sqlite3.connect(path) as conn:
        return int(conn.execute("PRAGMA user_version").fetchone()[0])


def test_a_new_file_gets_the_current_schema_version(db_path: Path) -> None:
    Journal.open(db_path).close()
    assert user_version(db_path) == len(sqlite_backend._migrations())


def test_opening_migrates_forward_and_keeps_the_data(
    db_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with Journal.open(db_path) as journal:
        sid = journal.create_session("before").session_id
        journal.append(sid, "user_message", {"content": "kept"})
    current = sqlite_backend._migrations()
    extra = (
        "ALTER TABLE sessions ADD COLUMN note TEXT;\nCREATE INDEX sessions_note ON sessions (note);"
    )
    monkeypatch.setattr(sqlite_backend, "_migrations", lambda: [*current, extra])
    with Journal.open(db_path) as journal:
        assert [m.content for m in journal.messages(sid)] == ["kept"]
        assert journal.verify().ok
    assert user_version(db_path) == len(current) + 1
    with sqlite3.connect(db_path) as conn:
        columns = [row[1] for row in conn.execute("PRAGMA table_info(sessions)")]
    assert "note" in columns


def test_a_newer_schema_is_refused(db_path: Path) -> None:
    Journal.open(db_path).close()
    with sqlite3.connect(db_path) as conn:
        conn.execute("PRAGMA user_version = 99")
    with pytest.raises(StorageError, match="newer"):
        Journal.open(db_path)


def test_many_openers_of_a_new_file_migrate_it_once(db_path: Path) -> None:
    errors: list[BaseException] = []

    def open_and_append(index: int) -> None:
        try:
            with Journal.open(db_path) as journal:
                sid = journal.create_session(f"s{index}").session_id
                journal.append(sid, "user_message", {"content": str(index)})
        except BaseException as exc:  # collected for the assertion below
            errors.append(exc)

    threads = [threading.Thread(target=open_and_append, args=(i,)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert errors == []
    with Journal.open(db_path) as journal:
        assert len(journal.sessions(limit=100)) == 8
        assert journal.verify().ok


def test_statements_split_keeps_trigger_bodies_whole() -> None:
    script = sqlite_backend._migrations()[0]
    statements = sqlite_backend._statements(script)
    triggers = [s for s in statements if s.startswith("CREATE TRIGGER")]
    assert triggers
    assert all(s.rstrip().endswith("END;") for s in triggers)
    assert all(sqlite3.complete_statement(s) for s in statements)


def write_old_version(db_path: Path, version: int, rows: str) -> None:
    """A file at schema `version` holding `rows`, as that version's code would have left it."""
    conn = sqlite3.connect(db_path, isolation_level=None)
    for script in sqlite_backend._migrations()[:version]:
        for statement in sqlite_backend._statements(script):
            conn.execute(statement)
    for statement in sqlite_backend._statements(rows):
        conn.execute(statement)
    conn.execute(f"PRAGMA user_version = {version}")
    conn.close()


# A version 3 file as version 3 wrote it: the counters by trigger, the texts copied.
_V3_ROWS = """
INSERT INTO sessions (session_id, tenant, title, created_at, updated_at)
 VALUES ('s', 'default', 'v3', 1, 1);
INSERT INTO events (tenant, session_id, seq, type, payload, created_at) VALUES
 ('default', 's', 1, 'session_created', '{"title":"v3"}', 1),
 ('default', 's', 2, 'user_message', '{"content":"你好,\\n订单?"}', 2),
 ('default', 's', 3, 'tool_call', '{"arguments":"{}","call_id":"a","name":"f"}', 3),
 ('default', 's', 4, 'tool_result', '{"call_id":"a","content":"42"}', 3),
 ('default', 's', 5, 'tool_call', '{"arguments":"[1]","call_id":"b","name":"g"}', 3),
 ('default', 's', 6, 'user_message', '{"content":"你好!","supersedes":2}', 4);
INSERT INTO messages (session_id, seq, role, content, tokens, edited_seq, created_at) VALUES
 ('s', 2, 'user', '你好!', {tokens}, 6, 2);
INSERT INTO tool_calls (session_id, call_id, name, arguments, call_seq, status, result, result_seq)
 VALUES ('s', 'a', 'f', '{}', 3, 'ok', '42', 4), ('s', 'b', 'g', '[1]', 5, 'pending', NULL, NULL);
"""


def test_version_4_keeps_every_projection_row_of_a_version_3_file(db_path: Path) -> None:
    """Version 4 drops the texts `messages` and `tool_calls` copied from the events, and the
    per-event counters trigger: what the verbs return must not change."""
    tokens = message_tokens("user", "你好!")
    write_old_version(db_path, 3, _V3_ROWS.replace("{tokens}", str(tokens)))
    with Journal.open(db_path) as journal:
        assert journal.verify().ok
        assert journal.messages("s") == [Message("s", 2, "user", "你好!", tokens, 6, 2)]
        assert journal.tool_calls("s") == [
            ToolCall("s", "a", "f", "{}", 3, "ok", "42", 4),
            ToolCall("s", "b", "g", "[1]", 5),
        ]
        session = journal.get_session("s")
        assert (session.last_seq, session.event_count, session.turn_open) == (6, 6, True)
        journal.append("s", "tool_result", {"call_id": "b", "content": "x", "is_error": True})
        journal.append("s", "assistant_message", {"content": "好", "usage": {"prompt_tokens": 3}})
        assert journal.verify().ok
        session = journal.get_session("s")
        assert (session.event_count, session.prompt_tokens, session.turn_open) == (8, 3, False)
        assert [(c.call_id, c.status, c.result) for c in journal.tool_calls("s")] == [
            ("a", "ok", "42"),
            ("b", "error", "x"),
        ]
    with sqlite3.connect(db_path) as conn:
        columns = {row[1] for row in conn.execute("PRAGMA table_info(messages)")}
        triggers = {
            row[0] for row in conn.execute("SELECT name FROM sqlite_schema WHERE type = 'trigger'")
        }
    assert "content" not in columns
    assert "events_advance_session" not in triggers


def test_a_message_row_naming_the_wrong_event_is_found_by_verify_and_rebuilt(
    db_path: Path,
) -> None:
    with Journal.open(db_path) as journal:
        sid = journal.create_session("refs").session_id
        first = journal.append(sid, "user_message", {"content": "first"})
        journal.append(sid, "assistant_message", {"content": "second"})
        journal.append(
            sid, "user_message", {"content": "first, corrected", "supersedes": first.seq}
        )
        before = journal.messages(sid)
    with sqlite3.connect(db_path) as conn:
        conn.execute(
            "UPDATE messages SET content_id = (SELECT min(event_id) FROM events) WHERE seq = ?",
            (first.seq,),
        )
    with Journal.open(db_path) as journal:
        report = journal.verify()
        # The role is read from the event the row names too (version 6).
        assert [(d.table, d.key, d.field) for d in report.differences] == [
            ("messages", f"{sid}/{first.seq}", "role"),
            ("messages", f"{sid}/{first.seq}", "content"),
        ]
        assert journal.verify(rebuild=True).rebuilt == [sid]
        assert journal.messages(sid) == before
        assert [m.content for m in before] == ["first, corrected", "second"]


# A version 5 file as version 5 wrote it: role, time and a call's name copied into the rows.
_V5_ROWS = """
INSERT INTO sessions (session_id, tenant, title, created_at, updated_at, last_seq, last_event_id,
 event_count, turn_open) VALUES ('s', 'default', 'v5', 1, 6, 6, 6, 6, 0);
INSERT INTO events (tenant, session_id, seq, type, payload, created_at) VALUES
 ('default', 's', 1, 'session_created', '{"title":"v5"}', 1),
 ('default', 's', 2, 'user_message', '{"content":"你好,\\n订单?"}', 2),
 ('default', 's', 3, 'tool_call', '{"arguments":"{}","call_id":"a","name":"f"}', 3),
 ('default', 's', 4, 'tool_result', '{"call_id":"a","content":"42"}', 4),
 ('default', 's', 5, 'assistant_message', '{"content":"好"}', 5),
 ('default', 's', 6, 'user_message', '{"content":"你好!","supersedes":2}', 6);
INSERT INTO messages (session_id, seq, role, tokens, edited_seq, created_at, content_id) VALUES
 ('s', 2, 'user', {user_tokens}, 6, 2, 6), ('s', 5, 'assistant', {assistant_tokens}, NULL, 5, 5);
INSERT INTO tool_calls (session_id, call_id, name, call_seq, status, result_seq)
 VALUES ('s', 'a', 'f', 3, 'ok', 4);
"""


def test_version_6_reads_the_role_time_and_name_a_version_5_file_copied(db_path: Path) -> None:
    """Version 6 keeps a message's role and time, and a call's name, in their events only."""
    user_tokens = message_tokens("user", "你好!")
    assistant_tokens = message_tokens("assistant", "好")
    rows = _V5_ROWS.replace("{user_tokens}", str(user_tokens))
    write_old_version(db_path, 5, rows.replace("{assistant_tokens}", str(assistant_tokens)))
    with Journal.open(db_path) as journal:
        assert journal.verify().ok
        assert journal.messages("s") == [
            Message("s", 2, "user", "你好!", user_tokens, 6, 2),
            Message("s", 5, "assistant", "好", assistant_tokens, None, 5),
        ]
        assert journal.tool_calls("s") == [ToolCall("s", "a", "f", "{}", 3, "ok", "42", 4)]
        # A correction after the migration keeps the original's time, not its own.
        journal.append("s", "assistant_message", {"content": "好的", "supersedes": 5})
        assert [(m.role, m.created_at) for m in journal.messages("s")] == [
            ("user", 2),
            ("assistant", 5),
        ]
        assert journal.verify().ok
    with sqlite3.connect(db_path) as conn:
        messages = {row[1] for row in conn.execute("PRAGMA table_info(messages)")}
        calls = {row[1] for row in conn.execute("PRAGMA table_info(tool_calls)")}
        assert conn.execute("SELECT seq, created_at FROM messages ORDER BY seq").fetchall() == [
            (2, 2),
            (5, 5),
        ]
        # The row and the database agree: a time is kept exactly when a correction is shown.
        with pytest.raises(sqlite3.IntegrityError, match="CHECK"):
            conn.execute("UPDATE messages SET created_at = NULL WHERE seq = 2")
    assert "role" not in messages
    assert "name" not in calls


def test_an_uncorrected_message_takes_its_role_and_time_from_its_event(db_path: Path) -> None:
    with Journal.open(db_path) as journal:
        sid = journal.create_session("lean").session_id
        said = journal.append(sid, "assistant_message", {"content": "hello"})
        journal.append(sid, "tool_call", {"call_id": "c", "name": "look_up", "arguments": "{}"})
        assert [(m.role, m.created_at) for m in journal.messages(sid)] == [
            ("assistant", said.created_at)
        ]
        assert [c.name for c in journal.tool_calls(sid)] == ["look_up"]
    with sqlite3.connect(db_path) as conn:
        assert conn.execute("SELECT created_at FROM messages").fetchall() == [(None,)]


# A version 6 file as version 6 wrote it, with two tenants: `s` of default (a correction, a
# call, a key), `t` of acme (a task and its sub-task), and a purged session whose event ids
# (7, 8) are above every id kept.
_V6_ROWS = """
INSERT INTO sessions (session_id, tenant, title, created_at, updated_at, last_seq, last_event_id,
 event_count, turn_open) VALUES ('s', 'default', 'v6', 1, 6, 5, 5, 5, 1),
 ('t', 'acme', 't', 1, 3, 3, 6, 3, 0);
INSERT INTO events (event_id, tenant, session_id, seq, type, payload, idempotency_key, created_at)
 VALUES
 (1, 'default', 's', 1, 'session_created', '{"title":"v6"}', NULL, 1),
 (2, 'default', 's', 2, 'user_message', '{"content":"你好"}', 'k2', 2),
 (3, 'default', 's', 3, 'tool_call', '{"arguments":"{}","call_id":"a","name":"f"}', NULL, 3),
 (4, 'acme', 't', 1, 'session_created', '{"title":"t"}', NULL, 1),
 (5, 'default', 's', 4, 'user_message', '{"content":"你好!","supersedes":2}', NULL, 6),
 (6, 'acme', 't', 2, 'task_created',
  '{"input":{"n":1},"max_retries":3,"task_id":"task_1","type":"ship"}', NULL, 2);
INSERT INTO events (event_id, tenant, session_id, seq, type, payload, idempotency_key, created_at)
 VALUES (7, 'acme', 't', 3, 'task_created',
  '{"input":null,"max_retries":3,"parent_task_id":"task_1","task_id":"task_0","type":"pack"}',
  NULL, 3);
UPDATE sqlite_sequence SET seq = 9 WHERE name = 'events';
UPDATE sessions SET last_seq = 4, last_event_id = 5, event_count = 4 WHERE session_id = 's';
UPDATE sessions SET last_event_id = 7 WHERE session_id = 't';
INSERT INTO messages (session_id, seq, tokens, edited_seq, created_at, content_id) VALUES
 ('s', 2, {tokens}, 4, 2, 5);
INSERT INTO tool_calls (session_id, call_id, call_seq, status, result_seq)
 VALUES ('s', 'a', 3, 'pending', NULL);
INSERT INTO tasks (task_id, tenant, session_id, parent_task_id, type, input, max_retries,
 created_seq, created_at, updated_at) VALUES
 ('task_1', 'acme', 't', NULL, 'ship', '{"n":1}', 3, 2, 2, 2),
 ('task_0', 'acme', 't', 'task_1', 'pack', 'null', 3, 3, 3, 3);
"""


def test_version_7_keys_sessions_by_tenant_and_id_and_keeps_a_version_6_file(
    db_path: Path,
) -> None:
    """Version 7 rebuilds every table keyed by a session id with the tenant in the key: the
    rows, the event ids and the id counter come through, and then two tenants may share an id."""
    tokens = message_tokens("user", "你好!")
    write_old_version(db_path, 6, _V6_ROWS.replace("{tokens}", str(tokens)))
    with Journal.open(db_path) as journal:
        acme = journal.for_tenant("acme")
        assert journal.verify().ok
        assert acme.verify().ok
        assert journal.messages("s") == [Message("s", 2, "user", "你好!", tokens, 4, 2)]
        assert journal.tool_calls("s") == [ToolCall("s", "a", "f", "{}", 3)]
        assert [e.event_id for e in journal.events("s")] == [1, 2, 3, 5]
        assert [(t.task_id, t.parent_task_id) for t in acme.tasks(session_id="t")] == [
            ("task_0", "task_1"),
            ("task_1", None),
        ]
        # The key still makes a retry return the original, in its own tenant only.
        retry = journal.append("s", "user_message", {"content": "你好"}, idempotency_key="k2")
        assert retry.event_id == 2
        # Ids stay never reused: the purged 8 and 9 stay taken.
        after = journal.append("s", "tool_result", {"call_id": "a", "content": "42"})
        assert after.event_id == 10
        # The point of the version: acme may now hold an `s` of its own, and default a `t`.
        acme.create_session("acme's s", session_id="s")
        journal.create_session("default's t", session_id="t")
        acme.cancel_task("task_1")
        assert journal.get_session("s").title == "v6"
        assert [t.status for t in acme.tasks(session_id="t")] == ["cancelled", "cancelled"]
        assert journal.verify().ok
        assert acme.verify().ok
        assert journal.storage.integrity_errors() == []
    with sqlite3.connect(db_path) as conn:
        keys = {
            table: [row[1] for row in conn.execute(f"PRAGMA table_info({table})") if row[5]]
            for table in ("sessions", "messages", "tool_calls")
        }
        tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_schema")}
    assert keys == {
        "sessions": ["session_id", "tenant"],
        "messages": ["session_id", "tenant", "seq"],
        "tool_calls": ["session_id", "tenant", "call_id"],
    }
    assert not {name for name in tables if name.endswith("_v7")}
