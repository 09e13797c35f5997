"""Forks: a copy of the parent up to a seq, independent of it, whole when either is purged."""

from __future__ import annotations

import pytest

from agentjournal import Conflict, InvalidArgument, Journal, SessionNotFound
from expected import a, u
from helpers.contract import PROMPT, SEED_REPLAY, rejected, seed


def test_fork_copies_the_parent_up_to_at_seq(journal: Journal) -> None:
    sid = seed(journal)
    parent_events = journal.events(sid)
    fork = journal.fork(sid, 4)
    assert fork.session_id != sid
    assert (fork.forked_from, fork.forked_at_seq, fork.tenant) == (sid, 4, "default")
    assert (fork.title, fork.model, fork.system_prompt) == ("订单客服", "scripted", PROMPT)
    assert (fork.last_seq, fork.event_count, fork.status) == (5, 5, "active")
    events = journal.events(fork.session_id)
    assert [e.seq for e in events] == [1, 2, 3, 4, 5]
    for copy, original in zip(events[:4], parent_events[:4], strict=True):
        assert (copy.seq, copy.type, copy.payload, copy.created_at) == (
            original.seq,
            original.type,
            original.payload,
            original.created_at,
        )
        assert copy.session_id == fork.session_id
        assert copy.idempotency_key is None
    parent_ids = {e.event_id for e in parent_events}
    assert not parent_ids & {e.event_id for e in events}
    assert [e.event_id for e in events] == sorted(e.event_id for e in events)
    assert (events[4].type, events[4].payload) == (
        "session_forked",
        {"from_session_id": sid, "at_seq": 4},
    )
    assert journal.replay(fork.session_id) == journal.replay(sid, until=4) == SEED_REPLAY[:4]
    assert [(m.seq, m.role, m.content) for m in journal.messages(fork.session_id)] == [
        (m.seq, m.role, m.content) for m in journal.messages(sid)[:3]
    ]
    assert journal.tool_calls(fork.session_id) == []
    assert journal.events(sid) == parent_events
    assert journal.verify().ok


def test_fork_and_parent_are_independent(journal: Journal) -> None:
    sid = seed(journal)
    fork = journal.fork(sid, 6).session_id
    assert [(c.call_id, c.status, c.result) for c in journal.tool_calls(fork)] == [
        ("call_1", "ok", "42")
    ]
    parent_events = journal.events(sid)
    # The fork's copies carry no keys: the parent's key is a fresh key in the fork.
    journal.append(fork, "user_message", {"content": "换个问题"}, idempotency_key="k2")
    journal.append(fork, "assistant_message", {"content": "好的"})
    assert journal.events(sid) == parent_events
    assert journal.replay(fork) == [*journal.replay(sid, until=6), u("换个问题"), a("好的")]
    journal.append(sid, "user_message", {"content": "parent only"})
    assert journal.replay(fork)[-1] == a("好的")
    assert u("parent only") not in journal.replay(fork)


def test_fork_defaults_to_the_whole_session_and_takes_a_title(journal: Journal) -> None:
    sid = seed(journal)
    whole = journal.fork(sid)
    assert (whole.forked_at_seq, whole.last_seq) == (7, 8)
    assert journal.replay(whole.session_id) == SEED_REPLAY
    titled = journal.fork(sid, 4, title="分支")
    assert (titled.title, titled.last_seq) == ("分支", 6)
    assert [e.type for e in journal.events(titled.session_id, after=4)] == [
        "session_forked",
        "session_updated",
    ]
    # A fork of a fork.
    grandchild = journal.fork(whole.session_id, 8)
    assert grandchild.forked_from == whole.session_id
    assert journal.replay(grandchild.session_id) == SEED_REPLAY


def test_fork_shows_the_original_before_a_later_correction(journal: Journal) -> None:
    sid = seed(journal)
    journal.append(sid, "user_message", {"content": "您好", "supersedes": 2})
    before = journal.fork(sid, 7)
    after = journal.fork(sid, 8)
    assert journal.replay(before.session_id) == SEED_REPLAY
    assert journal.replay(after.session_id)[1] == u("您好")
    assert journal.messages(after.session_id)[0].content == "您好"


def test_fork_may_not_split_a_call_from_its_result(journal: Journal) -> None:
    sid = seed(journal)
    rejected(journal, Conflict, lambda: journal.fork(sid, 5))
    journal.append(sid, "tool_call", {"call_id": "pending", "name": "n", "arguments": ""})
    rejected(journal, Conflict, lambda: journal.fork(sid))
    rejected(journal, Conflict, lambda: journal.fork(sid, 8))
    assert journal.fork(sid, 7).last_seq == 8


def test_fork_at_seq_must_exist(journal: Journal) -> None:
    sid = seed(journal)
    rejected(journal, InvalidArgument, lambda: journal.fork(sid, 8))
    rejected(journal, InvalidArgument, lambda: journal.fork(sid, 0))
    rejected(journal, InvalidArgument, lambda: journal.fork(sid, -1))


@pytest.mark.parametrize("purge", ["parent", "fork"])
def test_purging_one_side_of_a_fork_leaves_the_other_whole(journal: Journal, purge: str) -> None:
    sid = seed(journal)
    fork = journal.fork(sid, 6).session_id
    journal.append(fork, "assistant_message", {"content": "fork reply"})
    keep, gone = (fork, sid) if purge == "parent" else (sid, fork)
    kept = (journal.get_session(keep), journal.events(keep), journal.replay(keep))
    kept_rows = (journal.messages(keep), journal.tool_calls(keep))
    journal.purge_session(gone)
    assert (journal.get_session(keep), journal.events(keep), journal.replay(keep)) == kept
    assert (journal.messages(keep), journal.tool_calls(keep)) == kept_rows
    with pytest.raises(SessionNotFound):
        journal.get_session(gone)
    assert journal.verify().ok
