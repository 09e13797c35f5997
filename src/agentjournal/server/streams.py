"""Server-Sent Events: a session's events (id = seq) or a tenant's feed (id = position).

The journal's subscriptions read from a cursor, so there is no window between backlog and live
events: whatever commits while the backlog is sent is read on the next page. The stream's slot is
held for as long as the generator runs and released when the client leaves.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

from sse_starlette import EventSourceResponse, ServerSentEvent

from agentjournal.aio import AsyncJournal
from agentjournal.events import Event
from agentjournal.server.service import Service

__all__ = ["feed_stream", "session_stream"]


def _frame(event: Event, event_id: str) -> ServerSentEvent:
    data = json.dumps(event.to_dict(), ensure_ascii=False, separators=(",", ":"))
    return ServerSentEvent(data=data, id=event_id, event=event.type)


async def _session_events(
    journal: AsyncJournal, session_id: str, after: int, follow: bool
) -> AsyncIterator[Event]:
    if follow:
        async for event in journal.subscribe(session_id, after=after):
            yield event
        return
    while page := await journal.events(session_id, after=after, limit=1000):
        for event in page:
            yield event
        after = page[-1].seq


async def _feed_events(
    journal: AsyncJournal, after: str | None, follow: bool
) -> AsyncIterator[Event]:
    if follow:
        async for event in journal.subscribe_all(after=after):
            yield event
        return
    while page := await journal.events_all(after=after, limit=1000):
        for event in page:
            yield event
        after = page[-1].position


def session_stream(
    service: Service, tenant: str, key_id: str, session_id: str, after: int, follow: bool
) -> EventSourceResponse:
    journal = service.journal.for_tenant(tenant)

    async def frames() -> AsyncIterator[ServerSentEvent]:
        async with service.stream_slot(key_id):
            yield ServerSentEvent(retry=service.limits.retry_ms)
            async for event in _session_events(journal, session_id, after, follow):
                yield _frame(event, str(event.seq))

    return _response(service, frames())


def feed_stream(
    service: Service, tenant: str, key_id: str, after: str | None, follow: bool
) -> EventSourceResponse:
    journal = service.journal.for_tenant(tenant)

    async def frames() -> AsyncIterator[ServerSentEvent]:
        async with service.stream_slot(key_id):
            yield ServerSentEvent(retry=service.limits.retry_ms)
            async for event in _feed_events(journal, after, follow):
                yield _frame(event, event.position)

    return _response(service, frames())


def _response(service: Service, frames: AsyncIterator[ServerSentEvent]) -> EventSourceResponse:
    # no-transform and X-Accel-Buffering keep proxies from holding frames back.
    headers = {"Cache-Control": "no-cache, no-transform", "X-Accel-Buffering": "no"}
    return EventSourceResponse(frames, ping=service.limits.heartbeat_seconds, headers=headers)
