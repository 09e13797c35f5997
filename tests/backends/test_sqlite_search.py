"""The SQLite search index (backends/sqlite_search.py): a thread follows the journal in batches
after appends, with its rows built before the write lock, every search sees every committed
event, it rebuilds, and a SQLite without FTS5 still appends."""

from __future__ import annotations

import sqlite3
from contextlib import closing
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentjournal import InvalidArgument, Journal, SearchUnavailable
from agentjournal.backends import sqlite as sqlite_backend
from agentjournal.backends.sqlite_search import BATCH, CREATE, Gathered
from agentjournal.backends.sqlite_write import SQLiteTx
from agentjournal.search_text import index_text, parse_query


def indexed_upto(path: Path) -> int:
    with closing(sqlite3.connect(path)) as conn:
        return int(conn.execute("SELECT indexed_upto FROM search_state").fetchone()[0])


def test_appends_index_in_batches_and_a_search_sees_the_rest(db_path: Path) -> None:
    with Journal.open(db_path) as journal:
        sid = journal.create_session("batches").session_id
        journal.append(sid, "user_message", {"content": "puffin"})
        assert indexed_upto(db_path) == 0  # below BATCH: not yet
        assert [h.seq for h in journal.search("puffin").hits] == [2]
        assert indexed_upto(db_path) == 2  # the search brought it up to date
        for n in range(2 * BATCH):
            journal.append(sid, "user_message", {"content": f"gannet {n}"})
        # The appends that found BATCH waiting woke the follower; no search asked for this.
        assert journal.storage.wait_for_index(timeout=30)
        assert indexed_upto(db_path) == 2 * BATCH + 2
        assert journal.verify().ok


def test_the_follower_stops_with_the_journal_and_leaves_the_index_consistent(
    db_path: Path,
) -> None:
    """Closed while the follower may be storing a batch: the index holds whole batches only, and
    the next open's search sees every event."""
    with Journal.open(db_path) as journal:
        sid = journal.create_session("closing").session_id
        journal.append_many(
            sid,
            [
                {"type": "user_message", "payload": {"content": f"shearwater {n}"}}
                for n in range(3 * BATCH)
            ],
        )
    upto = indexed_upto(db_path)
    assert upto in (0, BATCH, 2 * BATCH, 3 * BATCH) or upto == 3 * BATCH + 1
    assert len(matching(db_path, "shearwater")) == max(0, upto - 1)
    with Journal.open(db_path) as journal:
        assert journal.search("shearwater", limit=1).hits
        assert indexed_upto(db_path) == 3 * BATCH + 1
        assert journal.verify().ok


def test_a_storage_that_leaves_the_index_to_searches_appends_without_indexing(
    db_path: Path,
) -> None:
    storage = sqlite_backend.SQLiteStorage(db_path, search_index=False)
    with Journal(storage) as journal:
        sid = journal.create_session("unindexed").session_id
        for n in range(BATCH + 10):
            journal.append(sid, "user_message", {"content": f"kittiwake {n}"})
        assert indexed_upto(db_path) == 0  # past BATCH, and still nothing indexed
        assert len(journal.search("kittiwake", limit=5).hits) == 5
        assert indexed_upto(db_path) == BATCH + 11  # the search indexed everything first


def matching(path: Path, term: str) -> list[int]:
    """The index's own rowids for `term`, whether or not their events still exist."""
    with closing(sqlite3.connect(path)) as conn:
        rows = conn.execute(
            "SELECT rowid FROM search_index WHERE search_index MATCH ? ORDER BY rowid", (term,)
        )
        return [row[0] for row in rows]


def apply_in_write(storage: sqlite_backend.SQLiteStorage, gathered: Gathered) -> int:
    search = storage._search
    assert search is not None

    def work(tx: object) -> int:
        assert isinstance(tx, SQLiteTx)
        return search.apply(tx.conn, gathered)

    return storage.write(work)  # type: ignore[arg-type]


