"""The REST API over a real `agentjournal serve` process on loopback: every endpoint of the
API (except /turns and tasks), and every error as problem+json that writes nothing."""

from __future__ import annotations

import secrets
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from typing import Any

import httpx
import pytest
from http_checks import PROBLEM, assert_problem, db_counts
from prometheus_client.parser import text_string_to_metric_families

# -- helpers ----------------------------------------------------------------------------------


def new_session(client: httpx.Client, **body: Any) -> dict[str, Any]:
    response = client.post("/v1/sessions", json=body)
    assert response.status_code == 201, response.text
    created: dict[str, Any] = response.json()
    return created


def append(client: httpx.Client, session_id: str, type_: str, **payload: Any) -> dict[str, Any]:
    response = client.post(
        f"/v1/sessions/{session_id}/events", json={"type": type_, "payload": payload}
    )
    assert response.status_code == 201, response.text
    event: dict[str, Any] = response.json()
    return event


def all_events(client: httpx.Client, session_id: str) -> list[dict[str, Any]]:
    response = client.get(f"/v1/sessions/{session_id}/events", params={"limit": 1000})
    assert response.status_code == 200, response.text
    events: list[dict[str, Any]] = response.json()["events"]
    return events


def metric(text: str, name: str, labels: dict[str, str] | None = None) -> float:
    """The value of one sample in Prometheus text (0.0 when absent)."""
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and (labels is None or sample.labels == labels):
                return float(sample.value)
    return 0.0


@pytest.fixture
def unchanged(server: Any) -> Callable[[], None]:
    """Call the returned function to assert the database gained no event and no session."""
    before = db_counts(server.db_path)

    def check() -> None:
        assert db_counts(server.db_path) == before

    return check


# -- sessions ---------------------------------------------------------------------------------


def walk_sessions(client: httpx.Client, params: dict[str, Any]) -> list[str]:
    """The ids of every listed session, following `next_cursor` two at a time."""
    seen: list[str] = []
    cursor: str | None = None
    for _ in range(1000):  # bounded
        query = {"limit": 2, **params}
        if cursor is not None:
            query["cursor"] = cursor
        response = client.get("/v1/sessions", params=query)
        assert response.status_code == 200, response.text
        page = response.json()
        assert len(page["sessions"]) <= 2
        seen += [s["session_id"] for s in page["sessions"]]
        cursor = page["next_cursor"]
        if cursor is None:
            return seen
    raise AssertionError("paging did not end")


def test_session_lifecycle_create_read_update_delete_purge(client: httpx.Client) -> None:
    created = new_session(
        client, title="订单客服", model="m-1", system_prompt="be brief", metadata={"user": "u1"}
    )
    sid = created["session_id"]
    assert created["title"] == "订单客服"
    assert created["model"] == "m-1"
    assert created["system_prompt"] == "be brief"
    assert created["metadata"] == {"user": "u1"}
    assert created["status"] == "active"
    assert created["tenant"] == "default"
    assert created["last_seq"] == 1
    assert created["event_count"] == 1

    read = client.get(f"/v1/sessions/{sid}")
    assert read.status_code == 200
    assert read.json() == created

    patched = client.patch(
        f"/v1/sessions/{sid}", json={"title": "renamed", "metadata": {"k": 2}, "status": "archived"}
    )
    assert patched.status_code == 200, patched.text
    body = patched.json()
    assert (body["title"], body["metadata"], body["status"]) == ("renamed", {"k": 2}, "archived")
    assert client.get(f"/v1/sessions/{sid}").json() == body

    deleted = client.delete(f"/v1/sessions/{sid}")
    assert deleted.status_code == 200, deleted.text
    assert deleted.json()["status"] == "deleted"
    # A soft-deleted session stays readable; its last event says so.
    assert client.get(f"/v1/sessions/{sid}").json()["status"] == "deleted"
    last = all_events(client, sid)[-1]
    assert last["type"] == "session_updated"
    assert last["payload"]["status"] == "deleted"

    purged = client.delete(f"/v1/sessions/{sid}", params={"purge": "true"})
    assert purged.status_code == 200, purged.text
    assert purged.json() == {"session_id": sid, "events_deleted": last["seq"]}
    assert_problem(client.get(f"/v1/sessions/{sid}"), 404)
    assert_problem(client.get(f"/v1/sessions/{sid}/events"), 404)


def test_create_with_the_same_idempotency_key_answers_200_with_the_original(
    client: httpx.Client, server: Any
) -> None:
    headers = {"Idempotency-Key": "create-once"}
    first = client.post("/v1/sessions", json={"title": "once"}, headers=headers)
    assert first.status_code == 201, first.text
    before = db_counts(server.db_path)
    again = client.post("/v1/sessions", json={"title": "once"}, headers=headers)
    assert again.status_code == 200, again.text
    assert again.json() == first.json()
    assert db_counts(server.db_path) == before


