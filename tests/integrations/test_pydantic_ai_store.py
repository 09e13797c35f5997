"""`JournalConversationStore` with the real PydanticAI, offline: the same answers as PydanticAI's
own `InMemoryConversationStore` for any sequence of verbs (hypothesis, both backends), agent runs
over several turns with tools through the store, concurrent saves, forks and deletes, and what the
journal makes of a stored conversation."""

from __future__ import annotations

import asyncio
import copy
import datetime as dt
import itertools
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic_ai import Agent, DeferredToolRequests
from pydantic_ai.conversation import Conversation
from pydantic_ai.conversation_store import (
    ConversationConflict,
    ConversationStore,
    InMemoryConversationStore,
)
from pydantic_ai.exceptions import UserError
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.models.test import TestModel

from agentjournal import AsyncJournal, InvalidArgument, InvalidEvent, Journal, PayloadTooLarge
from agentjournal.integrations.pydantic_ai_events import DELETED, DETAILS, RECORD
from agentjournal.integrations.pydantic_ai_store import JournalConversationStore
from helpers.pydantic_ai_messages import conversations, round_trip
from postgres_fixtures import POOL_RANDOM

pytestmark = POOL_RANDOM  # see postgres_fixtures.POOL_RANDOM

_prefixes = itertools.count()


@pytest.fixture(autouse=True)
def run_sync_loop() -> Iterator[asyncio.AbstractEventLoop]:
    """`Agent.run_sync` runs on the thread's event loop, making one if there is none, and leaves
    it open: each test gets one, closed afterwards (`asyncio.run` would unset it)."""
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    yield loop
    loop.close()
    asyncio.set_event_loop(None)


def order_agent() -> Agent[None, str]:
    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        last = messages[-1]
        assert isinstance(last, ModelRequest)
        turn = sum(isinstance(p, UserPromptPart) for m in messages for p in m.parts)
        if any(isinstance(p, UserPromptPart) for p in last.parts):
            return ModelResponse(
                [
                    ToolCallPart("orders", {"user": "u"}, tool_call_id=f"orders-{turn}"),
                    ToolCallPart("address", {"user": "u"}, tool_call_id=f"address-{turn}"),
                ]
            )
        return ModelResponse([TextPart(f"第 {turn} 轮：42 个订单，上海。")])

    agent: Agent[None, str] = Agent(FunctionModel(respond), system_prompt="你是订单客服。")

    @agent.tool_plain
    def orders(user: str) -> int:
        return 42

    @agent.tool_plain
    def address(user: str) -> str:
        return "上海"

    return agent


# -- agent runs through the store -------------------------------------------------------------


def test_turns_with_tools_through_the_store(journal: Journal) -> None:
    store = JournalConversationStore(journal)
    agent = order_agent()

    async def run() -> Conversation:
        for turn in range(1, 4):
            conversation = await store.load("user-42") or Conversation(conversation_id="user-42")
            result = await agent.run(f"第 {turn} 个问题", conversation=conversation)
            entries = await store.save(result)
            assert len(entries) == 4  # the prompt, the calls, their returns, the reply
        loaded = await store.load("user-42")
        assert loaded is not None
        assert loaded.messages == result.all_messages()
        assert loaded.usage == result.usage
        assert [m.parts[0] for m in (await store.load("user-42", limit=2) or loaded).messages] == [
            m.parts[0] for m in result.all_messages()[-2:]
        ]
        return loaded

    loaded = asyncio.run(run())
    assert len(loaded.messages) == 12
    # ... and the journal reads it like any conversation.
    assert [c.call_id for c in journal.tool_calls("user-42")][:2] == ["orders-1", "address-1"]
    assert all(c.status == "ok" for c in journal.tool_calls("user-42"))
    replayed = journal.replay("user-42")
    assert isinstance(replayed, list)
    assert replayed[-1] == {"role": "assistant", "content": "第 3 轮：42 个订单，上海。"}
    assert sum(e.type == RECORD for e in journal.events("user-42")) == 3


