"""What every route module shares: who the caller is, their tenant's journal, and how created
resources and errors are answered and documented."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import Depends, Header, Request
from fastapi.responses import JSONResponse

from agentjournal.aio import AsyncJournal
from agentjournal.server.problems import PROBLEM_JSON
from agentjournal.server.service import Service

__all__ = [
    "ERROR_RESPONSES",
    "Format",
    "IdempotencyKey",
    "ReplayFormat",
    "Tenant",
    "created_response",
    "journal_for",
    "repeat_doc",
    "service_of",
]

_PROBLEM = {"content": {PROBLEM_JSON: {"schema": {"$ref": "#/components/schemas/Problem"}}}}
ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    code: {"description": text, **_PROBLEM}
    for code, text in {
        400: "malformed JSON",
        401: "missing or bad API key",
        403: "no API keys exist and the caller is not on this machine",
        404: "no such session or task (or another tenant's)",
        409: "conflict: expected_seq, idempotency key, tool call, closed session, task attempt",
        413: "body or payload too large",
        415: "not application/json",
        422: "invalid request or event",
        429: "rate or stream limit",
    }.items()
}
Format = Literal["openai", "anthropic"]
ReplayFormat = Literal["openai", "anthropic", "responses"]


def service_of(request: Request) -> Service:
    service: Service = request.app.state.service
    return service


async def _tenant(request: Request, authorization: Annotated[str | None, Header()] = None) -> str:
    # async: a sync dependency costs a thread-pool round trip per request, and the key check is
    # a dict hit (a database read once per key every few seconds).
    service = service_of(request)
    client = request.client
    tenant, key_id = service.caller(authorization, None if client is None else client.host)
    service.admit(key_id)
    request.state.key_id = key_id
    return tenant


Tenant = Annotated[str, Depends(_tenant)]
IdempotencyKey = Annotated[
    str | None, Header(alias="Idempotency-Key", min_length=1, max_length=255)
]


def journal_for(request: Request, tenant: str) -> AsyncJournal:
    return service_of(request).journal_for(tenant)


def created_response(model: Any, created: bool) -> JSONResponse:
    return JSONResponse(model.model_dump(mode="json"), status_code=201 if created else 200)


def repeat_doc(model: Any) -> dict[int | str, dict[str, Any]]:
    """An idempotent repeat answers 200 with the original: document it beside the 201."""
    return {200: {"model": model, "description": "an idempotent repeat: the original"}}
