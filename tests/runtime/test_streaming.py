"""Streaming turns in the library: `ScriptedModel.stream`, `Agent.stream_turn` and
`Agent.astream_turn` over a real SQLite journal. Deltas arrive in order, interleaved with the
journaled events; the journal gets exactly what `run_turn` writes; a cancel journals the text the
user saw, marked interrupted; a model failing mid-stream leaves nothing half-written and the turn
resumable. First over `ScriptedModel`, then over the official OpenAI and Anthropic clients
talking to the fake servers of tests/fake_model_servers.py."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agentjournal import Journal
from agentjournal.demo.order_agent import FALLBACK, QUERY_ORDERS, SCRIPTS, build
from agentjournal.errors import Conflict, ModelError, TurnAbandoned
from agentjournal.events import Event
from agentjournal.runtime import (
    Agent,
    Completed,
    ScriptedModel,
    TextDelta,
    ToolCallDelta,
    TurnControl,
    resume_incomplete,
)
from agentjournal.runtime.anthropic_model import AnthropicModel
from agentjournal.runtime.openai_model import OpenAIChatModel
from agentjournal.runtime.streaming import ModelChunk
from fake_model_servers import Call, FakeAnthropic, FakeOpenAI, Reply, split

GREETING = SCRIPTS["你好"].reply
REPLY = SCRIPTS[QUERY_ORDERS].reply.replace("{result}", "42")


@pytest.fixture
def journal(tmp_path: Path) -> Iterator[Journal]:
    with Journal.open(tmp_path / "j.db") as opened:
        yield opened


def agent_with(**model: Any) -> Agent:
    tools = list(build().tools.values())
    return Agent(ScriptedModel(SCRIPTS, FALLBACK, **model), tools, name="demo")


def kinds(items: list[Any]) -> list[str]:
    return [item.type if isinstance(item, Event) else type(item).__name__ for item in items]


def collapsed(names: list[str]) -> list[str]:
    """`names` with each run of one name written once."""
    return [name for i, name in enumerate(names) if i == 0 or names[i - 1] != name]


def text_of(items: list[Any]) -> str:
    return "".join(item.text for item in items if isinstance(item, TextDelta))


def test_the_scripted_model_streams_its_reply_in_pieces_then_completes() -> None:
    model = ScriptedModel(SCRIPTS, FALLBACK, chunk_chars=3)

    async def chunks(text: str) -> list[ModelChunk]:
        return [c async for c in model.stream([{"role": "user", "content": text}], [])]

    greeting = asyncio.run(chunks("你好"))
    assert isinstance(greeting[-1], Completed)
    assert greeting[-1].reply == model.complete([{"role": "user", "content": "你好"}], [])
    pieces = [c.text for c in greeting[:-1] if isinstance(c, TextDelta)]
    assert "".join(pieces) == GREETING
    assert all(len(p) <= 3 for p in pieces)
    assert len(pieces) == len(greeting) - 1

    call = asyncio.run(chunks(QUERY_ORDERS))
    deltas = [c for c in call if isinstance(c, ToolCallDelta)]
    assert (deltas[0].index, deltas[0].call_id, deltas[0].name) == (
        0,
        "call_1",
        "query_order_count",
    )
    assert all(d.call_id is None and d.name is None for d in deltas[1:])
    assert "".join(d.arguments for d in deltas) == "{}"


def test_stream_turn_yields_deltas_between_the_events_and_journals_what_run_turn_does(
    journal: Journal,
) -> None:
    agent = agent_with()
    streamed = agent.create_session(journal, "s").session_id
    items = list(agent.stream_turn(journal, streamed, QUERY_ORDERS))
    assert kinds(items) == [
        "user_message",
        "ToolCallDelta",
        "tool_call",
        "tool_result",
        *["TextDelta"] * len(items[4:-1]),
        "assistant_message",
    ]
    assert text_of(items) == REPLY == items[-1].payload["content"]
    journaled = [item for item in items if isinstance(item, Event)]
    assert journaled == journal.events(streamed, after=1)

    plain = agent.create_session(journal, "p").session_id
    result = agent.run_turn(journal, plain, QUERY_ORDERS)
    assert [(e.type, e.payload) for e in result.events] == [(e.type, e.payload) for e in journaled]


def test_astream_turn_yields_the_same_items(journal: Journal) -> None:
    agent = agent_with(chunk_chars=1)
    session_id = agent.create_session(journal, "s").session_id

    async def run() -> list[Any]:
        return [item async for item in agent.astream_turn(journal, session_id, "你好")]

    items = asyncio.run(run())
    assert kinds(items) == ["user_message", *["TextDelta"] * len(GREETING), "assistant_message"]
    assert [item.text for item in items[1:-1]] == list(GREETING)


def test_a_cancel_journals_the_text_the_user_saw_as_an_interrupted_reply(
    journal: Journal,
) -> None:
    async def stall_at_fourth(number: int, chunk: ModelChunk) -> None:
        if number == 3:
            await asyncio.Event().wait()  # never set: only the cancel ends this call

    agent = agent_with(on_chunk=stall_at_fourth)
    session_id = agent.create_session(journal, "s").session_id
    stream = agent.stream_turn(journal, session_id, "你好")
    seen: list[Any] = []
    for item in stream:
        seen.append(item)
        if len(seen) == 4:  # the user message and three deltas: then the model stalls
            stream.cancel()
    assert kinds(seen) == [
        "user_message",
        "TextDelta",
        "TextDelta",
        "TextDelta",
        "assistant_message",
    ]
    answer = seen[-1]
    assert answer.payload == {"content": GREETING[:6], "interrupted": True}
    assert answer.payload["content"] == text_of(seen)
    assert journal.get_session(session_id).turn_open is False
    # The next model call sees what the user saw.
    context = journal.context(session_id, max_tokens=10_000)
    assert isinstance(context, list)
    assert context[-1] == {"role": "assistant", "content": GREETING[:6]}
    # The session takes the next turn.
    assert agent.run_turn(journal, session_id, "你好").reply == GREETING


def test_an_abandoned_turn_journals_nothing_more_and_stays_open_for_resume(
    tmp_path: Path,
) -> None:
    async def stall_at_fourth(number: int, chunk: ModelChunk) -> None:
        if number == 3:
            await asyncio.Event().wait()  # never set: only abandoning ends this call

    path = tmp_path / "abandoned.db"
    control = TurnControl()
    agent = agent_with(on_chunk=stall_at_fourth)
    seen: list[Any] = []

    def on_delta(delta: Any) -> None:
        seen.append(delta)
        if len(seen) == 3:
            control.abandon()

    with Journal.open(path) as journal:
        session_id = agent.create_session(journal, "s").session_id
        with pytest.raises(TurnAbandoned):
            agent.run_turn(journal, session_id, "你好", on_delta=on_delta, control=control)
        # As after a crash: the user message, no reply, the turn open.
        assert [e.type for e in journal.events(session_id, after=1)] == ["user_message"]
        assert journal.get_session(session_id).turn_open is True
    with Journal.open(path) as journal:  # the next start finishes it
        report = resume_incomplete(journal, [agent_with()])
        assert [result.session_id for result in report.finished] == [session_id]
        assert journal.events(session_id, after=2)[-1].payload == {"content": GREETING}
        assert journal.get_session(session_id).turn_open is False


def test_a_cancel_before_any_delta_journals_an_empty_interrupted_reply(journal: Journal) -> None:
    async def stall_first(number: int, chunk: ModelChunk) -> None:
        await asyncio.Event().wait()

    agent = agent_with(on_chunk=stall_first)
    session_id = agent.create_session(journal, "s").session_id

    async def run() -> list[Any]:
        stream = agent.astream_turn(journal, session_id, "你好")
        items = []
        async for item in stream:
            items.append(item)
            stream.cancel()
        return items

    items = asyncio.run(run())
    assert kinds(items) == ["user_message", "assistant_message"]
    assert items[-1].payload == {"content": "", "interrupted": True}


def test_a_model_failing_mid_stream_raises_and_leaves_the_turn_resumable(
    journal: Journal,
) -> None:
    async def fail_at_third(number: int, chunk: ModelChunk) -> None:
        if number == 2:
            raise ModelError("the stream broke (a test's fault)")

    broken = agent_with(on_chunk=fail_at_third)
    session_id = broken.create_session(journal, "s").session_id
    seen: list[Any] = []
    stream = broken.stream_turn(journal, session_id, "你好")
    seen += [next(stream) for _ in range(3)]
    with pytest.raises(ModelError, match="the stream broke"):
        next(stream)
    assert kinds(seen) == ["user_message", "TextDelta", "TextDelta"]
    # Nothing of the half-written reply is journaled; the turn stays open ...
    assert [e.type for e in journal.events(session_id)] == ["session_created", "user_message"]
    assert journal.get_session(session_id).turn_open is True
    # ... and resume finishes it with a model that answers.
    report = resume_incomplete(journal, [agent_with()])
    assert [r.reply for r in report.finished] == [GREETING]


def test_a_refused_turn_raises_at_the_first_item_and_a_repeat_yields_the_original(
    journal: Journal,
) -> None:
    agent = agent_with()
    unbound = journal.create_session("not the agent's").session_id
    with pytest.raises(Conflict):
        next(iter(agent.stream_turn(journal, unbound, "你好")))
    session_id = agent.create_session(journal, "s").session_id
    first = list(agent.stream_turn(journal, session_id, "你好", idempotency_key="k"))
    repeat = agent.stream_turn(journal, session_id, "你好", idempotency_key="k")
    again = list(repeat)
    assert again == [item for item in first if isinstance(item, Event)]
    assert repeat.result is not None
    assert repeat.result.created is False


# -- over the OpenAI- and Anthropic-compatible fake servers (the official clients) -------------


@pytest.fixture(params=["openai", "anthropic"])
def fake(request: pytest.FixtureRequest) -> Iterator[FakeOpenAI | FakeAnthropic]:
    server = FakeOpenAI() if request.param == "openai" else FakeAnthropic()
    with server:
        yield server


@pytest.fixture
def agent_on(fake: FakeOpenAI | FakeAnthropic) -> Iterator[Agent]:
    """The demo's tools on the real client of the fake server's provider (no retries: each
    request takes exactly one queued reply); its connections closed after the test."""
    model: OpenAIChatModel | AnthropicModel
    if isinstance(fake, FakeOpenAI):
        model = OpenAIChatModel("fake", base_url=fake.base_url, api_key="k", retries=0)
    else:
        model = AnthropicModel("fake", base_url=fake.base_url, api_key="k", retries=0)
    agent = Agent(model, list(build().tools.values()), name="demo")
    yield agent
    agent.close()


def test_a_real_client_streams_a_turn_with_a_tool_call(
    journal: Journal, fake: FakeOpenAI | FakeAnthropic, agent_on: Agent
) -> None:
    fake.answer(
        Reply(calls=[Call("call_1", "query_order_count", '{"month": "2026-11"}', fragments=3)]),
        Reply(text=split(REPLY, 6)),
    )
    agent = agent_on
    session_id = agent.create_session(journal, "s").session_id
    items = list(agent.stream_turn(journal, session_id, QUERY_ORDERS))
    # A client may split a call's first delta (id and name) from its argument fragments.
    assert collapsed(kinds(items)) == [
        "user_message",
        "ToolCallDelta",
        "tool_call",
        "tool_result",
        "TextDelta",
        "assistant_message",
    ]
    calls = [item for item in items if isinstance(item, ToolCallDelta)]
    assert (calls[0].index, calls[0].call_id, calls[0].name) == (0, "call_1", "query_order_count")
    assert "".join(c.arguments for c in calls) == '{"month": "2026-11"}'
    assert [item.text for item in items if isinstance(item, TextDelta)] == split(REPLY, 6)
    answer = items[-1]
    assert answer.payload["content"] == REPLY
    assert answer.payload["usage"] == {"prompt_tokens": 20, "completion_tokens": 10}
    assert [item for item in items if isinstance(item, Event)] == journal.events(
        session_id, after=1
    )


def test_a_cancel_hangs_up_on_the_model_server_and_journals_what_was_yielded(
    journal: Journal, fake: FakeOpenAI | FakeAnthropic, agent_on: Agent
) -> None:
    chunks = split(GREETING, 8)
    fake.answer(Reply(text=chunks, stall=60.0, stall_after=3))
    agent = agent_on
    session_id = agent.create_session(journal, "s").session_id
    stream = agent.stream_turn(journal, session_id, "你好")
    seen = [next(stream) for _ in range(4)]  # the user message and three deltas
    stream.cancel()
    rest = list(stream)
    assert kinds(seen + rest) == [
        "user_message",
        "TextDelta",
        "TextDelta",
        "TextDelta",
        "assistant_message",
    ]
    assert rest[-1].payload == {"content": "".join(chunks[:3]), "interrupted": True}
    # The model call was stopped: the client hung up in the middle of the stall.
    fake.wait_until(lambda received: received[-1].disconnected)


@pytest.mark.parametrize("fault", ["error_after", "drop_after"])
def test_a_stream_that_breaks_off_raises_and_resume_finishes_the_turn(
    journal: Journal, fake: FakeOpenAI | FakeAnthropic, agent_on: Agent, fault: str
) -> None:
    fake.answer(Reply(text=split(GREETING, 8), **{fault: 3}))
    agent = agent_on
    session_id = agent.create_session(journal, "s").session_id
    stream = agent.stream_turn(journal, session_id, "你好")
    seen = [next(stream) for _ in range(4)]
    with pytest.raises(ModelError):
        next(stream)
    assert text_of(seen) == "".join(split(GREETING, 8)[:3])
    assert [e.type for e in journal.events(session_id)] == ["session_created", "user_message"]
    assert journal.get_session(session_id).turn_open is True
    fake.answer(Reply(text=split(GREETING, 4)))
    report = resume_incomplete(journal, [agent])
    assert [r.reply for r in report.finished] == [GREETING]
