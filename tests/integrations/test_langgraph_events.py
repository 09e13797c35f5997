"""The pure part of the LangGraph integration, without a database: LangGraph's pending-writes rules
(first write wins per (task, idx), the last at a negative idx; (task_path, task_id, idx) order),
typed blobs kept byte for byte, which messages a step added, LangChain messages as the journal's
own events, and the shapes `events.prepare` accepts for the `langgraph.*` types."""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("langchain_core")

from langchain_core.messages import (
    AIMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
    message_to_dict,
)

from agentjournal.errors import InvalidEvent
from agentjournal.events import (
    LANGGRAPH_BLOB,
    LANGGRAPH_CHECKPOINT,
    LANGGRAPH_MESSAGE,
    LANGGRAPH_PRUNED,
    LANGGRAPH_WRITES,
    Event,
    prepare,
)
from agentjournal.integrations import langgraph_events as lg


def writes_event(seq: int, task: str, path: str, writes: list[tuple[int, str, bytes]]) -> Event:
    payload = lg.writes_payload(
        "", "cp-1", task, path, [(idx, ch, ("msgpack", data)) for idx, ch, data in writes]
    )
    return Event(seq, "s", seq, LANGGRAPH_WRITES, payload, 0)


def test_pending_writes_first_wins_except_at_a_negative_idx_where_the_last_does() -> None:
    events = [
        writes_event(2, "task-b", "~b", [(0, "x", b"b0"), (1, "y", b"b1")]),
        writes_event(3, "task-a", "~a", [(0, "x", b"a0"), (-1, "__error__", b"e1")]),
        writes_event(4, "task-b", "~b", [(0, "x", b"b0-again"), (-3, "__interrupt__", b"i1")]),
        writes_event(5, "task-a", "~a", [(-1, "__error__", b"e2"), (0, "x", b"a0-again")]),
    ]
    assert lg.pending_writes(events) == [
        ("task-a", "__error__", ("msgpack", b"e2")),
        ("task-a", "x", ("msgpack", b"a0")),
        ("task-b", "__interrupt__", ("msgpack", b"i1")),
        ("task-b", "x", ("msgpack", b"b0")),
        ("task-b", "y", ("msgpack", b"b1")),
    ]


def test_pending_writes_sort_by_task_path_before_task_id() -> None:
    events = [
        writes_event(2, "a-task", "~z", [(0, "x", b"1")]),
        writes_event(3, "z-task", "~a", [(0, "x", b"2")]),
        writes_event(4, "m-task", "", [(0, "x", b"3")]),
    ]
    assert [w[0] for w in lg.pending_writes(events)] == ["m-task", "z-task", "a-task"]


@pytest.mark.parametrize(
    "typed", [("msgpack", b"\x00\xff\x93"), ("json", b'{"a": 1}'), ("empty", b""), ("bytes", b"x")]
)
def test_typed_blobs_come_back_byte_for_byte(typed: tuple[str, bytes]) -> None:
    encoded = lg.encode(typed)
    assert lg.decode(encoded) == typed
    prepare(LANGGRAPH_BLOB, lg.blob_payload("", "ch", "1.5", typed))  # a valid payload


def test_blob_ref_counts_back_from_the_checkpoint_for_its_own_batch() -> None:
    payload = lg.checkpoint_payload(
        "", "cp", None, ("msgpack", b""), ("msgpack", b""), {"a": -2, "b": 7}
    )
    head = Event(10, "s", 10, LANGGRAPH_CHECKPOINT, payload, 0)
    assert (lg.blob_ref(head, "a"), lg.blob_ref(head, "b"), lg.blob_ref(head, "c")) == (8, 7, None)


def test_new_messages_are_the_added_tail_or_those_with_new_ids() -> None:
    a, b, c = HumanMessage("a", id="1"), AIMessage("b", id="2"), HumanMessage("c", id="3")
    assert lg.new_messages(None, [a, b]) == [a, b]
    assert lg.new_messages([a], [a, b, c]) == [b, c]
    assert lg.new_messages([a, b], [a, b]) == []
    # not an extension (a message removed, another added): those whose id is new
    assert lg.new_messages([a, b], [a, c]) == [c]


def as_events(messages: list[Any], **calls: Any) -> list[tuple[str, dict[str, Any]]]:
    originals = [message_to_dict(m) for m in messages]
    events = lg.message_events(
        messages,
        originals,
        used_calls=calls.get("used", set()),
        open_calls=calls.get("open", set()),
    )
    return [(e.type, {k: v for k, v in e.payload.items() if k != "message"}) for e in events]


