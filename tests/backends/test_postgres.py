"""What only the PostgreSQL backend has to show, on the real server (no mocks): the global feed
never skips an event however transactions interleave, a session's events keep their seq order
across instances, row-level security, the rules the database enforces by itself, failover,
transaction-mode poolers, and several instances starting, recovering and claiming at once.

The contract suite (tests/test_*.py with the `journal` fixture) covers everything both backends
share. Raw connections here log in as the application role (`ROLE`), which owns nothing, so
row-level security applies to them as to the application; the few that need DDL log in as the
schema's owner (`OWNER`); `ADMIN_URL` is a superuser, used to watch and to kill.
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from contextlib import closing
from itertools import islice
from pathlib import Path
from types import TracebackType
from typing import Any

import psycopg
import psycopg.errors
import pytest
from psycopg import sql

from agentjournal import Conflict, Event, Journal, StorageError
from agentjournal.backends import EventRow, postgres
from agentjournal.backends.postgres import PostgresStorage, _notified
from agentjournal.backends.postgres_rows import decode_position
from agentjournal.backends.postgres_write import SETTLED, CommitUnknown
from agentjournal.keys import ApiKeys
from agentjournal.transfer import committed_events, export_lines
from helpers.private import private_journal
from postgres_fixtures import ADMIN_URL, HOST, OWNER, ROLE, fresh_schema, owner_url_for, url_for

WAIT = 60.0  # seconds: the most any wait may take before the test fails instead of hanging
WORKER = Path(__file__).parent.parent / "helpers" / "pg_instance.py"
NAIVE_FEED = "SELECT event_id FROM events WHERE event_id > %s ORDER BY event_id"
RAW_INSERT = (
    "INSERT INTO events (tenant, session_id, seq, type, payload, created_at)"
    " VALUES (%s, %s, %s, %s, %s, %s) RETURNING event_id"
)
TENANT_TABLES = ("sessions", "events", "messages", "tool_calls", "tasks", "api_keys", "purge_audit")


@pytest.fixture
def schema() -> Iterator[str]:
    """A fresh schema (fresh_schema checks that PostgreSQL is there, and drops it afterwards)."""
    with fresh_schema("pg") as name:
        yield name


@pytest.fixture
def new_schema() -> Iterator[str]:
    """A schema name no one uses yet (not created, not migrated); dropped afterwards."""
    with fresh_schema("pg", migrated=False) as name:
        yield name


def url(schema: str, *, owner: bool = False, **options: str) -> str:
    """The journal URL (as the application role, or the schema's owner), tagged with the schema
    as application_name so that this test's connections can be found (and killed) in
    pg_stat_activity."""
    make = owner_url_for if owner else url_for
    return make(schema, application_name=schema, **options)


def connect(
    schema: str, tenant: str | None = "*", *, admin: bool = False, owner: bool = False
) -> psycopg.Connection:
    """A raw autocommit connection to `schema`, as the application role (or the superuser, or
    the schema's owner, for what only an owner may do: DDL), with the tenant scope row-level
    security reads (None: no scope at all)."""
    role = OWNER if owner else ROLE
    conn = psycopg.connect(ADMIN_URL if admin else f"postgresql://{role}@{HOST}", autocommit=True)
    conn.execute(sql.SQL("SET search_path TO {}").format(sql.Identifier(schema)))
    if tenant is not None:
        conn.execute("SELECT set_config('agentjournal.tenant', %s, false)", (tenant,))
    return conn


def raw_append(conn: psycopg.Connection, session_id: str, content: str) -> int:
    """Insert one event the way the backend does (seq under the session row's lock; the trigger
    sets tx and advances the session); returns its event_id."""
    row = conn.execute(
        "SELECT tenant, last_seq FROM sessions WHERE session_id = %s FOR UPDATE", (session_id,)
    ).fetchone()
    assert row is not None, session_id
    tenant, last_seq = row
    payload = json.dumps({"content": content})
    created = conn.execute(
        RAW_INSERT, (tenant, session_id, last_seq + 1, "user_message", payload, 1)
    ).fetchone()
    assert created is not None
    return int(created[0])


def feed(journal: Journal, after: str | None = None) -> list[Event]:
    """The tenant's whole feed after `after`, page by page."""
    events: list[Event] = []
    while page := journal.events_all(after=after, limit=1000):
        events += page
        after = page[-1].position
    return events


def settled_feed(journal: Journal, schema: str) -> list[Event]:
    """The tenant's whole feed, once it holds every event stored (a transaction running anywhere
    in the cluster holds the feed back until it ends)."""
    with closing(connect(schema, journal.tenant)) as conn:
        row = conn.execute("SELECT count(*) FROM events").fetchone()
    count = row[0] if row else 0
    deadline = time.monotonic() + WAIT
    while len(events := feed(journal)) < count:
        assert time.monotonic() < deadline, f"the feed holds {len(events)} of {count} events"
        time.sleep(0.01)
    return events


def wait_for(condition: Callable[[], Any], what: str) -> Any:
    deadline = time.monotonic() + WAIT
    while not (value := condition()):
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.01)
    return value


def kill_connections(schema: str) -> set[int]:
    """Terminate every server connection of this test's journals; wait until they are gone."""
    pids = backend_pids(schema)
    with psycopg.connect(ADMIN_URL, autocommit=True) as admin:
        # One pid at a time, never in a WHERE: PostgreSQL may evaluate the call before the filter.
        for pid in pids:
            admin.execute("SELECT pg_terminate_backend(%s, 10000)", (pid,))
    return pids


def backend_pids(schema: str) -> set[int]:
    with psycopg.connect(ADMIN_URL, autocommit=True) as admin:
        rows = admin.execute(
            "SELECT pid FROM pg_stat_activity WHERE usename = %s AND application_name = %s",
            (ROLE, schema),
        ).fetchall()
    return {row[0] for row in rows}


class Workers:
    """Processes running tests/helpers/pg_instance.py, released together on a line of stdin."""

    def __init__(self, *argvs: list[str]) -> None:
        self.procs = [
            subprocess.Popen(
                [sys.executable, str(WORKER), *argv],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for argv in argvs
        ]
        self._outputs: list[tuple[str, str] | None] = [None] * len(self.procs)
        self._collectors: list[threading.Thread] = []

    def __enter__(self) -> Workers:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.kill()
            proc.wait()
            for pipe in (proc.stdin, proc.stdout, proc.stderr):
                if pipe is not None:
                    pipe.close()

    def lines(self) -> list[str]:
        """The next line of each process (a process that died instead fails the test)."""
        found = []
        for proc in self.procs:
            line = proc.stdout.readline().strip() if proc.stdout else ""
            if not line:
                proc.wait(WAIT)
                pytest.fail(f"worker died: {proc.stderr.read() if proc.stderr else ''}")
            found.append(line)
        return found

    def release(self) -> None:
        for proc in self.procs:
            assert proc.stdin is not None
            proc.stdin.write("go\n")
            proc.stdin.flush()

    def collect(self) -> None:
        """Start reading each process's output to its end, in the background."""

        def read(index: int) -> None:
            self._outputs[index] = self.procs[index].communicate(timeout=WAIT)

        self._collectors = [
            threading.Thread(target=read, args=(i,), daemon=True) for i in range(len(self.procs))
        ]
        for thread in self._collectors:
            thread.start()

    @property
    def done(self) -> bool:
        return not any(thread.is_alive() for thread in self._collectors)

    def results(self) -> list[dict[str, Any]]:
        """Each process's final JSON line, once all have exited cleanly."""
        if not self._collectors:
            self.collect()
        for thread in self._collectors:
            thread.join(WAIT)
        assert self.done, "a worker hung"
        reports = []
        for proc, output in zip(self.procs, self._outputs, strict=True):
            assert output is not None
            out, err = output
            assert proc.returncode == 0, err
            reports.append(json.loads(out.strip().splitlines()[-1]))
        return reports


# -- global order -----------------------------------------------------------------------------


@pytest.mark.slow
def test_gap_a_reader_resuming_after_its_last_position_gets_every_event_once(schema: str) -> None:
    """8 writer processes append at once, to their own sessions and to shared ones, most of them
    sleeping a random while *inside* the transaction, after their INSERT took event_ids and
    before COMMIT. Meanwhile a reader pages through `events_all(after=<last position it saw>)`.

    The interleaving this provokes, over and over: T1 inserts event 10 and sleeps; T2 inserts
    event 11 and commits; T1 commits later. A naive feed on the identity column (`WHERE event_id
    > last ORDER BY event_id`) that reads between T2's and T1's commits returns 11, resumes
    "after 11" and never sees 10. The test runs such a naive reader alongside and checks that it
    did miss events, so the harness really produces the hazard; the journal's reader, which only
    takes events of transactions older than every transaction still running, ends with every
    event exactly once, in position order, each session's seqs ascending."""
    journal_url = url(schema)
    with Journal.open(journal_url) as journal, closing(connect(schema)) as naive:
        shared = [journal.create_session(f"shared {i}").session_id for i in range(3)]
        # event_id -> (session_id, seq, position), as each append acknowledged it
        acked = {
            e.event_id: (e.session_id, e.seq, e.position) for s in shared for e in journal.events(s)
        }
        # 40 appends each, sleeping up to 20 ms inside most transactions (the helper's defaults)
        sharing = [",".join(shared[: 1 + i % 3]) for i in range(8)]
        argvs = [
            ["write", journal_url, f"w{i}", "--seed", str(i), "--shared", sharing[i]]
            for i in range(8)
        ]
        rng = random.Random(5)
        with Workers(*argvs) as workers:
            assert workers.lines() == ["ready"] * 8
            workers.release()
            workers.collect()
            seen: list[Event] = []
            naive_seen: list[int] = []
            cursor: str | None = None
            reports: list[dict[str, Any]] | None = None
            deadline = time.monotonic() + WAIT
            while True:
                naive_last = naive_seen[-1] if naive_seen else 0
                for (event_id,) in naive.execute(NAIVE_FEED, (naive_last,)):
                    naive_seen.append(event_id)
                page = journal.events_all(after=cursor, limit=rng.choice((3, 20, 500)))
                seen += page
                cursor = page[-1].position if page else cursor
                if reports is None and workers.done:
                    reports = workers.results()
                    for report in reports:
                        assert report["errors"] == []
                        acked.update((row[0], tuple(row[1:])) for row in report["acks"])
                if reports is not None and not page and len(seen) >= len(acked):
                    break
                assert time.monotonic() < deadline, f"the feed gave {len(seen)} of {len(acked)}"

        stored = {row[0] for row in naive.execute("SELECT event_id FROM events")}
        ids = [event.event_id for event in seen]
        assert [i for i, n in Counter(ids).items() if n > 1] == [], "events read twice"
        assert set(ids) == set(acked) == stored, "events the reader never got"
        positions = [int(event.position) for event in seen]
        assert positions == sorted(positions)
        for event in seen:
            assert (event.session_id, event.seq, event.position) == acked[event.event_id]
        seqs: dict[str, list[int]] = defaultdict(list)
        for event in seen:
            seqs[event.session_id].append(event.seq)
        assert all(found == list(range(1, len(found) + 1)) for found in seqs.values())
        missed = stored - set(naive_seen)
        assert missed, "no interleaving provoked: the naive reader missed nothing"
        report = journal.verify()
        assert report.ok, report.to_dict()


def test_a_read_of_what_was_committed_waits_while_an_older_transaction_holds_the_feed(
    schema: str,
) -> None:
    """A transaction that took an id before our appends (here in another database of the
    cluster: any counts) holds them back from `events_all`. `committed_events`, and so export,
    waits for it instead of returning short; past its wait it says why, having lost nothing."""
    with Journal.open(url(schema)) as journal:
        sid = journal.create_session("held").session_id
        before = settled_feed(journal, schema)
        with closing(psycopg.connect(ADMIN_URL)) as other:
            other.execute("SELECT pg_current_xact_id()")  # an id, then the transaction stays open
            journal.append_many(sid, [{"type": "user_message", "payload": {"content": "x"}}] * 3)
            assert feed(journal) == before  # held back, as docs/postgres.md says
            with pytest.raises(StorageError, match="held back"):
                list(committed_events(journal, wait_seconds=0.2))
            ender = threading.Timer(0.3, other.commit)
            ender.start()
            try:
                read = list(committed_events(journal))
                lines = list(export_lines(journal))
            finally:
                ender.join()
        assert [(e.session_id, e.seq) for e in read] == [(sid, seq) for seq in range(1, 5)]
        assert read == settled_feed(journal, schema)
        assert [json.loads(line)["seq"] for line in lines] == [1, 2, 3, 4]


def test_positions_order_as_numbers_where_transaction_ids_cross_a_power_of_ten(
    schema: str,
) -> None:
    """The feed, the session list and the open turns order by (tx, event_id) as numbers. They once
    ordered by the text the xid8 column is read as (an ORDER BY name meant the output column
    `tx::text`), so a page holding transaction 999 and 1000 put '1000' first: the reader resumed
    after it and read 999's events twice or never, and the model test saw ids [.., 1162, 1158].
    Only a server whose transaction counter crosses a power of ten shows it, so here the events
    get such ids directly: the owner switches off the triggers that set and check tx in this
    schema, inserts rows of its own and advances their sessions as the statement trigger would.
    The ids must be in the server's past for the feed to show them, and a fresh server has used
    only some hundreds: the test spends ids until 1,000 is past."""
    txs = [1000, 99, 999, 100, 10, 9]  # inserted in this order: event_ids ascend so
    with Journal.open(url(schema)) as journal, closing(connect(schema, owner=True)) as raw:
        while int(raw.execute("SELECT pg_current_xact_id()::text").fetchone()[0]) <= max(txs):
            pass  # each autocommit statement that asks for its id is given a new one
        raw.execute("ALTER TABLE events DISABLE TRIGGER events_take_tx")
        raw.execute("ALTER TABLE events DISABLE TRIGGER events_advance_sessions")
        for n, tx in enumerate(txs):
            sid = f"tx{tx}"
            raw.execute(
                "INSERT INTO sessions (session_id, tenant, created_at, updated_at, turn_open)"
                " VALUES (%s, 'default', %s, %s, true)",
                (sid, n, n),
            )
            raw.execute(
                "INSERT INTO events (tx, tenant, session_id, seq, type, payload, created_at)"
                " VALUES (%s::text::xid8, 'default', %s, 1, 'session_created', %s, %s)",
                (str(tx), sid, json.dumps({"title": sid}), n),
            )
        raw.execute(
            "UPDATE sessions AS s SET last_seq = 1, last_tx = e.tx, last_event_id = e.event_id,"
            " event_count = 1 FROM events AS e WHERE e.session_id = s.session_id"
        )
        numeric = [f"tx{tx}" for tx in sorted(txs)]

        feed = journal.events_all(limit=100)
        assert [e.session_id for e in feed] == numeric
        assert [int(e.position) >> 64 for e in feed] == sorted(txs)
        paged: list[Event] = []
        while page := journal.events_all(after=paged[-1].position if paged else None, limit=1):
            paged += page
        assert paged == feed, "one at a time, each once, in the same order"
        assert [s.session_id for s in journal.sessions()] == numeric[::-1]  # newest first
        newest_two = journal.sessions(limit=2)
        rest = journal.sessions(cursor=newest_two[-1].last_position)
        assert [s.session_id for s in newest_two + rest] == numeric[::-1]
        assert [s.session_id for s in journal.open_turns()] == numeric  # oldest first


def test_control_a_naive_identity_feed_misses_an_event_the_journals_feed_delivers(
    schema: str,
) -> None:
    """The gap test's hazard, made deterministic with two raw transactions: T1 inserts event N
    and stays open; T2 inserts N+1 and commits. The naive reader reads N+1 and resumes after it;
    T1 commits; the naive reader never sees N. The journal's feed returned nothing while T1 was
    open (N+1 sorts after T1's events, not before), and returns N then N+1 once it commits."""
    with (
        Journal.open(url(schema)) as journal,
        closing(connect(schema)) as t1,
        closing(connect(schema)) as t2,
        closing(connect(schema)) as naive,
    ):
        first = journal.create_session("first").session_id
        second = journal.create_session("second").session_id
        cursor = settled_feed(journal, schema)[-1].position
        naive_last = max(row[0] for row in naive.execute(NAIVE_FEED, (0,)))

        with t1.transaction():
            n = raw_append(t1, first, "T1: takes N, commits last")
            with t2.transaction():
                assert raw_append(t2, second, "T2: takes N+1, commits first") == n + 1
            naive_page = [row[0] for row in naive.execute(NAIVE_FEED, (naive_last,))]
            assert naive_page == [n + 1]
            naive_last = naive_page[-1]
            assert journal.events_all(after=cursor) == [], "N+1 was given before N committed"

        # The naive reader, resumed after N+1, never sees N: the miss.
        assert naive.execute(NAIVE_FEED, (naive_last,)).fetchall() == []
        page = wait_for(lambda: journal.events_all(after=cursor), "T1's event in the feed")
        assert [event.event_id for event in page] == [n, n + 1]
        assert journal.events_all(after=page[-1].position) == []


def test_a_sessions_events_ascend_in_the_feed_when_two_instances_append_to_it(
    schema: str,
) -> None:
    """Instance A's transaction begins first (the smaller transaction id) and writes elsewhere;
    instance B's appends to session S and holds it; A then appends to S, waits for S's row, and
    commits after B. Ordered by transaction id alone, A's event (the larger seq) would come
    first in the feed; its tx is raised to B's, so the feed keeps S's seq order. Then both
    instances append to one session from four threads each, and the order holds again."""
    with private_journal(url(schema)) as a, private_journal(url(schema)) as b:
        contended = a.create_session("contended").session_id
        elsewhere = a.create_session("elsewhere").session_id
        a_began, b_inserted = threading.Event(), threading.Event()
        results: dict[str, list[Event]] = {}

        def older(tx: Any) -> list[Event]:
            events = a._append_tx(tx, elsewhere, a.prepare_batch([message("A, elsewhere")]))
            a_began.set()
            assert b_inserted.wait(WAIT)
            return events + a._append_tx(tx, contended, a.prepare_batch([message("A, in S")]))

        def younger(tx: Any) -> list[Event]:
            assert a_began.wait(WAIT)
            events = b._append_tx(tx, contended, b.prepare_batch([message("B, in S")]))
            b_inserted.set()
            wait_for(lambda: lock_waiters(schema), "A to wait for the session's row")
            return events

        thread = threading.Thread(target=lambda: results.update(a=a.storage.write(older)))
        thread.start()
        results["b"] = b.storage.write(younger)
        thread.join(WAIT)
        (a_elsewhere, a_in_s), (b_in_s,) = results["a"], results["b"]
        assert (b_in_s.seq, a_in_s.seq) == (2, 3)
        assert tx_of(a_elsewhere) < tx_of(b_in_s) == tx_of(a_in_s)

        def append(index: int) -> None:
            journal = a if index < 4 else b
            for i in range(15):
                journal.append(contended, "user_message", {"content": f"{index}/{i}"})

        run_threads(8, append)
        in_feed = [e.seq for e in settled_feed(b, schema) if e.session_id == contended]
        assert in_feed == list(range(1, 124))


def tx_of(event: Event) -> int:
    """The transaction part of an event's position (see postgres_rows)."""
    return int(event.position) >> 64


def message(content: str) -> dict[str, Any]:
    return {"type": "user_message", "payload": {"content": content}}


def lock_waiters(schema: str) -> int:
    with psycopg.connect(ADMIN_URL, autocommit=True) as admin:
        row = admin.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s"
            " AND wait_event_type = 'Lock'",
            (schema,),
        ).fetchone()
    return int(row[0]) if row else 0


# -- tenants ----------------------------------------------------------------------------------


def test_row_level_security_shows_a_tenant_only_its_rows_whatever_the_query(schema: str) -> None:
    """Rows made through for_tenant('a') and ('b'); raw `SELECT * FROM <table>` with no WHERE,
    as the application's ordinary role: scoped to 'a' it sees a's rows only, unscoped nothing."""
    with Journal.open(url(schema)) as journal:
        for tenant in ("a", "b"):
            scoped = journal.for_tenant(tenant)
            sid = scoped.create_session(f"{tenant}'s").session_id
            scoped.append(sid, "user_message", {"content": f"hello from {tenant}"})
            call = {"call_id": f"call_{tenant}", "name": "lookup", "arguments": "{}"}
            scoped.append(sid, "tool_call", call)
            scoped.create_task(sid, "job", {"for": tenant})
            ApiKeys(journal.storage).create(tenant, label=tenant)
            scoped.purge_session(scoped.create_session("to purge").session_id)

    for tenant in ("a", "b"):
        with closing(connect(schema, tenant)) as conn:
            for table in TENANT_TABLES:
                assert tenants_seen(conn, table) == {tenant}, table
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                conn.execute(
                    "INSERT INTO sessions (session_id, tenant, created_at, updated_at)"
                    " VALUES ('sess_intruder', %s, 0, 0)",
                    ("b" if tenant == "a" else "a",),
                )
    for scope in (None, "", "c"):
        with closing(connect(schema, scope)) as conn:
            for table in TENANT_TABLES:
                query = sql.SQL("SELECT * FROM {}").format(sql.Identifier(table))
                assert conn.execute(query).fetchall() == [], (scope, table)
    with closing(connect(schema, "*")) as conn:
        assert {row[0] for row in conn.execute("SELECT tenant FROM events")} == {"a", "b"}


def tenants_seen(conn: psycopg.Connection, table: str) -> set[str]:
    """The tenants of the rows `SELECT * FROM table` (no WHERE) returns."""
    cursor = conn.execute(sql.SQL("SELECT * FROM {}").format(sql.Identifier(table)))
    assert cursor.description is not None
    column = [c.name for c in cursor.description].index("tenant")
    return {row[column] for row in cursor.fetchall()}


# -- rules the database enforces --------------------------------------------------------------


@pytest.mark.parametrize("who", ["app role", "owner", "superuser"])
def test_events_cannot_be_updated_deleted_or_truncated(schema: str, who: str) -> None:
    """The triggers stop even the owner and a superuser; the application role is not granted
    UPDATE or TRUNCATE at all, and its DELETE meets the trigger."""
    with Journal.open(url(schema)) as journal:
        sid = journal.create_session("kept").session_id
        journal.append(sid, "user_message", {"content": "forever"})
    with closing(connect(schema, admin=who == "superuser", owner=who == "owner")) as conn:
        for statement in (
            'UPDATE events SET payload = \'{"content": "rewritten"}\'',
            "DELETE FROM events",
            "TRUNCATE events CASCADE",
        ):
            refused: type[psycopg.Error] = psycopg.errors.RestrictViolation
            if who == "app role" and not statement.startswith("DELETE"):
                refused = psycopg.errors.InsufficientPrivilege
            with pytest.raises(refused, match=r"append-only|permission denied"):
                conn.execute(statement)
        assert conn.execute("SELECT count(*) FROM events").fetchone() == (2,)
        # A DELETE passes only inside a purge, whose audit row must be settled before COMMIT.
        conn.execute("BEGIN")
        conn.execute(
            "INSERT INTO purge_audit (tenant, session_id, purged_by, purged_at, event_count,"
            " pending) VALUES ('default', %s, 'intruder', 0, 2, 1)",
            (sid,),
        )
        conn.execute("DELETE FROM events")
        with pytest.raises(psycopg.errors.ForeignKeyViolation):
            conn.execute("COMMIT")
        assert conn.execute("SELECT count(*) FROM events").fetchone() == (2,)


def test_the_database_refuses_duplicates_and_orphans(schema: str) -> None:
    with Journal.open(url(schema)) as journal:
        sid = journal.create_session("one", idempotency_key="session-key").session_id
        journal.append(sid, "user_message", {"content": "hi"}, idempotency_key="k1")
        other = journal.for_tenant("other").create_session("another tenant's").session_id
        with closing(connect(schema)) as conn:
            insert = (
                "INSERT INTO events (tenant, session_id, seq, type, payload, idempotency_key,"
                " created_at) VALUES (%s, %s, %s, 'user_message', '{\"content\": \"x\"}', %s, 0)"
            )
            with pytest.raises(psycopg.errors.UniqueViolation, match="seq"):
                conn.execute(insert, ("default", sid, 2, None))
            with pytest.raises(psycopg.errors.UniqueViolation, match="idempotency"):
                conn.execute(insert, ("default", sid, 3, "k1"))
            with pytest.raises(psycopg.errors.ForeignKeyViolation):
                conn.execute(insert, ("default", "sess_nowhere", 1, None))
            with pytest.raises(psycopg.errors.ForeignKeyViolation):
                conn.execute(insert, ("default", other, 2, None))  # another tenant's session
            with pytest.raises(psycopg.errors.UniqueViolation):
                conn.execute(
                    "INSERT INTO sessions (session_id, tenant, created_at, updated_at,"
                    " idempotency_key) VALUES ('sess_twin', 'default', 0, 0, 'session-key')"
                )
            for table in ("messages", "tool_calls", "tasks"):
                columns = {
                    "messages": "(session_id, tenant, seq, role, content, tokens, created_at)"
                    " VALUES ('sess_nowhere', 'default', 1, 'user', 'x', 1, 0)",
                    "tool_calls": "(session_id, tenant, call_id, name, arguments, call_seq)"
                    " VALUES ('sess_nowhere', 'default', 'c', 'n', '{}', 1)",
                    "tasks": "(task_id, tenant, session_id, type, input, max_retries,"
                    " created_seq, created_at, updated_at)"
                    " VALUES ('t', 'default', 'sess_nowhere', 'job', 'null', 0, 1, 0, 0)",
                }[table]
                with pytest.raises(psycopg.errors.ForeignKeyViolation):
                    conn.execute(f"INSERT INTO {table} {columns}")
            assert conn.execute("SELECT count(*) FROM events").fetchone() == (3,)

        # A race the rules could not see, caught by the database: reported as a Conflict.
        duplicate = EventRow("default", sid, 2, journal.prepare_batch([message("twin")])[0], 0)
        with pytest.raises(Conflict, match="refused"):
            journal.storage.write(lambda tx: tx.insert_events([duplicate]))
        assert [e.seq for e in journal.events(sid)] == [1, 2]


def test_purge_leaves_only_the_audit_row(schema: str) -> None:
    with Journal.open(url(schema)) as journal:
        sid = journal.create_session("secret").session_id
        journal.append(sid, "user_message", {"content": "my card number"})
        journal.append(sid, "tool_call", {"call_id": "c1", "name": "pay", "arguments": "{}"})
        journal.create_task(sid, "job")
        kept = journal.create_session("kept").session_id
        assert journal.purge_session(sid, actor="dpo") == 4
    with closing(connect(schema)) as conn:
        for table in ("sessions", "events", "messages", "tool_calls", "tasks"):
            query = sql.SQL("SELECT session_id FROM {}").format(sql.Identifier(table))
            assert {row[0] for row in conn.execute(query)} <= {kept}, table
        audit = conn.execute(
            "SELECT session_id, purged_by, event_count, pending FROM purge_audit"
        ).fetchall()
        assert audit == [(sid, "dpo", 4, None)]
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute("DELETE FROM purge_audit")  # the application role may not
    with (
        closing(connect(schema, owner=True)) as conn,
        pytest.raises(psycopg.errors.RestrictViolation),
    ):
        conn.execute("DELETE FROM purge_audit")  # the owner may, and the trigger stops it


# -- failures ---------------------------------------------------------------------------------


def test_lost_connections_are_replaced_and_writes_retried_without_doubles(schema: str) -> None:
    """Every server connection of the journal is terminated (the pool's and the LISTEN one);
    reads and appends that follow, from one thread and from several, succeed on fresh
    connections, and each append is stored exactly once."""
    with Journal.open(url(schema)) as journal:
        sid = journal.create_session("through failover").session_id
        run_threads(6, lambda i: [journal.events(sid) for _ in range(5)])  # grow the pool
        before = kill_connections(schema)
        assert len(before) >= 2

        assert [e.seq for e in journal.events(sid)] == [1]
        journal.append(sid, "user_message", {"content": "after kill 0"})
        assert backend_pids(schema).isdisjoint(before)

        kill_connections(schema)

        def work(i: int) -> None:
            journal.append(sid, "user_message", {"content": f"after kill {i + 1}"})
            journal.events(sid)

        run_threads(4, work)
        kill_connections(schema)
        contents = [e.payload.get("content") for e in journal.events(sid)]
        assert sorted(contents[1:]) == [f"after kill {i}" for i in range(5)]
        assert [e.seq for e in journal.events(sid)] == [1, 2, 3, 4, 5, 6]
        assert journal.verify().ok


def run_threads(count: int, body: Callable[[int], Any]) -> None:
    errors: list[BaseException] = []

    def run(index: int) -> None:
        try:
            body(index)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(WAIT)
    assert not errors, errors


KILL_AT_COMMIT = """
CREATE SEQUENCE commit_attempts;
CREATE FUNCTION kill_at_commit() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM nextval('commit_attempts');  -- not transactional: counts every attempt
    PERFORM pg_terminate_backend(pg_backend_pid());
    PERFORM pg_sleep(10);  -- the termination lands here, inside COMMIT
    RETURN NULL;
END $$;
CREATE CONSTRAINT TRIGGER kill_at_commit AFTER INSERT ON events
    DEFERRABLE INITIALLY DEFERRED FOR EACH ROW
    WHEN (NEW.payload LIKE '%kill-at-commit%') EXECUTE FUNCTION kill_at_commit();
"""
# The trigger runs as the role that commits, the application's, which owns nothing.
KILL_AT_COMMIT += f"GRANT USAGE, SELECT ON SEQUENCE commit_attempts TO {ROLE};"


def test_a_connection_lost_during_commit_is_reported_never_retried(schema: str) -> None:
    """A deferred trigger kills the server process while COMMIT runs: the client cannot know
    whether the commit landed, so the append raises CommitUnknown (a StorageError) after exactly
    one attempt, instead of running again and perhaps writing the event twice."""
    with Journal.open(url(schema)) as journal:
        sid = journal.create_session("doomed commit").session_id
        with closing(connect(schema, owner=True)) as conn:
            conn.execute(KILL_AT_COMMIT)
        with pytest.raises(StorageError, match="may or may not") as caught:
            journal.append(sid, "user_message", {"content": "kill-at-commit"})
        assert isinstance(caught.value, CommitUnknown)
        with closing(connect(schema)) as conn:
            attempts = conn.execute("SELECT last_value, is_called FROM commit_attempts")
            assert attempts.fetchone() == (1, True), "the commit was attempted again"
            marked = conn.execute("SELECT count(*) FROM events WHERE payload LIKE '%kill-at%'")
            assert marked.fetchone() == (0,)  # this trigger kills before the commit: rolled back
        after = journal.append(sid, "user_message", {"content": "the journal carries on"})
        assert after.seq == 2
        assert [e.seq for e in journal.events(sid)] == [1, 2]


# -- poolers ----------------------------------------------------------------------------------


def prepared_after_workload(journal: Journal) -> list[str]:
    """Run the same statements many times, then list what the server has prepared on the
    journal's connection (pool_size=1: there is only one)."""
    sid = journal.create_session("workload").session_id
    for i in range(8):
        journal.append(sid, "user_message", {"content": f"m{i}"})
        journal.events(sid)
        journal.events_all()
        journal.get_session(sid)
    storage: Any = journal.storage
    with storage._pool.connection() as conn:
        return [row[0] for row in conn.execute("SELECT statement FROM pg_prepared_statements")]


def listeners(schema: str) -> int:
    with psycopg.connect(ADMIN_URL, autocommit=True) as admin:
        row = admin.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s"
            " AND query LIKE 'LISTEN%%'",
            (schema,),
        ).fetchone()
    return int(row[0]) if row else 0


