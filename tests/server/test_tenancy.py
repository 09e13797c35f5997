"""Tenants never see each other, over a real keyed server (tenants "acme" = A and "beta" = B).

The cross-tenant matrix is generated from the app's routes, not listed by hand: the routes come
from `create_app(...).routes`; `REQUESTS` only says what to send to each. A route with a path
parameter that `REQUESTS` does not know fails the coverage test (and is still probed with a bare
request), so a route added later cannot be skipped silently.

For every such route and every request variant: tenant B's key on tenant A's session or task
answers 404, byte for byte like B's key on ids that do not exist (the id in `detail` aside), and A's
session, events, transcript, tasks and both tenants' session and task lists are unchanged; then the
same request with A's own key succeeds (2xx), which shows the request was one that would have had
an effect.

The server runs the demo agent (`agents_for_tests:stalling`: the demo's, plus a message whose
reply stalls until cancelled) and A's sessions are bound to it, so that A's own turn succeeds;
each A session carries a task of its own type that A claimed (attempt 1, running), so that A's own
progress, complete, fail and cancel succeed; for the routes of one turn, it also has a turn that
is running (stalled), so that A's own stream and cancel of it succeed. Task routes without a path
parameter (claim, the task list) are checked in `test_tasks_and_claims_are_per_tenant`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import re
import secrets
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
from agents_for_tests import STALL

from agentjournal import Journal
from agentjournal.demo.order_agent import QUERY_ORDERS
from agentjournal.server import create_app

A, B = "acme", "beta"
HERE = Path(__file__).parent
PROBLEM_JSON = "application/problem+json"
PARAM = re.compile(r"{([^}:]+)(?::[^}]*)?}")
# The path parameters the matrix seeds: every A session comes with a running task, and for the
# routes of one turn with a running turn.
SEEDED_PARAMS = {"session_id", "task_id", "turn"}
AGENT = "demo"
LEASE_SECONDS = 3600  # A's claim of the seeded task; nothing may expire during the module

# The seed every A session gets: seq 1 session_created, then seq 2..5; `Tenants.seeded` adds its
# task: seq 6 task_created, seq 7 task_started (the claim).
SEEDED_LAST_SEQ = 7
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
# variant is a request that A's own key may send successfully on a fresh seeded A session and its
# running task. A body string "{task_id}" is replaced by the task id the request addresses.
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
            body={
                "type": "user_message",
                "payload": {"content": "x"},
                "expected_seq": SEEDED_LAST_SEQ,
            },
        ),
        Variant(
            "batch",
            body={
                "events": [
                    {"type": "user_message", "payload": {"content": "b1"}},
                    {"type": "myapp.note", "payload": {"n": 1}},
                ],
                "expected_seq": SEEDED_LAST_SEQ,
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
    ("POST", "/v1/sessions/{session_id}/tasks"): [
        Variant("create", body={"type": "probe.made", "input": {"n": 1}}),
        Variant("sub_task", body={"type": "probe.sub", "parent_task_id": "{task_id}"}),
        Variant("keyed", body={"type": "probe.keyed"}, headers={"Idempotency-Key": "t1"}),
    ],
    ("GET", "/v1/sessions/{session_id}/tasks"): [
        Variant("all"),
        Variant("running", query={"status": "running", "limit": "10"}),
    ],
    ("POST", "/v1/sessions/{session_id}/turns"): [
        Variant("json", body={"content": QUERY_ORDERS}),
        Variant("sse", body={"content": "你好"}, headers={"Accept": "text/event-stream"}),
        # A's own key for the seed's user message: must not hand B A's finished turn.
        Variant(
            "idempotent_repeat",
            body={"content": SEED_EVENTS[0]["payload"]["content"]},
            headers={"Idempotency-Key": SEED_EVENTS[0]["idempotency_key"]},
        ),
    ],
    ("GET", "/v1/sessions/{session_id}/turns/{turn}/stream"): [
        Variant("held", query={"follow": "false"}),
        Variant("live", follow_stream=True),
    ],
    ("POST", "/v1/sessions/{session_id}/turns/{turn}/cancel"): [Variant("cancel")],
    ("GET", "/v1/tasks/{task_id}"): [Variant("read")],
    ("POST", "/v1/tasks/{task_id}/progress"): [
        Variant("progress", body={"attempt": 1, "progress": 0.5, "message": "half"}),
    ],
    ("POST", "/v1/tasks/{task_id}/complete"): [
        Variant("complete", body={"attempt": 1, "output": {"owner": "beta"}}),
    ],
    ("POST", "/v1/tasks/{task_id}/fail"): [
        Variant("retryable", body={"attempt": 1, "error": "beta says no"}),
        Variant("final", body={"attempt": 1, "error": "beta says no", "retryable": False}),
    ],
    ("POST", "/v1/tasks/{task_id}/cancel"): [
        Variant("reason", body={"reason": "beta wants it gone"}),
        Variant("plain", body={}),
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
def agent_server(server_db: Any, start_server: Any) -> Any:
    """A keyed server for A and B that runs the demo agent (so that A's turns succeed); the rate
    limit is out of the way of the matrix' thousands of requests. Once per backend: on
    PostgreSQL, row-level security stands behind the same checks."""
    path = os.pathsep.join(p for p in (str(HERE), os.environ.get("PYTHONPATH", "")) if p)
    return start_server(
        "--agent",
        "agents_for_tests:stalling",
        "--rate-limit",
        "100000",
        tenants=(A, B),
        db_path=server_db,
        env={"PYTHONPATH": path},
    )


@pytest.fixture(scope="module")
def http(agent_server: Any) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=agent_server.base_url, timeout=10.0) as client:
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


def fill(path: str, ids: dict[str, str]) -> str:
    """The route's path with each parameter set to the id of that name."""
    return PARAM.sub(lambda match: ids[match.group(1)], path)


def with_ids(variant: Variant, ids: dict[str, str]) -> Variant:
    """The variant with a body value "{task_id}" set to the task id the request addresses."""
    if not isinstance(variant.body, dict):
        return variant
    body = {
        name: ids[value[1:-1]] if isinstance(value, str) and PARAM.fullmatch(value) else value
        for name, value in variant.body.items()
    }
    return dataclasses.replace(variant, body=body)


def missing_ids() -> dict[str, str]:
    """Ids of the shapes the server makes, that name nothing."""
    return {
        "session_id": f"sess_{secrets.token_hex(8)}",
        "task_id": f"task_{secrets.token_hex(12)}",
        "turn": "999",
    }


class Tenants:
    """Requests as A or B on the keyed server, plus snapshots of what A and B can read."""

    def __init__(self, http: httpx.Client, keys: dict[str, str]) -> None:
        self.http = http
        self.keys = keys
        self.running: list[tuple[str, str]] = []  # (session, turn) of the stalled turns started

    def auth(self, tenant: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.keys[tenant]}"}

    def ok(self, tenant: str, method: str, path: str, **kwargs: Any) -> Any:
        response = self.http.request(method, path, headers=self.auth(tenant), **kwargs)
        assert response.is_success, (method, path, response.status_code, response.text)
        return response.json()

    def seeded_session(self, tenant: str = A) -> str:
        """A fresh session of `tenant` bound to the agent, seq 1..5: a message, a tool call and
        result, a reply."""
        session = self.ok(
            tenant,
            "POST",
            "/v1/sessions",
            json={
                "title": "private",
                "system_prompt": "be terse",
                "metadata": {"k": "v", "agent": AGENT},
            },
        )
        session_id = session["session_id"]
        appended = self.ok(
            tenant, "POST", f"/v1/sessions/{session_id}/events", json={"events": SEED_EVENTS}
        )
        assert [event["seq"] for event in appended["events"]] == [2, 3, 4, 5]
        return str(session_id)

    def seeded(self, tenant: str = A, turn: bool = False) -> dict[str, str]:
        """A seeded session and a task in it that `tenant` claimed (attempt 1, running): the ids
        for every path parameter the matrix knows; with `turn`, also a turn of the session that
        runs (stalled) until cancelled."""
        session_id = self.seeded_session(tenant)
        task_type = f"probe.{secrets.token_hex(6)}"  # only this task has it: the claim takes it
        created = self.ok(
            tenant,
            "POST",
            f"/v1/sessions/{session_id}/tasks",
            json={"type": task_type, "input": {"secret": tenant}},
        )
        claimed = self.ok(
            tenant,
            "POST",
            "/v1/tasks/claim",
            json={
                "worker": f"{tenant}-worker",
                "types": [task_type],
                "lease_seconds": LEASE_SECONDS,
            },
        )
        assert claimed["task_id"] == created["task_id"], (claimed, created)
        assert (claimed["status"], claimed["attempt"]) == ("running", 1), claimed
        session = self.ok(tenant, "GET", f"/v1/sessions/{session_id}")
        assert session["last_seq"] == SEEDED_LAST_SEQ, session
        ids = {"session_id": session_id, "task_id": claimed["task_id"]}
        if turn:
            ids["turn"] = self.stalled_turn(tenant, session_id)
        return ids

    def stalled_turn(self, tenant: str, session_id: str) -> str:
        """Start a turn that stalls until cancelled; leave its stream after the first frame (the
        turn goes on). Its seq, from that frame's id ({turn}:{run}:{n})."""
        with self.http.stream(
            "POST",
            f"/v1/sessions/{session_id}/turns",
            json={"content": STALL},
            headers={**self.auth(tenant), "Accept": "text/event-stream"},
        ) as response:
            assert response.status_code == 201, response.read()
            frame_id = next(line for line in response.iter_lines() if line.startswith("id:"))
        turn = frame_id.removeprefix("id:").strip().split(":")[0]
        self.running.append((session_id, turn))
        return turn

    def cancel_running(self) -> None:
        """Cancel the stalled turns still running (409: one that a request cancelled)."""
        for session_id, turn in self.running:
            response = self.http.post(
                f"/v1/sessions/{session_id}/turns/{turn}/cancel", headers=self.auth(A)
            )
            assert response.status_code in (200, 409), response.text
        self.running = []

    def session_ids(self, tenant: str) -> list[str]:
        page = self.ok(tenant, "GET", "/v1/sessions", params={"status": "all", "limit": 1000})
        return sorted(session["session_id"] for session in page["sessions"])

    def all_tasks(self, tenant: str) -> list[dict[str, Any]]:
        """Every task of the tenant, following `next_after`."""
        tasks: list[dict[str, Any]] = []
        params: dict[str, Any] = {"limit": 1000}
        while True:
            page = self.ok(tenant, "GET", "/v1/tasks", params=params)
            tasks += page["tasks"]
            if page["next_after"] is None:
                return tasks
            params["after"] = page["next_after"]

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

    def snapshot(self, ids: dict[str, str]) -> dict[str, Any]:
        """Everything about A's session and task that A can read, and both tenants' session and
        task lists."""
        base = f"/v1/sessions/{ids['session_id']}"
        return {
            "session": self.ok(A, "GET", base),
            "events": self.ok(A, "GET", f"{base}/events", params={"limit": 1000}),
            "messages": self.ok(A, "GET", f"{base}/messages"),
            "session_tasks": self.ok(A, "GET", f"{base}/tasks"),
            "task": self.ok(A, "GET", f"/v1/tasks/{ids['task_id']}"),
            "sessions_of_a": self.session_ids(A),
            "sessions_of_b": self.session_ids(B),
            "tasks_of_a": self.all_tasks(A),
            "tasks_of_b": self.all_tasks(B),
        }


@pytest.fixture(scope="module")
def tenants(http: httpx.Client, agent_server: Any) -> Iterator[Tenants]:
    assert {A, B} <= set(agent_server.keys)
    tenants = Tenants(http, agent_server.keys)
    yield tenants
    tenants.cancel_running()  # else the server's stop would wait for them


def comparable(reply: Reply, ids: dict[str, str]) -> dict[str, Any]:
    """A problem reply with the ids it names replaced, for comparing two replies."""
    body = reply.body
    if isinstance(body, dict):
        body = {k: hide(v, ids) if isinstance(v, str) else v for k, v in body.items()}
    return {"status": reply.status, "content_type": reply.content_type, "body": body}


def hide(text: str, ids: dict[str, str]) -> str:
    for name, value in ids.items():
        text = text.replace(value, f"<{name}>")
    return text


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
        {name for _, path in parametrised for name in PARAM.findall(path)} - SEEDED_PARAMS
    )
    assert not other_params, f"the matrix seeds {SEEDED_PARAMS}; extend it for {other_params}"


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
    assert any("{task_id}" in path for _, path in documented)


