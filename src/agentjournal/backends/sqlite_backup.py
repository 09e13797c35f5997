"""Online backup and restore of a SQLite journal, with SQLite's backup API.

Copying the file while the journal runs misses whatever only the `-wal` holds (a classic
SQLite pitfall) and can copy a page mid-write; the backup API reads one consistent snapshot through
SQLite's own locks. It copies in a single step: a stepped backup starts over whenever another
connection writes in between, so under sustained writes it might never finish, while one step in
WAL mode holds only a read snapshot, and writers carry on meanwhile.

A backup is written beside its destination and renamed into place once it passed
`PRAGMA integrity_check`, so a crash leaves the old file or the new one, never half of one. A
restore writes into the target through the backup API as well (a journal open on it sees the
restored content, never a torn file), after checking the backup the same way.
"""

from __future__ import annotations

import os
import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path

from agentjournal.backends.sqlite import BUSY_TIMEOUT_MS, SQLiteStorage, schema_versions
from agentjournal.errors import Conflict, InvalidArgument, StorageError

__all__ = ["CopyReport", "backup", "restore"]


@dataclass(frozen=True, slots=True)
class CopyReport:
    path: str
    bytes: int
    events: int
    sessions: int
    seconds: float


def _open_read_only(path: Path) -> sqlite3.Connection:
    if not path.is_file():
        raise InvalidArgument(f"no database at {str(path)!r}")
    try:
        conn = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True, isolation_level=None)
        conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
        _check_journal(conn, path)
    except sqlite3.DatabaseError as exc:
        raise StorageError(f"{str(path)!r} is not a readable SQLite database: {exc}") from exc
    return conn


def _check_journal(conn: sqlite3.Connection, path: Path) -> None:
    version = conn.execute("PRAGMA user_version").fetchone()[0]
    tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    if version == 0 or "events" not in tables:
        raise InvalidArgument(f"{str(path)!r} is not an agentjournal database")
    if version > schema_versions():
        raise StorageError(
            f"{str(path)!r} has schema version {version}; this agentjournal knows up to"
            f" {schema_versions()}: upgrade agentjournal first"
        )


def _check_integrity(conn: sqlite3.Connection, path: Path) -> tuple[int, int]:
    problems = [row[0] for row in conn.execute("PRAGMA integrity_check") if row[0] != "ok"]
    if problems:
        raise StorageError(f"{str(path)!r} failed its integrity check: {'; '.join(problems[:5])}")
    events = conn.execute("SELECT count(*) FROM events").fetchone()[0]
    sessions = conn.execute("SELECT count(*) FROM sessions").fetchone()[0]
    return events, sessions


def backup(source: str | Path, destination: str | Path, *, overwrite: bool = False) -> CopyReport:
    """Copy the journal at `source` to `destination` while it runs (a consistent snapshot)."""
    source, destination = Path(source), Path(destination)
    if destination.exists() and not overwrite:
        raise Conflict(f"{str(destination)!r} exists; choose a new name or overwrite it")
    if destination.resolve() == source.resolve():
        raise InvalidArgument("the backup must go to another file than the database")
    started = time.perf_counter()
    partial = destination.with_name(f".{destination.name}.partial-{os.getpid()}")
    reader = _open_read_only(source)
    try:
        copy = sqlite3.connect(partial, isolation_level=None)
        try:
            reader.backup(copy)
            events, sessions = _check_integrity(copy, destination)
        finally:
            copy.close()  # the last connection: SQLite folds the copy's WAL into the file
        _fsync(partial)
        os.replace(partial, destination)
        _fsync(destination.parent)
    except sqlite3.Error as exc:
        raise StorageError(f"backup of {str(source)!r} failed: {exc}") from exc
    finally:
        reader.close()
        partial.unlink(missing_ok=True)
    return CopyReport(
        str(destination),
        destination.stat().st_size,
        events,
        sessions,
        time.perf_counter() - started,
    )


def restore(backup_file: str | Path, target: str | Path, *, force: bool = False) -> CopyReport:
    """Replace the journal at `target` (created if missing) with the backup's content.

    A target that holds events is replaced only with `force`: restoring is the one operation
    that removes events without a purge, so it must be asked for by name.
    """
    backup_file, target = Path(backup_file), Path(target)
    if target.exists() and target.resolve() == backup_file.resolve():
        raise InvalidArgument("the backup and the target are the same file")
    started = time.perf_counter()
    source = _open_read_only(backup_file)
    try:
        events, sessions = _check_integrity(source, backup_file)
        if target.exists() and target.stat().st_size and not force:
            held = _events_in(target)
            if held != 0:
                what = "data that is not a journal" if held is None else f"{held} events"
                raise Conflict(
                    f"{str(target)!r} holds {what}; restoring replaces it all"
                    " (stop its writers, then restore with force)"
                )
        into = sqlite3.connect(target, isolation_level=None)
        try:
            into.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
            source.backup(into)
        finally:
            into.close()
    except sqlite3.Error as exc:
        raise StorageError(f"restore into {str(target)!r} failed: {exc}") from exc
    finally:
        source.close()
    # Opening brings an older backup's schema up to date and sets WAL and the other pragmas.
    SQLiteStorage(target).close()
    return CopyReport(
        str(target), target.stat().st_size, events, sessions, time.perf_counter() - started
    )


def _events_in(path: Path) -> int | None:
    """How many events the journal at `path` holds; None if it is not one."""
    try:
        conn = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
        try:
            return int(conn.execute("SELECT count(*) FROM events").fetchone()[0])
        finally:
            conn.close()
    except sqlite3.Error:
        return None


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
