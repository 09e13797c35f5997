"""POST /v1/sessions/{id}/turns over a real `agentjournal serve --agent demo` process on loopback:
a turn answered as JSON once its reply is durable, or streamed as SSE as each event becomes
durable; a client that leaves mid-stream does not stop its turn; refusals (no agent, a session not
bound to the agent, a turn already open, invalid bodies) are problem+json and write nothing; an
Idempotency-Key repeat answers the original turn; a model that fails is 502 with the turn left
open; and turns a crash cut before the server started are finished before it answers at all.

"Nothing written" is read from the database file itself (events and sessions rows).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from http_checks import assert_problem, db_counts

from agentjournal import Journal
from agentjournal.demo.order_agent import ORDER_COUNT, PLACE_ORDER, QUERY_ORDERS, ledger_lines

SSE = "text/event-stream"
REPLY = f"你当前有 {ORDER_COUNT} 个订单。"
TURN_TYPES = ["user_message", "tool_call", "tool_result", "assistant_message"]
DELTAS = ("text_delta", "tool_call_delta")  # the model's deltas, streamed between the events
WAIT = 30.0  # the most a turn may take before the test fails instead of hanging
# place_order's delay on the server where a client leaves mid-turn: long enough that the turn is
# surely still in its tool when the client has gone (checked, not assumed).
SLOW_ORDER_SECONDS = "1.5"
FAST = {"AGENTJOURNAL_ORDER_DELAY": "0"}
HERE = Path(__file__).parent


# -- helpers ----------------------------------------------------------------------------------


def ok(response: httpx.Response, status: int = 200) -> Any:
    assert response.status_code == status, response.text
    return response.json()


def new_session(http: httpx.Client, agent: str | None = "demo", **body: Any) -> str:
    metadata = {"agent": agent} if agent is not None else None
    created = ok(http.post("/v1/sessions", json={"metadata": metadata, **body}), 201)
    return str(created["session_id"])


def events(http: httpx.Client, session_id: str, after: int = 0) -> list[dict[str, Any]]:
    page = ok(http.get(f"/v1/sessions/{session_id}/events", params={"after": after}))
    found: list[dict[str, Any]] = page["events"]
    return found


def turn(http: httpx.Client, session_id: str, text: str, **headers: str) -> httpx.Response:
    return http.post(f"/v1/sessions/{session_id}/turns", json={"content": text}, headers=headers)


@dataclass
class Frame:
    id: str | None
    event: str | None
    data: str

    def json(self) -> Any:
        return json.loads(self.data)


def frames(lines: Iterator[str]) -> Iterator[Frame]:
    """SSE frames as they arrive (comments such as heartbeats skipped)."""
    fields: dict[str, list[str]] = {}
    for line in lines:
        if line == "":
            if "data" in fields:
                ids, names = fields.get("id", [None]), fields.get("event", [None])
                yield Frame(ids[-1], names[-1], "\n".join(fields["data"]))
            fields = {}
            continue
        if line.startswith(":"):
            continue
        name, _, value = line.partition(":")
        fields.setdefault(name, []).append(value[1:] if value.startswith(" ") else value)
    assert not fields.get("data"), f"the stream ended inside a frame: {fields}"


def streamed_turn(
    http: httpx.Client, session_id: str, text: str, **headers: str
) -> tuple[httpx.Response, list[Frame]]:
    """A turn with `Accept: text/event-stream`, read to the end of the stream (a stream that
    does not end fails on the client's read timeout)."""
    with http.stream(
        "POST",
        f"/v1/sessions/{session_id}/turns",
        json={"content": text},
        headers={"Accept": SSE, **headers},
    ) as response:
        if not response.headers.get("content-type", "").startswith(SSE):
            response.read()
            return response, []
        return response, list(frames(response.iter_lines()))


def journaled(received: list[Frame]) -> list[Frame]:
    """The frames of journal events (not the model's deltas)."""
    return [frame for frame in received if frame.event not in DELTAS]


def assert_numbered(received: list[Frame], turn: int) -> None:
    """Every frame's id is `{turn}:{run}:{n}`, one run, n counting from 1."""
    runs = {frame.id.split(":")[1] for frame in received if frame.id}
    assert len(runs) == 1, [frame.id for frame in received]
    run = runs.pop()
    assert [frame.id for frame in received] == [
        f"{turn}:{run}:{n}" for n in range(1, len(received) + 1)
    ]


def wait_for(check: Callable[[], Any], what: str) -> Any:
    deadline = time.monotonic() + WAIT
    while True:
        found = check()
        if found:
            return found
        assert time.monotonic() < deadline, f"{what} did not happen in {WAIT} s"
        time.sleep(0.02)


@pytest.fixture(scope="module")
def agent_server(start_server: Callable[..., Any]) -> Any:
    """`serve --agent demo` with place_order instant."""
    return start_server("--agent", "demo", env=FAST)


@pytest.fixture
def http(agent_server: Any) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=agent_server.base_url, timeout=10.0) as client:
        yield client


