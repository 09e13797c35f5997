"""Tenants never see each other, over a real keyed server (tenants "acme" = A and "beta" = B).

The cross-tenant matrix is generated from the app's routes, not listed by hand: the routes come
from `create_app(...).routes`; `REQUESTS` only says what to send to each. A route with a path
parameter that `REQUESTS` does not know fails the coverage test (and is still probed with a bare
request), so a route added later cannot be skipped silently.

For every such route and every request variant: tenant B's key on tenant A's session answers 404,
byte for byte like B's key on a session id that does not exist (the id in `detail` aside), and A's
session, events, transcript and both tenants' session lists are unchanged; then the same request
with A's own key succeeds (2xx), which shows the request was one that would have had an effect.
"""

from __future__ import annotations

import contextlib
import json
import re
import secrets
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest

from agentjournal import Journal
from agentjournal.server import create_app

A, B = "acme", "beta"
PROBLEM_JSON = "application/problem+json"
PARAM = re.compile(r"{([^}:]+)(?::[^}]*)?}")

# The seed every A session gets: seq 1 session_created, then seq 2..5.
SEED_EVENTS: list[dict[str, Any]] = [
    {"type": "user_message", "payload": {"content": "hello"}, "idempotency_key": "a-1"},
    {"type": "tool_call", "payload": {"call_id": "c1", "name": "lookup", "arguments": "{}"}},
    {"type": "tool_result", "payload": {"call_id": "c1", "content": "42"}},
    {"type": "assistant_message", "payload": {"content": "It is 42."}},
]


@dataclass(frozen=True)
class Variant:
    """One request to a route. `follow_stream`: the response may be an endless SSE stream, so
    only its status line and headers are read."""

    label: str
    query: dict[str, str] = field(default_factory=dict)
    body: Any = None
    headers: dict[str, str] = field(default_factory=dict)
    follow_stream: bool = False


# What to send to each route that takes a path parameter, keyed by (method, route path). Each
# variant is a request that A's own key may send successfully on a fresh seeded A session.
REQUESTS: dict[tuple[str, str], list[Variant]] = {
    ("GET", "/v1/sessions/{session_id}"): [Variant("read")],
    ("PATCH", "/v1/sessions/{session_id}"): [
        Variant("title", body={"title": "taken over"}),
        Variant("metadata", body={"metadata": {"owner": "beta"}}),
        Variant("archive", body={"status": "archived"}),
        Variant("delete", body={"status": "deleted"}),
    ],
    ("DELETE", "/v1/sessions/{session_id}"): [
        Variant("soft"),
        Variant("purge", query={"purge": "true"}),
    ],
    ("POST", "/v1/sessions/{session_id}/events"): [
        Variant("one", body={"type": "user_message", "payload": {"content": "from beta"}}),
        Variant(
            "expected_seq",
            body={"type": "user_message", "payload": {"content": "x"}, "expected_seq": 5},
        ),
        Variant(
            "batch",
            body={
                "events": [
                    {"type": "user_message", "payload": {"content": "b1"}},
                    {"type": "myapp.note", "payload": {"n": 1}},
                ],
                "expected_seq": 5,
            },
        ),
        # A's own idempotency key with A's payload: must not hand B A's original event.
        Variant("idempotent_repeat", body=SEED_EVENTS[0]),
    ],
    ("GET", "/v1/sessions/{session_id}/events"): [
        Variant("page", query={"after": "0", "limit": "1000"}),
    ],
    ("GET", "/v1/sessions/{session_id}/events/stream"): [
        Variant("backlog", query={"follow": "false"}),
        Variant("live", follow_stream=True),
        Variant("resume", headers={"Last-Event-ID": "1"}, follow_stream=True),
    ],
    ("GET", "/v1/sessions/{session_id}/messages"): [
        Variant("all"),
        Variant("last", query={"last": "2"}),
    ],
    ("GET", "/v1/sessions/{session_id}/replay"): [
        Variant("openai"),
        Variant("anthropic_until", query={"format": "anthropic", "until": "3"}),
    ],
    ("GET", "/v1/sessions/{session_id}/context"): [
        Variant("fits", query={"max_tokens": "1000"}),
    ],
    ("POST", "/v1/sessions/{session_id}/fork"): [
        Variant("whole", body={}),
        Variant("at_seq", body={"at_seq": 2, "title": "fork"}, headers={"Idempotency-Key": "f1"}),
    ],
    ("POST", "/v1/sessions/{session_id}/compact"): [
        Variant("compact", body={"until_seq": 2, "summary": "greeting"}),
    ],
}


