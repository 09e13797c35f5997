"""Group commit: concurrent writers share one transaction, and each returns only after it committed.

LevelDB's write queue: a caller that finds no commit in progress leads; it takes everything queued
(its own request first), runs it in one transaction, commits, wakes the callers it served and
hands the lead to the first caller still waiting. A lone writer therefore commits its own request
at once, with no thread hand-off and no savepoint; under contention one commit (one fsync)
acknowledges many writes.

Requests that name the same group function and meet in one commit are passed to it together, so it
can serve them with a few statements in all rather than a few each (appends use this: with 16
writers on 2 cores, every statement is a GIL hand-off). A group function returns one outcome per
item — a result, or the exception that item failed with, having written nothing for it. If it
raises instead, its writes are rolled back and each item is retried alone, so one caller's bad
request never fails another's.

`CommitSignal` tells subscribers, in threads or in asyncio tasks, that something committed.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable, Sequence
from typing import Any, Generic, Protocol, TypeVar

__all__ = ["CommitSignal", "GroupCommit", "GroupWork", "TransactionControl"]

T = TypeVar("T")
I = TypeVar("I")  # noqa: E741
Tx = TypeVar("Tx")

# A group function: (transaction, items) -> one result or exception per item.
GroupWork = Callable[[Tx, Sequence[Any]], Sequence[Any]]


class TransactionControl(Protocol[Tx]):
    """The statements group commit needs from a connection, and the handle work receives."""

    tx: Tx

    def begin(self) -> None: ...
    def commit(self) -> None: ...
    def rollback(self) -> None: ...
    def savepoint(self) -> None: ...
    def release(self) -> None: ...
    def rollback_to_savepoint(self) -> None: ...
    def failed_commit(self, exc: BaseException) -> BaseException:
        """What callers whose work succeeded get when COMMIT raised `exc`."""


class _Request:
    __slots__ = ("done", "error", "item", "lead", "result", "wake", "work")

    def __init__(self, work: GroupWork[Any], item: Any) -> None:
        self.work = work
        self.item = item
        self.result: Any = None
        self.error: BaseException | None = None
        self.done = False
        self.lead = False
        self.wake: threading.Event | None = None  # made only if the caller has to wait

    def settle(self, outcome: Any) -> None:
        if isinstance(outcome, BaseException):
            self.error = outcome
        else:
            self.result = outcome


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
        """Run `work(tx)` alone (within a shared transaction) and return its result."""
        result: T = self.submit_grouped(_alone, work)
        return result

    def submit_grouped(self, work: Callable[[Tx, Sequence[I]], Sequence[Any]], item: I) -> Any:
        """Have `work(tx, items)` serve `item`, with any other items for `work` in this commit."""
        request = _Request(work, item)
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
        return request.result

    def _lead(self) -> None:
        # Begin before taking the queue: BEGIN gives up the GIL, and the callers that run
        # meanwhile queue their requests in time to join this transaction.
        try:
            self._control.begin()
        except BaseException as exc:
            began: BaseException | None = exc
        else:
            began = None
        with self._lock:
            batch = self._queue[: self._max_batch]
            del self._queue[: self._max_batch]
        try:
            if began is not None:
                for request in batch:
                    request.error = began
            else:
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
        if len(batch) == 1:
            # The uncontended path: no savepoint, the whole transaction is the caller's.
            request = batch[0]
            try:
                request.settle(request.work(control.tx, [request.item])[0])
            except BaseException as exc:
                request.error = exc
            if request.error is not None:
                control.rollback()
                return
        else:
            try:
                start = 0
                while start < len(batch):
                    end = start + 1
                    while end < len(batch) and batch[end].work is batch[start].work:
                        end += 1
                    self._run_group(batch[start:end])
                    start = end
            except BaseException as exc:
                # The transaction itself failed (a savepoint could not be set or undone): what
                # earlier groups wrote goes with it, so no caller may see a result.
                with contextlib.suppress(BaseException):
                    control.rollback()
                for request in batch:
                    request.result, request.error = None, request.error or exc
                return
        try:
            control.commit()
        except BaseException as exc:
            # A rollback that fails too must not turn the commit's failure into a success.
            with contextlib.suppress(BaseException):
                control.rollback()
            failure = control.failed_commit(exc)
            for request in batch:
                if request.error is None:
                    request.error = failure
            return
        self._on_commit()

    def _run_group(self, group: list[_Request]) -> None:
        control = self._control
        control.savepoint()
        try:
            outcomes = group[0].work(control.tx, [request.item for request in group])
        except BaseException as exc:
            control.rollback_to_savepoint()
            control.release()
            if len(group) == 1:
                group[0].error = exc
            else:
                for request in group:
                    self._run_group([request])
            return
        control.release()
        for request, outcome in zip(group, outcomes, strict=True):
            request.settle(outcome)


def _alone(tx: Any, works: Sequence[Callable[[Any], Any]]) -> list[Any]:
    # Plain work has no failure outcome of its own: if one raises, the group retries each alone.
    return [work(tx) for work in works]


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
            # A loop closed under a waiting subscriber must not fail the commit that woke it.
            with contextlib.suppress(RuntimeError):
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
            # Not asyncio.wait_for: on Python 3.11 it returns, instead of raising, when the task
            # is cancelled in the turn that resolved the future, and a cancelled reader ran on.
            async with asyncio.timeout(timeout):
                await future
        except TimeoutError:
            pass
        finally:
            with self._cond:
                self._waiters.discard(waiter)
        return self._version


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)
