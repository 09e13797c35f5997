"""Server-Sent Events: a session's events (id = seq) or a tenant's feed (id = position).

A live stream joins the source's one reader (server/fanout.py) first, then sends its backlog from
the journal, then what the reader hands it, dropping anything at or below the last id it sent: no
gap between backlog and live, no duplicate. `?follow=false` sends the backlog and ends. The
stream's slot is held for as long as the generator runs and released when the client leaves.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable

from sse_starlette import EventSourceResponse, ServerSentEvent

from agentjournal.aio import AsyncJournal
from agentjournal.events import Event
from agentjournal.server.fanout import Rendered, render
from agentjournal.server.service import Service

__all__ = ["feed_stream", "session_stream"]

_PAGE = 1000


def _frame(rendered: Rendered, event_id: str) -> ServerSentEvent:
    return ServerSentEvent(data=rendered.data, id=event_id, event=rendered.event.type)


def _seq(event: Event) -> int:
    return event.seq


def _position(event: Event) -> int:
    return int(event.position)


async def _backlog(
    read_page: Callable[[int], Awaitable[list[Event]]], order: Callable[[Event], int], after: int
) -> AsyncIterator[Event]:
    while page := await read_page(after):
        for event in page:
            yield event
        after = order(page[-1])


async def _stream(
    service: Service,
    key_id: str,
    read_page: Callable[[int], Awaitable[list[Event]]],
    follow: Callable[[int], AsyncIterator[Event]] | None,
    source: tuple[str, ...],
    order: Callable[[Event], int],
    after: int,
    live_from: int,
) -> AsyncIterator[ServerSentEvent]:
    async with service.stream_slot(key_id):
        yield ServerSentEvent(retry=service.limits.retry_ms)
        if follow is None:
            async for event in _backlog(read_page, order, after):
                yield _frame(render(event, order(event)), str(order(event)))
            return
        # A new source's reader starts at what was committed when the request came in (any
        # committed point works: the backlog read below reaches past it).
        async with service.fanout.join(source, lambda: follow(live_from), order) as subscriber:
            last = after
            async for event in _backlog(read_page, order, after):
                yield _frame(render(event, order(event)), str(order(event)))
                last = order(event)
                if event.ends_session_stream and source[0] == "session":
                    return
            while (rendered := await subscriber.queue.get()) is not None:
                if rendered.order <= last:
                    continue
                yield _frame(rendered, str(rendered.order))
                last = rendered.order
                if rendered.event.ends_session_stream and source[0] == "session":
                    return


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
        key_id,
        read_page,
        subscribe if follow else None,
        ("session", tenant, session_id),
        _seq,
        after,
        live_from,
    )
    return _response(service, frames)


def feed_stream(
    service: Service, tenant: str, key_id: str, after: str | None, follow: bool
) -> EventSourceResponse:
    journal: AsyncJournal = service.journal.for_tenant(tenant)

    async def read_page(cursor: int) -> list[Event]:
        return await journal.events_all(after=str(cursor), limit=_PAGE)

    def subscribe(cursor: int) -> AsyncIterator[Event]:
        return journal.subscribe_all(after=str(cursor))

    frames = _stream(
        service,
        key_id,
        read_page,
        subscribe if follow else None,
        ("feed", tenant),
        _position,
        int(after or 0),
        int(after or 0),
    )
    return _response(service, frames)


def _response(service: Service, frames: AsyncIterator[ServerSentEvent]) -> EventSourceResponse:
    # no-transform and X-Accel-Buffering keep proxies from holding frames back.
    headers = {"Cache-Control": "no-cache, no-transform", "X-Accel-Buffering": "no"}
    return EventSourceResponse(frames, ping=service.limits.heartbeat_seconds, headers=headers)