def test_transaction_pooler_mode_prepares_nothing_listens_nowhere_and_still_streams(
    schema: str,
) -> None:
    with Journal.open(url(schema, pooler="transaction", pool_size="1")) as pooled:
        assert prepared_after_workload(pooled) == []
        assert listeners(schema) == 0
    with Journal.open(url(schema, pool_size="1")) as direct:  # the control: psycopg prepares
        assert prepared_after_workload(direct) != []
        wait_for(lambda: listeners(schema) == 1, "the LISTEN connection of session mode")

    pooler_url = url(schema, pooler="transaction")
    with private_journal(pooler_url) as reader, private_journal(pooler_url) as writer:
        sid = writer.create_session("polled").session_id
        cursor = settled_feed(reader, schema)[-1].position
        got: dict[str, list[Event]] = {}

        def stream(name: str, events: Iterator[Event]) -> None:
            got[name] = list(islice(events, 3))

        threads = [
            threading.Thread(
                target=stream, args=("all", reader.subscribe_all(after=cursor, poll_interval=0.05))
            ),
            threading.Thread(
                target=stream, args=("one", reader.subscribe(sid, after=1, poll_interval=0.05))
            ),
        ]
        for thread in threads:
            thread.start()
        written = [writer.append(sid, "user_message", {"content": f"m{i}"}) for i in range(3)]
        for thread in threads:
            thread.join(WAIT)
        assert got == {"all": written, "one": written}


