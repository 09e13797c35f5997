"""The SQLite backend: one file, WAL, one writer connection with group commit, readers apart.

Every write runs in `BEGIN IMMEDIATE` on the single writer connection, so a transaction never has
to upgrade a read lock (the deferred upgrade that fails with "database is locked" at once, whatever
the busy timeout). Other processes' writers on the same file queue on a lock file beside it
(`sqlite_lock`), and on SQLite's busy handler behind that. Readers use their own connections,
one per thread, in autocommit mode: each read is one statement, so no read transaction stays
open while a subscriber waits and checkpoints are never starved.
"""

from __future__ import annotations

import json
import logging
import sqlite3
import threading
import time
from collections.abc import Callable, Collection, Sequence
from contextlib import AbstractContextManager
from importlib import resources
from pathlib import Path
from typing import Any, Final, TypeVar

from agentjournal.backends import (
    ApiKeyRow,
    PurgeRecord,
    ReplicatedSession,
    ReplicationProgress,
    WriteTx,
)
from agentjournal.backends.group_commit import CommitSignal, GroupCommit
from agentjournal.backends.projection_rows import task_from_row
from agentjournal.backends.sqlite_index_follower import IndexFollower
from agentjournal.backends.sqlite_lock import WriterLock
from agentjournal.backends.sqlite_rows import (
    EVENT_COLUMNS,
    MESSAGE_SELECT,
    SESSION_COLUMNS,
    TASK_COLUMNS,
    TOOL_CALL_SELECT,
    event_from_row,
    message_from_row,
    position_number,
    session_from_row,
    tool_call_from_row,
)
from agentjournal.backends.sqlite_search import (
    BATCH,
    MERGE,
    Gathered,
    IndexWork,
    SearchIndex,
    fts5_available,
)
from agentjournal.backends.sqlite_search import CREATE as CREATE_SEARCH_INDEX
from agentjournal.backends.sqlite_search import configure as configure_search_index
from agentjournal.backends.sqlite_wal import DEFAULT_WAL_LIMIT_BYTES, WalLimit
from agentjournal.backends.sqlite_write import (
    PROGRESS_COLUMNS,
    REPLICATED_COLUMNS,
    Control,
    SQLiteTx,
)
from agentjournal.backends.turn_holds import TurnHolds
from agentjournal.errors import Conflict, InvalidArgument, SearchUnavailable, StorageError
from agentjournal.events import Event
from agentjournal.projection import Message, Session, Task, ToolCall
from agentjournal.search_text import SearchFilter, SearchQuery

__all__ = ["SQLiteStorage"]

T = TypeVar("T")
I = TypeVar("I")  # noqa: E741

_KEY_COLUMNS: Final = "key_id, tenant, secret_hash, label, created_at, revoked_at"
SYNCHRONOUS: Final = {"full": 2, "normal": 1}
BUSY_TIMEOUT_MS: Final = 60_000


def _migrations() -> list[str]:
    """Schema versions in order (sqlite_migrations/NNNN_*.sql); `PRAGMA user_version` counts
    how many are applied. A released file is never edited: changes come as a new file."""
    folder = resources.files("agentjournal.backends").joinpath("sqlite_migrations")
    files = sorted((f for f in folder.iterdir() if f.name.endswith(".sql")), key=lambda f: f.name)
    return [f.read_text(encoding="utf-8") for f in files]


def schema_versions() -> int:
    """The schema version this agentjournal writes (the number of migrations)."""
    return len(_migrations())


def _statements(script: str) -> list[str]:
    """Split a script into statements (trigger bodies contain semicolons, so split on complete)."""
    statements, pending = [], ""
    for line in script.splitlines(keepends=True):
        if not pending and (not line.strip() or line.lstrip().startswith("--")):
            continue
        pending += line
        if sqlite3.complete_statement(pending):
            statements.append(pending.strip())
            pending = ""
    return statements


