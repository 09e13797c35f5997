"""A thread deleted by another process and run anew under the same id: a saver that had the old
one in memory reads the new one, and its puts build on the new one, not on what it remembered.
Two savers on two journals of one database stand for the two processes."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("langgraph")

from langchain_core.messages import AIMessage, HumanMessage
from langgraph.graph import START, MessagesState, StateGraph

from agentjournal import Journal
from agentjournal.integrations.langgraph import JournalSaver
from postgres_fixtures import POOL_RANDOM, fresh_schema, url_for

pytestmark = POOL_RANDOM  # see postgres_fixtures.POOL_RANDOM


@pytest.fixture(params=["sqlite", "postgres"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield str(tmp_path / "agent.db")
    else:
        with fresh_schema("lgreuse") as schema:
            yield url_for(schema)


def echo(saver: JournalSaver) -> Any:
    def reply(state: MessagesState) -> dict[str, Any]:
        return {"messages": [AIMessage("reply to " + state["messages"][-1].content)]}

    builder = StateGraph(MessagesState)
    builder.add_node("reply", reply)
    builder.add_edge(START, "reply")
    return builder.compile(checkpointer=saver)


def texts(graph: Any, config: Any) -> list[str]:
    return [m.content for m in graph.get_state(config).values["messages"]]


def test_a_thread_deleted_and_run_anew_elsewhere_is_read_anew(url: str) -> None:
    config = {"configurable": {"thread_id": "reuse"}}
    with Journal.open(url) as first, Journal.open(url) as second:
        ours, theirs = echo(JournalSaver(first)), echo(JournalSaver(second))
        ours.invoke({"messages": [HumanMessage("OLD conversation")]}, config)
        ours.invoke({"messages": [HumanMessage("OLD again")]}, config)
        assert texts(ours, config)[-1] == "reply to OLD again"

        theirs.checkpointer.delete_thread("reuse")
        theirs.invoke({"messages": [HumanMessage("NEW conversation")]}, config)
        new = ["NEW conversation", "reply to NEW conversation"]
        assert texts(ours, config) == new  # not what this process had in memory

        ours.invoke({"messages": [HumanMessage("NEW again")]}, config)  # builds on the new one
        expected = [*new, "NEW again", "reply to NEW again"]
        assert texts(ours, config) == expected
        assert texts(theirs, config) == expected
        assert first.verify().ok