# -- several instances ------------------------------------------------------------------------


@pytest.mark.slow
def test_instances_opening_one_fresh_schema_together_migrate_it_once(new_schema: str) -> None:
    """Four processes open a schema that does not exist yet, all at once. To make them meet
    every time, the migration lock is held meanwhile (as by an instance migrating slowly) until
    all four wait; then they go: the schema is created and migrated once, and all four open.
    They connect as the schema's owner: the application role may create nothing."""
    schema = new_schema
    lock = "SELECT {}(hashtext('agentjournal:' || %s))"
    with (
        psycopg.connect(ADMIN_URL, autocommit=True) as holder,
        Workers(*[["recover", url(schema, owner=True)] for _ in range(4)]) as workers,
    ):
        holder.execute(lock.format("pg_advisory_lock"), (schema,))
        assert workers.lines() == ["started"] * 4
        workers.release()
        wait_for(lambda: lock_waiters(schema) == 4, "the four instances to wait")
        holder.execute(lock.format("pg_advisory_unlock"), (schema,))
        assert workers.lines() == ["opened"] * 4
        workers.release()
        for report in workers.results():
            assert report == {"requeued": [], "failed": [], "errors": []}
    with closing(connect(schema, owner=True)) as conn:
        versions = conn.execute("SELECT version FROM agentjournal_schema ORDER BY 1").fetchall()
        assert versions == [(n,) for n in range(1, len(postgres._migrations()) + 1)]


