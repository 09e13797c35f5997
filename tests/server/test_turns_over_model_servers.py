"""`/turns` streamed over the runtime's real model clients: `agentjournal serve --agent openai`
(`OpenAIChatModel`) and `--agent model_agents:claude` (`AnthropicModel`), each pointed at the fake
model server of its wire format on loopback (tests/fake_model_servers.py). The model's deltas
reach the client in order between the journaled events, a tool call streams as deltas before it is
journaled, and a model that fails mid-stream ends the stream with an `error` frame and leaves only
what was complete in the journal, the turn open for resume."""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import httpx_sse
import pytest

from agentjournal.demo.order_agent import ORDER_COUNT, QUERY_ORDERS
from fake_model_servers import Call, FakeAnthropic, FakeOpenAI, Reply

HERE = Path(__file__).parent


@dataclass
class Served:
    """A server hosting an agent on a model client, and the fake model server it talks to."""

    agent: str
    fake: FakeOpenAI | FakeAnthropic
    base_url: str


@pytest.fixture(scope="module", params=["openai", "anthropic"])
def served(request: pytest.FixtureRequest, start_server: Callable[..., Any]) -> Iterator[Served]:
    base = {"AGENTJOURNAL_ORDER_DELAY": "0", "AGENTJOURNAL_MODEL": "test-model"}
    if request.param == "openai":
        with FakeOpenAI() as fake:
            env = {**base, "OPENAI_BASE_URL": fake.base_url, "OPENAI_API_KEY": "sk-test"}
            server = start_server("--agent", "openai", env=env)
            yield Served("openai", fake, server.base_url)
            server.stop()
        return
    with FakeAnthropic() as fake:
        path = os.pathsep.join(p for p in (str(HERE), os.environ.get("PYTHONPATH", "")) if p)
        env = {**base, "ANTHROPIC_BASE_URL": fake.base_url, "ANTHROPIC_API_KEY": "sk-ant-test"}
        server = start_server("--agent", "model_agents:claude", env={**env, "PYTHONPATH": path})
        yield Served("claude", fake, server.base_url)
        server.stop()


def streamed_turn(served: Served, text: str) -> tuple[str, list[tuple[str, Any]]]:
    """A new session, one streamed turn on it: the session id and every (event, data) frame."""
    with httpx.Client(base_url=served.base_url, timeout=30.0) as client:
        made = client.post("/v1/sessions", json={"metadata": {"agent": served.agent}})
        assert made.status_code == 201, made.text
        session_id = str(made.json()["session_id"])
        url = f"/v1/sessions/{session_id}/turns"
        with httpx_sse.connect_sse(client, "POST", url, json={"content": text}) as source:
            assert source.response.status_code == 201, source.response.read()
            received = [(sse.event, json.loads(sse.data)) for sse in source.iter_sse()]
    return session_id, received


def journal_of(served: Served, session_id: str) -> list[tuple[str, dict[str, Any]]]:
    answer = httpx.get(f"{served.base_url}/v1/sessions/{session_id}/events", timeout=30.0)
    return [(e["type"], e["payload"]) for e in answer.json()["events"]][1:]


def test_text_deltas_arrive_in_order_and_the_reply_is_journaled_once(served: Served) -> None:
    chunks = ["你好", "！我", "是订单", "客服。"]
    served.fake.answer_to("你好", Reply(chunks, usage=(12, 6)))

    session_id, received = streamed_turn(served, "你好")

    assert [event for event, _ in received] == [
        "user_message",
        *["text_delta"] * len(chunks),
        "assistant_message",
    ]
    assert [data["text"] for event, data in received if event == "text_delta"] == chunks
    reply = {"content": "".join(chunks), "usage": {"prompt_tokens": 12, "completion_tokens": 6}}
    assert received[-1][1]["payload"] == reply
    assert journal_of(served, session_id) == [
        ("user_message", {"content": "你好"}),
        ("assistant_message", reply),
    ]


def test_a_tool_call_streams_as_deltas_then_is_journaled_and_run(served: Served) -> None:
    served.fake.answer_to(
        QUERY_ORDERS,
        Reply(calls=[Call("call_q", "query_order_count", '{"scope": "all"}', 3)], usage=None),
        Reply(["你当前有 ", f"{ORDER_COUNT} 个订单。"], usage=None),
    )

    session_id, received = streamed_turn(served, QUERY_ORDERS)

    kinds = [event for event, _ in received]
    assert kinds[0] == "user_message"
    assert kinds[-3:] == ["text_delta", "text_delta", "assistant_message"]
    call_deltas = [data for event, data in received if event == "tool_call_delta"]
    assert (call_deltas[0]["call_id"], call_deltas[0]["name"]) == ("call_q", "query_order_count")
    assert "".join(d["arguments"] for d in call_deltas) == '{"scope": "all"}'
    # The deltas come before the call is journaled, the call before its result.
    assert kinds.index("tool_call") > max(i for i, k in enumerate(kinds) if k == "tool_call_delta")
    assert kinds.index("tool_result") == kinds.index("tool_call") + 1
    assert journal_of(served, session_id) == [
        ("user_message", {"content": QUERY_ORDERS}),
        (
            "tool_call",
            {"call_id": "call_q", "name": "query_order_count", "arguments": '{"scope": "all"}'},
        ),
        ("tool_result", {"call_id": "call_q", "content": str(ORDER_COUNT)}),
        ("assistant_message", {"content": f"你当前有 {ORDER_COUNT} 个订单。"}),
    ]


@pytest.mark.parametrize(
    "fault",
    [
        pytest.param({"error_after": 2}, id="error-event"),
        pytest.param({"drop_after": 2}, id="dropped"),
    ],
)
def test_a_model_failing_mid_stream_ends_the_stream_with_an_error_and_journals_no_draft(
    served: Served, fault: dict[str, int]
) -> None:
    # Its own text: the server retries the open turn in the background, and gets a 500.
    text = f"tell me ({', '.join(fault)})"
    served.fake.answer_to(text, Reply(["half ", "an ", "answer"], **fault))  # type: ignore[arg-type]

    session_id, received = streamed_turn(served, text)

    assert [event for event, _ in received] == [
        "user_message",
        "text_delta",
        "text_delta",
        "error",
    ]
    problem = received[-1][1]
    assert problem["status"] == 502
    assert served.fake.url in problem["detail"]
    assert journal_of(served, session_id) == [("user_message", {"content": text})]
    session = httpx.get(f"{served.base_url}/v1/sessions/{session_id}", timeout=30.0).json()
    assert session["turn_open"] is True