def test_messages_become_the_journals_own_events() -> None:
    call = {"id": "call_1", "name": "query_order_count", "args": {"month": "11"}}
    messages = [
        SystemMessage("Be brief."),
        HumanMessage("帮我查一下订单数量"),
        AIMessage("Let me look.", tool_calls=[call]),
        ToolMessage("42", tool_call_id="call_1"),
        AIMessage([{"type": "text", "text": "你当前有 "}, {"type": "text", "text": "42 个订单。"}]),
        ToolMessage("late", tool_call_id="call_1"),  # its call has its result already
    ]
    assert as_events(messages) == [
        ("system_message", {"content": "Be brief."}),
        ("user_message", {"content": "帮我查一下订单数量"}),
        ("assistant_message", {"content": "Let me look."}),
        (
            "tool_call",
            {"call_id": "call_1", "name": "query_order_count", "arguments": '{"month": "11"}'},
        ),
        ("tool_result", {"call_id": "call_1", "content": "42"}),
        ("assistant_message", {"content": "你当前有 42 个订单。"}),
        (LANGGRAPH_MESSAGE, {}),
    ]


def test_text_the_journal_cannot_hold_is_shown_as_a_replacement_character() -> None:
    """A tool that returns binary junk (U+0000, a lone surrogate) must not stop the checkpoint,
    which keeps the exact bytes in its blobs; the conversation's events show U+FFFD instead."""
    call = {"id": "c\x00", "name": "read_file", "args": {"path": "a\x00b"}}
    messages = [
        HumanMessage("bin\x00ary \ud83d 文件"),
        AIMessage("", tool_calls=[call]),
        ToolMessage("PK\x03\x04\x00\x00", tool_call_id="c\x00"),
    ]
    originals = [message_to_dict(m) for m in messages]
    events = lg.message_events(messages, originals, used_calls=set(), open_calls=set())
    assert [e.type for e in events] == ["user_message", "tool_call", "tool_result"]
    assert events[0].payload["content"] == "bin\ufffdary \ufffd 文件"
    assert events[0].payload["message"]["data"]["content"] == "bin\ufffdary \ufffd 文件"
    assert events[1].payload["call_id"] == events[2].payload["call_id"] == "c\ufffd"
    assert events[2].payload["content"] == "PK\x03\x04\ufffd\ufffd"
    for event in events:
        prepare(event.type, event.payload)  # the journal takes every one of them
    assert originals[0]["data"]["content"] == "bin\x00ary \ud83d 文件"  # the caller's untouched


def test_a_call_only_message_carries_the_original_on_its_first_call() -> None:
    calls = [{"id": f"c{i}", "name": "t", "args": {}} for i in range(2)]
    message = AIMessage("", tool_calls=calls)
    events = lg.message_events(
        [message], [message_to_dict(message)], used_calls=set(), open_calls=set()
    )
    assert [e.type for e in events] == ["tool_call", "tool_call"]
    assert events[0].payload["message"] == message_to_dict(message)
    assert "message" not in events[1].payload


def test_a_call_id_used_before_or_an_error_result_are_kept_their_own_way() -> None:
    reused = AIMessage("", tool_calls=[{"id": "call_1", "name": "t", "args": {}}])
    failed = ToolMessage("boom", tool_call_id="call_2", status="error")
    assert as_events([reused], used={"call_1"}) == [(LANGGRAPH_MESSAGE, {})]
    assert as_events([failed], used={"call_2"}, open={"call_2"}) == [
        ("tool_result", {"call_id": "call_2", "content": "boom", "is_error": True})
    ]
    assert as_events([ToolMessage("?", tool_call_id="nobody")]) == [(LANGGRAPH_MESSAGE, {})]


@pytest.mark.parametrize(
    ("type_", "payload"),
    [
        (LANGGRAPH_BLOB, {"ns": "", "channel": "", "version": 1, "value": {"type": "json"}}),
        (LANGGRAPH_BLOB, {"ns": "", "channel": "c", "version": True, "value": {"type": "json"}}),
        (LANGGRAPH_BLOB, {"ns": "", "channel": "c", "version": 1, "value": {"data": "eA=="}}),
        (
            LANGGRAPH_BLOB,
            {"ns": "", "channel": "c", "version": 1, "value": {"type": "j"}, "base": 0},
        ),
        (LANGGRAPH_WRITES, {"ns": "", "checkpoint_id": "c", "task_id": "t", "task_path": ""}),
        (
            LANGGRAPH_WRITES,
            {"ns": "", "checkpoint_id": "c", "task_id": "t", "task_path": "", "writes": [[0]]},
        ),
        (
            LANGGRAPH_CHECKPOINT,
            {
                "ns": "",
                "checkpoint_id": "c",
                "checkpoint": {"type": "msgpack", "data": ""},
                "metadata": {"type": "msgpack", "data": ""},
                "blobs": {"a": 0},
            },
        ),
        (LANGGRAPH_MESSAGE, {}),
        (LANGGRAPH_PRUNED, {"keep": {"": 1}}),
        ("user_message", {"content": "hi", "message": "not an object"}),
    ],
)
def test_malformed_langgraph_payloads_are_invalid_events(
    type_: str, payload: dict[str, Any]
) -> None:
    with pytest.raises(InvalidEvent):
        prepare(type_, payload)
