"""`POST /v1/sessions/{id}/turns`: one agent turn, answered as JSON once the reply is durable, or
as an SSE stream of the model's deltas and the turn's events as each becomes durable (`Accept:
text/event-stream`). `GET .../turns/{turn}/stream` reconnects to a turn's stream (the frames after
`Last-Event-ID`, then live ones); `POST .../turns/{turn}/cancel` cuts a turn short. The frames are
kept by server/turn_frames.py."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Annotated, Any

from fastapi import APIRouter, Header, Path, Query, Request, Response
from sse_starlette import EventSourceResponse, ServerSentEvent

from agentjournal.events import Event
from agentjournal.runtime import TurnResult
from agentjournal.server.fanout import render
from agentjournal.server.models import EventOut, TurnCancelled, TurnOut, TurnRequest
from agentjournal.server.problems import Problem
from agentjournal.server.routing import (
    ERROR_RESPONSES,
    IdempotencyKey,
    Tenant,
    created_response,
    journal_for,
    service_of,
)
from agentjournal.server.streams import SSE_HEADERS, held_stream
from agentjournal.server.turn_frames import FrameId, TurnFrame, TurnLog

__all__ = ["router"]

router = APIRouter(prefix="/v1", responses=ERROR_RESPONSES, tags=["agent"])
_MODEL_FAILED = {"description": "the model failed; the turn stays open and resume finishes it"}
TurnSeq = Annotated[int, Path(ge=1, le=2**63 - 1, description="the seq of the turn's user_message")]
# A frame id: {turn}:{run}:{n}.
FrameCursor = Annotated[str | None, Query(max_length=80, description="a frame id: resume after it")]


def _sse(frame: TurnFrame) -> ServerSentEvent:
    return ServerSentEvent(data=frame.data, id=frame.id, event=frame.event)


def _journal_frames(events: list[Event]) -> list[TurnFrame]:
    """An idempotent repeat whose frames this server no longer holds: the journaled events, as
    a finished run named `journal`."""
    turn = events[0].seq
    return [
        TurnFrame(f"{turn}:journal:{n}", e.type, render(e, e.seq).data)
        for n, e in enumerate(events, 1)
    ]


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
    `Accept: text/event-stream` the model's deltas and the turn's events as they happen (ids
    `{turn}:{run}:{n}`; reconnect with `GET .../turns/{turn}/stream`). A client that
    disconnects does not stop the turn."""
    host = service_of(request).agent_host
    if host is None:
        await journal_for(request, tenant).get_session(session_id)  # 404 comes first
        raise Problem(409, "No agent", "this server runs no agent; start it with --agent NAME")
    # The agent refuses a session that is not its own (Agent.run_turn).
    journal = journal_for(request, tenant).journal
    loop = asyncio.get_running_loop()
    began: asyncio.Future[TurnLog] = loop.create_future()

    def begin(log: TurnLog) -> None:
        if not began.done():
            began.set_result(log)

    def started(log: TurnLog) -> None:  # on the turn's thread
        loop.call_soon_threadsafe(begin, log)

    # Every turn records its frames, so that a watcher (the inspector) or a reconnecting
    # client can follow it, whichever way it was asked for.
    turn = host.run_turn(journal, session_id, body.content, key, started=started)
    turn.add_done_callback(lambda done: done.cancelled() or done.exception())
    if accept is None or "text/event-stream" not in accept:
        return _reply(await turn)
    # Hold the response until the turn wrote its first event or failed, so a refused turn
    # (another one running, a bad session) is an ordinary problem response, not a broken stream.
    either: set[asyncio.Future[Any]] = {began, turn}
    await asyncio.wait(either, return_when=asyncio.FIRST_COMPLETED)
    if began.done():
        return _stream(began.result().follow(None), 201)
    result = turn.result()  # raises the refusal; else an idempotent repeat of a finished turn
    held = host.frames.get((journal.tenant, session_id, result.events[0].seq))
    if held is not None:
        return _stream(held.follow(None), 200)
    return _stream(_listed(_journal_frames(result.events)), 200)


