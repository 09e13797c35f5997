"""Taking turns to write one SQLite file across processes, woken the moment the writer before
lets go.

SQLite's own write lock stays the one that keeps the file correct. What it lacks is a way to
wait: a writer that finds the lock taken sleeps in the busy handler for 1, 2, 5, 10 ... ms and
tries again, so with several processes the lock sits free while they sleep, and the process that
just committed usually takes it again before they wake.

So every agentjournal writer also holds an advisory `flock` on `<database>-lock` from before its
`BEGIN IMMEDIATE` to after its `COMMIT` or `ROLLBACK`. A writer that finds it taken blocks in
the kernel and runs the moment it is released, or when its holder dies: the kernel drops the
lock with the process, so a killed writer never leaves it behind. Measured with 4 processes on
one file, this took the lock's idle time out of the hand-off (bench/README.md, "one lock file for
the writers of every process").

The wait has no timeout. Waiting in another thread to add one cost more than it saved: waking
the caller afterwards took 0.17-0.21 ms on 2 busy cores, all of it with the lock held and idle.
So a writer waits for as long as the holder's transaction lasts. A holder stopped in the middle
of a write (SIGSTOP, a debugger) keeps the others waiting until it goes on or exits, where
SQLite's busy timeout would have failed them after a minute. Writers that do not take this lock
(another program, an older agentjournal) are still kept out by SQLite's lock and its busy
timeout; they only miss the fast hand-off. Windows has no `flock`: there, writers wait in
SQLite's busy handler alone.
"""

from __future__ import annotations

import os
import sys

from agentjournal.errors import StorageError

if sys.platform != "win32":
    import fcntl

__all__ = ["WriterLock"]


class WriterLock:
    """This process's hold on the writers' lock file. One descriptor per storage: two storages
    of one process on one file take turns like two processes."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._fd: int | None = None
        if sys.platform == "win32":
            return
        try:
            # Read-only is enough for flock, and works on a lock file another user made.
            self._fd = os.open(path, os.O_RDONLY | os.O_CREAT | os.O_CLOEXEC, 0o644)
        except OSError as exc:
            raise StorageError(f"cannot open the writers' lock file {path!r}: {exc}") from exc

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
