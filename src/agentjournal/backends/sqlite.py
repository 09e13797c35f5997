"""The SQLite backend: one file, WAL, one writer connection with group commit, readers apart.

Every write runs in `BEGIN IMMEDIATE` on the single writer connection, so a transaction never has
to upgrade a read lock (the deferred upgrade that fails with "database is locked" at once, whatever
the busy timeout). Other processes on the same file queue on SQLite's busy handler. Readers use
their own connections, one per thread, in autocommit mode: each read is one statement, so no read
transaction stays open while a subscriber waits and checkpoints are never starved.
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from collections.abc import Callable, Collection, Sequence
from importlib import resources
from pathlib import Path
from typing import Any, Final, TypeVar

from agentjournal.backends import EventRow, WriteTx
from agentjournal.backends.group_commit import CommitSignal, GroupCommit
from agentjournal.errors import Conflict, InvalidArgument, StorageError
from agentjournal.events import MESSAGE_ROLES, Event, canonical_json
from agentjournal.projection import (
    Message,
    MessageAdded,
    MessageCorrected,
    Projection,
    Session,
    SessionChanged,
    ToolCall,
    ToolCallClosed,
    ToolCallOpened,
    UsageAdded,
    effects,
)
from agentjournal.rules import SessionState

__all__ = ["SQLiteStorage"]

T = TypeVar("T")
I = TypeVar("I")  # noqa: E741

SYNCHRONOUS: Final = {"full": 2, "normal": 1}
BUSY_TIMEOUT_MS: Final = 60_000

_EVENT_COLUMNS = "event_id, session_id, seq, type, payload, idempotency_key, created_at"
_SESSION_COLUMNS = (
    "session_id, tenant, title, status, model, system_prompt, metadata, forked_from, "
    "forked_at_seq, last_seq, last_event_id, event_count, prompt_tokens, completion_tokens, "
    "created_at, updated_at"
)
_MESSAGE_COLUMNS = "session_id, seq, role, content, tokens, edited_seq, created_at"
_TOOL_CALL_COLUMNS = "session_id, call_id, name, arguments, call_seq, status, result, result_seq"


def _insert_statements(table: str, columns: Sequence[str], returning: str = "") -> tuple[str, str]:
    """INSERT of one row (VALUES) and of many (a JSON array of rows, through json_each)."""
    names = ", ".join(columns)
    one = f"INSERT INTO {table} ({names}) VALUES ({', '.join('?' * len(columns))})"
    picks = ", ".join(f"json_extract(value, '$[{i}]')" for i in range(len(columns)))
    many = f"INSERT INTO {table} ({names}) SELECT {picks} FROM json_each(?) ORDER BY key"
    return one, many + (f" RETURNING {returning}" if returning else "")


_INSERT_EVENTS: Final = _insert_statements(
    "events",
    ("tenant", "session_id", "seq", "type", "payload", "idempotency_key", "created_at"),
    returning="event_id, session_id, seq",
)
_INSERT_MESSAGES: Final = _insert_statements(
    "messages", ("session_id", "seq", "role", "content", "tokens", "created_at")
)
_INSERT_TOOL_CALLS: Final = _insert_statements(
    "tool_calls", ("session_id", "call_id", "name", "arguments", "call_seq")
)
_SESSION_FIELDS: Final = frozenset(
    {
        "title",
        "status",
        "model",
        "system_prompt",
        "metadata",
        "forked_from",
        "forked_at_seq",
        "created_at",
    }
)


def _migrations() -> list[str]:
    """Schema versions in order; `PRAGMA user_version` counts how many are applied."""
    schema = resources.files("agentjournal.backends").joinpath("sqlite_schema.sql")
    return [schema.read_text(encoding="utf-8")]


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


def _event(row: tuple[Any, ...]) -> Event:
    event_id, session_id, seq, type_, payload, key, created_at = row
    return Event(
        event_id, session_id, seq, type_, json.loads(payload), created_at, key, str(event_id)
    )


def _session(row: tuple[Any, ...]) -> Session:
    values = list(row)
    values[6] = json.loads(values[6])
    values[10] = str(values[10])
    return Session(*values)


def _position(value: str | None) -> int:
    if value is None or value == "":
        return 0
    if not (isinstance(value, str) and value.isascii() and value.isdigit()):
        raise InvalidArgument(f"position {value!r} is not a position of this journal")
    return int(value)


class SQLiteStorage:
    """A journal in one SQLite file. Thread-safe; share one per process and file."""

    def __init__(self, path: str | Path, durability: str = "full") -> None:
        if durability not in SYNCHRONOUS:
            raise InvalidArgument(f"durability must be 'full' or 'normal', not {durability!r}")
        self.path = str(path)
        self.durability = durability
        self._closed = False
        self._readers: list[sqlite3.Connection] = []
        self._readers_lock = threading.Lock()
        self._local = threading.local()
        self._writer = self._connect(writer=True)
        self._migrate()
        self.signal = CommitSignal()
        self._group = GroupCommit(_Control(self._writer), self.signal.notify)

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

    def close(self) -> None:
        self._closed = True
        with self._readers_lock:
            readers, self._readers = self._readers, []
        for conn in readers:
            conn.close()
        self._writer.close()

    # -- writes -----------------------------------------------------------------------------

    def write(self, work: Callable[[WriteTx], T]) -> T:
        if self._closed:
            raise StorageError("the journal is closed")
        try:
            return self._group.submit(work)
        except sqlite3.IntegrityError as exc:
            # The rules run first, so this is a race the database caught (e.g. a random id reused).
            raise Conflict(f"the database refused the write: {exc}") from exc
        except sqlite3.Error as exc:
            raise StorageError(f"write failed: {exc}") from exc

    def write_grouped(
        self, work: Callable[[WriteTx, Sequence[I]], Sequence[T | BaseException]], item: I
    ) -> T:
        if self._closed:
            raise StorageError("the journal is closed")
        try:
            result: T = self._group.submit_grouped(work, item)
        except sqlite3.IntegrityError as exc:
            raise Conflict(f"the database refused the write: {exc}") from exc
        except sqlite3.Error as exc:
            raise StorageError(f"write failed: {exc}") from exc
        return result

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
            f"SELECT {_SESSION_COLUMNS} FROM sessions WHERE session_id = ? AND tenant = ?",
            (session_id, tenant),
        )
        return _session(rows[0]) if rows else None

    def sessions(
        self, tenant: str, statuses: Sequence[str], limit: int, before: str | None
    ) -> list[Session]:
        marks = ", ".join("?" * len(statuses))
        below = _position(before) if before else 2**63 - 1
        rows = self._read(
            f"SELECT {_SESSION_COLUMNS} FROM sessions WHERE tenant = ? AND status IN ({marks})"
            " AND last_event_id < ? ORDER BY last_event_id DESC LIMIT ?",
            (tenant, *statuses, below, limit),
        )
        return [_session(row) for row in rows]

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
            f"SELECT {_EVENT_COLUMNS} FROM events WHERE session_id = ? AND tenant = ?"
            " AND seq > ? AND seq <= ?"
            f" ORDER BY seq {'DESC' if newest_first else 'ASC'} LIMIT ?",
            (session_id, tenant, after, 2**62 if until is None else until, limit or -1),
        )
        return [_event(row) for row in rows]

    def events_all(self, tenant: str, after: str | None, limit: int) -> list[Event]:
        rows = self._read(
            f"SELECT {_EVENT_COLUMNS} FROM events WHERE tenant = ? AND event_id > ?"
            " ORDER BY event_id LIMIT ?",
            (tenant, _position(after), limit),
        )
        return [_event(row) for row in rows]

    def newest_compaction(self, tenant: str, session_id: str, until: int | None) -> Event | None:
        rows = self._read(
            f"SELECT {_EVENT_COLUMNS} FROM events WHERE session_id = ? AND tenant = ?"
            " AND type = 'context_compacted' AND seq <= ? ORDER BY seq DESC LIMIT 1",
            (session_id, tenant, 2**62 if until is None else until),
        )
        return _event(rows[0]) if rows else None

    def messages(self, tenant: str, session_id: str, last: int | None) -> list[Message]:
        rows = self._read(
            f"SELECT {', '.join('m.' + c for c in _MESSAGE_COLUMNS.split(', '))} FROM messages m"
            " JOIN sessions s USING (session_id) WHERE m.session_id = ? AND s.tenant = ?"
            " ORDER BY m.seq DESC LIMIT ?",
            (session_id, tenant, -1 if last is None else last),
        )
        return [Message(*row) for row in reversed(rows)]

    def tool_calls(self, tenant: str, session_id: str) -> list[ToolCall]:
        rows = self._read(
            f"SELECT {', '.join('t.' + c for c in _TOOL_CALL_COLUMNS.split(', '))}"
            " FROM tool_calls t JOIN sessions s USING (session_id)"
            " WHERE t.session_id = ? AND s.tenant = ? ORDER BY t.call_seq",
            (session_id, tenant),
        )
        return [ToolCall(*row) for row in rows]

    def integrity_errors(self) -> list[str]:
        problems = [row[0] for row in self._read("PRAGMA integrity_check") if row[0] != "ok"]
        problems += [f"foreign key: {row}" for row in self._read("PRAGMA foreign_key_check")]
        return problems


class _Control:
    """Transaction statements on the writer connection, for group commit."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn
        self.tx = _SQLiteTx(conn)

    def begin(self) -> None:
        self.conn.execute("BEGIN IMMEDIATE")

    def commit(self) -> None:
        self.conn.execute("COMMIT")

    def rollback(self) -> None:
        if self.conn.in_transaction:
            self.conn.execute("ROLLBACK")

    def savepoint(self) -> None:
        self.conn.execute("SAVEPOINT request")

    def release(self) -> None:
        self.conn.execute("RELEASE request")

    def rollback_to_savepoint(self) -> None:
        self.conn.execute("ROLLBACK TO request")