def test_another_tenants_session_is_exactly_like_a_missing_one_and_stays_unchanged(
    tenants: Tenants, operations: list[tuple[str, str]]
) -> None:
    failures: list[str] = []
    checked = 0
    routes = [op for op in operations if PARAM.search(op[1])]
    assert len([op for op in routes if "{session_id}" in op[1]]) >= 14, routes
    assert len([op for op in routes if "{task_id}" in op[1]]) >= 5, routes
    for method, route in routes:
        # A route missing from REQUESTS fails the coverage test; it is still probed here.
        for variant in requests_for(method, route) or [Variant("default", follow_stream=True)]:
            where = f"{method} {route} [{variant.label}]"
            victim = tenants.seeded(A, turn="{turn}" in route)
            before = tenants.snapshot(victim)

            crossing = with_ids(variant, victim)
            crossed = send(tenants.http, method, fill(route, victim), crossing, tenants.auth(B))
            absent_ids = missing_ids()
            absent = send(
                tenants.http,
                method,
                fill(route, absent_ids),
                with_ids(variant, absent_ids),
                tenants.auth(B),
            )
            after = tenants.snapshot(victim)
            checked += 1

            if crossed.status != 404:
                failures.append(f"{where}: B got {crossed.status} on A's ids: {crossed.body}")
            if absent.status != 404:
                failures.append(f"{where}: missing ids answered {absent.status}: {absent.body}")
            if crossed.status == 404 and not crossed.content_type.startswith(PROBLEM_JSON):
                failures.append(f"{where}: 404 is {crossed.content_type}, not problem+json")
            if comparable(crossed, victim) != comparable(absent, absent_ids):
                failures.append(
                    f"{where}: A's ids {comparable(crossed, victim)} differ from missing "
                    f"ones {comparable(absent, absent_ids)}"
                )
            if after != before:
                changed = sorted(key for key in before if before[key] != after[key])
                failures.append(f"{where}: B's request changed {changed}")

            # Control: the same request is one that does something for its owner.
            owner = send(tenants.http, method, fill(route, victim), crossing, tenants.auth(A))
            if not 200 <= owner.status < 300:
                failures.append(f"{where}: control with A's key got {owner.status}: {owner.body}")
    assert checked >= len(routes)
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


