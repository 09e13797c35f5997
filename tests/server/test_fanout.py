"""The one-reader-per-source fan-out, without a server: ordering, sharing, letting go."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from agentjournal import Event
from agentjournal.server import fanout
from agentjournal.server.fanout import Fanout, Rendered


def event(seq: int) -> Event:
    return Event(seq, "sess_a", seq, "user_message", {"content": str(seq)}, 0, None, str(seq))


class Feed:
    """A pump source whose events the test releases one by one; counts how often it is read."""

    def __init__(self) -> None:
        self.queue: asyncio.Queue[Event | None] = asyncio.Queue()
        self.started = 0

    async def follow(self) -> AsyncIterator[Event]:
        self.started += 1
        while (item := await self.queue.get()) is not None:
            yield item


async def drain(queue: asyncio.Queue[Rendered | None], count: int) -> list[int]:
    got = []
    for _ in range(count):
        item = await asyncio.wait_for(queue.get(), 5)
        assert item is not None
        got.append(item.order)
    return got


def test_one_reader_serves_every_subscriber_in_order() -> None:
    async def scenario() -> None:
        feed, hub = Feed(), Fanout()
        async with (
            hub.join("s", feed.follow, lambda e: e.seq) as one,
            hub.join("s", feed.follow, lambda e: e.seq) as two,
        ):
            for seq in (1, 2, 3):
                feed.queue.put_nowait(event(seq))
            assert await drain(one.queue, 3) == [1, 2, 3]
            assert await drain(two.queue, 3) == [1, 2, 3]
            assert feed.started == 1
        # The last subscriber leaving stops the reader; a new one starts another.
        async with hub.join("s", feed.follow, lambda e: e.seq) as three:
            feed.queue.put_nowait(event(4))
            assert await drain(three.queue, 1) == [4]
        assert feed.started == 2

    asyncio.run(scenario())


def test_a_subscriber_too_far_behind_is_let_go(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(fanout, "MAX_BEHIND", 3)

    async def scenario() -> None:
        feed, hub = Feed(), Fanout()
        async with (
            hub.join("s", feed.follow, lambda e: e.seq) as slow,
            hub.join("s", feed.follow, lambda e: e.seq) as fast,
        ):
            for seq in range(1, 6):
                feed.queue.put_nowait(event(seq))
                assert await drain(fast.queue, 1) == [seq]
            assert slow.dropped
            orders = [item.order if item else None for item in drain_now(slow.queue)]
            assert orders == [1, 2, 3, None]  # what it had, then the end of its stream

    asyncio.run(scenario())


def test_the_end_of_the_source_ends_every_subscriber() -> None:
    async def scenario() -> None:
        feed, hub = Feed(), Fanout()
        async with hub.join("s", feed.follow, lambda e: e.seq) as subscriber:
            feed.queue.put_nowait(event(1))
            feed.queue.put_nowait(None)
            assert await drain(subscriber.queue, 1) == [1]
            assert await asyncio.wait_for(subscriber.queue.get(), 5) is None

    asyncio.run(scenario())


def drain_now(queue: asyncio.Queue[Rendered | None]) -> list[Rendered | None]:
    items = []
    while not queue.empty():
        items.append(queue.get_nowait())
    return items