@pytest.mark.slow
def test_instances_recovering_together_settle_each_expired_lease_once(schema: str) -> None:
    """Tasks of three tenants, claimed under a short lease that then expires; four processes
    open the journal at once and call recover(all_tenants=True) at once: every expired task is
    requeued by exactly one of them, with exactly one task_failed event."""
    with Journal.open(url(schema)) as journal:
        tasks: dict[str, tuple[str, str]] = {}  # task_id -> (tenant, session_id)
        for tenant in ("default", "a", "b"):
            scoped = journal.for_tenant(tenant)
            sid = scoped.create_session("work").session_id
            for i in range(8):
                tasks[scoped.create_task(sid, "job", {"n": i}).task_id] = (tenant, sid)
            while scoped.claim_task("doomed worker", lease_seconds=1.0):
                pass
        running = {
            task.task_id: task.lease_expires_at
            for tenant in ("default", "a", "b")
            for task in journal.for_tenant(tenant).tasks(status="running")
        }
        assert set(running) == set(tasks)
        with Workers(*[["recover", url(schema)] for _ in range(4)]) as workers:
            assert workers.lines() == ["started"] * 4
            workers.release()
            assert workers.lines() == ["opened"] * 4
            expiry = max(v for v in running.values() if v is not None)
            wait_for(lambda: time.time() * 1000 > expiry + 50, "the leases to expire")
            workers.release()
            reports = workers.results()
        assert all(report["errors"] == [] and report["failed"] == [] for report in reports)
        requeued = Counter(task_id for report in reports for task_id in report["requeued"])
        assert requeued == dict.fromkeys(tasks, 1)
        for task_id, (tenant, sid) in tasks.items():
            scoped = journal.for_tenant(tenant)
            assert scoped.get_task(task_id).status == "pending"
            kinds = Counter(
                e.type
                for e in scoped.events(sid, limit=1000)
                if e.payload.get("task_id") == task_id
            )
            assert kinds == {"task_created": 1, "task_started": 1, "task_failed": 1}


