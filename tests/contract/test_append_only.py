"""Append-only in the database: raw SQL can change no event or audit row, nor commit a purge."""

from __future__ import annotations

import pytest

from agentjournal import Journal
from helpers.contract import seed, state
from helpers.raw_sql import PENDING_PURGE, RawSQL, purge_row


def test_update_and_delete_of_events_fail_in_the_database(journal: Journal, raw: RawSQL) -> None:
    sid = seed(journal)
    before = state(journal)
    for statement in (
        "UPDATE events SET payload = '{}' WHERE session_id = ?",
        "UPDATE events SET seq = seq + 100 WHERE session_id = ?",
        "DELETE FROM events WHERE session_id = ?",
    ):
        with pytest.raises(raw.IntegrityError, match="append-only"):
            raw.execute(statement, (sid,))
    with pytest.raises(raw.IntegrityError, match="append-only"):
        raw.execute("DELETE FROM events")
    if raw.backend == "postgres":
        with pytest.raises(raw.IntegrityError, match="append-only"):
            raw.execute("TRUNCATE events CASCADE")
    assert state(journal) == before


def test_a_pending_purge_row_cannot_be_committed(journal: Journal, raw: RawSQL) -> None:
    sid = seed(journal)
    before = state(journal)
    if raw.backend == "sqlite":
        raw.execute("PRAGMA foreign_keys = ON")
    # Delete inside the transaction that opened the purge, but without closing it: COMMIT fails.
    raw.begin()
    raw.execute(PENDING_PURGE, purge_row(sid))
    raw.execute("DELETE FROM events WHERE session_id = ?", (sid,))
    with pytest.raises(raw.IntegrityError, match=r"(?i)foreign key"):
        raw.commit()
    raw.rollback()
    # A pending row alone cannot be committed either, so a later DELETE finds none.
    raw.begin()
    raw.execute(PENDING_PURGE, purge_row(sid))
    with pytest.raises(raw.IntegrityError, match=r"(?i)foreign key"):
        raw.commit()
    raw.rollback()
    with pytest.raises(raw.IntegrityError, match="append-only"):
        raw.execute("DELETE FROM events WHERE session_id = ?", (sid,))
    assert raw.execute("SELECT count(*) FROM purge_audit").fetchone() == (0,)
    assert state(journal) == before


def test_purge_audit_rows_are_permanent(journal: Journal, raw: RawSQL) -> None:
    sid = seed(journal)
    journal.purge_session(sid)
    with pytest.raises(raw.IntegrityError, match="permanent"):
        raw.execute("DELETE FROM purge_audit")
    with pytest.raises(raw.IntegrityError, match="permanent"):
        raw.execute("UPDATE purge_audit SET event_count = 0")
    with pytest.raises(raw.IntegrityError, match="permanent"):
        raw.execute("UPDATE purge_audit SET pending = 1")
    if raw.backend == "postgres":
        with pytest.raises(raw.IntegrityError, match="permanent"):
            raw.execute("TRUNCATE purge_audit")
    assert raw.execute("SELECT count(*) FROM purge_audit").fetchone() == (1,)
