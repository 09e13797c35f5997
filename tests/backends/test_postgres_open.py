"""Opening PostgreSQL: bad URL options, server refusals, migrations once, newer schema refused."""

from __future__ import annotations

import threading
from typing import Any

import psycopg
import pytest
from psycopg import sql

from agentjournal import InvalidArgument, Journal, StorageError
from agentjournal.backends import postgres
from helpers.contract import SEED, SEED_REPLAY, msg, seed
from helpers.private import private_journal
from postgres_fixtures import (
    ADMIN_URL,
    HOST,
    ROLE,
    fresh_schema,
    owner_url_for,
    require_postgres,
    url_for,
)


@pytest.mark.parametrize(
    "options",
    [
        {"schema": "Bad"},
        {"schema": "1st"},
        {"schema": "a-b"},
        {"schema": ""},
        {"schema": "aj_ok", "pooler": "x"},
        {"schema": "aj_ok", "pool_size": "0"},
        {"schema": "aj_ok", "pool_size": "1001"},
        {"schema": "aj_ok", "pool_size": "many"},
    ],
)
def test_open_rejects_bad_postgres_options(options: dict[str, str]) -> None:
    schema = options.pop("schema")
    with pytest.raises(InvalidArgument):
        Journal.open(url_for(schema, **options))


@pytest.mark.parametrize(
    ("url", "words"),
    [
        (f"postgresql://aj_no_such_role@{HOST}?schema=aj_never", 'role "aj_no_such_role"'),
        (f"postgresql://{ROLE}@{HOST.split('/')[0]}/aj_no_such_db", 'database "aj_no_such_db"'),
    ],
)
def test_open_reports_the_servers_refusal(url: str, words: str) -> None:
    require_postgres()
    with pytest.raises(StorageError, match=f"{words} does not exist"):
        Journal.open(url)


def test_open_reports_an_unreachable_server() -> None:
    with pytest.raises(StorageError, match="port 1 failed"):
        Journal.open(f"postgresql://{ROLE}@127.0.0.1:1/test?schema=aj_never")


def schema_versions(schema: str) -> list[tuple[Any, ...]]:
    with psycopg.connect(ADMIN_URL) as conn:
        query = sql.SQL("SELECT version FROM {}.agentjournal_schema ORDER BY version")
        return conn.execute(query.format(sql.Identifier(schema))).fetchall()


def test_reopening_a_migrated_schema_migrates_nothing() -> None:
    with fresh_schema() as schema:
        with Journal.open(url_for(schema)) as journal:
            sid = seed(journal)
        versions = schema_versions(schema)
        assert versions == [(n,) for n in range(1, len(versions) + 1)]
        with Journal.open(url_for(schema, pooler="transaction", pool_size="2")) as again:
            assert again.replay(sid) == SEED_REPLAY
            assert again.verify().ok
        assert schema_versions(schema) == versions


