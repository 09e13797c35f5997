"""From what `Journal.open` is given to a storage: a SQLite file path or `sqlite:///path`, or a
`postgresql://` URL. Each backend is imported only when a URL names it, so SQLite users need no
PostgreSQL driver."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Literal

from agentjournal.backends import Storage
from agentjournal.backends.shared import SharedStorages
from agentjournal.errors import InvalidArgument

__all__ = ["Durability", "migrate_storage", "open_storage", "sqlite_file"]

Durability = Literal["full", "normal"]

# Every `open_storage` of one SQLite file in this process gets its one storage (see `shared`).
SQLITE_FILES = SharedStorages()


def sqlite_file(url: str | Path) -> Path | None:
    """The SQLite file `url` names (a path or `sqlite:///path`); None for a PostgreSQL URL.
    `InvalidArgument` for what cannot be a journal's file."""
    target = str(url)
    if target.startswith(("postgresql://", "postgres://")):
        return None
    if target.startswith("sqlite:///"):
        target = target[len("sqlite:///") :]
    if not target or target == ":memory:" or target.startswith("file:"):
        raise InvalidArgument(
            f"{target!r} is not a database file path: the journal needs a file (WAL mode)"
        )
    return Path(target)


def open_storage(
    url: str | Path, durability: Durability, *, create: bool = True
) -> tuple[Storage, Callable[[], None]]:
    """The storage at `url` and the function that lets go of it (closing it once no one else
    holds it); with `create=False`, `InvalidArgument` if it is a SQLite file that does not exist
    (a PostgreSQL database is always there: its schema is created as needed).

    A SQLite file has one storage per process, whoever opens it (`shared`); each PostgreSQL
    open makes its own connection pool."""
    if durability not in ("full", "normal"):
        raise InvalidArgument(f"durability must be 'full' or 'normal', not {durability!r}")
    path = sqlite_file(url)
    if path is None:
        try:
            from agentjournal.backends.postgres import PostgresStorage
        except ImportError as exc:
            raise InvalidArgument(
                f"the PostgreSQL backend needs psycopg: pip install 'agentjournal[postgres]'"
                f" ({exc})"
            ) from exc
        storage = PostgresStorage(str(url), durability)
        return storage, storage.close
    if not create and not path.is_file():
        raise InvalidArgument(f"no database at {str(url)!r}")
    from agentjournal.backends.sqlite import SQLiteStorage

    return SQLITE_FILES.acquire(
        (os.path.realpath(path), durability), lambda: SQLiteStorage(str(path), durability)
    )


def migrate_storage(url: str | Path, grant_to: Sequence[str] = ()) -> None:
    """Create or migrate the journal at `url`; on PostgreSQL, connected as the schema's owner,
    and granting each role of `grant_to` what the application needs (docs/postgres.md, Roles)."""
    if sqlite_file(url) is None:
        try:
            from agentjournal.backends.postgres import migrate
        except ImportError as exc:
            raise InvalidArgument(
                f"the PostgreSQL backend needs psycopg: pip install 'agentjournal[postgres]'"
                f" ({exc})"
            ) from exc
        migrate(str(url), grant_to)
        return
    if grant_to:
        raise InvalidArgument("roles are PostgreSQL's: a SQLite file has nothing to grant")
    _, release = open_storage(url, "full")  # SQLite migrates a file when it opens it
    release()
