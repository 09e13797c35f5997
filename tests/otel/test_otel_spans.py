"""The pure half of the exporter: events folded into turns and tasks, turns mapped to GenAI spans
with ids derived from the journal. Events are built by hand here; tests/otel/test_otel_export.py
checks the same mapping on journals written by the runtime and the integrations."""

from __future__ import annotations

import json
from typing import Any

from opentelemetry.semconv._incubating.attributes import gen_ai_attributes as gen_ai

from agentjournal.events import Event
from agentjournal.otel.spans import SessionInfo, SpanRecord, span_id, task_span, trace_id
from agentjournal.otel.spans import turn_spans as spans_of
from agentjournal.otel.turns import FinishedTask, SessionFold, Turn, steps_of

INFO = SessionInfo("acme", "s1", model="gpt-test", agent="orders", system_prompt="be brief")


class Script:
    """Events of one session, numbered as the journal numbers them (seq 1 is session_created)."""

    def __init__(self, session_id: str = "s1") -> None:
        self.session_id = session_id
        self.events: list[Event] = [self._event(1, "session_created", {"title": ""})]

    def _event(self, seq: int, type_: str, payload: dict[str, Any]) -> Event:
        return Event(seq, self.session_id, seq, type_, payload, 1_000 + 10 * seq, None, str(seq))

    def add(self, type_: str, **payload: Any) -> Event:
        event = self._event(len(self.events) + 1, type_, payload)
        self.events.append(event)
        return event


def tool_turn() -> Script:
    """A runtime turn: the reply's text and two calls in one commit, a result each (the second
    an error), then the final reply with the turn's usage."""
    s = Script()
    s.add("user_message", content="how many orders?")
    s.add("assistant_message", content="let me look")
    s.add("tool_call", call_id="c1", name="count_orders", arguments="{}")
    s.add("tool_call", call_id="c2", name="refund", arguments='{"order": 7}')
    s.add("tool_result", call_id="c1", content="42")
    s.add("tool_result", call_id="c2", content="error: not allowed", is_error=True)
    s.add(
        "assistant_message",
        content="42 orders",
        usage={"prompt_tokens": 30, "completion_tokens": 5},
    )
    return s


def fold(events: list[Event], *, settle: bool = True) -> list[Any]:
    session = SessionFold("s1")
    done: list[Any] = []
    for event in events:
        done += session.add(event)
    if settle:
        done += session.settle()
    return done


def by_name(spans: list[SpanRecord]) -> dict[str, SpanRecord]:
    return {s.name: s for s in spans}


