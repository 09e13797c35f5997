"""The PostgreSQL backend: any number of instances sharing one database.

Writes go through group commit (concurrent writers of one process share a transaction, as on
SQLite) on a connection borrowed from a psycopg pool for each transaction. Reads are one
pipelined round trip each: BEGIN, the tenant scope for row-level security, the query, COMMIT.
A LISTEN connection turns other instances' commits into wake-ups of the local commit signal, so
a stream served here sees an append made elsewhere at once. See docs/postgres.md for the global
order (why a reader resuming after a position never misses an event) and for running behind
a transaction-mode pooler.
"""

from __future__ import annotations

import contextlib
import logging
import math
import re
import select
import threading
import time
from collections.abc import Callable, Collection, Sequence
from contextlib import AbstractContextManager
from importlib import resources
from typing import Any, Final, TypeVar
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import psycopg
import psycopg.errors
from psycopg import pq, sql
from psycopg_pool import ConnectionPool

from agentjournal.backends import (
    ApiKeyRow,
    PurgeRecord,
    ReplicatedSession,
    ReplicationProgress,
    WriteTx,
    postgres_roles,
)
from agentjournal.backends.group_commit import CommitSignal, GroupCommit
from agentjournal.backends.postgres_rows import (
    EVENT_COLUMNS,
    MESSAGE_COLUMNS,
    SESSION_COLUMNS,
    TASK_COLUMNS,
    TOOL_CALL_COLUMNS,
    decode_position,
    encode_position,
    event_from_row,
    session_from_row,
)
from agentjournal.backends.postgres_search import (
    ANALYZED_SQL,
    ESTIMATE_SQL,
    choose_plan,
    longer_walk,
    match_fraction,
)
from agentjournal.backends.postgres_write import (
    PROGRESS_COLUMNS,
    REPLICATED_COLUMNS,
    SETTLED,
    CommitUnknown,
    Control,
    PostgresTx,
)
from agentjournal.backends.projection_rows import task_from_row
from agentjournal.backends.turn_holds import TurnHolds
from agentjournal.errors import Conflict, InvalidArgument, MigrationRequired, StorageError
from agentjournal.events import Event
from agentjournal.projection import Message, Session, Task, ToolCall
from agentjournal.search_text import SearchFilter, SearchQuery

__all__ = ["PostgresStorage", "migrate"]

T = TypeVar("T")
I = TypeVar("I")  # noqa: E741

log = logging.getLogger("agentjournal.postgres")


def _refused_value(exc: BaseException) -> InvalidArgument:
    # A value out of a column's range or type (bigint out of range, say): the caller's data,
    # not the database failing, so never a StorageError ("unavailable").
    return InvalidArgument(f"the database cannot hold a value of this request: {exc}")


_KEY_COLUMNS: Final = "key_id, tenant, secret_hash, label, created_at, revoked_at"
_SCOPE_LOCAL: Final = "SELECT set_config('agentjournal.tenant', %s, true)"
_SCOPE_SESSION: Final = "SELECT set_config('agentjournal.tenant', %s, false)"
_ALL_TENANTS: Final = "*"
# A write whose transaction was rolled back by a lost connection, a deadlock or a serialization
# failure is run again, this many times in all, on a fresh connection.
WRITE_ATTEMPTS: Final = 3
_RETRYABLE: Final = (
    psycopg.OperationalError,
    psycopg.errors.DeadlockDetected,
    psycopg.errors.SerializationFailure,
)
_IDENTIFIER = re.compile(r"[a-z_][a-z0-9_]{0,62}")
_OPTIONS: Final = ("schema", "pooler", "pool_size")


def _migrations() -> list[str]:
    folder = resources.files("agentjournal.backends").joinpath("postgres_migrations")
    files = sorted((f for f in folder.iterdir() if f.name.endswith(".sql")), key=lambda f: f.name)
    return [f.read_text(encoding="utf-8") for f in files]


def parse_url(url: str) -> tuple[str, dict[str, str]]:
    """The libpq URL without agentjournal's own query options, and those options:
    `schema` (default: the role's search_path), `pooler=transaction` (no prepared statements,
    no LISTEN: behind PgBouncer and the like) and `pool_size` (default 8)."""
    parts = urlsplit(url)
    query = parse_qsl(parts.query, keep_blank_values=True)
    options = {k: v for k, v in query if k in _OPTIONS}
    rest = [(k, v) for k, v in query if k not in _OPTIONS]
    if "schema" in options and not _IDENTIFIER.fullmatch(options["schema"]):
        raise InvalidArgument("schema must be a lower-case SQL identifier ([a-z_][a-z0-9_]*)")
    if options.get("pooler", "session") not in ("session", "transaction"):
        raise InvalidArgument("pooler must be 'session' or 'transaction'")
    size = options.get("pool_size", "8")
    if not (size.isdigit() and 1 <= int(size) <= 1000):
        raise InvalidArgument("pool_size must be a whole number from 1 to 1000")
    return urlunsplit(parts._replace(query=urlencode(rest))), options