def test_list_sessions_by_recent_activity_with_status_filter_and_cursor_paging(
    client: httpx.Client,
) -> None:
    ids = [new_session(client, title=f"list-{i}")["session_id"] for i in range(5)]
    # Activity order, newest last: touch ids[1], then ids[3].
    append(client, ids[1], "user_message", content="hi")
    append(client, ids[3], "user_message", content="hi")
    archived = ids[0]
    deleted = ids[2]
    assert client.patch(f"/v1/sessions/{archived}", json={"status": "archived"}).status_code == 200
    assert client.delete(f"/v1/sessions/{deleted}").status_code == 200
    # Newest activity first: deleted(2), archived(0), 3, 1, 4.
    expected_all = [ids[2], ids[0], ids[3], ids[1], ids[4]]

    def walk(status: str | None) -> list[str]:
        return walk_sessions(client, {} if status is None else {"status": status})

    everything = walk("all")
    assert len(everything) == len(set(everything)), "a session appeared on two pages"
    assert [s for s in everything if s in ids] == expected_all
    default = walk(None)
    assert [s for s in default if s in ids] == [ids[0], ids[3], ids[1], ids[4]]
    assert [s for s in walk("archived") if s in ids] == [archived]
    assert [s for s in walk("deleted") if s in ids] == [deleted]
    assert [s for s in walk("active") if s in ids] == [ids[3], ids[1], ids[4]]


# -- events -----------------------------------------------------------------------------------


def test_append_one_and_a_batch_and_their_idempotent_repeats(
    client: httpx.Client, server: Any
) -> None:
    sid = new_session(client)["session_id"]
    url = f"/v1/sessions/{sid}/events"
    one = {"type": "user_message", "payload": {"content": "你好"}, "idempotency_key": "k1"}
    first = client.post(url, json=one)
    assert first.status_code == 201, first.text
    event = first.json()
    assert (event["session_id"], event["seq"], event["type"]) == (sid, 2, "user_message")
    assert event["payload"] == {"content": "你好"}
    assert event["idempotency_key"] == "k1"
    assert event["position"] == str(event["event_id"])

    repeat = client.post(url, json=one)
    assert repeat.status_code == 200, repeat.text
    assert repeat.json() == event

    batch = {
        "events": [
            {"type": "assistant_message", "payload": {"content": "a"}, "idempotency_key": "b1"},
            {"type": "myapp.note", "payload": {"x": 1}, "idempotency_key": "b2"},
        ],
        "expected_seq": 2,
    }
    created = client.post(url, json=batch)
    assert created.status_code == 201, created.text
    events = created.json()["events"]
    assert [e["seq"] for e in events] == [3, 4]
    assert [e["type"] for e in events] == ["assistant_message", "myapp.note"]

    before = db_counts(server.db_path)
    again = client.post(url, json=batch)  # expected_seq is stale now: keys are checked first
    assert again.status_code == 200, again.text
    assert again.json() == {"events": events}
    # The same key with another payload is a conflict and writes nothing.
    assert_problem(client.post(url, json={**one, "payload": {"content": "other"}}), 409)
    assert db_counts(server.db_path) == before
    assert [e["seq"] for e in all_events(client, sid)] == [1, 2, 3, 4]


def test_expected_seq_conflict_is_409_and_writes_nothing(client: httpx.Client) -> None:
    sid = new_session(client)["session_id"]
    url = f"/v1/sessions/{sid}/events"
    ok = client.post(
        url, json={"type": "user_message", "payload": {"content": "a"}, "expected_seq": 1}
    )
    assert ok.status_code == 201, ok.text
    stale = {"type": "user_message", "payload": {"content": "b"}, "expected_seq": 1}
    assert_problem(client.post(url, json=stale), 409)
    batch = {"events": [{"type": "user_message", "payload": {"content": "c"}}], "expected_seq": 5}
    assert_problem(client.post(url, json=batch), 409)
    assert [e["seq"] for e in all_events(client, sid)] == [1, 2]


def test_event_pages_follow_next_after(client: httpx.Client) -> None:
    sid = new_session(client)["session_id"]
    for i in range(6):
        append(client, sid, "user_message", content=f"m{i}")
    seqs: list[int] = []
    after = 0
    for _ in range(100):  # bounded
        response = client.get(f"/v1/sessions/{sid}/events", params={"after": after, "limit": 3})
        assert response.status_code == 200, response.text
        page = response.json()
        assert len(page["events"]) <= 3
        seqs += [e["seq"] for e in page["events"]]
        if page["next_after"] is None:
            break
        assert page["next_after"] == page["events"][-1]["seq"]
        after = page["next_after"]
    assert seqs == list(range(1, 8))
    tail = client.get(f"/v1/sessions/{sid}/events", params={"after": 5}).json()
    assert [e["seq"] for e in tail["events"]] == [6, 7]
    assert tail["next_after"] is None
    assert_problem(client.get(f"/v1/sessions/{sid}/events", params={"limit": 1001}), 422)