@pytest.mark.slow
def test_claimers_in_two_instances_never_share_a_task(schema: str) -> None:
    """100 tasks in ten sessions; two processes of four claiming threads each, released
    together: every task is claimed once (SKIP LOCKED passes over the rows other claimers hold),
    and completed."""
    with Journal.open(url(schema)) as journal:
        sessions = [journal.create_session(f"queue {i}").session_id for i in range(10)]
        task_ids = {
            journal.create_task(sessions[i % 10], "job", {"n": i}).task_id for i in range(100)
        }
        with Workers(*[["claim", url(schema), name] for name in ("p1", "p2")]) as workers:
            assert workers.lines() == ["ready"] * 2
            workers.release()
            reports = workers.results()
        assert all(report["errors"] == [] for report in reports)
        claims = [claim for report in reports for claim in report["claims"]]
        assert Counter(task_id for task_id, _, _ in claims) == dict.fromkeys(task_ids, 1)
        assert {attempt for _, attempt, _ in claims} == {1}
        assert all(report["claims"] for report in reports), "one process did all the work"
        assert {task.status for task in journal.tasks(limit=1000)} == {"completed"}
        started = Counter(
            e.payload["task_id"]
            for sid in sessions
            for e in journal.events(sid, limit=1000)
            if e.type == "task_started"
        )
        assert started == dict.fromkeys(task_ids, 1)