class _SQLiteTx:
    """`WriteTx` on the writer connection; valid only inside `SQLiteStorage.write`."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn

    def _one(self, sql: str, params: Sequence[Any]) -> tuple[Any, ...] | None:
        row: tuple[Any, ...] | None = self.conn.execute(sql, params).fetchone()
        return row

    # -- look-ups for the rules -------------------------------------------------------------

    # -- look-ups for the rules: one statement for a whole group ------------------------------

    def session_states(self, session_ids: Collection[str]) -> dict[str, SessionState]:
        rows = self.conn.execute(
            "SELECT s.session_id, s.tenant, s.status, s.last_seq"
            " FROM json_each(?) AS j CROSS JOIN sessions AS s ON s.session_id = j.value",
            (json.dumps(list(session_ids)),),
        ).fetchall()
        return {row[0]: SessionState(*row) for row in rows}

    def session_by_key(self, tenant: str, idempotency_key: str) -> str | None:
        row = self._one(
            "SELECT session_id FROM sessions WHERE tenant = ? AND idempotency_key = ?",
            (tenant, idempotency_key),
        )
        return row[0] if row else None

    def events_by_keys(self, pairs: Collection[tuple[str, str]]) -> dict[tuple[str, str], Event]:
        rows = self.conn.execute(
            f"SELECT {', '.join('e.' + c for c in _EVENT_COLUMNS.split(', '))}"
            " FROM json_each(?) AS j CROSS JOIN events AS e"
            " ON e.session_id = json_extract(j.value, '$[0]')"
            " AND e.idempotency_key = json_extract(j.value, '$[1]')"
            " WHERE e.idempotency_key IS NOT NULL",
            (json.dumps(list(pairs), ensure_ascii=False),),
        ).fetchall()
        events = [_event(row) for row in rows]
        return {(e.session_id, e.idempotency_key): e for e in events if e.idempotency_key}

    def tool_call_statuses(self, pairs: Collection[tuple[str, str]]) -> dict[tuple[str, str], str]:
        rows = self.conn.execute(
            "SELECT t.session_id, t.call_id, t.status FROM json_each(?) AS j"
            " CROSS JOIN tool_calls AS t ON t.session_id = json_extract(j.value, '$[0]')"
            " AND t.call_id = json_extract(j.value, '$[1]')",
            (json.dumps(list(pairs), ensure_ascii=False),),
        ).fetchall()
        return {(row[0], row[1]): row[2] for row in rows}

    def message_kinds(
        self, pairs: Collection[tuple[str, int]]
    ) -> dict[tuple[str, int], tuple[str, bool]]:
        rows = self.conn.execute(
            "SELECT e.session_id, e.seq, e.type,"
            " json_extract(e.payload, '$.supersedes') IS NOT NULL"
            " FROM json_each(?) AS j CROSS JOIN events AS e"
            " ON e.session_id = json_extract(j.value, '$[0]')"
            " AND e.seq = json_extract(j.value, '$[1]')",
            (json.dumps(list(pairs), ensure_ascii=False),),
        ).fetchall()
        return {(r[0], r[1]): (r[2], bool(r[3])) for r in rows if r[2] in MESSAGE_ROLES}

    def compaction_floor(self, session_id: str) -> int:
        row = self._one(
            "SELECT json_extract(payload, '$.until_seq') FROM events"
            " WHERE session_id = ? AND type = 'context_compacted' ORDER BY seq DESC LIMIT 1",
            (session_id,),
        )
        return int(row[0]) if row else 0

    def calls_open_at(self, session_id: str, seq: int) -> list[tuple[str, int]]:
        rows = self.conn.execute(
            "SELECT call_id, coalesce(result_seq, 0) FROM tool_calls"
            " WHERE session_id = ? AND call_seq <= ? AND (result_seq IS NULL OR result_seq > ?)",
            (session_id, seq, seq),
        ).fetchall()
        return [(row[0], row[1]) for row in rows]

    # -- writes -----------------------------------------------------------------------------

    def insert_session(
        self, tenant: str, session_id: str, created_at: int, idempotency_key: str | None
    ) -> None:
        self.conn.execute(
            "INSERT INTO sessions (session_id, tenant, created_at, updated_at, idempotency_key)"
            " VALUES (?, ?, ?, ?, ?)",
            (session_id, tenant, created_at, created_at, idempotency_key),
        )

    def _insert(self, statements: tuple[str, str], rows: Sequence[Sequence[Any]]) -> Any:
        """One row with VALUES; many with one INSERT ... SELECT FROM json_each (one statement,
        so one GIL hand-off, however many rows)."""
        if len(rows) == 1:
            return self.conn.execute(statements[0], rows[0])
        return self.conn.execute(statements[1], (json.dumps(rows, ensure_ascii=False),))

    def insert_events(self, rows: Sequence[EventRow]) -> list[Event]:
        values = [
            (
                row.tenant,
                row.session_id,
                row.seq,
                row.event.type,
                row.event.payload_json,
                row.event.idempotency_key,
                row.created_at,
            )
            for row in rows
        ]
        cursor = self._insert(_INSERT_EVENTS, values)
        if len(rows) == 1:
            ids = {(rows[0].session_id, rows[0].seq): cursor.lastrowid}
        else:
            ids = {(sid, seq): event_id for event_id, sid, seq in cursor.fetchall()}
        stored = [
            Event(
                ids[(row.session_id, row.seq)],
                row.session_id,
                row.seq,
                row.event.type,
                row.event.payload,
                row.created_at,
                row.event.idempotency_key,
                str(ids[(row.session_id, row.seq)]),
            )
            for row in rows
        ]
        self._project(stored)
        return stored

    def copy_events(self, tenant: str, source_id: str, target_id: str, until_seq: int) -> int:
        self.conn.execute(
            "INSERT INTO events (tenant, session_id, seq, type, payload, created_at)"
            " SELECT tenant, ?, seq, type, payload, created_at FROM events"
            " WHERE session_id = ? AND tenant = ? AND seq <= ? ORDER BY seq",
            (target_id, source_id, tenant, until_seq),
        )
        rows = self.conn.execute(
            f"SELECT {_EVENT_COLUMNS} FROM events WHERE session_id = ? ORDER BY seq", (target_id,)
        ).fetchall()
        self._project([_event(row) for row in rows])
        return len(rows)

    def _project(self, events: Sequence[Event]) -> None:
        """Apply the projections of `events` (see agentjournal.projection.effects). The
        sessions' counters follow each inserted event by trigger."""
        added: list[tuple[Any, ...]] = []
        opened: list[tuple[Any, ...]] = []
        corrected: list[tuple[Any, ...]] = []
        closed: list[tuple[Any, ...]] = []
        usage: dict[str, list[int]] = {}
        for event in events:
            sid = event.session_id
            for effect in effects(event):
                match effect:
                    case MessageAdded(seq, role, content, tokens, created_at):
                        added.append((sid, seq, role, content, tokens, created_at))
                    case MessageCorrected(seq, content, tokens, edited_seq):
                        corrected.append((content, tokens, edited_seq, sid, seq))
                    case ToolCallOpened(call_id, name, arguments, call_seq):
                        opened.append((sid, call_id, name, arguments, call_seq))
                    case ToolCallClosed(call_id, result, status, result_seq):
                        closed.append((result, status, result_seq, sid, call_id))
                    case SessionChanged(fields):
                        self._update_session(sid, fields)
                    case UsageAdded(prompt, completion):
                        totals = usage.setdefault(sid, [0, 0])
                        totals[0] += prompt
                        totals[1] += completion
        # Inserts before updates: a result or correction may follow its original in one group.
        if added:
            self._insert(_INSERT_MESSAGES, added)
        if opened:
            self._insert(_INSERT_TOOL_CALLS, opened)
        if corrected:
            self.conn.executemany(
                "UPDATE messages SET content = ?, tokens = ?, edited_seq = ?"
                " WHERE session_id = ? AND seq = ?",
                corrected,
            )
        if closed:
            self.conn.executemany(
                "UPDATE tool_calls SET result = ?, status = ?, result_seq = ?"
                " WHERE session_id = ? AND call_id = ?",
                closed,
            )
        if usage:
            self.conn.executemany(
                "UPDATE sessions SET prompt_tokens = prompt_tokens + ?,"
                " completion_tokens = completion_tokens + ? WHERE session_id = ?",
                [(p, c, sid) for sid, (p, c) in usage.items()],
            )

    def _update_session(self, session_id: str, fields: dict[str, Any]) -> None:
        assert fields.keys() <= _SESSION_FIELDS, fields.keys()
        values = [canonical_json(v) if k == "metadata" else v for k, v in fields.items()]
        assignments = ", ".join(f"{name} = ?" for name in fields)
        self.conn.execute(
            f"UPDATE sessions SET {assignments} WHERE session_id = ?", (*values, session_id)
        )

    def replace_projection(self, tenant: str, projection: Projection) -> None:
        session = projection.session
        sid = session.session_id
        self.conn.execute("DELETE FROM messages WHERE session_id = ?", (sid,))
        self.conn.execute("DELETE FROM tool_calls WHERE session_id = ?", (sid,))
        self.conn.executemany(
            f"INSERT INTO messages ({_MESSAGE_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?)",
            [
                (sid, m.seq, m.role, m.content, m.tokens, m.edited_seq, m.created_at)
                for m in projection.messages.values()
            ],
        )
        self.conn.executemany(
            f"INSERT INTO tool_calls ({_TOOL_CALL_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            [
                (sid, t.call_id, t.name, t.arguments, t.call_seq, t.status, t.result, t.result_seq)
                for t in projection.tool_calls.values()
            ],
        )
        fields = {name: getattr(session, name) for name in _SESSION_FIELDS}
        self._update_session(sid, fields)
        self.conn.execute(
            "UPDATE sessions SET last_seq = ?, last_event_id = ?, event_count = ?, updated_at = ?,"
            " prompt_tokens = ?, completion_tokens = ? WHERE session_id = ? AND tenant = ?",
            (
                session.last_seq,
                _position(session.last_position),
                session.event_count,
                session.updated_at,
                session.prompt_tokens,
                session.completion_tokens,
                sid,
                tenant,
            ),
        )

    def purge(self, tenant: str, session_id: str, actor: str, at: int) -> int:
        row = self._one(
            "SELECT count(*) FROM events WHERE session_id = ? AND tenant = ?", (session_id, tenant)
        )
        count = int(row[0]) if row else 0
        cursor = self.conn.execute(
            "INSERT INTO purge_audit (tenant, session_id, purged_by, purged_at, event_count,"
            " pending) VALUES (?, ?, ?, ?, ?, 1)",
            (tenant, session_id, actor, at, count),
        )
        for table in ("messages", "tool_calls", "events", "sessions"):
            self.conn.execute(f"DELETE FROM {table} WHERE session_id = ?", (session_id,))
        self.conn.execute(
            "UPDATE purge_audit SET pending = NULL WHERE purge_id = ?", (cursor.lastrowid,)
        )
        return count
