"""purge_session: every row of the session goes, one audit row stays, nothing else changes."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentjournal import Journal, SessionNotFound
from expected import settled_feed
from helpers.contract import rejected, seed
from helpers.raw_sql import RawSQL


def test_purge_removes_every_row_and_leaves_one_audit_row(
    journal: Journal, raw: RawSQL, db_path: Path
) -> None:
    sid = seed(journal)
    journal.append(sid, "user_message", {"content": "secret-marker-7f3a"})
    keep = seed(journal, "keep")
    kept = (journal.events(keep), journal.messages(keep), journal.tool_calls(keep))
    largest = max(e.event_id for e in settled_feed(journal))
    assert journal.purge_session(sid, actor="admin@example") == 8
    for table in ("events", "messages", "tool_calls", "sessions"):
        count = raw.execute(f"SELECT count(*) FROM {table} WHERE session_id = ?", (sid,))
        assert count.fetchone() == (0,), table
    assert raw.columns("purge_audit") == [
        "purge_id",
        "tenant",
        "session_id",
        "purged_by",
        "purged_at",
        "event_count",
        "pending",
        # PostgreSQL: its transaction, so that replication follows purges in commit order.
        *(["tx"] if raw.backend == "postgres" else []),
    ]
    rows = raw.execute(
        "SELECT tenant, session_id, purged_by, event_count, pending FROM purge_audit"
    ).fetchall()
    assert rows == [("default", sid, "admin@example", 8, None)]
    with pytest.raises(SessionNotFound):
        journal.events(sid)
    assert sid not in {e.session_id for e in journal.events_all(limit=1000)}
    assert sid not in {s.session_id for s in journal.sessions(status="all")}
    assert (journal.events(keep), journal.messages(keep), journal.tool_calls(keep)) == kept
    rejected(journal, SessionNotFound, lambda: journal.purge_session(sid))
    # Event ids are never reused.
    assert journal.append(keep, "user_message", {"content": "x"}).event_id > largest
    assert journal.verify().ok
    if raw.backend == "sqlite":
        # secure_delete and the checkpoint leave no copy of the content in the files.
        for path in db_path.parent.iterdir():
            if path.name.startswith(db_path.name):
                assert b"secret-marker-7f3a" not in path.read_bytes(), path.name