def test_an_idempotent_create_that_loses_the_race_at_the_unique_key_returns_the_winner(
    schema: str,
) -> None:
    """The narrow end of two processes creating one session with one key: the winner's row is
    not committed yet when the loser looks for it (by key, then by id), so the loser inserts
    too and waits on the winner's lock; when the winner commits, the database refuses the
    loser's row. The backend runs the write again, and the journal's rules now find the
    winner's session, the repeat that it is. Here the winner is a raw transaction held open,
    so the order is fixed."""
    with Journal.open(url(schema)) as journal, closing(connect(schema)) as winner:
        winner.execute("BEGIN")
        winner.execute(
            "INSERT INTO sessions (session_id, tenant, title, created_at, updated_at,"
            " idempotency_key) VALUES ('s', 'default', 'same', 1, 1, 'k')"
        )
        winner.execute(
            "INSERT INTO events (tenant, session_id, seq, type, payload, idempotency_key,"
            " created_at) VALUES ('default', 's', 1, 'session_created', %s, 'k', 1)",
            (json.dumps({"title": "same"}),),
        )
        outcome: list[Any] = []
        loser = threading.Thread(
            target=lambda: outcome.append(
                journal.create_session_ex("same", session_id="s", idempotency_key="k")
            )
        )
        loser.start()
        with closing(connect(schema)) as watch:
            waiting = "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
            deadline = time.monotonic() + 30
            while not watch.execute(waiting).fetchone()[0]:  # type: ignore[index]
                assert time.monotonic() < deadline, "the loser never waited on the winner"
                time.sleep(0.01)
        winner.execute("COMMIT")
        loser.join(30)
        [(session, created)] = outcome
        assert (session.session_id, session.title, created) == ("s", "same", False)
        assert [e.type for e in journal.events("s")] == ["session_created"]


