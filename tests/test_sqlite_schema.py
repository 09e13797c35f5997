"""The SQLite schema: versioned with PRAGMA user_version, migrated forward, refused when newer."""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path

import pytest

from agentjournal import Journal, StorageError
from agentjournal.backends import sqlite as sqlite_backend


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
