"""`OpenAIChatModel.stream()` against the fake OpenAI server on loopback (real HTTP, OpenAI's
chunk format): deltas in order, tool calls and usage assembled, every fault a `ModelError`, and
closing the stream hangs up on the server. No test reaches beyond 127.0.0.1."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from agentjournal import Journal, ModelError
from agentjournal.runtime import Agent, ModelReply, OpenAIChatModel, RequestedCall, Tool
from agentjournal.runtime.streaming import (
    Completed,
    ModelChunk,
    StreamingModel,
    TextDelta,
    ToolCallDelta,
)
from expected import u
from fake_model_servers import Call, FakeOpenAI, Reply
from helpers.model_streams import NO_TIMEOUT, STALL_TIMEOUT, collect

ENV = ("OPENAI_BASE_URL", "OPENAI_API_KEY", "OPENAI_MODEL", "AGENTJOURNAL_MODEL")


@pytest.fixture(autouse=True)
def no_host_config(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ENV:
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def fake() -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as server:
        yield server


@pytest.fixture
def make(fake: FakeOpenAI) -> Iterator[Callable[..., OpenAIChatModel]]:
    made: list[OpenAIChatModel] = []

    def model(**kw: Any) -> OpenAIChatModel:
        kw.setdefault("base_url", fake.base_url)
        kw.setdefault("api_key", "sk-test")
        made.append(OpenAIChatModel("gpt-test", **kw))
        return made[-1]

    yield model
    for each in made:
        each.close()


LOOKUP = Tool("lookup", lambda arguments, invocation: "in stock", idempotent=True)


def test_the_model_is_a_streaming_model(make: Callable[..., OpenAIChatModel]) -> None:
    assert isinstance(make(), StreamingModel)


def test_deltas_arrive_in_order_and_make_the_whole_reply(
    fake: FakeOpenAI, make: Callable[..., OpenAIChatModel]
) -> None:
    text = ["Let", " me", " look", " that", " up."]
    calls = [Call("call_a", "lookup", '{"id": 3, "note": "é"}', 4), Call("call_b", "lookup", "")]
    fake.answer(Reply(text, calls, usage=(42, 17)))

    chunks, error = collect(make(), [u("item 3?")], [LOOKUP])

    assert error is None
    *deltas, done = chunks
    assert [d.text for d in deltas if isinstance(d, TextDelta)] == text
    call_deltas = [d for d in deltas if isinstance(d, ToolCallDelta)]
    assert call_deltas[0] == ToolCallDelta(0, "call_a", "lookup", "")
    assert [(d.index, d.call_id, d.name) for d in call_deltas[1:5]] == [(0, None, None)] * 4
    assert "".join(d.arguments for d in call_deltas if d.index == 0) == calls[0].arguments
    assert call_deltas[5:] == [ToolCallDelta(1, "call_b", "lookup", "")]
    # Text first, then the calls in the order the model started them.
    kinds = [type(d).__name__ for d in deltas]
    assert kinds == ["TextDelta"] * 5 + ["ToolCallDelta"] * 6
    assert done == Completed(
        ModelReply(
            "Let me look that up.",
            (
                RequestedCall("call_a", "lookup", calls[0].arguments),
                RequestedCall("call_b", "lookup", "{}"),
            ),
            {"prompt_tokens": 42, "completion_tokens": 17},
        )
    )
    [request] = fake.received
    assert request.body["stream"] is True
    assert request.body["stream_options"] == {"include_usage": True}
    assert request.body["tools"] == [LOOKUP.schema()]
    assert request.headers["authorization"] == "Bearer sk-test"


def test_complete_reads_the_same_stream_to_the_same_reply(
    fake: FakeOpenAI, make: Callable[..., OpenAIChatModel]
) -> None:
    reply = Reply(["a", "b"], [Call("c1", "lookup", '{"id": 1}')], usage=(3, 4))
    fake.answer(reply, reply)
    model = make()

    chunks, _ = collect(model, [u("x")])
    whole = model.complete([u("x")], [])

    assert chunks[-1] == Completed(whole)
    assert fake.received[0].body == fake.received[1].body


def test_no_usage_and_no_text(fake: FakeOpenAI, make: Callable[..., OpenAIChatModel]) -> None:
    fake.answer(Reply(calls=[Call("c1", "lookup", "{}")], usage=None))
    chunks, error = collect(make(), [u("x")])
    assert error is None
    assert chunks[-1] == Completed(ModelReply(None, (RequestedCall("c1", "lookup", "{}"),), None))


def test_one_model_streams_on_several_event_loops(
    fake: FakeOpenAI, make: Callable[..., OpenAIChatModel]
) -> None:
    fake.always(Reply(["same"]))
    model = make()
    for _ in range(2):  # each asyncio.run is a new loop: the model gets a client for each
        chunks, error = collect(model, [u("x")])
        assert error is None
        assert chunks[0] == TextDelta("same")


@pytest.mark.parametrize(
    ("reply", "seen", "match", "timeout"),
    [
        pytest.param(Reply(status=500), [], "answered 500", NO_TIMEOUT, id="500-before"),
        pytest.param(Reply(status=429), [], "answered 429", NO_TIMEOUT, id="429-before"),
        pytest.param(
            Reply(["a", "b", "c"], error_after=2),
            ["a", "b"],
            "error mid-stream",
            NO_TIMEOUT,
            id="500-mid",
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
    fake: FakeOpenAI,
    make: Callable[..., OpenAIChatModel],
    reply: Reply,
    seen: list[str],
    match: str,
    timeout: float,
) -> None:
    fake.answer(reply)

    chunks, error = collect(make(retries=0, timeout=timeout), [u("x")])

    assert isinstance(error, ModelError)
    assert error.args[0].startswith(f"{fake.base_url}/chat/completions") or "cannot reach" in str(
        error
    )
    assert match in str(error)
    assert [c.text for c in chunks if isinstance(c, TextDelta)] == seen
    assert not any(isinstance(c, Completed) for c in chunks)  # nothing half-written is a reply
    assert len(fake.received) == 1


def test_a_refused_connection_is_a_model_error(make: Callable[..., OpenAIChatModel]) -> None:
    chunks, error = collect(make(base_url="http://127.0.0.1:9/v1", retries=0), [u("x")])
    assert chunks == []
    assert isinstance(error, ModelError)
    assert "cannot reach http://127.0.0.1:9/v1/chat/completions" in str(error)


def test_a_server_error_before_the_stream_is_retried(
    fake: FakeOpenAI, make: Callable[..., OpenAIChatModel]
) -> None:
    fake.answer(Reply(status=503), Reply(["ok"]))
    chunks, error = collect(make(retries=1), [u("x")])
    assert error is None
    assert chunks[0] == TextDelta("ok")
    assert len(fake.received) == 2


def test_aclose_mid_stream_hangs_up_on_the_server(
    fake: FakeOpenAI, make: Callable[..., OpenAIChatModel]
) -> None:
    fake.answer(Reply(["a", "b"], stall=60, stall_after=1))
    model = make()

    async def run() -> list[ModelChunk]:
        stream = model.stream([u("x")], [])
        first = await anext(stream)
        await stream.aclose()  # type: ignore[attr-defined]
        await model.aclose()
        return [first]

    assert asyncio.run(run()) == [TextDelta("a")]
    fake.wait_until(lambda got: got[0].disconnected)
    assert not fake.received[0].finished


def test_cancelling_the_task_hangs_up_on_the_server(
    fake: FakeOpenAI, make: Callable[..., OpenAIChatModel]
) -> None:
    fake.answer(Reply(["a", "b"], stall=60, stall_after=1))
    model = make()
    seen: list[ModelChunk] = []

    async def consume() -> None:
        async for chunk in model.stream([u("x")], []):
            seen.append(chunk)

    async def run() -> None:
        task = asyncio.create_task(consume())
        while not seen:
            await asyncio.sleep(0.01)  # polls for the first delta; the assertion is below
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await model.aclose()

    asyncio.run(run())
    assert seen == [TextDelta("a")]
    fake.wait_until(lambda got: got[0].disconnected)


def test_a_turn_over_the_streaming_model_is_journaled(
    journal: Journal, fake: FakeOpenAI, make: Callable[..., OpenAIChatModel]
) -> None:
    fake.answer(
        Reply(["Let me ", "check."], [Call("call_1", "lookup", '{"id": 9}')], usage=(10, 3)),
        Reply(["Item 9 ", "is in ", "stock."], usage=(20, 4)),
    )
    agent = Agent(make(), [LOOKUP], name="shop")
    session = agent.create_session(journal)

    result = agent.run_turn(journal, session.session_id, "item 9?")

    assert result.reply == "Item 9 is in stock."
    assert [(e.type, e.payload) for e in journal.events(session.session_id)][1:] == [
        ("user_message", {"content": "item 9?"}),
        ("assistant_message", {"content": "Let me check."}),
        ("tool_call", {"call_id": "call_1", "name": "lookup", "arguments": '{"id": 9}'}),
        ("tool_result", {"call_id": "call_1", "content": "in stock"}),
        (
            "assistant_message",
            {
                "content": "Item 9 is in stock.",
                "usage": {"prompt_tokens": 30, "completion_tokens": 7},
            },
        ),
    ]
