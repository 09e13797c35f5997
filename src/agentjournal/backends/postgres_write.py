"""The PostgreSQL write transaction: `WriteTx` on one pooled connection, and the statements group
commit drives it with. Valid only inside `PostgresStorage.write`.

Session rows are locked (`FOR UPDATE`, in id order, so two transactions never wait on each other
in a circle) before a session's state is read: seqs are gapless per session whatever the number
of instances. Tasks are locked the same way; `next_task` skips rows another claimer holds.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import astuple
from typing import Any, Final

import psycopg
import psycopg.errors
from psycopg import pq, sql

from agentjournal.backends import ApiKeyRow, EventRow, ReplicatedSession, ReplicationProgress
from agentjournal.backends.postgres_rows import (
    EVENT_COLUMNS,
    MESSAGE_COLUMNS,
    TASK_COLUMNS,
    TOOL_CALL_COLUMNS,
    decode_position,
    encode_position,
    event_from_row,
)
from agentjournal.backends.projection_rows import (
    SESSION_FIELDS,
    TASK_COLUMN_NAMES,
    ProjectionRows,
    by_tenant,
    encode_session_fields,
    events_by_key,
    projection_rows,
    task_from_row,
    task_values,
)
from agentjournal.errors import StorageError
from agentjournal.events import MESSAGE_ROLES, Event
from agentjournal.projection import Projection, Task
from agentjournal.rules import SessionKey, SessionState
from agentjournal.search_text import event_text, index_text

__all__ = ["SETTLED", "Control", "PostgresTx"]

# The mark a commit's notification carries after its position when the feed shows that position
# as soon as the commit is over (Control.commit). An instance that does not know it reads the
# payload as no position at all, and wakes and asks the server as before.
SETTLED: Final = " settled"


def indexed_text(type_: str, payload: Mapping[str, Any]) -> str:
    """The text to index of an event ('' if none), Chinese and Japanese as bigrams."""
    text = event_text(type_, payload)
    return index_text(text) if text else ""


# New rows travel as one JSON document per table, an array of arrays read by jsonb_array_elements:
# psycopg passes one string, where column arrays cost it a Python dumper call per element. The
# events of a group and the transcript and tool-call rows they add are one statement: one round
# trip and one execute on the client.
# Each row's tx is the one `session_states` read under the session's lock (null for a session
# not locked that way, such as one created in this transaction: the row trigger takes it then);
# the statement trigger checks it (migration 0003).
_EVENT_ROWS: Final = (
    "INSERT INTO events (tenant, session_id, seq, type, payload, idempotency_key, created_at, tx)"
    " SELECT r->>0, r->>1, (r->>2)::bigint, r->>3, r->>4, r->>5, (r->>6)::bigint,"
    " (r->>7)::xid8 FROM jsonb_array_elements(%s::jsonb) WITH ORDINALITY AS e (r, n) ORDER BY n"
)
_MESSAGE_ROWS: Final = (
    "INSERT INTO messages (session_id, tenant, seq, role, content, tokens, created_at)"
    " SELECT r->>0, r->>1, (r->>2)::bigint, r->>3, r->>4, (r->>5)::bigint, (r->>6)::bigint"
    " FROM jsonb_array_elements(%s::jsonb) AS r"
)
_TOOL_CALL_ROWS: Final = (
    "INSERT INTO tool_calls"
    " (session_id, tenant, call_id, name, arguments, call_seq, status, result, result_seq)"
    " SELECT r->>0, r->>1, r->>2, r->>3, r->>4, (r->>5)::bigint, r->>6, r->>7, (r->>8)::bigint"
    " FROM jsonb_array_elements(%s::jsonb) AS r"
)
# The searchable text of each new event that has some, as [session_id, tenant, seq, text]: the
# event_id comes from `stored`.
_SEARCH_ROWS: Final = (
    "INSERT INTO search_index (event_id, tenant, session_id, terms)"
    " SELECT s.event_id, s.tenant, s.session_id, to_tsvector('simple', r->>3)"
    " FROM jsonb_array_elements(%s::jsonb) AS r"
    " JOIN stored AS s"
    " ON s.session_id = r->>0 AND s.tenant = r->>1 AND s.seq = (r->>2)::bigint"
)
_INSERT_EVENTS: Final = (
    f"WITH stored AS ({_EVENT_ROWS} RETURNING event_id, tx::text, session_id, seq, tenant),"
    f" added_messages AS ({_MESSAGE_ROWS}), opened_calls AS ({_TOOL_CALL_ROWS}),"
    f" searched AS ({_SEARCH_ROWS})"
    " SELECT event_id, tx, session_id, seq,"
    " (SELECT pg_snapshot_xmin(pg_current_snapshot()))::text, tenant FROM stored"
)
# With each locked session, the tx its next events take: greatest(this transaction's id, the
# session's last_tx), as the events_take_tx trigger would compute it row by row.
_LOCKED: Final = (
    "SELECT session_id, tenant, status, last_seq,"
    " greatest(pg_current_xact_id(), last_tx)::text FROM sessions"
)
_LOCK_SESSION: Final = f"{_LOCKED} WHERE session_id = %s AND tenant = %s FOR UPDATE"
_LOCK_SESSIONS: Final = (
    f"{_LOCKED} WHERE (session_id, tenant) IN"
    " (SELECT * FROM unnest(%s::text[], %s::text[]))"
    " ORDER BY session_id, tenant FOR UPDATE"
)


def _numbered(query: str) -> bytes:
    """`query` with psycopg's placeholders (%s, in order) numbered for libpq ($1, $2, ...)."""
    parts = query.split("%s")
    return (parts[0] + "".join(f"${i}{p}" for i, p in enumerate(parts[1:], start=1))).encode()


