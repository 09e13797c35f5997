"""Opening PostgreSQL: bad URL options, server refusals, migrations once, newer schema refused."""

from __future__ import annotations

import threading
from typing import Any

import psycopg
import pytest
from psycopg import sql

from agentjournal import InvalidArgument, Journal, StorageError
from helpers.contract import SEED_REPLAY, seed
from postgres_fixtures import ADMIN_URL, HOST, ROLE, fresh_schema, require_postgres, url_for


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
    with fresh_schema() as schema:
        barrier = threading.Barrier(4)
        opened: list[Journal] = []
        errors: list[BaseException] = []

        def open_() -> None:
            try:
                barrier.wait(30)
                opened.append(Journal.open(url_for(schema)))
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
