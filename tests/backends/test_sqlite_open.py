"""Opening SQLite files: what open refuses, connection PRAGMAs, the purge guard without FKs."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest

from agentjournal import InvalidArgument, Journal
from helpers.contract import SEED_REPLAY, seed, state
from helpers.raw_sql import PENDING_PURGE, RawSQL, purge_row


@pytest.mark.parametrize(
    "url",
    [
        ":memory:",
        "",
        "sqlite:///:memory:",
        "file::memory:?cache=shared",
    ],
)
def test_open_rejects_what_is_not_a_database_file(url: str) -> None:
    with pytest.raises(InvalidArgument):
        Journal.open(url)


@pytest.mark.parametrize(
    "url", ["mysql://h/db", "sqlite://relative.db", "postgresql+psycopg://h/d"]
)
def test_open_rejects_a_url_of_an_unsupported_scheme(
    url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    scheme = url.partition("://")[0]
    with pytest.raises(InvalidArgument, match="not supported") as raised:
        Journal.open(url)
    message = str(raised.value)
    assert f"{scheme}://" in message
    for supported in ("SQLite file path", "sqlite:///", "postgresql://"):
        assert supported in message
    assert list(tmp_path.iterdir()) == []  # no SQLite file (or folder) named like the URL


@pytest.mark.parametrize(
    ("url", "described"),
    [
        (
            "postgresql://app:s3cret@db.example:5433/agents?schema=journal",
            "PostgreSQL db.example:5433/agents, schema journal, as app",
        ),
        ("postgres://h1,h2:5433/agents", "PostgreSQL h1,h2:5433/agents"),
        (
            "postgresql:///agents?host=/run/postgresql&user=app&password=s3cret",
            "PostgreSQL /run/postgresql/agents, as app",
        ),
    ],
)
def test_describe_names_the_database_never_the_password(url: str, described: str) -> None:
    assert Journal.describe(url) == described


def test_describe_gives_a_sqlite_file_its_absolute_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    assert Journal.describe("agent.db") == f"SQLite {tmp_path.resolve() / 'agent.db'}"
    assert Journal.describe("sqlite:///agent.db") == f"SQLite {tmp_path.resolve() / 'agent.db'}"


def test_open_rejects_a_bad_durability(tmp_path: Path) -> None:
    with pytest.raises(InvalidArgument, match="durability"):
        Journal.open(tmp_path / "x.db", durability="fast")  # type: ignore[arg-type]


def test_open_rejects_a_bad_tenant(tmp_path: Path) -> None:
    with pytest.raises(InvalidArgument, match="tenant"):
        Journal.open(tmp_path / "x.db", tenant="has space")


def pragmas(conn: sqlite3.Connection) -> tuple[str, int, int]:
    return (
        conn.execute("PRAGMA journal_mode").fetchone()[0],
        conn.execute("PRAGMA synchronous").fetchone()[0],
        conn.execute("PRAGMA foreign_keys").fetchone()[0],
    )


@pytest.mark.parametrize(("durability", "synchronous"), [("full", 2), ("normal", 1)])
def test_settings_are_read_back_on_every_connection(
    tmp_path: Path, durability: Any, synchronous: int
) -> None:
    with Journal.open(f"sqlite:///{tmp_path / 'x.db'}", durability=durability) as journal:
        sid = seed(journal)
        assert journal.replay(sid) == SEED_REPLAY
        storage: Any = journal.storage
        assert storage.durability == durability
        assert pragmas(storage._writer) == ("wal", synchronous, 1)
        assert pragmas(storage._reader()) == ("wal", synchronous, 1)
    assert (tmp_path / "x.db").exists()


def test_the_fixture_journal_runs_at_full_durability(journal: Journal, backend: str) -> None:
    if backend != "sqlite":
        pytest.skip("SQLite PRAGMAs")
    storage: Any = journal.storage
    assert pragmas(storage._writer) == ("wal", 2, 1)


def test_a_connection_without_foreign_keys_cannot_open_a_purge_either(
    journal: Journal, raw: RawSQL
) -> None:
    """sqlite3 connections start with foreign_keys off; the guard must not depend on the caller
    turning it on ("There is no flag that bypasses it")."""
    if raw.backend != "sqlite":
        pytest.skip("SQLite's foreign_keys PRAGMA; PostgreSQL always checks foreign keys")
    sid = seed(journal)
    before = state(journal)
    assert raw.execute("PRAGMA foreign_keys").fetchone() == (0,)
    try:
        raw.begin()
        raw.execute(PENDING_PURGE, purge_row(sid))
        raw.commit()
    except sqlite3.DatabaseError:
        raw.rollback()
    with pytest.raises(sqlite3.DatabaseError):
        raw.execute("DELETE FROM events WHERE session_id = ?", (sid,))
    assert state(journal) == before
