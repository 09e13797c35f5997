"""`append_across`: batches for several sessions of one tenant in one transaction. Every batch is
checked as `append_many` checks it; one refused batch, in any session, writes nothing at all."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from agentjournal import (
    AsyncJournal,
    Conflict,
    InvalidArgument,
    InvalidEvent,
    Journal,
    NewEvent,
    SessionClosed,
    SessionNotFound,
    UnknownToolCall,
)
from helpers.contract import call, msg, rejected, result


@pytest.fixture
def three(journal: Journal) -> list[str]:
    return [journal.create_session(f"s{i}").session_id for i in range(3)]


def test_every_batch_is_written_in_one_commit(journal: Journal, three: list[str]) -> None:
    a, b, c = three
    appended = journal.append_across(
        {
            a: [msg("user_message", "你好"), call("call_1")],
            b: [NewEvent("app.noted", {"n": 1})],
            c: [msg("user_message", "x"), msg("assistant_message", "y")],
        },
        expected_seq={a: 1, c: 1},
    )
    assert list(appended) == [a, b, c]
    assert [e.seq for e in appended[a]] == [2, 3]
    assert [e.seq for e in appended[b]] == [2]
    assert [e.type for e in appended[c]] == ["user_message", "assistant_message"]
    for sid, events in appended.items():
        assert journal.events(sid, after=1) == events
    # The tool call opened in `a` is open for the next append, as after append_many.
    journal.append_across({a: [result("call_1", "42")]})
    assert [t.status for t in journal.tool_calls(a)] == ["ok"]


BAD_BATCHES: list[tuple[type[Exception], Any]] = [
    (InvalidEvent, [{"type": "user_message", "payload": {}}]),  # no content
    (InvalidEvent, []),  # an empty batch
    (UnknownToolCall, [result("call_9", "?")]),  # a result with no call
    (InvalidEvent, [NewEvent("session_created", {"title": "x"})]),  # reserved
]


@pytest.mark.parametrize("where", [0, 1, 2])
@pytest.mark.parametrize(("error", "bad"), BAD_BATCHES)
def test_a_batch_refused_in_any_session_writes_nothing_at_all(
    journal: Journal, three: list[str], where: int, error: type[Exception], bad: Any
) -> None:
    good = [msg("user_message", "ok")]
    batches = {sid: bad if i == where else good for i, sid in enumerate(three)}
    rejected(journal, error, lambda: journal.append_across(batches))


def test_expected_seq_of_any_session_is_checked_with_nothing_written(
    journal: Journal, three: list[str]
) -> None:
    a, b, c = three
    journal.append(b, "user_message", {"content": "moved on"})
    batches = {sid: [msg("user_message", "ok")] for sid in three}
    rejected(journal, Conflict, lambda: journal.append_across(batches, expected_seq={a: 1, b: 1}))
    appended = journal.append_across(batches, expected_seq={a: 1, b: 2, c: 1})
    assert [events[0].seq for events in appended.values()] == [2, 3, 2]


def test_missing_deleted_and_other_tenants_sessions_write_nothing(
    journal: Journal, three: list[str]
) -> None:
    a, b, _ = three
    ok = [msg("user_message", "ok")]
    rejected(journal, SessionNotFound, lambda: journal.append_across({a: ok, "nope": ok}))
    other = journal.for_tenant("b").create_session("theirs").session_id
    rejected(journal, SessionNotFound, lambda: journal.append_across({a: ok, other: ok}))
    journal.delete_session(b)
    rejected(journal, SessionClosed, lambda: journal.append_across({a: ok, b: ok}))


@pytest.mark.parametrize(
    "call_",
    [
        lambda j, s: j.append_across({}),
        lambda j, s: j.append_across([(s, [msg("user_message", "x")])]),
        lambda j, s: j.append_across({s: [msg("user_message", "x")]}, expected_seq={"other": 1}),
        lambda j, s: j.append_across({s: [msg("user_message", "x")]}, expected_seq=[1]),
        lambda j, s: j.append_across({"bad id!": [msg("user_message", "x")]}),
    ],
)
def test_malformed_calls_are_invalid_arguments(
    journal: Journal, three: list[str], call_: Any
) -> None:
    rejected(journal, InvalidArgument, lambda: call_(journal, three[0]))


def test_an_idempotent_retry_returns_the_originals(journal: Journal, three: list[str]) -> None:
    a, b, _ = three
    batches = {a: [msg("user_message", "x", key="ka")], b: [msg("user_message", "y", key="kb")]}
    first = journal.append_across(batches)
    assert journal.append_across(batches) == first
    assert journal.get_session(a).last_seq == 2
    assert journal.get_session(b).last_seq == 2


def test_async_journal_appends_across_too(journal_url: str, three: list[str]) -> None:
    a, b, _ = three

    async def go() -> dict[str, list[Any]]:
        async with await AsyncJournal.open(journal_url) as aj:
            with pytest.raises(SessionNotFound):
                await aj.append_across(
                    {a: [msg("user_message", "x")], "nope": [msg("user_message", "y")]}
                )
            return await aj.append_across(
                {a: [msg("user_message", "x")], b: [msg("user_message", "y")]},
                expected_seq={a: 1, b: 1},
            )

    appended = asyncio.run(go())
    with Journal.open(journal_url) as journal:
        assert {sid: journal.events(sid, after=1) for sid in (a, b)} == appended