def test_event_pages_read_backwards_with_last_and_next_before(client: httpx.Client) -> None:
    sid = new_session(client)["session_id"]
    for i in range(9):
        append(client, sid, "user_message", content=f"m{i}")  # seq 2-10
    url = f"/v1/sessions/{sid}/events"
    newest = client.get(url, params={"last": 4}).json()
    assert [e["seq"] for e in newest["events"]] == [7, 8, 9, 10]
    assert newest["next_before"] == 7
    assert newest["next_after"] is None, "the newest page reaches the end"
    seqs: list[int] = []
    params: dict[str, int] = {"last": 4}
    for _ in range(100):  # bounded
        page = client.get(url, params=params).json()
        seqs = [e["seq"] for e in page["events"]] + seqs
        if page["next_before"] is None:
            break
        params = {"before": page["next_before"], "limit": 4}
    assert seqs == list(range(1, 11))
    older = client.get(url, params={"before": 5, "limit": 2}).json()
    assert [e["seq"] for e in older["events"]] == [3, 4]
    assert (older["next_before"], older["next_after"]) == (3, 4)
    forward = client.get(url, params={"after": 8}).json()
    assert forward["next_before"] is None


def test_event_pages_around_a_seq_and_refuse_nonsense(client: httpx.Client) -> None:
    sid = new_session(client)["session_id"]
    for i in range(9):
        append(client, sid, "user_message", content=f"m{i}")  # seq 2-10
    url = f"/v1/sessions/{sid}/events"
    page = client.get(url, params={"around": 5, "limit": 3}).json()
    assert [e["seq"] for e in page["events"]] == [4, 5, 6]
    assert (page["next_before"], page["next_after"]) == (4, 6)
    for bad in (
        {"before": 3, "after": 3},
        {"before": 0},
        {"before": "x"},
        {"last": 0},
        {"last": 1001},
        {"last": 3, "limit": 3},
        {"around": 0},
        {"around": 3, "before": 5},
        {"around": -2},
    ):
        assert_problem(client.get(url, params=bad), 422)
    assert_problem(client.get("/v1/sessions/sess_missing/events", params={"last": 3}), 404)


def test_the_feed_head_is_where_to_follow_the_feed_from(client: httpx.Client) -> None:
    head = client.get("/v1/events/head")
    assert head.status_code == 200, head.text
    sid = new_session(client)["session_id"]
    event = append(client, sid, "user_message", content="after the head")
    assert client.get("/v1/events/head").json() == {"position": event["position"]}


def test_messages_last_returns_the_latest_in_order(client: httpx.Client) -> None:
    sid = new_session(client)["session_id"]
    append(client, sid, "user_message", content="one")
    append(client, sid, "assistant_message", content="two")
    append(client, sid, "user_message", content="three")
    everything = client.get(f"/v1/sessions/{sid}/messages").json()["messages"]
    assert [(m["role"], m["content"]) for m in everything] == [
        ("user", "one"),
        ("assistant", "two"),
        ("user", "three"),
    ]
    last = client.get(f"/v1/sessions/{sid}/messages", params={"last": 2})
    assert last.status_code == 200
    assert [m["content"] for m in last.json()["messages"]] == ["two", "three"]
    assert [m["seq"] for m in last.json()["messages"]] == [3, 4]


def _conversation(client: httpx.Client) -> str:
    sid = str(new_session(client, title="orders", system_prompt="You are helpful.")["session_id"])
    append(client, sid, "user_message", content="how many orders?")  # 2
    append(client, sid, "tool_call", call_id="c1", name="count", arguments="{}")  # 3
    append(client, sid, "tool_result", call_id="c1", content="42")  # 4
    append(client, sid, "assistant_message", content="42 orders")  # 5
    return sid


