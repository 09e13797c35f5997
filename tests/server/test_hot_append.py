"""Appends are answered by the hot path (server/hot.py) without FastAPI's request machinery; to a
client they read exactly as the route's answers: the key checked before the body is used, one
rate-limit token per request (a refused body too), problem+json errors, the same metrics."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx
from http_checks import assert_problem, db_counts
from test_http import metric

EVENT_FIELDS = {
    "event_id",
    "session_id",
    "seq",
    "position",
    "type",
    "payload",
    "idempotency_key",
    "created_at",
}


def test_appends_keep_keys_limits_problems_and_metrics(
    start_server: Callable[..., Any],
) -> None:
    # Burst 6 and a refill so slow that no token comes back during the test.
    server = start_server(tenants=("acme",), limits={"requests_per_second": 0.001, "burst": 6})
    acme = server.headers("acme")
    one = {"type": "user_message", "payload": {"content": "hi"}, "idempotency_key": "k1"}
    with httpx.Client(base_url=server.base_url, timeout=10.0) as http:
        before = http.get("/metrics", headers=acme).text
        sid = http.post("/v1/sessions", json={}, headers=acme).json()["session_id"]  # token 1
        events = f"/v1/sessions/{sid}/events"
        # No key: 401 before anything else, and no token spent (there is no key to charge).
        refused = http.post(events, json=one)
        assert_problem(refused, 401)
        assert refused.headers["WWW-Authenticate"] == "Bearer"
        # A body the models refuse: 422 worded by the route's validation (token 2).
        invalid = assert_problem(http.post(events, json={"type": "Bad"}, headers=acme), 422)
        assert "type" in invalid["detail"]
        # Created: 201 with the event (token 3); repeated: 200 with the original (token 4).
        created = http.post(events, json=one, headers=acme)
        assert created.status_code == 201
        assert created.headers["content-type"] == "application/json"
        assert set(created.json()) == EVENT_FIELDS
        assert created.json()["payload"] == {"content": "hi"}
        repeat = http.post(events, json=one, headers=acme)
        assert repeat.status_code == 200
        assert repeat.json() == created.json()
        # A batch (token 5); another tenant's or no such session: 404 (token 6).
        batch = {"events": [{"type": "user_message", "payload": {"content": "b"}}] * 2}
        listed = http.post(events, json=batch, headers=acme)
        assert listed.status_code == 201
        assert [e["seq"] for e in listed.json()["events"]] == [3, 4]
        assert_problem(http.post("/v1/sessions/nope0000/events", json=one, headers=acme), 404)
        # The burst is spent: 429 with Retry-After, and nothing written.
        limited = http.post(events, json={"type": "user_message"}, headers=acme)
        assert_problem(limited, 429)
        assert int(limited.headers["Retry-After"]) >= 1
        after = http.get("/metrics", headers=acme).text
    assert db_counts(server.db_path).events == 4  # session_created, k1, the batch of two
    appended = "agentjournal_events_appended_total"
    assert metric(after, appended) - metric(before, appended) == 3
    errors = "agentjournal_http_errors_total"
    for status in ("401", "404", "422", "429"):
        counted = metric(after, errors, {"status": status}) - metric(
            before, errors, {"status": status}
        )
        assert counted == 1, status
