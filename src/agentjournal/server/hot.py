"""The hot route, POST /v1/sessions/{id}/events, answered without FastAPI's per-request machinery.

An append is the request a service takes most of. Through FastAPI it pays for route matching over
every route, the dependency solver, a `Request`, the body parsed a second time and the response
class negotiation: more CPU than the journal's own part on the event loop (bench/README.md, the
wrk section). `HotAppend` sits inside `BodyGuard` (which has already counted, checked and parsed
the body) and answers a well-formed append itself with the same steps the route takes: the body
validated by the route's own models, the caller's key and rate limit, `append_events`, the same
metrics and the same problem+json answers, as (status, headers, body) sent as the two ASGI messages
a `Response` would send, without making one. Anything else — another route, a body the models
refuse, an empty body — goes on to FastAPI unchanged, so every error reads as before.
"""

from __future__ import annotations

import json
import re
import time
from typing import Any

from pydantic import ValidationError
from starlette.responses import JSONResponse, Response
from starlette.types import ASGIApp, Receive, Scope, Send

from agentjournal.errors import JournalError
from agentjournal.server.body import PARSED_BODY
from agentjournal.server.models import AppendBatch, AppendOne, EventIn
from agentjournal.server.problems import (
    Problem,
    journal_error_response,
    raised_problem_response,
)
from agentjournal.server.service import Service

__all__ = [
    "HOT_PATH",
    "Answer",
    "HotAppend",
    "append_events",
    "hot_answer",
    "response_answer",
    "send_answer",
]

# As Starlette compiles the route's "/v1/sessions/{session_id}/events".
HOT_PATH = re.compile(r"/v1/sessions/([^/]+)/events")
_MISSING = object()


# JSONResponse's own encoding (starlette.responses.JSONResponse.render), with the encoder made
# once: `json.dumps` with these options builds a new encoder on every call.
_RESPONSE_JSON = json.JSONEncoder(
    ensure_ascii=False, allow_nan=False, indent=None, separators=(",", ":")
)
_APPLICATION_JSON = (b"content-type", b"application/json")

# An answer as ASGI sends it: (status, raw headers, body), the headers as a Starlette `Response`
# lists them.
Answer = tuple[int, list[tuple[bytes, bytes]], bytes | memoryview]


async def appended(
    service: Service, tenant: str, session_id: str, body: AppendOne | AppendBatch
) -> Answer:
    """Append one event or a batch for the tenant: 201, or 200 with the original on an
    idempotent repeat; what `JSONResponse` would send (content-length, then content-type)."""
    started = time.perf_counter()
    # The fields of EventIn, as model_dump() gives them (the payload is the validated copy).
    if isinstance(body, AppendBatch):
        batch = [_event_fields(event) for event in body.events]
    else:
        batch = [_event_fields(body)]
    events, created = await service.journal_for(tenant).append_many_ex(
        session_id, batch, expected_seq=body.expected_seq
    )
    if created:
        metrics = service.metrics
        metrics.appended.inc(len(events))
        metrics.append_seconds.observe(time.perf_counter() - started)
    # EventOut's fields are exactly Event.to_dict()'s, all JSON already.
    out: list[dict[str, Any]] = [event.to_dict() for event in events]
    rendered: dict[str, Any] | list[dict[str, Any]]
    rendered = {"events": out} if isinstance(body, AppendBatch) else out[0]
    content = _RESPONSE_JSON.encode(rendered).encode("utf-8")
    headers = [(b"content-length", str(len(content)).encode("latin-1")), _APPLICATION_JSON]
    return 201 if created else 200, headers, content


class _Rendered(JSONResponse):
    """A JSONResponse of JSON already rendered by `_RESPONSE_JSON`."""

    def render(self, content: Any) -> bytes:
        rendered: bytes = content
        return rendered


async def append_events(
    service: Service, tenant: str, session_id: str, body: AppendOne | AppendBatch
) -> JSONResponse:
    """The route's answer: what `appended` sends, as a `JSONResponse`."""
    status, _, content = await appended(service, tenant, session_id, body)
    return _Rendered(content, status_code=status)


def _event_fields(event: EventIn) -> dict[str, Any]:
    return {"type": event.type, "payload": event.payload, "idempotency_key": event.idempotency_key}


def response_answer(response: Response) -> Answer:
    """What `response` sends (none of the responses here has a background task)."""
    return response.status_code, response.raw_headers, response.body


async def hot_answer(service: Service, scope: Scope) -> Answer | None:
    """The answer to a well-formed append (`BodyGuard` has left its parsed body in the scope),
    with the route's own steps; None for anything else, which FastAPI answers."""
    parsed = scope.get(PARSED_BODY, _MISSING)
    if (
        type(parsed) is not dict  # neither model takes anything but an object
        or scope["type"] != "http"
        or scope["method"] != "POST"
        or scope.get("root_path")
    ):
        return None
    match = HOT_PATH.fullmatch(scope["path"])
    if match is None:
        return None
    try:
        # `AppendOne | AppendBatch` tried in turn, as the route's union does: both refuse
        # unknown fields and only a batch has (and needs) "events", so at most one can take it.
        body: AppendOne | AppendBatch = (
            AppendBatch.model_validate(parsed)
            if "events" in parsed
            else AppendOne.model_validate(parsed)
        )
    except ValidationError:
        return None  # FastAPI words the 422 (after the key check)
    authorization = None
    for name, value in scope["headers"]:
        if name == b"authorization":
            authorization = value.decode("latin-1")
            break
    try:
        # As the route's Tenant dependency: who the caller is, then their rate limit.
        peer = scope.get("client")
        tenant, key_id = service.caller(authorization, peer and peer[0])
        service.admit(key_id)
        return await appended(service, tenant, match.group(1), body)
    except Problem as exc:
        return response_answer(raised_problem_response(exc))
    except JournalError as exc:
        return response_answer(journal_error_response(exc, scope["method"], scope["path"]))


async def send_answer(answer: Answer, send: Send) -> None:
    """What `Response.__call__` sends (none of these has a background task)."""
    status, headers, content = answer
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": content})


class HotAppend:
    """ASGI middleware (inside `BodyGuard`): appends answered here; everything else to `app`."""

    def __init__(self, app: ASGIApp, service: Service) -> None:
        self.app = app
        self.service = service

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        answer = await hot_answer(self.service, scope)
        if answer is None:
            await self.app(scope, receive, send)
            return
        await send_answer(answer, send)
