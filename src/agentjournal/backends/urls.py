"""From what `Journal.open` is given to a storage: a SQLite file path or `sqlite:///path`, or a
`postgresql://` URL. Each backend is imported only when a URL names it, so SQLite users need no
PostgreSQL driver."""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Sequence
from pathlib import Path
from types import ModuleType
from typing import Literal
from urllib.parse import parse_qsl, urlsplit

from agentjournal.backends import Storage
from agentjournal.backends.shared import SharedStorages
from agentjournal.errors import InvalidArgument

__all__ = ["Durability", "describe", "migrate_storage", "open_storage", "sqlite_file"]

Durability = Literal["full", "normal"]

# Every `open_storage` of one SQLite file, or of one PostgreSQL URL, in this process gets its one
# storage (see `shared`). Two registries: a slow PostgreSQL connect never holds up a SQLite open.
SQLITE_FILES = SharedStorages()
POSTGRES_DATABASES = SharedStorages()
# Something that reads as a URL, `scheme://`: a path never starts so (a Windows drive is `C:\`).
_URL = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*)://")


def sqlite_file(url: str | Path) -> Path | None:
    """The SQLite file `url` names (a path or `sqlite:///path`); None for a PostgreSQL URL.
    `InvalidArgument` for what cannot be a journal's file."""
    target = str(url)
    if target.startswith(("postgresql://", "postgres://")):
        return None
    if target.startswith("sqlite:///"):
        target = target[len("sqlite:///") :]
    elif scheme := _URL.match(target):
        # Not a file called "mysql:" with a folder inside: a URL for a database we do not speak.
        raise InvalidArgument(
            f"{scheme[1]}:// URLs are not supported: give a SQLite file path, sqlite:///path"
            " or a postgresql:// URL"
        )
    if not target or target == ":memory:" or target.startswith("file:"):
        raise InvalidArgument(
            f"{target!r} is not a database file path: the journal needs a file (WAL mode)"
        )
    return Path(target)


def describe(url: str | Path) -> str:
    """Where `url` points, for a person to read: `SQLite /absolute/path`, or `PostgreSQL
    host:port/database` with the schema and role when the URL names them. Never the password."""
    path = sqlite_file(url)
    if path is not None:
        return f"SQLite {path.resolve()}"
    parts = urlsplit(str(url))
    query = dict(parse_qsl(parts.query))
    user, _, hosts = parts.netloc.rpartition("@")  # "user:password@host:port,host2"
    where = hosts or query.get("host") or "localhost"
    database = parts.path.lstrip("/") or query.get("dbname") or ""
    described = f"PostgreSQL {where}/{database}"
    if "schema" in query:
        described += f", schema {query['schema']}"
    role = user.partition(":")[0] or query.get("user")
    return f"{described}, as {role}" if role else described


def open_storage(
    url: str | Path, durability: Durability, *, create: bool = True, shared: bool = True
) -> tuple[Storage, Callable[[], None]]:
    """The storage at `url` and the function that lets go of it (closing it once no one else
    holds it); with `create=False`, `InvalidArgument` if it is a SQLite file that does not exist
    (a PostgreSQL database is always there: its schema is created as needed).

    A database has one storage per process and durability, whoever opens it (`shared`): a
    SQLite file by its real path, a PostgreSQL database by its URL as written (its options, the
    pool's size among them, are part of it). `shared=False` makes a storage of the caller's own,
    as a second process would have: its own writer, meeting the others at the database's locks
    (the tests that need two writers in one process use it)."""
    if durability not in ("full", "normal"):
        raise InvalidArgument(f"durability must be 'full' or 'normal', not {durability!r}")
    path = sqlite_file(url)
    if path is None:
        postgres = _postgres()

        def connect() -> Storage:
            storage: Storage = postgres.PostgresStorage(str(url), durability)
            return storage

        if not shared:
            storage = connect()
            return storage, storage.close
        return POSTGRES_DATABASES.acquire((str(url), durability), connect, lambda: None)
    if not create and not path.is_file():
        raise InvalidArgument(f"no database at {str(url)!r}")
    from agentjournal.backends.sqlite import SQLiteStorage

    if not shared:
        storage = SQLiteStorage(str(path), durability)
        return storage, storage.close
    return SQLITE_FILES.acquire(
        (os.path.realpath(path), durability),
        lambda: SQLiteStorage(str(path), durability),
        lambda: _file_identity(path),
    )


def _file_identity(path: Path) -> tuple[int, int] | None:
    """Which file `path` names now (device and inode), None if none."""
    try:
        found = path.stat()
    except OSError:
        return None
    return found.st_dev, found.st_ino


def _postgres() -> ModuleType:
    """The PostgreSQL backend, imported when a URL first names it (it needs psycopg)."""
    try:
        from agentjournal.backends import postgres
    except ImportError as exc:
        raise InvalidArgument(
            f"the PostgreSQL backend needs psycopg: pip install 'agentjournal[postgres]' ({exc})"
        ) from exc
    return postgres


def migrate_storage(url: str | Path, grant_to: Sequence[str] = ()) -> None:
    """Create or migrate the journal at `url`; on PostgreSQL, connected as the schema's owner,
    and granting each role of `grant_to` what the application needs (docs/postgres.md, Roles)."""
    if sqlite_file(url) is None:
        _postgres().migrate(str(url), grant_to)
        return
    if grant_to:
        raise InvalidArgument("roles are PostgreSQL's: a SQLite file has nothing to grant")
    _, release = open_storage(url, "full")  # SQLite migrates a file when it opens it
    release()