# The two statements of every append, as libpq prepares them on the writer's own connection
# (`PostgresTx._fetch`): name, text.
_LIBPQ: Final = {
    _LOCK_SESSION: (b"agentjournal_lock_session", _numbered(_LOCK_SESSION)),
    _INSERT_EVENTS: (b"agentjournal_insert_events", _numbered(_INSERT_EVENTS)),
}
_to_json = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), check_circular=False).encode
_DONE: Final = (pq.ExecStatus.COMMAND_OK, pq.ExecStatus.TUPLES_OK)
_INSERT_TASK: Final = (
    f"INSERT INTO tasks ({TASK_COLUMNS}) VALUES ({', '.join(['%s'] * len(TASK_COLUMN_NAMES))})"
)


class CommitUnknown(StorageError):
    """The connection broke while COMMIT was on its way: the write may or may not have landed."""


class Control:
    """Transaction statements for group commit, on a connection borrowed from the pool for each
    transaction (the pool replaces broken ones), or, with `own`, on a connection of its own kept
    from one transaction to the next (replaced when broken; `close` ends it). The transaction
    sees every tenant: the rules check the tenant of each row they touch."""

    def __init__(
        self,
        connect: Callable[[], psycopg.Connection[Any]],
        release: Callable[[psycopg.Connection[Any]], None],
        channel: str,
        synchronous: bool,
        search_index: bool = True,
        own: Callable[[], psycopg.Connection[Any]] | None = None,
    ) -> None:
        self._connect = connect
        self._release = release
        # Group commit's transactions run one after another, so one connection serves them all.
        # On it nothing runs but these statements, so the ones libpq prepares stay prepared:
        # psycopg drops every prepared statement (DEALLOCATE ALL) after a ROLLBACK it sees, and
        # this connection's ROLLBACKs go through libpq.
        self._own = own
        self._kept: psycopg.Connection[Any] | None = None
        self._kept_lock = threading.Lock()
        self._closed = False
        self._channel = channel
        # SET LOCAL rather than SELECT set_config(..., true): the same transaction-scoped
        # setting, without a query to plan and a row to send back (~20 µs of server CPU).
        self._begin = "BEGIN; SET LOCAL agentjournal.tenant = '*'"
        if not synchronous:
            self._begin += "; SET LOCAL synchronous_commit = off"
        self._notify = f"NOTIFY {sql.Identifier(channel).as_string()}, "
        self.tx = PostgresTx(search_index)

    def _conn(self) -> psycopg.Connection[Any]:
        conn = self.tx.conn
        if conn is None:
            raise psycopg.OperationalError("no connection: the transaction did not begin")
        return conn

    def begin(self) -> None:
        conn = None
        if self._own is not None:
            with self._kept_lock:
                if self._closed:
                    raise StorageError("the journal is closed")
                conn, self._kept = self._kept, None
            if conn is None:
                conn = self._own()
            self.tx.libpq = conn.prepare_threshold is not None
        else:
            conn = self._connect()
        self.tx.conn = conn
        try:
            _command(conn, self._begin)
        except BaseException:
            self._end()
            raise

    def commit(self) -> None:
        conn = self._conn()
        if conn.broken:
            self._end()  # back to the pool, which discards it
            raise psycopg.OperationalError("the connection broke before COMMIT: nothing written")
        statement = "COMMIT"
        if self.tx.last_position:
            # Delivered on commit, to every instance LISTENing: the position, never the event.
            # A position is digits only (encode_position), so it goes in as it is. SETTLED
            # follows it when the position's tx is this transaction's own id and no older
            # transaction was running when a statement of this one looked (`oldest_running`):
            # then every transaction up to that tx has ended once this one has, and the global
            # feed shows the position at once (listeners need not ask the server; see
            # PostgresStorage._follow). NOTIFY rather than SELECT pg_notify(...): a command
            # with nothing to plan, ~25 µs less of the server's CPU at every commit.
            position = self.tx.last_position
            settled = decode_position(position)[0] == self.tx.oldest_running
            statement = f"{self._notify}'{position}{SETTLED if settled else ''}'; COMMIT"
        try:
            _command(conn, statement)
        except psycopg.OperationalError as exc:
            if conn.broken:
                raise CommitUnknown(
                    f"the database connection broke during COMMIT ({exc}): the write may or may"
                    " not have been applied; read back, or retry with the same idempotency key"
                ) from exc
            raise
        finally:
            self._end()

    def rollback(self) -> None:
        conn = self.tx.conn
        if conn is None:
            return
        try:
            if not conn.broken:
                _command(conn, "ROLLBACK")
        finally:
            self._end()

    def savepoint(self) -> None:
        self.tx.saved_position = self.tx.last_position
        conn = self._conn()
        if not conn.broken:
            _command(conn, "SAVEPOINT request")

    def release(self) -> None:
        conn = self._conn()
        if not conn.broken:
            _command(conn, "RELEASE request")

    def rollback_to_savepoint(self) -> None:
        self.tx.last_position = self.tx.saved_position
        conn = self._conn()
        if not conn.broken:
            _command(conn, "ROLLBACK TO request")

    def failed_commit(self, exc: BaseException) -> BaseException:
        if isinstance(
            exc,
            (CommitUnknown, psycopg.OperationalError, psycopg.IntegrityError, psycopg.DataError),
        ):
            # PostgresStorage.write reports the first kind, retries the second and translates
            # the others (a constraint or a value the database refused is not an outage).
            return exc
        return StorageError(f"commit failed, nothing of this batch was written: {exc}")

    def _end(self) -> None:
        conn, self.tx.conn = self.tx.conn, None
        self.tx.last_position = self.tx.saved_position = ""
        self.tx.oldest_running = 0
        self.tx.session_txs.clear()
        self.tx.libpq = False
        if conn is None:
            return
        if self._own is None:
            self._release(conn)
            return
        if not conn.broken and conn.info.transaction_status == pq.TransactionStatus.IDLE:
            with self._kept_lock:
                if not self._closed:
                    self._kept = conn
                    return
        conn.close()

    def close(self) -> None:
        """End the connection kept between transactions (one in progress ends it at its end)."""
        with self._kept_lock:
            self._closed = True
            conn, self._kept = self._kept, None
        if conn is not None:
            conn.close()


