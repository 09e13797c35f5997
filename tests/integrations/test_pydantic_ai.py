"""`JournalHistory` with the real PydanticAI, offline (its own `TestModel` and `FunctionModel`):
every part kind saved and loaded equal (hypothesis, both backends), multi-turn runs with tools
through the journal, what the journal makes of a PydanticAI conversation, and the token-budget
history processor."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic_ai import Agent, ModelRetry, RunContext
from pydantic_ai.capabilities import ProcessHistory
from pydantic_ai.messages import (
    BinaryContent,
    FilePart,
    ModelMessage,
    ModelRequest,
    ModelResponse,
    SystemPromptPart,
    TextPart,
    ThinkingPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.models.test import TestModel

from agentjournal import (
    AsyncJournal,
    Conflict,
    ContextTooLarge,
    InvalidArgument,
    Journal,
    PayloadTooLarge,
)
from agentjournal.integrations.pydantic_ai import JournalHistory, context_window
from agentjournal.integrations.pydantic_ai_events import MESSAGE, PART
from helpers.pydantic_ai_messages import conversations, round_trip
from postgres_fixtures import POOL_RANDOM

pytestmark = POOL_RANDOM  # see postgres_fixtures.POOL_RANDOM

_ids = itertools.count()


@pytest.fixture(autouse=True)
def run_sync_loop() -> Iterator[None]:
    """`Agent.run_sync` runs on the thread's event loop, making one if there is none, and leaves
    it open: each test gets one, closed afterwards."""
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    yield
    loop.close()
    asyncio.set_event_loop(None)


def new_id() -> str:
    return f"conversation-{next(_ids)}"


# -- every part kind, saved and loaded equal (hypothesis, both backends) ----------------------


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(messages=conversations, cuts=st.lists(st.integers(0, 8), max_size=3))
def test_every_part_kind_is_loaded_equal_to_what_was_saved(
    journal: Journal, messages: list[ModelMessage], cuts: list[int]
) -> None:
    expected = round_trip(messages)
    history = JournalHistory(new_id(), journal)
    bounds = sorted({0, len(messages), *(min(cut, len(messages)) for cut in cuts)})
    for start, end in itertools.pairwise(bounds):  # saved in batches, as runs would
        assert history.load() == expected[:start]  # from what it read and saved before
        history.save(messages[start:end])
    assert history.load() == expected
    assert JournalHistory(history.session_id, journal).load() == expected  # a fresh reader too


def test_a_message_without_parts_and_a_part_of_no_known_kind_are_kept(journal: Journal) -> None:
    messages: list[ModelMessage] = [
        ModelRequest([]),
        ModelResponse([ThinkingPart("hmm", signature="sig")]),
    ]
    history = JournalHistory("odd", journal)
    written = history.save(messages)
    assert [e.type for e in written] == [MESSAGE, PART]
    assert history.load() == round_trip(messages)


# -- runs of the real agent -------------------------------------------------------------------


def order_agent(model: Any) -> Agent[None, str]:
    agent: Agent[None, str] = Agent(model, system_prompt="你是订单客服。")

    @agent.tool_plain
    def query_order_count(user: str) -> int:
        """How many orders the user has."""
        return 42

    return agent


def test_turns_of_a_test_model_run_continue_from_the_journal(journal: Journal) -> None:
    agent = order_agent(TestModel())
    history = JournalHistory("user-42", journal)
    everything: list[ModelMessage] = []
    for prompt in ["帮我查一下订单数量", "再查一次", "谢谢"]:
        result = agent.run_sync(prompt, message_history=history.load())
        history.save(result.new_messages())
        everything = result.all_messages()
        assert history.load() == everything
    # The journal reads it like any conversation.
    transcript = [(m.role, m.content) for m in journal.messages("user-42")]
    assert transcript[:2] == [("system", "你是订单客服。"), ("user", "帮我查一下订单数量")]
    assert [c.name for c in journal.tool_calls("user-42")] == ["query_order_count"]
    assert journal.tool_calls("user-42")[0].result == "42"
    replayed = journal.replay("user-42")
    assert isinstance(replayed, list)
    assert replayed[0] == {"role": "system", "content": "你是订单客服。"}
    assert replayed[2]["tool_calls"][0]["function"]["name"] == "query_order_count"
    assert journal.get_session("user-42").completion_tokens > 0


def scripted(info_log: list[int]) -> FunctionModel:
    """Each turn: two parallel tool calls (one retried once), a thought, then a reply."""

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        info_log.append(len(messages))
        last = messages[-1]
        assert isinstance(last, ModelRequest)
        turn = sum(isinstance(p, UserPromptPart) for m in messages for p in getattr(m, "parts", []))
        kinds = {type(p).__name__ for p in last.parts}
        if "UserPromptPart" in kinds:
            return ModelResponse(
                [
                    ThinkingPart("先查订单，再查地址。"),
                    ToolCallPart("orders", {"user": "u"}, tool_call_id=f"orders-{turn}"),
                    ToolCallPart("address", '{"user": "u"}', tool_call_id=f"address-{turn}"),
                ]
            )
        retried = [
            p for p in last.parts if isinstance(p, ToolReturnPart) and p.outcome == "retried"
        ]
        if retried:
            return ModelResponse(
                [ToolCallPart("address", {"user": "u", "ok": True}, tool_call_id=f"again-{turn}")]
            )
        return ModelResponse([TextPart(f"第 {turn} 轮：42 个订单，地址已查。")])

    return FunctionModel(respond)


def scripted_agent(calls: list[int]) -> Agent[None, str]:
    agent: Agent[None, str] = Agent(scripted(calls), system_prompt="客服")
    tries: dict[str, int] = {}

    @agent.tool
    def orders(ctx: RunContext[None], user: str) -> dict[str, int]:
        return {"count": 42}

    @agent.tool
    def address(ctx: RunContext[None], user: str, ok: bool = False) -> str:
        tries[ctx.tool_call_id or ""] = tries.get(ctx.tool_call_id or "", 0) + 1
        if not ok:
            raise ModelRetry("say ok")
        return "上海"

    return agent


def test_function_model_turns_with_parallel_calls_retries_and_thinking(journal: Journal) -> None:
    calls: list[int] = []
    agent = scripted_agent(calls)
    history = JournalHistory("support", journal)
    for turn in range(1, 4):
        result = agent.run_sync(f"第 {turn} 个问题", message_history=history.load())
        history.save(result.new_messages())
        assert history.load() == result.all_messages()
    assert result.output == "第 3 轮：42 个订单，地址已查。"
    table = {c.call_id: (c.name, c.status, c.result) for c in journal.tool_calls("support")}
    assert table["orders-2"] == ("orders", "ok", '{"count": 42}')
    assert table["again-3"] == ("address", "ok", "上海")
    assert table["address-1"][1] == "error", "a retried call's return is an error result"
    types = [e.type for e in journal.events("support")]
    assert PART in types  # the thoughts


def test_a_model_reusing_call_ids_keeps_the_repeats_as_parts(journal: Journal) -> None:
    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        last = messages[-1]
        if any(isinstance(p, UserPromptPart) for p in getattr(last, "parts", [])):
            return ModelResponse([ToolCallPart("query_order_count", {"user": "u"}, "call-1")])
        return ModelResponse([TextPart("42")])

    agent = order_agent(FunctionModel(respond))
    history = JournalHistory("repeats", journal)
    for prompt in ["一", "二"]:
        result = agent.run_sync(prompt, message_history=history.load())
        history.save(result.new_messages())
    assert history.load() == result.all_messages()
    # Both turns' calls are named alike: the second is kept, just not in the call table.
    assert len(journal.tool_calls("repeats")) == 1
    assert [
        e.payload["part"]["part_kind"] for e in journal.events("repeats") if e.type == PART
    ] == [
        "tool-call",
        "tool-return",
    ]


def test_async_runs_through_an_async_journal(tmp_path: Path) -> None:
    async def run() -> list[ModelMessage]:
        async with await AsyncJournal.open(str(tmp_path / "a.db")) as journal:
            history = JournalHistory("async", journal)
            agent = order_agent(TestModel())
            for prompt in ["一", "二"]:
                result = await agent.run(prompt, message_history=await history.load_async())
                await history.save_async(result.new_messages())
            assert await history.load_async() == result.all_messages()
            return result.all_messages()

    assert len(asyncio.run(run())) == 6


# -- the journal's rules ----------------------------------------------------------------------


def test_expected_seq_refuses_a_save_after_another_writer(journal: Journal) -> None:
    mine, theirs = JournalHistory("shared", journal), JournalHistory("shared", journal)
    mine.save([ModelRequest([UserPromptPart("一")])])
    assert mine.load()
    assert theirs.load()
    seen = mine.last_seq
    theirs.save([ModelResponse([TextPart("他们的回答")])])
    with pytest.raises(Conflict):
        mine.save([ModelResponse([TextPart("我的回答")])], expected_seq=seen)
    assert [type(m).__name__ for m in mine.load()] == ["ModelRequest", "ModelResponse"]


def test_load_reads_what_is_new_and_notices_a_clear_or_a_purge(journal: Journal) -> None:
    reader, writer = JournalHistory("followed", journal), JournalHistory("followed", journal)
    one, two = ModelRequest([UserPromptPart("一")]), ModelResponse([TextPart("二")])
    writer.save([one])
    assert reader.load() == [one]
    writer.save([two])
    assert reader.load() == [one, two]  # what another writer appended since
    writer.clear()
    assert reader.load() == []
    writer.save([two])
    assert reader.load() == [two]
    journal.purge_session("followed")
    assert reader.load() == []
    writer.save([one, two])
    journal.purge_session("followed")
    writer.save([two, one])  # as many events as before, other ones
    assert reader.load() == [two, one]


def test_concurrent_savers_of_one_session_keep_every_turn_whole(journal_url: str) -> None:
    """Two journals on one database (as two processes would have), each with its own history
    object, load and save turns of one session at once: every turn is stored, each in one
    piece, and each saver's calls are the journal's tool calls."""
    rounds = 15

    def writer(name: str) -> None:
        with Journal.open(journal_url) as journal:
            history = JournalHistory("busy", journal)
            for turn in range(rounds):
                history.load()
                call_id = f"{name}-{turn}"
                history.save(
                    [
                        ModelRequest([UserPromptPart(call_id)]),
                        ModelResponse([ToolCallPart("lookup", {"turn": turn}, call_id)]),
                        ModelRequest([ToolReturnPart("lookup", turn, call_id)]),
                        ModelResponse([TextPart(f"done {call_id}")]),
                    ]
                )

    with ThreadPoolExecutor(2) as pool:
        for done in [pool.submit(writer, name) for name in ("a", "b")]:
            done.result()
    with Journal.open(journal_url) as journal:
        messages = JournalHistory("busy", journal).load()
        assert len(messages) == 2 * rounds * 4
        for start in range(0, len(messages), 4):  # each turn's four messages together
            prompt = messages[start].parts[0].content  # type: ignore[union-attr]
            assert messages[start + 3].parts[0].content == f"done {prompt}"  # type: ignore[union-attr]
        calls = journal.tool_calls("busy")
        assert len(calls) == 2 * rounds
        assert all(call.status == "ok" for call in calls)


def test_bad_input_is_a_typed_error_with_nothing_written(journal: Journal) -> None:
    history = JournalHistory("bad", journal)
    for bad in ["hello", {"parts": []}, [{"kind": "request", "parts": []}], [ModelRequest([]), 3]]:
        with pytest.raises(InvalidArgument):
            history.save(bad)  # type: ignore[arg-type]
    assert journal.sessions() == []
    with pytest.raises(InvalidArgument):
        JournalHistory("", journal)
    with pytest.raises(InvalidArgument):
        context_window(0)


def test_a_part_past_the_payload_limit_is_refused_with_nothing_written(tmp_path: Path) -> None:
    image = BinaryContent(b"\x89PNG" * 2048, media_type="image/png")  # 8 KiB, ~11 KiB as base64
    with Journal.open(str(tmp_path / "small.db"), max_payload_bytes=4096) as journal:
        history = JournalHistory("big", journal)
        with pytest.raises(PayloadTooLarge):
            history.save([ModelRequest([UserPromptPart(["看这张图", image])])])
        assert journal.sessions() == [], "not even the session"
        history.save([ModelRequest([UserPromptPart("一")])])
        with pytest.raises(PayloadTooLarge):
            history.save([ModelRequest([UserPromptPart("二")]), ModelResponse([FilePart(image)])])
        assert [m.content for m in journal.messages("big")] == ["一"]


def test_clear_starts_the_history_empty_and_deletes_nothing(journal: Journal) -> None:
    history = JournalHistory("cleared", journal)
    history.clear()  # nothing to clear: creates nothing
    assert journal.sessions() == []
    history.save([ModelRequest([UserPromptPart("一")]), ModelResponse([TextPart("好")])])
    history.clear()
    assert history.load() == []
    history.save([ModelRequest([UserPromptPart("二")])])
    assert [m.parts[0].content for m in history.load()] == ["二"]  # type: ignore[union-attr]
    assert [m.content for m in journal.messages("cleared")] == ["一", "好", "二"]


def test_open_owns_its_journal(tmp_path: Path) -> None:
    url = str(tmp_path / "own.db")
    with JournalHistory.open(url, "mine", title="订单", metadata={"user": "u1"}) as history:
        history.save([ModelRequest([UserPromptPart("一")])])
    with Journal.open(url) as journal:
        session = journal.get_session("mine")
        assert session.title == "订单"
        assert session.metadata == {"integration": "pydantic-ai", "user": "u1"}


# -- the token-budget history processor ----------------------------------------------------------


def long_history(turns: int) -> list[ModelMessage]:
    messages: list[ModelMessage] = []
    for turn in range(turns):
        parts: list[Any] = [UserPromptPart(f"问题 {turn} " + "字" * 30)]
        if turn == 0:
            parts.insert(0, SystemPromptPart("你是订单客服。"))
        messages.append(ModelRequest(parts))
        messages.append(
            ModelResponse([ToolCallPart("orders", {"n": turn}, tool_call_id=f"c{turn}")])
        )
        messages.append(ModelRequest([ToolReturnPart("orders", 42, tool_call_id=f"c{turn}")]))
        messages.append(ModelResponse([TextPart(f"回答 {turn} " + "好" * 30)]))
    return messages


def test_context_window_cuts_before_a_user_prompt_and_keeps_the_system_prompt() -> None:
    messages = long_history(10)
    everything = context_window(100_000)(messages)
    assert everything == messages
    kept = context_window(200)(messages)
    assert 0 < len(kept) < len(messages)
    assert len(kept) % 4 == 0
    first = kept[0]
    assert isinstance(first, ModelRequest)
    assert isinstance(first.parts[0], SystemPromptPart)
    assert isinstance(first.parts[1], UserPromptPart)
    assert kept[1:] == messages[len(messages) - len(kept) + 1 :]
    with pytest.raises(ContextTooLarge):
        context_window(10)(messages)


def test_context_window_matches_the_journals_own_context(journal: Journal) -> None:
    messages = long_history(12)
    history = JournalHistory("window", journal)
    history.save(messages)
    for budget in (120, 300, 700):
        kept = context_window(budget)(messages)
        fit = journal.context("window", max_tokens=budget)
        assert isinstance(fit, list)
        users = [m for m in fit if m["role"] == "user"]
        kept_users = [
            p.content
            for m in kept
            for p in getattr(m, "parts", [])
            if isinstance(p, UserPromptPart)
        ]
        assert [m["content"] for m in users] == kept_users


def test_context_window_as_the_agents_history_processor(journal: Journal) -> None:
    seen: list[int] = []

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        seen.append(len(messages))
        return ModelResponse([TextPart("好" * 60)])

    agent: Agent[None, str] = Agent(
        FunctionModel(respond),
        system_prompt="客服",
        capabilities=[ProcessHistory(context_window(150))],
    )
    history = JournalHistory("processed", journal)
    for turn in range(8):
        result = agent.run_sync(f"问题 {turn}", message_history=history.load())
        history.save(result.new_messages())
    assert max(seen) < 8 * 2  # the model was sent a window, not everything
    assert len(history.load()) == 16  # while the journal keeps every message
