"""`AsyncJournal`: the same verbs as `Journal`, awaitable.

Each verb runs the sync verb on a worker thread, so there is one implementation of every rule and
concurrent coroutines meet in the same group commit as threads do. Those forwarding verbs are
generated from `Journal` (aio_verbs.py, by scripts/gen_aio.py); what is written here is the
lifecycle and the live streams. Waiting for live events does not hold a thread: `subscribe` sleeps
on the commit signal in the event loop. `replicate` is the module-level verb's twin: the sync
replicator's rounds on a thread of its own, stopped between batches when its task is cancelled.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import TracebackType
from typing import Self

from agentjournal import live, replication
from agentjournal.aio_verbs import AsyncVerbs
from agentjournal.events import DEFAULT_MAX_PAYLOAD_BYTES, Event
from agentjournal.journal import Durability, Journal
from agentjournal.replication import DEFAULT_BATCH, BatchReport, ReplicationReport

__all__ = ["AsyncJournal", "replicate"]


class AsyncJournal(AsyncVerbs):
    """`Journal` for asyncio. `await AsyncJournal.open("agent.db")`, then the same verbs."""

    def __init__(
        self,
        journal: Journal,
        *,
        max_threads: int = 32,
        executor: ThreadPoolExecutor | None = None,
    ) -> None:
        self.journal = journal
        self._owns_pool = executor is None
        self._pool = executor or ThreadPoolExecutor(max_threads, thread_name_prefix="agentjournal")

    def for_tenant(self, tenant: str) -> AsyncJournal:
        """The same database and worker threads, scoped to another tenant."""
        return AsyncJournal(self.journal.for_tenant(tenant), executor=self._pool)

    @classmethod
    async def open(
        cls,
        url: str | Path,
        *,
        tenant: str = "default",
        durability: Durability = "full",
        max_payload_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES,
        create: bool = True,
    ) -> AsyncJournal:
        journal = await asyncio.to_thread(
            Journal.open,
            url,
            tenant=tenant,
            durability=durability,
            max_payload_bytes=max_payload_bytes,
            create=create,
        )
        return cls(journal)

    @staticmethod
    async def migrate(url: str | Path, *, grant_to: Sequence[str] = ()) -> None:
        """`Journal.migrate` on a worker thread: create or migrate the journal at `url`."""
        await asyncio.to_thread(Journal.migrate, url, grant_to=grant_to)

    @staticmethod
    def describe(url: str | Path) -> str:
        """`Journal.describe`: where `url` points, for a person to read (no I/O)."""
        return Journal.describe(url)

    @property
    def tenant(self) -> str:
        return self.journal.tenant

    async def close(self) -> None:
        await self._run(self.journal.close)
        if self._owns_pool:
            self._pool.shutdown(wait=False)

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    async def subscribe(
        self, session_id: str, *, after: int = 0, poll_interval: float = 0.2
    ) -> AsyncIterator[Event]:
        """As `Journal.subscribe`; waits in the event loop, not on a thread."""
        deleted = (await self.get_session(session_id)).status == "deleted"
        stream = live.follow_session(after, deleted=deleted)
        signal = self.journal.storage.signal
        while not stream.ended:
            seen = signal.version  # before the read: a commit after it ends the wait below
            page = await self.events(session_id, after=stream.cursor, limit=live.PAGE_SIZE)
            for event in stream.take(page):
                yield event
            if stream.waits:
                await signal.wait_async(seen, poll_interval)

    async def subscribe_all(
        self, *, after: str | None = None, poll_interval: float = 0.2
    ) -> AsyncIterator[Event]:
        """As `Journal.subscribe_all`."""
        stream = live.follow_feed(after)
        signal = self.journal.storage.signal
        while not stream.ended:
            seen = signal.version  # before the read: a commit after it ends the wait below
            page = await self.events_all(after=stream.cursor, limit=live.PAGE_SIZE)
            for event in stream.take(page):
                yield event
            if stream.waits:
                await signal.wait_async(seen, poll_interval)


async def replicate(
    source: AsyncJournal | Journal | str | Path,
    target: AsyncJournal | Journal | str | Path,
    *,
    tenant: str | None = None,
    source_tenant: str = "default",
    batch_size: int = DEFAULT_BATCH,
    follow: bool = False,
    stop: asyncio.Event | None = None,
    on_batch: Callable[[BatchReport], None] | None = None,
    on_error: Callable[[BaseException, float], None] | None = None,
    poll_interval: float = 0.1,
) -> ReplicationReport:
    """As `agentjournal.replicate`, without blocking the event loop: the replicator runs on a
    thread of its own (a follower holds it until stopped), and `on_batch` and `on_error` are
    called in the event loop, in order, as the sync ones are called on that thread.

    With `follow`, it returns its report once `stop` is set. Cancelling the task stops it too,
    between batches: the batch in flight commits (or not, whole), the thread ends, and then
    `CancelledError` is raised. The next call resumes from the target's position either way."""
    loop = asyncio.get_running_loop()
    halt = threading.Event()

    def in_loop(callback: Callable[..., None] | None) -> Callable[..., None] | None:
        if callback is None:
            return None

        def call(*args: object) -> None:
            loop.call_soon_threadsafe(callback, *args)

        return call

    def work() -> ReplicationReport:
        return replication.replicate(
            _sync(source),
            _sync(target),
            tenant=tenant,
            source_tenant=source_tenant,
            batch_size=batch_size,
            follow=follow,
            stop=halt,
            on_batch=in_loop(on_batch),
            on_error=in_loop(on_error),
            poll_interval=poll_interval,
        )

    pool = ThreadPoolExecutor(1, thread_name_prefix="agentjournal-replicate")
    running = loop.run_in_executor(pool, work)
    watcher = None if stop is None else loop.create_task(_set_when(stop, halt))
    try:
        return await asyncio.shield(running)
    except asyncio.CancelledError:
        halt.set()
        while not running.done():  # cancelled again meanwhile: still wait for the thread
            try:
                await asyncio.shield(running)
            except asyncio.CancelledError:
                continue
            except Exception:
                break  # stopping, not reporting: its error is not what the caller asked for
        raise
    finally:
        if watcher is not None:
            watcher.cancel()
        if not running.done():  # the coroutine closed unawaited (its loop shutting down)
            halt.set()
        # Once the replicator returned, its thread only has to end: joined, so that no thread
        # of it outlives the call.
        pool.shutdown(wait=running.done())


async def _set_when(stop: asyncio.Event, halt: threading.Event) -> None:
    await stop.wait()
    halt.set()


def _sync(journal: AsyncJournal | Journal | str | Path) -> Journal | str | Path:
    return journal.journal if isinstance(journal, AsyncJournal) else journal
