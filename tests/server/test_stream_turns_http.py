"""Streamed turns over a real `agentjournal serve --agent agents_for_tests:scripted` process on
loopback: the model's deltas arrive in order between the journaled events; a reconnect after any
frame's id gets exactly the rest (during the turn and after it ended); a client that leaves does
not stop the turn; a cancel journals the text the user was sent, marked interrupted; a model that
fails mid-stream ends the stream with an `error` frame and leaves the turn for resume; and a
server SIGKILLed mid-stream finishes the turn when it restarts, streaming the new answer (after a
`reset`) to the client that reconnects. All of it over `ScriptedModel`, then the main cases over
the official OpenAI and Anthropic clients talking to the fake servers (tests/fake_model_servers.py).

The scripted model streams one character per delta; the environment shapes it (a delay per chunk,
a stall until cancelled, a failure at a given chunk: see agents_for_tests.scripted)."""

from __future__ import annotations

import os
import re
import signal
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from http_checks import assert_problem
from test_turns_http import Frame, assert_numbered, events, frames, new_session, ok, wait_for

from agentjournal.demo.order_agent import ORDER_COUNT, QUERY_ORDERS, SCRIPTS
from agentjournal.server.turn_frames import FrameId
from fake_model_servers import Call, FakeAnthropic, FakeOpenAI, Reply, split

SSE = "text/event-stream"
HERE = Path(__file__).parent
GREETING = SCRIPTS["你好"].reply
REPLY = SCRIPTS[QUERY_ORDERS].reply.replace("{result}", str(ORDER_COUNT))
AGENT = "agents_for_tests:scripted"


def agent_env(**shape: str) -> dict[str, str]:
    path = os.pathsep.join(p for p in (str(HERE), os.environ.get("PYTHONPATH", "")) if p)
    return {"PYTHONPATH": path, "AGENTJOURNAL_ORDER_DELAY": "0", **shape}


@contextmanager
def posted(
    client: httpx.Client, session_id: str, text: str, **headers: str
) -> Iterator[Iterator[Frame]]:
    """A streamed turn, its frames read as they arrive; leaving the block drops the client."""
    with client.stream(
        "POST",
        f"/v1/sessions/{session_id}/turns",
        json={"content": text},
        headers={"Accept": SSE, **headers},
    ) as response:
        assert response.status_code == 201, response.read()
        assert response.headers["content-type"].startswith(SSE)
        yield frames(response.iter_lines())


def reconnect(
    client: httpx.Client,
    session_id: str,
    turn: int,
    last_id: str | None = None,
    **params: str,
) -> list[Frame]:
    """The turn's stream after `last_id` (Last-Event-ID), read to its end."""
    headers = {"Last-Event-ID": last_id} if last_id is not None else {}
    url = f"/v1/sessions/{session_id}/turns/{turn}/stream"
    with client.stream("GET", url, headers=headers, params=params) as response:
        assert response.status_code == 200, response.read()
        return list(frames(response.iter_lines()))


def text_of(received: list[Frame]) -> str:
    return "".join(frame.json()["text"] for frame in received if frame.event == "text_delta")


def shape(received: list[Frame]) -> list[str]:
    return [frame.event or "" for frame in received]


def collapsed(names: list[str]) -> list[str]:
    """`names` with each run of one name written once (clients split deltas differently)."""
    return [name for i, name in enumerate(names) if i == 0 or names[i - 1] != name]


@pytest.fixture(scope="module")
def fast(start_server: Callable[..., Any]) -> Any:
    return start_server("--agent", AGENT, env=agent_env())


@pytest.fixture(scope="module")
def slow(start_server: Callable[..., Any]) -> Any:
    """Each chunk a little late, so that a turn is still running while a test reconnects (the
    assertions hold either way: a turn that ended is resumed from its kept frames)."""
    return start_server("--agent", AGENT, env=agent_env(AGENTJOURNAL_TEST_CHUNK_DELAY="0.02"))


