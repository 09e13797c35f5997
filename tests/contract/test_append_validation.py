"""What append refuses (types, shapes, supersedes, sizes, expected_seq, batches) writes nothing."""

from __future__ import annotations

from typing import Any

import pytest

from agentjournal import (
    Conflict,
    ContextTooLarge,
    InvalidArgument,
    InvalidEvent,
    Journal,
    JournalError,
    NewEvent,
    PayloadTooLarge,
    SessionClosed,
    SessionNotFound,
    StorageError,
    UnknownToolCall,
)
from agentjournal.events import RESERVED_TYPES
from helpers.contract import USAGE, call, msg, rejected, result, seed
from test_events import VALID

BAD_EVENTS: list[tuple[Any, Any]] = [
    ("unknown", {"x": 1}),
    ("memory_saved", {}),  # not namespaced
    ("MyApp.saved", {}),
    ("a." + "b" * 63, {}),  # 65 characters
    (None, {}),
    ("user_message", ["content", "hi"]),
    ("user_message", "hi"),
    ("user_message", None),
    ("myapp.metric", {"value": float("nan")}),
    ("myapp.metric", {"value": float("inf")}),
    ("myapp.metric", {"value": [float("-inf")]}),
    ("user_message", {"content": "nul\x00here"}),
    ("myapp.note", {"bad\x00key": 1}),
    ("myapp.note", {"nested": {"k": "v\x00"}}),
    ("myapp.note", {1: "x"}),
    ("myapp.note", {"nested": {(1, 2): "x"}}),
    ("user_message", {}),
    ("user_message", {"content": 5}),
    ("tool_call", {"name": "lookup", "arguments": "{}"}),  # no call_id
    ("tool_call", {"call_id": "c9", "name": "lookup", "arguments": {"id": 1}}),
    ("tool_call", {"call_id": "c9", "name": "lookup"}),
    ("tool_result", {"call_id": "call_1", "content": "x", "is_error": "no"}),
    ("tool_result", {"call_id": "call_1", "content": "x", "is_error": 0}),
    ("tool_result", {"call_id": "call_1"}),
    ("user_message", {"content": "x", "usage": {"prompt_tokens": 1, "completion_tokens": 1}}),
    ("system_message", {"content": "x", "usage": {"prompt_tokens": 1}}),
    ("assistant_message", {"content": "x", "usage": {"prompt_tokens": -1}}),
    ("context_compacted", {"summary": "s"}),
    ("context_compacted", {"summary": "s", "until_seq": 0}),
]


@pytest.mark.parametrize(("type_", "payload"), BAD_EVENTS)
def test_wrong_type_or_shape_is_invalid_event(journal: Journal, type_: Any, payload: Any) -> None:
    sid = seed(journal)
    error = rejected(journal, InvalidEvent, lambda: journal.append(sid, type_, payload))
    assert isinstance(error, ValueError)
    assert isinstance(error, InvalidArgument)
    assert isinstance(error, JournalError)
    rejected(
        journal,
        InvalidEvent,
        lambda: journal.append_many(sid, [msg("user_message", "ok"), NewEvent(type_, payload)]),
        match=r"events\[1\]",
    )


def test_type_of_exactly_64_characters_is_accepted(journal: Journal) -> None:
    sid = journal.create_session().session_id
    name = "a." + "b" * 62
    assert journal.append(sid, name, {"x": 1}).type == name


RESERVED_PAYLOADS = {
    "session_created": {"title": "x"},
    "session_updated": {"status": "active"},
    "session_forked": {"from_session_id": "sess_x", "at_seq": 1},
}


@pytest.mark.parametrize("type_", sorted(RESERVED_TYPES))
def test_session_and_task_events_cannot_be_appended(journal: Journal, type_: str) -> None:
    sid = seed(journal)
    payload = RESERVED_PAYLOADS.get(type_) or VALID[type_][0]
    rejected(journal, InvalidEvent, lambda: journal.append(sid, type_, payload), match=type_)
    rejected(journal, InvalidEvent, lambda: journal.append_many(sid, [NewEvent(type_, payload)]))


@pytest.fixture
def corrected(journal: Journal) -> str:
    """The seed plus a correction of the user message at seq 2, at seq 8."""
    sid = seed(journal)
    fix = journal.append(sid, "user_message", {"content": "您好", "supersedes": 2})
    assert fix.seq == 8
    return sid


@pytest.mark.parametrize(
    ("type_", "target"),
    [
        ("user_message", 99),  # no such seq
        ("user_message", 3),  # an assistant_message
        ("assistant_message", 2),  # a user_message
        ("user_message", 8),  # a correction, not an original
        ("user_message", 5),  # a tool_call
        ("user_message", 1),  # session_created
        ("user_message", 9),  # itself: the event would be seq 9
        ("user_message", 10),  # the future
    ],
)
def test_supersedes_must_name_an_earlier_original_of_the_same_type(
    journal: Journal, corrected: str, type_: str, target: int
) -> None:
    payload = {"content": "again", "supersedes": target}
    rejected(journal, InvalidEvent, lambda: journal.append(corrected, type_, payload))


def test_supersedes_may_name_an_original_earlier_in_the_same_batch(
    journal: Journal, corrected: str
) -> None:
    events = journal.append_many(
        corrected, [msg("user_message", "typo"), msg("user_message", "fixed", supersedes=9)]
    )
    assert [e.seq for e in events] == [9, 10]
    assert journal.messages(corrected)[-1].content == "fixed"
    # ... but not a correction in the same batch, nor a later event of the batch.
    rejected(
        journal,
        InvalidEvent,
        lambda: journal.append_many(
            corrected,
            [
                msg("user_message", "x"),
                msg("user_message", "y", supersedes=11),
                msg("user_message", "z", supersedes=12),
            ],
        ),
    )
    rejected(
        journal,
        InvalidEvent,
        lambda: journal.append_many(
            corrected, [msg("user_message", "y", supersedes=12), msg("user_message", "x")]
        ),
    )