def test_replay_openai_and_anthropic_and_until(client: httpx.Client) -> None:
    sid = _conversation(client)
    openai = client.get(f"/v1/sessions/{sid}/replay", params={"format": "openai"})
    assert openai.status_code == 200, openai.text
    body = openai.json()
    assert body["format"] == "openai"
    assert body["system"] is None
    messages = body["messages"]
    assert messages[0] == {"role": "system", "content": "You are helpful."}
    assert messages[1] == {"role": "user", "content": "how many orders?"}
    assert messages[2]["role"] == "assistant"
    assert messages[2]["tool_calls"] == [
        {"id": "c1", "type": "function", "function": {"name": "count", "arguments": "{}"}}
    ]
    assert messages[3] == {"role": "tool", "tool_call_id": "c1", "content": "42"}
    assert messages[4] == {"role": "assistant", "content": "42 orders"}
    assert client.get(f"/v1/sessions/{sid}/replay").json() == body  # openai is the default

    anthropic = client.get(f"/v1/sessions/{sid}/replay", params={"format": "anthropic"}).json()
    assert anthropic["format"] == "anthropic"
    assert anthropic["system"] == "You are helpful."
    roles = [m["role"] for m in anthropic["messages"]]
    assert "system" not in roles
    assert roles[0] == "user"
    blocks = [
        b for m in anthropic["messages"] if isinstance(m["content"], list) for b in m["content"]
    ]
    assert {b["type"] for b in blocks} >= {"tool_use", "tool_result"}

    until = client.get(f"/v1/sessions/{sid}/replay", params={"until": 2}).json()
    assert until["messages"] == messages[:2]
    # A call without its result yet is left out.
    until_call = client.get(f"/v1/sessions/{sid}/replay", params={"until": 3}).json()
    assert until_call["messages"] == messages[:2]
    assert_problem(client.get(f"/v1/sessions/{sid}/replay", params={"format": "xml"}), 422)

    responses = client.get(f"/v1/sessions/{sid}/replay", params={"format": "responses"}).json()
    assert (responses["format"], responses["system"]) == ("responses", None)
    kinds = [item.get("type", item.get("role")) for item in responses["messages"]]
    assert kinds[:2] == ["system", "user"]
    assert {"function_call", "function_call_output"} <= set(kinds)


def test_context_fits_max_tokens(client: httpx.Client) -> None:
    sid = _conversation(client)
    full = client.get(f"/v1/sessions/{sid}/replay").json()["messages"]
    roomy = client.get(f"/v1/sessions/{sid}/context", params={"max_tokens": 100_000})
    assert roomy.status_code == 200, roomy.text
    assert roomy.json()["messages"] == full
    append(client, sid, "user_message", content="x" * 300)  # 104 tokens
    longer = client.get(f"/v1/sessions/{sid}/replay").json()["messages"]
    tight = client.get(f"/v1/sessions/{sid}/context", params={"max_tokens": 120}).json()
    # The suffix that fits starts at a user message, after the system prompt.
    assert tight["messages"][0]["role"] == "system"
    assert tight["messages"][1:] == longer[-1:]
    assert_problem(client.get(f"/v1/sessions/{sid}/context", params={"max_tokens": 1}), 422)
    assert_problem(client.get(f"/v1/sessions/{sid}/context"), 422)  # max_tokens is required


def test_fork_with_idempotency_key(client: httpx.Client, server: Any) -> None:
    sid = _conversation(client)
    headers = {"Idempotency-Key": "fork-1"}
    forked = client.post(f"/v1/sessions/{sid}/fork", json={"at_seq": 2}, headers=headers)
    assert forked.status_code == 201, forked.text
    fork = forked.json()
    assert fork["session_id"] != sid
    assert (fork["forked_from"], fork["forked_at_seq"]) == (sid, 2)
    before = db_counts(server.db_path)
    again = client.post(f"/v1/sessions/{sid}/fork", json={"at_seq": 2}, headers=headers)
    assert again.status_code == 200, again.text
    assert again.json()["session_id"] == fork["session_id"]
    assert db_counts(server.db_path) == before

    fid = fork["session_id"]
    assert [e["type"] for e in all_events(client, fid)] == [
        "session_created",
        "user_message",
        "session_forked",
    ]
    parent_until = client.get(f"/v1/sessions/{sid}/replay", params={"until": 2}).json()
    assert client.get(f"/v1/sessions/{fid}/replay").json() == parent_until
    # Cutting between a tool call and its result is a conflict.
    assert_problem(client.post(f"/v1/sessions/{sid}/fork", json={"at_seq": 3}), 409)
    assert db_counts(server.db_path) == before


def test_compact_appends_context_compacted(client: httpx.Client) -> None:
    sid = _conversation(client)
    append(client, sid, "user_message", content="and now?")  # 6
    response = client.post(
        f"/v1/sessions/{sid}/compact", json={"until_seq": 5, "summary": "42 orders found"}
    )
    assert response.status_code == 201, response.text
    event = response.json()
    assert event["type"] == "context_compacted"
    assert event["seq"] == 7
    assert event["payload"] == {"summary": "42 orders found", "until_seq": 5}
    replayed = client.get(f"/v1/sessions/{sid}/replay").json()["messages"]
    assert replayed[0] == {"role": "system", "content": "You are helpful."}
    assert replayed[1]["role"] == "system"
    assert "42 orders found" in replayed[1]["content"]
    assert replayed[2:] == [{"role": "user", "content": "and now?"}]
    # Compacting between a tool call and its result is refused.
    bad = client.post(f"/v1/sessions/{sid}/compact", json={"until_seq": 3, "summary": "s"})
    assert_problem(bad, 422)
    assert all_events(client, sid)[-1]["seq"] == 7


# -- operations -------------------------------------------------------------------------------


def test_healthz(client: httpx.Client) -> None:
    response = client.get("/healthz")
    assert response.status_code == 200
    assert response.json() == {"status": "ok"}


