"""Keeping the `-wal` file bounded under sustained writes.

SQLite's automatic checkpoint (PASSIVE, after a commit that leaves 1,000 pages in the WAL) copies
pages back into the database but rewinds the WAL only when no reader is still using it; readers
that keep overlapping (SSE subscribers, pollers, an export) can stop it from ever rewinding, and
the file grows to gigabytes; and a large transaction (an import) leaves a WAL as large as itself.
So the writer checks the file's size after each commit (one stat, under a microsecond beside a
commit's fsyncs) and, past the limit, runs a TRUNCATE checkpoint: it waits briefly for the
readers of old snapshots (new readers read the database file once everything is copied back),
then empties the WAL. If one holds on (a long read transaction: no checkpoint can pass its
snapshot), it gives up and tries again later, backing off from a tenth of a second to 8 seconds,
so a commit waits at most a few such waits, and rarely. A reader that begins again the moment it
ends can take back the lock a checkpoint is waiting for, so a try can fail with only short
readers about; one that got further than the last is tried again at once (measured in
bench/wal_bench.py, "overlapping reads"). `journal_size_limit` makes SQLite's own rewinds shrink
the file as well.
"""

from __future__ import annotations

import logging
import os
import sqlite3
import time
from dataclasses import dataclass
from typing import Final

__all__ = ["DEFAULT_WAL_LIMIT_BYTES", "WalLimit"]

log = logging.getLogger("agentjournal.sqlite")

DEFAULT_WAL_LIMIT_BYTES: Final = 32 * 1024 * 1024
CHECKPOINT_WAIT_MS: Final = 100
FIRST_BACKOFF_S: Final = 0.1
MAX_BACKOFF_S: Final = 8.0
TRIES: Final = 3  # at once, while each gets further than the last


@dataclass(slots=True)
class WalStats:
    checkpoints: int = 0  # TRUNCATE checkpoints that emptied the WAL
    busy: int = 0  # ones that gave up because a reader held on


class WalLimit:
    """Run by the writer connection after its commits (it alone writes, so no lock is needed)."""

    def __init__(
        self,
        database_path: str,
        limit_bytes: int,
        *,
        busy_timeout_ms: int,
    ) -> None:
        self.wal_path = database_path + "-wal"
        self.limit_bytes = limit_bytes
        self.busy_timeout_ms = busy_timeout_ms
        self.stats = WalStats()
        self._backoff = 0.0
        self._not_before = 0.0
        self._stuck_at: int | None = None  # frames a failed try had copied back

    def configure(self, conn: sqlite3.Connection) -> None:
        conn.execute(f"PRAGMA journal_size_limit = {self.limit_bytes}")

    def after_commit(self, conn: sqlite3.Connection) -> None:
        """Called after each commit that has happened: a failure here is logged, never the
        commit's."""
        try:
            size = os.stat(self.wal_path).st_size
        except FileNotFoundError:
            return
        except OSError as exc:
            log.warning("cannot read the size of %s: %s", self.wal_path, exc)
            return
        if size <= self.limit_bytes or time.monotonic() < self._not_before:
            return
        try:
            emptied = self.truncate(conn)
        except sqlite3.Error as exc:
            log.warning("could not empty %s: %s", self.wal_path, exc)
            emptied = False
        if emptied:
            self._backoff = 0.0
        else:
            self._backoff = min(MAX_BACKOFF_S, self._backoff * 2 or FIRST_BACKOFF_S)
            self._not_before = time.monotonic() + self._backoff

    def truncate(self, conn: sqlite3.Connection) -> bool:
        """Checkpoint and empty the WAL; False if a reader kept it from finishing in time."""
        conn.execute(f"PRAGMA busy_timeout = {CHECKPOINT_WAIT_MS}")
        try:
            for _ in range(TRIES):
                busy, copied = self._checkpoint(conn)
                # A try that got further than the last one was held up by readers that have
                # moved on since (they overlap, and one retakes the lock the checkpoint waits
                # for): try again at once. Stuck at the same frame, a reader's snapshot pins it
                # (a long read): back off.
                if not busy or copied == self._stuck_at:
                    break
                self._stuck_at = copied
        finally:
            conn.execute(f"PRAGMA busy_timeout = {self.busy_timeout_ms}")
        if busy:
            self.stats.busy += 1
            return False
        self._stuck_at = None
        self.stats.checkpoints += 1
        return True

    @staticmethod
    def _checkpoint(conn: sqlite3.Connection) -> tuple[bool, int]:
        """(busy, frames copied back into the database), as `wal_checkpoint` reports them."""
        try:
            busy, _, copied = conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
        except sqlite3.OperationalError:
            return True, -1
        return bool(busy), copied