def app_operations(app: Any) -> list[tuple[str, str]]:
    """Every (method, path) the app routes, read from `app.routes` (recent FastAPI keeps an
    included router as one entry; `iter_route_contexts` flattens them). HEAD is served by the GET
    endpoint and is sent the GET requests."""
    try:
        from fastapi.routing import iter_route_contexts
    except ImportError:  # older FastAPI: app.routes is already flat
        routes: list[Any] = list(app.routes)
    else:
        routes = list(iter_route_contexts(app.routes))
    operations: set[tuple[str, str]] = set()
    for route in routes:
        path = getattr(route, "path", None)
        methods = getattr(route, "methods", None)
        assert isinstance(path, str), f"a route without a path: {route!r}"
        assert methods, f"a route without methods: {route!r}"
        operations.update((method, path) for method in methods)
    return sorted(operations)


@pytest.fixture(scope="module")
def operations(tmp_path_factory: pytest.TempPathFactory) -> list[tuple[str, str]]:
    """The app's routes, from an app built in-process on a scratch database."""
    with Journal.open(tmp_path_factory.mktemp("routes") / "routes.db") as journal:
        found = app_operations(create_app(journal))
    assert ("GET", "/v1/sessions/{session_id}") in found, found  # the enumeration works at all
    return found


@pytest.fixture(scope="module")
def http(keyed_server: Any) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=keyed_server.base_url, timeout=10.0) as client:
        yield client


@dataclass
class Reply:
    status: int
    content_type: str
    headers: httpx.Headers
    body: Any  # parsed JSON, raw text, or None for an SSE stream that was not read


def send(
    http: httpx.Client,
    method: str,
    path: str,
    variant: Variant,
    headers: dict[str, str],
    extra_query: dict[str, str] | None = None,
) -> Reply:
    """Send a request; read an SSE response's status line only when it may never end."""
    kwargs: dict[str, Any] = {
        "params": {**variant.query, **(extra_query or {})},
        "headers": {**variant.headers, **headers},
    }
    if variant.body is not None:
        kwargs["json"] = variant.body
    elif method in ("POST", "PATCH", "PUT"):
        kwargs["json"] = {}
    with http.stream(method, path, **kwargs) as response:
        content_type = response.headers.get("content-type", "")
        if content_type.startswith("text/event-stream") and variant.follow_stream:
            return Reply(response.status_code, content_type, response.headers, None)
        raw = response.read()
    body: Any = raw.decode("utf-8", errors="replace")
    if "json" in content_type:
        with contextlib.suppress(ValueError):
            body = json.loads(raw)
    return Reply(response.status_code, content_type, response.headers, body)


def requests_for(method: str, path: str) -> list[Variant]:
    return REQUESTS.get(("GET" if method == "HEAD" else method, path), [])


def fill(path: str, session_id: str) -> str:
    """The route's path with every parameter set to `session_id`."""
    return PARAM.sub(session_id, path)


def missing_id() -> str:
    return f"sess_{secrets.token_hex(8)}"


class Tenants:
    """Requests as A or B on the keyed server, plus snapshots of what A and B can read."""

    def __init__(self, http: httpx.Client, keys: dict[str, str]) -> None:
        self.http = http
        self.keys = keys

    def auth(self, tenant: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.keys[tenant]}"}

    def ok(self, tenant: str, method: str, path: str, **kwargs: Any) -> Any:
        response = self.http.request(method, path, headers=self.auth(tenant), **kwargs)
        assert response.is_success, (method, path, response.status_code, response.text)
        return response.json()

    def seeded_session(self, tenant: str = A) -> str:
        """A fresh session of `tenant`, seq 1..5: a message, a tool call and result, a reply."""
        session = self.ok(
            tenant,
            "POST",
            "/v1/sessions",
            json={"title": "private", "system_prompt": "be terse", "metadata": {"k": "v"}},
        )
        session_id = session["session_id"]
        appended = self.ok(
            tenant, "POST", f"/v1/sessions/{session_id}/events", json={"events": SEED_EVENTS}
        )
        assert [event["seq"] for event in appended["events"]] == [2, 3, 4, 5]
        return str(session_id)

    def session_ids(self, tenant: str) -> list[str]:
        page = self.ok(tenant, "GET", "/v1/sessions", params={"status": "all", "limit": 1000})
        return sorted(session["session_id"] for session in page["sessions"])

    def feed(self, tenant: str) -> list[dict[str, Any]]:
        """The tenant's whole global feed (SSE, follow=false), as the events' JSON."""
        events = []
        with self.http.stream(
            "GET", "/v1/events/stream", params={"follow": "false"}, headers=self.auth(tenant)
        ) as response:
            assert response.status_code == 200, response.read()
            for line in response.iter_lines():
                if line.startswith("data:"):
                    events.append(json.loads(line[len("data:") :].strip()))
        return events

    def snapshot(self, session_id: str) -> dict[str, Any]:
        """Everything about A's session that A can read, and both tenants' session lists."""
        base = f"/v1/sessions/{session_id}"
        return {
            "session": self.ok(A, "GET", base),
            "events": self.ok(A, "GET", f"{base}/events", params={"limit": 1000}),
            "messages": self.ok(A, "GET", f"{base}/messages"),
            "sessions_of_a": self.session_ids(A),
            "sessions_of_b": self.session_ids(B),
        }