def test_metrics_count_appends_latency_and_errors(client: httpx.Client) -> None:
    def scrape() -> str:
        response = client.get("/metrics")
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/plain")
        return response.text

    before = scrape()
    sid = new_session(client)["session_id"]
    for i in range(3):
        append(client, sid, "user_message", content=str(i))
    batch = {"events": [{"type": "user_message", "payload": {"content": "b"}}] * 2}
    assert client.post(f"/v1/sessions/{sid}/events", json=batch).status_code == 201
    assert client.get("/v1/sessions/nope0000").status_code == 404
    after = scrape()
    appended = "agentjournal_events_appended_total"
    assert metric(after, appended) - metric(before, appended) == 5
    count = "agentjournal_append_seconds_count"
    assert metric(after, count) - metric(before, count) == 4  # one observation per request
    errors = "agentjournal_http_errors_total"
    assert metric(after, errors, {"status": "404"}) - metric(before, errors, {"status": "404"}) == 1
    assert "agentjournal_open_streams" in after


def test_openapi_describes_every_endpoint(client: httpx.Client) -> None:
    response = client.get("/openapi.json")
    assert response.status_code == 200
    spec = response.json()
    paths = spec["paths"]
    expected = {
        "/v1/sessions": {"get", "post"},
        "/v1/sessions/{session_id}": {"get", "patch", "delete"},
        "/v1/sessions/{session_id}/events": {"get", "post"},
        "/v1/sessions/{session_id}/events/stream": {"get"},
        "/v1/sessions/{session_id}/messages": {"get"},
        "/v1/sessions/{session_id}/replay": {"get"},
        "/v1/sessions/{session_id}/context": {"get"},
        "/v1/sessions/{session_id}/fork": {"post"},
        "/v1/sessions/{session_id}/compact": {"post"},
        "/v1/events/stream": {"get"},
        "/v1/events/head": {"get"},
        "/healthz": {"get"},
        "/metrics": {"get"},
    }
    for path, methods in expected.items():
        assert path in paths, path
        assert methods <= set(paths[path]), (path, set(paths[path]))
    problem = spec["components"]["schemas"]["Problem"]
    assert set(problem["required"]) == {"type", "title", "status", "detail"}
    post = paths["/v1/sessions/{session_id}/events"]["post"]
    assert {"201", "404", "409", "413", "415", "422"} <= set(post["responses"])
    assert PROBLEM in post["responses"]["409"]["content"]


def test_list_sessions_search_matches_title_or_id_and_pages_with_the_cursor(
    server: Any, client: httpx.Client
) -> None:
    tag = secrets.token_hex(4)  # the module's server holds other tests' sessions too
    made = [new_session(client, title=f"Äpfel {tag} {i}")["session_id"] for i in range(5)]
    new_session(client, title=f"Birnen {tag}")
    orders = new_session(client, title=f"订单客服 {tag}")["session_id"]
    archived = made[1]
    assert client.patch(f"/v1/sessions/{archived}", json={"status": "archived"}).status_code == 200

    def walk(search: str, **params: Any) -> list[str]:
        return walk_sessions(client, {"search": search, **params})

    # Newest activity first: archiving made[1] was the last thing that happened.
    newest_first = [archived, made[4], made[3], made[2], made[0]]
    assert walk(f"äPFEL {tag}") == newest_first
    assert walk(f"äpfel {tag}", status="active") == [made[4], made[3], made[2], made[0]]
    assert walk(f"客服 {tag}") == [orders]
    assert walk(orders.upper()) == [orders]
    assert walk(f"no such words {tag}") == []

    spec = client.get("/openapi.json").json()
    parameters = spec["paths"]["/v1/sessions"]["get"]["parameters"]
    (described,) = [p for p in parameters if p["name"] == "search"]
    assert "title or id" in described["description"]

    counts = db_counts(server.db_path)
    assert_problem(client.get("/v1/sessions", params={"search": "x" * 201}), 422)
    assert_problem(client.get("/v1/sessions", params={"search": "in\x00voice"}), 422)
    assert client.get("/v1/sessions", params={"search": "订" * 200}).status_code == 200
    assert db_counts(server.db_path) == counts


# -- errors: problem+json, nothing written ----------------------------------------------------


def test_malformed_json_is_400(client: httpx.Client, unchanged: Callable[[], None]) -> None:
    sid_response = client.get("/v1/sessions", params={"limit": 1})
    assert sid_response.status_code == 200
    headers = {"Content-Type": "application/json"}
    assert_problem(client.post("/v1/sessions", content=b'{"title": ', headers=headers), 400)
    assert_problem(client.post("/v1/sessions", content=b"\xff\xfe", headers=headers), 400)
    unchanged()