def test_run_sync_continues_a_conversation_from_the_store(
    tmp_path: Path, run_sync_loop: asyncio.AbstractEventLoop
) -> None:
    store = JournalConversationStore.open(str(tmp_path / "agent.db"))
    agent: Agent[None, str] = Agent(TestModel(), system_prompt="客服")
    try:
        conversation = Conversation(conversation_id="sync")
        for prompt in ["一", "二"]:
            result = agent.run_sync(prompt, conversation=conversation)
            run_sync_loop.run_until_complete(store.save(result))
            conversation = result.conversation
        loaded = run_sync_loop.run_until_complete(store.load("sync"))
        assert loaded is not None
        assert loaded.messages == result.all_messages()
    finally:
        store.close()


def test_a_run_paused_for_approval_resumes_from_the_store(journal: Journal) -> None:
    agent: Agent[None, str | DeferredToolRequests] = Agent(
        TestModel(), output_type=[str, DeferredToolRequests]
    )

    @agent.tool_plain(requires_approval=True)
    def refund(order: str) -> str:
        return "refunded"

    async def run() -> None:
        store = JournalConversationStore(journal)
        paused = await agent.run("退款", conversation=Conversation(conversation_id="refund"))
        assert isinstance(paused.output, DeferredToolRequests)
        await store.save(paused)
        # Another process, later: the calls waiting for approval come back with the messages.
        loaded = await JournalConversationStore(journal).load("refund")
        assert loaded is not None
        assert loaded.deferred_tool_requests == paused.output
        approved = loaded.deferred_tool_requests.build_results(approve_all=True)
        resumed = await agent.run(conversation=loaded, deferred_tool_results=approved)
        assert resumed.output == '{"refund":"refunded"}'
        await store.save(resumed)
        done = await store.load("refund")
        assert done is not None
        assert done.deferred_tool_requests is None
        assert done.messages == resumed.all_messages()

    asyncio.run(run())
    assert journal.tool_calls("refund")[0].result == "refunded"


def test_two_writers_of_one_revision_cannot_both_save(journal: Journal) -> None:
    store = JournalConversationStore(journal)

    async def run() -> None:
        first = Conversation(conversation_id="c", messages=[ModelRequest([UserPromptPart("一")])])
        await store.save(first)
        mine, theirs = await store.load("c"), await store.load("c")
        assert mine is not None
        assert theirs is not None
        theirs.messages.append(ModelResponse([TextPart("他们")]))
        await store.save(theirs)
        mine.messages.append(ModelResponse([TextPart("我的")]))
        with pytest.raises(ConversationConflict):
            await store.save(mine)
        loaded = await store.load("c")
        assert loaded is not None
        assert [m.parts[0].content for m in loaded.messages] == ["一", "他们"]  # type: ignore[union-attr]

    asyncio.run(run())


def test_concurrent_saves_from_two_processes_keep_one_winner(journal_url: str) -> None:
    """Two stores (two journals on one database, as two processes would have) save on the same
    revision at the same time: exactly one wins, and the loser's messages are not stored."""

    async def run() -> None:
        with Journal.open(journal_url) as one, Journal.open(journal_url) as two:
            a, b = JournalConversationStore(one), JournalConversationStore(two)
            await a.save(Conversation(conversation_id="c", messages=[_request("零")]))
            for round_ in range(10):
                mine, theirs = await a.load("c"), await b.load("c")
                assert mine is not None
                assert theirs is not None
                mine.messages.append(_request(f"a{round_}"))
                theirs.messages.append(_request(f"b{round_}"))
                outcomes = await asyncio.gather(
                    a.save(mine), b.save(theirs), return_exceptions=True
                )
                assert sum(isinstance(o, ConversationConflict) for o in outcomes) == 1, outcomes
            loaded = await a.load("c")
            assert loaded is not None
            assert len(loaded.messages) == 11

    asyncio.run(run())


def test_a_fork_is_a_journal_session_of_its_own(journal: Journal) -> None:
    store = JournalConversationStore(journal)
    agent = order_agent()

    async def run() -> None:
        result = await agent.run("第 1 个问题", conversation=Conversation(conversation_id="main"))
        await store.save(result)
        fork = await store.fork("main", new_conversation_id="what-if")
        result = await agent.run("换个问题", conversation=fork)
        await store.save(result)
        record = await store.read_record("what-if")
        assert record is not None
        assert record.forked_from == "main"

    asyncio.run(run())
    assert len(journal.replay("what-if")) == len(journal.replay("main")) + 5  # one turn more
    main = [m.content for m in journal.messages("main")]
    assert [m.content for m in journal.messages("what-if")][: len(main)] == main