def test_deltas_arrive_in_order_between_the_events_and_a_reconnect_after_any_frame_gets_the_rest(
    fast: Any,
) -> None:
    with httpx.Client(base_url=fast.base_url, timeout=10.0) as client:
        session_id = new_session(client)
        with posted(client, session_id, "你好") as stream:
            received = list(stream)
        assert shape(received) == [
            "user_message",
            *["text_delta"] * len(GREETING),
            "assistant_message",
        ]
        assert_numbered(received, 2)
        assert [f.json()["text"] for f in received[1:-1]] == list(GREETING)
        assert all(f.json()["turn"] == 2 for f in received[1:-1])
        assert [f.json() for f in (received[0], received[-1])] == events(client, session_id, 1)
        assert received[-1].json()["payload"] == {"content": GREETING}

        # After every frame's id, exactly the frames after it; without one, all of them.
        assert reconnect(client, session_id, 2) == received
        for index, frame in enumerate(received):
            assert frame.id is not None
            assert reconnect(client, session_id, 2, frame.id) == received[index + 1 :], index
        assert reconnect(client, session_id, 2, after=received[3].id or "") == received[4:]
        assert reconnect(client, session_id, 2, follow="false") == received

        # A tool call streams as deltas too: its name first, then argument fragments.
        with posted(client, session_id, QUERY_ORDERS) as stream:
            called = list(stream)
        assert shape(called)[:3] == ["user_message", "tool_call_delta", "tool_call_delta"]
        first_delta, second_delta = (f.json() for f in called[1:3])
        call = next(f.json() for f in called if f.event == "tool_call")["payload"]
        assert first_delta == {
            "turn": 4,
            "index": 0,
            "call_id": call["call_id"],
            "name": "query_order_count",
            "arguments": "{",
        }
        assert second_delta == {
            "turn": 4,
            "index": 0,
            "call_id": None,
            "name": None,
            "arguments": "}",
        }
        assert text_of(called) == REPLY
        for index, frame in enumerate(called):
            assert reconnect(client, session_id, 4, frame.id) == called[index + 1 :], index


def test_a_reconnect_during_the_turn_gets_the_rest_live_and_a_dropped_client_does_not_stop_it(
    slow: Any,
) -> None:
    with httpx.Client(base_url=slow.base_url, timeout=10.0) as client:
        session_id = new_session(client)
        with posted(client, session_id, "你好") as stream:
            before = [next(stream) for _ in range(6)]  # the user message and five deltas
        # The client left; the turn goes on. Reconnecting after the last frame it saw:
        last = before[-1].id
        assert last is not None
        rest = reconnect(client, session_id, 2, last)
        received = before + rest
        assert text_of(received) == GREETING
        assert_numbered(received, 2)
        assert rest[-1].event == "assistant_message"
        # The turn ran to its end and is journaled.
        wait_for(lambda: not ok(client.get(f"/v1/sessions/{session_id}"))["turn_open"], "end")
        written = events(client, session_id, after=1)
        assert [e["type"] for e in written] == ["user_message", "assistant_message"]
        assert written[-1]["payload"] == {"content": GREETING}

        # A client that leaves and never comes back: the turn still ends, journaled.
        other = new_session(client)
        with posted(client, other, "你好") as stream:
            next(stream)
        wait_for(lambda: not ok(client.get(f"/v1/sessions/{other}"))["turn_open"], "the end")
        assert events(client, other, after=2)[0]["payload"] == {"content": GREETING}