def test_unknown_session_and_unknown_route_are_404(
    client: httpx.Client, unchanged: Callable[[], None]
) -> None:
    missing = "no-such-session"
    assert_problem(client.get(f"/v1/sessions/{missing}"), 404)
    assert_problem(client.patch(f"/v1/sessions/{missing}", json={"title": "x"}), 404)
    assert_problem(client.delete(f"/v1/sessions/{missing}"), 404)
    event = {"type": "user_message", "payload": {"content": "x"}}
    assert_problem(client.post(f"/v1/sessions/{missing}/events", json=event), 404)
    assert_problem(client.get(f"/v1/sessions/{missing}/events"), 404)
    assert_problem(client.get(f"/v1/sessions/{missing}/events/stream"), 404)
    assert_problem(client.get(f"/v1/sessions/{missing}/messages"), 404)
    assert_problem(client.get(f"/v1/sessions/{missing}/replay"), 404)
    assert_problem(client.post(f"/v1/sessions/{missing}/fork", json={}), 404)
    assert_problem(client.get("/v1/nothing-here"), 404)
    assert_problem(client.get("/nothing/here"), 404)
    unchanged()


def test_wrong_method_is_405(client: httpx.Client, unchanged: Callable[[], None]) -> None:
    assert_problem(client.put("/v1/sessions", json={"title": "x"}), 405)
    assert_problem(client.delete("/v1/sessions"), 405)
    assert_problem(client.post("/healthz", json={}), 405)
    unchanged()


def test_conflicts_are_409_and_write_nothing(client: httpx.Client) -> None:
    sid = new_session(client)["session_id"]
    url = f"/v1/sessions/{sid}/events"
    # UnknownToolCall: a result for a call that was never made.
    orphan = {"type": "tool_result", "payload": {"call_id": "ghost", "content": "x"}}
    assert_problem(client.post(url, json=orphan), 409)
    # Conflict: a second result for one call.
    call = {"type": "tool_call", "payload": {"call_id": "c1", "name": "f", "arguments": "{}"}}
    assert client.post(url, json=call).status_code == 201
    result = {"type": "tool_result", "payload": {"call_id": "c1", "content": "ok"}}
    assert client.post(url, json=result).status_code == 201
    assert_problem(client.post(url, json=result), 409)
    assert_problem(client.post(url, json=call), 409)  # call_id reused
    assert [e["seq"] for e in all_events(client, sid)] == [1, 2, 3]
    # SessionClosed: appending to a deleted session.
    assert client.delete(f"/v1/sessions/{sid}").status_code == 200
    closed = client.post(url, json={"type": "user_message", "payload": {"content": "late"}})
    assert_problem(closed, 409)
    assert [e["seq"] for e in all_events(client, sid)] == [1, 2, 3, 4]


def test_wrong_content_type_is_415(client: httpx.Client, unchanged: Callable[[], None]) -> None:
    sid = new_session(client)["session_id"]
    before = all_events(client, sid)
    body = b'{"type": "user_message", "payload": {"content": "x"}}'
    for content_type in ("text/plain", "application/x-www-form-urlencoded", None):
        headers = {"Content-Type": content_type} if content_type else {}
        response = client.post(f"/v1/sessions/{sid}/events", content=body, headers=headers)
        assert_problem(response, 415)
    assert all_events(client, sid) == before


def test_invalid_events_and_strict_json_are_422(client: httpx.Client) -> None:
    sid = new_session(client)["session_id"]
    url = f"/v1/sessions/{sid}/events"
    invalid: list[dict[str, Any]] = [
        {"type": "not a type", "payload": {}},
        {"type": "unnamespaced", "payload": {}},
        {"type": "session_created", "payload": {"title": "x"}},  # only verbs write these
        {"type": "user_message", "payload": {"content": 5}},
        {"type": "user_message", "payload": "not an object"},
        {"type": "user_message", "payload": {"content": "x"}, "surprise": 1},
        {"events": []},
        {"type": "user_message", "payload": {"content": "x\u0000"}},
    ]
    for body in invalid:
        assert_problem(client.post(url, json=body), 422)
    headers = {"Content-Type": "application/json"}
    strict = [
        b'{"type": "user_message", "payload": {"content": "x", "n": NaN}}',
        b'{"type": "user_message", "payload": {"content": "x", "n": Infinity}}',
        b'{"type": "user_message", "payload": {"content": "x", "content": "y"}}',
        b'{"type": "user_message", "type": "user_message", "payload": {"content": "x"}}',
    ]
    for raw in strict:
        assert_problem(client.post(url, content=raw, headers=headers), 422)
    assert [e["seq"] for e in all_events(client, sid)] == [1]


