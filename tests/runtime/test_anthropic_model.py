"""`AnthropicModel` against the fake Anthropic server on loopback (real HTTP, Anthropic's stream
events): the agent's OpenAI-shape context as Anthropic messages, deltas in order, tool calls and
usage assembled, every fault a `ModelError`, closing the stream hangs up, and a whole turn
journaled. No test reaches beyond 127.0.0.1."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from agentjournal import InvalidArgument, Journal, ModelError
from agentjournal.replay import anthropic_messages
from agentjournal.runtime import AnthropicModel, ModelReply, RequestedCall, Tool
from agentjournal.runtime.agent import Agent
from agentjournal.runtime.streaming import (
    Completed,
    ModelChunk,
    StreamingModel,
    TextDelta,
    ToolCallDelta,
)
from expected import a, t, u
from fake_model_servers import Call, FakeAnthropic, Reply
from helpers.model_streams import NO_TIMEOUT, STALL_TIMEOUT, collect

ENV = ("ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL", "ANTHROPIC_MODEL", "AGENTJOURNAL_MODEL")


@pytest.fixture(autouse=True)
def no_host_config(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ENV:
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def fake() -> Iterator[FakeAnthropic]:
    with FakeAnthropic() as server:
        yield server


@pytest.fixture
def make(fake: FakeAnthropic) -> Iterator[Callable[..., AnthropicModel]]:
    made: list[AnthropicModel] = []

    def model(**kw: Any) -> AnthropicModel:
        kw.setdefault("base_url", fake.base_url)
        kw.setdefault("api_key", "sk-ant-test")
        made.append(AnthropicModel(kw.pop("model", "claude-test"), **kw))
        return made[-1]

    yield model
    for each in made:
        each.close()


LOOKUP = Tool(
    "lookup",
    lambda arguments, invocation: f"item {arguments['id']} is in stock",
    idempotent=True,
    description="Look an item up.",
    parameters={"type": "object", "properties": {"id": {"type": "integer"}}},
)


def test_the_model_is_a_streaming_model(make: Callable[..., AnthropicModel]) -> None:
    assert isinstance(make(), StreamingModel)


def test_configuration(monkeypatch: pytest.MonkeyPatch, fake: FakeAnthropic) -> None:
    with pytest.raises(InvalidArgument, match="ANTHROPIC_MODEL"):
        AnthropicModel(api_key="k")
    with pytest.raises(InvalidArgument, match="ANTHROPIC_API_KEY"):
        AnthropicModel("claude-test")
    with pytest.raises(InvalidArgument, match="max_tokens"):
        AnthropicModel("claude-test", api_key="k", max_tokens=0)
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-env")
    monkeypatch.setenv("ANTHROPIC_BASE_URL", fake.base_url + "/")
    monkeypatch.setenv("ANTHROPIC_MODEL", "claude-env")
    fake.answer(Reply("hi"))
    model = AnthropicModel()
    try:
        assert model.complete([u("x")], []).content == "hi"
    finally:
        model.close()
    [request] = fake.received
    assert request.path == "/v1/messages"
    assert request.body["model"] == "claude-env"
    assert "sk-env" in request.headers.get("x-api-key", request.headers.get("authorization", ""))


def test_the_context_is_sent_as_anthropic_messages(
    fake: FakeAnthropic, make: Callable[..., AnthropicModel]
) -> None:
    context = [
        {"role": "system", "content": "You sell things."},
        u("item 3?"),
        a("let me look", ("c1", "lookup", '{"id": 3}')),
        t("c1", "error: lookup failed"),
        u("and now?"),
    ]
    fake.answer(Reply("ok"))

    make(max_tokens=77).complete(context, [LOOKUP])

    [request] = fake.received
    assert request.body == {
        "model": "claude-test",
        "max_tokens": 77,
        "stream": True,
        "system": "You sell things.",
        "messages": [
            {"role": "user", "content": "item 3?"},
            {
                "role": "assistant",
                "content": [
                    {"type": "text", "text": "let me look"},
                    {"type": "tool_use", "id": "c1", "name": "lookup", "input": {"id": 3}},
                ],
            },
            {
                "role": "user",  # the tool result and the next user message, merged
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": "c1",
                        "content": "error: lookup failed",
                        "is_error": True,
                    },
                    {"type": "text", "text": "and now?"},
                ],
            },
        ],
        "tools": [
            {
                "name": "lookup",
                "description": "Look an item up.",
                "input_schema": {"type": "object", "properties": {"id": {"type": "integer"}}},
            }
        ],
    }


def test_the_conversion_is_replays_own(journal: Journal) -> None:
    session = journal.create_session(system_prompt="Be brief.").session_id
    journal.append(session, "user_message", {"content": "item 3?"})
    journal.append(session, "assistant_message", {"content": "looking"})
    journal.append(
        session, "tool_call", {"call_id": "c1", "name": "lookup", "arguments": '{"id": 3}'}
    )
    journal.append(session, "tool_result", {"call_id": "c1", "content": "in stock"})
    journal.append(session, "assistant_message", {"content": "It is."})

    openai_shape = journal.replay(session)
    assert isinstance(openai_shape, list)
    assert anthropic_messages(openai_shape) == journal.replay(session, format="anthropic")
    with pytest.raises(InvalidArgument):
        anthropic_messages([{"role": "robot", "content": "x"}])
    with pytest.raises(InvalidArgument):
        anthropic_messages([{"content": "no role"}])


def test_deltas_arrive_in_order_and_make_the_whole_reply(
    fake: FakeAnthropic, make: Callable[..., AnthropicModel]
) -> None:
    text = ["Let", " me", " look."]
    calls = [Call("toolu_a", "lookup", '{"id": 3, "note": "é"}', 4), Call("toolu_b", "lookup", "")]
    fake.answer(Reply(text, calls, usage=(42, 17)))

    chunks, error = collect(make(), [u("item 3?")], [LOOKUP])

    assert error is None
    *deltas, done = chunks
    assert [d.text for d in deltas if isinstance(d, TextDelta)] == text
    call_deltas = [d for d in deltas if isinstance(d, ToolCallDelta)]
    assert call_deltas[0] == ToolCallDelta(0, "toolu_a", "lookup", "")
    assert [(d.index, d.call_id, d.name) for d in call_deltas[1:5]] == [(0, None, None)] * 4
    assert "".join(d.arguments for d in call_deltas if d.index == 0) == calls[0].arguments
    assert call_deltas[5:] == [ToolCallDelta(1, "toolu_b", "lookup", "")]
    assert done == Completed(
        ModelReply(
            "Let me look.",
            (
                RequestedCall("toolu_a", "lookup", calls[0].arguments),
                RequestedCall("toolu_b", "lookup", "{}"),
            ),
            {"prompt_tokens": 42, "completion_tokens": 17},
        )
    )


@pytest.mark.parametrize(
    ("reply", "seen", "match", "timeout"),
    [
        pytest.param(Reply(status=500), [], "answered 500", NO_TIMEOUT, id="500-before"),
        pytest.param(Reply(status=529), [], "answered 529", NO_TIMEOUT, id="overloaded-before"),
        pytest.param(
            Reply(["a", "b", "c"], error_after=2),
            ["a", "b"],
            "error mid-stream",
            NO_TIMEOUT,
            id="error-mid",
        ),
        pytest.param(
            Reply(["a", "b", "c"], drop_after=1),
            ["a"],
            "broke off the stream",
            NO_TIMEOUT,
            id="dropped",
        ),
        pytest.param(
            Reply(["a", "b"], stall=30, stall_after=1),
            ["a"],
            "timed out mid-stream",
            STALL_TIMEOUT,
            id="stall",
        ),
        pytest.param(
            Reply(["a"], stall_before=30), [], "timed out before", STALL_TIMEOUT, id="stall-before"
        ),
    ],
)
def test_each_fault_is_a_model_error(
    fake: FakeAnthropic,
    make: Callable[..., AnthropicModel],
    reply: Reply,
    seen: list[str],
    match: str,
    timeout: float,
) -> None:
    fake.answer(reply)

    chunks, error = collect(make(retries=0, timeout=timeout), [u("x")])

    assert isinstance(error, ModelError)
    assert match in str(error)
    assert f"{fake.base_url}/v1/messages" in str(error)
    assert [c.text for c in chunks if isinstance(c, TextDelta)] == seen
    assert not any(isinstance(c, Completed) for c in chunks)
    assert len(fake.received) == 1


def test_aclose_mid_stream_hangs_up_on_the_server(
    fake: FakeAnthropic, make: Callable[..., AnthropicModel]
) -> None:
    fake.answer(Reply(["a", "b"], stall=60, stall_after=1))
    model = make()

    async def run() -> ModelChunk:
        stream = model.stream([u("x")], [])
        first = await anext(stream)
        await stream.aclose()  # type: ignore[attr-defined]
        await model.aclose()
        return first

    assert asyncio.run(run()) == TextDelta("a")
    fake.wait_until(lambda got: got[0].disconnected)
    assert not fake.received[0].finished


def test_a_turn_over_claude_is_journaled(
    journal: Journal, fake: FakeAnthropic, make: Callable[..., AnthropicModel]
) -> None:
    fake.answer(
        Reply(["Let me ", "check."], [Call("toolu_1", "lookup", '{"id": 9}')], usage=(10, 3)),
        Reply(["Item 9 ", "is in ", "stock."], usage=(20, 4)),
    )
    agent = Agent(make(), [LOOKUP], name="claude")
    session = agent.create_session(journal, system_prompt="Be brief.")

    result = agent.run_turn(journal, session.session_id, "item 9?")

    assert result.reply == "Item 9 is in stock."
    assert [(e.type, e.payload) for e in journal.events(session.session_id)][1:] == [
        ("user_message", {"content": "item 9?"}),
        ("assistant_message", {"content": "Let me check."}),
        ("tool_call", {"call_id": "toolu_1", "name": "lookup", "arguments": '{"id": 9}'}),
        ("tool_result", {"call_id": "toolu_1", "content": "item 9 is in stock"}),
        (
            "assistant_message",
            {
                "content": "Item 9 is in stock.",
                "usage": {"prompt_tokens": 30, "completion_tokens": 7},
            },
        ),
    ]
    second = fake.received[1].body
    assert second["system"] == "Be brief."
    assert second["messages"][-1] == {
        "role": "user",
        "content": [
            {"type": "tool_result", "tool_use_id": "toolu_1", "content": "item 9 is in stock"}
        ],
    }
