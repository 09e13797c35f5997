"""The SQLite search index: an FTS5 table over the searchable text of events, and how it follows
the journal.

The table is contentless (`content=''`): the text stays in `events` only, and FTS5 keeps just
the terms. Its rowid is the event's `event_id`. FTS5 pays per transaction that touches it (a new
segment, its structure record, merges): measured on SQLite 3.40, 219 µs per event indexed one
per transaction against 7 µs in transactions of 64 (bench/README.md, "Search"). So the index
is not written by every append: `search_state.indexed_upto` says up to which event_id it is
complete, and once `BATCH` events have gathered after it, an append that commits wakes the
follower (`sqlite_index_follower`), a thread that builds their rows and has the next append's
transaction store them; every search first brings the index up to the newest committed event,
so no search sees it lag. The index and its mark always move together, in one transaction, so
a crash leaves them consistent.

Turning text into index rows is most of the index's work (about 550,000 instructions a 4-event
turn, against some 900,000 for all the rest of the append), and it needs no lock: `gather`
reads the pending events from a snapshot and builds their rows before the write transaction,
and `apply` stores them under the write lock if they still hold (no one moved the mark back or
purged one of those events meanwhile; else it indexes under the lock, as `catch_up` always did).
"""

from __future__ import annotations

import json
import sqlite3
from bisect import bisect_right
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final, Literal, TypeAlias

from agentjournal.backends.sqlite_index_follower import Handoff
from agentjournal.search_text import event_text, index_text

__all__ = [
    "BATCH",
    "CREATE",
    "MERGE",
    "Gathered",
    "IndexWork",
    "SearchIndex",
    "configure",
    "fts5_available",
]


# Events gathered before the follower indexes them, and how many it indexes per transaction:
# enough that FTS5's cost per transaction is spread thin, few enough that the append whose
# transaction stores them pays well under a millisecond more (bench/README.md, "2026-12-06:
# the tail"; 32 made the median turn at `normal` a quarter slower).
BATCH: Final = 64

# detail=none: queries are sets of required terms (search_text), never phrases, so positions
# would only make the index larger and every flush slower.
CREATE: Final = (
    "CREATE VIRTUAL TABLE IF NOT EXISTS search_index USING fts5("
    "body, content='', detail=none, tokenize='unicode61')"
)


# How the index's segments are merged. Each batch writes one segment (`_insert`); left alone,
# FTS5 keeps up to 16 small ones side by side (its default `crisismerge`), each repeating the
# terms it shares with the others, and a search reads every one: merging levels of 4 took the
# index's data from 340 to 254 bytes a turn at 1,000 turns of the peers workload (bench/README.md,
# "Bytes per turn"). But FTS5 merges in the transaction that wrote the segment, and a merge of
# four levels' worth held the write lock for 2-7 ms, the slowest turns there were. So FTS5's own
# merging is off (`automerge` 0) and the follower merges levels of `USERMERGE` segments, at most
# `MERGE_PAGES` pages a step (`merge_step`), each step handed to an append's transaction like a
# batch; a crisis merge at `CRISISMERGE` segments remains the backstop for an index no follower
# merges (a rebuild, a SQLite whose follower is not running).
USERMERGE: Final = 4
MERGE_PAGES: Final = 8
CRISISMERGE: Final = 16
SETTINGS: Final = {"automerge": 0, "usermerge": USERMERGE, "crisismerge": CRISISMERGE}


def configure(conn: sqlite3.Connection) -> None:
    """Give the index its merge settings; FTS5 keeps them in the file, so this writes once."""
    found = dict(conn.execute("SELECT k, v FROM search_index_config").fetchall())
    for key, value in SETTINGS.items():
        if found.get(key) != value:
            conn.execute(
                "INSERT INTO search_index (search_index, rank) VALUES (?, ?)", (key, value)
            )


def fts5_available(conn: sqlite3.Connection) -> bool:
    """Whether this SQLite library has FTS5 (the standard library's build usually does)."""
    try:
        conn.execute("CREATE VIRTUAL TABLE temp.fts5_probe USING fts5(x)")
    except sqlite3.OperationalError:
        return False
    conn.execute("DROP TABLE temp.fts5_probe")
    return True


@dataclass(frozen=True, slots=True)
class Gathered:
    """Index rows built outside the write lock: the mark they were read after, the event_id of
    every event read (ascending, text or not) and the (event_id, text) rows to insert."""

    upto: int
    event_ids: list[int]
    rows: list[tuple[int, str]]


# A step of merging (`SearchIndex.merge_step`), as work handed to an append's transaction.
MERGE: Final = "merge"
IndexWork: TypeAlias = Gathered | Literal["merge"]