def test_tasks_and_claims_are_per_tenant(tenants: Tenants) -> None:
    """B's claims and task lists never reach A's task, and B naming A's task as a sub-task's
    parent is 404 exactly like an unknown parent, writing nothing; A's task stays A's."""
    a_session = tenants.seeded_session(A)
    task_type = f"shared.{secrets.token_hex(4)}"
    a_task = tenants.ok(
        A, "POST", f"/v1/sessions/{a_session}/tasks", json={"type": task_type, "input": "a"}
    )
    a_task_id = a_task["task_id"]
    b_session = tenants.seeded_session(B)
    b_before = tenants.ok(B, "GET", f"/v1/sessions/{b_session}")
    assert tenants.ok(B, "GET", "/v1/tasks", params={"status": "open"})["tasks"] == []

    for body in ({"worker": "b", "types": [task_type]}, {"worker": "b"}):
        claim = tenants.http.post("/v1/tasks/claim", json=body, headers=tenants.auth(B))
        assert claim.status_code == 204, (body, claim.status_code, claim.text)
    for params in (
        {},
        {"type": task_type},
        {"session_id": a_session},
        {"status": "pending"},
        {"status": "open", "after": "task_0"},
    ):
        page = tenants.ok(B, "GET", "/v1/tasks", params=params)
        assert {task["tenant"] for task in page["tasks"]} <= {B}, params
        assert a_task_id not in {task["task_id"] for task in page["tasks"]}, params
        if "type" in params or "session_id" in params:
            assert page == {"tasks": [], "next_after": None}, params

    replies = {}
    for label, parent in (("A's", a_task_id), ("missing", f"task_{secrets.token_hex(12)}")):
        reply = send(
            tenants.http,
            "POST",
            f"/v1/sessions/{b_session}/tasks",
            Variant(label, body={"type": "sub", "parent_task_id": parent}),
            tenants.auth(B),
        )
        replies[label] = comparable(reply, {"task_id": parent})
    assert replies["A's"]["status"] == 404, replies
    assert replies["A's"]["content_type"].startswith(PROBLEM_JSON), replies
    assert replies["A's"] == replies["missing"], replies
    assert tenants.ok(B, "GET", f"/v1/sessions/{b_session}") == b_before
    assert tenants.all_tasks(B) == []

    assert tenants.ok(A, "GET", f"/v1/tasks/{a_task_id}") == a_task
    claimed = tenants.ok(A, "POST", "/v1/tasks/claim", json={"worker": "a", "types": [task_type]})
    assert (claimed["task_id"], claimed["tenant"], claimed["attempt"]) == (a_task_id, A, 1)


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
    victim = tenants.seeded(A, turn=True)
    before = tenants.snapshot(victim)
    failures: list[str] = []
    for method, route in v1:
        variants = requests_for(method, route) or [Variant("plain", follow_stream=True)]
        for variant in variants:
            for label, headers, query in attempts:
                where = f"{method} {route} [{variant.label}] {label}"
                sent = with_ids(variant, victim)
                reply = send(tenants.http, method, fill(route, victim), sent, headers, query)
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


