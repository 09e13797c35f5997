"""The SQLite write transaction: `WriteTx` on the one writer connection, and the statements group
commit drives it with. Valid only inside `SQLiteStorage.write`."""

from __future__ import annotations

import json
import logging
import sqlite3
from collections.abc import Collection, Mapping, Sequence
from dataclasses import astuple
from functools import cache
from itertools import chain
from typing import Any, Final

from agentjournal.backends import ApiKeyRow, EventRow, ReplicatedSession, ReplicationProgress
from agentjournal.backends.projection_rows import (
    SESSION_FIELDS,
    TASK_COLUMN_NAMES,
    by_tenant,
    encode_session_fields,
    events_by_key,
    projection_rows,
    task_from_row,
    task_values,
)
from agentjournal.backends.sqlite_lock import WriterLock
from agentjournal.backends.sqlite_rows import (
    EVENT_COLUMNS,
    TASK_COLUMNS,
    event_from_row,
    position_number,
)
from agentjournal.backends.sqlite_search import IndexWork, SearchIndex
from agentjournal.backends.sqlite_wal import WalLimit
from agentjournal.errors import StorageError
from agentjournal.events import MESSAGE_ROLES, Event
from agentjournal.projection import Projection, Task
from agentjournal.rules import SessionKey, SessionState

__all__ = ["Control", "SQLiteTx"]

log = logging.getLogger("agentjournal.sqlite")


# Rows go in as plain VALUES, many to a statement (`_insert_rows`). Measured on SQLite 3.40:
# INSERT ... SELECT FROM json_each(?) cost twice the CPU per row; against one execute per row,
# one statement per table saves SQLite about 32,000 of a 4-event turn's ~250,000 instructions
# (bench/README.md, "The write path, taken apart").
_INSERT_EVENT: Final = (
    "INSERT INTO events (tenant, session_id, seq, type, payload, idempotency_key, created_at)"
    " VALUES "
)
# The text of a message or a call is read from its event (see sqlite_migrations/0004), and so
# are a message's role and, until a correction is shown, its time (0006).
_INSERT_MESSAGE: Final = (
    "INSERT INTO messages (session_id, tenant, seq, tokens, content_id) VALUES "
)
_INSERT_TOOL_CALL: Final = (
    "INSERT INTO tool_calls (session_id, tenant, call_id, call_seq, status, result_seq) VALUES "
)
# A group's rows in statements of at most this many (each size is its own cached statement; 7
# columns x 64 rows stays far below SQLite's limit on parameters).
_ROWS_PER_INSERT: Final = 64
# The counters the journal keeps per session, once per append: see 0004 for why not a trigger.
_ADVANCE_SESSION: Final = (
    "UPDATE sessions SET last_seq = ?, last_event_id = ?, event_count = event_count + ?,"
    " updated_at = ?, turn_open = coalesce(?, turn_open),"
    # Saturating (projection.add_tokens): neither side of the + can overflow.
    " prompt_tokens = prompt_tokens + min(?, 9223372036854775807 - prompt_tokens),"
    " completion_tokens = completion_tokens + min(?, 9223372036854775807 - completion_tokens)"
    " WHERE session_id = ? AND tenant = ?"
)
_INSERT_TASK: Final = (
    f"INSERT INTO tasks ({TASK_COLUMNS}) VALUES ({', '.join('?' * len(TASK_COLUMN_NAMES))})"
)


