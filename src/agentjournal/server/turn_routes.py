"""`POST /v1/sessions/{id}/turns`: one agent turn, answered as JSON once the reply is durable, or
as an SSE stream of the turn's events as each becomes durable (`Accept: text/event-stream`)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Annotated

from fastapi import APIRouter, Header, Request, Response
from sse_starlette import EventSourceResponse, ServerSentEvent

from agentjournal.errors import JournalError
from agentjournal.events import Event
from agentjournal.journal import Journal
from agentjournal.runtime import TurnResult
from agentjournal.server.agent_host import AgentHost
from agentjournal.server.fanout import render
from agentjournal.server.models import EventOut, TurnOut, TurnRequest
from agentjournal.server.problems import Problem, journal_problem, problem_body
from agentjournal.server.routing import (
    ERROR_RESPONSES,
    IdempotencyKey,
    Tenant,
    created_response,
    journal_for,
    service_of,
)

__all__ = ["router"]

router = APIRouter(prefix="/v1", responses=ERROR_RESPONSES, tags=["agent"])
_MODEL_FAILED = {"description": "the model failed; the turn stays open and resume finishes it"}


def _frame(event: Event) -> ServerSentEvent:
    # The same frame a session stream sends for this event (id = seq).
    return ServerSentEvent(data=render(event, event.seq).data, id=str(event.seq), event=event.type)


@router.post(
    "/sessions/{session_id}/turns",
    status_code=201,
    response_model=TurnOut,
    responses={
        201: {"content": {"text/event-stream": {}}},
        200: {
            "model": TurnOut,
            "description": "an idempotent repeat: the original turn",
            "content": {"text/event-stream": {}},
        },
        502: {**_MODEL_FAILED, "content": ERROR_RESPONSES[409]["content"]},
    },
)
async def run_turn(
    request: Request,
    session_id: str,
    body: TurnRequest,
    tenant: Tenant,
    key: IdempotencyKey = None,
    accept: Annotated[str | None, Header()] = None,
) -> Response:
    """Run one turn of the server's agent: 201 with the reply once it is durable, or with
    `Accept: text/event-stream` the turn's events as they are journaled (id = seq). A client
    that disconnects does not stop the turn."""
    host = service_of(request).agent_host
    if host is None:
        await journal_for(request, tenant).get_session(session_id)  # 404 comes first
        raise Problem(409, "No agent", "this server runs no agent; start it with --agent NAME")
    # The agent refuses a session that is not its own (Agent.run_turn).
    journal = journal_for(request, tenant).journal
    if accept is None or "text/event-stream" not in accept:
        result = await host.run_turn(journal, session_id, body.content, key)
        return _reply(result)
    return await _stream(host, journal, session_id, body.content, key)


def _reply(result: TurnResult) -> Response:
    out = TurnOut(
        session_id=result.session_id,
        reply=result.reply,
        events=[EventOut.of(e) for e in result.events],
    )
    return created_response(out, result.created)


async def _stream(
    host: AgentHost, journal: Journal, session_id: str, text: str, key: str | None
) -> Response:
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[Event | None] = asyncio.Queue()

    def on_event(event: Event) -> None:  # on the turn's thread
        loop.call_soon_threadsafe(queue.put_nowait, event)

    turn = host.run_turn(journal, session_id, text, key, on_event)
    turn.add_done_callback(lambda _: queue.put_nowait(None))
    # Hold the response until the turn wrote its first event or failed, so a refused turn
    # (another one running, a bad session) is an ordinary problem response, not a broken stream.
    first = await queue.get()
    refused = turn.exception() if first is None else None
    if refused is not None:
        raise refused

    async def frames() -> AsyncIterator[ServerSentEvent]:
        sent = 0
        item = first
        while item is not None:
            sent += 1
            yield _frame(item)
            item = await queue.get()
        error = turn.exception()
        if isinstance(error, JournalError):
            problem = problem_body(*journal_problem(error), str(error))
            yield ServerSentEvent(data=json.dumps(problem, ensure_ascii=False), event="error")
        elif error is None and sent == 0:  # an idempotent repeat: the original turn's events
            for event in turn.result().events:
                yield _frame(event)

    headers = {"Cache-Control": "no-cache, no-transform", "X-Accel-Buffering": "no"}
    status = 201 if first is not None else 200
    return EventSourceResponse(frames(), status_code=status, headers=headers)