def test_search_finds_only_the_callers_sessions(tenants: Tenants) -> None:
    """`GET /v1/search` has no path parameter, so the matrix above does not reach it: B searching
    for words only A's session holds (its message, its title, its metadata) finds nothing, and
    A finds them; a word both hold gives each tenant its own session only."""
    word = f"secret{secrets.token_hex(4)}"
    shared = f"shared{secrets.token_hex(4)}"
    sessions = {}
    for tenant in (A, B):
        session = tenants.ok(
            tenant,
            "POST",
            "/v1/sessions",
            json={"title": f"{shared} title", "metadata": {"note": shared}},
        )
        sessions[tenant] = session["session_id"]
    tenants.ok(
        A,
        "POST",
        f"/v1/sessions/{sessions[A]}/events",
        json={"type": "user_message", "payload": {"content": f"the {word} and {shared}"}},
    )
    for params in (
        {"q": word},
        {"q": word, "session_status": "all"},
        {"q": f"{word} {shared}"},
        {"q": f"{word[:-2]}*"},
    ):
        assert tenants.ok(B, "GET", "/v1/search", params=params) == {
            "hits": [],
            "next_cursor": None,
        }, params
        hits = tenants.ok(A, "GET", "/v1/search", params=params)["hits"]
        assert [(h["session_id"], h["seq"]) for h in hits] == [(sessions[A], 2)], params
    for tenant in (A, B):
        hits = tenants.ok(tenant, "GET", "/v1/search", params={"q": shared, "limit": 100})["hits"]
        assert {h["session_id"] for h in hits} == {sessions[tenant]}, tenant


