"""A journal with a storage of its own: its own writer (SQLite) or connection pool (PostgreSQL),
as a second process would have. `Journal.open` shares one storage per database and process, so
the tests that need two writers of one database in one process (meeting at its locks, migrating
a schema together) open them here."""

from __future__ import annotations

from pathlib import Path

from agentjournal import Journal
from agentjournal.backends.urls import Durability, open_storage


def private_journal(
    url: str | Path, *, durability: Durability = "full", tenant: str = "default"
) -> Journal:
    """Closing it closes its storage."""
    storage, _ = open_storage(url, durability, shared=False)
    return Journal(storage, tenant=tenant)