def test_rows_built_before_the_lock_never_index_a_session_purged_meanwhile(db_path: Path) -> None:
    with Journal.open(db_path) as journal:
        storage = journal.storage
        assert isinstance(storage, sqlite_backend.SQLiteStorage)
        assert storage._search is not None
        keep = journal.create_session("keep").session_id
        gone = journal.create_session("gone").session_id
        journal.append(keep, "user_message", {"content": "guillemot"})
        journal.append(gone, "user_message", {"content": "shearwater"})
        gathered = storage._search.gather(storage._reader(), 100)
        assert gathered is not None
        assert len(gathered.event_ids) == 4
        journal.purge_session(gone)  # after the rows were built, before they are stored
        assert apply_in_write(storage, gathered) == 2  # indexed again under the lock
        assert indexed_upto(db_path) == 3  # keep's two events; gone's are no more
        assert matching(db_path, "shearwater") == []
        assert [h.session_id for h in journal.search("guillemot").hits] == [keep]
        assert journal.verify().ok


def test_rows_built_before_the_lock_skip_what_another_writer_indexed(db_path: Path) -> None:
    with Journal.open(db_path) as journal, Journal.open(db_path) as other:
        storage = journal.storage
        assert isinstance(storage, sqlite_backend.SQLiteStorage)
        assert storage._search is not None
        sid = journal.create_session("two").session_id
        journal.append(sid, "user_message", {"content": "razorbill"})
        gathered = storage._search.gather(storage._reader(), 100)
        assert gathered is not None
        assert [h.seq for h in other.search("razorbill").hits] == [2]  # indexes events 1-2
        journal.append(sid, "user_message", {"content": "fulmar"})
        assert apply_in_write(storage, gathered) == 0
        assert indexed_upto(db_path) == 2
        assert matching(db_path, "razorbill") == [2]
        assert [h.seq for h in journal.search("fulmar").hits] == [3]
        assert journal.verify().ok


def test_a_database_from_before_the_index_is_searchable_after_reindex(db_path: Path) -> None:
    with Journal.open(db_path) as journal:
        sid = journal.create_session("old").session_id
        journal.append(sid, "user_message", {"content": "ptarmigan"})
    with closing(sqlite3.connect(db_path)) as conn:  # as a version-4 file would be
        conn.execute("DROP TABLE search_index")
        conn.execute("UPDATE search_state SET indexed_upto = 0")
        conn.commit()
    with Journal.open(db_path) as journal:
        assert journal.reindex_search() == 2
        assert [h.seq for h in journal.search("ptarmigan").hits] == [2]
        assert journal.verify().ok


def test_without_fts5_appends_work_and_search_says_why(
    db_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # No SQLite without FTS5 is at hand: the probe answers as such a build's would.
    monkeypatch.setattr(sqlite_backend, "fts5_available", lambda conn: False)
    with Journal.open(db_path) as journal:
        sid = journal.create_session("plain").session_id
        journal.append(sid, "user_message", {"content": "kittiwake"})
        with pytest.raises(SearchUnavailable, match="FTS5"):
            journal.search("kittiwake")
        with pytest.raises(SearchUnavailable):
            journal.reindex_search()
        assert journal.verify().ok
        journal.purge_session(sid)  # no index in this file: nothing to leave behind


_memory = sqlite3.connect(":memory:")
_memory.execute(CREATE)


@settings(max_examples=300)
@given(st.text(max_size=200))
def test_every_parsed_query_is_valid_fts5(text: str) -> None:
    try:
        query = parse_query(text)
    except InvalidArgument:
        return
    _memory.execute("INSERT INTO search_index (search_index) VALUES ('delete-all')")
    _memory.execute(
        "INSERT INTO search_index (rowid, body) VALUES (1, ?)", (index_text(" ".join(query.words)),)
    )
    rows = _memory.execute(
        "SELECT rowid FROM search_index WHERE search_index MATCH ?", (query.fts5(),)
    ).fetchall()
    # The text made of the query's own words holds every one of its terms.
    assert rows == [(1,)]