@pytest.fixture(scope="module")
def tenants(http: httpx.Client, keyed_server: Any) -> Tenants:
    assert {A, B} <= set(keyed_server.keys)
    return Tenants(http, keyed_server.keys)


def comparable(reply: Reply, session_id: str) -> dict[str, Any]:
    """A problem reply with the session id it names replaced, for comparing two replies."""
    body = reply.body
    if isinstance(body, dict):
        body = {
            k: v.replace(session_id, "<id>") if isinstance(v, str) else v for k, v in body.items()
        }
    return {"status": reply.status, "content_type": reply.content_type, "body": body}


def test_every_route_with_a_path_parameter_is_in_the_matrix(
    operations: list[tuple[str, str]],
) -> None:
    parametrised = {op for op in operations if PARAM.search(op[1])}
    missing = sorted(op for op in parametrised if not requests_for(*op))
    assert not missing, (
        f"routes with a path parameter that the cross-tenant matrix does not cover: {missing}; "
        "add their requests to REQUESTS (and seed what they address)"
    )
    stale = sorted(set(REQUESTS) - parametrised)
    assert not stale, f"REQUESTS names routes the app no longer has: {stale}"
    other_params = sorted(
        {name for _, path in parametrised for name in PARAM.findall(path)} - {"session_id"}
    )
    assert not other_params, f"the matrix seeds only sessions; extend it for {other_params}"


def test_the_served_spec_lists_no_route_the_app_does_not_have(
    http: httpx.Client, operations: list[tuple[str, str]]
) -> None:
    """The route list is the app's; the served spec, the same app's, must not know more."""
    spec = http.get("/openapi.json").json()
    documented = {
        (method.upper(), path)
        for path, item in spec["paths"].items()
        for method in item
        if method in {"get", "put", "post", "delete", "patch", "options", "head", "trace"}
    }
    assert documented <= set(operations), sorted(documented - set(operations))
    assert any("{session_id}" in path for _, path in documented)


def test_another_tenants_session_is_exactly_like_a_missing_one_and_stays_unchanged(
    tenants: Tenants, operations: list[tuple[str, str]]
) -> None:
    failures: list[str] = []
    checked = 0
    session_routes = [op for op in operations if "{session_id}" in op[1]]
    assert len(session_routes) >= 10, session_routes
    for method, route in session_routes:
        # A route missing from REQUESTS fails the coverage test; it is still probed here.
        for variant in requests_for(method, route) or [Variant("default", follow_stream=True)]:
            where = f"{method} {route} [{variant.label}]"
            victim = tenants.seeded_session(A)
            before = tenants.snapshot(victim)

            crossed = send(tenants.http, method, fill(route, victim), variant, tenants.auth(B))
            absent_id = missing_id()
            absent = send(tenants.http, method, fill(route, absent_id), variant, tenants.auth(B))
            after = tenants.snapshot(victim)
            checked += 1

            if crossed.status != 404:
                failures.append(f"{where}: B got {crossed.status} on A's session: {crossed.body}")
            if absent.status != 404:
                failures.append(f"{where}: a missing session answered {absent.status}")
            if crossed.status == 404 and not crossed.content_type.startswith(PROBLEM_JSON):
                failures.append(f"{where}: 404 is {crossed.content_type}, not problem+json")
            if comparable(crossed, victim) != comparable(absent, absent_id):
                failures.append(
                    f"{where}: A's session {comparable(crossed, victim)} differs from a missing "
                    f"one {comparable(absent, absent_id)}"
                )
            if after != before:
                changed = sorted(key for key in before if before[key] != after[key])
                failures.append(f"{where}: B's request changed {changed}")

            # Control: the same request is one that does something for its owner.
            owner = send(tenants.http, method, fill(route, victim), variant, tenants.auth(A))
            if not 200 <= owner.status < 300:
                failures.append(f"{where}: control with A's key got {owner.status}: {owner.body}")
    assert checked >= len(session_routes)
    assert not failures, "\n".join(failures)


