"""`JournalSaver` and `AsyncJournalSaver` under real LangGraph graphs, offline (LangChain's fake
chat model and plain nodes), on SQLite files and PostgreSQL: a tool-calling chat graph over three
turns that is also a conversation in the journal (transcript, tool calls, replay lined up with the
checkpoints), a step storing only what it changed, `interrupt()` and `Command(resume=)` across a
reopen, time travel (history, `update_state`, a run from an old checkpoint), `copy_thread` as a
fork, `prune`, `delete_thread`, and bad input refused with nothing written."""

from __future__ import annotations

import asyncio
import operator
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any, TypedDict

import pytest

pytest.importorskip("langgraph")

from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, AnyMessage, HumanMessage
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.graph.state import CompiledStateGraph
from langgraph.prebuilt import ToolNode, tools_condition
from langgraph.types import Command, interrupt

from agentjournal import (
    AsyncJournal,
    Conflict,
    InvalidArgument,
    Journal,
    PayloadTooLarge,
)
from agentjournal.events import LANGGRAPH_BLOB, LANGGRAPH_CHECKPOINT
from agentjournal.integrations import langgraph_events as lg
from agentjournal.integrations.langgraph import (
    AsyncJournalSaver,
    JournalSaver,
    session_id_for,
)
from postgres_fixtures import POOL_RANDOM, fresh_schema, url_for

pytestmark = POOL_RANDOM  # see postgres_fixtures.POOL_RANDOM


