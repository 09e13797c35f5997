"""`ServiceApp` answers appends before FastAPI's per-request layers: every answer must be what
FastAPI's own way gives. The same requests go to two apps over two databases made alike, one
called as the service is (`ServiceApp.__call__`), one through `FastAPI.__call__` (the framework's
telemetry check, Starlette's error and body-limit layers, then the middleware stack): statuses,
headers, bodies and the error metrics must match, ids and times aside."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from starlette.types import ASGIApp, Receive, Scope, Send
from test_http import metric

from agentjournal import Journal
from agentjournal.keys import ApiKeys
from agentjournal.server import create_app
from agentjournal.server.hot import _event_fields
from agentjournal.server.models import AppendOne, EventIn
from agentjournal.server.service import Limits
from agentjournal.server.service_app import ServiceApp

SESSION = "s-alike"
OTHER = "s-other"  # another tenant's
ONE = {"type": "user_message", "payload": {"content": "你好 hi"}, "idempotency_key": "k1"}
JSON = {"content-type": "application/json"}

# (what the request is, method, path, body bytes, extra headers, whether to send the key)
Request = tuple[str, str, str, bytes | None, dict[str, str], bool]
EVENTS = f"/v1/sessions/{SESSION}/events"


def _json(value: Any) -> bytes:
    return json.dumps(value).encode()


REQUESTS: list[Request] = [
    ("created", "POST", EVENTS, _json(ONE), JSON, True),
    ("an idempotent repeat", "POST", EVENTS, _json(ONE), JSON, True),
    (
        "the same key, another event",
        "POST",
        EVENTS,
        _json({**ONE, "payload": {"content": "?"}}),
        JSON,
        True,
    ),
    ("a batch", "POST", EVENTS, _json({"events": [{"type": "x.y"}] * 2}), JSON, True),
    ("expected_seq met", "POST", EVENTS, _json({"type": "x.y", "expected_seq": 4}), JSON, True),
    ("expected_seq missed", "POST", EVENTS, _json({"type": "x.y", "expected_seq": 1}), JSON, True),
    ("a body the models refuse", "POST", EVENTS, _json({"type": "Bad"}), JSON, True),
    ("an extra field", "POST", EVENTS, _json({**ONE, "extra": 1}), JSON, True),
    ("a payload that is a list", "POST", EVENTS, _json({"type": "x.y", "payload": []}), JSON, True),
    (
        "a core type's bad payload",
        "POST",
        EVENTS,
        _json({"type": "user_message", "payload": {"content": 1}}),
        JSON,
        True,
    ),
    ("an empty body", "POST", EVENTS, b"", JSON, True),
    ("no content type", "POST", EVENTS, _json(ONE), {}, True),
    ("text/plain", "POST", EVENTS, _json(ONE), {"content-type": "text/plain"}, True),
    ("malformed JSON", "POST", EVENTS, b'{"type": ', JSON, True),
    ("NaN", "POST", EVENTS, b'{"type": "x.y", "payload": {"a": NaN}}', JSON, True),
    ("a key twice", "POST", EVENTS, b'{"type": "x.y", "type": "x.z"}', JSON, True),
    ("too large", "POST", EVENTS, _json({"type": "x.y", "payload": {"a": "x" * 5000}}), JSON, True),
    ("no key", "POST", EVENTS, _json(ONE), JSON, False),
    ("a wrong key", "POST", EVENTS, _json(ONE), {**JSON, "authorization": "Bearer nope"}, True),
    ("not bearer", "POST", EVENTS, _json(ONE), {**JSON, "authorization": "Basic eA=="}, True),
    ("no such session", "POST", "/v1/sessions/nope/events", _json(ONE), JSON, True),
    ("another tenant's session", "POST", f"/v1/sessions/{OTHER}/events", _json(ONE), JSON, True),
    ("a trailing slash", "POST", EVENTS + "/", _json(ONE), JSON, True),
    ("GET the events", "GET", EVENTS, None, {}, True),
    ("over the rate limit", "POST", EVENTS, _json(ONE), JSON, True),
    ("still over it", "POST", EVENTS, _json({"type": "Bad"}), JSON, True),
]
# A token is spent by each request with a valid key that BodyGuard lets through: 14 of them
# before "over the rate limit".
BURST = 14
STATUSES = {
    "created": 201,
    "an idempotent repeat": 200,
    "the same key, another event": 409,
    "a batch": 201,
    "expected_seq met": 201,
    "expected_seq missed": 409,
    "a body the models refuse": 422,
    "an extra field": 422,
    "a payload that is a list": 422,
    "a core type's bad payload": 422,
    "an empty body": 422,
    "no content type": 415,
    "text/plain": 415,
    "malformed JSON": 400,
    "NaN": 422,
    "a key twice": 422,
    "too large": 413,
    "no key": 401,
    "a wrong key": 401,
    "not bearer": 401,
    "no such session": 404,
    "another tenant's session": 404,
    "a trailing slash": 307,
    "GET the events": 200,
    "over the rate limit": 429,
    "still over it": 429,
    "metrics": 0,
}


def _make(db: Path) -> tuple[ServiceApp, str]:
    journal = Journal.open(db)
    key = ApiKeys(journal.storage).create("acme", "test")[1]
    journal.for_tenant("acme").create_session("alike", session_id=SESSION)
    journal.for_tenant("umbrella").create_session("other", session_id=OTHER)
    limits = Limits(max_body_bytes=4096, requests_per_second=0.001, burst=BURST)
    app = create_app(journal, limits=limits)
    assert isinstance(app, ServiceApp)
    return app, key


def _frameworks_way(app: FastAPI) -> ASGIApp:
    async def call(scope: Scope, receive: Receive, send: Send) -> None:
        await FastAPI.__call__(app, scope, receive, send)

    return call


def _normal(value: Any) -> Any:
    """Ids and times made fresh by each database, blanked."""
    if isinstance(value, dict):
        return {k: "…" if k in ("event_id", "created_at") else _normal(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_normal(v) for v in value]
    return value


async def _answers(asgi: ASGIApp, key: str) -> list[tuple[str, int, dict[str, str], Any]]:
    transport = httpx.ASGITransport(app=asgi, client=("127.0.0.1", 40000))
    answers = []
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as http:
        for name, method, path, body, headers, keyed in REQUESTS:
            sent = {"authorization": f"Bearer {key}", **headers} if keyed else headers
            response = await http.request(method, path, content=body, headers=sent)
            kept = {k: v for k, v in response.headers.items() if k != "date"}
            if "retry-after" in kept:
                # The token bucket's wait: whole seconds until the next token, counted from now,
                # so it depends on when the request came (round(1/rate - seconds since the last
                # refill)): a positive integer in both, not the same one.
                assert int(kept["retry-after"]) >= 1
                kept["retry-after"] = "…"
            content = response.json() if response.content else None
            answers.append((name, response.status_code, kept, _normal(content)))
        metrics = (await http.get("/metrics", headers={"authorization": f"Bearer {key}"})).text
    errors = "agentjournal_http_errors_total"
    counted = {s: metric(metrics, errors, {"status": s}) for s in ("400", "401", "404", "409")}
    counted |= {s: metric(metrics, errors, {"status": s}) for s in ("413", "415", "422", "429")}
    appended = metric(metrics, "agentjournal_events_appended_total")
    answers.append(("metrics", 0, {}, {"errors": counted, "appended": appended}))
    return answers


def test_appends_answered_directly_read_as_frameworks_way(tmp_path: Path) -> None:
    direct, direct_key = _make(tmp_path / "direct.db")
    framework, framework_key = _make(tmp_path / "framework.db")
    got = asyncio.run(_answers(direct, direct_key))
    expected = asyncio.run(_answers(_frameworks_way(framework), framework_key))
    assert direct._direct_appends > 0  # the direct way was taken
    assert framework._direct_appends == 0  # and this one never took it
    for answer, reference in zip(got, expected, strict=True):
        assert answer == reference, answer[0]
    statuses = {name: status for name, status, _, _ in got}
    assert statuses == STATUSES


def test_event_fields_are_model_dumps() -> None:
    """What the hot path hands the journal is what `model_dump` gave (a field added to EventIn
    must be added there too)."""
    event = EventIn.model_validate({"type": "a.b", "payload": {"x": [1]}, "idempotency_key": "k"})
    assert _event_fields(event) == event.model_dump()
    one = AppendOne.model_validate({"type": "a.b", "expected_seq": 3})
    assert _event_fields(one) == one.model_dump(exclude={"expected_seq"})
    assert set(EventIn.model_fields) == {"type", "payload", "idempotency_key"}


def test_an_unexpected_error_is_answered_by_the_apps_500_handler_and_raised_again(
    tmp_path: Path,
) -> None:
    """What `ServerErrorMiddleware` does on FastAPI's way: the app's own 500 problem, and the
    exception raised again for the server to log. (Nothing in the append fails this way on its
    own: the fault is put in the service's journal lookup.)"""

    def broken(tenant: str) -> Any:
        raise RuntimeError("broken on purpose")

    async def post(asgi: ASGIApp, key: str, raise_again: bool) -> httpx.Response:
        transport = httpx.ASGITransport(app=asgi, raise_app_exceptions=raise_again)
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as http:
            headers = {"authorization": f"Bearer {key}", **JSON}
            return await http.post(EVENTS, content=_json(ONE), headers=headers)

    answers = []
    for name, way in (("direct", lambda app: app), ("framework", _frameworks_way)):
        app, key = _make(tmp_path / f"{name}.db")
        app.state.service.journal_for = broken
        response = asyncio.run(post(way(app), key, raise_again=False))
        kept = {k: v for k, v in response.headers.items() if k != "date"}
        answers.append((response.status_code, kept, response.json()))
        with pytest.raises(RuntimeError, match="broken on purpose"):
            asyncio.run(post(way(app), key, raise_again=True))
        assert (app._direct_appends > 0) == (name == "direct")
    assert answers[0] == answers[1]
    assert answers[0][0] == 500
    assert answers[0][2]["title"] == "Internal error"
