"""Shared fixtures. `journal` is the contract fixture: every store test takes it, and every
backend agentjournal ships is a parameter of it: SQLite (a file) and PostgreSQL (a schema of the
server on 127.0.0.1:5432, see postgres_fixtures.py). `journal_url` opens the same database again,
for tests that close and reopen it or hand it to another process. `raw` is plain SQL on that
database, for the tests (contract and SQLite-only alike) that check what the database enforces."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from agentjournal import Journal
from helpers.raw_sql import RawSQL
from postgres_fixtures import fresh_schema, url_for

BACKENDS = ["sqlite", "postgres"]


@pytest.fixture(scope="session", autouse=True)
def hypothesis_unicode_tables() -> None:
    # Hypothesis builds its Unicode tables (.hypothesis/unicode_data) on first use. In a fresh
    # checkout that took 1-2 s inside the first test drawing text, whose too_slow health check
    # then failed. Build them before any test runs (not while conftest loads: Hypothesis warns
    # about storage touched during initialization).
    from hypothesis.internal.charmap import charmap, intervals_from_codec

    charmap()
    intervals_from_codec("utf-8")


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "journal.db"


@pytest.fixture
def journal_url(backend: str, db_path: Path) -> Iterator[str]:
    if backend == "sqlite":
        yield str(db_path)
        return
    with fresh_schema() as schema:
        yield url_for(schema)


@pytest.fixture
def journal(journal_url: str) -> Iterator[Journal]:
    with Journal.open(journal_url) as opened:
        yield opened


@pytest.fixture
def raw(backend: str, journal: Journal, journal_url: str) -> Iterator[RawSQL]:
    """Plain SQL on the database of the `journal` fixture, as any other program could send it."""
    conn = RawSQL(backend, journal_url)
    yield conn
    conn.close()
