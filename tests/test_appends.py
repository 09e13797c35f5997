"""`append_group`: many callers' batches checked and stored together, each with its own outcome.

Group commit only forms a group under contention, so these tests hand a group to `append_group`
directly, inside one real write transaction, to pin down what threads can only provoke by chance.
"""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from agentjournal import Conflict, Event, Journal, SessionNotFound, UnknownToolCall
from agentjournal.appends import AppendOutcome, AppendRequest, append_group
from agentjournal.errors import JournalError
from agentjournal.events import prepare


def request(
    journal: Journal,
    session_id: str,
    *events: tuple[str, dict[str, object]] | tuple[str, dict[str, object], str],
    expected_seq: int | None = None,
    tenant: str | None = None,
) -> AppendRequest:
    prepared = [prepare(*event) for event in events]
    return AppendRequest(tenant or journal.tenant, session_id, prepared, expected_seq, 1)


def run_group(
    journal: Journal, requests: Sequence[AppendRequest]
) -> list[AppendOutcome | JournalError]:
    return journal.storage.write(lambda tx: append_group(tx, requests))


def user(text: str) -> tuple[str, dict[str, object]]:
    return ("user_message", {"content": text})


def seqs(outcome: AppendOutcome | JournalError) -> list[int]:
    assert not isinstance(outcome, JournalError), outcome
    return [event.seq for event in outcome[0]]


def test_batches_for_one_session_take_consecutive_seqs(journal: Journal) -> None:
    sid = journal.create_session("t").session_id
    outcomes = run_group(
        journal,
        [
            request(journal, sid, user("a"), user("b")),
            request(journal, sid, user("c"), expected_seq=3),
            request(journal, sid, user("d")),
        ],
    )
    assert [seqs(o) for o in outcomes] == [[2, 3], [4], [5]]
    assert [e.payload["content"] for e in journal.events(sid, after=1)] == ["a", "b", "c", "d"]
    assert journal.verify().ok


def test_a_rejected_batch_leaves_no_gap_and_fails_alone(journal: Journal) -> None:
    sid = journal.create_session("t").session_id
    other = journal.create_session("u").session_id
    outcomes = run_group(
        journal,
        [
            request(journal, sid, user("a")),
            request(journal, sid, user("x"), ("tool_result", {"call_id": "nope", "content": ""})),
            request(journal, sid, user("b"), expected_seq=5),  # stale: the session is at 2
            request(journal, "sess_missing", user("y")),
            request(journal, other, user("c"), tenant="another"),
            request(journal, sid, user("d"), expected_seq=2),
            request(journal, other, user("e")),
        ],
    )
    assert seqs(outcomes[0]) == [2]
    assert isinstance(outcomes[1], UnknownToolCall)
    assert isinstance(outcomes[2], Conflict)
    assert isinstance(outcomes[3], SessionNotFound)
    assert isinstance(outcomes[4], SessionNotFound)  # another tenant's session looks missing
    assert seqs(outcomes[5]) == [3]
    assert seqs(outcomes[6]) == [2]
    assert [e.seq for e in journal.events(sid)] == [1, 2, 3]
    assert journal.verify().ok


def test_a_retry_inside_the_same_group_returns_the_first_append(journal: Journal) -> None:
    sid = journal.create_session("t").session_id
    first = request(journal, sid, ("user_message", {"content": "hi"}, "k1"))
    outcomes = run_group(journal, [first, first, request(journal, sid, user("after"))])
    assert not isinstance(outcomes[0], JournalError)
    assert not isinstance(outcomes[1], JournalError)
    original, created = outcomes[0]
    repeat, created_again = outcomes[1]
    assert created
    assert not created_again
    assert repeat == original
    assert isinstance(repeat[0], Event)
    assert repeat[0].event_id > 0
    assert seqs(outcomes[2]) == [3]


def test_same_key_with_another_payload_in_one_group_is_a_conflict(journal: Journal) -> None:
    sid = journal.create_session("t").session_id
    outcomes = run_group(
        journal,
        [
            request(journal, sid, ("user_message", {"content": "hi"}, "k1")),
            request(journal, sid, ("user_message", {"content": "other"}, "k1")),
        ],
    )
    assert seqs(outcomes[0]) == [2]
    assert isinstance(outcomes[1], Conflict)


def test_calls_and_results_across_batches_of_one_group(journal: Journal) -> None:
    sid = journal.create_session("t").session_id
    call = ("tool_call", {"call_id": "c1", "name": "f", "arguments": "{}"})
    result = ("tool_result", {"call_id": "c1", "content": "42"})
    outcomes = run_group(
        journal,
        [
            request(journal, sid, call),
            request(journal, sid, call),  # the call id is taken by the batch before
            request(journal, sid, result),
            request(journal, sid, result),  # a second result
            request(journal, sid, ("context_compacted", {"summary": "s", "until_seq": 3})),
        ],
    )
    assert seqs(outcomes[0]) == [2]
    assert isinstance(outcomes[1], Conflict)
    assert seqs(outcomes[2]) == [3]
    assert isinstance(outcomes[3], Conflict)
    assert seqs(outcomes[4]) == [4]
    [stored] = journal.tool_calls(sid)
    assert (stored.status, stored.result, stored.result_seq) == ("ok", "42", 3)
    assert journal.verify().ok


def test_compaction_cannot_split_a_call_made_earlier_in_the_group(journal: Journal) -> None:
    sid = journal.create_session("t").session_id
    outcomes = run_group(
        journal,
        [
            request(journal, sid, ("tool_call", {"call_id": "c1", "name": "f", "arguments": ""})),
            request(journal, sid, ("context_compacted", {"summary": "s", "until_seq": 2})),
        ],
    )
    assert seqs(outcomes[0]) == [2]
    assert isinstance(outcomes[1], JournalError)
    assert [e.type for e in journal.events(sid)] == ["session_created", "tool_call"]


@pytest.mark.parametrize("size", [1, 2, 50])
def test_group_sizes_store_the_same_journal(journal: Journal, size: int) -> None:
    sids = [journal.create_session(f"s{i}").session_id for i in range(size)]
    outcomes = run_group(journal, [request(journal, sid, user("a"), user("b")) for sid in sids])
    assert [seqs(o) for o in outcomes] == [[2, 3]] * size
    ids = [e.event_id for o in outcomes if not isinstance(o, JournalError) for e in o[0]]
    assert ids == sorted(ids)
    assert len(set(ids)) == len(ids)
    assert journal.verify().ok
