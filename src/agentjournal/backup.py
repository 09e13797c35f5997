"""Backups of a SQLite journal while it runs: `backup` copies one consistent snapshot of it,
`restore` writes one back. A PostgreSQL database has its own tools for this (pg_dump and
pg_restore, docs/postgres.md)."""

from __future__ import annotations

from pathlib import Path

from agentjournal.backends import sqlite_backup
from agentjournal.backends.sqlite_backup import CopyReport
from agentjournal.backends.urls import sqlite_file
from agentjournal.errors import InvalidArgument

__all__ = ["CopyReport", "backup", "restore"]


def backup(url: str | Path, destination: str | Path, *, overwrite: bool = False) -> CopyReport:
    """Copy the journal at `url` (writers may carry on) to `destination`, which must not exist
    unless `overwrite`. The copy passes SQLite's integrity check before it is renamed into place,
    so a crash leaves the old file or the new one."""
    return sqlite_backup.backup(_file(url, "backup", "pg_dump"), destination, overwrite=overwrite)


def restore(backup_file: str | Path, url: str | Path, *, force: bool = False) -> CopyReport:
    """Write a backup into the journal at `url` (created if missing); a target that holds
    events is replaced only with `force`. Stop its writers first: what they write meanwhile is
    lost."""
    return sqlite_backup.restore(backup_file, _file(url, "restore", "pg_restore"), force=force)


def _file(url: str | Path, verb: str, tool: str) -> Path:
    path = sqlite_file(url)
    if path is None:
        raise InvalidArgument(
            f"{verb} works on SQLite files; for PostgreSQL use {tool} (docs/postgres.md)"
        )
    return path