def test_a_cancel_journals_the_text_sent_as_an_interrupted_reply_scoped_to_the_tenant(
    start_server: Callable[..., Any],
) -> None:
    stalling = start_server(
        "--agent",
        AGENT,
        tenants=("acme", "beta"),
        env=agent_env(AGENTJOURNAL_TEST_STALL_AT="5"),
    )
    acme, beta = stalling.headers("acme"), stalling.headers("beta")
    with httpx.Client(base_url=stalling.base_url, timeout=10.0, headers=acme) as client:
        session_id = new_session(client)
        base = f"/v1/sessions/{session_id}/turns/2"
        with posted(client, session_id, "你好") as stream:
            seen = [next(stream) for _ in range(6)]  # the user message and five deltas
            assert shape(seen) == ["user_message", *["text_delta"] * 5]
            # Another tenant sees no such turn.
            assert_problem(client.post(f"{base}/cancel", headers=beta), 404)
            assert_problem(client.get(f"{base}/stream", headers=beta), 404)
            cancelled = ok(client.post(f"{base}/cancel"))
            rest = list(stream)
        answer = {"content": GREETING[:5], "interrupted": True}
        assert cancelled["interrupted"] is True
        assert (cancelled["session_id"], cancelled["turn"]) == (session_id, 2)
        assert cancelled["event"]["payload"] == answer
        assert [frame.json() for frame in rest] == [cancelled["event"]]
        assert text_of(seen) == GREETING[:5]
        written = events(client, session_id, after=1)
        assert [e["payload"] for e in written] == [{"content": "你好"}, answer]
        assert ok(client.get(f"/v1/sessions/{session_id}"))["turn_open"] is False
        # The turn has ended: a second cancel is a conflict; an unknown turn is not found.
        assert_problem(client.post(f"{base}/cancel"), 409)
        assert_problem(client.post(f"/v1/sessions/{session_id}/turns/9/cancel"), 404)
        assert_problem(client.get(f"/v1/sessions/{session_id}/turns/9/stream"), 404)
        assert_problem(client.get(f"{base}/stream", headers={"Last-Event-ID": "x"}), 422)
        assert reconnect(client, session_id, 2) == seen + rest


def test_a_model_failing_mid_stream_sends_an_error_frame_and_resume_streams_the_new_answer(
    start_server: Callable[..., Any], tmp_path: Path
) -> None:
    db_path = tmp_path / "failing.db"
    failing = start_server(
        "--agent", AGENT, db_path=db_path, env=agent_env(AGENTJOURNAL_TEST_FAIL_AT="3")
    )
    with httpx.Client(base_url=failing.base_url, timeout=10.0) as client:
        session_id = new_session(client)
        with posted(client, session_id, "你好") as stream:
            received = list(stream)
        assert shape(received) == [
            "user_message",
            "text_delta",
            "text_delta",
            "text_delta",
            "error",
        ]
        assert_numbered(received, 2)
        problem = received[-1].json()
        assert (problem["status"], problem["title"]) == (502, "Model failed")
        assert "broke off" in problem["detail"]
        # Nothing of the half-written reply is journaled; the turn is open for resume.
        assert [e["type"] for e in events(client, session_id, 1)] == ["user_message"]
        assert ok(client.get(f"/v1/sessions/{session_id}"))["turn_open"] is True
        assert reconnect(client, session_id, 2, received[-2].id) == received[-1:]
    failing.stop()

    # A server whose model answers finishes the turn at start-up; the client that reconnects
    # with the id it last saw is told to discard its draft, then gets the new answer whole.
    healthy = start_server("--agent", AGENT, db_path=db_path, env=agent_env())
    with httpx.Client(base_url=healthy.base_url, timeout=10.0) as client:
        again = reconnect(client, session_id, 2, received[-1].id)
        assert_restarted(again, received[-1].id, received[0])
        written = events(client, session_id, after=1)
        assert [e["payload"] for e in written] == [{"content": "你好"}, {"content": GREETING}]


def assert_restarted(
    frames_after: list[Frame], last_id: str | None, user_message: Frame, deltas: int = 0
) -> None:
    """A `reset` naming the new run, then that run from its start: the user message (the same
    journaled event), every delta of the new answer (`deltas` of them; 0: one per character),
    and the answer."""
    reset, *run = frames_after
    assert reset.event == "reset"
    old, new = FrameId.parse(last_id or ""), FrameId.parse(reset.id or "")
    assert old is not None
    assert new is not None
    assert (new.turn, new.n) == (2, 0)
    assert new.run != old.run
    assert reset.json()["run"] == new.run
    count = deltas or len(GREETING)
    assert shape(run) == ["user_message", *["text_delta"] * count, "assistant_message"]
    assert [frame.id for frame in run] == [f"2:{new.run}:{n}" for n in range(1, len(run) + 1)]
    assert run[0].json() == user_message.json()
    assert text_of(run) == GREETING
    answer = run[-1].json()["payload"]
    assert answer["content"] == GREETING
    assert "interrupted" not in answer