def test_a_commit_is_marked_settled_only_when_the_feed_shows_it_at_once(schema: str) -> None:
    """A commit's notification says SETTLED only if no transaction older than its tx was running
    (listeners then skip asking the server): not while an older transaction is open, and when it
    does, a snapshot taken on receipt already shows the position. Unknown payloads wake anyway."""
    assert _notified("") == (0, False)
    assert _notified("not a position" + SETTLED) == (0, False)
    assert _notified(f"{7 << 64 | 3}{SETTLED}") == (7, True)
    assert _notified(f"{7 << 64 | 3}") == (7, False)
    with (
        Journal.open(url(schema)) as journal,
        closing(connect(schema)) as listener,
        closing(connect(schema)) as older,
    ):
        assert isinstance(journal.storage, PostgresStorage)
        listener.execute(sql.SQL("LISTEN {}").format(sql.Identifier(journal.storage.channel)))
        sid = journal.create_session("settled").session_id
        older.execute("BEGIN")
        older.execute("SELECT pg_current_xact_id()")  # an id older than the next append's
        held = journal.append(sid, "user_message", {"content": "behind an older transaction"})
        older.execute("COMMIT")
        appended = [journal.append(sid, "user_message", {"content": f"#{n}"}) for n in range(3)]
        positions = [held.position] + [e.position for e in appended]
        payloads: dict[str, str] = {}
        for note in listener.notifies(timeout=10.0):
            payloads[note.payload.removesuffix(SETTLED)] = note.payload
            if note.payload.removesuffix(SETTLED) == positions[-1]:
                break
        assert payloads[held.position] == held.position, "an older transaction was running"
        for payload, sent in payloads.items():
            if sent.endswith(SETTLED):  # all transactions up to its tx have ended for good
                tx = decode_position(payload)[0]
                row = older.execute(
                    "SELECT pg_snapshot_xmin(pg_current_snapshot()) > %s::text::xid8", (str(tx),)
                ).fetchone()
                assert row == (True,), "settled, yet an older transaction may still be running"
        assert [e.position for e in settled_feed(journal, schema)][-4:] == positions
