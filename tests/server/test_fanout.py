"""The one-reader-per-source fan-out, without a server: ordering, sharing, letting go; and the
feed stream over it, which must take positions as the journal gives them."""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
from sse_starlette import ServerSentEvent

from agentjournal import Event, InvalidArgument, Journal
from agentjournal.aio import AsyncJournal
from agentjournal.keys import ApiKeys
from agentjournal.server import fanout
from agentjournal.server.fanout import Fanout, Rendered
from agentjournal.server.service import Limits, Service
from agentjournal.server.streams import feed_stream


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


class LetteredPositions:
    """A SQLite storage whose feed positions are "p" and the event id in hex: not a decimal
    number, and ordered otherwise as text ("p14", event 20, sorts before "p6"). The feed reads
    right over it only if the stream leaves positions to the journal's `position_key`."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    @staticmethod
    def number(position: str | None) -> str | None:
        if not position:
            return position
        if not re.fullmatch(r"p[0-9a-f]{1,15}", position):
            raise InvalidArgument(f"position {position!r:.40} is not a position of this journal")
        return str(int(position[1:], 16))

    def events_all(self, tenant: str, after: str | None, limit: int) -> list[Event]:
        page = self.inner.events_all(tenant, self.number(after), limit)
        return [event._replace(position=f"p{event.event_id:x}") for event in page]

    def feed_head(self, tenant: str, after: str | None) -> str | None:
        head = self.inner.feed_head(tenant, self.number(after))
        return None if head is None else f"p{int(head):x}"

    def position_key(self, position: str) -> int:
        return int(self.number(position) or 0)


def test_the_feed_stream_pages_and_deduplicates_on_the_journals_own_positions(
    tmp_path: Path,
) -> None:
    async def ids(frames: AsyncIterator[ServerSentEvent], count: int) -> list[str]:
        got: list[str] = []
        while len(got) < count:
            frame = await asyncio.wait_for(anext(frames), 5)
            if frame.id is not None:  # the first frame only sets the client's retry delay
                got.append(frame.id)
        return got

    async def until(condition: Callable[[], bool]) -> None:
        async def poll() -> None:
            while not condition():
                await asyncio.sleep(0.01)

        await asyncio.wait_for(poll(), 5)

    async def scenario(journal: Journal, service: Service) -> None:
        sid = journal.create_session("hex").session_id
        journal.append_many(sid, [{"type": "user_message", "payload": {"content": "x"}}] * 19)
        feed = journal.events_all(limit=100)
        assert [feed[9].position, feed[15].position, feed[19].position] == ["pa", "p10", "p14"]
        after = feed[4].position
        backlog = feed_stream(service, "default", "key", after, follow=False).body_iterator
        assert [frame.id async for frame in backlog if frame.id is not None] == [
            event.position for event in feed[5:]
        ]
        # The live reader starts at `after` as well, so it hands on every backlog event again:
        # only comparing keys drops them all ("p6" is above "p14" as text).
        live = feed_stream(service, "default", "key", after, follow=True).body_iterator
        try:
            sent = await ids(live, 15)
            (subscriber,) = service.fanout._sources["feed", "default"].subscribers
            # The events come through the queue, not a backlog page, only if the stream is past
            # its backlog before they commit: let the reader queue the repeats, the stream drop
            # them, and append only then.
            await until(lambda: subscriber.queue.qsize() == 15)
            rest = asyncio.create_task(ids(live, 2))
            await until(lambda: subscriber.queue.empty() or rest.done())
            assert not rest.done(), f"the stream sent again what its backlog sent: {rest.result()}"
            journal.append_many(sid, [{"type": "user_message", "payload": {"content": "y"}}] * 2)
            sent += await rest
        finally:
            await live.aclose()  # type: ignore[attr-defined]
        newer = journal.events_all(after=feed[-1].position)
        assert [event.position for event in newer] == ["p15", "p16"]
        assert sent == [event.position for event in [*feed[5:], *newer]]

    journal = Journal.open(tmp_path / "lettered.db")
    journal.storage = LetteredPositions(journal.storage)
    async_journal = AsyncJournal(journal)
    service = Service(async_journal, ApiKeys(journal.storage), Limits(), open=True)
    try:
        asyncio.run(scenario(journal, service))
    finally:
        asyncio.run(async_journal.close())
