"""Server-Sent Events: a session's events (id = seq) or a tenant's feed (id = position).

A live stream joins the source's one reader (server/fanout.py) first, then sends its backlog from
the journal, then what the reader hands it, dropping anything at or below the last event it sent:
no gap between backlog and live, no duplicate. `?follow=false` sends the backlog and ends. The
stream's slot is taken when the request is admitted and held until the response ends.

Feed positions are opaque (their format is the backend's): the feed pages and resumes on the
position strings themselves and compares only the keys `Journal.position_key` gives for them.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from sse_starlette import EventSourceResponse, ServerSentEvent
from starlette.types import Receive, Scope, Send

from agentjournal.aio import AsyncJournal
from agentjournal.events import Event
from agentjournal.server.fanout import Rendered, render
from agentjournal.server.service import Service, StreamSlot

__all__ = ["SSE_HEADERS", "feed_stream", "held_stream", "session_stream"]

_PAGE = 1000
# How long a `follow=false` feed waits for an event the feed still holds back (PostgreSQL shows
# an event only once every older transaction has ended) before it ends without it.
HELD_BACK_SECONDS = 30.0

Cursor = TypeVar("Cursor")


@dataclass(frozen=True, slots=True)
class _Order(Generic[Cursor]):
    """How a stream names its events: `cursor` is what its next backlog page starts after,
    `frame_id` the SSE id a client resumes from, `key` an int ordering its events, by which the
    live part drops what the backlog already sent."""

    cursor: Callable[[Event], Cursor]
    frame_id: Callable[[Event], str]
    key: Callable[[Event], int]


def _frame(rendered: Rendered, order: _Order[Cursor]) -> ServerSentEvent:
    event = rendered.event
    return ServerSentEvent(data=rendered.data, id=order.frame_id(event), event=event.type)


async def _backlog(
    read_page: Callable[[Cursor], Awaitable[list[Event]]],
    cursor_of: Callable[[Event], Cursor],
    after: Cursor,
) -> AsyncIterator[Event]:
    while page := await read_page(after):
        for event in page:
            yield event
        after = cursor_of(page[-1])


async def _stream(
    service: Service,
    read_page: Callable[[Cursor], Awaitable[list[Event]]],
    follow: Callable[[Cursor], AsyncIterator[Event]] | None,
    source: tuple[str, ...],
    order: _Order[Cursor],
    after: Cursor,
    after_key: int | None,
    live_from: Cursor,
) -> AsyncIterator[ServerSentEvent]:
    yield ServerSentEvent(retry=service.limits.retry_ms)
    if follow is None:
        async for event in _backlog(read_page, order.cursor, after):
            yield _frame(render(event, order.key(event)), order)
        return
    # A new source's reader starts at what was committed when the request came in (any
    # committed point works: the backlog read below reaches past it).
    async with service.fanout.join(source, lambda: follow(live_from), order.key) as subscriber:
        last = after_key  # None: the stream starts before every event, so nothing is a repeat
        async for event in _backlog(read_page, order.cursor, after):
            sent = render(event, order.key(event))
            yield _frame(sent, order)
            last = sent.order
            if event.ends_session_stream and source[0] == "session":
                return
        while (rendered := await subscriber.queue.get()) is not None:
            if last is not None and rendered.order <= last:
                continue
            yield _frame(rendered, order)
            last = rendered.order
            if rendered.event.ends_session_stream and source[0] == "session":
                return


_BY_SEQ: _Order[int] = _Order(
    lambda event: event.seq, lambda event: str(event.seq), lambda event: event.seq
)


def session_stream(
    service: Service,
    tenant: str,
    key_id: str,
    session_id: str,
    after: int,
    follow: bool,
    live_from: int,
) -> EventSourceResponse:
    journal: AsyncJournal = service.journal.for_tenant(tenant)

    async def read_page(cursor: int) -> list[Event]:
        return await journal.events(session_id, after=cursor, limit=_PAGE)

    def subscribe(cursor: int) -> AsyncIterator[Event]:
        return journal.subscribe(session_id, after=cursor)

    frames = _stream(
        service,
        read_page,
        subscribe if follow else None,
        ("session", tenant, session_id),
        _BY_SEQ,
        after,
        after,
        live_from,
    )
    return held_stream(service, key_id, frames, service.limits.heartbeat_seconds)


def feed_stream(
    service: Service, tenant: str, key_id: str, after: str | None, follow: bool
) -> EventSourceResponse:
    journal: AsyncJournal = service.journal.for_tenant(tenant)
    # The sync verb: a key is the backend decoding a string, no I/O, so it needs no worker
    # thread (the async twin would take one per event, in the reader and in every backlog).
    key_of = journal.journal.position_key

    async def read_page(cursor: str | None) -> list[Event]:
        return await journal.events_all(after=cursor, limit=_PAGE)

    head_key: int | None = None  # the feed's head when the backlog started

    async def read_committed(cursor: str | None) -> list[Event]:
        # A backlog that ends holds every event committed before the request, also those the
        # feed still holds back behind an older transaction: read up to that head, waiting.
        nonlocal head_key
        if head_key is None:
            head = await journal.feed_head(after=after)
            if head is None:
                return []
            head_key = key_of(head)
        waited, pause = 0.0, 0.01
        while cursor is None or key_of(cursor) < head_key:
            if page := await read_page(cursor):
                return [event for event in page if key_of(event.position) <= head_key]
            if waited >= HELD_BACK_SECONDS or await journal.feed_head(after=cursor) is None:
                break  # held back too long, or the rest was purged meanwhile
            await asyncio.sleep(pause)
            waited, pause = waited + pause, min(pause * 2, 0.5)
        return []

    def subscribe(cursor: str | None) -> AsyncIterator[Event]:
        return journal.subscribe_all(after=cursor)

    by_position: _Order[str | None] = _Order(
        lambda event: event.position,
        lambda event: event.position,
        lambda event: key_of(event.position),
    )
    frames = _stream(
        service,
        read_page if follow else read_committed,
        subscribe if follow else None,
        ("feed", tenant),
        by_position,
        after,
        None if after is None else key_of(after),
        after,
    )
    return held_stream(service, key_id, frames, service.limits.heartbeat_seconds)


# no-transform and X-Accel-Buffering keep proxies from holding frames back.
SSE_HEADERS: dict[str, str] = {"Cache-Control": "no-cache, no-transform", "X-Accel-Buffering": "no"}


def held_stream(
    service: Service,
    key_id: str,
    frames: AsyncIterator[ServerSentEvent],
    ping: float | None = None,
) -> EventSourceResponse:
    """The SSE response sending `frames`, holding one of the key's stream slots (429 when it has
    none left) from now until the response ends, however it ends: also if it never starts (the
    client left first), when its generator never runs. Call it last in a route, so that nothing
    between taking the slot and returning the response can fail. `ping`: seconds between
    heartbeats (None: sse_starlette's default)."""
    slot = service.reserve_stream(key_id)
    return _HeldStream(slot, frames, ping=ping, headers=SSE_HEADERS)


class _HeldStream(EventSourceResponse):
    def __init__(self, slot: StreamSlot, *args: Any, **kwargs: Any) -> None:
        self._slot = slot  # first: a failure below must still find it
        try:
            super().__init__(*args, **kwargs)
        except BaseException:
            slot.release()
            raise

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self._slot.release()