def test_delete_is_a_soft_delete_and_the_id_can_start_again(journal: Journal) -> None:
    store = JournalConversationStore(journal)

    async def run() -> None:
        await store.save(Conversation(conversation_id="c", messages=[_request("一")]))
        loaded = await store.load("c")
        await store.delete("c")
        assert await store.load("c") is None
        assert await store.list_conversations() == []
        assert loaded is not None
        loaded.messages.append(_request("二"))
        with pytest.raises(ConversationConflict):  # saved over a deleted conversation
            await store.save(loaded)
        await store.save(Conversation(conversation_id="c", messages=[_request("新")]))
        again = await store.load("c")
        assert again is not None
        assert [m.parts[0].content for m in again.messages] == ["新"]  # type: ignore[union-attr]

    asyncio.run(run())
    types = [e.type for e in journal.events("c")]
    assert DELETED in types
    assert [m.content for m in journal.messages("c")] == ["一", "新"]


def test_a_purged_conversation_saved_again_is_read_anew(journal: Journal) -> None:
    store = JournalConversationStore(journal)

    async def run() -> list[ModelMessage]:
        await store.save(Conversation(conversation_id="c", messages=[_request("一")]))
        assert await store.load("c") is not None  # the store now knows the session
        journal.purge_session("c")
        assert await store.load("c") is None
        await store.save(Conversation(conversation_id="c", messages=[_request("新")]))
        loaded = await store.load("c")
        assert loaded is not None
        return loaded.messages

    assert asyncio.run(run()) == [_request("新")]


def test_an_entry_is_read_by_its_id_from_another_store(journal: Journal) -> None:
    async def run() -> None:
        writer = JournalConversationStore(journal)
        await writer.save(Conversation(conversation_id="other", messages=[_request("别的")]))
        entries = await writer.save(
            Conversation(conversation_id="c", messages=[_request("一"), _request("二")])
        )
        reader = JournalConversationStore(journal)  # another process: it has met no entry
        entry = await reader.read_entry(entries[1].id)
        assert entry == entries[1]
        with pytest.raises(LookupError):
            await reader.read_entry("no-such-entry")

    asyncio.run(run())


def test_update_titles_the_session_too(journal: Journal) -> None:
    store = JournalConversationStore(journal)

    async def run() -> None:
        await store.save(Conversation(conversation_id="c", messages=[_request("一")]))
        record = await store.update("c", title="订单", metadata={"model": "m"})
        assert (record.title, record.metadata) == ("订单", {"model": "m"})
        with pytest.raises(ConversationConflict):
            await store.update("c", title="别的", expected_title=None)
        loaded = await store.load("c")
        assert loaded is not None
        loaded.messages.append(_request("二"))
        await store.save(loaded)  # a save keeps the title
        record = await store.read_record("c")
        assert record is not None
        assert record.title == "订单"

    asyncio.run(run())
    assert journal.get_session("c").title == "订单"
    assert DETAILS in [e.type for e in journal.events("c")]


def test_a_journal_session_of_another_kind_is_not_taken_over(journal: Journal) -> None:
    journal.create_session("mine", session_id="taken")
    store = JournalConversationStore(journal)

    async def run() -> None:
        assert await store.load("taken") is None
        with pytest.raises(ConversationConflict):
            await store.save(Conversation(conversation_id="taken", messages=[_request("一")]))

    asyncio.run(run())
    assert [e.type for e in journal.events("taken")] == ["session_created"]


def test_over_an_async_journal(tmp_path: Path) -> None:
    async def run() -> None:
        async with await AsyncJournal.open(str(tmp_path / "a.db")) as journal:
            store = JournalConversationStore(journal)
            await store.save(Conversation(conversation_id="c", messages=[_request("一")]))
            loaded = await store.load("c")
            assert loaded is not None
            assert [m.parts[0].content for m in loaded.messages] == ["一"]  # type: ignore[union-attr]

    asyncio.run(run())


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(messages=conversations, cut=st.integers(0, 8))
def test_every_part_kind_is_loaded_equal_through_the_store(
    journal: Journal, messages: list[ModelMessage], cut: int
) -> None:
    store = JournalConversationStore(journal)
    conversation_id = f"kinds-{next(_prefixes)}"

    async def run() -> tuple[list[ModelMessage], list[ModelMessage]]:
        first = Conversation(conversation_id=conversation_id, messages=messages[:cut])
        await store.save(first)
        loaded = await store.load(conversation_id)
        assert loaded is not None
        loaded.messages += messages[cut:]
        await store.save(loaded)
        again = await store.load(conversation_id)
        assert again is not None
        return again.messages, [e.message for e in await store.load_entries(conversation_id) or []]

    loaded, entries = asyncio.run(run())
    assert loaded == round_trip(messages)
    assert entries == loaded


