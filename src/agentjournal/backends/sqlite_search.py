"""The SQLite search index: an FTS5 table over the searchable text of events, and how it follows
the journal.

The table is contentless (`content=''`): the text stays in `events` only, and FTS5 keeps just
the terms. Its rowid is the event's `event_id`. FTS5 pays per transaction that touches it (a new
segment, its structure record, merges): measured on SQLite 3.40, 219 µs per event indexed one
per transaction against 7 µs in transactions of 64 (bench/README.md, "Search"). So the index
is not written by every append: `search_state.indexed_upto` says up to which event_id it is
complete, and the writer indexes the events after it, in the same transaction as an append,
once `BATCH` of them have gathered; every search first brings it up to the newest committed
event. The index and its mark always move together, so a crash leaves them consistent.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence
from itertools import chain
from typing import Final

from agentjournal.search_text import event_text, index_text

__all__ = ["BATCH", "CREATE", "SearchIndex", "fts5_available"]

# Events gathered before an append indexes them; at most CATCH_UP_LIMIT are indexed in one
# append's transaction (a database that predates the index catches up a little per append).
BATCH: Final = 256
CATCH_UP_LIMIT: Final = 1024
_ROWS_PER_INSERT: Final = 128

# detail=none: queries are sets of required terms (search_text), never phrases, so positions
# would only make the index larger and every flush slower.
CREATE: Final = (
    "CREATE VIRTUAL TABLE IF NOT EXISTS search_index USING fts5("
    "body, content='', detail=none, tokenize='unicode61')"
)


def fts5_available(conn: sqlite3.Connection) -> bool:
    """Whether this SQLite library has FTS5 (the standard library's build usually does)."""
    try:
        conn.execute("CREATE VIRTUAL TABLE temp.fts5_probe USING fts5(x)")
    except sqlite3.OperationalError:
        return False
    conn.execute("DROP TABLE temp.fts5_probe")
    return True


class SearchIndex:
    """The index's writes, run on the writer connection inside a write transaction."""

    def __init__(self) -> None:
        # What this process last read of search_state; only a hint for when to look again
        # (another process may have moved it on, never back).
        self.upto_hint = 0

    def maybe_catch_up(self, conn: sqlite3.Connection, newest_id: int) -> None:
        """Index the pending events if `BATCH` have gathered since the mark last seen."""
        if newest_id - self.upto_hint >= BATCH:
            self.catch_up(conn, CATCH_UP_LIMIT)

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
        values = _index_rows(rows)
        for start in range(0, len(values), _ROWS_PER_INSERT):
            chunk = values[start : start + _ROWS_PER_INSERT]
            conn.execute(
                "INSERT INTO search_index (rowid, body) VALUES "
                + ", ".join(["(?, ?)"] * len(chunk)),
                list(chain.from_iterable(chunk)),
            )
        self.upto_hint = rows[-1][0]
        conn.execute("UPDATE search_state SET indexed_upto = ?", (self.upto_hint,))
        return len(rows)

    def remove_session(self, conn: sqlite3.Connection, session_id: str) -> None:
        """Take the session's indexed events out of the index (before they are deleted: a
        contentless FTS5 row is deleted by giving the text it was indexed with)."""
        rows = conn.execute(
            "SELECT event_id, type, payload FROM events WHERE session_id = ?"
            " AND event_id <= (SELECT indexed_upto FROM search_state)",
            (session_id,),
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
