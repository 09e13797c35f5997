"""Plain SQL on a journal's database, for tests of what the database itself enforces."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from typing import Any
from urllib.parse import parse_qs, urlsplit

import psycopg
from psycopg import sql

from postgres_fixtures import ADMIN_URL


class RawSQL:
    """Plain SQL on a journal's database, as any other program could send it: a sqlite3
    connection to the SQLite file, or a PostgreSQL superuser's connection to the journal's schema
    (a superuser bypasses row-level security, which suits corrupting rows; triggers still fire).
    Statements mark their parameters with `?` on both."""

    def __init__(self, backend: str, url: str) -> None:
        self.backend = backend
        self.IntegrityError: type[Exception]  # as sqlite3 connections name it
        self._conn: Any
        if backend == "sqlite":
            self._conn = sqlite3.connect(url, isolation_level=None)
            self._conn.execute("PRAGMA busy_timeout = 10000")
            self.IntegrityError = sqlite3.IntegrityError
        else:
            schema = parse_qs(urlsplit(url).query)["schema"][0]
            self._conn = psycopg.connect(ADMIN_URL, autocommit=True)
            self._conn.execute(sql.SQL("SET search_path TO {}").format(sql.Identifier(schema)))
            self.IntegrityError = psycopg.IntegrityError

    def execute(self, statement: str, params: Sequence[Any] = ()) -> Any:
        """Run one statement (in a transaction of its own unless `begin()` opened one)."""
        if self.backend == "sqlite":
            return self._conn.execute(statement, params)
        return self._conn.execute(statement.replace("?", "%s"), params or None)

    def begin(self) -> None:
        self.execute("BEGIN IMMEDIATE" if self.backend == "sqlite" else "BEGIN")

    def commit(self) -> None:
        self.execute("COMMIT")

    def rollback(self) -> None:
        """End the open transaction, if a failed COMMIT left one (SQLite does; PostgreSQL not)."""
        if self.backend == "sqlite":
            open_ = self._conn.in_transaction
        else:
            open_ = self._conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE
        if open_:
            self.execute("ROLLBACK")

    def columns(self, table: str) -> list[str]:
        if self.backend == "sqlite":
            return [row[1] for row in self.execute(f"PRAGMA table_info({table})")]
        rows = self.execute(
            "SELECT column_name FROM information_schema.columns"
            " WHERE table_schema = current_schema() AND table_name = ? ORDER BY ordinal_position",
            (table,),
        )
        return [row[0] for row in rows]

    def close(self) -> None:
        self._conn.close()


def purge_row(session_id: str) -> tuple[Any, ...]:
    return ("default", session_id, "intruder", 1, 7)


PENDING_PURGE = (
    "INSERT INTO purge_audit (tenant, session_id, purged_by, purged_at, event_count, pending)"
    " VALUES (?, ?, ?, ?, ?, 1)"
)