def test_a_message_past_the_payload_limit_is_refused_with_nothing_written(tmp_path: Path) -> None:
    big = ModelRequest([UserPromptPart("字" * 4000)])

    async def run(journal: Journal) -> None:
        store = JournalConversationStore(journal)
        with pytest.raises(PayloadTooLarge):
            await store.save(Conversation(conversation_id="big", messages=[big]))
        assert journal.sessions() == [], "not even the session"

    with Journal.open(str(tmp_path / "small.db"), max_payload_bytes=4096) as journal:
        asyncio.run(run(journal))


# -- the same answers as PydanticAI's own store ------------------------------------------------

CONVERSATIONS = ["a", "b"]
_clock = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)


def _request(text: str) -> ModelRequest:
    return ModelRequest([UserPromptPart(text, timestamp=_clock)], timestamp=_clock)


def _reply(text: str, call: bool) -> list[ModelMessage]:
    if not call:
        return [ModelResponse([TextPart(f"答：{text}")], timestamp=_clock)]
    call_id = f"call-{text}"
    return [
        ModelResponse([ToolCallPart("lookup", {"q": text}, call_id)], timestamp=_clock),
        ModelRequest(
            [ToolReturnPart("lookup", {"found": text}, call_id, timestamp=_clock)],
            timestamp=_clock,
        ),
        ModelResponse([TextPart(f"答：{text}")], timestamp=_clock),
    ]


turns = st.tuples(st.just("turn"), st.sampled_from(CONVERSATIONS), st.booleans())
any_verb = st.one_of(
    turns,
    turns,
    st.tuples(st.just("keep"), st.sampled_from(CONVERSATIONS)),
    st.tuples(st.just("save_kept"), st.sampled_from(CONVERSATIONS)),
    st.tuples(st.just("load"), st.sampled_from(CONVERSATIONS), st.none() | st.integers(0, 5)),
    st.tuples(st.just("branch"), st.sampled_from(CONVERSATIONS), st.integers(0, 6)),
    st.tuples(st.just("branch_back"), st.sampled_from(CONVERSATIONS)),
    st.tuples(
        st.just("fork"),
        st.sampled_from(CONVERSATIONS),
        st.none() | st.integers(0, 6),
        st.sampled_from(CONVERSATIONS),
    ),
    st.tuples(st.just("title"), st.sampled_from(CONVERSATIONS), st.none() | st.text(max_size=5)),
    st.tuples(st.just("delete"), st.sampled_from(CONVERSATIONS)),
    st.tuples(st.just("list"), st.none() | st.sampled_from(["u1", "u2"])),
)
# A few turns first, so that most verbs find a conversation to work on.
verbs = st.builds(
    lambda first, rest: first + rest,
    st.lists(turns, min_size=2, max_size=4),
    st.lists(any_verb, max_size=14),
)


async def _play(store: ConversationStore, program: list[tuple[Any, ...]], prefix: str) -> list[Any]:
    """Run the verbs on `store` and note what each gave (errors by their class)."""
    seen: list[Any] = []
    kept: dict[str, Conversation] = {}
    counter = itertools.count()

    def cid(name: str) -> str:
        return f"{prefix}-{name}"

    for verb, name, *args in program:
        try:
            seen.append(
                await _verb(store, verb, cid(name) if name else name, args, kept, counter, cid)
            )
        except (ConversationConflict, UserError) as exc:
            seen.append(type(exc).__name__)
    for name in CONVERSATIONS:
        seen.append(await _describe(store, cid(name), prefix))
    listed = await store.list_conversations()
    seen.append(sorted(r.conversation_id.removeprefix(prefix) for r in listed))
    return seen