def test_sessions_and_the_global_feed_are_per_tenant(tenants: Tenants) -> None:
    a_sessions = {tenants.seeded_session(A) for _ in range(2)}
    b_session = tenants.seeded_session(B)
    tenants.ok(A, "POST", f"/v1/sessions/{next(iter(a_sessions))}/fork", json={"at_seq": 2})

    listed_a = set(tenants.session_ids(A))
    listed_b = set(tenants.session_ids(B))
    assert a_sessions <= listed_a
    assert b_session in listed_b
    assert not listed_a & listed_b, listed_a & listed_b
    for status in ("active", "archived", "deleted", "all"):
        for tenant, others in ((A, listed_b), (B, listed_a)):
            page = tenants.ok(tenant, "GET", "/v1/sessions", params={"status": status})
            assert not {s["session_id"] for s in page["sessions"]} & others, (tenant, status)
            assert {s["tenant"] for s in page["sessions"]} <= {tenant}, (tenant, status)

    feed_a, feed_b = tenants.feed(A), tenants.feed(B)
    assert {event["session_id"] for event in feed_a} == listed_a
    assert {event["session_id"] for event in feed_b} == listed_b
    # B resuming from A's latest position still sees none of A's events.
    latest_a = feed_a[-1]["position"]
    with tenants.http.stream(
        "GET",
        "/v1/events/stream",
        params={"follow": "false", "after": "0"},
        headers={**tenants.auth(B), "Last-Event-ID": latest_a},
    ) as response:
        assert response.status_code == 200
        lines = [line for line in response.iter_lines() if line.startswith("data:")]
    assert all(json.loads(line[5:])["session_id"] in listed_b for line in lines)


def test_an_idempotency_key_is_per_tenant(tenants: Tenants) -> None:
    """B reusing A's Idempotency-Key on create gets its own new session, never A's."""
    key = f"create-{secrets.token_hex(4)}"
    body = {"title": "same"}
    first = tenants.http.post(
        "/v1/sessions", json=body, headers={**tenants.auth(A), "Idempotency-Key": key}
    )
    assert first.status_code == 201
    other = tenants.http.post(
        "/v1/sessions", json=body, headers={**tenants.auth(B), "Idempotency-Key": key}
    )
    assert other.status_code == 201, other.text
    assert other.json()["session_id"] != first.json()["session_id"]
    assert other.json()["tenant"] == B


def test_every_v1_route_refuses_a_request_without_a_valid_key(
    tenants: Tenants, operations: list[tuple[str, str]]
) -> None:
    v1 = [op for op in operations if op[1].startswith("/v1/")]
    assert len(v1) >= 12, v1
    wrong_key = tenants.keys[B][:-1] + ("A" if tenants.keys[B][-1] != "A" else "B")
    attempts: list[tuple[str, dict[str, str], dict[str, str]]] = [
        ("no header", {}, {}),
        ("unknown key", {"Authorization": f"Bearer {wrong_key}"}, {}),
        ("not bearer", {"Authorization": f"Basic {tenants.keys[A]}"}, {}),
        ("bearer without a key", {"Authorization": "Bearer"}, {}),
        (
            "key in the query string",
            {},
            {"api_key": tenants.keys[A], "key": tenants.keys[A], "access_token": tenants.keys[A]},
        ),
    ]
    victim = tenants.seeded_session(A)
    before = tenants.snapshot(victim)
    failures: list[str] = []
    for method, route in v1:
        variants = requests_for(method, route) or [Variant("plain", follow_stream=True)]
        for variant in variants:
            for label, headers, query in attempts:
                where = f"{method} {route} [{variant.label}] {label}"
                reply = send(tenants.http, method, fill(route, victim), variant, headers, query)
                if reply.status != 401:
                    failures.append(f"{where}: {reply.status} {reply.body}")
                    continue
                if not reply.content_type.startswith(PROBLEM_JSON):
                    failures.append(f"{where}: 401 as {reply.content_type}")
                elif method != "HEAD" and not (
                    isinstance(reply.body, dict) and reply.body.get("status") == 401
                ):
                    failures.append(f"{where}: problem body {reply.body}")
                if "bearer" not in reply.headers.get("www-authenticate", "").lower():
                    failures.append(f"{where}: no WWW-Authenticate: Bearer")
    assert tenants.snapshot(victim) == before
    assert not failures, "\n".join(failures)