def test_a_server_killed_mid_stream_resumes_the_turn_and_streams_it_to_a_reconnecting_client(
    start_server: Callable[..., Any], tmp_path: Path
) -> None:
    db_path = tmp_path / "killed.db"
    stalling = start_server(
        "--agent", AGENT, db_path=db_path, env=agent_env(AGENTJOURNAL_TEST_STALL_AT="4")
    )
    with httpx.Client(base_url=stalling.base_url, timeout=10.0) as client:
        session_id = new_session(client)
        with posted(client, session_id, "你好") as stream:
            seen = [next(stream) for _ in range(5)]  # the user message and four deltas
            stalling.process.send_signal(signal.SIGKILL)
            stalling.process.wait(timeout=15)
    assert text_of(seen) == GREETING[:4]

    restarted = start_server("--agent", AGENT, db_path=db_path, port=stalling.port, env=agent_env())
    assert restarted.base_url == stalling.base_url
    with httpx.Client(base_url=restarted.base_url, timeout=10.0) as client:
        again = reconnect(client, session_id, 2, seen[-1].id)
        assert_restarted(again, seen[-1].id, seen[0])
        # Nothing half-written was journaled: the user message, then the whole new answer.
        written = events(client, session_id, after=1)
        assert [e["payload"] for e in written] == [{"content": "你好"}, {"content": GREETING}]