async def _verb(
    store: ConversationStore,
    verb: str,
    conversation_id: Any,
    args: list[Any],
    kept: dict[str, Conversation],
    counter: Iterator[int],
    cid: Any,
) -> Any:
    if verb == "turn":
        conversation = await store.load(conversation_id) or Conversation(
            conversation_id=conversation_id
        )
        text = str(next(counter))
        conversation.messages += [_request(text), *_reply(text, args[0])]
        scope = "u1" if conversation_id.endswith("a") else "u2"
        return len(await store.save(conversation, scope=scope))
    if verb == "keep":
        loaded = await store.load(conversation_id)
        if loaded is not None:
            kept[conversation_id] = loaded
        return loaded is not None
    if verb == "save_kept":
        stale = kept.pop(conversation_id, None)
        if stale is None:
            return None
        text = str(next(counter))
        stale.messages += [_request(text), *_reply(text, False)]
        return len(await store.save(stale))
    if verb == "load":
        loaded = await store.load(conversation_id, limit=args[0])
        return None if loaded is None else _messages(loaded)
    if verb == "branch":
        loaded = await store.load(conversation_id)
        if loaded is None:
            return None
        at = min(args[0], len(loaded.messages))
        branched = await store.branch(conversation_id, at=at, expected_revision=loaded.revision)
        return _messages(branched)
    if verb == "branch_back":
        record = await store.read_record(conversation_id)
        if record is None or not record.branches:
            return None
        branched = await store.branch(
            conversation_id, from_entry=record.branches[0], expected_revision=record.revision
        )
        return _messages(branched)
    if verb == "fork":
        at, target = args
        forked = await store.fork(conversation_id, at=at, new_conversation_id=cid(target))
        return _messages(forked)
    if verb == "title":
        record = await store.update(conversation_id, title=args[0])
        return record.title
    if verb == "delete":
        await store.delete(conversation_id)
        return True
    if verb == "list":
        records = await store.list_conversations(scope=conversation_id)
        return len(records)
    raise AssertionError(verb)


def _messages(conversation: Conversation) -> list[Any]:
    return [copy.deepcopy(m) for m in conversation.messages]


async def _describe(store: ConversationStore, conversation_id: str, prefix: str) -> Any:
    record = await store.read_record(conversation_id)
    if record is None:
        return None
    loaded = await store.load(conversation_id)
    assert loaded is not None
    return {
        "messages": _messages(loaded),
        "usage": record.usage,
        "scope": record.scope,
        "title": record.title,
        "metadata": record.metadata,
        "forked_from": (record.forked_from or "").removeprefix(prefix),
        "forked": record.forked_at is not None,
        "branches": len(record.branches),
        "has_head": record.head_id is not None,
    }


