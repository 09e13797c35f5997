"""Token usage: each reply's counts are bounded when appended, a session's totals saturate rather
than overflow the database's integers, `verify(rebuild=True)` repairs whatever totals it finds,
and a value the database itself refuses is the caller's error, never "storage unavailable"."""

from __future__ import annotations

from typing import Any

import pytest

from agentjournal import InvalidArgument, InvalidEvent, Journal, StorageError
from agentjournal.events import MAX_TOKEN_COUNT, Event
from agentjournal.projection import MAX_TOKEN_TOTAL, fold
from helpers.raw_sql import RawSQL


def _reply(journal: Journal, sid: str, **usage: Any) -> None:
    journal.append(sid, "assistant_message", {"content": "ok", "usage": usage})


@pytest.mark.parametrize(
    "usage",
    [
        {"prompt_tokens": MAX_TOKEN_COUNT + 1},
        {"completion_tokens": MAX_TOKEN_COUNT + 1},
        {"prompt_tokens": 2**63 - 1},
        {"prompt_tokens": 2**63},
        {"completion_tokens": 2**64},
        {"prompt_tokens": -1},
    ],
)
def test_counts_out_of_range_are_invalid_and_write_nothing(
    journal: Journal, usage: dict[str, int]
) -> None:
    sid = journal.create_session("t").session_id
    with pytest.raises(InvalidEvent, match=str(MAX_TOKEN_COUNT)):
        _reply(journal, sid, **usage)
    session = journal.get_session(sid)
    assert (session.last_seq, session.prompt_tokens, session.completion_tokens) == (1, 0, 0)


def test_the_largest_counts_add_up(journal: Journal) -> None:
    sid = journal.create_session("t").session_id
    for _ in range(3):
        _reply(journal, sid, prompt_tokens=MAX_TOKEN_COUNT, completion_tokens=MAX_TOKEN_COUNT)
    session = journal.get_session(sid)
    assert session.prompt_tokens == session.completion_tokens == 3 * MAX_TOKEN_COUNT
    assert journal.verify().ok


def test_totals_saturate_instead_of_overflowing(journal: Journal, raw: RawSQL) -> None:
    # No session reaches the limit by appending (four billion replies at the largest count):
    # the totals are set near it directly, as the database holds them.
    sid = journal.create_session("t").session_id
    raw.execute(
        "UPDATE sessions SET prompt_tokens = ?, completion_tokens = ? WHERE session_id = ?",
        (MAX_TOKEN_TOTAL - 5, MAX_TOKEN_TOTAL, sid),
    )
    _reply(journal, sid, prompt_tokens=10, completion_tokens=MAX_TOKEN_COUNT)
    _reply(journal, sid, prompt_tokens=1, completion_tokens=1)
    session = journal.get_session(sid)
    assert session.prompt_tokens == session.completion_tokens == MAX_TOKEN_TOTAL
    assert isinstance(session.prompt_tokens, int)
    # The raw totals were not the journal's: verify says so, and rebuild puts back the fold's.
    report = journal.verify(rebuild=True)
    assert {(d.table, d.field) for d in report.differences} == {
        ("sessions", "prompt_tokens"),
        ("sessions", "completion_tokens"),
    }
    session = journal.get_session(sid)
    assert (session.prompt_tokens, session.completion_tokens) == (11, MAX_TOKEN_COUNT + 1)
    assert journal.verify().ok


def test_rebuild_repairs_totals_a_database_held_as_floats(journal: Journal, raw: RawSQL) -> None:
    # What SQLite made of an overflowing sum before totals saturated: a REAL (PostgreSQL refused
    # it instead). Rebuild writes the fold's integers over it.
    sid = journal.create_session("t").session_id
    _reply(journal, sid, prompt_tokens=7)
    if raw.backend == "sqlite":
        raw.execute("UPDATE sessions SET prompt_tokens = 9.3e18 WHERE session_id = ?", (sid,))
    else:
        raw.execute("UPDATE sessions SET prompt_tokens = ? WHERE session_id = ?", (2**63 - 1, sid))
    assert not journal.verify().ok
    journal.verify(rebuild=True)
    assert journal.get_session(sid).prompt_tokens == 7
    assert journal.verify().ok


def test_the_fold_saturates_on_counts_older_journals_accepted() -> None:
    # Before counts were bounded, a reply could report up to 2**63 - 1.
    def reply(seq: int, count: int) -> Event:
        payload = {"content": "", "usage": {"prompt_tokens": count, "completion_tokens": 1}}
        return Event(seq, "s", seq, "assistant_message", payload, 0)

    created = Event(1, "s", 1, "session_created", {"title": ""}, 0)
    projection = fold("s", "t", [created, *(reply(seq, 2**63 - 1) for seq in (2, 3, 4))])
    assert projection.session.prompt_tokens == MAX_TOKEN_TOTAL
    assert projection.session.completion_tokens == 3


def test_a_value_the_database_refuses_is_invalid_not_unavailable(
    journal: Journal, backend: str
) -> None:
    # Whatever the statement that meets it, a value out of the database's range is translated
    # at the backend's boundary as the caller's error.
    storage: Any = journal.storage

    def out_of_range(tx: Any) -> None:
        if backend == "sqlite":
            tx.conn.execute("SELECT ?", (2**64,))
        else:
            tx.conn.execute("SELECT 9223372036854775807::bigint + 1")

    with pytest.raises(InvalidArgument, match="cannot hold a value") as caught:
        storage.write(out_of_range)
    assert not isinstance(caught.value, StorageError)
    sid = journal.create_session("still writable").session_id
    assert journal.get_session(sid).last_seq == 1