PROGRESS_COLUMNS: Final = (
    "source_id, source_tenant, tenant, position, purge_position, events, updated_at"
)
REPLICATED_COLUMNS: Final = "session_id, tenant, source_id, state, error, updated_at"


class PostgresTx:
    """`WriteTx` on the connection of the transaction in progress."""

    def __init__(self, search_index: bool = True) -> None:
        self.conn: psycopg.Connection[Any] | None = None
        self.search_index = search_index
        self.last_position = ""
        self.saved_position = ""
        # The newest pg_snapshot_xmin an events statement of this transaction saw (0: none): no
        # transaction older than it was running then. Transaction ids only grow, so when it is
        # this transaction's own id, none older can be running at COMMIT either (Control.commit).
        # Still true after a savepoint's rollback: it describes the other transactions.
        self.oldest_running = 0
        # (tenant, session_id) -> the tx its events take in this transaction, read under its
        # row lock.
        # Still right after a savepoint's rollback (the value only depends on what the lock
        # saw); a stale one would be refused by the database, never stored.
        self.session_txs: dict[SessionKey, str] = {}
        # One cursor per connection, kept across transactions: `conn.execute` makes a new one
        # for every statement, ~10 µs of client CPU each (an append runs two).
        self._cursors: dict[int, psycopg.Cursor[Any]] = {}
        # Whether the connection is Control's own, where the statements of `_LIBPQ` run through
        # libpq, prepared once (`prepared`, for the connection `prepared_on`).
        self.libpq = False
        self.prepared_on: psycopg.Connection[Any] | None = None
        self.prepared: set[bytes] = set()

    def _cursor(self) -> psycopg.Cursor[Any]:
        conn = self.conn
        assert conn is not None, "used outside a write transaction"
        cursor = self._cursors.get(id(conn))
        if cursor is None or cursor.connection is not conn:
            # A new connection (perhaps at a closed one's address): forget the closed ones'.
            for key in [k for k, c in self._cursors.items() if c.connection.closed]:
                del self._cursors[key]
            cursor = self._cursors[id(conn)] = conn.cursor()
        return cursor

    def _rows(self, query: str | sql.Composed, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        return self._cursor().execute(query, params).fetchall()

    def _run(self, query: str | sql.Composed, params: Sequence[Any] = ()) -> int:
        return self._cursor().execute(query, params).rowcount

    def _many(self, query: str, rows: Sequence[Sequence[Any]]) -> None:
        if rows:
            self._cursor().executemany(query, rows)

    def _fetch(self, query: str, params: Sequence[str]) -> Sequence[Sequence[Any]]:
        """The rows of one of the `_LIBPQ` statements. On Control's own connection they run
        through libpq, prepared once: psycopg's execute and fetch cost ~10 µs more client CPU a
        statement than libpq even on a kept cursor, and its loaders a call per value. Values
        then come as text (callers convert), elsewhere as psycopg loads them."""
        conn = self.conn
        assert conn is not None, "used outside a write transaction"
        if not self.libpq:
            return self._rows(query, params)
        name, text = _LIBPQ[query]
        if self.prepared_on is not conn:
            self.prepared_on, self.prepared = conn, set()
        pgconn = conn.pgconn
        if name not in self.prepared:
            _check(conn, pgconn.prepare(name, text))
            self.prepared.add(name)
        encoding = conn.info.encoding
        result = pgconn.exec_prepared(name, [p.encode(encoding) for p in params])
        _check(conn, result)
        columns = range(result.nfields)
        rows = []
        for row in range(result.ntuples):
            values = (result.get_value(row, column) for column in columns)
            rows.append([None if v is None else bytes(v).decode(encoding) for v in values])
        return rows

    # -- look-ups for the rules -------------------------------------------------------------

    def session_states(self, keys: Collection[SessionKey]) -> dict[SessionKey, SessionState]:
        if len(keys) == 1:
            # The common case (one writer, one session) without an array to dump.
            ((tenant, session_id),) = keys
            rows = self._fetch(_LOCK_SESSION, (session_id, tenant))
        else:
            tenants, session_ids = _columns(keys)
            rows = self._rows(_LOCK_SESSIONS, (session_ids, tenants))
        found = {}
        for row in rows:
            key = (row[1], row[0])
            self.session_txs[key] = row[4]
            found[key] = SessionState(row[0], row[1], row[2], int(row[3]))
        return found

    def session_by_key(self, tenant: str, idempotency_key: str) -> str | None:
        rows = self._rows(
            "SELECT session_id FROM sessions WHERE tenant = %s AND idempotency_key = %s",
            (tenant, idempotency_key),
        )
        return rows[0][0] if rows else None

    def events_by_keys(
        self, keys: Collection[tuple[str, str, str]]
    ) -> dict[tuple[str, str, str], Event]:
        tenants, sessions, idempotency_keys = _columns(keys)
        rows = self._rows(
            f"SELECT e.tenant, {', '.join('e.' + c for c in EVENT_COLUMNS.split(', '))}"
            " FROM unnest(%b::text[], %b::text[], %b::text[])"
            " AS k (tenant, session_id, idempotency_key)"
            " JOIN events AS e USING (session_id, tenant, idempotency_key)",
            (tenants, sessions, idempotency_keys),
        )
        return events_by_key(rows, event_from_row)

    def tool_call_statuses(
        self, keys: Collection[tuple[str, str, str]]
    ) -> dict[tuple[str, str, str], str]:
        tenants, sessions, calls = _columns(keys)
        rows = self._rows(
            "SELECT t.tenant, t.session_id, t.call_id, t.status"
            " FROM unnest(%b::text[], %b::text[], %b::text[]) AS k (tenant, session_id, call_id)"
            " JOIN tool_calls AS t USING (session_id, tenant, call_id)",
            (tenants, sessions, calls),
        )
        return {(row[0], row[1], row[2]): row[3] for row in rows}

    def message_kinds(
        self, keys: Collection[tuple[str, str, int]]
    ) -> dict[tuple[str, str, int], tuple[str, bool]]:
        tenants, sessions, seqs = _columns(keys)
        rows = self._rows(
            "SELECT e.tenant, e.session_id, e.seq, e.type, e.payload::jsonb ? 'supersedes'"
            " FROM unnest(%b::text[], %b::text[], %b::bigint[]) AS k (tenant, session_id, seq)"
            " JOIN events AS e USING (session_id, tenant, seq)",
            (tenants, sessions, seqs),
        )
        return {(r[0], r[1], r[2]): (r[3], bool(r[4])) for r in rows if r[3] in MESSAGE_ROLES}

    def compaction_floor(self, session: SessionKey) -> int:
        tenant, session_id = session
        rows = self._rows(
            "SELECT (payload::jsonb ->> 'until_seq')::bigint FROM events"
            " WHERE session_id = %s AND tenant = %s AND type = 'context_compacted'"
            " ORDER BY seq DESC LIMIT 1",
            (session_id, tenant),
        )
        return int(rows[0][0]) if rows else 0

    def calls_open_at(self, session: SessionKey, seq: int) -> list[tuple[str, int]]:
        tenant, session_id = session
        rows = self._rows(
            "SELECT call_id, coalesce(result_seq, 0) FROM tool_calls"
            " WHERE session_id = %s AND tenant = %s"
            " AND call_seq <= %s AND (result_seq IS NULL OR result_seq > %s) ORDER BY call_seq",
            (session_id, tenant, seq, seq),
        )
        return [(row[0], row[1]) for row in rows]

    # -- look-ups for the task verbs --------------------------------------------------------

    def _tasks(self, where: str, params: Sequence[Any]) -> list[Task]:
        return [task_from_row(row) for row in self._rows(f"SELECT {TASK_COLUMNS} {where}", params)]

    def task(self, task_id: str) -> Task | None:
        found = self._tasks("FROM tasks WHERE task_id = %s FOR UPDATE", (task_id,))
        return found[0] if found else None

    def next_task(self, tenant: str, types: Sequence[str] | None) -> Task | None:
        # SKIP LOCKED: concurrent claimers (other instances too) pass over each other's rows.
        found = self._tasks(
            "FROM tasks WHERE tenant = %s AND status = 'pending'"
            " AND (%s::text[] IS NULL OR type = ANY(%s::text[]))"
            " ORDER BY task_id LIMIT 1 FOR UPDATE SKIP LOCKED",
            (tenant, types and list(types), types and list(types)),
        )
        return found[0] if found else None

    def expired_tasks(self, tenant: str | None, now: int, limit: int) -> list[Task]:
        # Instances recovering together each settle different tasks, never one twice.
        return self._tasks(
            "FROM tasks WHERE status = 'running' AND lease_expires_at < %s"
            " AND (%s::text IS NULL OR tenant = %s)"
            " ORDER BY lease_expires_at LIMIT %s FOR UPDATE SKIP LOCKED",
            (now, tenant, tenant, limit),
        )

    def session_tasks(self, session: SessionKey) -> list[Task]:
        tenant, session_id = session
        return self._tasks(
            "FROM tasks WHERE session_id = %s AND tenant = %s ORDER BY created_seq FOR UPDATE",
            (session_id, tenant),
        )

    # -- writes -----------------------------------------------------------------------------

    def insert_session(
        self, tenant: str, session_id: str, created_at: int, idempotency_key: str | None
    ) -> None:
        self._run(
            "INSERT INTO sessions (session_id, tenant, created_at, updated_at, idempotency_key)"
            " VALUES (%s, %s, %s, %s, %s)",
            (session_id, tenant, created_at, created_at, idempotency_key),
        )

    def insert_events(self, rows: Sequence[EventRow]) -> list[Event]:
        # One statement for the whole group, whatever its size: the sessions' counters follow
        # once per statement (see the schema), and psycopg pays its per-statement cost once. The
        # projection's new rows depend on no event id, so they go in the same statement.
        txs = self.session_txs
        unstored = [
            Event(
                0,
                r.session_id,
                r.seq,
                r.event.type,
                r.event.payload,
                r.created_at,
                r.event.idempotency_key,
            )
            for r in rows
        ]
        projected = [
            projection_rows(events, tenant)
            for tenant, events in by_tenant([r.tenant for r in rows], unstored)
        ]
        found = self._fetch(
            _INSERT_EVENTS,
            (
                _to_json(
                    [
                        (
                            r.tenant,
                            r.session_id,
                            r.seq,
                            r.event.type,
                            r.event.payload_json,
                            r.event.idempotency_key,
                            r.created_at,
                            txs.get((r.tenant, r.session_id)),
                        )
                        for r in rows
                    ]
                ),
                *self._new_rows(projected),
                _to_json(
                    [
                        (r.session_id, r.tenant, r.seq, text)
                        for r in rows
                        if self.search_index
                        and (text := indexed_text(r.event.type, r.event.payload))
                    ]
                ),
            ),
        )
        placed = {
            (tenant, sid, int(seq)): (int(event_id), int(tx))
            for event_id, tx, sid, seq, _, tenant in found
        }
        if found:
            self.oldest_running = max(self.oldest_running, int(found[0][4]))
        stored = []
        for row, event in zip(rows, unstored, strict=True):
            event_id, tx = placed[(row.tenant, event.session_id, event.seq)]
            stored.append(event._replace(event_id=event_id, position=encode_position(tx, event_id)))
        self._advanced(stored)
        for part in projected:
            self._changed(part)
        return stored

    def copy_events(self, tenant: str, source_id: str, target_id: str, until_seq: int) -> int:
        rows = self._rows(
            "INSERT INTO events (tenant, session_id, seq, type, payload, created_at)"
            " SELECT tenant, %s, seq, type, payload, created_at FROM events"
            " WHERE session_id = %s AND tenant = %s AND seq <= %s ORDER BY seq"
            f" RETURNING {EVENT_COLUMNS}",
            (target_id, source_id, tenant, until_seq),
        )
        events = sorted((event_from_row(row) for row in rows), key=lambda e: e.seq)
        self._advanced(events)
        self._project(events, tenant)
        self.index_events(tenant, events)
        return len(events)

    def index_events(self, tenant: str, events: Sequence[Event]) -> None:
        """Search rows for stored events of `tenant` (a fork's copies, a rebuild)."""
        self._run(
            "INSERT INTO search_index (event_id, tenant, session_id, terms)"
            " SELECT (r->>0)::bigint, %s, r->>1, to_tsvector('simple', r->>2)"
            " FROM jsonb_array_elements(%s::jsonb) AS r",
            (
                tenant,
                _to_json(
                    [
                        (e.event_id, e.session_id, text)
                        for e in events
                        if self.search_index and (text := indexed_text(e.type, e.payload))
                    ]
                ),
            ),
        )

    def _advanced(self, events: Sequence[Event]) -> None:
        """Remember the newest position written, for the commit's notification."""
        for event in events:
            if not self.last_position or int(event.position) > int(self.last_position):
                self.last_position = event.position

    def _project(self, events: Sequence[Event], tenant: str) -> None:
        """Apply the projections of a fork's copies (see `projection_rows`), all of `tenant`;
        the sessions' counters follow by trigger."""
        rows = projection_rows(events, tenant, copies=True)
        messages, calls = self._new_rows([rows])
        self._run(_MESSAGE_ROWS, (messages,))
        self._run(_TOOL_CALL_ROWS, (calls,))
        self._changed(rows)

    @staticmethod
    def _new_rows(parts: Sequence[ProjectionRows]) -> tuple[str, str]:
        """The new transcript and tool-call rows of `parts` (one per tenant) as JSON documents,
        each row with its session's tenant."""
        return (
            _to_json([(r[0], p.tenant, *r[1:]) for p in parts for r in p.messages_added]),
            _to_json([(r[0], p.tenant, *r[1:]) for p in parts for r in p.calls_opened]),
        )

    def _changed(self, rows: ProjectionRows) -> None:
        """The projection's changes to existing rows, in the order `ProjectionRows` gives, after
        its new rows (a result or correction may follow its original in one group)."""
        tenant = rows.tenant
        for sid, fields in rows.session_changes:
            self._update("sessions", fields, session_id=sid, tenant=tenant)
        for change in rows.task_changes:
            if isinstance(change, Task):
                self._run(_INSERT_TASK, task_values(change))
            else:
                self._update("tasks", change[1], task_id=change[0])
        self._many(
            "UPDATE messages SET content = %s, tokens = %s, edited_seq = %s"
            " WHERE session_id = %s AND tenant = %s AND seq = %s",
            [(*r[:4], tenant, r[4]) for r in rows.messages_corrected],
        )
        self._many(
            "UPDATE tool_calls SET result = %s, status = %s, result_seq = %s"
            " WHERE session_id = %s AND tenant = %s AND call_id = %s",
            [(*r[:4], tenant, r[4]) for r in rows.calls_closed],
        )
        self._many(
            # Saturating (projection.add_tokens): neither side of the + can overflow.
            "UPDATE sessions"
            " SET prompt_tokens = prompt_tokens + least(%s, 9223372036854775807 - prompt_tokens),"
            " completion_tokens = completion_tokens"
            " + least(%s, 9223372036854775807 - completion_tokens)"
            " WHERE session_id = %s AND tenant = %s",
            [(p, c, sid, tenant) for sid, (p, c) in rows.usage.items()],
        )

    def _update(self, table: str, fields: Mapping[str, Any], **key: str) -> None:
        """`fields` are trusted column names (projection_rows checks them), values encoded; the
        row is the one whose columns equal `key`."""
        statement = sql.SQL("UPDATE {} SET {} WHERE {}").format(
            sql.Identifier(table),
            sql.SQL(", ").join(sql.SQL("{} = %s").format(sql.Identifier(f)) for f in fields),
            sql.SQL(" AND ").join(sql.SQL("{} = %s").format(sql.Identifier(k)) for k in key),
        )
        self._cursor().execute(statement, (*fields.values(), *key.values()))

    def replace_projection(self, tenant: str, projection: Projection) -> None:
        session = projection.session
        sid = session.session_id
        for table in ("messages", "tool_calls", "tasks"):
            self._run(
                sql.SQL("DELETE FROM {} WHERE session_id = %s AND tenant = %s").format(
                    sql.Identifier(table)
                ),
                (sid, tenant),
            )
        self._many(_INSERT_TASK, [task_values(task) for task in projection.tasks.values()])
        self._many(
            f"INSERT INTO messages (tenant, {MESSAGE_COLUMNS})"
            " VALUES (%s, %s, %s, %s, %s, %s, %s, %s)",
            [
                (tenant, sid, m.seq, m.role, m.content, m.tokens, m.edited_seq, m.created_at)
                for m in projection.messages.values()
            ],
        )
        self._many(
            f"INSERT INTO tool_calls (tenant, {TOOL_CALL_COLUMNS})"
            " VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s)",
            [
                (
                    tenant,
                    sid,
                    t.call_id,
                    t.name,
                    t.arguments,
                    t.call_seq,
                    t.status,
                    t.result,
                    t.result_seq,
                )
                for t in projection.tool_calls.values()
            ],
        )
        fields = {name: getattr(session, name) for name in SESSION_FIELDS}
        self._update("sessions", encode_session_fields(fields), session_id=sid, tenant=tenant)
        tx, event_id = decode_position(session.last_position)
        self._run(
            "UPDATE sessions SET last_seq = %s, last_tx = %s::text::xid8, last_event_id = %s,"
            " event_count = %s, updated_at = %s, prompt_tokens = %s, completion_tokens = %s"
            " WHERE session_id = %s AND tenant = %s",
            (
                session.last_seq,
                str(tx),
                event_id,
                session.event_count,
                session.updated_at,
                session.prompt_tokens,
                session.completion_tokens,
                sid,
                tenant,
            ),
        )

    def purge(self, tenant: str, session_id: str, actor: str, at: int) -> int:
        rows = self._rows(
            "SELECT count(*) FROM events WHERE session_id = %s AND tenant = %s",
            (session_id, tenant),
        )
        count = int(rows[0][0])
        purge_id = self._rows(
            "INSERT INTO purge_audit (tenant, session_id, purged_by, purged_at, event_count,"
            " pending) VALUES (%s, %s, %s, %s, %s, 1) RETURNING purge_id",
            (tenant, session_id, actor, at, count),
        )[0][0]
        for table in ("search_index", "messages", "tool_calls", "tasks", "events", "sessions"):
            self._run(
                sql.SQL("DELETE FROM {} WHERE session_id = %s AND tenant = %s").format(
                    sql.Identifier(table)
                ),
                (session_id, tenant),
            )
        self._run("UPDATE purge_audit SET pending = NULL WHERE purge_id = %s", (purge_id,))
        return count

    def replication_progress(
        self, source_id: str, source_tenant: str, tenant: str
    ) -> ReplicationProgress | None:
        rows = self._rows(
            f"SELECT {PROGRESS_COLUMNS} FROM replication_progress"
            " WHERE source_id = %s AND source_tenant = %s AND tenant = %s FOR UPDATE",
            (source_id, source_tenant, tenant),
        )
        return ReplicationProgress(*rows[0]) if rows else None

    def save_replication_progress(self, progress: ReplicationProgress) -> None:
        self._run(
            f"INSERT INTO replication_progress ({PROGRESS_COLUMNS})"
            " VALUES (%s, %s, %s, %s, %s, %s, %s)"
            " ON CONFLICT (source_id, source_tenant, tenant) DO UPDATE SET"
            " position = EXCLUDED.position, purge_position = EXCLUDED.purge_position,"
            " events = EXCLUDED.events, updated_at = EXCLUDED.updated_at",
            astuple(progress),  # its fields in PROGRESS_COLUMNS' order
        )

    def replicated_sessions(
        self, tenant: str, source_id: str, session_ids: Collection[str]
    ) -> dict[str, ReplicatedSession]:
        if not session_ids:
            return {}
        rows = self._rows(
            f"SELECT {REPLICATED_COLUMNS} FROM session_sources"
            " WHERE session_id = ANY(%s) AND tenant = %s AND source_id = %s",
            (list(session_ids), tenant, source_id),
        )
        return {row[0]: ReplicatedSession(*row) for row in rows}

    def mark_replicated_sessions(self, rows: Sequence[ReplicatedSession]) -> None:
        self._many(
            f"INSERT INTO session_sources ({REPLICATED_COLUMNS})"
            " VALUES (%s, %s, %s, %s, %s, %s)"
            " ON CONFLICT (session_id, tenant, source_id) DO UPDATE SET"
            " state = EXCLUDED.state, error = EXCLUDED.error, updated_at = EXCLUDED.updated_at",
            [(r.session_id, r.tenant, r.source_id, r.state, r.error, r.updated_at) for r in rows],
        )

    def insert_api_key(self, key: ApiKeyRow) -> None:
        self._run(
            "INSERT INTO api_keys (key_id, tenant, secret_hash, label, created_at)"
            " VALUES (%s, %s, %s, %s, %s)",
            (key.key_id, key.tenant, key.secret_hash, key.label, key.created_at),
        )

    def revoke_api_key(self, key_id: str, at: int) -> bool:
        return (
            self._run(
                "UPDATE api_keys SET revoked_at = %s WHERE key_id = %s AND revoked_at IS NULL",
                (at, key_id),
            )
            == 1
        )


def _columns(rows: Collection[tuple[Any, ...]]) -> list[list[Any]]:
    """Tuples as one array per place, for unnest()."""
    return [list(column) for column in zip(*rows, strict=True)]


def _command(conn: psycopg.Connection[Any], statement: str) -> None:
    """Run `statement` (no parameters, no rows read back: BEGIN and COMMIT with what goes with
    them) through libpq directly. psycopg's cursor machinery costs about five times the client
    CPU for such a statement (~95 µs against ~20 µs), and every write transaction runs two. libpq
    waits without the GIL; errors are psycopg's own classes, a lost connection OperationalError
    with `conn.broken` set, as from `conn.execute`."""
    _check(conn, conn.pgconn.exec_(statement.encode()))


def _check(conn: psycopg.Connection[Any], result: pq.abc.PGresult) -> None:
    """Raise what psycopg would for `result`, of a statement run through libpq, if it failed."""
    if result.status in _DONE:
        return
    if conn.pgconn.status == pq.ConnStatus.BAD:
        message = conn.pgconn.error_message.decode("utf-8", "replace").strip()
        raise psycopg.OperationalError(message or "the connection to the server was lost")
    raise psycopg.errors.error_from_result(result, encoding=conn.info.encoding)
