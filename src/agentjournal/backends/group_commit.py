"""Group commit: concurrent writers share one transaction, and each returns only after it committed.

LevelDB's write queue: a caller that finds no commit in progress leads; it takes everything queued
(its own request first), runs each request in a savepoint of one transaction, commits, wakes the
callers it served and hands the lead to the first caller still waiting. A lone writer therefore
commits its own request at once, with no thread hand-off and no savepoint; under contention one
commit (one fsync) acknowledges many appends. A request that raises rolls back to its savepoint and
fails alone.

`CommitSignal` tells subscribers, in threads or in asyncio tasks, that something committed.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from typing import Any, Generic, Protocol, TypeVar

from agentjournal.errors import StorageError

__all__ = ["CommitSignal", "GroupCommit", "TransactionControl"]

T = TypeVar("T")
Tx = TypeVar("Tx")


class TransactionControl(Protocol[Tx]):
    """The statements group commit needs from a connection, and the handle work receives."""

    tx: Tx

    def begin(self) -> None: ...
    def commit(self) -> None: ...
    def rollback(self) -> None: ...
    def savepoint(self) -> None: ...
    def release(self) -> None: ...
    def rollback_to_savepoint(self) -> None: ...


class _Request:
    __slots__ = ("done", "error", "lead", "result", "wake", "work")

    def __init__(self, work: Callable[[Any], Any]) -> None:
        self.work = work
        self.result: Any = None
        self.error: BaseException | None = None
        self.done = False
        self.lead = False
        self.wake: threading.Event | None = None  # made only if the caller has to wait


class GroupCommit(Generic[Tx]):
    def __init__(
        self,
        control: TransactionControl[Tx],
        on_commit: Callable[[], None],
        max_batch: int = 256,
    ) -> None:
        self._control = control
        self._on_commit = on_commit
        self._max_batch = max_batch
        self._lock = threading.Lock()
        self._queue: list[_Request] = []
        self._leading = False

    def submit(self, work: Callable[[Tx], T]) -> T:
        request = _Request(work)
        with self._lock:
            self._queue.append(request)
            if not self._leading:
                self._leading = request.lead = True
            else:
                request.wake = threading.Event()
        while True:
            if request.lead:
                request.lead = False
                self._lead()
            if request.done:
                break
            assert request.wake is not None
            request.wake.wait()
            request.wake.clear()
        if request.error is not None:
            raise request.error
        result: T = request.result
        return result

    def _lead(self) -> None:
        with self._lock:
            batch = self._queue[: self._max_batch]
            del self._queue[: self._max_batch]
        try:
            self._commit(batch)
        finally:
            with self._lock:
                if self._queue:
                    successor = self._queue[0]
                    successor.lead = True
                    if successor.wake is not None:
                        successor.wake.set()
                else:
                    self._leading = False
            for request in batch:
                request.done = True
                if request.wake is not None:
                    request.wake.set()

    def _commit(self, batch: list[_Request]) -> None:
        control = self._control
        try:
            control.begin()
        except BaseException as exc:
            for request in batch:
                request.error = exc
            return
        if len(batch) == 1:
            # The uncontended path: no savepoint, the whole transaction is the caller's.
            request = batch[0]
            try:
                request.result = request.work(control.tx)
            except BaseException as exc:
                request.error = exc
                control.rollback()
                return
        else:
            for request in batch:
                control.savepoint()
                try:
                    request.result = request.work(control.tx)
                except BaseException as exc:
                    request.error = exc
                    control.rollback_to_savepoint()
                control.release()
        try:
            control.commit()
        except BaseException as exc:
            control.rollback()
            failure = StorageError(f"commit failed, nothing of this batch was written: {exc}")
            for request in batch:
                if request.error is None:
                    request.error = failure
            return
        self._on_commit()


class CommitSignal:
    """A counter bumped after every commit this process makes; threads and coroutines wait on it."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._version = 0
        self._waiters: set[tuple[asyncio.AbstractEventLoop, asyncio.Future[None]]] = set()

    @property
    def version(self) -> int:
        return self._version

    def notify(self) -> None:
        with self._cond:
            self._version += 1
            self._cond.notify_all()
            waiters, self._waiters = self._waiters, set()
        for loop, future in waiters:
            loop.call_soon_threadsafe(_resolve, future)

    def wait(self, seen: int, timeout: float) -> int:
        with self._cond:
            self._cond.wait_for(lambda: self._version != seen, timeout)
            return self._version

    async def wait_async(self, seen: int, timeout: float) -> int:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[None] = loop.create_future()
        waiter = (loop, future)
        with self._cond:
            if self._version != seen:
                return self._version
            self._waiters.add(waiter)
        try:
            await asyncio.wait_for(future, timeout)
        except TimeoutError:
            pass
        finally:
            with self._cond:
                self._waiters.discard(waiter)
        return self._version


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)