def _reply(result: TurnResult) -> Response:
    out = TurnOut(
        session_id=result.session_id,
        reply=result.reply,
        events=[EventOut.of(e) for e in result.events],
    )
    return created_response(out, result.created)


async def _listed(frames: list[TurnFrame]) -> AsyncIterator[TurnFrame]:
    for frame in frames:
        yield frame


def _stream(frames: AsyncIterator[TurnFrame], status: int) -> Response:
    async def sse() -> AsyncIterator[ServerSentEvent]:
        async for frame in frames:
            yield _sse(frame)

    return EventSourceResponse(sse(), status_code=status, headers=SSE_HEADERS)


def _held_turn(request: Request, tenant: str, session_id: str, turn: int) -> TurnLog:
    host = service_of(request).agent_host
    scoped = journal_for(request, tenant).journal
    log = None if host is None else host.frames.get((scoped.tenant, session_id, turn))
    if log is None:
        raise Problem(
            404,
            "Turn not found",
            f"this server holds no stream of turn {turn} of session {session_id!r}: no turn"
            " starts at that seq, it ran on another server, or it ended too long ago (read its"
            " events instead)",
        )
    return log


@router.get(
    "/sessions/{session_id}/turns/{turn}/stream",
    response_class=Response,
    responses={
        200: {
            "content": {"text/event-stream": {}},
            "description": "SSE: the turn's frames after the cursor, then live ones",
        }
    },
)
async def stream_turn(
    request: Request,
    session_id: str,
    turn: TurnSeq,
    tenant: Tenant,
    after: FrameCursor = None,
    follow: bool = True,
    last_event_id: Annotated[str | None, Header(alias="Last-Event-ID", max_length=80)] = None,
) -> Response:
    """Reconnect to a turn's stream: every frame after `Last-Event-ID` (or `?after=`; from the
    start without either), then the live ones until the turn ends; also after it ended, for as
    long as the server keeps its frames. A cursor of an earlier run (the server restarted, or
    the turn was resumed) gets a `reset` frame and the current run from its start.
    `?follow=false` sends what is held and ends."""
    await journal_for(request, tenant).get_session(session_id)  # 404 comes first
    log = _held_turn(request, tenant, session_id, turn)
    text = last_event_id if last_event_id is not None else after
    cursor = None
    if text:
        cursor = FrameId.parse(text)
        if cursor is None or cursor.turn != turn:
            raise Problem(
                422,
                "Invalid request",
                f"{text!r} is not a frame id of turn {turn} ({turn}:<run>:<n>, as sent in id:)",
            )

    async def sse() -> AsyncIterator[ServerSentEvent]:
        async for frame in log.follow(cursor, live=follow):
            yield _sse(frame)

    return held_stream(service_of(request), request.state.key_id, sse())


@router.post("/sessions/{session_id}/turns/{turn}/cancel", response_model=TurnCancelled)
async def cancel_turn(
    request: Request, session_id: str, turn: TurnSeq, tenant: Tenant
) -> TurnCancelled:
    """Cut a running turn short: the model call stops, a tool already running finishes, and
    the text the user was sent is journaled as the reply, marked `"interrupted": true`. Answers
    once that is durable; 409 if the turn had already ended."""
    await journal_for(request, tenant).get_session(session_id)
    log = _held_turn(request, tenant, session_id, turn)
    if log.ended or log.control is None:
        raise Problem(409, "Turn ended", f"turn {turn} of session {session_id!r} has ended")
    log.control.cancel()
    await log.wait_ended()
    final = next((f for f in reversed(log.frames) if f.event == "assistant_message"), None)
    event = None if final is None else EventOut.model_validate(json.loads(final.data))
    interrupted = event is not None and event.payload.get("interrupted") is True
    return TurnCancelled(session_id=session_id, turn=turn, interrupted=interrupted, event=event)
