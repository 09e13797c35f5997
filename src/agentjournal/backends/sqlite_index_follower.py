"""The thread that keeps the SQLite search index up with the journal, and how its writes reach
the file without making an append wait.

The index is written `BATCH` events at a time (`sqlite_search`). Building a batch's rows is
Python work and needs no lock, so the follower does it on its own thread. Storing them does need
the write lock, and a transaction of their own would cost a commit (at `full`, an fsync) that
the next append waits behind: 2-3 ms every 16 turns, the 99th percentile of a durable turn
(bench/README.md, "2026-12-06: the tail"). So the follower hands the batch over (`Handoff`),
and the next append's transaction stores it just before its COMMIT, under a savepoint (a
failure there leaves the append alone): one commit for both, and that append pays the inserts
only. If no append comes within `PATIENCE`, nobody is waiting, and the follower stores the
batch itself. FTS5's merges of the segments the batches make go the same way, a bounded step
at a time.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Final, Generic, TypeVar

__all__ = ["PATIENCE", "Handoff", "IndexFollower"]

log = logging.getLogger("agentjournal.sqlite")

W = TypeVar("W")

# How long the follower waits for an append to take its work before storing it itself.
PATIENCE: Final = 0.05


class Handoff(Generic[W]):
    """One piece of index work at a time, offered by the follower and done either inside the
    transaction of whichever append commits next (`take`, then `finish` after its COMMIT) or,
    after `PATIENCE`, by the follower itself."""

    def __init__(self, patience: float = PATIENCE) -> None:
        self.patience = patience
        self._cond = threading.Condition()
        self._offered: W | None = None
        self._taken = False
        self._result: int | None = None

    def run(self, work: W, do_itself: Callable[[W], int]) -> int | None:
        """Have `work` done, by the next committing append or else by `do_itself`; its result
        (None if the append's commit failed: the work went with it)."""
        with self._cond:
            self._offered, self._taken, self._result = work, False, None
            self._cond.wait_for(lambda: self._offered is None, self.patience)
            if self._offered is not None and not self._taken:
                self._offered = None  # taken back: no append came, so none waits on us
            else:
                self._cond.wait_for(lambda: self._offered is None)
                return self._result
        return do_itself(work)

    @property
    def pending(self) -> bool:
        """Whether work waits for an append to take it."""
        with self._cond:
            return self._offered is not None and not self._taken

    def take(self) -> W | None:
        """The writer, holding the write lock before its COMMIT: the work to do, if any."""
        if self._offered is None:  # the usual case, without the lock
            return None
        with self._cond:
            if self._offered is None or self._taken:
                return None
            self._taken = True
            return self._offered

    def finish(self, result: int | None) -> None:
        """After the COMMIT (or its failure: `result` None) of the transaction that took it."""
        with self._cond:
            self._offered, self._result = None, result
            self._cond.notify_all()


class IndexFollower:
    """A thread that runs `step` (index one batch; how many events it indexed) after each
    `wake`, again and again until a step indexes nothing, then sleeps until woken again. It is
    started by the first `wake`, so a journal that is only read never has one."""

    def __init__(self, step: Callable[[], int]) -> None:
        self._step = step
        self._cond = threading.Condition()
        self._woken = 0  # wakes asked for
        self._served = 0  # wakes whose pass has ended
        self._closed = False
        self._thread: threading.Thread | None = None

    def wake(self) -> None:
        with self._cond:
            if self._closed:
                return
            self._woken += 1
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="agentjournal-search-index", daemon=True
                )
                self._thread.start()
            self._cond.notify_all()

    def wait_idle(self, timeout: float) -> bool:
        """Wait until every wake asked for so far has been served; False on timeout."""
        with self._cond:
            goal = self._woken
            return self._cond.wait_for(lambda: self._served >= goal or self._closed, timeout)

    def close(self) -> None:
        """Stop the thread after the batch it may be storing (before the connections close)."""
        with self._cond:
            self._closed = True
            thread = self._thread
            self._cond.notify_all()
        if thread is not None:
            thread.join()

    def _run(self) -> None:
        while True:
            with self._cond:
                self._cond.wait_for(lambda: self._woken > self._served or self._closed)
                if self._closed:
                    return
                goal = self._woken
            try:
                while self._step() > 0 and not self._closed:
                    pass
            except Exception as exc:  # consistent as it is: the next wake or search catches up
                log.warning("search index left to catch up later: %s", exc)
            with self._cond:
                self._served = goal
                self._cond.notify_all()
