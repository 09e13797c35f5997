"""The messages projection: rows, the latest messages, corrections, custom events replay skips."""

from __future__ import annotations

import pytest

from agentjournal import InvalidArgument, Journal
from agentjournal.replay import estimate_tokens
from expected import a, u
from helpers.contract import SEED_REPLAY, msg, seed


def test_messages_last_returns_the_latest_oldest_first(journal: Journal) -> None:
    sid = journal.create_session(system_prompt="not a message").session_id
    journal.append_many(sid, [msg("user_message", f"m{i}") for i in range(10)])
    journal.append(sid, "myapp.note", {})
    everything = journal.messages(sid)
    assert [m.content for m in everything] == [f"m{i}" for i in range(10)]
    assert [m.seq for m in everything] == list(range(2, 12))
    assert journal.messages(sid, last=3) == everything[-3:]
    assert journal.messages(sid, last=1) == everything[-1:]
    assert journal.messages(sid, last=100) == everything
    with pytest.raises(InvalidArgument):
        journal.messages(sid, last=0)
    assert journal.messages(journal.create_session().session_id) == []


def test_message_rows(journal: Journal) -> None:
    sid = seed(journal)
    journal.append(sid, "system_message", {"content": "be brief"})
    rows = journal.messages(sid)
    assert [(m.seq, m.role) for m in rows] == [
        (2, "user"),
        (3, "assistant"),
        (4, "user"),
        (7, "assistant"),
        (8, "system"),
    ]
    events = {e.seq: e for e in journal.events(sid)}
    for row in rows:
        assert row.session_id == sid
        assert row.content == events[row.seq].payload["content"]
        assert row.tokens == estimate_tokens({"role": row.role, "content": row.content})
        assert row.edited_seq is None
        assert row.created_at == events[row.seq].created_at


def test_corrections_show_the_newest_content_at_the_originals_place(journal: Journal) -> None:
    sid = seed(journal)
    journal.append(sid, "user_message", {"content": "帮我查一下订单总数", "supersedes": 4})
    journal.append(sid, "assistant_message", {"content": "共 42 个订单。", "supersedes": 7})
    journal.append(sid, "user_message", {"content": "帮我查一下所有订单", "supersedes": 4})
    rows = journal.messages(sid)
    assert [(m.seq, m.content, m.edited_seq) for m in rows] == [
        (2, "你好", None),
        (3, "你好！我是订单客服助手，可以帮你查询订单数量。", None),
        (4, "帮我查一下所有订单", 10),
        (7, "共 42 个订单。", 9),
    ]
    assert rows[2].tokens == estimate_tokens(u("帮我查一下所有订单"))
    corrected = [*SEED_REPLAY[:3], u("帮我查一下所有订单"), *SEED_REPLAY[4:6], a("共 42 个订单。")]
    assert journal.replay(sid) == corrected
    assert journal.replay(sid, until=7) == SEED_REPLAY
    assert journal.replay(sid, until=8) == [
        *SEED_REPLAY[:3],
        u("帮我查一下订单总数"),
        *SEED_REPLAY[4:],
    ]
    assert journal.replay(sid, until=9)[-1] == a("共 42 个订单。")
    # The journal keeps every version.
    assert [e.payload.get("supersedes") for e in journal.events(sid)[7:]] == [4, 7, 4]


def test_custom_events_are_stored_numbered_and_ignored_by_replay(journal: Journal) -> None:
    sid = seed(journal)
    event = journal.append(sid, "myapp.memory_saved", {"memory": "likes tea", "n": [1, 2.5]})
    assert (event.seq, event.type) == (8, "myapp.memory_saved")
    assert journal.events(sid, after=7) == [event]
    assert journal.replay(sid) == SEED_REPLAY
    assert len(journal.messages(sid)) == 4