def _enable_wal(conn: sqlite3.Connection) -> str:
    """Switch to WAL, waiting out other openers: the switch of a new file answers SQLITE_BUSY at
    once, without the busy handler, while another connection holds a lock on it."""
    mode: str = conn.execute("PRAGMA journal_mode").fetchone()[0]
    deadline = time.monotonic() + BUSY_TIMEOUT_MS / 1000
    while mode.lower() != "wal":
        try:
            mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() > deadline:
                raise
            time.sleep(0.005)
        else:
            break
    return mode


log = logging.getLogger("agentjournal.sqlite")

# A value the database cannot hold (an integer past 64 bits, a string or blob past SQLite's
# limit): the caller's data, not the database failing, so never a StorageError ("unavailable").
_DATA_ERRORS: Final = (OverflowError, sqlite3.DataError)


def _refused_value(exc: BaseException) -> InvalidArgument:
    return InvalidArgument(f"the database cannot hold a value of this request: {exc}")


class SQLiteStorage:
    """A journal in one SQLite file. Thread-safe; share one per process and file."""

    def __init__(
        self,
        path: str | Path,
        durability: str = "full",
        *,
        wal_limit_bytes: int | None = DEFAULT_WAL_LIMIT_BYTES,
        search_index: bool = True,
    ) -> None:
        """`wal_limit_bytes`: past this size the writer empties the `-wal` file (see
        `sqlite_wal`); None leaves it to SQLite's automatic checkpoints alone.
        `search_index=False`: appends leave the search index alone (a search still brings it up
        to date first); bench/search_bench.py measures appends with and without it."""
        if durability not in SYNCHRONOUS:
            raise InvalidArgument(f"durability must be 'full' or 'normal', not {durability!r}")
        if wal_limit_bytes is not None and wal_limit_bytes < 1:
            raise InvalidArgument(f"wal_limit_bytes must be positive, not {wal_limit_bytes!r}")
        self.path = str(path)
        self.durability = durability
        self._closed = False
        self._readers: list[sqlite3.Connection] = []
        self._readers_lock = threading.Lock()
        self._local = threading.local()
        self._writer = self._connect(writer=True)
        self._migrate()
        self._search = self._open_search_index()
        self.wal = (
            None
            if wal_limit_bytes is None
            else WalLimit(self.path, wal_limit_bytes, busy_timeout_ms=BUSY_TIMEOUT_MS)
        )
        if self.wal is not None:
            self.wal.configure(self._writer)
        self.signal = CommitSignal()
        try:
            self._lock = WriterLock(self.path)
        except StorageError:
            self._writer.close()
            raise
        control = Control(
            self._writer, self._lock, self.wal, self._search, appends_index=search_index
        )
        self._group = GroupCommit(control, self.signal.notify)
        self._follower = IndexFollower(self._index_batch)
        # In-process only: two servers on one file would not see each other's turns.
        self._turns = TurnHolds()

    # -- connections ------------------------------------------------------------------------

    def _connect(self, *, writer: bool) -> sqlite3.Connection:
        try:
            conn = sqlite3.connect(
                self.path,
                isolation_level=None,  # we issue BEGIN IMMEDIATE / COMMIT ourselves
                check_same_thread=False,
                timeout=BUSY_TIMEOUT_MS / 1000,
                cached_statements=256,
            )
        except sqlite3.Error as exc:
            raise StorageError(f"cannot open {self.path!r}: {exc}") from exc
        try:
            conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
            conn.execute("PRAGMA foreign_keys = ON")
            mode = _enable_wal(conn)
            conn.execute(f"PRAGMA synchronous = {SYNCHRONOUS[self.durability]}")
            if writer:
                # Purged content is overwritten, not just unlinked from the b-tree.
                conn.execute("PRAGMA secure_delete = ON")
            else:
                conn.execute("PRAGMA query_only = ON")
                # SQLite's lower() folds ASCII only; a search matches as PostgreSQL's does.
                conn.create_function("agentjournal_lower", 1, _lower, deterministic=True)
        except sqlite3.Error as exc:
            conn.close()
            raise StorageError(f"cannot set up {self.path!r}: {exc}") from exc
        self._check_settings(conn, mode)
        return conn

    def _check_settings(self, conn: sqlite3.Connection, mode: str) -> None:
        synchronous = conn.execute("PRAGMA synchronous").fetchone()[0]
        foreign_keys = conn.execute("PRAGMA foreign_keys").fetchone()[0]
        if mode.lower() != "wal" or synchronous != SYNCHRONOUS[self.durability] or not foreign_keys:
            conn.close()
            raise StorageError(
                f"{self.path!r} refused the settings durability needs (journal_mode={mode}, "
                f"synchronous={synchronous}, foreign_keys={foreign_keys}); is it a file on a "
                "local disk, and not an in-memory database?"
            )

    def _reader(self) -> sqlite3.Connection:
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            if self._closed:
                raise StorageError("the journal is closed")
            conn = self._connect(writer=False)
            self._local.conn = conn
            with self._readers_lock:
                self._readers.append(conn)
        return conn

    def _read(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        try:
            return self._reader().execute(sql, params).fetchall()
        except _DATA_ERRORS as exc:
            raise _refused_value(exc) from exc
        except sqlite3.Error as exc:
            raise StorageError(f"read failed: {exc}") from exc

    def _migrate(self) -> None:
        conn = self._writer
        migrations = _migrations()
        found = conn.execute("PRAGMA user_version").fetchone()[0]
        if found > len(migrations):
            conn.close()
            raise StorageError(
                f"{self.path!r} has schema version {found}, newer than this agentjournal knows"
                f" ({len(migrations)}); upgrade agentjournal to open it"
            )
        if found == len(migrations):
            return
        conn.execute("BEGIN IMMEDIATE")
        try:
            version = conn.execute("PRAGMA user_version").fetchone()[0]
            for number, script in enumerate(migrations[version:], start=version + 1):
                for statement in _statements(script):
                    conn.execute(statement)
                conn.execute(f"PRAGMA user_version = {number}")
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise

    def _open_search_index(self) -> SearchIndex | None:
        """The FTS5 index, created on the first open by a SQLite that has FTS5; None without."""
        if not fts5_available(self._writer):
            return None
        try:
            self._writer.execute(CREATE_SEARCH_INDEX)
            configure_search_index(self._writer)
        except sqlite3.Error as exc:
            self._writer.close()
            raise StorageError(f"cannot create the search index of {self.path!r}: {exc}") from exc
        index = SearchIndex()
        (index.upto_hint,) = self._writer.execute(
            "SELECT indexed_upto FROM search_state"
        ).fetchone()
        return index

    def close(self) -> None:
        self._follower.close()  # it may be storing a batch with the writer connection
        self._closed = True
        with self._readers_lock:
            readers, self._readers = self._readers, []
        for conn in readers:
            conn.close()
        self._writer.close()
        self._lock.close()

    # -- writes -----------------------------------------------------------------------------

    def write(self, work: Callable[[WriteTx], T]) -> T:
        if self._closed:
            raise StorageError("the journal is closed")
        try:
            result = self._group.submit(work)
        except sqlite3.IntegrityError as exc:
            # The rules run first, so this is a race the database caught (e.g. a random id reused).
            raise Conflict(f"the database refused the write: {exc}") from exc
        except _DATA_ERRORS as exc:
            raise _refused_value(exc) from exc
        except sqlite3.Error as exc:
            raise StorageError(f"write failed: {exc}") from exc
        self._follow_search()
        return result

    def write_grouped(
        self, work: Callable[[WriteTx, Sequence[I]], Sequence[T | BaseException]], item: I
    ) -> T:
        if self._closed:
            raise StorageError("the journal is closed")
        try:
            result: T = self._group.submit_grouped(work, item)
        except sqlite3.IntegrityError as exc:
            raise Conflict(f"the database refused the write: {exc}") from exc
        except _DATA_ERRORS as exc:
            raise _refused_value(exc) from exc
        except sqlite3.Error as exc:
            raise StorageError(f"write failed: {exc}") from exc
        self._follow_search()
        return result

    def _follow_search(self) -> None:
        """After a commit: wake the follower once `BATCH` events wait to be indexed (see
        `sqlite_search`). The commit that got here has happened; what the follower fails to
        do is not the caller's: the index stays as it was, consistent, and the next wake or
        search catches it up."""
        search = self._search
        if search is not None and search.due():
            self._follower.wake()

    def _index_batch(self) -> int:
        """The follower's step: index `BATCH` pending events if that many wait; how many."""
        search = self._search
        assert search is not None  # only woken by an append that found the index due
        gathered = search.gather(self._reader(), BATCH, at_least=BATCH)
        if gathered is None:
            return 0

        def store_itself(work: IndexWork) -> int:
            return self._write_index(lambda tx: search.store(_sqlite_tx(tx).conn, work))

        indexed = search.handoff.run(gathered, store_itself)
        while search.handoff.run(MERGE, store_itself):
            pass
        return indexed or 0

    def wait_for_index(self, timeout: float = 10.0) -> bool:
        """Wait until the follower has indexed what the appends so far woke it for; False on
        timeout. (A search needs no wait: it brings the index up to date first.)"""
        return self._follower.wait_idle(timeout)

    def hold_turn(self, tenant: str, session_id: str) -> AbstractContextManager[bool]:
        return self._turns.hold(tenant, session_id)

    def checkpoint(self) -> None:
        """Move the WAL into the main file and truncate it (after a purge: no copy lingers)."""
        # Its own connection: the writer connection belongs to whichever thread leads a commit.
        conn = self._connect(writer=True)
        try:
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
        finally:
            conn.close()

    # -- reads ------------------------------------------------------------------------------

    def session(self, tenant: str, session_id: str) -> Session | None:
        rows = self._read(
            f"SELECT {SESSION_COLUMNS} FROM sessions WHERE session_id = ? AND tenant = ?",
            (session_id, tenant),
        )
        return session_from_row(rows[0]) if rows else None

    def sessions(
        self,
        tenant: str,
        statuses: Sequence[str],
        limit: int,
        before: str | None,
        search: str | None = None,
    ) -> list[Session]:
        marks = ", ".join("?" * len(statuses))
        below = position_number(before) if before else 2**63 - 1
        matching = ""
        needle: tuple[str, ...] = ()
        if search:
            matching = (
                " AND (instr(agentjournal_lower(title), ?) > 0"
                " OR instr(agentjournal_lower(session_id), ?) > 0)"
            )
            needle = (search.lower(),) * 2
        rows = self._read(
            f"SELECT {SESSION_COLUMNS} FROM sessions WHERE tenant = ? AND status IN ({marks})"
            f" AND last_event_id < ?{matching} ORDER BY last_event_id DESC LIMIT ?",
            (tenant, *statuses, below, *needle, limit),
        )
        return [session_from_row(row) for row in rows]

    def tenants(self) -> list[str]:
        return [row[0] for row in self._read("SELECT DISTINCT tenant FROM sessions ORDER BY 1")]

    def session_ids(self, tenant: str) -> list[str]:
        rows = self._read(
            "SELECT session_id FROM sessions WHERE tenant = ? ORDER BY last_event_id", (tenant,)
        )
        return [row[0] for row in rows]

    def events(
        self,
        tenant: str,
        session_id: str,
        *,
        after: int = 0,
        until: int | None = None,
        limit: int | None = None,
        newest_first: bool = False,
    ) -> list[Event]:
        rows = self._read(
            f"SELECT {EVENT_COLUMNS} FROM events WHERE session_id = ? AND tenant = ?"
            " AND seq > ? AND seq <= ?"
            f" ORDER BY seq {'DESC' if newest_first else 'ASC'} LIMIT ?",
            (session_id, tenant, after, 2**62 if until is None else until, limit or -1),
        )
        return [event_from_row(row) for row in rows]

    def events_all(self, tenant: str, after: str | None, limit: int) -> list[Event]:
        rows = self._read(
            f"SELECT {EVENT_COLUMNS} FROM events WHERE tenant = ? AND event_id > ?"
            " ORDER BY event_id LIMIT ?",
            (tenant, position_number(after), limit),
        )
        return [event_from_row(row) for row in rows]

    def feed_head(self, tenant: str, after: str | None) -> str | None:
        rows = self._read(
            "SELECT max(event_id) FROM events WHERE tenant = ? AND event_id > ?",
            (tenant, position_number(after)),
        )
        return None if rows[0][0] is None else str(rows[0][0])

    def position_key(self, position: str) -> int:
        return position_number(position)

    def newest_compaction(self, tenant: str, session_id: str, until: int | None) -> Event | None:
        rows = self._read(
            f"SELECT {EVENT_COLUMNS} FROM events WHERE session_id = ? AND tenant = ?"
            " AND type = 'context_compacted' AND seq <= ? ORDER BY seq DESC LIMIT 1",
            (session_id, tenant, 2**62 if until is None else until),
        )
        return event_from_row(rows[0]) if rows else None

    def messages(self, tenant: str, session_id: str, last: int | None) -> list[Message]:
        rows = self._read(
            f"{MESSAGE_SELECT} WHERE m.session_id = ?1 AND m.tenant = ?2"
            " ORDER BY m.seq DESC LIMIT ?3",
            (session_id, tenant, -1 if last is None else last),
        )
        return [message_from_row(row) for row in reversed(rows)]

    def tool_calls(
        self,
        tenant: str,
        session_id: str,
        *,
        call_ids: Collection[str] | None = None,
        open_only: bool = False,
    ) -> list[ToolCall]:
        where = "t.session_id = ?1 AND t.tenant = ?2"
        params = [session_id, tenant]
        if call_ids is not None:
            where += " AND t.call_id IN (SELECT value FROM json_each(?3))"
            params.append(json.dumps(list(call_ids), ensure_ascii=False))
        if open_only:
            where += " AND t.status = 'pending'"
        # Named calls are sorted here, not by ORDER BY: given one, SQLite walked the session's
        # whole call_seq index to save a sort, instead of looking each call up by its key.
        rows = self._read(
            f"{TOOL_CALL_SELECT} WHERE {where}"
            + ("" if call_ids is not None else " ORDER BY t.call_seq"),
            params,
        )
        calls = [tool_call_from_row(row) for row in rows]
        return sorted(calls, key=lambda c: c.call_seq) if call_ids is not None else calls

    def task(self, tenant: str, task_id: str) -> Task | None:
        rows = self._read(
            f"SELECT {TASK_COLUMNS} FROM tasks WHERE task_id = ? AND tenant = ?", (task_id, tenant)
        )
        return task_from_row(rows[0]) if rows else None

    def tasks(
        self,
        tenant: str,
        *,
        statuses: Sequence[str] | None = None,
        type: str | None = None,
        session_id: str | None = None,
        after: str | None = None,
        limit: int = 100,
    ) -> list[Task]:
        where, params = ["tenant = ?", "task_id > ?"], [tenant, after or ""]
        if statuses is not None:
            where.append(f"status IN ({', '.join('?' * len(statuses))})")
            params += statuses
        for column, value in (("type", type), ("session_id", session_id)):
            if value is not None:
                where.append(f"{column} = ?")
                params.append(value)
        rows = self._read(
            f"SELECT {TASK_COLUMNS} FROM tasks WHERE {' AND '.join(where)}"
            " ORDER BY task_id LIMIT ?",
            (*params, limit),
        )
        return [task_from_row(row) for row in rows]

    def open_turns(self, tenant: str | None) -> list[Session]:
        rows = self._read(
            f"SELECT {SESSION_COLUMNS} FROM sessions WHERE turn_open = 1"
            " AND (?1 IS NULL OR tenant = ?1) AND status != 'deleted' ORDER BY last_event_id",
            (tenant,),
        )
        return [session_from_row(row) for row in rows]

    def api_key(self, key_id: str) -> ApiKeyRow | None:
        rows = self._read(f"SELECT {_KEY_COLUMNS} FROM api_keys WHERE key_id = ?", (key_id,))
        return ApiKeyRow(*rows[0]) if rows else None

    def api_keys(self, tenant: str | None) -> list[ApiKeyRow]:
        rows = self._read(
            f"SELECT {_KEY_COLUMNS} FROM api_keys WHERE ?1 IS NULL OR tenant = ?1"
            " ORDER BY created_at, key_id",
            (tenant,),
        )
        return [ApiKeyRow(*row) for row in rows]

    # -- replication ------------------------------------------------------------------------

    def source_id(self) -> str:
        rows = self._read("SELECT value FROM journal_meta WHERE name = 'source_id'")
        if not rows:
            raise StorageError(f"{self.path!r} has no source id (journal_meta was emptied)")
        return str(rows[0][0])

    def purges(self, tenant: str, after: str | None, limit: int) -> list[PurgeRecord]:
        # One writer at a time: purge ids are given in commit order.
        rows = self._read(
            "SELECT purge_id, session_id, purged_by, purged_at, event_count FROM purge_audit"
            " WHERE tenant = ? AND purge_id > ? AND pending IS NULL ORDER BY purge_id LIMIT ?",
            (tenant, position_number(after), limit),
        )
        return [PurgeRecord(str(row[0]), *row[1:]) for row in rows]

    def purge_head(self, tenant: str, after: str | None) -> str | None:
        rows = self._read(
            "SELECT max(purge_id) FROM purge_audit"
            " WHERE tenant = ? AND purge_id > ? AND pending IS NULL",
            (tenant, position_number(after)),
        )
        return None if rows[0][0] is None else str(rows[0][0])

    def replication_status(self, tenant: str | None) -> list[ReplicationProgress]:
        rows = self._read(
            f"SELECT {PROGRESS_COLUMNS} FROM replication_progress"
            " WHERE ? IS NULL OR tenant = ? ORDER BY source_id, source_tenant, tenant",
            (tenant, tenant),
        )
        return [ReplicationProgress(*row) for row in rows]

    def replicated_session_rows(
        self, tenant: str, source_id: str | None, states: Sequence[str] | None
    ) -> list[ReplicatedSession]:
        rows = self._read(
            f"SELECT {REPLICATED_COLUMNS} FROM session_sources WHERE tenant = ?"
            " AND (? IS NULL OR source_id = ?) ORDER BY session_id, source_id",
            (tenant, source_id, source_id),
        )
        return [ReplicatedSession(*row) for row in rows if states is None or row[3] in states]

    def session_origins(self, tenant: str, session_ids: Sequence[str]) -> dict[str, str]:
        if not session_ids:
            return {}
        rows = self._read(
            "SELECT r.session_id, r.source_id FROM json_each(?) AS j CROSS JOIN session_sources"
            " AS r ON r.session_id = j.value AND r.tenant = ? AND r.state IN ('ok', 'stopped')",
            (json.dumps(list(session_ids), ensure_ascii=False), tenant),
        )
        return {row[0]: row[1] for row in rows}

    def integrity_errors(self) -> list[str]:
        problems = [row[0] for row in self._read("PRAGMA integrity_check") if row[0] != "ok"]
        problems += [f"foreign key: {row}" for row in self._read("PRAGMA foreign_key_check")]
        if self._search is not None:
            try:
                # Writes nothing; FTS5 checks its own structure (a command, hence the writer).
                self.write(
                    lambda tx: _sqlite_tx(tx).conn.execute(
                        "INSERT INTO search_index (search_index) VALUES ('integrity-check')"
                    )
                )
            except StorageError as exc:
                problems.append(f"search index: {exc}")
            orphans = self._read(
                "SELECT count(*) FROM search_index_docsize"
                " WHERE id NOT IN (SELECT event_id FROM events)"
            )[0][0]
            if orphans:
                problems.append(f"search index: {orphans} rows of events that do not exist")
        return problems

    # -- search -----------------------------------------------------------------------------

    def _searchable(self) -> SearchIndex:
        if self._search is None:
            raise SearchUnavailable(
                f"search needs SQLite's FTS5, which the SQLite library here (version"
                f" {sqlite3.sqlite_version}) was built without; appends and reads work as before"
            )
        return self._search

    def index_pending(
        self, chunk: int = 4096, progress: Callable[[int], None] | None = None
    ) -> int:
        """Bring the search index up to the newest committed event; how many events were read
        (`progress` gets it so far after each chunk)."""
        search = self._searchable()
        total = 0
        while True:
            # The rows are built from a snapshot before the write lock (see sqlite_search).
            try:
                gathered = search.gather(self._reader(), chunk)
            except sqlite3.Error as exc:
                raise StorageError(f"read failed: {exc}") from exc
            if gathered is None:
                return total
            total += self._store_gathered(search, gathered)
            if progress is not None:
                progress(total)

    def _store_gathered(self, search: SearchIndex, gathered: Gathered) -> int:
        return self._write_index(lambda tx: search.apply(_sqlite_tx(tx).conn, gathered))

    def _write_index(self, work: Callable[[WriteTx], int]) -> int:
        """Index work in a write transaction of its own (as `write`, without following)."""
        try:
            return self._group.submit(work)
        except sqlite3.Error as exc:
            raise StorageError(f"write failed: {exc}") from exc

    def reindex(self, progress: Callable[[int], None] | None = None) -> int:
        """Rebuild the search index from the journal (a database older than the index, or one
        whose check found differences); the number of events read."""
        self._searchable()
        self.write(lambda tx: _sqlite_tx(tx).clear_search_index())
        return self.index_pending(progress=progress)

    def search(
        self,
        tenant: str,
        query: SearchQuery,
        where: SearchFilter,
        below: int | None,
        size: int,
    ) -> list[int]:
        self.index_pending()
        clauses = ["search_index MATCH ?", "search_index.rowid <= ?", "e.tenant = ?"]
        params: list[Any] = [query.fts5(), 2**62 if below is None else below, tenant]
        clauses.append(f"s.status IN ({', '.join('?' * len(where.statuses))})")
        params += where.statuses
        if where.types is not None:
            clauses.append(f"e.type IN ({', '.join('?' * len(where.types))})")
            params += where.types
        if where.since is not None:
            clauses.append("e.created_at >= ?")
            params.append(where.since)
        if where.until is not None:
            clauses.append("e.created_at < ?")
            params.append(where.until)
        # The newest `size` matches: FTS5 walks its matches newest first and stops there, so a
        # common word costs `size` rows. No bm25(): it counts every match of each word first.
        try:
            rows = (
                self._reader()
                .execute(
                    "SELECT search_index.rowid FROM search_index"
                    " CROSS JOIN events AS e ON e.event_id = search_index.rowid"
                    " CROSS JOIN sessions AS s"
                    " ON s.session_id = e.session_id AND s.tenant = e.tenant"
                    f" WHERE {' AND '.join(clauses)} ORDER BY search_index.rowid DESC LIMIT ?",
                    (*params, size),
                )
                .fetchall()
            )
        except sqlite3.OperationalError as exc:
            if "fts5" in str(exc):
                # A character this SQLite's tokenizer splits and Python's Unicode data does
                # not (a newer letter): the query's fault, not the database's.
                raise InvalidArgument(f"query cannot be searched: {exc}") from exc
            raise StorageError(f"read failed: {exc}") from exc
        except sqlite3.Error as exc:
            raise StorageError(f"read failed: {exc}") from exc
        return [int(row[0]) for row in rows]

    def events_by_id(self, tenant: str, event_ids: Sequence[int]) -> list[Event]:
        rows = self._read(
            f"SELECT {EVENT_COLUMNS} FROM events WHERE tenant = ?"
            " AND event_id IN (SELECT value FROM json_each(?))",
            (tenant, json.dumps(list(event_ids))),
        )
        return [event_from_row(row) for row in rows]

    def search_index_ids(self, tenant: str, session_id: str) -> tuple[set[int], int]:
        """The session's event ids the index holds, and the event id it is complete up to."""
        self._searchable()
        # One statement, one snapshot: the follower may store a batch between two reads.
        rows = self._read(
            "SELECT indexed_upto, 1 FROM search_state UNION ALL"
            " SELECT d.id, 0 FROM events AS e JOIN search_index_docsize AS d ON d.id = e.event_id"
            " WHERE e.session_id = ? AND e.tenant = ?",
            (session_id, tenant),
        )
        upto = next(int(value) for value, is_mark in rows if is_mark)
        return {int(value) for value, is_mark in rows if not is_mark}, upto


def _sqlite_tx(tx: WriteTx) -> SQLiteTx:
    assert isinstance(tx, SQLiteTx)
    return tx


def _lower(text: str | None) -> str | None:
    return None if text is None else text.lower()