class SearchIndex:
    """The index's writes: `gather` on a reader connection, outside any write transaction;
    `apply` and the rest on the writer connection inside one."""

    def __init__(self) -> None:
        # What this process last read of search_state; only a hint for when to look again
        # (another process may have moved it on, never back).
        self.upto_hint = 0
        # The newest event_id this process stored (`note`); BATCH past the hint: time to index.
        self.newest_seen = 0
        # The follower's work waiting for the next append's transaction (sqlite_index_follower).
        self.handoff: Handoff[IndexWork] = Handoff()

    def note(self, newest_id: int) -> None:
        """An append stored events up to `newest_id` (called inside its transaction)."""
        if newest_id > self.newest_seen:
            self.newest_seen = newest_id

    def due(self) -> bool:
        """Whether `BATCH` events may have gathered since the mark last seen."""
        return self.newest_seen - self.upto_hint >= BATCH

    def gather(self, reader: sqlite3.Connection, limit: int, at_least: int = 1) -> Gathered | None:
        """The index rows of up to `limit` events after the mark, read in one statement (one
        snapshot) and built here, with no lock held; None if fewer than `at_least` are pending."""
        if at_least > 1:
            # Another process may have indexed since the hint: the mark alone says whether to
            # read any payload at all.
            (self.upto_hint,) = reader.execute("SELECT indexed_upto FROM search_state").fetchone()
            if self.newest_seen - self.upto_hint < at_least:
                return None
        found = reader.execute(
            "SELECT (SELECT indexed_upto FROM search_state), event_id, type, payload FROM events"
            " WHERE event_id > (SELECT indexed_upto FROM search_state) ORDER BY event_id LIMIT ?",
            (limit,),
        ).fetchall()
        if len(found) < at_least or not found:
            if found:
                self.upto_hint = found[0][0]
            else:
                (self.upto_hint,) = reader.execute(
                    "SELECT indexed_upto FROM search_state"
                ).fetchone()
            return None
        return Gathered(found[0][0], [row[1] for row in found], _index_rows([r[1:] for r in found]))

    def apply(self, conn: sqlite3.Connection, gathered: Gathered) -> int:
        """Inside the write transaction: store what `gather` built if it still holds, else index
        under the lock; how many events the mark moved over (0: another writer had them)."""
        ids = gathered.event_ids
        (upto,) = conn.execute("SELECT indexed_upto FROM search_state").fetchone()
        if upto >= ids[-1]:
            self.upto_hint = upto
            return 0
        fresh = len(ids) - bisect_right(ids, upto)
        # Event ids only grow, so in (upto, last] the snapshot saw every event there is; fewer
        # now means a purge took some, whose text must not enter the index.
        (count,) = conn.execute(
            "SELECT count(*) FROM events WHERE event_id > ? AND event_id <= ?", (upto, ids[-1])
        ).fetchone()
        if upto < gathered.upto or count != fresh:
            return self.catch_up(conn, len(ids))
        self._insert(conn, [row for row in gathered.rows if row[0] > upto], ids[-1])
        return fresh

    def catch_up(self, conn: sqlite3.Connection, limit: int) -> int:
        """Index up to `limit` events after the mark, and move it; how many were read."""
        (upto,) = conn.execute("SELECT indexed_upto FROM search_state").fetchone()
        rows = conn.execute(
            "SELECT event_id, type, payload FROM events WHERE event_id > ?"
            " ORDER BY event_id LIMIT ?",
            (upto, limit),
        ).fetchall()
        if not rows:
            self.upto_hint = upto
            return 0
        self._insert(conn, _index_rows(rows), rows[-1][0])
        return len(rows)

    def _insert(self, conn: sqlite3.Connection, values: list[tuple[int, str]], upto: int) -> None:
        # One-row statements: a statement that inserts several rows opens a savepoint, and FTS5
        # writes its pending terms out as a segment at every savepoint, so 128-row statements
        # made two segments of every batch.
        conn.executemany("INSERT INTO search_index (rowid, body) VALUES (?, ?)", values)
        self.upto_hint = upto
        conn.execute("UPDATE search_state SET indexed_upto = ?", (upto,))

    def store(self, conn: sqlite3.Connection, work: IndexWork) -> int:
        """Inside a write transaction: do the follower's `work`; events indexed, or for a merge
        step 1 if it merged anything."""
        if work == MERGE:
            return int(self.merge_step(conn))
        assert isinstance(work, Gathered)
        return self.apply(conn, work)

    def merge_step(self, conn: sqlite3.Connection) -> bool:
        """Inside a write transaction: up to `MERGE_PAGES` pages of merging levels that hold
        `USERMERGE` segments; whether there was any to do (FTS5 reports work done as two or
        more changes)."""
        before = conn.total_changes
        conn.execute(
            "INSERT INTO search_index (search_index, rank) VALUES ('merge', ?)", (MERGE_PAGES,)
        )
        return conn.total_changes - before >= 2

    def remove_session(self, conn: sqlite3.Connection, tenant: str, session_id: str) -> None:
        """Take the session's indexed events out of the index (before they are deleted: a
        contentless FTS5 row is deleted by giving the text it was indexed with)."""
        rows = conn.execute(
            "SELECT event_id, type, payload FROM events WHERE session_id = ? AND tenant = ?"
            " AND event_id <= (SELECT indexed_upto FROM search_state)",
            (session_id, tenant),
        ).fetchall()
        conn.executemany(
            "INSERT INTO search_index (search_index, rowid, body) VALUES ('delete', ?, ?)",
            _index_rows(rows),
        )

    def clear(self, conn: sqlite3.Connection) -> None:
        """Empty the index and its mark (a rebuild starts here)."""
        conn.execute("INSERT INTO search_index (search_index) VALUES ('delete-all')")
        conn.execute("UPDATE search_state SET indexed_upto = 0")
        self.upto_hint = 0


def _index_rows(rows: Sequence[tuple[int, str, str]]) -> list[tuple[int, str]]:
    found = []
    for event_id, type_, payload in rows:
        text = event_text(type_, json.loads(payload))
        if text:
            found.append((event_id, index_text(text)))
    return found