@settings(
    max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(program=verbs)
def test_the_same_answers_as_pydantic_ais_own_store(
    journal: Journal, program: list[tuple[Any, ...]]
) -> None:
    prefix = f"p{next(_prefixes)}"  # each example its own tenant of the one journal

    async def run() -> tuple[list[Any], list[Any]]:
        theirs = await _play(InMemoryConversationStore(), program, prefix)
        ours = await _play(JournalConversationStore(journal.for_tenant(prefix)), program, prefix)
        return theirs, ours

    theirs, ours = asyncio.run(run())
    assert ours == theirs


def test_entries_that_point_in_a_circle_are_refused_with_nothing_written(
    journal: Journal,
) -> None:
    """`new_entries` come in order, each after the one it points at. Entries that do not (one
    pointing at itself, at a later one, an id given twice) would make the history a circle that
    every later load walked for ever: they are refused, and nothing is written."""
    from pydantic_ai.conversation_store import ConversationEntry, ConversationRecord

    from agentjournal import InvalidArgument

    def entry(entry_id: str, parent: str | None) -> ConversationEntry:
        return ConversationEntry(id=entry_id, parent_id=parent, message=_request(entry_id))

    bad = [
        [entry("a", "b"), entry("b", "a")],
        [entry("a", "a")],
        [entry("a", None), entry("b", "a"), entry("a", "b")],
    ]

    async def run() -> None:
        store = JournalConversationStore(journal)
        for entries in bad:
            record = ConversationRecord(conversation_id="c", head_id=entries[-1].id)
            with pytest.raises(InvalidArgument, match="entries"):
                await store.write_record(record, new_entries=entries, expected_revision=None)
            assert journal.sessions() == []
        good = [entry("a", None), entry("b", "a")]
        record = ConversationRecord(conversation_id="c", head_id="b")
        await store.write_record(record, new_entries=good, expected_revision=None)
        assert await store.read_history("b") == good
        # An id saved again in a later save: its history ends at the circle, not in it.
        again = ConversationRecord(conversation_id="c", head_id="a")
        revision = record.revision
        await store.write_record(again, new_entries=[entry("a", "b")], expected_revision=revision)
        with pytest.raises(LookupError):
            await JournalConversationStore(journal).read_history("a")

    asyncio.run(run())


@pytest.mark.parametrize(
    "details",
    [
        {"title": 5},
        {"title": ["a"]},
        {"metadata": ["not", "a", "dict"]},
        {"metadata": {"x": {1, 2}}},
        {"title": "nul \x00"},
        {"title": "t" * 1_100_000},
    ],
    ids=["int-title", "list-title", "list-metadata", "set-in-metadata", "nul-title", "huge-title"],
)
def test_details_of_the_wrong_kind_are_refused_with_nothing_written(
    journal: Journal, details: dict[str, Any]
) -> None:
    # An update the record cannot hold must not reach the journal: a `pydantic_ai.details` of
    # the wrong type would make every later load of the conversation fail.
    store = JournalConversationStore(journal)

    async def run() -> None:
        await store.save(Conversation(conversation_id="c", messages=[_request("一")]))
        before = journal.get_session("c").last_seq
        with pytest.raises((InvalidArgument, InvalidEvent, PayloadTooLarge)):
            await store.update("c", **details)
        assert journal.get_session("c").last_seq == before
        assert await store.load("c") is not None
        record = await store.read_record("c")
        assert record is not None
        assert (record.title, record.metadata) == (None, None)

    asyncio.run(run())
    assert journal.get_session("c").title == "c"


def test_a_delete_cut_short_after_its_first_write_reads_as_deleted(journal: Journal) -> None:
    # `delete` appends `pydantic_ai.deleted`, then soft-deletes the session: the first write
    # alone (a crash in between) already reads as deleted, and the id can start again.
    store = JournalConversationStore(journal)

    async def run() -> None:
        await store.save(Conversation(conversation_id="c", messages=[_request("一")]))
        record = await store.read_record("c")
        assert record is not None
        journal.append("c", DELETED, {"revision": record.revision})  # the first write only
        assert await store.load("c") is None
        assert await store.read_record("c") is None
        assert await store.list_conversations() == []
        await store.save(Conversation(conversation_id="c", messages=[_request("新")]))
        again = await store.load("c")
        assert again is not None
        assert again.messages == [_request("新")]
        await store.delete("c")
        assert await store.load("c") is None

    asyncio.run(run())
    assert journal.get_session("c").status == "deleted"


def test_a_conversation_saved_while_a_delete_finishes_is_kept(
    journal: Journal, monkeypatch: pytest.MonkeyPatch
) -> None:
    # `delete` is two writes: `pydantic_ai.deleted` (checked against the revision), then the
    # session's soft delete. Another client that starts a new conversation of the same id in
    # between is told it saved: its conversation must load afterwards, not vanish with the
    # session's soft delete.
    deleter, other = JournalConversationStore(journal), JournalConversationStore(journal)
    soft_delete = journal.delete_session

    def save_first_then_delete(session_id: str) -> Any:
        asyncio.run(other.save(Conversation(conversation_id="c", messages=[_request("新")])))
        return soft_delete(session_id)

    async def run() -> None:
        await deleter.save(Conversation(conversation_id="c", messages=[_request("一")]))
        monkeypatch.setattr(journal, "delete_session", save_first_then_delete)
        await deleter.delete("c")
        monkeypatch.undo()
        for store in (deleter, other, JournalConversationStore(journal)):
            loaded = await store.load("c")
            assert loaded is not None
            assert loaded.messages == [_request("新")]
            assert [r.conversation_id for r in await store.list_conversations()] == ["c"]
        loaded.messages.append(_request("再"))
        await other.save(loaded)

    asyncio.run(run())
    assert journal.get_session("c").status == "active"
