"""From what `Journal.open` is given to a storage: a SQLite file path or `sqlite:///path`, or a
`postgresql://` URL. Each backend is imported only when a URL names it, so SQLite users need no
PostgreSQL driver."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from agentjournal.backends import Storage
from agentjournal.errors import InvalidArgument

__all__ = ["Durability", "open_storage"]

Durability = Literal["full", "normal"]


def open_storage(url: str | Path, durability: Durability) -> Storage:
    if durability not in ("full", "normal"):
        raise InvalidArgument(f"durability must be 'full' or 'normal', not {durability!r}")
    target = str(url)
    if target.startswith(("postgresql://", "postgres://")):
        try:
            from agentjournal.backends.postgres import PostgresStorage
        except ImportError as exc:
            raise InvalidArgument(
                f"the PostgreSQL backend needs psycopg: pip install 'agentjournal[postgres]'"
                f" ({exc})"
            ) from exc
        return PostgresStorage(target, durability)
    if target.startswith("sqlite:///"):
        target = target[len("sqlite:///") :]
    if not target or target == ":memory:" or target.startswith("file:"):
        raise InvalidArgument(
            f"{target!r} is not a database file path: the journal needs a file (WAL mode)"
        )
    from agentjournal.backends.sqlite import SQLiteStorage

    return SQLiteStorage(target, durability)