def test_duplicate_idempotency_keys_within_a_batch_are_invalid(journal: Journal) -> None:
    sid = seed(journal)
    rejected(
        journal,
        InvalidEvent,
        lambda: journal.append_many(
            sid, [msg("user_message", "a", "dup"), msg("assistant_message", "b", "dup")]
        ),
    )
    rejected(
        journal,
        InvalidEvent,
        lambda: journal.append_many(
            sid, [msg("user_message", "a", "dup"), msg("user_message", "a", "dup")]
        ),
    )


def test_payload_over_a_custom_limit_is_too_large(journal: Journal) -> None:
    small = Journal(journal.storage, max_payload_bytes=64)
    sid = small.create_session("t").session_id
    overhead = len('{"content":""}')
    assert small.append(sid, "user_message", {"content": "x" * (64 - overhead)}).seq == 2
    error = rejected(
        journal,
        PayloadTooLarge,
        lambda: small.append(sid, "user_message", {"content": "x" * (65 - overhead)}),
    )
    assert (error.size, error.limit) == (65, 64)
    assert isinstance(error, ValueError)
    assert isinstance(error, JournalError)
    rejected(
        journal,
        PayloadTooLarge,
        lambda: small.append_many(sid, [msg("user_message", "ok"), msg("user_message", "é" * 30)]),
    )
    rejected(journal, PayloadTooLarge, lambda: small.create_session("t" * 100))
    rejected(journal, PayloadTooLarge, lambda: small.update_session(sid, title="t" * 100))
    # The same events fit the default limit.
    assert journal.append(sid, "user_message", {"content": "é" * 30}).seq == 3


def test_open_takes_max_payload_bytes(journal: Journal, journal_url: str) -> None:
    sid = journal.create_session().session_id
    with Journal.open(journal_url, max_payload_bytes=20) as small:
        assert small.append(sid, "user_message", {"content": "x" * 6}).seq == 2
        rejected(
            journal,
            PayloadTooLarge,
            lambda: small.append(sid, "user_message", {"content": "x" * 7}),
        )
    with pytest.raises(InvalidArgument):
        Journal(journal.storage, max_payload_bytes=0)


def test_expected_seq_must_be_the_last_seq(journal: Journal) -> None:
    sid = seed(journal)
    for stale in (0, 3, 6, 8, 100):
        rejected(
            journal,
            Conflict,
            lambda stale=stale: journal.append(
                sid, "user_message", {"content": "x"}, expected_seq=stale
            ),
        )
        rejected(
            journal,
            Conflict,
            lambda stale=stale: journal.append_many(
                sid, [msg("user_message", "x")], expected_seq=stale
            ),
        )
    assert journal.append(sid, "user_message", {"content": "x"}, expected_seq=7).seq == 8
    events = journal.append_many(
        sid, [msg("user_message", "y"), msg("assistant_message", "z")], expected_seq=8
    )
    assert [e.seq for e in events] == [9, 10]
    rejected(journal, InvalidArgument, lambda: journal.append(sid, "myapp.x", {}, expected_seq=-1))


def test_error_tree() -> None:
    assert issubclass(SessionNotFound, LookupError)
    assert issubclass(UnknownToolCall, LookupError)
    assert issubclass(InvalidArgument, ValueError)
    assert issubclass(InvalidEvent, InvalidArgument)
    assert issubclass(PayloadTooLarge, ValueError)
    assert issubclass(ContextTooLarge, ValueError)
    assert issubclass(StorageError, OSError)
    for error in (
        SessionNotFound,
        InvalidArgument,
        InvalidEvent,
        PayloadTooLarge,
        Conflict,
        UnknownToolCall,
        SessionClosed,
        ContextTooLarge,
        StorageError,
    ):
        assert issubclass(error, JournalError)


BAD_THIRD: list[tuple[dict[str, Any], type[Exception]]] = [
    ({"type": "nope", "payload": {}}, InvalidEvent),
    (msg("user_message", "x", usage=USAGE), InvalidEvent),
    (result("nobody", "x"), UnknownToolCall),
    (result("call_1", "again"), Conflict),
    (call("call_1"), Conflict),
    (msg("user_message", "x", supersedes=3), InvalidEvent),
    ({"type": "context_compacted", "payload": {"summary": "s", "until_seq": 5}}, InvalidEvent),
    (msg("user_message", "x" * 2_000_000), PayloadTooLarge),
    ({"type": "session_updated", "payload": {"title": "x"}}, InvalidEvent),
]


@pytest.mark.parametrize(("third", "error"), BAD_THIRD)
def test_a_batch_with_a_bad_third_event_writes_none(
    journal: Journal, third: dict[str, Any], error: type[Exception]
) -> None:
    sid = seed(journal)
    batch = [msg("user_message", "first", "b1"), call("c_batch"), third]
    rejected(journal, error, lambda: journal.append_many(sid, batch))
    # The first two alone are fine, and their keys were not burnt.
    events = journal.append_many(sid, batch[:2])
    assert [e.seq for e in events] == [8, 9]


def test_append_many_takes_a_non_empty_list(journal: Journal) -> None:
    sid = seed(journal)
    for bad in ([], msg("user_message", "x"), "user_message", [{"type": "myapp.x", "extra": 1}]):
        rejected(journal, InvalidEvent, lambda bad=bad: journal.append_many(sid, bad))