def test_a_runtime_turn_is_one_invoke_agent_span_over_its_chat_and_tool_spans() -> None:
    s = tool_turn()
    turns = fold(s.events)
    assert len(turns) == 1
    assert isinstance(turns[0], Turn)
    assert turns[0].ended
    spans = spans_of(turns[0], INFO)
    assert [x.name for x in spans] == [
        "invoke_agent orders",
        "chat gpt-test",
        "execute_tool count_orders",
        "execute_tool refund",
        "chat gpt-test",
    ]
    agent, chat1, tool1, tool2, chat2 = spans
    assert agent.parent_id is None
    assert {x.parent_id for x in spans[1:]} == {agent.span_id}
    assert {x.trace_id for x in spans} == {trace_id("acme", "s1", 2)}
    assert len({x.span_id for x in spans}) == 5
    ns = 1_000_000
    # invoke_agent: user message (seq 2) to final reply (seq 8); chat: what it answered to it.
    assert (agent.start_ns, agent.end_ns) == (1_020 * ns, 1_080 * ns)
    assert (chat1.start_ns, chat1.end_ns) == (1_020 * ns, 1_050 * ns)
    assert (tool1.start_ns, tool1.end_ns) == (1_040 * ns, 1_060 * ns)
    assert (tool2.start_ns, tool2.end_ns) == (1_050 * ns, 1_070 * ns)
    assert (chat2.start_ns, chat2.end_ns) == (1_070 * ns, 1_080 * ns)
    assert agent.attributes[gen_ai.GEN_AI_OPERATION_NAME] == "invoke_agent"
    assert agent.attributes[gen_ai.GEN_AI_AGENT_NAME] == "orders"
    assert agent.attributes[gen_ai.GEN_AI_CONVERSATION_ID] == "s1"
    assert chat1.attributes[gen_ai.GEN_AI_OPERATION_NAME] == "chat"
    assert chat1.attributes[gen_ai.GEN_AI_REQUEST_MODEL] == "gpt-test"
    assert chat1.attributes[gen_ai.GEN_AI_RESPONSE_FINISH_REASONS] == ("tool_call",)
    assert chat2.attributes[gen_ai.GEN_AI_USAGE_INPUT_TOKENS] == 30
    assert chat2.attributes[gen_ai.GEN_AI_USAGE_OUTPUT_TOKENS] == 5
    assert gen_ai.GEN_AI_USAGE_INPUT_TOKENS not in chat1.attributes
    assert agent.attributes[gen_ai.GEN_AI_USAGE_INPUT_TOKENS] == 30
    assert tool1.attributes[gen_ai.GEN_AI_TOOL_NAME] == "count_orders"
    assert tool1.attributes[gen_ai.GEN_AI_TOOL_CALL_ID] == "c1"
    assert (tool1.status, tool2.status) == ("unset", "error")
    assert tool2.attributes["error.type"] == "tool_error"
    assert agent.status == "unset"


def test_content_only_when_asked() -> None:
    turn = fold(tool_turn().events)[0]
    plain = [json.dumps(x.attributes) for x in spans_of(turn, INFO)]
    assert not any("42 orders" in a or "how many" in a or "not allowed" in a for a in plain)
    assert not any("be brief" in a for a in plain)
    named = by_name(spans_of(turn, INFO, capture_content=True))
    agent = named["invoke_agent orders"].attributes
    assert json.loads(str(agent[gen_ai.GEN_AI_INPUT_MESSAGES])) == [
        {"role": "user", "parts": [{"type": "text", "content": "how many orders?"}]}
    ]
    output = json.loads(str(agent[gen_ai.GEN_AI_OUTPUT_MESSAGES]))
    assert output[0]["parts"][0]["content"] == "42 orders"
    assert "be brief" in str(agent[gen_ai.GEN_AI_SYSTEM_INSTRUCTIONS])
    refund = named["execute_tool refund"].attributes
    assert refund[gen_ai.GEN_AI_TOOL_CALL_ARGUMENTS] == '{"order": 7}'
    assert refund[gen_ai.GEN_AI_TOOL_CALL_RESULT] == "error: not allowed"


def test_ids_are_the_same_for_the_same_turn_and_differ_between_tenants_and_sessions() -> None:
    turn = fold(tool_turn().events)[0]
    first = [(x.trace_id, x.span_id, x.parent_id) for x in spans_of(turn, INFO)]
    again = [(x.trace_id, x.span_id, x.parent_id) for x in spans_of(turn, INFO)]
    assert first == again
    other = SessionInfo("globex", "s1", model="gpt-test", agent="orders")
    assert not {i for t in first for i in t[:2]} & {
        i for x in spans_of(turn, other) for i in (x.trace_id, x.span_id)
    }
    assert trace_id("acme", "s1", 2) != trace_id("acme", "s2", 2)
    assert span_id("acme", "s1", "chat", 3) != span_id("acme", "s1", "execute_tool", 3)
    assert 0 < trace_id("acme", "s1", 2) < 2**128
    assert 0 < span_id("a", "b", "c", 1) < 2**64