def test_the_documented_python_client_prints_the_reply_as_it_is_written(
    fast: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    page = (HERE.parent.parent / "docs" / "http.md").read_text(encoding="utf-8")
    (client_code,) = [b for b in re.findall(r"```python\n(.*?)```", page, re.S) if "def ask" in b]
    namespace: dict[str, Any] = {}
    exec(compile(client_code, "docs/http.md", "exec"), namespace)
    with httpx.Client(base_url=fast.base_url, timeout=10.0) as client:
        session_id = new_session(client)
    reply = namespace["ask"](fast.base_url, session_id, QUERY_ORDERS, "docs-1")
    assert reply == REPLY
    assert capsys.readouterr().out == REPLY + "\n"


# -- over the OpenAI- and Anthropic-compatible fake servers (the official clients) -------------


@pytest.fixture(scope="module", params=["openai", "anthropic"])
def fake(request: pytest.FixtureRequest) -> Iterator[FakeOpenAI | FakeAnthropic]:
    """A fake model server in this process; the agent's server (a subprocess) calls it."""
    server = FakeOpenAI() if request.param == "openai" else FakeAnthropic()
    with server:
        yield server


def fake_agent(fake: FakeOpenAI | FakeAnthropic) -> tuple[str, dict[str, str]]:
    """The `--agent` and environment of a server whose agent talks to `fake`."""
    name = "openai_fake" if isinstance(fake, FakeOpenAI) else "anthropic_fake"
    return f"agents_for_tests:{name}", agent_env(AGENTJOURNAL_TEST_MODEL_URL=fake.base_url)


@pytest.fixture(scope="module")
def provider_server(start_server: Callable[..., Any], fake: FakeOpenAI | FakeAnthropic) -> Any:
    agent, env = fake_agent(fake)
    return start_server("--agent", agent, env=env)


def test_over_a_provider_deltas_arrive_in_order_and_a_reconnect_after_any_frame_gets_the_rest(
    provider_server: Any, fake: FakeOpenAI | FakeAnthropic
) -> None:
    fake.answer(
        Reply(calls=[Call("call_1", "query_order_count", '{"month": "11"}', fragments=3)]),
        Reply(text=split(REPLY, 6)),
    )
    with httpx.Client(base_url=provider_server.base_url, timeout=10.0) as client:
        session_id = new_session(client)
        with posted(client, session_id, QUERY_ORDERS) as stream:
            received = list(stream)
        assert collapsed(shape(received)) == [
            "user_message",
            "tool_call_delta",
            "tool_call",
            "tool_result",
            "text_delta",
            "assistant_message",
        ]
        assert_numbered(received, 2)
        calls = [f.json() for f in received if f.event == "tool_call_delta"]
        assert (calls[0]["call_id"], calls[0]["name"]) == ("call_1", "query_order_count")
        assert "".join(c["arguments"] for c in calls) == '{"month": "11"}'
        assert [f.json()["text"] for f in received if f.event == "text_delta"] == split(REPLY, 6)
        journaled = [f.json() for f in received if f.event not in ("text_delta", "tool_call_delta")]
        assert journaled == events(client, session_id, after=1)
        for index, frame in enumerate(received):
            assert reconnect(client, session_id, 2, frame.id) == received[index + 1 :], index


def test_over_a_provider_a_dropped_client_does_not_stop_the_turn_and_a_cancel_hangs_up(
    provider_server: Any, fake: FakeOpenAI | FakeAnthropic
) -> None:
    chunks = split(GREETING, 8)
    fake.answer(Reply(text=chunks, interval=0.05))
    with httpx.Client(base_url=provider_server.base_url, timeout=10.0) as client:
        session_id = new_session(client)
        with posted(client, session_id, "你好") as stream:
            before = [next(stream) for _ in range(3)]
        rest = reconnect(client, session_id, 2, before[-1].id)
        assert [f.json()["text"] for f in before[1:] + rest[:-1]] == chunks
        wait_for(lambda: not ok(client.get(f"/v1/sessions/{session_id}"))["turn_open"], "end")
        assert events(client, session_id, after=2)[0]["payload"]["content"] == GREETING

        fake.answer(Reply(text=chunks, stall=60.0, stall_after=3))
        other = new_session(client)
        with posted(client, other, "你好") as stream:
            seen = [next(stream) for _ in range(4)]  # the user message and three deltas
            cancelled = ok(client.post(f"/v1/sessions/{other}/turns/2/cancel"))
            after = list(stream)
        answer = {"content": "".join(chunks[:3]), "interrupted": True}
        assert cancelled["event"]["payload"] == answer
        assert [f.json() for f in after] == [cancelled["event"]]
        assert text_of(seen) == answer["content"]
        # The model call was stopped: the agent's client hung up on the model server.
        fake.wait_until(lambda received: received[-1].disconnected)


def test_over_a_provider_a_failure_mid_stream_and_a_kill_mid_stream_resume_on_restart(
    start_server: Callable[..., Any], fake: FakeOpenAI | FakeAnthropic, tmp_path: Path
) -> None:
    agent, env = fake_agent(fake)
    db_path = tmp_path / "provider.db"
    chunks = split(GREETING, 8)
    first = start_server("--agent", agent, db_path=db_path, env=env)
    with httpx.Client(base_url=first.base_url, timeout=10.0) as client:
        # The model's stream breaks off with an error event after three chunks.
        failed = new_session(client)
        fake.answer(Reply(text=chunks, error_after=3))
        with posted(client, failed, "你好") as stream:
            broken = list(stream)
        assert shape(broken) == ["user_message", "text_delta", "text_delta", "text_delta", "error"]
        assert broken[-1].json()["status"] == 502
        assert [e["type"] for e in events(client, failed, 1)] == ["user_message"]
        # Another turn: the server is killed while the model stalls after three chunks.
        killed = new_session(client)
        fake.answer(Reply(text=chunks, stall=60.0, stall_after=3))
        with posted(client, killed, "你好") as stream:
            seen = [next(stream) for _ in range(4)]
            first.process.send_signal(signal.SIGKILL)
            first.process.wait(timeout=15)
    # Both turns are open; the restarted server finishes them, each with a fresh answer.
    fake.answer(Reply(text=split(GREETING, 4)), Reply(text=split(GREETING, 4)))
    second = start_server("--agent", agent, db_path=db_path, port=first.port, env=env)
    with httpx.Client(base_url=second.base_url, timeout=10.0) as client:
        for session_id, last in ((failed, broken[-1]), (killed, seen[-1])):
            again = reconnect(client, session_id, 2, last.id)
            assert_restarted(again, last.id, seen[0] if session_id == killed else broken[0], 4)
            written = events(client, session_id, after=1)
            assert [e["payload"]["content"] for e in written] == ["你好", GREETING]
