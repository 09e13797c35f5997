"""Errors as `application/problem+json` (RFC 9457): one mapping from our error tree to statuses."""

from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException
from starlette.responses import JSONResponse

from agentjournal.errors import (
    Conflict,
    ContextTooLarge,
    InvalidArgument,
    JournalError,
    ModelError,
    PayloadTooLarge,
    SearchUnavailable,
    SessionClosed,
    SessionNotFound,
    StorageError,
    TaskNotFound,
    TurnAbandoned,
    UnknownToolCall,
)

__all__ = [
    "PROBLEM_JSON",
    "Problem",
    "install_problem_handlers",
    "journal_error_response",
    "journal_problem",
    "problem_body",
    "problem_response",
    "raised_problem_response",
]

PROBLEM_JSON = "application/problem+json"
log = logging.getLogger("agentjournal.server")

# Most specific first: PayloadTooLarge is checked before InvalidArgument, and so on.
_STATUS: list[tuple[type[JournalError], int, str]] = [
    (SessionNotFound, 404, "Session not found"),
    (TaskNotFound, 404, "Task not found"),
    (PayloadTooLarge, 413, "Payload too large"),
    (ContextTooLarge, 422, "Context too large"),
    (InvalidArgument, 422, "Invalid request"),
    (UnknownToolCall, 409, "Unknown tool call"),
    (SessionClosed, 409, "Session closed"),
    (Conflict, 409, "Conflict"),
    (ModelError, 502, "Model failed"),
    (SearchUnavailable, 501, "Search unavailable"),
    (TurnAbandoned, 503, "Shutting down"),
    (StorageError, 503, "Storage unavailable"),
]


class Problem(Exception):
    """An HTTP error with a problem+json body; raise it from routes and middleware."""

    def __init__(self, status: int, title: str, detail: str, **extra: Any) -> None:
        super().__init__(detail)
        self.status = status
        self.title = title
        self.detail = detail
        self.extra = extra


def problem_body(status: int, title: str, detail: str, **extra: Any) -> dict[str, Any]:
    slug = title.lower().replace(" ", "-")
    body = {"type": f"urn:agentjournal:problem:{slug}", "title": title, "status": status}
    body["detail"] = detail
    body.update(extra)
    return body


def problem_response(
    status: int, title: str, detail: str, headers: dict[str, str] | None = None, **extra: Any
) -> JSONResponse:
    body = problem_body(status, title, detail, **extra)
    return JSONResponse(body, status_code=status, media_type=PROBLEM_JSON, headers=headers)


def journal_problem(exc: JournalError) -> tuple[int, str]:
    for kind, status, title in _STATUS:
        if isinstance(exc, kind):
            return status, title
    return 500, "Internal error"


def raised_problem_response(exc: Problem) -> JSONResponse:
    """The answer to a raised `Problem` (its `headers` extra becomes response headers)."""
    extra = dict(exc.extra)
    headers = extra.pop("headers", None)
    return problem_response(exc.status, exc.title, exc.detail, headers, **extra)


def journal_error_response(exc: JournalError, method: str, path: str) -> JSONResponse:
    """The answer to a journal error; 5xx ones are logged."""
    status, title = journal_problem(exc)
    if status >= 500:
        log.error("storage error on %s %s: %s", method, path, exc)
    return problem_response(status, title, str(exc))


def install_problem_handlers(app: FastAPI) -> None:
    async def on_problem(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, Problem)
        return raised_problem_response(exc)

    async def on_journal_error(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, JournalError)
        return journal_error_response(exc, request.method, request.url.path)

    async def on_validation(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, RequestValidationError)
        details = "; ".join(
            f"{'.'.join(str(p) for p in error.get('loc', ()))}: {error.get('msg', '')}"
            for error in exc.errors()
        )
        return problem_response(422, "Invalid request", details or "the request is not valid")

    async def on_http(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, HTTPException)
        titles = {404: "Not found", 405: "Method not allowed", 401: "Unauthorized"}
        title = titles.get(exc.status_code, "HTTP error")
        detail = str(exc.detail)
        if exc.status_code == 404 and detail == "Not Found":
            detail = f"no route for {request.method} {request.url.path}"
        if exc.status_code == 405:
            detail = f"{request.method} is not allowed on {request.url.path}"
        return problem_response(exc.status_code, title, detail, dict(exc.headers or {}))

    async def on_unexpected(request: Request, exc: Exception) -> JSONResponse:
        log.exception("unexpected error on %s %s", request.method, request.url.path)
        return problem_response(500, "Internal error", "the server failed; the error is logged")

    app.add_exception_handler(Problem, on_problem)
    app.add_exception_handler(JournalError, on_journal_error)
    app.add_exception_handler(RequestValidationError, on_validation)
    app.add_exception_handler(HTTPException, on_http)
    app.add_exception_handler(Exception, on_unexpected)