def migrate(url: str, grant_to: Sequence[str] = ()) -> None:
    """Bring the journal at `url` to this agentjournal's schema version, connected as the role
    `url` names (the schema's owner), and give each role of `grant_to` what the application
    needs and nothing more (postgres_roles.py). Roles granted before are granted again whenever
    a migration ran."""
    conninfo, options = parse_url(url)
    schema = options.get("schema")
    try:
        with psycopg.connect(conninfo, autocommit=True, connect_timeout=10) as conn:
            if schema is not None:
                conn.execute(sql.SQL("SET search_path TO {}").format(sql.Identifier(schema)))
            _migrate(conn, schema)
            with conn.transaction():
                # The migrations' lock: GRANTs racing on one table fail ("tuple concurrently
                # updated") rather than wait.
                conn.execute(
                    "SELECT pg_advisory_xact_lock(hashtext('agentjournal:' || current_schema()))"
                )
                for role in grant_to:
                    postgres_roles.grant(conn, role)
    except psycopg.Error as exc:
        raise StorageError(f"cannot migrate the PostgreSQL journal: {exc}") from exc


def _migrate(conn: psycopg.Connection[Any], schema: str | None) -> str:
    """Bring the schema up to date if it is not; returns the LISTEN/NOTIFY channel of this
    schema. A schema already at this version needs no privilege but reading its version (the
    application role opens it so); anything else the role may not do is `MigrationRequired`."""
    migrations = _migrations()
    try:
        # Outside the lock: versions only grow, and one that is current stays so.
        if _version(conn, len(migrations)) != len(migrations):
            _apply(conn, schema, migrations)
        row = conn.execute(
            "SELECT current_schema(), rolsuper OR rolbypassrls FROM pg_roles"
            " WHERE rolname = current_user"
        ).fetchone()
    except psycopg.errors.InsufficientPrivilege as exc:
        where = f"schema {schema!r}" if schema else "its default schema"
        raise MigrationRequired(
            f"role {conn.info.user!r} may not create, migrate or use the journal in {where}"
            f" ({str(exc).splitlines()[0]}); as the role that owns the schema run"
            f" `agentjournal migrate --db <the owner's URL> --grant {conn.info.user}`"
            " (docs/postgres.md, Roles)"
        ) from exc
    if row is None or row[0] is None:
        raise StorageError("the connection has no schema to create tables in")
    if row[1]:
        log.warning(
            "connected to PostgreSQL as a superuser or BYPASSRLS role: row-level security"
            " does not apply to it, so tenant isolation rests on agentjournal's queries"
            " alone; connect as an ordinary role (docs/postgres.md)"
        )
    return f"agentjournal.{row[0]}"[:63]


def _version(conn: psycopg.Connection[Any], known: int) -> int:
    """The current schema's version (0: no journal there yet); raises for a newer one."""
    found = conn.execute(
        "SELECT 1 FROM pg_class WHERE relname = 'agentjournal_schema'"
        " AND relnamespace = current_schema()::regnamespace"
    ).fetchone()
    if found is None:
        return 0
    row = conn.execute("SELECT max(version) FROM agentjournal_schema").fetchone()
    version = int((row[0] if row else None) or 0)
    if version > known:
        raise StorageError(
            f"the database has schema version {version}, newer than this agentjournal"
            f" knows ({known}); upgrade agentjournal to open it"
        )
    return version


def _apply(conn: psycopg.Connection[Any], schema: str | None, migrations: list[str]) -> None:
    with conn.transaction():
        current = conn.execute("SELECT current_schema()").fetchone()
        target = schema or (current[0] if current else None)
        if target is None:
            raise StorageError("the connection has no schema to create tables in")
        # Instances starting together: one migrates, the others wait and find it done. The
        # lock comes first: CREATE SCHEMA IF NOT EXISTS is not safe against a concurrent one.
        conn.execute("SELECT pg_advisory_xact_lock(hashtext('agentjournal:' || %s))", (target,))
        if schema is not None:
            conn.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(schema)))
        conn.execute("CREATE TABLE IF NOT EXISTS agentjournal_schema (version integer)")
        found = _version(conn, len(migrations))
        for number, script in enumerate(migrations[found:], start=found + 1):
            conn.execute(script.encode("utf-8"))  # no parameters: a script runs whole
            conn.execute("INSERT INTO agentjournal_schema (version) VALUES (%s)", (number,))
        if found < len(migrations):
            # A migration may have added tables: the application roles get them too.
            for role in postgres_roles.granted_roles(conn):
                postgres_roles.grant(conn, role)