def test_deeply_nested_json_is_refused_as_invalid_not_a_500(
    client: httpx.Client, server: Any
) -> None:
    sid = new_session(client)["session_id"]
    before = db_counts(server.db_path)
    depth = 5000  # a 10 KB body, far under the size limit
    raw = b'{"type": "myapp.deep", "payload": {"a": ' + b"[" * depth + b"]" * depth + b"}}"
    response = client.post(
        f"/v1/sessions/{sid}/events", content=raw, headers={"Content-Type": "application/json"}
    )
    assert response.status_code in (400, 422), response.text
    assert_problem(response, response.status_code)
    assert db_counts(server.db_path) == before
    assert [e["seq"] for e in all_events(client, sid)] == [1]


def test_integers_past_64_bits_are_422_not_500(
    client: httpx.Client, unchanged: Callable[[], None]
) -> None:
    sid = _conversation(client)
    huge = 2**63  # one past SQLite's INTEGER
    assert_problem(client.get(f"/v1/sessions/{sid}/events", params={"after": huge}), 422)
    assert_problem(client.get(f"/v1/sessions/{sid}/replay", params={"until": huge}), 422)
    assert_problem(client.get("/v1/sessions", params={"cursor": "9" * 30}), 422)
    # The largest one that fits is just a seq nothing has reached yet.
    fits = client.get(f"/v1/sessions/{sid}/events", params={"after": huge - 1})
    assert fits.status_code == 200
    assert fits.json()["events"] == []


def test_the_default_event_limit_is_1_mib(client: httpx.Client) -> None:
    sid = new_session(client)["session_id"]
    url = f"/v1/sessions/{sid}/events"
    # {"content":"…"} is 14 bytes of compact JSON around the text.
    at_limit = {"type": "user_message", "payload": {"content": "x" * (1024 * 1024 - 14)}}
    assert client.post(url, json=at_limit).status_code == 201
    over = {"type": "user_message", "payload": {"content": "x" * (1024 * 1024 - 13)}}
    assert_problem(client.post(url, json=over), 413)
    assert [e["seq"] for e in all_events(client, sid)] == [1, 2]


# -- errors that need a server with other limits ----------------------------------------------


@pytest.fixture(scope="module")
def limited(start_server: Callable[..., Any]) -> Any:
    """Small limits: body 2048 bytes, event payload 512 bytes, 2 streams per key."""
    return start_server(
        "--max-body-bytes", "2048", "--max-event-bytes", "512", "--max-streams-per-key", "2"
    )


def test_body_over_the_limit_is_413_even_without_content_length(limited: Any) -> None:
    with httpx.Client(base_url=limited.base_url, timeout=10.0) as http:
        sid = new_session(http)["session_id"]
        url = f"/v1/sessions/{sid}/events"
        big = {"type": "user_message", "payload": {"content": "x" * 3000}}
        assert_problem(http.post(url, json=big), 413)

        def chunks(total: int) -> Iterator[bytes]:
            body = b'{"type": "user_message", "payload": {"content": "'
            body += b"y" * (total - len(body) - 4) + b'"}}'
            for start in range(0, len(body), 256):
                yield body[start : start + 256]

        # A generator body goes out chunked: no Content-Length to trust or to refuse.
        headers = {"Content-Type": "application/json"}
        response = http.post(url, content=chunks(2600), headers=headers)
        assert "content-length" not in response.request.headers
        assert response.request.headers.get("transfer-encoding") == "chunked"
        assert_problem(response, 413)
        # The same way, a body under the limit is accepted.
        small = http.post(url, content=chunks(300), headers=headers)
        assert small.status_code == 201, small.text
        assert [e["seq"] for e in all_events(http, sid)] == [1, 2]


def test_event_payload_over_the_limit_is_413(limited: Any) -> None:
    with httpx.Client(base_url=limited.base_url, timeout=10.0) as http:
        sid = new_session(http)["session_id"]
        url = f"/v1/sessions/{sid}/events"
        body = {"type": "user_message", "payload": {"content": "z" * 700}}  # body < 2048
        assert_problem(http.post(url, json=body), 413)
        batch = {"events": [{"type": "user_message", "payload": {"content": "ok"}}, body]}
        assert_problem(http.post(url, json=batch), 413)
        assert [e["seq"] for e in all_events(http, sid)] == [1]


def test_too_many_streams_is_429(limited: Any) -> None:
    with ExitStack() as stack:
        http = stack.enter_context(httpx.Client(base_url=limited.base_url, timeout=10.0))
        sid = new_session(http)["session_id"]
        url = f"/v1/sessions/{sid}/events/stream"
        lines = []  # keep each line iterator alive: dropping one closes its connection
        for _ in range(2):
            stream = stack.enter_context(http.stream("GET", url))
            assert stream.status_code == 200
            lines.append(stream.iter_lines())
            # The first frame (retry:) is sent once the stream holds its slot.
            assert next(lines[-1]).startswith("retry:")
        third = http.get(url)
        assert_problem(third, 429)
        assert_problem(http.get("/v1/events/stream"), 429)
    assert [e["seq"] for e in all_events_of(limited, sid)] == [1]