# -- turns ------------------------------------------------------------------------------------


def test_a_json_turn_answers_201_with_the_reply_and_the_events_it_wrote(
    http: httpx.Client,
) -> None:
    session_id = new_session(http, title="订单客服")
    response = turn(http, session_id, QUERY_ORDERS)
    body = ok(response, 201)
    assert response.headers["content-type"].startswith("application/json")
    assert set(body) == {"session_id", "reply", "events"}
    assert (body["session_id"], body["reply"]) == (session_id, REPLY)
    assert [e["type"] for e in body["events"]] == TURN_TYPES
    assert [e["seq"] for e in body["events"]] == [2, 3, 4, 5]
    assert body["events"] == events(http, session_id, after=1)  # durable, exactly as sent
    user, call, result, answer = (e["payload"] for e in body["events"])
    assert user == {"content": QUERY_ORDERS}
    assert (call["name"], call["arguments"]) == ("query_order_count", "{}")
    assert (result["call_id"], result["content"]) == (call["call_id"], str(ORDER_COUNT))
    assert "is_error" not in result
    assert answer["content"] == REPLY
    session = ok(http.get(f"/v1/sessions/{session_id}"))
    assert (session["turn_open"], session["last_seq"]) == (False, 5)

    # The next turn continues the conversation.
    again = ok(turn(http, session_id, "你好"), 201)
    assert again["reply"] == "你好！我是订单客服助手，可以帮你查询订单数量。"
    assert [(e["seq"], e["type"]) for e in again["events"]] == [
        (6, "user_message"),
        (7, "assistant_message"),
    ]


def test_an_sse_turn_streams_each_event_with_its_seq_and_ends_with_the_turn(
    http: httpx.Client,
) -> None:
    session_id = new_session(http)
    response, received = streamed_turn(http, session_id, QUERY_ORDERS)
    assert response.status_code == 201
    assert response.headers["content-type"].startswith(SSE)
    events_sent = journaled(received)
    assert [frame.event for frame in events_sent] == TURN_TYPES
    assert_numbered(received, 2)
    durable = events(http, session_id, after=1)
    assert [frame.json() for frame in events_sent] == durable
    assert all(frame.event == frame.json()["type"] for frame in events_sent)
    assert events_sent[-1].json()["payload"]["content"] == REPLY
    text = "".join(f.json()["text"] for f in received if f.event == "text_delta")
    assert text == REPLY
    assert ok(http.get(f"/v1/sessions/{session_id}"))["turn_open"] is False


def test_a_client_that_leaves_after_the_first_frame_does_not_stop_the_turn(
    start_server: Callable[..., Any], tmp_path: Path
) -> None:
    ledger = tmp_path / "orders.jsonl"
    slow = start_server(
        "--agent",
        "demo",
        env={
            "AGENTJOURNAL_ORDER_DELAY": SLOW_ORDER_SECONDS,
            "AGENTJOURNAL_ORDER_LEDGER": str(ledger),
        },
    )
    with httpx.Client(base_url=slow.base_url, timeout=10.0) as client:
        session_id = new_session(client)
        with client.stream(
            "POST",
            f"/v1/sessions/{session_id}/turns",
            json={"content": PLACE_ORDER},
            headers={"Accept": SSE},
        ) as response:
            assert response.status_code == 201
            first = next(frames(response.iter_lines()))
        # The connection is closed after one frame.
        assert (first.id.split(":")[::2], first.event) == (["2", "1"], "user_message")
        # The turn was still running when the client left (place_order takes its time) ...
        assert ok(client.get(f"/v1/sessions/{session_id}"))["turn_open"] is True
        # ... and it runs to its end anyway.
        wait_for(
            lambda: not ok(client.get(f"/v1/sessions/{session_id}"))["turn_open"],
            "the turn's end",
        )
        written = events(client, session_id, after=1)
    assert [e["type"] for e in written] == TURN_TYPES
    assert written[-1]["payload"]["content"] == "已下单，订单号 A-1001。"
    assert "is_error" not in written[2]["payload"]
    # The order was placed once, by this turn's call: nothing ran it again.
    call_id = written[1]["payload"]["call_id"]
    assert [line["key"] for line in ledger_lines(ledger)] == [f"{session_id}:{call_id}"]


# -- refusals ---------------------------------------------------------------------------------


