"""`JournalSession` with the real OpenAI Agents SDK, offline (the SDK's own `ScriptedModel`): the
`Session` protocol as the SDK defines it, the same answers as the SDK's `SQLiteSession` for any
sequence of calls made through one journal or two (hypothesis, both backends), runs of
`Runner.run` and `Runner.run_streamed` over three turns with parallel tool calls, what the
journal makes of an SDK conversation, and the rules of pop, clear and retries."""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import types
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

agents = pytest.importorskip("agents")

from agents import Agent, RunConfig, Runner, RunState, SQLiteSession, function_tool  # noqa: E402
from agents.memory import OpenAIResponsesCompactionSession, Session, SessionSettings  # noqa: E402
from agents.testing import ScriptedModel, assistant_message, function_call  # noqa: E402
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from agentjournal import AsyncJournal, InvalidArgument, InvalidEvent, Journal  # noqa: E402
from agentjournal.integrations.openai_agents import JournalSession  # noqa: E402
from postgres_fixtures import POOL_RANDOM, fresh_schema, url_for  # noqa: E402

agents.set_tracing_disabled(True)  # offline: the SDK would export traces to OpenAI
pytestmark = POOL_RANDOM  # see postgres_fixtures.POOL_RANDOM


@pytest.fixture
def journal(tmp_path: Path) -> Iterator[Journal]:
    with Journal.open(str(tmp_path / "agent.db")) as opened:
        yield opened


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


# -- the protocol -----------------------------------------------------------------------------


def test_it_is_the_sdks_session_and_starts_empty(journal: Journal) -> None:
    session = JournalSession("user-42", journal)
    assert isinstance(session, Session)
    assert asyncio.run(session.get_items()) == []
    assert asyncio.run(session.pop_item()) is None
    asyncio.run(session.clear_session())
    assert journal.sessions() == [], "reading, popping or clearing creates no session"


def test_open_creates_the_journal_session_on_first_add_with_its_fields(tmp_path: Path) -> None:
    async def run() -> None:
        async with JournalSession.open(
            str(tmp_path / "agent.db"), "user-42", title="订单客服", system_prompt="Be brief."
        ) as session:
            await session.add_items([user("帮我查一下订单数量")])
            stored = session.journal.get_session("user-42")
            assert (stored.title, stored.system_prompt) == ("订单客服", "Be brief.")
            assert stored.metadata == {"integration": "openai-agents"}
        with Journal.open(str(tmp_path / "agent.db")) as again:
            assert again.replay("user-42", format="responses") == [
                {"role": "system", "content": "Be brief."},
                user("帮我查一下订单数量"),
            ]

    asyncio.run(run())


def test_over_an_async_journal(tmp_path: Path) -> None:
    async def run() -> list[Any]:
        journal = await AsyncJournal.open(str(tmp_path / "agent.db"))
        try:
            session = JournalSession("s", journal)
            await session.add_items([user("hi")])
            return await session.get_items()
        finally:
            await journal.close()

    assert asyncio.run(run()) == [user("hi")]


def test_bad_arguments_are_refused_and_write_nothing(journal: Journal) -> None:
    session = JournalSession("s", journal)
    with pytest.raises(InvalidArgument):
        asyncio.run(session.add_items({"role": "user", "content": "x"}))  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument):
        asyncio.run(session.add_items([user("fine"), "not an item"]))  # type: ignore[list-item]
    with pytest.raises(InvalidArgument):
        asyncio.run(session.get_items(limit="3"))  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument):
        JournalSession("", journal)
    with pytest.raises(InvalidArgument):
        JournalSession("s", "agent.db")  # type: ignore[arg-type]
    assert [s.event_count for s in journal.sessions()] in ([], [1])


# -- what the journal makes of the items ------------------------------------------------------