def test_a_reply_ends_its_turn_only_once_nothing_follows_it_in_the_same_commit() -> None:
    s = Script()
    s.add("user_message", content="hi")
    s.add("assistant_message", content="checking")
    assert fold(s.events, settle=False) == []  # a call of the same response may follow
    s.add("tool_call", call_id="c1", name="look", arguments="{}")
    s.add("tool_result", call_id="c1", content="ok")
    s.add("assistant_message", content="done")
    assert fold(s.events, settle=False) == []
    s.add("user_message", content="thanks")  # the next turn ends the last one
    s.add("assistant_message", content="bye")
    turns = fold(s.events)
    assert [(t.start_seq, t.events[-1].seq, t.ended) for t in turns] == [(2, 6, True), (7, 8, True)]
    assert [len(steps_of(t)) for t in turns] == [2, 1]


def test_corrections_and_other_events_are_not_steps() -> None:
    s = Script()
    s.add("user_message", content="hi")
    s.add("myapp.note", text="aside")
    s.add("assistant_message", content="hello")
    s.add("assistant_message", content="hello!", supersedes=4)
    (turn,) = fold(s.events)
    assert [e.seq for e in turn.events] == [2, 4]


def test_a_turn_cut_by_a_new_question_or_a_deletion_is_an_error_span() -> None:
    s = Script()
    s.add("user_message", content="hi")
    s.add("tool_call", call_id="c1", name="look", arguments="{}")
    s.add("user_message", content="anyone?")
    s.add("session_updated", status="deleted")
    cut, deleted = fold(s.events)
    assert (cut.ended, deleted.ended) == (False, False)
    agent, _chat, tool = spans_of(cut, INFO)
    assert agent.status == tool.status == "error"
    assert tool.attributes["error.type"] == "no_result"
    assert spans_of(deleted, INFO)[0].status == "error"


def test_a_task_is_a_span_under_the_turn_that_created_it_and_ends_only_for_good() -> None:
    s = Script()
    s.add("user_message", content="start the report")
    s.add("task_created", task_id="t1", type="report", input={}, max_retries=3)
    s.add("task_created", task_id="t0", type="lone", input={}, max_retries=3)
    s.add("assistant_message", content="started")
    s.add("task_created", task_id="t2", type="chart", input={}, parent_task_id="t1", max_retries=3)
    s.add("task_started", task_id="t1", attempt=1)
    s.add("task_failed", task_id="t1", attempt=1, error="boom", retry=True, retry_count=1)
    s.add("task_completed", task_id="t2", attempt=1, output=None)
    s.add("task_completed", task_id="t1", attempt=2, output={"pages": 3})
    s.add("task_cancelled", task_id="t0")
    done = fold(s.events)
    turns = [d for d in done if isinstance(d, Turn)]
    tasks = [d for d in done if isinstance(d, FinishedTask)]
    assert [t.task.task_id for t in tasks] == ["t2", "t1", "t0"]
    chart, report, lone = (task_span(t, INFO) for t in tasks)
    agent = spans_of(turns[0], INFO)[0]
    assert (report.trace_id, report.parent_id) == (agent.trace_id, agent.span_id)
    assert (chart.trace_id, chart.parent_id) == (agent.trace_id, report.span_id)
    assert lone.trace_id == agent.trace_id  # created while the turn was open
    assert chart.trace_id == agent.trace_id  # after the turn ended, but under its parent task
    assert report.status == "ok"
    assert report.attributes["agentjournal.task.attempt"] == 2
    assert report.start_ns == s.events[2].created_at * 1_000_000
    assert report.end_ns == s.events[9].created_at * 1_000_000
    assert lone.attributes["agentjournal.task.status"] == "cancelled"


def test_a_task_outside_any_turn_has_a_trace_of_its_own() -> None:
    s = Script()
    s.add("task_created", task_id="t1", type="nightly", input={}, max_retries=0)
    s.add("task_failed", task_id="t1", attempt=1, error="boom", retry=False, retry_count=0)
    (task,) = fold(s.events)
    span = task_span(task, INFO)
    assert span.parent_id is None
    assert span.status == "error"
    assert span.trace_id == trace_id("acme", "s1", "task:2")