class Control:
    """Transaction statements on the writer connection, for group commit. `lock` is held from
    before BEGIN to after COMMIT or ROLLBACK (see `sqlite_lock`)."""

    def __init__(
        self,
        conn: sqlite3.Connection,
        lock: WriterLock,
        wal: WalLimit | None = None,
        search: SearchIndex | None = None,
        *,
        appends_index: bool = True,
    ) -> None:
        self.conn = conn
        self.tx = SQLiteTx(conn, search, appends_index=appends_index)
        self.wal = wal
        self.lock = lock

    def begin(self) -> None:
        self.lock.acquire()
        try:
            self.conn.execute("BEGIN IMMEDIATE")
        except BaseException:
            self.lock.release()
            raise

    def commit(self) -> None:
        search = self.tx.search
        work = search.handoff.take() if search is not None else None
        done: int | None = None
        try:
            if work is not None:
                assert search is not None
                done = self._store_index_work(search, work)
            self.conn.execute("COMMIT")
            if self.wal is not None:
                # Before letting the other processes' writers in: its TRUNCATE checkpoint waits
                # for SQLite's write lock in the busy handler, which they would keep taking.
                self.wal.after_commit(self.conn)
        finally:
            committed = not self.conn.in_transaction
            if work is not None:
                assert search is not None
                search.handoff.finish(done if committed else None)
            if committed:  # else rollback() releases it
                self.lock.release()

    def _store_index_work(self, search: SearchIndex, work: IndexWork) -> int | None:
        """The search index's work the follower handed over (sqlite_index_follower), in this
        transaction under a savepoint of its own: if it fails, the caller's writes still commit
        and the index stays as it was, to be caught up later."""
        self.conn.execute("SAVEPOINT search_index")
        try:
            return search.store(self.conn, work)
        except Exception as exc:  # whatever it was, it is not the append's
            self.conn.execute("ROLLBACK TO search_index")
            log.warning("search index left to catch up later: %s", exc)
            return None
        finally:
            self.conn.execute("RELEASE search_index")

    def rollback(self) -> None:
        try:
            if self.conn.in_transaction:
                self.conn.execute("ROLLBACK")
        finally:
            self.lock.release()

    def savepoint(self) -> None:
        self.conn.execute("SAVEPOINT request")

    def release(self) -> None:
        self.conn.execute("RELEASE request")

    def rollback_to_savepoint(self) -> None:
        self.conn.execute("ROLLBACK TO request")

    def failed_commit(self, exc: BaseException) -> BaseException:
        # SQLite's COMMIT either happens or leaves the transaction open (rolled back above).
        return StorageError(f"commit failed, nothing of this batch was written: {exc}")


PROGRESS_COLUMNS: Final = (
    "source_id, source_tenant, tenant, position, purge_position, events, updated_at"
)
REPLICATED_COLUMNS: Final = "session_id, tenant, source_id, state, error, updated_at"


