"""Two tenants of one journal use the same session and thread ids through the integrations.

Framework users choose these ids themselves (an Agents SDK session "user-42", a LangGraph thread
"1"), so two customers of one service routinely pick the same one: each must get a conversation
of its own, and nothing either does may reach, block or reveal the other's.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("agents")
pytest.importorskip("langgraph")

from langchain_core.language_models.fake_chat_models import (
    GenericFakeChatModel,
)
from langchain_core.messages import AIMessage, HumanMessage
from langgraph.graph import START, MessagesState, StateGraph

from agentjournal import Journal
from agentjournal.integrations.langgraph import JournalSaver
from agentjournal.integrations.openai_agents import JournalSession


def test_agents_sdk_sessions_of_one_id_in_two_tenants_are_two_conversations(
    tmp_path: Path,
) -> None:
    async def run(journal: Journal) -> None:
        a = JournalSession("user-42", journal.for_tenant("a"))
        b = JournalSession("user-42", journal.for_tenant("b"))
        await a.add_items([{"role": "user", "content": "a: hello"}])
        await b.add_items([{"role": "user", "content": "b: hello"}])
        await a.add_items([{"role": "assistant", "content": "a: hi"}])
        assert await a.get_items() == [
            {"role": "user", "content": "a: hello"},
            {"role": "assistant", "content": "a: hi"},
        ]
        assert await b.get_items() == [{"role": "user", "content": "b: hello"}]
        assert await b.pop_item() == {"role": "user", "content": "b: hello"}
        await b.clear_session()
        assert len(await a.get_items()) == 2
        assert await b.get_items() == []

    with Journal.open(str(tmp_path / "agent.db")) as journal:
        asyncio.run(run(journal))
        assert journal.for_tenant("a").verify().ok
        assert journal.for_tenant("b").verify().ok


def echo_graph(saver: JournalSaver, reply: str) -> Any:
    model = GenericFakeChatModel(messages=(AIMessage(reply) for _ in range(4)))

    def chatbot(state: MessagesState) -> dict[str, Any]:
        return {"messages": [model.invoke(state["messages"])]}

    builder = StateGraph(MessagesState)
    builder.add_node("chatbot", chatbot)
    builder.add_edge(START, "chatbot")
    return builder.compile(checkpointer=saver)


def test_langgraph_threads_of_one_id_in_two_tenants_are_two_threads(tmp_path: Path) -> None:
    with Journal.open(str(tmp_path / "agent.db")) as journal:
        saver_a = JournalSaver(journal.for_tenant("a"))
        saver_b = JournalSaver(journal.for_tenant("b"))
        graph_a, graph_b = echo_graph(saver_a, "a says hi"), echo_graph(saver_b, "b says hi")
        config = {"configurable": {"thread_id": "1"}}
        graph_a.invoke({"messages": [HumanMessage("a: hello")]}, config)
        graph_b.invoke({"messages": [HumanMessage("b: hello")]}, config)
        graph_a.invoke({"messages": [HumanMessage("a: again")]}, config)

        def texts(graph: Any) -> list[str]:
            return [m.content for m in graph.get_state(config).values["messages"]]

        assert texts(graph_a) == ["a: hello", "a says hi", "a: again", "a says hi"]
        assert texts(graph_b) == ["b: hello", "b says hi"]
        assert len(list(saver_b.list(config))) < len(list(saver_a.list(config)))
        saver_b.delete_thread("1")
        assert saver_b.get_tuple(config) is None
        assert texts(graph_a) == ["a: hello", "a says hi", "a: again", "a says hi"]
        assert journal.for_tenant("a").verify().ok