CALL = {"type": "function_call", "id": "fc_1", "call_id": "c1", "name": "query_order_count"}
TURN: list[dict[str, Any]] = [
    user("帮我查一下订单数量"),
    {"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "look"}]},
    {**CALL, "arguments": "{}", "status": "completed"},
    {"type": "function_call_output", "call_id": "c1", "output": "42"},
    {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "status": "completed",
        "content": [{"type": "output_text", "text": "你当前有 42 个订单。", "annotations": []}],
    },
]


def test_known_items_become_the_journals_own_events_carrying_the_item(journal: Journal) -> None:
    session = JournalSession("s", journal)
    asyncio.run(session.add_items(TURN))
    events = journal.events("s")
    assert [e.type for e in events] == [
        "session_created",
        "user_message",
        "responses.item",
        "tool_call",
        "tool_result",
        "assistant_message",
    ]
    assert [e.payload["item"] for e in events[1:]] == TURN
    assert [(m.role, m.content) for m in journal.messages("s")] == [
        ("user", "帮我查一下订单数量"),
        ("assistant", "你当前有 42 个订单。"),
    ]
    (call,) = journal.tool_calls("s")
    assert (call.call_id, call.name, call.result, call.status) == (
        "c1",
        "query_order_count",
        "42",
        "ok",
    )
    assert journal.replay("s", format="responses") == TURN == asyncio.run(session.get_items())
    assert journal.verify().ok


def test_an_sdk_session_replays_as_valid_chat_and_anthropic_messages(journal: Journal) -> None:
    asyncio.run(JournalSession("s", journal).add_items(TURN))
    assert journal.replay("s") == [
        {"role": "user", "content": "帮我查一下订单数量"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "c1",
                    "type": "function",
                    "function": {"name": "query_order_count", "arguments": "{}"},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "42"},
        {"role": "assistant", "content": "你当前有 42 个订单。"},
    ]
    claude = journal.replay("s", format="anthropic")
    assert isinstance(claude, dict)
    assert [m["role"] for m in claude["messages"]] == ["user", "assistant", "user", "assistant"]
    assert claude["messages"][1]["content"] == [
        {"type": "tool_use", "id": "c1", "name": "query_order_count", "input": {}}
    ]


def test_pop_and_clear_hide_items_and_delete_nothing(journal: Journal) -> None:
    session = JournalSession("s", journal)
    asyncio.run(session.add_items(TURN))
    assert asyncio.run(session.pop_item()) == TURN[-1]
    assert asyncio.run(session.pop_item()) == TURN[-2]
    assert asyncio.run(session.get_items()) == TURN[:-2]
    # The call lost its result in every view: chat replays leave the call out (valid input).
    assert journal.replay("s") == [{"role": "user", "content": "帮我查一下订单数量"}]
    before_clear = journal.get_session("s").last_seq
    asyncio.run(session.clear_session())
    assert asyncio.run(session.get_items()) == []
    assert journal.replay("s") == [] == journal.replay("s", format="responses")
    # History stays: time travel shows it, the transcript keeps it, nothing was deleted.
    assert journal.replay("s", format="responses", until=before_clear) == TURN[:-2]
    assert journal.replay("s", format="responses", until=6) == TURN
    assert len(journal.messages("s")) == 2
    asyncio.run(session.add_items([user("again")]))
    assert asyncio.run(session.get_items()) == [user("again")]
    assert [e.type for e in journal.events("s")][-4:] == [
        "replay.item_removed",
        "replay.item_removed",
        "replay.cleared",
        "user_message",
    ]
    assert journal.verify().ok


def test_a_retried_batch_is_stored_once_and_a_repeated_question_twice(journal: Journal) -> None:
    session = JournalSession("s", journal)
    asyncio.run(session.add_items(TURN[2:]))
    asyncio.run(session.add_items(TURN[2:]))  # the same batch again: a retry after a timeout
    assert asyncio.run(session.get_items()) == TURN[2:]
    # Items without ids cannot be told from a new message: "hi" twice is two messages.
    asyncio.run(session.add_items([user("hi")]))
    asyncio.run(session.add_items([user("hi")]))
    assert asyncio.run(session.get_items(limit=2)) == [user("hi"), user("hi")]
    # After a clear, the same items are new again (a compaction re-adds kept items).
    asyncio.run(session.clear_session())
    asyncio.run(session.add_items(TURN[2:]))
    assert asyncio.run(session.get_items()) == TURN[2:]


def test_items_that_would_break_a_tool_rule_are_kept_verbatim(journal: Journal) -> None:
    """An output whose call is unknown or popped, and a call id used again, are valid for the SDK
    and break the journal's tool-call rules: they are stored as responses.item, never refused."""
    session = JournalSession("s", journal)
    orphan = {"type": "function_call_output", "call_id": "nobody", "output": "?"}
    call = {**CALL, "arguments": "{}"}
    output = {"type": "function_call_output", "call_id": "c1", "output": "1"}
    again = {**output, "output": "2"}  # a second output for the same call
    steps = [[orphan], [call], [output], [again], [call]]
    for batch in steps:
        asyncio.run(session.add_items(batch))
    assert asyncio.run(session.get_items()) == [orphan, call, output, again, call]
    assert [e.type for e in journal.events("s")][1:] == [
        "responses.item",
        "tool_call",
        "tool_result",
        "responses.item",
        "responses.item",
    ]
    assert journal.verify().ok


def test_a_writer_that_knows_the_session_still_sees_what_others_wrote(
    journal: Journal, tmp_path: Path
) -> None:
    """A writer appends on what it knows from its own last write, without reading (KnownState).
    Another process's writes outdate that: the journal finds out, nothing is lost or misfiled."""
    with Journal.open(str(tmp_path / "agent.db")) as other_process:
        ours, theirs = JournalSession("s", journal), JournalSession("s", other_process)
        call = {**CALL, "arguments": "{}"}
        asyncio.run(theirs.add_items([call]))
        asyncio.run(ours.add_items([user("still there?")]))  # reads: the call is not named
        asyncio.run(ours.add_items([TURN[3]]))  # its output: a result, the call known or not
        asyncio.run(theirs.add_items([user("again")]))  # outdates what `ours` knows
        asyncio.run(ours.add_items([user("and again")]))
        asyncio.run(ours.add_items([TURN[3]]))  # the call has its result: kept as an item
        popped = asyncio.run(theirs.pop_item())
        asyncio.run(ours.add_items([popped]))  # a retry? no: not the newest item any more
    assert asyncio.run(ours.get_items()) == [
        call,
        user("still there?"),
        TURN[3],
        user("again"),
        user("and again"),
        TURN[3],
    ]
    assert [e.type for e in journal.events("s")][1:8] == [
        "tool_call",
        "user_message",
        "tool_result",
        "user_message",
        "user_message",
        "responses.item",
        "replay.item_removed",
    ]
    [found] = journal.tool_calls("s")
    assert (found.call_id, found.status, found.result) == ("c1", "ok", "42")
    assert journal.verify().ok


# -- the same answers as the SDK's SQLiteSession ----------------------------------------------

_ids = itertools.count()
TEXT = st.text(
    st.characters(blacklist_characters="\x00", blacklist_categories=("Cs",)), max_size=12
)


@st.composite
def items(draw: st.DrawFn) -> dict[str, Any]:
    """A Responses input item of one of the kinds the SDK writes; each unique (its id or text),
    so that two batches are never the same (a retry is tested on its own above)."""
    n = next(_ids)
    call_id = f"c{draw(st.integers(0, 5))}"  # few call ids: reuse, orphans and pairs happen
    text = draw(TEXT) + f"#{n}"
    return draw(
        st.sampled_from(
            [
                {"role": "user", "content": text},
                {"role": "user", "content": [{"type": "input_text", "text": text}]},
                {"role": "system", "content": text},
                {"role": "developer", "content": text},
                {
                    "id": f"msg_{n}",
                    "type": "message",
                    "role": "assistant",
                    "status": "completed",
                    "content": [{"type": "output_text", "text": text, "annotations": []}],
                },
                {
                    "type": "function_call",
                    "id": f"fc_{n}",
                    "call_id": call_id,
                    "name": "tool",
                    "arguments": json.dumps({"q": text}),
                },
                {"type": "function_call_output", "call_id": call_id, "output": text, "id": f"o{n}"},
                {
                    "type": "reasoning",
                    "id": f"rs_{n}",
                    "summary": [{"type": "summary_text", "text": text}],
                },
                {"type": "web_search_call", "id": f"ws_{n}", "status": "completed"},
                {"type": "item_reference", "id": f"ref_{n}"},
                {"type": "compaction", "id": f"cmp_{n}", "encrypted_content": text},
                {
                    "type": "some_future_kind",
                    "id": f"new_{n}",
                    "data": {"nested": [text, 1, 2.5, None]},
                },
            ]
        )
    )


OPS = st.lists(
    st.one_of(
        st.tuples(st.just("add"), st.lists(items(), max_size=4)),
        st.tuples(st.just("get"), st.sampled_from([None, 0, 1, 2, 5, 50, -1])),
        st.tuples(st.just("pop"), st.none()),
        st.tuples(st.just("clear"), st.none()),
    ),
    max_size=25,
)
_session_ids = itertools.count()


WRITERS = 2
# Each op names the writer that makes it: two journals on one database stand for two processes,
# each keeping its own knowledge of the session (KnownState) that the other's writes outdate.


async def play(sessions: list[Any], ops: list[tuple[str, Any]], by: list[int]) -> list[Any]:
    answers: list[Any] = []
    for (op, argument), writer in zip(ops, by, strict=True):
        session = sessions[writer % len(sessions)]
        if op == "add":
            answers.append(await session.add_items(argument))
        elif op == "get":
            answers.append(await session.get_items(limit=argument))
        elif op == "pop":
            answers.append(await session.pop_item())
        else:
            answers.append(await session.clear_session())
    answers.append(await sessions[0].get_items())
    return answers


def differential(journals: list[Journal], peer_db: Path) -> None:
    @settings(
        max_examples=300 if os.environ.get("CI") else 60,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
    )
    @given(OPS, st.lists(st.integers(0, WRITERS - 1), min_size=25, max_size=25))
    def check(ops: list[tuple[str, Any]], writers: list[int]) -> None:
        sid = f"d{next(_session_ids)}"
        by = writers[: len(ops)]
        peer = SQLiteSession(sid, str(peer_db))
        try:
            expected = asyncio.run(play([peer], ops, by))
        finally:
            peer.close()
        ours = [JournalSession(sid, journal) for journal in journals]
        assert asyncio.run(play(ours, ops, by)) == expected
        if any(op == "add" and argument for op, argument in ops):
            assert_calls_classified(journals[0].events(sid, limit=1000))

    check()
    for journal in journals:
        assert journal.verify().ok


def assert_calls_classified(events: list[Any]) -> None:
    """Each function_call item is a `tool_call` exactly when its call id was unused, each output
    a `tool_result` exactly when its call was open, whichever writer knew what."""
    used: set[str] = set()
    waiting: set[str] = set()
    for event in events:
        item = event.payload.get("item", {})
        call_id = item.get("call_id")
        if item.get("type") == "function_call":
            assert (event.type == "tool_call") == (call_id not in used), event
            if event.type == "tool_call":
                used.add(call_id)
                waiting.add(call_id)
        elif item.get("type") == "function_call_output":
            assert (event.type == "tool_result") == (call_id in waiting), event
            waiting.discard(call_id)


def test_the_same_answers_as_sqlitesession_on_sqlite(journal: Journal, tmp_path: Path) -> None:
    with Journal.open(str(tmp_path / "agent.db")) as other:
        differential([journal, other], tmp_path / "peer.db")


def test_the_same_answers_as_sqlitesession_on_postgresql(tmp_path: Path) -> None:
    with (
        fresh_schema("agents") as schema,
        Journal.open(url_for(schema)) as journal,
        Journal.open(url_for(schema)) as other,
    ):
        differential([journal, other], tmp_path / "peer.db")


# -- Runner.run and Runner.run_streamed -------------------------------------------------------

ORDERS = {"A-1": 2, "B-2": 40}


@function_tool
def query_order_count(customer: str) -> str:
    """How many orders a customer has."""
    return str(ORDERS.get(customer, 0))


def script() -> list[Any]:
    """Three turns; the first calls the tool twice in parallel."""
    return [
        [
            function_call("query_order_count", {"customer": "A-1"}, call_id="call_a"),
            function_call("query_order_count", {"customer": "B-2"}, call_id="call_b"),
        ],
        [assistant_message("你当前有 42 个订单。", item_id="msg_1")],
        [assistant_message("A-1 有 2 个。", item_id="msg_2")],
        [assistant_message("不客气。", item_id="msg_3")],
    ]


QUESTIONS = ["帮我查一下订单数量", "A-1 呢？", "谢谢"]


async def converse(session: Any, *, streamed: bool, run_config: RunConfig | None = None) -> Any:
    model = ScriptedModel(script())
    agent = Agent(
        name="orders",
        instructions="Answer order questions.",
        model=model,
        tools=[query_order_count],
    )
    for question in QUESTIONS:
        if streamed:
            result = Runner.run_streamed(agent, question, session=session, run_config=run_config)
            async for _ in result.stream_events():
                pass
        else:
            await Runner.run(agent, question, session=session, run_config=run_config)
    return model


@pytest.mark.parametrize("streamed", [False, True], ids=["run", "run_streamed"])
def test_three_turns_remember_like_sqlitesession(
    journal: Journal, tmp_path: Path, streamed: bool
) -> None:
    peer = SQLiteSession("s", str(tmp_path / "peer.db"))
    ours = JournalSession("s", journal)
    peer_model = asyncio.run(converse(peer, streamed=streamed))
    our_model = asyncio.run(converse(ours, streamed=streamed))
    # The second and third turns' model calls got the earlier turns' items, as with SQLiteSession.
    assert [c.input for c in our_model.calls] == [c.input for c in peer_model.calls]
    third_turn = our_model.calls[3].input
    assert isinstance(third_turn, list)
    assert [i.get("call_id") for i in third_turn if i.get("type") == "function_call"] == [
        "call_a",
        "call_b",
    ]
    assert (
        third_turn[-1] == {"role": "user", "content": "谢谢"} or third_turn[-1]["content"] == "谢谢"
    )
    assert asyncio.run(ours.get_items()) == asyncio.run(peer.get_items())
    peer.close()
    calls = journal.tool_calls("s")
    assert [(c.call_id, c.result) for c in calls] == [("call_a", "2"), ("call_b", "40")]
    assert [m.role for m in journal.messages("s")] == ["user", "assistant"] * 3
    assert journal.verify().ok


def test_session_settings_limit_and_input_callback_as_with_sqlitesession(
    journal: Journal, tmp_path: Path
) -> None:
    def newest_user_turns(history: list[Any], new: list[Any]) -> list[Any]:
        return [item for item in history if item.get("role") == "user"] + new

    for name, settings_, config in [
        ("limit", SessionSettings(limit=3), None),
        ("callback", None, RunConfig(session_input_callback=newest_user_turns)),
    ]:
        peer = SQLiteSession(name, str(tmp_path / "peer.db"), session_settings=settings_)
        ours = JournalSession(name, journal, session_settings=settings_)
        peer_model = asyncio.run(converse(peer, streamed=False, run_config=config))
        our_model = asyncio.run(converse(ours, streamed=False, run_config=config))
        assert [c.input for c in our_model.calls] == [c.input for c in peer_model.calls], name
        assert asyncio.run(ours.get_items()) == asyncio.run(peer.get_items()), name
        peer.close()


def test_session_settings_given_as_a_dict_are_checked_and_used_as_by_sqlitesession(
    journal: Journal, tmp_path: Path
) -> None:
    peer = SQLiteSession("d", str(tmp_path / "peer.db"), session_settings={"limit": 3})
    ours = JournalSession("d", journal, session_settings={"limit": 3})
    assert ours.session_settings == peer.session_settings == SessionSettings(limit=3)
    peer_model = asyncio.run(converse(peer, streamed=False))
    our_model = asyncio.run(converse(ours, streamed=False))
    assert [c.input for c in our_model.calls] == [c.input for c in peer_model.calls]
    assert asyncio.run(ours.get_items()) == asyncio.run(peer.get_items())
    assert len(asyncio.run(ours.get_items())) == 3
    peer.close()
    assert JournalSession("n", journal).session_settings == SessionSettings()
    for make in (
        lambda settings_: SQLiteSession("x", session_settings=settings_),
        lambda settings_: JournalSession("x", journal, session_settings=settings_),
        lambda settings_: JournalSession.open(
            str(tmp_path / "x.db"), "x", session_settings=settings_
        ),
    ):
        with pytest.raises(TypeError, match=r"^Unknown session settings: limt$"):
            make({"limt": 3})
        with pytest.raises(TypeError, match=r"^session must be a SessionSettings .* got int$"):
            make(3)


# -- what else a valid SDK run writes ---------------------------------------------------------


@function_tool
def failing_lookup(order: str) -> str:
    """Looks an order up; this one always fails."""
    raise RuntimeError(f"order service down for {order}")


@agents.input_guardrail
def no_secrets(context: Any, agent: Any, text: Any) -> Any:
    tripped = "password" in json.dumps(text, ensure_ascii=False, default=str)
    return agents.GuardrailFunctionOutput(output_info=None, tripwire_triggered=tripped)


async def varied_runs(session: Any) -> list[Any]:
    """A handoff, a tool that raises, stop_on_first_tool, and a tripped input guardrail: what
    each leaves in the session."""
    billing = Agent(
        name="billing",
        model=ScriptedModel([[assistant_message("Billing here.", item_id="msg_b")]]),
    )
    front = Agent(
        name="front",
        model=ScriptedModel(
            [
                [function_call("transfer_to_billing", {}, call_id="call_h")],
                [function_call("failing_lookup", {"order": "A1"}, call_id="call_f")],
                [assistant_message("The service is down.", item_id="msg_f")],
            ]
        ),
        handoffs=[billing],
        tools=[failing_lookup],
    )
    await Runner.run(front, "I was charged twice", session=session)
    front.model = ScriptedModel(
        [
            [function_call("failing_lookup", {"order": "A1"}, call_id="call_f")],
            [assistant_message("The service is down.", item_id="msg_f")],
        ]
    )
    front.handoffs = []
    await Runner.run(front, "Where is A1?", session=session)
    stopper = Agent(
        name="stopper",
        model=ScriptedModel(
            [[function_call("query_order_count", {"customer": "A-1"}, call_id="call_s")]]
        ),
        tools=[query_order_count],
        tool_use_behavior="stop_on_first_tool",
    )
    await Runner.run(stopper, "count A-1", session=session)
    guarded = Agent(name="guarded", model=ScriptedModel([]), input_guardrails=[no_secrets])
    with pytest.raises(agents.InputGuardrailTripwireTriggered):
        await Runner.run(guarded, "my password is hunter2", session=session)
    return await session.get_items()


def test_handoffs_tool_errors_stop_on_first_tool_and_guardrails_store_as_sqlitesession(
    journal: Journal, tmp_path: Path
) -> None:
    peer = SQLiteSession("v", str(tmp_path / "peer.db"))
    expected = asyncio.run(varied_runs(peer))
    peer.close()
    assert asyncio.run(varied_runs(JournalSession("v", journal))) == expected
    kinds = [e.type for e in journal.events("v")]
    assert kinds.count("tool_call") == 3  # the handoff, the failing lookup, the counter
    assert {c.call_id: c.status for c in journal.tool_calls("v")} == {
        "call_h": "ok",
        "call_f": "ok",
        "call_s": "ok",
    }
    assert journal.verify().ok


@function_tool(needs_approval=True)
def refund(order: str) -> str:
    """Refunds an order, once a person approves."""
    return f"refunded {order}"


async def approved_after_a_restart(open_session: Callable[[], Any]) -> tuple[list[Any], Any]:
    """A run stops for a tool approval; its `RunState` is saved as text and the process ends.
    A new process opens the session again, approves, resumes the run, and asks once more."""
    model = ScriptedModel(
        [
            [function_call("refund", {"order": "A1"}, call_id="call_r")],
            [assistant_message("A1 is refunded.", item_id="msg_r")],
            [assistant_message("You're welcome.", item_id="msg_t")],
        ]
    )
    agent = Agent(name="refunds", model=model, tools=[refund])
    session = open_session()
    first = await Runner.run(agent, "Refund A1", session=session)
    assert [i.raw_item.call_id for i in first.interruptions] == ["call_r"]
    saved = first.to_state().to_string()
    session.close()
    session = open_session()  # the next process
    state = await RunState.from_string(agent, saved)
    state.approve(state.get_interruptions()[0])
    resumed = await Runner.run(agent, state, session=session)
    assert resumed.final_output == "A1 is refunded."
    await Runner.run(agent, "Thanks", session=session)
    items = await session.get_items()
    session.close()
    return items, model


def test_a_run_resumed_from_its_saved_state_in_a_new_process_stores_as_sqlitesession(
    tmp_path: Path,
) -> None:
    expected, peer_model = asyncio.run(
        approved_after_a_restart(lambda: SQLiteSession("r", str(tmp_path / "peer.db")))
    )
    path = str(tmp_path / "agent.db")
    items, model = asyncio.run(approved_after_a_restart(lambda: JournalSession.open(path, "r")))
    assert items == expected
    assert [c.input for c in model.calls] == [c.input for c in peer_model.calls]
    with Journal.open(path) as journal:
        [call] = journal.tool_calls("r")
        assert (call.call_id, call.status, call.result) == ("call_r", "ok", "refunded A1")
        assert [m.content for m in journal.messages("r")] == [
            "Refund A1",
            "A1 is refunded.",
            "Thanks",
            "You're welcome.",
        ]
        assert journal.verify().ok


class CompactAPI:
    """Stands in for the network behind `client.responses.compact` (no OpenAI here): answers
    with one compaction item and the last user message, as the real endpoint does."""

    def __init__(self) -> None:
        self.inputs: list[Any] = []

    async def compact(self, *, model: str, input: list[Any]) -> Any:
        self.inputs.append(input)
        kept = [item for item in input if item.get("role") == "user"][-1:]
        summary = {"type": "compaction", "id": f"cmp_{len(self.inputs)}", "encrypted_content": "…"}
        return types.SimpleNamespace(output=[summary, *kept], usage=None)


def test_compaction_through_the_sdks_compaction_session_is_one_atomic_append(
    journal: Journal,
) -> None:
    client = types.SimpleNamespace(responses=CompactAPI())
    ours = JournalSession("c", journal)
    compacting = OpenAIResponsesCompactionSession(
        "c",
        ours,
        client=client,
        compaction_mode="input",  # the items go to the endpoint, not a stored response's id
        should_trigger_compaction=lambda context: True,
    )
    asyncio.run(converse(compacting, streamed=False))  # compacts after every turn
    assert len(client.responses.inputs) == 3
    summary = {"type": "compaction", "id": "cmp_3", "encrypted_content": "…"}
    assert asyncio.run(ours.get_items()) == [summary, {"content": "谢谢", "role": "user"}]
    assert [e.type for e in journal.events("c", limit=1000)].count("replay.cleared") == 3
    # Nothing was deleted: the journal still has every turn, the inspector shows them.
    assert [m.content for m in journal.messages("c")].count("帮我查一下订单数量") == 2
    assert [c.call_id for c in journal.tool_calls("c")] == ["call_a", "call_b"]
    assert journal.verify().ok


def test_automatic_compaction_of_more_than_the_model_saw_compacts_as_over_sqlitesession(
    journal: Journal, tmp_path: Path
) -> None:
    """With `session_settings.limit` the model sees the newest items only; after each turn the
    compaction session compacts what the model saw and keeps the rest, as over SQLiteSession
    (the SDK's `_get_compaction_snapshot` hook). The hidden items stay in the journal."""
    runs = []
    for session in (
        SQLiteSession("c", str(tmp_path / "peer.db"), session_settings={"limit": 4}),
        JournalSession("c", journal, session_settings={"limit": 4}),
    ):
        earlier = [user(f"earlier {n}") for n in range(6)]
        asyncio.run(session.add_items(earlier))  # more than the model will see
        client = types.SimpleNamespace(responses=CompactAPI())
        compacting = OpenAIResponsesCompactionSession(
            "c",
            session,
            client=client,
            compaction_mode="input",  # the items go to the endpoint, not a stored response's id
            should_trigger_compaction=lambda context: True,
        )
        model = asyncio.run(converse(compacting, streamed=False))
        items = asyncio.run(session.get_items(limit=1000))
        runs.append((client.responses.inputs, [c.input for c in model.calls], items))
    (peer_inputs, peer_calls, peer_items), (inputs, calls, items) = runs
    assert len(peer_inputs) == 3, "SQLiteSession: compacted after every turn"
    assert inputs == peer_inputs
    assert calls == peer_calls
    assert items == peer_items
    # The first compaction took what the model saw, from the oldest of the 4 items it read.
    assert inputs[0][:2] == [user("earlier 2"), user("earlier 3")]
    assert [item.get("id") for item in items if item.get("type") == "compaction"] == ["cmp_3"]
    assert [m.content for m in journal.messages("c")].count("帮我查一下订单数量") == 2
    assert journal.verify().ok


def test_a_compaction_replaces_the_suffix_only_if_it_is_still_the_newest(journal: Journal) -> None:
    ours = JournalSession("c", journal)
    asyncio.run(ours.add_items([user("one"), user("two"), user("three")]))
    snapshot = asyncio.run(ours._get_compaction_snapshot(2))
    assert snapshot is not None
    assert (snapshot.items, snapshot.complete) == ([user("two"), user("three")], False)
    asyncio.run(ours.add_items([user("four")]))
    assert asyncio.run(snapshot.replace_suffix(0, [user("summary")])) is False
    assert asyncio.run(ours.get_items()) == [user(w) for w in ("one", "two", "three", "four")]
    snapshot = asyncio.run(ours._get_compaction_snapshot(2))
    assert snapshot is not None
    assert asyncio.run(snapshot.replace_suffix(1, [user("summary")])) is True
    assert asyncio.run(ours.get_items()) == [user(w) for w in ("one", "two", "three", "summary")]
    whole = asyncio.run(ours._get_compaction_snapshot(10))
    assert whole is not None
    assert whole.complete
    assert asyncio.run(whole.replace_suffix(0, [user("all")])) is True
    assert asyncio.run(ours.get_items()) == [user("all")]
    assert [e.type for e in journal.events("c")][-2:] == ["replay.cleared", "user_message"]


def test_a_compaction_hides_the_expired_oldest_items_in_the_same_append(journal: Journal) -> None:
    """`prune_prefix` (the SDK's encrypted session gives it for expired items): the oldest items
    it says are expired are hidden with the suffix, up to the first it keeps."""
    ours = JournalSession("e", journal)
    words = ("old 1", "old 2", "kept", "old 3", "new")
    asyncio.run(ours.add_items([user(w) for w in words]))
    before = journal.get_session("e").last_seq
    snapshot = asyncio.run(
        ours._get_compaction_snapshot(1, prune_prefix=lambda item: item["content"][:3] == "old")
    )
    assert snapshot is not None
    assert asyncio.run(snapshot.replace_suffix(0, [user("summary")])) is True
    assert asyncio.run(ours.get_items()) == [user("kept"), user("old 3"), user("summary")]
    appended = journal.events("e", after=before)
    assert [e.type for e in appended] == ["replay.item_removed"] * 3 + ["user_message"]


def test_a_compaction_that_cannot_be_stored_leaves_the_session_as_it_was(journal: Journal) -> None:
    """The compacted history replaces the old one in one append (the SDK's
    `_atomic_replace_items` hook): refused, it writes nothing, not even the clear."""
    ours = JournalSession("c", journal)
    asyncio.run(ours.add_items(TURN))
    before = journal.get_session("c").last_seq
    bad = {"type": "compaction", "id": "cmp_1", "encrypted_content": float("nan")}

    async def compact_badly(*, model: str, input: list[Any]) -> Any:
        return types.SimpleNamespace(output=[bad], usage=None)

    client = types.SimpleNamespace(responses=types.SimpleNamespace(compact=compact_badly))
    compacting = OpenAIResponsesCompactionSession("c", ours, client=client, compaction_mode="input")
    with pytest.raises(InvalidEvent, match=r"NaN|finite"):
        asyncio.run(compacting.run_compaction({"force": True}))
    assert journal.get_session("c").last_seq == before
    assert asyncio.run(ours.get_items()) == TURN


def test_a_runtime_session_reads_as_items_and_pops_an_unanswered_call(journal: Journal) -> None:
    """A session the journal's own runtime wrote (no items stored) continues through the SDK:
    its events read as the equivalent items, and even a call still waiting for its result pops."""
    sid = journal.create_session("runtime").session_id
    journal.append(sid, "user_message", {"content": "帮我查一下订单数量"})
    journal.append(sid, "tool_call", {"call_id": "c1", "name": "count", "arguments": "{}"})
    session = JournalSession(sid, journal)
    assert asyncio.run(session.get_items()) == [user("帮我查一下订单数量")]
    popped = asyncio.run(session.pop_item())
    assert popped == {"type": "function_call", "call_id": "c1", "name": "count", "arguments": "{}"}
    assert asyncio.run(session.pop_item()) == user("帮我查一下订单数量")
    assert asyncio.run(session.pop_item()) is None


def test_sessions_opened_per_conversation_share_one_storage_and_one_worker_pool(
    tmp_path: Path,
) -> None:
    """`JournalSession.open` once per conversation, as a user swapping `SQLiteSession` writes
    it: every session of one file in this process holds the file's one storage (one writer, one
    group commit) and runs its calls on one pool of worker threads, wide enough for 16
    conversations' appends to be in flight at once; the storage closes with the last session."""
    from agentjournal.backends.urls import SQLITE_FILES

    path = tmp_path / "agent.db"
    key = (os.path.realpath(path), "full")

    async def run() -> None:
        sessions = [JournalSession.open(str(path), f"user-{n}") for n in range(16)]
        assert len({id(s.journal.storage) for s in sessions}) == 1
        pools = {id(s._async._pool) for s in sessions if s._async is not None}
        assert all(s._async is not None for s in sessions)
        assert len(pools) == 1
        first = sessions[0]._async
        assert first is not None
        assert first._pool._max_workers >= 16
        assert SQLITE_FILES.holders(key) == 16
        await asyncio.gather(*(s.add_items([user(s.session_id)]) for s in sessions))
        for session in sessions[1:]:
            session.close()
        assert SQLITE_FILES.holders(key) == 1
        assert await sessions[0].get_items() == [user("user-0")]
        sessions[0].close()
        assert SQLITE_FILES.holders(key) == 0
        with Journal.open(path) as journal:
            assert len(journal.sessions(limit=100)) == 16

    asyncio.run(run())


def _open_in_child(path: str, out: Any) -> None:
    async def run() -> None:
        async with JournalSession.open(path, "child") as session:
            await session.add_items([user("from the child")])
            out.put(await session.get_items())

    asyncio.run(run())


def test_a_forked_child_opens_sessions_on_threads_of_its_own(tmp_path: Path) -> None:
    """The parent's worker pool and storage exist only in the parent: a child made by `fork()`
    after the parent opened a session gets its own, and its calls run."""
    import multiprocessing

    path = str(tmp_path / "agent.db")

    async def run() -> None:
        async with JournalSession.open(path, "parent") as session:
            await session.add_items([user("from the parent")])
            context = multiprocessing.get_context("fork")
            out = context.Queue()
            child = context.Process(target=_open_in_child, args=(path, out))
            child.start()
            child.join(timeout=60)
            assert child.exitcode == 0
            assert out.get(timeout=5) == [user("from the child")]
            assert await session.get_items() == [user("from the parent")]

    asyncio.run(run())