class SQLiteTx:
    """`WriteTx` on the writer connection. `search`: the FTS5 index, None where this SQLite has
    no FTS5."""

    def __init__(
        self,
        conn: sqlite3.Connection,
        search: SearchIndex | None = None,
        *,
        appends_index: bool = True,
    ) -> None:
        self.conn = conn
        self.search = search
        # False: appends leave the index to the next search (a benchmark's baseline).
        self.appends_index = appends_index

    def _one(self, sql: str, params: Sequence[Any]) -> tuple[Any, ...] | None:
        row: tuple[Any, ...] | None = self.conn.execute(sql, params).fetchone()
        return row

    # -- look-ups for the rules -------------------------------------------------------------

    # -- look-ups for the rules: one statement for a whole group ------------------------------

    def session_states(self, keys: Collection[SessionKey]) -> dict[SessionKey, SessionState]:
        if len(keys) == 1:
            # The common case, a lone writer: json_each costs more than the look-up itself.
            ((tenant, session_id),) = keys
            row = self._one(
                "SELECT status, last_seq FROM sessions WHERE session_id = ? AND tenant = ?",
                (session_id, tenant),
            )
            return {(tenant, session_id): SessionState(session_id, tenant, *row)} if row else {}
        rows = self.conn.execute(
            "SELECT s.session_id, s.tenant, s.status, s.last_seq FROM json_each(?) AS j"
            " CROSS JOIN sessions AS s ON s.session_id = json_extract(j.value, '$[1]')"
            " AND s.tenant = json_extract(j.value, '$[0]')",
            (json.dumps(list(keys), ensure_ascii=False),),
        ).fetchall()
        return {(row[1], row[0]): SessionState(*row) for row in rows}

    def session_by_key(self, tenant: str, idempotency_key: str) -> str | None:
        row = self._one(
            "SELECT session_id FROM sessions WHERE tenant = ? AND idempotency_key = ?",
            (tenant, idempotency_key),
        )
        return row[0] if row else None

    def events_by_keys(
        self, keys: Collection[tuple[str, str, str]]
    ) -> dict[tuple[str, str, str], Event]:
        rows = self.conn.execute(
            f"SELECT e.tenant, {', '.join('e.' + c for c in EVENT_COLUMNS.split(', '))}"
            " FROM json_each(?) AS j CROSS JOIN events AS e"
            " ON e.session_id = json_extract(j.value, '$[1]')"
            " AND e.tenant = json_extract(j.value, '$[0]')"
            " AND e.idempotency_key = json_extract(j.value, '$[2]')"
            " WHERE e.idempotency_key IS NOT NULL",
            (json.dumps(list(keys), ensure_ascii=False),),
        ).fetchall()
        return events_by_key(rows, event_from_row)

    def tool_call_statuses(
        self, keys: Collection[tuple[str, str, str]]
    ) -> dict[tuple[str, str, str], str]:
        if len(keys) == 1:
            ((tenant, session_id, call_id),) = keys
            row = self._one(
                "SELECT status FROM tool_calls WHERE session_id = ? AND tenant = ? AND call_id = ?",
                (session_id, tenant, call_id),
            )
            return {(tenant, session_id, call_id): row[0]} if row else {}
        rows = self.conn.execute(
            "SELECT t.tenant, t.session_id, t.call_id, t.status FROM json_each(?) AS j"
            " CROSS JOIN tool_calls AS t ON t.session_id = json_extract(j.value, '$[1]')"
            " AND t.tenant = json_extract(j.value, '$[0]')"
            " AND t.call_id = json_extract(j.value, '$[2]')",
            (json.dumps(list(keys), ensure_ascii=False),),
        ).fetchall()
        return {(row[0], row[1], row[2]): row[3] for row in rows}

    def message_kinds(
        self, keys: Collection[tuple[str, str, int]]
    ) -> dict[tuple[str, str, int], tuple[str, bool]]:
        rows = self.conn.execute(
            "SELECT e.tenant, e.session_id, e.seq, e.type,"
            " json_extract(e.payload, '$.supersedes') IS NOT NULL"
            " FROM json_each(?) AS j CROSS JOIN events AS e"
            " ON e.session_id = json_extract(j.value, '$[1]')"
            " AND e.tenant = json_extract(j.value, '$[0]')"
            " AND e.seq = json_extract(j.value, '$[2]')",
            (json.dumps(list(keys), ensure_ascii=False),),
        ).fetchall()
        return {(r[0], r[1], r[2]): (r[3], bool(r[4])) for r in rows if r[3] in MESSAGE_ROLES}

    def compaction_floor(self, session: SessionKey) -> int:
        tenant, session_id = session
        row = self._one(
            "SELECT json_extract(payload, '$.until_seq') FROM events"
            " WHERE session_id = ? AND tenant = ? AND type = 'context_compacted'"
            " ORDER BY seq DESC LIMIT 1",
            (session_id, tenant),
        )
        return int(row[0]) if row else 0

    def calls_open_at(self, session: SessionKey, seq: int) -> list[tuple[str, int]]:
        tenant, session_id = session
        rows = self.conn.execute(
            "SELECT call_id, coalesce(result_seq, 0) FROM tool_calls"
            " WHERE session_id = ? AND tenant = ? AND call_seq <= ?"
            " AND (result_seq IS NULL OR result_seq > ?)",
            (session_id, tenant, seq, seq),
        ).fetchall()
        return [(row[0], row[1]) for row in rows]

    # -- look-ups for the task verbs --------------------------------------------------------

    def _tasks(self, where: str, params: Sequence[Any]) -> list[Task]:
        rows = self.conn.execute(f"SELECT {TASK_COLUMNS} FROM tasks WHERE {where}", params)
        return [task_from_row(row) for row in rows.fetchall()]

    def task(self, task_id: str) -> Task | None:
        found = self._tasks("task_id = ?", (task_id,))
        return found[0] if found else None

    def next_task(self, tenant: str, types: Sequence[str] | None) -> Task | None:
        if types is None:
            found = self._tasks(
                "tenant = ? AND status = 'pending' ORDER BY task_id LIMIT 1", (tenant,)
            )
        else:
            marks = ", ".join("?" * len(types))
            found = self._tasks(
                f"tenant = ? AND status = 'pending' AND type IN ({marks}) ORDER BY task_id LIMIT 1",
                (tenant, *types),
            )
        return found[0] if found else None

    def expired_tasks(self, tenant: str | None, now: int, limit: int) -> list[Task]:
        return self._tasks(
            "status = 'running' AND lease_expires_at < ? AND (?2 IS NULL OR tenant = ?2)"
            " ORDER BY lease_expires_at LIMIT ?3",
            (now, tenant, limit),
        )

    def session_tasks(self, session: SessionKey) -> list[Task]:
        tenant, session_id = session
        return self._tasks(
            "session_id = ? AND tenant = ? ORDER BY created_seq", (session_id, tenant)
        )

    # -- writes -----------------------------------------------------------------------------

    def insert_session(
        self, tenant: str, session_id: str, created_at: int, idempotency_key: str | None
    ) -> None:
        self.conn.execute(
            "INSERT INTO sessions (session_id, tenant, created_at, updated_at, idempotency_key)"
            " VALUES (?, ?, ?, ?, ?)",
            (session_id, tenant, created_at, created_at, idempotency_key),
        )

    def insert_events(self, rows: Sequence[EventRow]) -> list[Event]:
        params: list[Any] = []
        for row in rows:
            event = row.event
            params += (
                row.tenant,
                row.session_id,
                row.seq,
                event.type,
                event.payload_json,
                event.idempotency_key,
                row.created_at,
            )
        ids = _insert_flat(self.conn, _INSERT_EVENT, 7, params)
        stored = [
            Event(
                event_id,
                row.session_id,
                row.seq,
                row.event.type,
                row.event.payload,
                row.created_at,
                row.event.idempotency_key,
                str(event_id),
            )
            for row, event_id in zip(rows, ids, strict=True)
        ]
        for tenant, events in by_tenant([row.tenant for row in rows], stored):
            self._project(events, tenant)
        if self.search is not None and self.appends_index and stored:
            self.search.note(stored[-1].event_id)  # indexed after the commit, if due
        return stored

    def copy_events(self, tenant: str, source_id: str, target_id: str, until_seq: int) -> int:
        self.conn.execute(
            "INSERT INTO events (tenant, session_id, seq, type, payload, created_at)"
            " SELECT tenant, ?, seq, type, payload, created_at FROM events"
            " WHERE session_id = ? AND tenant = ? AND seq <= ? ORDER BY seq",
            (target_id, source_id, tenant, until_seq),
        )
        rows = self.conn.execute(
            f"SELECT {EVENT_COLUMNS} FROM events WHERE session_id = ? AND tenant = ? ORDER BY seq",
            (target_id, tenant),
        ).fetchall()
        copied = [event_from_row(row) for row in rows]
        self._project(copied, tenant, copies=True)
        if self.search is not None and self.appends_index and copied:
            self.search.note(max(e.event_id for e in copied))
        return len(rows)

    def _project(self, events: Sequence[Event], tenant: str, *, copies: bool = False) -> None:
        """Apply the projections of `events`, all of `tenant` (see `projection_rows`), and move
        the counters of their sessions, once per session."""
        rows = projection_rows(events, tenant, copies=copies)
        for sid, fields in rows.session_changes:
            self._update_session(tenant, sid, fields)
        for change in rows.task_changes:
            if isinstance(change, Task):
                self.conn.execute(_INSERT_TASK, task_values(change))
            else:
                self._update_task(*change)
        # A message row names the event holding its text (see sqlite_migrations/0004).
        ids = {(e.session_id, e.seq): e.event_id for e in events}
        if added := rows.messages_added:
            _insert_rows(
                self.conn,
                _INSERT_MESSAGE,
                [
                    (sid, tenant, seq, tokens, ids[(sid, seq)])
                    for sid, seq, _, _, tokens, _ in added
                ],
            )
        if rows.calls_opened:
            _insert_rows(
                self.conn,
                _INSERT_TOOL_CALL,
                [
                    (sid, tenant, call_id, call_seq, status, result_seq)
                    for sid, call_id, _, _, call_seq, status, _, result_seq in rows.calls_opened
                ],
            )
        if rows.messages_corrected:
            self.conn.executemany(
                # The original's time, read from the event shown until now (the right-hand
                # side sees the row as it was), then kept: the shown event is no longer it.
                "UPDATE messages SET tokens = ?, edited_seq = ?, content_id = ?, created_at ="
                " coalesce(created_at, (SELECT created_at FROM events WHERE event_id = content_id))"
                " WHERE session_id = ? AND tenant = ? AND seq = ?",
                [
                    (tokens, edited, ids[(sid, edited)], sid, tenant, seq)
                    for _, tokens, edited, sid, seq in rows.messages_corrected
                ],
            )
        if rows.calls_closed:
            self.conn.executemany(
                "UPDATE tool_calls SET status = ?, result_seq = ?"
                " WHERE session_id = ? AND tenant = ? AND call_id = ?",
                [
                    (status, result_seq, sid, tenant, call_id)
                    for _, status, result_seq, sid, call_id in rows.calls_closed
                ],
            )
        no_usage = [0, 0]
        self.conn.executemany(
            _ADVANCE_SESSION,
            [
                (
                    a.last_seq,
                    a.last_event_id,
                    a.added,
                    a.updated_at,
                    a.turn_open,
                    *rows.usage.get(sid, no_usage),
                    sid,
                    tenant,
                )
                for sid, a in rows.advanced.items()
            ],
        )

    def _update_session(self, tenant: str, session_id: str, fields: Mapping[str, Any]) -> None:
        """`fields` encoded already (projection_rows.encode_session_fields)."""
        assignments = ", ".join(f"{name} = ?" for name in fields)
        self.conn.execute(
            f"UPDATE sessions SET {assignments} WHERE session_id = ? AND tenant = ?",
            (*fields.values(), session_id, tenant),
        )

    def _update_task(self, task_id: str, fields: Mapping[str, Any]) -> None:
        assignments = ", ".join(f"{name} = ?" for name in fields)
        self.conn.execute(
            f"UPDATE tasks SET {assignments} WHERE task_id = ?", (*fields.values(), task_id)
        )

    def replace_projection(self, tenant: str, projection: Projection) -> None:
        session = projection.session
        sid = session.session_id
        for table in ("messages", "tool_calls", "tasks"):
            self.conn.execute(
                f"DELETE FROM {table} WHERE session_id = ? AND tenant = ?", (sid, tenant)
            )
        self.conn.executemany(
            _INSERT_TASK, [task_values(task) for task in projection.tasks.values()]
        )
        self.conn.executemany(
            "INSERT INTO messages"
            " (session_id, tenant, seq, tokens, edited_seq, created_at, content_id)"
            " SELECT ?1, ?6, ?2, ?3, ?4, ?5, event_id FROM events"
            " WHERE session_id = ?1 AND tenant = ?6 AND seq = coalesce(?4, ?2)",
            [
                (
                    sid,
                    m.seq,
                    m.tokens,
                    m.edited_seq,
                    None if m.edited_seq is None else m.created_at,
                    tenant,
                )
                for m in projection.messages.values()
            ],
        )
        self.conn.executemany(
            _INSERT_TOOL_CALL + _row_marks(6),
            [
                (sid, tenant, t.call_id, t.call_seq, t.status, t.result_seq)
                for t in projection.tool_calls.values()
            ],
        )
        fields = {name: getattr(session, name) for name in SESSION_FIELDS}
        self._update_session(tenant, sid, encode_session_fields(fields))
        self.conn.execute(
            "UPDATE sessions SET last_seq = ?, last_event_id = ?, event_count = ?, updated_at = ?,"
            " prompt_tokens = ?, completion_tokens = ? WHERE session_id = ? AND tenant = ?",
            (
                session.last_seq,
                position_number(session.last_position),
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
        if self.search is not None:
            self.search.remove_session(self.conn, tenant, session_id)
        elif self._one("SELECT 1 FROM sqlite_master WHERE name = 'search_index'", ()):
            raise StorageError(
                "this SQLite has no FTS5, so purge cannot remove the session from the search"
                " index that this database holds; purge with a SQLite that has FTS5"
            )
        for table in ("messages", "tool_calls", "tasks", "events", "sessions"):
            self.conn.execute(
                f"DELETE FROM {table} WHERE session_id = ? AND tenant = ?", (session_id, tenant)
            )
        self.conn.execute(
            "UPDATE purge_audit SET pending = NULL WHERE purge_id = ?", (cursor.lastrowid,)
        )
        return count

    def replication_progress(
        self, source_id: str, source_tenant: str, tenant: str
    ) -> ReplicationProgress | None:
        row = self._one(
            f"SELECT {PROGRESS_COLUMNS} FROM replication_progress"
            " WHERE source_id = ? AND source_tenant = ? AND tenant = ?",
            (source_id, source_tenant, tenant),
        )
        return ReplicationProgress(*row) if row else None

    def save_replication_progress(self, progress: ReplicationProgress) -> None:
        self.conn.execute(
            f"INSERT OR REPLACE INTO replication_progress ({PROGRESS_COLUMNS})"
            " VALUES (?, ?, ?, ?, ?, ?, ?)",
            astuple(progress),  # its fields in PROGRESS_COLUMNS' order
        )

    def replicated_sessions(
        self, tenant: str, source_id: str, session_ids: Collection[str]
    ) -> dict[str, ReplicatedSession]:
        if not session_ids:
            return {}
        rows = self.conn.execute(
            f"SELECT {REPLICATED_COLUMNS} FROM json_each(?) AS j CROSS JOIN session_sources"
            " AS r ON r.session_id = j.value AND r.tenant = ? AND r.source_id = ?",
            (json.dumps(list(session_ids), ensure_ascii=False), tenant, source_id),
        ).fetchall()
        return {row[0]: ReplicatedSession(*row) for row in rows}

    def mark_replicated_sessions(self, rows: Sequence[ReplicatedSession]) -> None:
        self.conn.executemany(
            f"INSERT OR REPLACE INTO session_sources ({REPLICATED_COLUMNS})"
            " VALUES (?, ?, ?, ?, ?, ?)",
            [(r.session_id, r.tenant, r.source_id, r.state, r.error, r.updated_at) for r in rows],
        )

    def clear_search_index(self) -> None:
        if self.search is not None:
            self.search.clear(self.conn)

    def insert_api_key(self, key: ApiKeyRow) -> None:
        self.conn.execute(
            "INSERT INTO api_keys (key_id, tenant, secret_hash, label, created_at)"
            " VALUES (?, ?, ?, ?, ?)",
            (key.key_id, key.tenant, key.secret_hash, key.label, key.created_at),
        )

    def revoke_api_key(self, key_id: str, at: int) -> bool:
        cursor = self.conn.execute(
            "UPDATE api_keys SET revoked_at = ? WHERE key_id = ? AND revoked_at IS NULL",
            (at, key_id),
        )
        return cursor.rowcount == 1


def _insert_rows(conn: sqlite3.Connection, head: str, rows: Sequence[Sequence[Any]]) -> list[int]:
    """INSERT `rows` with `head` ("INSERT INTO t (...) VALUES "), `_ROWS_PER_INSERT` to a
    statement; the rowids given to them, in order."""
    return _insert_flat(conn, head, len(rows[0]), list(chain.from_iterable(rows)))


def _insert_flat(conn: sqlite3.Connection, head: str, width: int, params: list[Any]) -> list[int]:
    """`_insert_rows` with the rows' values already in one flat list, `width` to a row.

    A statement's rows take consecutive rowids ending at its `lastrowid`: the writer holds the
    write lock, no trigger inserts into these tables, and an AUTOINCREMENT key fails rather than
    wraps."""
    count = len(params) // width
    if count <= _ROWS_PER_INSERT:  # a turn's rows: one statement, the list as it is
        last = conn.execute(_statement(head, width, count), params).lastrowid
        assert last is not None
        return list(range(last - count + 1, last + 1))
    ids: list[int] = []
    step = _ROWS_PER_INSERT * width
    for start in range(0, len(params), step):
        chunk = params[start : start + step]
        rows = len(chunk) // width
        last = conn.execute(_statement(head, width, rows), chunk).lastrowid
        assert last is not None
        ids.extend(range(last - rows + 1, last + 1))
    return ids


@cache
def _statement(head: str, width: int, count: int) -> str:
    # The same str object each time: its hash is kept, and sqlite3's statement cache finds it.
    return head + ", ".join([_row_marks(width)] * count)


def _row_marks(width: int) -> str:
    return f"({', '.join('?' * width)})"