def test_instances_opening_a_new_schema_together_migrate_it_once() -> None:
    with fresh_schema(migrated=False) as schema:
        barrier = threading.Barrier(4)
        opened: list[Journal] = []
        errors: list[BaseException] = []

        def open_() -> None:
            try:
                barrier.wait(30)
                opened.append(private_journal(owner_url_for(schema)))
            except BaseException as exc:
                errors.append(exc)

        threads = [threading.Thread(target=open_) for _ in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
        try:
            assert errors == []
            assert len(opened) == 4
            sid = seed(opened[0])
            assert all(j.replay(sid) == SEED_REPLAY for j in opened)
        finally:
            for journal in opened:
                journal.close()
        versions = schema_versions(schema)
        assert versions == [(n,) for n in range(1, len(versions) + 1)]


def test_open_refuses_a_schema_newer_than_it_knows() -> None:
    with fresh_schema() as schema:
        Journal.open(url_for(schema)).close()
        known = len(schema_versions(schema))
        with psycopg.connect(ADMIN_URL) as conn:
            insert = sql.SQL("INSERT INTO {}.agentjournal_schema (version) VALUES (%s)")
            conn.execute(insert.format(sql.Identifier(schema)), (known + 1,))
        with pytest.raises(StorageError, match=f"schema version {known + 1}, newer"):
            Journal.open(url_for(schema))
        # The refusal changed nothing: the next open refuses alike.
        assert schema_versions(schema)[-1] == (known + 1,)
        with pytest.raises(StorageError, match="upgrade agentjournal"):
            Journal.open(url_for(schema))


def test_a_version_2_schema_upgrades_and_checks_events_once_per_statement(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A schema written by a version-2 agentjournal (tx set row by row, a foreign key per event)
    opens, migrates and goes on; from then on the writer sends each event's tx and the statement
    trigger checks it: a wrong one, a missing session or another tenant's session is refused, a
    row without tx still gets it from the row trigger, and a correction (a "supersedes" key, even
    spelled with a JSON escape) leaves the open turn as it was. A session with events can be
    neither deleted nor re-keyed, as under the foreign key."""
    every = postgres._migrations()
    with fresh_schema(migrated=False) as schema:
        monkeypatch.setattr(postgres, "_migrations", lambda: every[:2])
        with Journal.open(owner_url_for(schema)) as old:
            sid = seed(old)
            other = old.for_tenant("b").create_session("b's").session_id
        assert schema_versions(schema) == [(1,), (2,)]
        monkeypatch.setattr(postgres, "_migrations", lambda: every)
        with Journal.open(owner_url_for(schema)) as journal:
            assert schema_versions(schema) == [(n,) for n in range(1, len(every) + 1)]
            assert journal.replay(sid) == SEED_REPLAY
            journal.append_many(sid, [msg("user_message", "again"), msg("assistant_message", "ok")])
            assert journal.get_session(sid).last_seq == len(SEED) + 3
            assert not journal.get_session(sid).turn_open
            assert journal.verify().ok
            feed = journal.events_all(limit=100)
            assert [int(e.position) for e in feed] == sorted(int(e.position) for e in feed)

            with psycopg.connect(ADMIN_URL, autocommit=True) as conn:
                conn.execute(sql.SQL("SET search_path TO {}").format(sql.Identifier(schema)))
                insert = (
                    "INSERT INTO events (tenant, session_id, seq, type, payload, created_at, tx)"
                    " VALUES (%s, %s, %s, 'user_message', %s, 0, %s::text::xid8)"
                )
                seq = journal.get_session(sid).last_seq
                with pytest.raises(psycopg.errors.CheckViolation, match="must take tx"):
                    conn.execute(insert, ("default", sid, seq + 1, '{"content": "x"}', "3"))
                with pytest.raises(psycopg.errors.ForeignKeyViolation):
                    conn.execute(insert, ("default", other, 2, '{"content": "x"}', None))
                with conn.transaction():
                    right = conn.execute(
                        "SELECT greatest(pg_current_xact_id(), last_tx)::text FROM sessions"
                        " WHERE session_id = %s FOR UPDATE",
                        (other,),
                    ).fetchone()
                    assert right is not None
                    with pytest.raises(psycopg.errors.ForeignKeyViolation), conn.transaction():
                        conn.execute(insert, ("default", other, 2, '{"content": "x"}', right[0]))
                    conn.execute(insert, ("b", other, 2, '{"content": "x"}', right[0]))
                for statement in (
                    "DELETE FROM sessions WHERE session_id = %s",
                    "UPDATE sessions SET tenant = 'c' WHERE session_id = %s",
                    "UPDATE sessions SET session_id = 'sess_elsewhere' WHERE session_id = %s",
                ):
                    with pytest.raises(psycopg.errors.ForeignKeyViolation, match="has events"):
                        conn.execute(statement, (other,))
                escaped = f'{{"content": "fixed", "\\u0073upersedes": {seq - 1}}}'
                conn.execute(insert, ("default", sid, seq + 1, escaped, None))
            assert not journal.get_session(sid).turn_open, "a correction is not a turn event"
            assert journal.for_tenant("b").get_session(other).last_seq == 2
            assert journal.for_tenant("b").get_session(other).turn_open
            journal.append(sid, "user_message", {"content": "and now?"})
            assert journal.get_session(sid).turn_open
            assert [e.seq for e in journal.events(sid)] == list(range(1, seq + 3))


def test_a_version_4_schema_upgrades_to_sessions_keyed_by_tenant_and_id(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Version 5 puts the tenant into every key that named a session id alone: what a version-4
    schema holds reads the same after the upgrade, and then two tenants may share an id."""
    every = postgres._migrations()
    with fresh_schema(migrated=False) as schema:
        monkeypatch.setattr(postgres, "_migrations", lambda: every[:4])
        with Journal.open(owner_url_for(schema)) as old:
            sid = seed(old)
            task = old.create_task(sid, "ship", {"n": 1})
            theirs = old.for_tenant("b").create_session("b's", session_id="b-only").session_id
            before = (old.events(sid), old.messages(sid), old.tool_calls(sid), old.tasks())
        monkeypatch.setattr(postgres, "_migrations", lambda: every)
        with Journal.open(owner_url_for(schema)) as journal:
            assert schema_versions(schema) == [(n,) for n in range(1, len(every) + 1)]
            after = (
                journal.events(sid),
                journal.messages(sid),
                journal.tool_calls(sid),
                journal.tasks(),
            )
            assert after == before
            b = journal.for_tenant("b")
            assert b.create_session("b's copy of the id", session_id=sid).tenant == "b"
            journal.create_session("default's own b-only", session_id=theirs)
            b.append(sid, "user_message", {"content": "b here"})
            journal.cancel_task(task.task_id)
            assert journal.replay(sid) == SEED_REPLAY
            assert journal.verify().ok
            assert b.verify().ok
            with psycopg.connect(ADMIN_URL) as conn:
                keys = conn.execute(
                    "SELECT conrelid::regclass::text, pg_get_constraintdef(oid) FROM pg_constraint"
                    " WHERE connamespace = %s::regnamespace AND contype = 'p'"
                    " AND conrelid::regclass::text LIKE ANY(%s)",
                    (schema, ["%sessions", "%messages", "%tool_calls"]),
                ).fetchall()
            assert sorted(definition for _, definition in keys) == [
                "PRIMARY KEY (session_id, tenant)",
                "PRIMARY KEY (session_id, tenant, call_id)",
                "PRIMARY KEY (session_id, tenant, seq)",
            ]