def test_a_session_not_bound_to_the_agent_is_409_and_nothing_is_written(
    http: httpx.Client, agent_server: Any
) -> None:
    unbound = new_session(http, agent=None)
    other_agent = new_session(http, agent="someone-else")
    counts = db_counts(agent_server.db_path)
    for session_id in (unbound, other_agent):
        problem = assert_problem(turn(http, session_id, QUERY_ORDERS), 409)
        assert "demo" in problem["detail"]
        response, received = streamed_turn(http, session_id, QUERY_ORDERS)
        assert_problem(response, 409)  # a refusal, not a stream
        assert received == []
    assert db_counts(agent_server.db_path) == counts
    assert [e["type"] for e in events(http, unbound)] == ["session_created"]


def test_a_session_with_a_turn_open_is_409_and_nothing_is_written(
    http: httpx.Client, agent_server: Any
) -> None:
    session_id = new_session(http)
    # A user message nobody answered yet: the session's turn is open.
    ok(
        http.post(
            f"/v1/sessions/{session_id}/events",
            json={"type": "user_message", "payload": {"content": "hello?"}},
        ),
        201,
    )
    assert ok(http.get(f"/v1/sessions/{session_id}"))["turn_open"] is True
    counts = db_counts(agent_server.db_path)
    assert_problem(turn(http, session_id, QUERY_ORDERS), 409)
    response, _ = streamed_turn(http, session_id, QUERY_ORDERS)
    assert_problem(response, 409)
    assert db_counts(agent_server.db_path) == counts


def test_invalid_turn_bodies_are_422_and_unknown_sessions_404_writing_nothing(
    http: httpx.Client, agent_server: Any
) -> None:
    session_id = new_session(http)
    counts = db_counts(agent_server.db_path)
    url = f"/v1/sessions/{session_id}/turns"
    bodies: list[Any] = [{}, {"content": 5}, {"content": None}, {"content": "hi", "x": 1}, []]
    for body in bodies:
        assert_problem(http.post(url, json=body), 422)
    assert_problem(http.post(url, json={"content": "hi"}, headers={"Idempotency-Key": ""}), 422)
    problem = assert_problem(turn(http, "sess_doesnotexist00", QUERY_ORDERS), 404)
    assert problem["title"] == "Session not found"
    assert db_counts(agent_server.db_path) == counts


def test_a_server_without_an_agent_answers_409_and_writes_nothing(
    client: httpx.Client, server: Any
) -> None:
    """The conftest's open-mode server runs no agent. The session is looked up first: a missing
    one (or another tenant's) is 404 like on every session route; an existing one is 409."""
    session_id = new_session(client)
    counts = db_counts(server.db_path)
    problem = assert_problem(turn(client, session_id, QUERY_ORDERS), 409)
    assert "--agent" in problem["detail"]
    response, received = streamed_turn(client, session_id, QUERY_ORDERS)
    assert_problem(response, 409)
    assert received == []
    assert_problem(turn(client, "sess_doesnotexist00", QUERY_ORDERS), 404)
    assert db_counts(server.db_path) == counts


# -- idempotency ------------------------------------------------------------------------------


def test_an_idempotency_key_repeat_answers_200_with_the_original_turn_and_writes_nothing(
    http: httpx.Client, agent_server: Any
) -> None:
    session_id = new_session(http)
    first = ok(turn(http, session_id, QUERY_ORDERS, **{"Idempotency-Key": "t-1"}), 201)
    assert first["events"][0]["idempotency_key"] == "t-1"
    counts = db_counts(agent_server.db_path)

    repeat = turn(http, session_id, QUERY_ORDERS, **{"Idempotency-Key": "t-1"})
    assert ok(repeat, 200) == first
    # Over SSE too: 200 and the original turn's events.
    response, received = streamed_turn(http, session_id, QUERY_ORDERS, **{"Idempotency-Key": "t-1"})
    assert response.status_code == 200
    assert response.headers["content-type"].startswith(SSE)
    assert [frame.json() for frame in journaled(received)] == first["events"]
    assert_numbered(received, 2)
    # The same key for another message is a conflict, not the original.
    assert_problem(turn(http, session_id, "你好", **{"Idempotency-Key": "t-1"}), 409)
    assert db_counts(agent_server.db_path) == counts

    # A new key is a new turn.
    second = ok(turn(http, session_id, QUERY_ORDERS, **{"Idempotency-Key": "t-2"}), 201)
    assert second["reply"] == REPLY
    assert second["events"][0]["seq"] == 6


# -- a model that fails -----------------------------------------------------------------------


@pytest.fixture(scope="module")
def down_server(start_server: Callable[..., Any]) -> Any:
    """`serve --agent agents_for_tests:down`: an agent whose model always fails."""
    path = os.pathsep.join(p for p in (str(HERE), os.environ.get("PYTHONPATH", "")) if p)
    return start_server("--agent", "agents_for_tests:down", env={"PYTHONPATH": path})