@pytest.fixture(params=["sqlite", "postgres", "postgres-pooler"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield str(tmp_path / "agent.db")
    else:
        options = {"pooler": "transaction"} if request.param == "postgres-pooler" else {}
        with fresh_schema("lg") as schema:
            yield url_for(schema, **options)


def config(thread_id: str, **extra: Any) -> RunnableConfig:
    return {"configurable": {"thread_id": thread_id, **extra}}


# -- a chat graph with a tool -----------------------------------------------------------------


@tool
def query_order_count() -> str:
    """How many orders the user has."""
    return "42"


def chat_graph(saver: Any, replies: list[AIMessage]) -> CompiledStateGraph[Any]:
    model = GenericFakeChatModel(messages=iter(replies))

    def chatbot(state: MessagesState) -> dict[str, Any]:
        return {"messages": [model.invoke(state["messages"])]}

    builder = StateGraph(MessagesState)
    builder.add_node("chatbot", chatbot)
    builder.add_node("tools", ToolNode([query_order_count]))
    builder.add_edge(START, "chatbot")
    builder.add_conditional_edges("chatbot", tools_condition)
    builder.add_edge("tools", "chatbot")
    return builder.compile(checkpointer=saver)


def call(call_id: str) -> AIMessage:
    return AIMessage("", tool_calls=[{"id": call_id, "name": "query_order_count", "args": {}}])


REPLIES = [
    call("call_1"),
    AIMessage("你当前有 42 个订单。"),
    AIMessage("不客气。"),
    call("call_2"),
    AIMessage("还是 42 个。"),
]
TURNS = ["帮我查一下订单数量", "谢谢", "再查一次"]


def run_chat(saver: Any, thread_id: str = "user-42") -> list[AnyMessage]:
    graph = chat_graph(saver, list(REPLIES))
    out: dict[str, Any] = {}
    for text in TURNS:
        out = graph.invoke({"messages": [HumanMessage(text)]}, config(thread_id))
    return list(out["messages"])


def test_a_tool_calling_chat_over_three_turns_is_also_a_conversation(url: str) -> None:
    with JournalSaver.from_conn_string(url) as saver:
        messages = run_chat(saver)
        journal = saver.journal
        assert [m.content for m in messages] == [
            "帮我查一下订单数量",
            "",
            "42",
            "你当前有 42 个订单。",
            "谢谢",
            "不客气。",
            "再查一次",
            "",
            "42",
            "还是 42 个。",
        ]
        assert [(m.role, m.content) for m in journal.messages("user-42")] == [
            ("user", "帮我查一下订单数量"),
            ("assistant", "你当前有 42 个订单。"),
            ("user", "谢谢"),
            ("assistant", "不客气。"),
            ("user", "再查一次"),
            ("assistant", "还是 42 个。"),
        ]
        calls = journal.tool_calls("user-42")
        assert [(c.call_id, c.name, c.status, c.result) for c in calls] == [
            ("call_1", "query_order_count", "ok", "42"),
            ("call_2", "query_order_count", "ok", "42"),
        ]
        replayed = journal.replay("user-42")
        assert replayed[:3] == [
            {"role": "user", "content": "帮我查一下订单数量"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "call_1",
                        "type": "function",
                        "function": {"name": "query_order_count", "arguments": "{}"},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "call_1", "content": "42"},
        ]
        assert len(replayed) == 10
        session = journal.get_session("user-42")
        assert session.metadata == {"integration": "langgraph", "thread_id": "user-42"}
        assert journal.verify().ok
    with JournalSaver.from_conn_string(url) as again:
        state = chat_graph(again, []).get_state(config("user-42"))
        assert [(m.type, m.content, m.id) for m in state.values["messages"]] == [
            (m.type, m.content, m.id) for m in messages
        ]


def test_each_event_keeps_the_original_message(tmp_path: Path) -> None:
    with JournalSaver.from_conn_string(str(tmp_path / "agent.db")) as saver:
        messages = run_chat(saver)
        events = saver.journal.events("user-42", limit=1000)
        kept = [e.payload["message"] for e in events if "message" in e.payload]
        assert [m["data"]["id"] for m in kept] == [m.id for m in messages]
        assert [m["type"] for m in kept] == [m.type for m in messages]


def test_a_step_stores_what_it_changed_not_the_whole_history(tmp_path: Path) -> None:
    serde = JsonPlusSerializer()
    with JournalSaver.from_conn_string(str(tmp_path / "agent.db")) as saver:
        messages = run_chat(saver)
        blobs = [
            e.payload
            for e in saver.journal.events("user-42", limit=1000)
            if e.type == LANGGRAPH_BLOB and e.payload["channel"] == "messages"
        ]
    stored = [serde.loads_typed(lg.decode(blob["value"])) for blob in blobs]
    assert "base" not in blobs[0]
    assert all("base" in blob for blob in blobs[1:]), "every later step extends the list"
    # Each message is stored once among the messages channel's blobs, however many steps saw it.
    assert sum(len(value) for value in stored) == len(messages)
    assert [m.id for value in stored for m in value] == [m.id for m in messages]


def test_replay_until_a_checkpoint_shows_the_conversation_as_that_checkpoint_held_it(
    tmp_path: Path,
) -> None:
    with JournalSaver.from_conn_string(str(tmp_path / "agent.db")) as saver:
        run_chat(saver)
        journal = saver.journal
        heads = {
            e.payload["checkpoint_id"]: e.seq
            for e in journal.events("user-42", limit=1000)
            if e.type == LANGGRAPH_CHECKPOINT
        }
        checked = 0
        for snapshot in chat_graph(saver, []).get_state_history(config("user-42")):
            seq = heads[snapshot.config["configurable"]["checkpoint_id"]]
            held = [
                m.content
                for m in snapshot.values.get("messages", [])
                if m.type in ("human", "ai") and m.content
            ]
            replayed = journal.replay("user-42", until=seq)
            assert isinstance(replayed, list)
            texts = [
                m["content"]
                for m in replayed
                if m["role"] in ("user", "assistant") and m["content"]
            ]
            assert texts == held
            checked += 1
        assert checked == len(heads)


# -- interrupt and resume ---------------------------------------------------------------------


class Approval(TypedDict):
    steps: Annotated[list[str], operator.add]


def approval_graph(saver: Any) -> CompiledStateGraph[Any]:
    def prepare(state: Approval) -> dict[str, Any]:
        return {"steps": ["prepared"]}

    def approve(state: Approval) -> dict[str, Any]:
        answer = interrupt({"question": "ship order 42?"})
        return {"steps": [f"answer: {answer}"]}

    def ship(state: Approval) -> dict[str, Any]:
        return {"steps": ["shipped"]}

    builder = StateGraph(Approval)
    builder.add_node("prepare", prepare)
    builder.add_node("approve", approve)
    builder.add_node("ship", ship)
    builder.add_edge(START, "prepare")
    builder.add_edge("prepare", "approve")
    builder.add_edge("approve", "ship")
    return builder.compile(checkpointer=saver)


def test_an_interrupt_is_resumed_by_a_saver_opened_again(url: str) -> None:
    with JournalSaver.from_conn_string(url) as saver:
        first = approval_graph(saver).invoke({"steps": []}, config("order-42"))
        assert first["steps"] == ["prepared"]
        assert [i.value for i in first["__interrupt__"]] == [{"question": "ship order 42?"}]
    with JournalSaver.from_conn_string(url) as again:
        graph = approval_graph(again)
        waiting = graph.get_state(config("order-42"))
        assert waiting.next == ("approve",)
        assert [i.value for i in waiting.interrupts] == [{"question": "ship order 42?"}]
        done = graph.invoke(Command(resume="yes"), config("order-42"))
        assert done["steps"] == ["prepared", "answer: yes", "shipped"]
        assert graph.get_state(config("order-42")).next == ()
        assert again.journal.verify().ok


def test_the_async_saver_runs_a_graph_over_an_async_journal(tmp_path: Path) -> None:
    async def run() -> None:
        journal = await AsyncJournal.open(str(tmp_path / "agent.db"))
        try:
            saver = AsyncJournalSaver(journal)
            graph = approval_graph(saver)
            await graph.ainvoke({"steps": []}, config("a"))
            done = await graph.ainvoke(Command(resume="no"), config("a"))
            assert done["steps"] == ["prepared", "answer: no", "shipped"]
            await chat_graph(saver, [AIMessage("hi")]).ainvoke(
                {"messages": [HumanMessage("hello")]}, config("b")
            )
            threads = {t.config["configurable"]["thread_id"] async for t in saver.alist(None)}
            assert threads == {"a", "b"}
            assert [m.content for m in await journal.messages("b")] == ["hello", "hi"]
        finally:
            await journal.close()

    asyncio.run(run())


# -- time travel ------------------------------------------------------------------------------


class Counter(TypedDict):
    seen: Annotated[list[int], operator.add]


def counter_graph(saver: Any) -> CompiledStateGraph[Any]:
    def step(state: Counter) -> dict[str, Any]:
        return {"seen": [len(state["seen"])]}

    builder = StateGraph(Counter)
    builder.add_node("step", step)
    builder.add_edge(START, "step")
    return builder.compile(checkpointer=saver)


def test_time_travel_history_update_state_and_a_run_from_an_old_checkpoint(url: str) -> None:
    with JournalSaver.from_conn_string(url) as saver:
        graph = counter_graph(saver)
        for _ in range(3):
            graph.invoke({"seen": []}, config("t"))
        assert graph.get_state(config("t")).values["seen"] == [0, 1, 2]
        history = list(graph.get_state_history(config("t")))
        assert [s.values.get("seen") for s in history][:3] == [[0, 1, 2], [0, 1], [0, 1]]
        assert [s.metadata["step"] for s in history] == sorted(
            (s.metadata["step"] for s in history), reverse=True
        )
        old = next(s for s in history if s.values.get("seen") == [0] and s.next == ())
        # A run from an old checkpoint forks the thread there.
        branch = graph.invoke({"seen": []}, old.config)
        assert branch["seen"] == [0, 1]
        assert graph.get_state(config("t")).values["seen"] == [0, 1]
        # update_state on an old checkpoint adds a checkpoint whose parent is that one.
        updated = graph.update_state(old.config, {"seen": [99]})
        assert graph.get_state(updated).values["seen"] == [0, 99]
        assert graph.get_state(updated).parent_config == old.config
        latest = list(graph.get_state_history(config("t")))
        assert len(latest) == len(history) + 4  # the run's three checkpoints, the update's one
        assert {s.config["configurable"]["checkpoint_id"] for s in history} <= {
            s.config["configurable"]["checkpoint_id"] for s in latest
        }
        assert saver.journal.verify().ok


def time_travel(saver: Any) -> list[tuple[Any, ...]]:
    """A script of runs, a run from an old checkpoint and an update; the history it leaves."""
    graph = counter_graph(saver)
    for _ in range(3):
        graph.invoke({"seen": []}, config("t"))
    history = list(graph.get_state_history(config("t")))
    old = history[4]
    graph.invoke({"seen": []}, old.config)
    graph.update_state(history[2].config, {"seen": [99]})
    graph.invoke(None, config("t"))
    return [
        (s.values, s.next, s.metadata["step"], s.metadata["source"], len(s.tasks))
        for s in graph.get_state_history(config("t"))
    ]


def test_time_travel_leaves_the_history_langgraphs_own_saver_leaves(url: str) -> None:
    with JournalSaver.from_conn_string(url) as saver:
        ours = time_travel(saver)
    assert ours == time_travel(InMemorySaver())


def test_copy_thread_is_a_journal_fork_and_delete_thread_purges_both(url: str) -> None:
    with JournalSaver.from_conn_string(url) as saver:
        graph = counter_graph(saver)
        for _ in range(2):
            graph.invoke({"seen": []}, config("source"))
        saver.copy_thread("source", "copy")
        journal = saver.journal
        home = journal.get_session("copy")
        fork = journal.get_session(home.metadata["langgraph_session"])
        assert fork.forked_from == "source"
        assert graph.get_state(config("copy")).values == graph.get_state(config("source")).values
        graph.invoke({"seen": []}, config("copy"))
        assert graph.get_state(config("copy")).values["seen"] == [0, 1, 2]
        assert graph.get_state(config("source")).values["seen"] == [0, 1]
        with pytest.raises(Conflict):
            saver.copy_thread("source", "copy")
        threads = {t.config["configurable"]["thread_id"] for t in saver.list(None)}
        assert threads == {"source", "copy"}
        saver.delete_thread("copy")
        assert saver.get_tuple(config("copy")) is None
        ids = {s.session_id for s in journal.sessions(status="all")}
        assert ids == {"source"}
        assert journal.verify().ok


def test_prune_keep_latest_hides_older_checkpoints_and_delete_purges(tmp_path: Path) -> None:
    with JournalSaver.from_conn_string(str(tmp_path / "agent.db")) as saver:
        graph = counter_graph(saver)
        for _ in range(3):
            graph.invoke({"seen": []}, config("t"))
        before = saver.journal.get_session("t").event_count
        saver.prune(["t"], strategy="keep_latest")
        kept = list(saver.list(config("t")))
        assert len(kept) == 1
        assert kept[0].checkpoint["channel_values"]["seen"] == [0, 1, 2]
        assert graph.invoke({"seen": []}, config("t"))["seen"] == [0, 1, 2, 3]
        assert saver.journal.get_session("t").event_count > before, "the journal kept them"
        saver.prune(["t"], strategy="delete")
        assert list(saver.list(config("t"))) == []
        assert saver.journal.sessions(status="all") == []
        with pytest.raises(InvalidArgument):
            saver.prune(["t"], strategy="keep_none")


# -- ids and bad input ------------------------------------------------------------------------


def test_a_thread_id_that_is_not_a_session_id_gets_a_hashed_session(tmp_path: Path) -> None:
    with JournalSaver.from_conn_string(str(tmp_path / "agent.db")) as saver:
        graph = counter_graph(saver)
        graph.invoke({"seen": []}, config("user 42 / 订单"))
        session_id = session_id_for("user 42 / 订单")
        assert session_id.startswith("lg-")
        assert saver.journal.get_session(session_id).metadata["thread_id"] == "user 42 / 订单"
        assert graph.get_state(config("user 42 / 订单")).values["seen"] == [0]
        assert session_id_for("user-42") == "user-42"


def test_bad_input_is_refused_with_nothing_written(tmp_path: Path) -> None:
    with JournalSaver.from_conn_string(str(tmp_path / "agent.db")) as saver:
        graph = counter_graph(saver)
        graph.invoke({"seen": []}, config("t"))
        journal = saver.journal
        last = journal.get_session("t").last_seq
        with pytest.raises(InvalidArgument):
            saver.put_writes(config("t"), [("seen", [1])], "task")  # no checkpoint_id
        with pytest.raises(InvalidArgument):
            saver.get_tuple({"configurable": {}})
        latest = saver.get_tuple(config("t"))
        assert latest is not None
        huge = {**latest.checkpoint, "id": "1f1ef159-0000-6000-8000-000000000000"}
        huge["channel_values"] = {"seen": list(range(300_000))}
        with pytest.raises(PayloadTooLarge):  # over the journal's 1 MiB limit for one event
            saver.put(latest.config, huge, latest.metadata, {"seen": "99"})
        with pytest.raises(PayloadTooLarge):
            saver.put_writes(latest.config, [("seen", list(range(300_000)))], "task")
        assert journal.get_session("t").last_seq == last
        journal.create_session("taken", session_id="taken")
        with pytest.raises(Conflict):
            graph.invoke({"seen": []}, config("taken"))
        with pytest.raises(InvalidArgument):
            JournalSaver(AsyncJournal(journal))  # type: ignore[arg-type]
        with pytest.raises(InvalidArgument):
            AsyncJournalSaver(journal)  # type: ignore[arg-type]
        assert journal.verify().ok


def test_a_journal_handed_in_stays_open(tmp_path: Path) -> None:
    with Journal.open(str(tmp_path / "agent.db")) as journal:
        saver = JournalSaver(journal)
        counter_graph(saver).invoke({"seen": []}, config("t"))
        saver.close()
        assert journal.get_session("t").event_count > 1


def test_a_compiled_graph_reads_with_the_serde_langgraph_gave_it(tmp_path: Path) -> None:
    serde = JsonPlusSerializer(allowed_msgpack_modules=[("decimal", "Decimal")])
    with JournalSaver.from_conn_string(str(tmp_path / "agent.db"), serde=serde) as saver:
        clone = saver.with_allowlist([("collections", "OrderedDict")])
        assert isinstance(clone, JournalSaver)
        assert clone is not saver
        assert clone.store.serde is clone.serde
        assert saver.store.serde is saver.serde
        counter_graph(saver).invoke({"seen": []}, config("t"))
        assert clone.get_tuple(config("t")) is not None


class Notes(TypedDict):
    notes: Annotated[list[str], operator.add]


def notes_graph(saver: Any) -> CompiledStateGraph[Any]:
    def note(state: Notes) -> dict[str, Any]:
        return {"notes": [f"{len(state['notes'])}:" + "x" * 1000]}

    builder = StateGraph(Notes)
    builder.add_node("note", note)
    builder.add_edge(START, "note")
    return builder.compile(checkpointer=saver)


@pytest.mark.parametrize("limit", [1024 * 1024, 40_000])
def test_a_list_that_outgrows_an_event_goes_on_as_extensions(tmp_path: Path, limit: int) -> None:
    """Every 64 extensions the whole list is stored again while it fits a quarter of an event;
    past that it goes on as extensions (never `PayloadTooLarge`), and reads back whole, also in
    a process that has to follow the whole chain."""
    path = str(tmp_path / "agent.db")
    with Journal.open(path, max_payload_bytes=limit) as journal:
        graph = notes_graph(JournalSaver(journal))
        for _ in range(80):
            graph.invoke({"notes": []}, config("t"))
        blobs = [
            e.payload
            for e in journal.events("t", limit=10_000)
            if e.type == LANGGRAPH_BLOB and e.payload["channel"] == "notes"
        ]
        whole = [b for b in blobs if "base" not in b]
        assert max(b.get("depth", 0) for b in blobs) == (64 if limit > 40_000 else len(blobs) - 1)
        assert len(whole) == (3 if limit > 40_000 else 1)
    with Journal.open(path, max_payload_bytes=limit) as journal:
        notes = notes_graph(JournalSaver(journal)).get_state(config("t")).values["notes"]
        assert [n.split(":")[0] for n in notes] == [str(i) for i in range(80)]


def test_a_thread_deleted_by_another_saver_starts_again(url: str) -> None:
    with JournalSaver.from_conn_string(url) as saver, JournalSaver.from_conn_string(url) as other:
        graph = counter_graph(saver)
        graph.invoke({"seen": []}, config("t"))
        graph.invoke({"seen": []}, config("t"))
        other.delete_thread("t")
        assert saver.get_tuple(config("t")) is None
        assert graph.invoke({"seen": []}, config("t"))["seen"] == [0]
        graph.invoke({"seen": []}, config("t"))
        other.delete_thread("t")
        assert graph.invoke({"seen": []}, config("t"))["seen"] == [0]  # without a read first
        assert counter_graph(other).get_state(config("t")).values["seen"] == [0]
        assert saver.journal.verify().ok


def subgraph_graph(saver: Any) -> CompiledStateGraph[Any]:
    def inner(state: MessagesState) -> dict[str, Any]:
        return {"messages": [AIMessage(f"inner saw {len(state['messages'])}")]}

    sub = StateGraph(MessagesState)
    sub.add_node("inner", inner)
    sub.add_edge(START, "inner")

    def outer(state: MessagesState) -> dict[str, Any]:
        return {"messages": [AIMessage("outer done")]}

    builder = StateGraph(MessagesState)
    builder.add_node("sub", sub.compile())
    builder.add_node("outer", outer)
    builder.add_edge(START, "sub")
    builder.add_edge("sub", "outer")
    return builder.compile(checkpointer=saver)


def test_a_subgraph_checkpoints_in_the_threads_session_under_its_namespace(url: str) -> None:
    with JournalSaver.from_conn_string(url) as saver:
        graph = subgraph_graph(saver)
        out = graph.invoke({"messages": [HumanMessage("hi")]}, config("t"))
        assert [m.content for m in out["messages"]] == ["hi", "inner saw 1", "outer done"]
        namespaces = {t.config["configurable"]["checkpoint_ns"] for t in saver.list(config("t"))}
        assert "" in namespaces
        assert any(ns.startswith("sub:") for ns in namespaces)
        assert saver.journal.sessions() == [saver.journal.get_session("t")]
        # the conversation is the root graph's messages, each once
        assert [m.content for m in saver.journal.messages("t")] == [
            "hi",
            "inner saw 1",
            "outer done",
        ]
        saver.delete_thread("t")
        assert list(saver.list(None)) == []


def test_concurrent_graphs_on_an_async_saver_keep_their_threads_apart(url: str) -> None:
    async def run() -> None:
        async with AsyncJournalSaver.from_conn_string(url) as saver:
            graph = counter_graph(saver)

            async def thread(name: str) -> list[int]:
                out: dict[str, Any] = {}
                for _ in range(5):
                    out = await graph.ainvoke({"seen": []}, config(name))
                return list(out["seen"])

            results = await asyncio.gather(*(thread(f"t{i}") for i in range(8)))
            assert results == [[0, 1, 2, 3, 4]] * 8
            listed = {t.config["configurable"]["thread_id"] async for t in saver.alist(None)}
            assert listed == {f"t{i}" for i in range(8)}
            assert (await asyncio.to_thread(saver.journal.verify)).ok

    asyncio.run(run())


def test_a_checkpoint_older_than_what_the_saver_remembers_is_read_again(tmp_path: Path) -> None:
    with JournalSaver.from_conn_string(str(tmp_path / "agent.db")) as saver:
        graph = counter_graph(saver)
        for _ in range(100):  # 300 checkpoints: more than a thread's remembered 256
            graph.invoke({"seen": []}, config("t"))
        oldest = list(graph.get_state_history(config("t")))[-3]
        assert oldest.values["seen"] == [0]
        assert graph.get_state(oldest.config).values["seen"] == [0]
        assert graph.invoke({"seen": []}, oldest.config)["seen"] == [0, 1]
        assert len(graph.get_state(config("t")).values["seen"]) == 2


def test_the_cli_shows_a_thread_as_a_chat_with_one_line_per_checkpoint_event(
    tmp_path: Path,
) -> None:
    from typer.testing import CliRunner

    from agentjournal.cli import app

    path = str(tmp_path / "agent.db")
    with JournalSaver.from_conn_string(path) as saver:
        run_chat(saver)
        blob = next(
            e.payload["value"]["data"]
            for e in saver.journal.events("user-42", limit=1000)
            if e.type == LANGGRAPH_BLOB and e.payload["channel"] == "messages"
        )
    done = CliRunner().invoke(app, ["show", "user-42", "--all", "--db", path])  # 64 events
    assert done.exit_code == 0, done.output
    assert "帮我查一下订单数量" in done.output
    assert "query_order_count {}  [call_1]" in done.output
    assert "langgraph.checkpoint checkpoint" in done.output
    assert "messages = msgpack of" in done.output
    assert blob[:40] not in done.output, "no serialised bytes in the timeline"
