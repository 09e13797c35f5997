"""A look into a database without opening it as a journal: nothing created, nothing migrated.

`serve` asks whether any API key exists before it opens the journal, so that refusing to bind a
public interface without keys leaves the database as it found it (opening creates a SQLite file,
a PostgreSQL schema, and runs migrations)."""

from __future__ import annotations

import sqlite3
from contextlib import closing
from pathlib import Path

from agentjournal.backends.urls import sqlite_file
from agentjournal.errors import InvalidArgument, StorageError

__all__ = ["active_keys_exist"]

_ACTIVE_KEY = "SELECT 1 FROM api_keys WHERE revoked_at IS NULL LIMIT 1"


def active_keys_exist(url: str | Path) -> bool:
    """Whether the database at `url` holds an unrevoked API key; False for a database that does
    not exist yet or was never given a key table. Reads only."""
    path = sqlite_file(url)
    if path is None:
        return _postgres(str(url))
    if not path.is_file():
        return False
    try:
        with closing(sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)) as conn:
            (tables,) = conn.execute(
                "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'api_keys'"
            ).fetchone()
            return bool(tables) and conn.execute(_ACTIVE_KEY).fetchone() is not None
    except sqlite3.Error as exc:
        raise StorageError(f"cannot read {str(path)!r}: {exc}") from exc


def _postgres(url: str) -> bool:
    try:
        import psycopg
        from psycopg import sql

        from agentjournal.backends.postgres import parse_url
    except ImportError as exc:
        raise InvalidArgument(
            f"the PostgreSQL backend needs psycopg: pip install 'agentjournal[postgres]' ({exc})"
        ) from exc
    conninfo, options = parse_url(url)
    try:
        with psycopg.connect(conninfo, autocommit=True, connect_timeout=10) as conn:
            if "schema" in options:
                conn.execute(
                    sql.SQL("SET search_path TO {}").format(sql.Identifier(options["schema"]))
                )
            row = conn.execute("SELECT to_regclass('api_keys')").fetchone()
            if row is None or row[0] is None:
                return False
            # Keys belong to tenants, and row-level security shows a connection only the rows
            # of its scope: '*' is every tenant's, as the journal reads keys.
            conn.execute("SELECT set_config('agentjournal.tenant', '*', false)")
            return conn.execute(_ACTIVE_KEY).fetchone() is not None
    except psycopg.Error as exc:
        raise StorageError(f"cannot read the PostgreSQL database: {exc}") from exc