def test_a_model_that_fails_is_502_and_the_turn_stays_open(down_server: Any) -> None:
    with httpx.Client(base_url=down_server.base_url, timeout=10.0) as client:
        session_id = new_session(client, agent="down")
        problem = assert_problem(turn(client, session_id, "hello"), 502)
        assert "the model is down" in problem["detail"]
        # The user's message is durable and the turn open: resume (or a retry) finishes it.
        written = events(client, session_id, after=1)
        assert [(e["type"], e["payload"]) for e in written] == [
            ("user_message", {"content": "hello"})
        ]
        assert ok(client.get(f"/v1/sessions/{session_id}"))["turn_open"] is True
        assert_problem(turn(client, session_id, "hello again"), 409)

        # Over SSE the stream has begun when the model fails: its user_message frame, then an
        # `error` frame carrying the problem.
        other = new_session(client, agent="down")
        response, received = streamed_turn(client, other, "hello")
        assert response.status_code == 201
        assert [frame.event for frame in received] == ["user_message", "error"]
        assert_numbered(received, 2)
        error = received[1].json()
        assert (error["status"], error["title"]) == (502, "Model failed")
        assert "the model is down" in error["detail"]
        assert ok(client.get(f"/v1/sessions/{other}"))["turn_open"] is True


# -- resume at start-up -----------------------------------------------------------------------


def test_turns_a_crash_cut_are_finished_before_the_server_answers(
    start_server: Callable[..., Any], tmp_path: Path
) -> None:
    """The database is written with the library before the server starts: turns cut after the
    user's message, after an idempotent call, after a non-idempotent call, and one in a session
    of no agent. The first request the server answers already sees the agent's turns finished."""
    db_path = tmp_path / "cut.db"
    ledger = tmp_path / "orders.jsonl"
    bound = {"agent": "demo"}
    with Journal.open(db_path) as journal:
        asked = journal.create_session("asked", metadata=bound).session_id
        journal.append(asked, "user_message", {"content": QUERY_ORDERS})
        counting = journal.create_session("counting", metadata=bound).session_id
        journal.append(counting, "user_message", {"content": QUERY_ORDERS})
        journal.append(
            counting,
            "tool_call",
            {"call_id": "call_1", "name": "query_order_count", "arguments": "{}"},
        )
        ordering = journal.create_session("ordering", metadata=bound).session_id
        journal.append(ordering, "user_message", {"content": PLACE_ORDER})
        journal.append(
            ordering,
            "tool_call",
            {"call_id": "call_1", "name": "place_order", "arguments": '{"item": "x"}'},
        )
        foreign = journal.create_session("someone else's chat", metadata={"k": "v"}).session_id
        journal.append(foreign, "user_message", {"content": QUERY_ORDERS})
        before_foreign = [e.to_dict() for e in journal.events(foreign)]

    started = start_server(
        "--agent",
        "demo",
        db_path=db_path,
        env={**FAST, "AGENTJOURNAL_ORDER_LEDGER": str(ledger)},
    )
    with httpx.Client(base_url=started.base_url, timeout=10.0) as client:
        # No waiting: resume ran before the server bound its port.
        state = {s: ok(client.get(f"/v1/sessions/{s}")) for s in (asked, counting, ordering)}
        assert {s: state[s]["turn_open"] for s in state} == dict.fromkeys(state, False)

        asked_events = events(client, asked)
        assert [e["type"] for e in asked_events] == ["session_created", *TURN_TYPES]
        assert asked_events[-1]["payload"]["content"] == REPLY

        counted = events(client, counting)
        assert [e["type"] for e in counted] == ["session_created", *TURN_TYPES]
        # The idempotent call was run again: its result is the real one.
        assert counted[3]["payload"] == {"call_id": "call_1", "content": str(ORDER_COUNT)}
        assert counted[-1]["payload"]["content"] == REPLY

        ordered = events(client, ordering)
        assert [e["type"] for e in ordered] == ["session_created", *TURN_TYPES]
        result = ordered[3]["payload"]
        assert (result["call_id"], result["is_error"]) == ("call_1", True)
        assert result["content"].startswith("error: interrupted")
        assert "重复下单" in ordered[-1]["payload"]["content"]  # the agent's on_error reply
        assert ledger_lines(ledger) == []  # not idempotent: never run again

        # A session of no agent is left as it was, turn open.
        assert events(client, foreign) == before_foreign
        assert ok(client.get(f"/v1/sessions/{foreign}"))["turn_open"] is True

        # The finished sessions take new turns.
        assert ok(turn(client, ordering, QUERY_ORDERS), 201)["reply"] == REPLY
