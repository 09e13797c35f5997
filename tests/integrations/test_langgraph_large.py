"""A `messages` list larger than one journal event, edited other than by appending: LangGraph's
`add_messages` replacing a message by id (`update_state`), a `RemoveMessage` trim. The whole list
is stored as a chain of blobs in the checkpoint's own batch and reads back exactly, also after a
reopen, on SQLite files and PostgreSQL."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("langgraph")

from langchain_core.messages import AIMessage, AnyMessage, HumanMessage, RemoveMessage
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.graph.state import CompiledStateGraph

from agentjournal import AsyncJournal, Journal, PayloadTooLarge
from agentjournal.events import LANGGRAPH_BLOB, LANGGRAPH_CHECKPOINT
from agentjournal.integrations.langgraph import AsyncJournalSaver, JournalSaver
from postgres_fixtures import POOL_RANDOM, fresh_schema, url_for

pytestmark = POOL_RANDOM  # see postgres_fixtures.POOL_RANDOM

LIMIT = 64_000  # the journal's payload limit: some 45 of these messages fill one event


@pytest.fixture(params=["sqlite", "postgres", "postgres-pooler"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield str(tmp_path / "agent.db")
    else:
        options = {"pooler": "transaction"} if request.param == "postgres-pooler" else {}
        with fresh_schema("lgl") as schema:
            yield url_for(schema, **options)


def config(thread_id: str) -> RunnableConfig:
    return {"configurable": {"thread_id": thread_id}}


def chat_graph(saver: Any) -> CompiledStateGraph[Any]:
    def reply(state: MessagesState) -> dict[str, Any]:
        n = len(state["messages"])
        return {"messages": [AIMessage(id=f"a{n}", content=f"{n}:" + "y" * 1000)]}

    builder = StateGraph(MessagesState)
    builder.add_node("reply", reply)
    builder.add_edge(START, "reply")
    return builder.compile(checkpointer=saver)


def grow(graph: CompiledStateGraph[Any], turns: int, *, start: int = 0) -> None:
    for turn in range(start, start + turns):
        human = HumanMessage(id=f"h{turn}", content=f"{turn}:" + "x" * 1000)
        graph.invoke({"messages": [human]}, config("t"))


def shape(messages: list[AnyMessage]) -> list[tuple[str, str, Any]]:
    return [(type(m).__name__, str(m.id), m.content) for m in messages]


def chains(journal: Journal, thread_id: str = "t") -> list[list[int]]:
    """Per checkpoint, the seqs of the messages blobs its own batch chained together."""
    events = journal.events(thread_id, limit=10_000)
    found: list[list[int]] = []
    batch: list[int] = []
    for event in events:
        if event.type == LANGGRAPH_BLOB and event.payload["channel"] == "messages":
            base = event.payload.get("base")
            if base is not None and base in batch:
                batch.append(event.seq)
            else:
                batch = [event.seq]
        elif event.type == LANGGRAPH_CHECKPOINT:
            if len(batch) > 1:
                found.append(batch)
            batch = []
    return found


def test_replacing_a_message_of_a_list_larger_than_an_event(url: str) -> None:
    with Journal.open(url, max_payload_bytes=LIMIT) as journal:
        graph = chat_graph(JournalSaver(journal))
        grow(graph, 30)
        before = graph.get_state(config("t")).values["messages"]
        assert len(before) == 60
        assert not chains(journal)  # grown by extensions only

        edited = AIMessage(id="a3", content="edited")
        graph.update_state(config("t"), {"messages": [edited]})
        expected = [edited if m.id == "a3" else m for m in before]
        assert shape(graph.get_state(config("t")).values["messages"]) == shape(expected)
        [chain] = chains(journal)
        assert len(chain) >= 2  # the whole list did not fit one event

        links = {e.seq: e.payload for e in journal.events("t", after=chain[0] - 1, limit=100)}
        assert "base" not in links[chain[0]]
        assert [links[seq]["depth"] for seq in chain[1:]] == list(range(1, len(chain)))

        grow(graph, 1, start=30)  # and the thread goes on, extending the chain's end
        later = journal.events("t", after=chain[-1], limit=100)
        extended = [e.payload for e in later if e.type == LANGGRAPH_BLOB]
        first = next(b for b in extended if b["channel"] == "messages")
        assert (first["base"], first["depth"]) == (chain[-1], len(chain))
        after = graph.get_state(config("t")).values["messages"]
        assert shape(after[:60]) == shape(expected)
        assert len(after) == 62
        assert journal.verify().ok

    with Journal.open(url, max_payload_bytes=LIMIT) as journal:  # a new saver reads it all
        again = chat_graph(JournalSaver(journal)).get_state(config("t")).values["messages"]
        assert shape(again) == shape(after)


def test_a_remove_message_trim_of_a_list_larger_than_an_event(url: str) -> None:
    with Journal.open(url, max_payload_bytes=LIMIT) as journal:
        graph = chat_graph(JournalSaver(journal))
        grow(graph, 30)
        before = graph.get_state(config("t")).values["messages"]
        graph.update_state(config("t"), {"messages": [RemoveMessage(id=m.id) for m in before[:4]]})
        assert shape(graph.get_state(config("t")).values["messages"]) == shape(before[4:])
        assert chains(journal)
        history = list(graph.get_state_history(config("t")))
        assert shape(history[1].values["messages"]) == shape(before)  # the parent is intact

    with Journal.open(url, max_payload_bytes=LIMIT) as journal:
        again = chat_graph(JournalSaver(journal)).get_state(config("t")).values["messages"]
        assert shape(again) == shape(before[4:])


def test_a_large_first_checkpoint_is_stored_as_a_chain(tmp_path: Path) -> None:
    """The thread's first put, a list larger than one event: checked before the session exists
    (its chain's placeholder bases included), then stored."""
    humans = [HumanMessage(id=f"h{n}", content=f"{n}:" + "x" * 1000) for n in range(60)]
    checkpoint = empty_checkpoint()
    checkpoint["channel_values"] = {"messages": humans}
    checkpoint["channel_versions"] = {"messages": 1}
    target: RunnableConfig = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
    with Journal.open(str(tmp_path / "agent.db"), max_payload_bytes=LIMIT) as journal:
        saver = JournalSaver(journal)
        saver.put(target, checkpoint, {}, {"messages": 1})
        assert chains(journal)
    with Journal.open(str(tmp_path / "agent.db"), max_payload_bytes=LIMIT) as journal:
        stored = JournalSaver(journal).get_tuple(config("t"))
        assert stored is not None
        assert shape(stored.checkpoint["channel_values"]["messages"]) == shape(humans)


def test_a_chain_appended_while_another_append_gets_in_first(tmp_path: Path) -> None:
    """A chain's bases are seqs in its own batch, appended with `expected_seq`: an append by
    someone else in between makes the put read the session's last seq again."""
    path = str(tmp_path / "agent.db")
    with Journal.open(path, max_payload_bytes=LIMIT) as journal:
        graph = chat_graph(JournalSaver(journal))
        grow(graph, 30)
        before = graph.get_state(config("t")).values["messages"]
        real = journal.get_session
        raced: list[int] = []

        def get_session(session_id: str) -> Any:
            session = real(session_id)
            if not raced:
                raced.append(journal.append(session_id, "test.note", {}).seq)
            return session

        journal.get_session = get_session  # type: ignore[method-assign]
        graph.update_state(config("t"), {"messages": [RemoveMessage(id="h0")]})
        del journal.get_session
        assert raced
        assert shape(graph.get_state(config("t")).values["messages"]) == shape(before[1:])
        [chain] = chains(journal)
        assert chain[0] > raced[0]
        assert journal.verify().ok


def test_the_async_saver_stores_a_large_edit(tmp_path: Path) -> None:
    async def run() -> None:
        journal = await AsyncJournal.open(str(tmp_path / "agent.db"), max_payload_bytes=LIMIT)
        try:
            graph = chat_graph(AsyncJournalSaver(journal))
            for turn in range(30):
                human = HumanMessage(id=f"h{turn}", content=f"{turn}:" + "x" * 1000)
                await graph.ainvoke({"messages": [human]}, config("t"))
            before = (await graph.aget_state(config("t"))).values["messages"]
            edited = AIMessage(id="a1", content="edited")
            await graph.aupdate_state(config("t"), {"messages": [edited]})
            after = (await graph.aget_state(config("t"))).values["messages"]
            assert shape(after) == shape([edited if m.id == "a1" else m for m in before])
        finally:
            await journal.close()

    asyncio.run(run())


def test_a_value_too_large_that_is_no_list_is_still_refused(tmp_path: Path) -> None:
    """Only lists are chained: any other value larger than one event is `PayloadTooLarge`."""
    from typing import TypedDict

    class Big(TypedDict):
        blob: str

    def node(state: Big) -> dict[str, Any]:
        return {"blob": "z" * LIMIT}

    builder = StateGraph(Big)
    builder.add_node("node", node)
    builder.add_edge(START, "node")
    with Journal.open(str(tmp_path / "agent.db"), max_payload_bytes=LIMIT) as journal:
        graph = builder.compile(checkpointer=JournalSaver(journal))
        with pytest.raises(PayloadTooLarge):
            graph.invoke({"blob": ""}, config("t"))
