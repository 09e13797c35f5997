"""Sessions written by the integrations, exported to the real OTLP/HTTP receiver on every
backend: an OpenAI Agents SDK run through `JournalSession` (the SDK's own scripted model) and a
LangGraph chat graph with a tool node through `JournalSaver`. Their messages are the journal's own
message and tool events, so they map as the runtime's do; LangGraph's checkpoint events make no
span."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("agents")
pytest.importorskip("langgraph")

from agents import Agent, RunConfig, Runner, function_tool
from agents.testing import ScriptedModel, assistant_message, function_call
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, HumanMessage
from langchain_core.tools import tool
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.semconv._incubating.attributes import gen_ai_attributes as gen_ai

from agentjournal import Journal
from agentjournal.integrations.langgraph import JournalSaver
from agentjournal.integrations.openai_agents import JournalSession
from agentjournal.otel.exporter import FeedExporter
from helpers.otlp_receiver import Received, Receiver, otlp_receiver

NS = 1_000_000


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    with otlp_receiver() as running:
        yield running


def export(journal: Journal, receiver: Receiver) -> list[Received]:
    exporter = OTLPSpanExporter(endpoint=receiver.url, timeout=5)
    try:
        FeedExporter(journal, exporter).run()
    finally:
        exporter.shutdown()
    unique = receiver.unique()
    assert len(unique) == len(receiver.spans)
    return sorted(unique.values(), key=lambda s: (s.attributes["agentjournal.seq"], s.name))


def tree(spans: list[Received]) -> list[tuple[str, str]]:
    """(name, parent's name) of each span, in seq order."""
    names = {s.span_id: s.name for s in spans}
    return [(s.name, names.get(s.parent_id, "")) for s in spans]


@function_tool
def query_order_count(customer: str) -> str:
    """How many orders a customer has."""
    return {"A-1": "2", "B-2": "40"}.get(customer, "0")


def test_an_agents_sdk_run_through_journal_session(journal: Journal, receiver: Receiver) -> None:
    model = ScriptedModel(
        [
            [
                function_call("query_order_count", {"customer": "A-1"}, call_id="call_a"),
                function_call("query_order_count", {"customer": "B-2"}, call_id="call_b"),
            ],
            [assistant_message("42 in all.", item_id="msg_1")],
            [assistant_message("You're welcome.", item_id="msg_2")],
        ]
    )
    agent = Agent(name="orders", instructions="Answer.", model=model, tools=[query_order_count])
    session = JournalSession("sdk-1", journal)

    untraced = RunConfig(tracing_disabled=True)  # the SDK's own tracing is not under test

    async def converse() -> None:
        for question in ("How many orders?", "Thanks"):
            await Runner.run(agent, question, session=session, run_config=untraced)

    asyncio.run(converse())
    spans = export(journal, receiver)
    assert tree(spans) == [
        ("invoke_agent", ""),
        ("chat", "invoke_agent"),
        ("execute_tool query_order_count", "invoke_agent"),
        ("execute_tool query_order_count", "invoke_agent"),
        ("chat", "invoke_agent"),
        ("invoke_agent", ""),
        ("chat", "invoke_agent"),
    ]
    events = {e.seq: e for e in journal.events("sdk-1", limit=100)}
    calls = [s for s in spans if s.name.startswith("execute_tool")]
    assert [s.attributes[gen_ai.GEN_AI_TOOL_CALL_ID] for s in calls] == ["call_a", "call_b"]
    for span in calls:
        call, result = (
            events[span.attributes["agentjournal.seq"]],
            events[span.attributes["agentjournal.result_seq"]],
        )
        assert (span.start_ns, span.end_ns) == (call.created_at * NS, result.created_at * NS)
    assert {s.attributes[gen_ai.GEN_AI_CONVERSATION_ID] for s in spans} == {"sdk-1"}
    assert len({s.trace_id for s in spans}) == 2


@tool
def count_orders() -> str:
    """How many orders the user has."""
    return "42"


def test_a_langgraph_chat_with_a_tool_node(journal: Journal, receiver: Receiver) -> None:
    usage = {"input_tokens": 50, "output_tokens": 7, "total_tokens": 57}
    replies = [
        AIMessage(
            "",
            tool_calls=[{"id": "call_1", "name": "count_orders", "args": {}}],
            usage_metadata=usage,
            response_metadata={"model_name": "fake-1"},
        ),
        AIMessage("You have 42 orders.", usage_metadata=usage),
    ]
    model = GenericFakeChatModel(messages=iter(replies))

    def chatbot(state: MessagesState) -> dict[str, Any]:
        return {"messages": [model.invoke(state["messages"])]}

    builder = StateGraph(MessagesState)
    builder.add_node("chatbot", chatbot)
    builder.add_node("tools", ToolNode([count_orders]))
    builder.add_edge(START, "chatbot")
    builder.add_conditional_edges("chatbot", tools_condition)
    builder.add_edge("tools", "chatbot")
    graph = builder.compile(checkpointer=JournalSaver(journal))
    config: Any = {"configurable": {"thread_id": "lg-1"}}
    graph.invoke({"messages": [HumanMessage("How many orders?")]}, config)
    spans = export(journal, receiver)
    assert tree(spans) == [
        ("invoke_agent", ""),
        ("chat", "invoke_agent"),
        ("execute_tool count_orders", "invoke_agent"),
        ("chat", "invoke_agent"),
    ]
    first_chat, last_chat = spans[1], spans[3]
    assert first_chat.attributes[gen_ai.GEN_AI_USAGE_INPUT_TOKENS] == 50
    assert first_chat.attributes[gen_ai.GEN_AI_RESPONSE_MODEL] == "fake-1"
    assert last_chat.attributes[gen_ai.GEN_AI_USAGE_OUTPUT_TOKENS] == 7
    assert spans[0].attributes[gen_ai.GEN_AI_USAGE_INPUT_TOKENS] == 100
