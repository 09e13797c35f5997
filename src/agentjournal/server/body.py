"""Request bodies: counted as they stream in (never trusting Content-Length), JSON only, parsed
strictly (no NaN, no duplicate keys) before any route sees them."""

from __future__ import annotations

from typing import Any

from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from agentjournal.errors import InvalidEvent
from agentjournal.events import loads_strict
from agentjournal.server.problems import problem_response

__all__ = ["PARSED_BODY", "BodyGuard", "Parsed", "read_body", "replaying"]

# The scope key under which the guard leaves the body it parsed (absent for an empty body), so
# the hot route need not parse it a second time.
PARSED_BODY = "agentjournal.parsed_body"


class BodyGuard:
    """ASGI middleware: 413 past `max_bytes`, 415 if not JSON, 400 if not JSON at all, 422 if JSON
    that the journal would refuse (NaN, Infinity, a key twice). Replays the body downstream, and
    leaves what it parsed in `scope[PARSED_BODY]`."""

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] not in ("POST", "PUT", "PATCH"):
            await self.app(scope, receive, send)
            return
        read = await read_body(scope, receive, self.max_bytes)
        if read is None:
            return
        body, outcome = read
        if isinstance(outcome, Response):
            await outcome(scope, receive, send)
            return
        if outcome is not None:
            scope[PARSED_BODY] = outcome.value
        await self.app(scope, replaying(body, receive), send)


async def read_body(
    scope: Scope, receive: Receive, max_bytes: int
) -> tuple[bytes, Response | Parsed | None] | None:
    """The request body as `BodyGuard` takes it: (body, the problem to answer with, or what it
    parsed, or None when it is empty); None when the client went away before sending it all."""
    chunks: list[bytes] = []
    size = 0
    more = True
    while more:
        message = await receive()
        if message["type"] == "http.disconnect":
            return None
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > max_bytes:
            detail = f"the request body is over {max_bytes} bytes"
            return b"", problem_response(413, "Payload too large", detail)
        chunks.append(chunk)
        more = message.get("more_body", False)
    body = b"".join(chunks)
    checked = _check(scope, body)
    if isinstance(checked, tuple):
        return body, problem_response(*checked)
    return body, checked


def replaying(body: bytes, receive: Receive) -> Receive:
    """`receive` for the app downstream: the body already read, then whatever comes next."""
    delivered = False

    async def replay() -> Message:
        nonlocal delivered
        if not delivered:
            delivered = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay


class Parsed:
    """A body that parsed: its JSON value."""

    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        self.value = value


def _check(scope: Scope, body: bytes) -> tuple[int, str, str] | Parsed | None:
    """A problem (status, title, detail), or the parsed body; None for an empty body."""
    if not body:
        return None
    headers = dict(scope.get("headers", []))
    media = headers.get(b"content-type", b"").split(b";")[0].strip().lower()
    if media != b"application/json":
        return 415, "Unsupported media type", "send the body as Content-Type: application/json"
    try:
        return Parsed(loads_strict(body))
    except InvalidEvent as exc:
        message = str(exc)
        if message.startswith("not valid JSON"):
            return 400, "Malformed JSON", message
        return 422, "Invalid request", message
