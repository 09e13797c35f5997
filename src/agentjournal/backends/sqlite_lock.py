"""Taking turns to write one SQLite file across processes, woken the moment the writer before
lets go.

SQLite's own write lock stays the one that keeps the file correct. What it lacks is a way to
wait: a writer that finds the lock taken sleeps in the busy handler for 1, 2, 5, 10 ... ms and
tries again, so with several processes the lock sits free while they sleep, and the process that
just committed usually takes it again before they wake.

So every agentjournal writer also holds an advisory `flock` on `<database>-lock` from before its
`BEGIN IMMEDIATE` to after its `COMMIT` or `ROLLBACK`. A writer that finds it taken blocks in
the kernel and runs the moment it is released, or when its holder dies: the kernel drops the
lock with the process, so a killed writer never leaves it behind (a child made by `fork()`
opens the file anew, so it does not keep its parent's hold alive). Measured with 4 processes on
one file, this took the lock's idle time out of the hand-off (bench/README.md, "one lock file for
the writers of every process").

The wait has no timeout. Waiting in another thread to add one cost more than it saved: waking
the caller afterwards took 0.17-0.21 ms on 2 busy cores, all of it with the lock held and idle.
So a writer waits for as long as the holder's transaction lasts. A holder stopped in the middle
of a write (SIGSTOP, a debugger) keeps the others waiting until it goes on or exits, where
SQLite's busy timeout would have failed them after a minute. Writers that do not take this lock
(another program, an older agentjournal) are still kept out by SQLite's lock and its busy
timeout; they only miss the fast hand-off, as do this library's own rare writes outside group
commit (migrations on open, `checkpoint()`, `restore`). Windows has no `flock`: there, writers
wait in SQLite's busy handler alone.
"""

from __future__ import annotations

import os
import sys
import weakref

from agentjournal.errors import StorageError

if sys.platform != "win32":
    import fcntl

__all__ = ["WriterLock"]

# Every open lock of this process, so a child made by fork() can let go of its copies.
_OPEN: weakref.WeakSet[WriterLock] = weakref.WeakSet()


class WriterLock:
    """This process's hold on the writers' lock file of `database`. One descriptor per storage:
    two storages of one process on one file take turns like two processes."""

    def __init__(self, database: str) -> None:
        self.path = database + "-lock"
        self._fd: int | None = None
        if sys.platform == "win32":
            return
        try:
            # The database file's permissions (less the umask), as SQLite gives its -wal and
            # -shm; read-only is enough for flock.
            self._mode = os.stat(database).st_mode & 0o777
            self._fd = self._open()
        except OSError as exc:
            raise StorageError(f"cannot open the writers' lock file {self.path!r}: {exc}") from exc
        _OPEN.add(self)

    def _open(self) -> int:
        return os.open(self.path, os.O_RDONLY | os.O_CREAT | os.O_CLOEXEC, self._mode)

    def acquire(self) -> None:
        if sys.platform != "win32" and self._fd is not None:
            fcntl.flock(self._fd, fcntl.LOCK_EX)  # Python lets go of the GIL while this blocks

    def release(self) -> None:
        if sys.platform != "win32" and self._fd is not None:
            fcntl.flock(self._fd, fcntl.LOCK_UN)

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # and with it any hold
            self._fd = None
        _OPEN.discard(self)

    def _reopen_in_child(self) -> None:
        """After fork(): the child's copy of the descriptor shares the parent's lock (flock
        locks belong to the open file, not the process), so the parent killed in the middle of
        a write would leave it held for as long as the child lives, and the child's writes would
        count as the parent's. The child closes its copy (that lets nothing go: the parent
        still has it) and opens the file anew."""
        if self._fd is None:
            return
        os.close(self._fd)
        try:
            self._fd = self._open()
        except OSError:
            self._fd = None  # this child's writers wait in SQLite's busy handler alone


def _after_fork_in_child() -> None:
    for lock in list(_OPEN):
        lock._reopen_in_child()


if sys.platform != "win32":
    os.register_at_fork(after_in_child=_after_fork_in_child)
