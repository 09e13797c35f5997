"""`AsyncJournal`: the same verbs as `Journal`, awaitable.

Each verb runs the sync verb on a worker thread, so there is one implementation of every rule and
concurrent coroutines meet in the same group commit as threads do. Those forwarding verbs are
generated from `Journal` (aio_verbs.py, by scripts/gen_aio.py); what is written here is the
lifecycle and the live streams. Waiting for live events does not hold a thread: `subscribe` sleeps
on the commit signal in the event loop.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import TracebackType
from typing import Self

from agentjournal import live
from agentjournal.aio_verbs import AsyncVerbs
from agentjournal.events import DEFAULT_MAX_PAYLOAD_BYTES, Event
from agentjournal.journal import Durability, Journal

__all__ = ["AsyncJournal"]


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
