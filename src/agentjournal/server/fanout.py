"""One reader per live source, however many clients follow it.

Without this, every commit woke every subscriber and each read the new events for itself: with
1,000 clients on one session that is 1,000 reads and 1,000 JSON renderings of the same event. A
`Source` (a session's events, or a tenant's feed) runs one pump that follows the journal and hands
each event, rendered once, to every subscriber's queue.

A subscriber joins the source first and then reads its own backlog from the journal, dropping
from the queue whatever is at or below the last event it sent: the pump only reads committed
events, so the backlog read after joining reaches at least as far as the pump had, and nothing
falls between the two. A subscriber that falls `MAX_BEHIND` events behind is let go (its stream
ends; the client resumes with Last-Event-ID) rather than holding memory for it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import AsyncIterator, Callable, Hashable
from dataclasses import dataclass, field

from agentjournal.events import Event

__all__ = ["Fanout", "Rendered", "Subscriber"]

MAX_BEHIND = 10_000
log = logging.getLogger("agentjournal.server")


@dataclass(frozen=True, slots=True)
class Rendered:
    """An event with its place in the stream's order and its JSON, rendered once. `order` is a
    sort key (a seq, or the journal's `position_key` of a feed position), never the SSE id: a
    position is opaque, so the stream takes its id from the event."""

    event: Event
    order: int
    data: str


@dataclass(eq=False)
class Subscriber:
    queue: asyncio.Queue[Rendered | None] = field(default_factory=asyncio.Queue)
    dropped: bool = False


def render(event: Event, order: int) -> Rendered:
    data = json.dumps(event.to_dict(), ensure_ascii=False, separators=(",", ":"))
    return Rendered(event, order, data)


class _Source:
    def __init__(self, events: AsyncIterator[Event], order: Callable[[Event], int]) -> None:
        self.subscribers: set[Subscriber] = set()
        self.order = order
        self.task = asyncio.create_task(self._pump(events))

    async def _pump(self, events: AsyncIterator[Event]) -> None:
        try:
            async for event in events:
                rendered = render(event, self.order(event))
                # No await between here and the end of the loop body: a subscriber joins either
                # before an event is handed out (and gets it) or after (and reads it itself).
                for subscriber in list(self.subscribers):
                    if subscriber.queue.qsize() >= MAX_BEHIND:
                        subscriber.dropped = True
                        self.subscribers.discard(subscriber)
                        subscriber.queue.put_nowait(None)
                    else:
                        subscriber.queue.put_nowait(rendered)
        except Exception:
            log.exception("a live stream's reader failed; its clients will reconnect")
        finally:
            for subscriber in self.subscribers:
                subscriber.queue.put_nowait(None)


class Fanout:
    """The live sources of one app, by key, each alive while it has subscribers."""

    def __init__(self) -> None:
        self._sources: dict[Hashable, _Source] = {}

    @contextlib.asynccontextmanager
    async def join(
        self,
        key: Hashable,
        follow: Callable[[], AsyncIterator[Event]],
        order: Callable[[Event], int],
    ) -> AsyncIterator[Subscriber]:
        """Subscribe to the source `key`, starting its pump (`follow()`) if it has none."""
        source = self._sources.get(key)
        if source is None or source.task.done():
            source = self._sources[key] = _Source(follow(), order)
        subscriber = Subscriber()
        source.subscribers.add(subscriber)
        try:
            yield subscriber
        finally:
            source.subscribers.discard(subscriber)
            if not source.subscribers and self._sources.get(key) is source:
                del self._sources[key]
                source.task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await source.task