def all_events_of(running: Any, session_id: str) -> list[dict[str, Any]]:
    with httpx.Client(base_url=running.base_url, timeout=10.0) as http:
        return all_events(http, session_id)


def test_rate_limit_is_429_and_refused_requests_write_nothing(
    start_server: Callable[..., Any],
) -> None:
    slow = start_server("--rate-limit", "5")
    with httpx.Client(base_url=slow.base_url, timeout=10.0) as http:
        created = http.post("/v1/sessions", json={})
        assert created.status_code == 201
        sid = created.json()["session_id"]
        statuses = []
        refused: httpx.Response | None = None
        for i in range(40):  # burst is 2 x 5/s; 40 quick requests must overflow it
            response = http.post(
                f"/v1/sessions/{sid}/events",
                json={"type": "user_message", "payload": {"content": str(i)}},
            )
            statuses.append(response.status_code)
            if response.status_code == 429:
                refused = response
        assert refused is not None, statuses
        assert_problem(refused, 429)
        assert int(refused.headers["Retry-After"]) >= 1
        assert set(statuses) <= {201, 429}
        accepted = statuses.count(201)
        # A refused request wrote nothing: exactly the accepted appends are in the journal.
        sessions = db_counts(slow.db_path).sessions
        assert sessions == 1
        events = db_counts(slow.db_path).events
        assert events == 1 + accepted


# -- keyed mode -------------------------------------------------------------------------------


def test_missing_or_bad_key_is_401_and_writes_nothing(keyed_server: Any) -> None:
    before = db_counts(keyed_server.db_path)
    good = keyed_server.keys["acme"]
    bad_headers: list[dict[str, str]] = [
        {},
        {"Authorization": f"Bearer {good[:-1]}{'A' if good[-1] != 'A' else 'B'}"},
        {"Authorization": "Bearer aj_aaaaaaaaaa_" + "b" * 43},
        {"Authorization": "Bearer"},
        {"Authorization": f"Basic {good}"},
        {"Authorization": good},
    ]
    with httpx.Client(base_url=keyed_server.base_url, timeout=10.0) as http:
        for headers in bad_headers:
            problem = assert_problem(http.post("/v1/sessions", json={}, headers=headers), 401)
            assert problem["title"]
            response = http.get("/v1/sessions", headers=headers)
            assert_problem(response, 401)
            assert response.headers["WWW-Authenticate"] == "Bearer"
            assert_problem(http.get("/v1/events/stream", headers=headers), 401)
        # A key in the query string is not a key.
        assert_problem(http.get("/v1/sessions", params={"key": good}), 401)
        assert_problem(http.get("/v1/sessions", params={"api_key": good}), 401)
        ok = http.get("/v1/sessions", headers=keyed_server.headers("acme"))
        assert ok.status_code == 200
    assert db_counts(keyed_server.db_path) == before


def test_keyed_sessions_belong_to_the_key_tenant(keyed_server: Any) -> None:
    with httpx.Client(base_url=keyed_server.base_url, timeout=10.0) as http:
        acme = keyed_server.headers("acme")
        beta = keyed_server.headers("beta")
        created = http.post("/v1/sessions", json={"title": "a"}, headers=acme)
        assert created.status_code == 201
        assert created.json()["tenant"] == "acme"
        sid = created.json()["session_id"]
        assert_problem(http.get(f"/v1/sessions/{sid}", headers=beta), 404)
        listed = http.get("/v1/sessions", params={"status": "all"}, headers=beta).json()
        assert sid not in [s["session_id"] for s in listed["sessions"]]


def test_with_keys_metrics_need_a_key_and_healthz_says_nothing_of_tenants(
    keyed_server: Any,
) -> None:
    with httpx.Client(base_url=keyed_server.base_url, timeout=10.0) as http:
        # Counts of every tenant's requests: not for anyone without a key.
        refused = assert_problem(http.get("/metrics"), 401)
        assert "Bearer" in refused["detail"]
        bad = {"Authorization": "Bearer aj_aaaaaaaaaa_" + "b" * 43}
        assert_problem(http.get("/metrics", headers=bad), 401)
        scraped = http.get("/metrics", headers=keyed_server.headers("acme"))
        assert scraped.status_code == 200
        assert "agentjournal_events_appended_total" in scraped.text
        # Probes need no key, and learn only that the server is up.
        health = http.get("/healthz")
        assert health.status_code == 200
        assert health.json() == {"status": "ok"}


def test_metrics_public_serves_metrics_without_a_key(start_server: Callable[..., Any]) -> None:
    public = start_server("--metrics-public", tenants=("acme",))
    with httpx.Client(base_url=public.base_url, timeout=10.0) as http:
        scraped = http.get("/metrics")
        assert scraped.status_code == 200, scraped.text
        assert "agentjournal_events_appended_total" in scraped.text
        assert_problem(http.get("/v1/sessions"), 401)  # only /metrics is opened