def test_tenants_holding_one_session_id_each_reach_their_own(
    tenants: Tenants, server_db: Path | str
) -> None:
    """A and B both hold a session of one caller-chosen id (made through the library, as a
    framework integration would): every route answers each with its own, and what one does to
    it (append, fork, purge) leaves the other's untouched."""
    sid = f"user-{secrets.token_hex(4)}"
    word = f"w{secrets.token_hex(4)}"
    with Journal.open(server_db) as journal:
        for tenant in (A, B):
            view = journal.for_tenant(tenant)
            view.create_session(f"{tenant}'s", session_id=sid, system_prompt=tenant)
            view.append(sid, "user_message", {"content": f"{tenant} {word}"}, idempotency_key="k")
    for tenant in (A, B):
        assert tenants.ok(tenant, "GET", f"/v1/sessions/{sid}")["title"] == f"{tenant}'s"
        page = tenants.ok(tenant, "GET", f"/v1/sessions/{sid}/events")
        assert [e["payload"].get("content") for e in page["events"]] == [None, f"{tenant} {word}"]
        replay = tenants.ok(tenant, "GET", f"/v1/sessions/{sid}/replay")
        assert replay["messages"][0] == {"role": "system", "content": tenant}
        hits = tenants.ok(tenant, "GET", "/v1/search", params={"q": word})["hits"]
        assert [(h["session_id"], h["snippet"]) for h in hits] == [(sid, f"{tenant} {word}")]
        stream = tenants.http.get(
            f"/v1/sessions/{sid}/events/stream",
            params={"follow": "false"},
            headers=tenants.auth(tenant),
        )
        assert stream.status_code == 200
        assert f"{tenant} {word}" in stream.text
        assert f"{({A, B} - {tenant}).pop()} {word}" not in stream.text
        appended = tenants.ok(
            tenant,
            "POST",
            f"/v1/sessions/{sid}/events",
            json={"type": "user_message", "payload": {"content": "next"}, "expected_seq": 2},
        )
        assert appended["seq"] == 3
    fork = tenants.ok(A, "POST", f"/v1/sessions/{sid}/fork", json={"at_seq": 2})
    assert fork["forked_from"] == sid
    purged = tenants.http.delete(
        f"/v1/sessions/{sid}", params={"purge": "true"}, headers=tenants.auth(A)
    )
    assert purged.is_success, purged.text
    assert tenants.http.get(f"/v1/sessions/{sid}", headers=tenants.auth(A)).status_code == 404
    kept = tenants.ok(B, "GET", f"/v1/sessions/{sid}")
    assert (kept["title"], kept["last_seq"]) == (f"{B}'s", 3)