class PostgresStorage:
    """A journal in a PostgreSQL database (or one schema of it). Thread-safe."""

    def __init__(self, url: str, durability: str = "full", *, search_index: bool = True) -> None:
        """`search_index=False` leaves new events out of the search index (bench/search_bench.py
        measures appends without it; `reindex` adds them later)."""
        self._search_index = search_index
        if durability not in ("full", "normal"):
            raise InvalidArgument(f"durability must be 'full' or 'normal', not {durability!r}")
        self._conninfo, options = parse_url(url)
        self.schema = options.get("schema")
        self.pooled = options.get("pooler") == "transaction"
        self._closed = False
        self._scopes: dict[int, str] = {}  # id(connection) -> the tenant scope it has set
        # Whether the search index has statistics (once it has, it keeps them), and when that
        # was last asked (postgres_search.py).
        self._search_analyzed = False
        self._search_analyzed_checked = -math.inf
        kwargs: dict[str, Any] = {"autocommit": True}
        if self.pooled:
            kwargs["prepare_threshold"] = None  # a pooler may hand each statement elsewhere
        size = int(options.get("pool_size", "8"))
        try:
            # A direct connection first: a wrong URL fails at once with the server's own words
            # (the pool would retry quietly until its timeout).
            with psycopg.connect(self._conninfo, autocommit=True, connect_timeout=10) as probe:
                self._configure(probe)
                self.channel = _migrate(probe, self.schema)
        except psycopg.Error as exc:
            raise StorageError(f"cannot open the PostgreSQL journal: {exc}") from exc
        self._pool = ConnectionPool(
            self._conninfo,
            min_size=1,
            max_size=size,
            kwargs=kwargs,
            configure=self._configure,
            open=False,
            name="agentjournal",
        )
        try:
            self._pool.open(wait=True, timeout=15)
        except psycopg.Error as exc:
            self._pool.close()
            raise StorageError(f"cannot connect to PostgreSQL: {exc}") from exc
        self.signal = CommitSignal()
        self._synchronous = durability == "full"
        # Group commit's transactions on a connection of their own, outside the pool (whose size
        # stays what readers and plain writes have); behind a transaction-mode pooler, pooled.
        self._grouped = self._control(own=None if self.pooled else self._own_connection)
        self._group = GroupCommit(self._grouped, self.signal.notify)
        # Turns held across instances by session-level advisory locks on one connection of ours:
        # if this process dies, PostgreSQL ends the connection and the locks with it. Behind a
        # transaction-mode pooler a session-level lock means nothing: holds stay in-process.
        self._turn_conn: psycopg.Connection[Any] | None = None
        self._turns = TurnHolds() if self.pooled else TurnHolds(self._lock_turn, self._unlock_turn)
        self._stop = threading.Event()
        self._listener: threading.Thread | None = None
        if not self.pooled:
            self._listener = threading.Thread(
                target=self._listen, name="agentjournal-listen", daemon=True
            )
            self._listener.start()

    # -- connections ------------------------------------------------------------------------

    def _own_connection(self) -> psycopg.Connection[Any]:
        conn = psycopg.connect(self._conninfo, autocommit=True, connect_timeout=10)
        try:
            self._configure(conn)
            # Only appends run here, a few statement texts, each keyed by equality: prepare
            # them at their first use rather than their sixth (psycopg's default) and plan them
            # once, generically, rather than afresh at each of their first five executions (the
            # server's `auto`; ~0.3 ms each for the events statement). The first turns of every
            # new writer paid both.
            conn.execute("SET plan_cache_mode = force_generic_plan")
            conn.prepare_threshold = 0
        except BaseException:
            conn.close()
            raise
        return conn

    def _configure(self, conn: psycopg.Connection[Any]) -> None:
        self._scopes.pop(id(conn), None)  # a new connection may reuse a closed one's id
        if self.schema is not None:
            conn.execute(sql.SQL("SET search_path TO {}").format(sql.Identifier(self.schema)))

    def _listen(self) -> None:
        """Wake local subscribers when any instance commits, and once more when the global feed
        shows that commit: it does only once every transaction older than it has ended
        (docs/postgres.md), and a subscriber woken before then found nothing new."""
        while not self._stop.is_set():
            try:
                with psycopg.connect(self._conninfo, autocommit=True) as conn:
                    conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(self.channel)))
                    self.signal.notify()  # whatever committed while we were not listening
                    self._follow(conn)
            except psycopg.Error as exc:
                if not self._stop.is_set():
                    log.warning("LISTEN connection lost (%s); reconnecting", exc)
                    self._stop.wait(1.0)

    def _follow(self, conn: psycopg.Connection[Any]) -> None:
        held = -1  # the newest notified tx the feed may not show yet (-1: none)
        while not self._stop.is_set():
            notes = _notes(conn, 1.0 if held < 0 else 0.02)
            if self._stop.is_set():
                return
            for payload in notes:
                # Settled: every transaction up to tx has ended (Control.commit), so the feed
                # shows all that was held, with no need to ask the server. (Notifications come
                # in commit order; an older transaction committing later was running when
                # this one's events statement looked, so this one was not marked settled.)
                tx, settled = _notified(payload)
                held = -1 if settled and held <= tx else max(held, tx)
            if held < 0:
                if notes:
                    self.signal.notify()  # the feed shows it now
                continue
            # On a pooled connection: the LISTEN connection runs nothing but LISTEN.
            with self._pool.connection() as pooled:
                row = pooled.execute(
                    "SELECT pg_snapshot_xmin(pg_current_snapshot())::text"
                ).fetchone()
            if row is not None and int(row[0]) > held:
                held = -1
                self.signal.notify()  # the feed shows it now: one more wake-up
            elif notes:
                self.signal.notify()  # session streams need not wait for the feed

    def hold_turn(self, tenant: str, session_id: str) -> AbstractContextManager[bool]:
        return self._turns.hold(tenant, session_id)

    def _turn_key(self, tenant: str, session_id: str) -> str:
        return f"agentjournal-turn:{self.channel}:{tenant}:{session_id}"

    def _lock_turn(self, tenant: str, session_id: str) -> bool:
        # Runs under TurnHolds' lock: one statement at a time on the turn connection.
        for attempt in (1, 2):
            try:
                if self._turn_conn is None or self._turn_conn.closed:
                    self._turn_conn = psycopg.connect(self._conninfo, autocommit=True)
                row = self._turn_conn.execute(
                    "SELECT pg_try_advisory_lock(hashtextextended(%s, 0))",
                    (self._turn_key(tenant, session_id),),
                ).fetchone()
                return bool(row and row[0])
            except psycopg.OperationalError as exc:
                self._drop_turn_connection()
                if attempt == 2:
                    raise StorageError(f"cannot mark the turn as running: {exc}") from exc
        raise AssertionError("unreachable")

    def _unlock_turn(self, tenant: str, session_id: str) -> None:
        try:
            if self._turn_conn is not None:
                self._turn_conn.execute(
                    "SELECT pg_advisory_unlock(hashtextextended(%s, 0))",
                    (self._turn_key(tenant, session_id),),
                )
        except psycopg.Error:
            self._drop_turn_connection()

    def _drop_turn_connection(self) -> None:
        conn, self._turn_conn = self._turn_conn, None
        if conn is not None:
            log.warning("the turn-lock connection was lost: turns running here are unguarded")
            with contextlib.suppress(psycopg.Error):
                conn.close()

    def close(self) -> None:
        self._closed = True
        if self._turn_conn is not None:
            self._turn_conn.close()
        self._stop.set()
        if self._listener is not None:
            # Wake the listener out of its wait (other instances take it as a spare wake-up).
            with contextlib.suppress(psycopg.Error), self._pool.connection() as conn:
                conn.execute("SELECT pg_notify(%s, '')", (self.channel,))
            self._listener.join(timeout=5)
        self._grouped.close()
        self._pool.close()

    # -- writes -----------------------------------------------------------------------------

    def write(self, work: Callable[[WriteTx], T]) -> T:
        # Plain writes (task verbs, sessions, keys) each get a transaction of their own: they
        # lock rows in their own orders, and sharing one transaction across instances made
        # deadlocks (each a second's wait). Appends, which lock all their sessions at once in id
        # order, share transactions through group commit.
        result: T = self._submit(lambda: self._alone(work))
        return result

    def _alone(self, work: Callable[[WriteTx], T]) -> T:
        control = self._control()
        control.begin()
        try:
            result = work(control.tx)
        except BaseException:
            control.rollback()
            raise
        control.commit()
        self.signal.notify()
        return result

    def _control(self, own: Callable[[], psycopg.Connection[Any]] | None = None) -> Control:
        return Control(
            self._pool.getconn,
            self._pool.putconn,
            self.channel,
            self._synchronous,
            self._search_index,
            own,
        )

    def write_grouped(
        self, work: Callable[[WriteTx, Sequence[I]], Sequence[T | BaseException]], item: I
    ) -> T:
        result: T = self._submit(lambda: self._group.submit_grouped(work, item))
        return result

    def _submit(self, call: Callable[[], Any]) -> Any:
        for attempt in range(1, WRITE_ATTEMPTS + 1):
            if self._closed:
                raise StorageError("the journal is closed")
            try:
                return call()
            except CommitUnknown:
                raise
            except psycopg.DataError as exc:
                # A value out of the column's range or type: the caller's data, never a retry
                # and never "storage unavailable".
                raise _refused_value(exc) from exc
            except psycopg.IntegrityError as exc:
                # The rules passed, then a concurrent transaction committed the same key or id
                # first (another thread, another instance). Run again: the rules now see that
                # row and answer as for a retry, or with their own Conflict.
                if attempt == WRITE_ATTEMPTS:
                    raise Conflict(f"the database refused the write: {exc}") from exc
            except _RETRYABLE as exc:
                # Rolled back, never committed: safe to run again on a fresh connection.
                if attempt == WRITE_ATTEMPTS:
                    raise StorageError(f"write failed after {attempt} attempts: {exc}") from exc
                log.warning("write attempt %d failed (%s); retrying", attempt, exc)
                self._pool.check()
            except psycopg.Error as exc:
                raise StorageError(f"write failed: {exc}") from exc
        raise AssertionError("unreachable")

    def checkpoint(self) -> None:
        """After a purge: VACUUM, so the purged rows' space is reclaimed and overwritten (the
        server's WAL keeps them until it is recycled, like any deleted row)."""
        try:
            with self._pool.connection() as conn:
                conn.execute("VACUUM search_index, messages, tool_calls, tasks, events, sessions")
        except psycopg.Error as exc:  # the purge itself committed; its VACUUM did not run
            raise StorageError(f"VACUUM after the purge failed: {exc}") from exc

    # -- reads ------------------------------------------------------------------------------

    def _read(
        self, tenant: str | None, query: str, params: Sequence[Any] = ()
    ) -> list[tuple[Any, ...]]:
        """One statement seeing only `tenant`'s rows (None: every tenant's); retried once on a
        fresh connection if the connection was lost."""
        if self._closed:
            raise StorageError("the journal is closed")
        # None, never a falsy tenant, means every tenant: an empty one sees nothing.
        scope = _ALL_TENANTS if tenant is None else tenant
        for attempt in (1, 2):
            try:
                with self._pool.connection() as conn:
                    if self.pooled:
                        # The next statement may reach another server connection: the scope
                        # lives in the statement's own transaction (one pipelined round trip).
                        with conn.pipeline():
                            conn.execute("BEGIN READ ONLY")
                            conn.execute(_SCOPE_LOCAL, (scope,))
                            cursor = conn.execute(query, params)
                            conn.execute("COMMIT")
                        return cursor.fetchall()
                    # Our own connections keep their scope between reads (a write's SET LOCAL
                    # reverts to it at its end): set it only when it changes, so a read is one
                    # statement. A connection new to the pool starts with no scope: it sees nothing.
                    if self._scopes.get(id(conn)) != scope:
                        conn.execute(_SCOPE_SESSION, (scope,))
                        self._scopes[id(conn)] = scope
                    return conn.execute(query, params).fetchall()
            except psycopg.OperationalError as exc:
                if attempt == 2:
                    raise StorageError(f"read failed: {exc}") from exc
                self._pool.check()
            except psycopg.DataError as exc:
                raise _refused_value(exc) from exc
            except psycopg.Error as exc:
                raise StorageError(f"read failed: {exc}") from exc
        raise AssertionError("unreachable")

    def session(self, tenant: str, session_id: str) -> Session | None:
        rows = self._read(
            tenant,
            f"SELECT {SESSION_COLUMNS} FROM sessions WHERE session_id = %s AND tenant = %s",
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
        if before:
            tx, event_id = decode_position(before)
        else:
            tx, event_id = 2**64 - 1, 2**63 - 1
        matching = ""
        needle: tuple[str, ...] = ()
        if search:
            matching = " AND (strpos(lower(title), %s) > 0 OR strpos(lower(session_id), %s) > 0)"
            needle = (search.lower(),) * 2
        rows = self._read(
            tenant,
            f"SELECT {SESSION_COLUMNS} FROM sessions WHERE tenant = %s AND status = ANY(%s)"
            f" AND (last_tx, last_event_id) < (%s::text::xid8, %s){matching}"
            " ORDER BY last_tx DESC, last_event_id DESC LIMIT %s",
            (tenant, list(statuses), str(tx), event_id, *needle, limit),
        )
        return [session_from_row(row) for row in rows]

    def session_ids(self, tenant: str) -> list[str]:
        rows = self._read(
            tenant,
            "SELECT session_id FROM sessions WHERE tenant = %s ORDER BY last_tx, last_event_id",
            (tenant,),
        )
        return [row[0] for row in rows]

    def tenants(self) -> list[str]:
        rows = self._read(None, "SELECT DISTINCT tenant FROM sessions ORDER BY tenant", ())
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
            tenant,
            f"SELECT {EVENT_COLUMNS} FROM events WHERE session_id = %s AND tenant = %s"
            " AND seq > %s AND seq <= %s"
            f" ORDER BY seq {'DESC' if newest_first else 'ASC'} LIMIT %s",
            (session_id, tenant, after, 2**62 if until is None else until, limit),
        )
        return [event_from_row(row) for row in rows]

    def events_all(self, tenant: str, after: str | None, limit: int) -> list[Event]:
        tx, event_id = decode_position(after)
        # Only transactions below the oldest one still running: all of them have ended, and any
        # transaction that commits later has a tx at or above it, so it sorts after this page.
        rows = self._read(
            tenant,
            f"SELECT {EVENT_COLUMNS} FROM events WHERE tenant = %s"
            " AND (tx, event_id) > (%s::text::xid8, %s)"
            " AND tx < pg_snapshot_xmin(pg_current_snapshot())"
            " ORDER BY tx, event_id LIMIT %s",
            (tenant, str(tx), event_id, limit),
        )
        return [event_from_row(row) for row in rows]

    def feed_head(self, tenant: str, after: str | None) -> str | None:
        tx, event_id = decode_position(after)
        rows = self._read(
            tenant,
            # `AS tx_text`: a bare `tx::text` is named "tx", and ORDER BY tx would sort it as text
            # (postgres_rows.py, EVENT_COLUMNS).
            "SELECT tx::text AS tx_text, event_id FROM events WHERE tenant = %s"
            " AND (tx, event_id) > (%s::text::xid8, %s) ORDER BY tx DESC, event_id DESC LIMIT 1",
            (tenant, str(tx), event_id),
        )
        return encode_position(int(rows[0][0]), rows[0][1]) if rows else None

    def position_key(self, position: str) -> int:
        tx, event_id = decode_position(position)
        # decode masks event_id to 64 bits, so this orders as the pair (tx, event_id) does.
        return tx << 64 | event_id

    def newest_compaction(self, tenant: str, session_id: str, until: int | None) -> Event | None:
        rows = self._read(
            tenant,
            f"SELECT {EVENT_COLUMNS} FROM events WHERE session_id = %s AND tenant = %s"
            " AND type = 'context_compacted' AND seq <= %s ORDER BY seq DESC LIMIT 1",
            (session_id, tenant, 2**62 if until is None else until),
        )
        return event_from_row(rows[0]) if rows else None

    def messages(self, tenant: str, session_id: str, last: int | None) -> list[Message]:
        rows = self._read(
            tenant,
            f"SELECT {MESSAGE_COLUMNS} FROM messages WHERE session_id = %s AND tenant = %s"
            " ORDER BY seq DESC LIMIT %s",
            (session_id, tenant, last),
        )
        return [Message(*row) for row in reversed(rows)]

    def tool_calls(
        self,
        tenant: str,
        session_id: str,
        *,
        call_ids: Collection[str] | None = None,
        open_only: bool = False,
    ) -> list[ToolCall]:
        rows = self._read(
            tenant,
            f"SELECT {TOOL_CALL_COLUMNS} FROM tool_calls WHERE session_id = %s AND tenant = %s"
            " AND (%s::text[] IS NULL OR call_id = ANY(%s::text[]))"
            " AND (NOT %s OR status = 'pending') ORDER BY call_seq",
            (session_id, tenant, _list(call_ids), _list(call_ids), open_only),
        )
        return [ToolCall(*row) for row in rows]

    def task(self, tenant: str, task_id: str) -> Task | None:
        rows = self._read(
            tenant,
            f"SELECT {TASK_COLUMNS} FROM tasks WHERE task_id = %s AND tenant = %s",
            (task_id, tenant),
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
        rows = self._read(
            tenant,
            f"SELECT {TASK_COLUMNS} FROM tasks WHERE tenant = %s AND task_id > %s"
            " AND (%s::text[] IS NULL OR status = ANY(%s::text[]))"
            " AND (%s::text IS NULL OR type = %s) AND (%s::text IS NULL OR session_id = %s)"
            " ORDER BY task_id LIMIT %s",
            (
                tenant,
                after or "",
                _list(statuses),
                _list(statuses),
                type,
                type,
                session_id,
                session_id,
                limit,
            ),
        )
        return [task_from_row(row) for row in rows]

    def open_turns(self, tenant: str | None) -> list[Session]:
        rows = self._read(
            tenant,
            f"SELECT {SESSION_COLUMNS} FROM sessions WHERE turn_open"
            " AND (%s::text IS NULL OR tenant = %s) AND status != 'deleted'"
            " ORDER BY last_tx, last_event_id",
            (tenant, tenant),
        )
        return [session_from_row(row) for row in rows]

    def api_key(self, key_id: str) -> ApiKeyRow | None:
        # The key's tenant is what this look-up finds out: it reads across tenants.
        rows = self._read(None, f"SELECT {_KEY_COLUMNS} FROM api_keys WHERE key_id = %s", (key_id,))
        return ApiKeyRow(*rows[0]) if rows else None

    def api_keys(self, tenant: str | None) -> list[ApiKeyRow]:
        rows = self._read(
            tenant,
            f"SELECT {_KEY_COLUMNS} FROM api_keys WHERE %s::text IS NULL OR tenant = %s"
            " ORDER BY created_at, key_id",
            (tenant, tenant),
        )
        return [ApiKeyRow(*row) for row in rows]

    # -- search -----------------------------------------------------------------------------

    def search(
        self,
        tenant: str,
        query: SearchQuery,
        where: SearchFilter,
        below: int | None,
        size: int,
    ) -> list[int]:
        # Two plans, chosen here rather than by the planner, whose joins on a word's estimated
        # frequency went wrong by orders of magnitude (a fresh table has no statistics; a nested
        # loop over sessions then took 110 s at a million events). The estimate only picks
        # between two bounded ways (postgres_search.py): a common word is found among the newest
        # rows of the index, a rarer one through the GIN index.
        (on_sessions, session_params), (on_events, event_params) = _search_filters(where)
        tsquery = query.tsquery()
        top = 2**62 if below is None else below
        # A prefix's estimate is not to be trusted (postgres_search.py): the fixed walk.
        prefixed = any(term.prefix for term in query.terms)
        plan = choose_plan(None if prefixed else self._match_fraction(tenant, tsquery), size)
        log.debug("search %s: %s (walk %d rows)", tsquery, plan.why, plan.walk)
        # The matches, sorted newest first, each looked up in events and sessions in that order
        # until the window is full (OFFSET 0 keeps each look-up a nested loop by primary key).
        # As plain joins, the planner, taking the matches of a rare word for thousands, walked
        # the events' primary key backwards to merge with them: 500,000 rows, ~200 ms, for one.
        newest = (
            " SELECT h.event_id FROM (SELECT * FROM hits ORDER BY event_id DESC) AS h"
            " JOIN LATERAL (SELECT 1 FROM events AS e WHERE e.event_id = h.event_id"
            f"{on_events} OFFSET 0) AS e ON true"
            " JOIN LATERAL (SELECT 1 FROM sessions AS s"
            " WHERE s.session_id = h.session_id AND s.tenant = h.tenant"
            f"{on_sessions} OFFSET 0) AS s ON true"
            " ORDER BY h.event_id DESC LIMIT %s"
        )
        filters = (*event_params, *session_params, size)
        walk = plan.walk
        while walk:
            # The walk: the newest `walk` index rows (their lowest id from the primary key
            # alone), each tested as the scan reads it.
            recent = self._read(
                tenant,
                "WITH hits AS MATERIALIZED (SELECT event_id, session_id, tenant FROM search_index"
                " WHERE event_id <= %s AND event_id >= coalesce((SELECT event_id"
                " FROM search_index WHERE event_id <= %s ORDER BY event_id DESC"
                " OFFSET %s LIMIT 1), 0)"
                " AND tenant = %s AND terms @@ to_tsquery('simple', %s))" + newest,
                (top, top, walk - 1, tenant, tsquery, *filters),
            )
            # The newest `size` matches among the newest rows are the newest of all matches.
            if len(recent) >= size:
                return [int(row[0]) for row in recent]
            # Too few: a longer walk if the rate it saw makes one worth it, else GIN.
            walked, walk = walk, longer_walk(walk, len(recent), size)
            log.debug(
                "search %s: a walk of %d found %d, next %d", tsquery, walked, len(recent), walk
            )
        rows = self._read(
            tenant,
            "WITH hits AS MATERIALIZED (SELECT event_id, session_id, tenant FROM search_index"
            " WHERE terms @@ to_tsquery('simple', %s) AND tenant = %s AND event_id <= %s)" + newest,
            (tsquery, tenant, top, *filters),
        )
        return [int(row[0]) for row in rows]

    def _match_fraction(self, tenant: str, tsquery: str) -> float | None:
        """The share of index rows `tsquery` matches by the planner's statistics; None while
        the index has never been analyzed (checked again every `_ANALYZED_RECHECK_S`)."""
        if not self._search_analyzed:
            now = time.monotonic()
            if now - self._search_analyzed_checked < _ANALYZED_RECHECK_S:
                return None
            self._search_analyzed_checked = now
            rows = self._read(None, ANALYZED_SQL)
            self._search_analyzed = bool(rows and rows[0][0])
            if not self._search_analyzed:
                return None
        return match_fraction(self._read(tenant, ESTIMATE_SQL, (tsquery,))[0][0])

    def events_by_id(self, tenant: str, event_ids: Sequence[int]) -> list[Event]:
        rows = self._read(
            tenant,
            f"SELECT {EVENT_COLUMNS} FROM events WHERE tenant = %s AND event_id = ANY(%s)",
            (tenant, list(event_ids)),
        )
        return [event_from_row(row) for row in rows]

    def search_index_ids(self, tenant: str, session_id: str) -> tuple[set[int], int]:
        rows = self._read(
            tenant,
            "SELECT event_id FROM search_index WHERE session_id = %s AND tenant = %s",
            (session_id, tenant),
        )
        return {int(row[0]) for row in rows}, 2**62  # written with the append: always complete

    def reindex(self, progress: Callable[[int], None] | None = None) -> int:
        """Rebuild the search index, a page of events per transaction; events appended
        meanwhile are indexed by their own appends."""
        self.write(lambda tx: _postgres_tx(tx)._run("DELETE FROM search_index"))
        total, after = 0, 0
        while True:
            rows = self._read(
                None,
                f"SELECT tenant, {EVENT_COLUMNS} FROM events WHERE event_id > %s"
                " ORDER BY event_id LIMIT 2000",
                (after,),
            )
            if not rows:
                return total
            events = [(row[0], event_from_row(row[1:])) for row in rows]

            def index(tx: WriteTx, events: list[tuple[str, Event]] = events) -> None:
                for tenant in {t for t, _ in events}:
                    _postgres_tx(tx).index_events(tenant, [e for t, e in events if t == tenant])

            self.write(index)
            total += len(rows)
            after = events[-1][1].event_id
            if progress is not None:
                progress(total)

    # -- replication ------------------------------------------------------------------------

    def source_id(self) -> str:
        rows = self._read(None, "SELECT value FROM journal_meta WHERE name = 'source_id'")
        if not rows:
            raise StorageError("this journal has no source id (journal_meta was emptied)")
        return str(rows[0][0])

    def purges(self, tenant: str, after: str | None, limit: int) -> list[PurgeRecord]:
        tx, purge_id = decode_position(after)
        # As the feed: only purges of transactions below the oldest one still running.
        rows = self._read(
            tenant,
            "SELECT tx::text AS tx_text, purge_id, session_id, purged_by, purged_at, event_count"
            " FROM purge_audit WHERE tenant = %s AND pending IS NULL"
            " AND (tx, purge_id) > (%s::text::xid8, %s)"
            " AND tx < pg_snapshot_xmin(pg_current_snapshot())"
            " ORDER BY tx, purge_id LIMIT %s",
            (tenant, str(tx), purge_id, limit),
        )
        return [
            PurgeRecord(encode_position(int(row[0]), row[1]), row[2], row[3], row[4], row[5])
            for row in rows
        ]

    def purge_head(self, tenant: str, after: str | None) -> str | None:
        tx, purge_id = decode_position(after)
        rows = self._read(
            tenant,
            "SELECT tx::text AS tx_text, purge_id FROM purge_audit"
            " WHERE tenant = %s AND pending IS NULL"
            " AND (tx, purge_id) > (%s::text::xid8, %s) ORDER BY tx DESC, purge_id DESC LIMIT 1",
            (tenant, str(tx), purge_id),
        )
        return encode_position(int(rows[0][0]), rows[0][1]) if rows else None

    def replication_status(self, tenant: str | None) -> list[ReplicationProgress]:
        rows = self._read(
            tenant,
            f"SELECT {PROGRESS_COLUMNS} FROM replication_progress"
            " ORDER BY source_id, source_tenant, tenant",
        )
        return [ReplicationProgress(*row) for row in rows]

    def replicated_session_rows(
        self, tenant: str, source_id: str | None, states: Sequence[str] | None
    ) -> list[ReplicatedSession]:
        rows = self._read(
            tenant,
            f"SELECT {REPLICATED_COLUMNS} FROM session_sources WHERE tenant = %s"
            " AND (%s::text IS NULL OR source_id = %s) ORDER BY session_id, source_id",
            (tenant, source_id, source_id),
        )
        return [ReplicatedSession(*row) for row in rows if states is None or row[3] in states]

    def session_origins(self, tenant: str, session_ids: Sequence[str]) -> dict[str, str]:
        if not session_ids:
            return {}
        rows = self._read(
            tenant,
            "SELECT session_id, source_id FROM session_sources WHERE tenant = %s"
            " AND session_id = ANY(%s) AND state IN ('ok', 'stopped')",
            (tenant, list(session_ids)),
        )
        return {row[0]: row[1] for row in rows}

    def integrity_errors(self) -> list[str]:
        """PostgreSQL checks its constraints on every write; what can still be wrong is a
        constraint someone dropped or disabled, and a purge left half-done."""
        problems = [
            f"constraint {row[0]} on {row[1]} is not validated"
            for row in self._read(
                None,
                "SELECT conname, conrelid::regclass::text FROM pg_constraint"
                " WHERE connamespace = current_schema()::regnamespace AND NOT convalidated",
            )
        ]
        problems += [
            f"trigger {row[0]} on {row[1]} is disabled"
            for row in self._read(
                None,
                "SELECT tgname, tgrelid::regclass::text FROM pg_trigger"
                " WHERE tgrelid::regclass::text IN ('events', 'purge_audit', 'sessions')"
                " AND NOT tgisinternal AND tgenabled = 'D'",
            )
        ]
        orphans = self._read(
            None,
            "SELECT count(*) FROM search_index AS i"
            " WHERE NOT EXISTS (SELECT 1 FROM events AS e WHERE e.event_id = i.event_id)",
        )[0][0]
        if orphans:
            problems.append(f"search index: {orphans} rows of events that do not exist")
        return problems


# How often a search asks again whether the index has been analyzed, while it has not.
_ANALYZED_RECHECK_S: Final = 10.0


def _search_filters(where: SearchFilter) -> tuple[tuple[str, list[Any]], tuple[str, list[Any]]]:
    """The filters as SQL on `s` (sessions) and on `e` (events), with their parameters; each
    clause after an AND."""
    clauses = ["s.status = ANY(%s)"]
    params: list[Any] = [list(where.statuses)]
    on_events: list[str] = []
    event_params: list[Any] = []
    if where.types is not None:
        on_events.append("e.type = ANY(%s)")
        event_params.append(list(where.types))
    if where.since is not None:
        on_events.append("e.created_at >= %s")
        event_params.append(where.since)
    if where.until is not None:
        on_events.append("e.created_at < %s")
        event_params.append(where.until)
    return (
        ("".join(f" AND {clause}" for clause in clauses), params),
        ("".join(f" AND {clause}" for clause in on_events), event_params),
    )


def _postgres_tx(tx: WriteTx) -> PostgresTx:
    assert isinstance(tx, PostgresTx)
    return tx


def _notes(conn: psycopg.Connection[Any], timeout: float) -> list[str]:
    """The payloads of the notifications waiting on `conn` or, if none is, of those that arrive
    within `timeout` seconds, read through libpq: the listener wakes after every commit, and
    psycopg's `notifies()` (a generator, a wait, a second call for what else is waiting) cost it
    several times the CPU of a select and a read, on the cores the writers need."""
    pgconn = conn.pgconn
    pgconn.consume_input()
    notes = _drain(pgconn, conn.info.encoding)
    if not notes and select.select([pgconn.socket], [], [], timeout)[0]:
        pgconn.consume_input()  # raises OperationalError if the connection is gone
        notes = _drain(pgconn, conn.info.encoding)
    return notes


def _drain(pgconn: pq.abc.PGconn, encoding: str) -> list[str]:
    notes = []
    while (note := pgconn.notifies()) is not None:
        notes.append(note.extra.decode(encoding, "replace"))
    return notes


def _notified(payload: str) -> tuple[int, bool]:
    """The tx of a notification's position (0 for an empty or foreign payload: wake anyway), and
    whether the feed shows it already (`SETTLED`)."""
    settled = payload.endswith(SETTLED)
    if settled:
        payload = payload[: -len(SETTLED)]
    try:
        return decode_position(payload or None)[0], settled
    except InvalidArgument:
        return 0, False


def _list(values: Collection[str] | None) -> list[str] | None:
    return None if values is None else list(values)
