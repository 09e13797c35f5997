"""Sessions: create, update, list, delete and undelete, and reopening the journal."""

from __future__ import annotations

import pytest

from agentjournal import (
    Conflict,
    InvalidArgument,
    InvalidEvent,
    Journal,
    JournalError,
    SessionClosed,
)
from helpers.contract import PROMPT, SEED_REPLAY, msg, rejected, seed


def test_explicit_session_id_already_taken_is_a_conflict(journal: Journal) -> None:
    session = journal.create_session("first", session_id="order-chat-1")
    assert session.session_id == "order-chat-1"
    rejected(journal, Conflict, lambda: journal.create_session("again", session_id="order-chat-1"))
    rejected(journal, InvalidArgument, lambda: journal.create_session(session_id="has space"))


def test_update_session_shapes_are_checked(journal: Journal) -> None:
    sid = seed(journal)
    rejected(journal, InvalidEvent, lambda: journal.update_session(sid))
    rejected(journal, InvalidEvent, lambda: journal.update_session(sid, status="gone"))


def test_deleted_session_accepts_only_undelete(journal: Journal) -> None:
    sid = seed(journal)
    deleted = journal.delete_session(sid)
    assert deleted.status == "deleted"
    assert journal.events(sid)[-1].payload == {"status": "deleted"}
    for action in (
        lambda: journal.append(sid, "user_message", {"content": "x"}),
        lambda: journal.append(sid, "myapp.note", {}),
        lambda: journal.append_many(sid, [msg("user_message", "x")]),
        lambda: journal.compact(sid, 6, "s"),
        lambda: journal.update_session(sid, title="renamed"),
        lambda: journal.update_session(sid, status="archived"),
        lambda: journal.delete_session(sid),
    ):
        error = rejected(journal, SessionClosed, action)
        assert isinstance(error, JournalError)
    # Still readable.
    assert journal.replay(sid) == SEED_REPLAY
    assert len(journal.messages(sid)) == 4
    # Undelete, then appends work again.
    assert journal.update_session(sid, status="active").status == "active"
    assert journal.append(sid, "user_message", {"content": "back"}).seq == 10
    assert journal.get_session(sid).last_seq == 10


def test_create_session_fields(journal: Journal) -> None:
    session = journal.create_session(
        "订单客服", model="gpt-x", system_prompt=PROMPT, metadata={"agent": "order", "n": [1]}
    )
    assert session.session_id.startswith("sess_")
    assert session.tenant == "default"
    assert (session.title, session.model, session.system_prompt) == ("订单客服", "gpt-x", PROMPT)
    assert session.metadata == {"agent": "order", "n": [1]}
    assert (session.status, session.forked_from, session.forked_at_seq) == ("active", None, None)
    assert (session.last_seq, session.event_count) == (1, 1)
    assert (session.prompt_tokens, session.completion_tokens) == (0, 0)
    assert session.last_position == journal.events(session.session_id)[0].position
    assert (
        session.created_at == session.updated_at == journal.events(session.session_id)[0].created_at
    )
    assert journal.get_session(session.session_id) == session
    plain = journal.create_session()
    assert (plain.title, plain.model, plain.system_prompt, plain.metadata) == ("", None, None, {})
    assert journal.replay(plain.session_id) == []


def test_update_session(journal: Journal) -> None:
    sid = seed(journal)
    updated = journal.update_session(sid, title="新标题", metadata={"k": "v"})
    assert (updated.title, updated.metadata, updated.status) == ("新标题", {"k": "v"}, "active")
    assert journal.events(sid)[-1].type == "session_updated"
    assert journal.events(sid)[-1].payload == {"title": "新标题", "metadata": {"k": "v"}}
    archived = journal.update_session(sid, status="archived")
    assert (archived.status, archived.title, archived.last_seq) == ("archived", "新标题", 9)
    # Archived sessions still take appends.
    assert journal.append(sid, "user_message", {"content": "x"}).seq == 10
    assert journal.update_session(sid, metadata={}).metadata == {}


def test_sessions_lists_by_most_recent_activity(journal: Journal) -> None:
    first = journal.create_session("1").session_id
    second = journal.create_session("2").session_id
    third = journal.create_session("3").session_id
    assert [s.session_id for s in journal.sessions()] == [third, second, first]
    journal.append(first, "user_message", {"content": "bump"})
    assert [s.session_id for s in journal.sessions()] == [first, third, second]
    journal.update_session(second, title="renamed")
    assert [s.session_id for s in journal.sessions()] == [second, first, third]
    assert [s.session_id for s in journal.sessions(limit=2)] == [second, first]


def test_sessions_status_filters(journal: Journal) -> None:
    active = journal.create_session("active").session_id
    archived = journal.create_session("archived").session_id
    deleted = journal.create_session("deleted").session_id
    journal.update_session(archived, status="archived")
    journal.delete_session(deleted)

    def ids(status: str | None) -> set[str]:
        return {s.session_id for s in journal.sessions(status=status)}

    assert ids(None) == {active, archived}
    assert ids("active") == {active}
    assert ids("archived") == {archived}
    assert ids("deleted") == {deleted}
    assert ids("all") == {active, archived, deleted}
    with pytest.raises(InvalidArgument):
        journal.sessions(status="gone")
    with pytest.raises(InvalidArgument):
        journal.sessions(limit=0)
    # Deleted but readable.
    assert journal.get_session(deleted).status == "deleted"
    journal.update_session(deleted, status="active")
    assert ids(None) == {active, archived, deleted}


def test_sessions_cursor_visits_each_session_once(journal: Journal) -> None:
    made = [journal.create_session(str(i)).session_id for i in range(8)]
    journal.append(made[2], "user_message", {"content": "bump"})
    journal.delete_session(made[5])
    for status, expected in ((None, 7), ("all", 8)):
        everything = journal.sessions(status=status, limit=100)
        assert len(everything) == expected
        for size in (1, 3, 7, 8):
            seen: list[str] = []
            cursor = None
            while page := journal.sessions(status=status, limit=size, cursor=cursor):
                assert len(page) <= size
                seen += [s.session_id for s in page]
                cursor = page[-1].last_position
            assert seen == [s.session_id for s in everything]
    assert journal.sessions(limit=100)[0].session_id == made[2]


def test_usage_and_event_count(journal: Journal) -> None:
    sid = seed(journal)
    session = journal.get_session(sid)
    assert (session.prompt_tokens, session.completion_tokens) == (120, 12)
    journal.append_many(
        sid,
        [
            msg("user_message", "再查一次"),
            msg("assistant_message", "好", usage={"prompt_tokens": 200, "completion_tokens": 30}),
            msg("assistant_message", "嗯", usage={"prompt_tokens": 5}),
            msg("assistant_message", "无"),
        ],
    )
    session = journal.get_session(sid)
    assert (session.prompt_tokens, session.completion_tokens) == (325, 42)
    assert session.event_count == len(journal.events(sid)) == 11


def test_delete_session_leaves_it_readable(journal: Journal) -> None:
    sid = seed(journal)
    messages, calls = journal.messages(sid), journal.tool_calls(sid)
    journal.delete_session(sid)
    assert sid not in {s.session_id for s in journal.sessions()}
    assert journal.messages(sid) == messages
    assert journal.tool_calls(sid) == calls
    assert journal.replay(sid) == SEED_REPLAY
    assert [e.seq for e in journal.events(sid)] == list(range(1, 9))
    # A subscriber's stream ends after the deleting event.
    assert [e.seq for e in journal.subscribe(sid)] == list(range(1, 9))


def test_a_reopened_journal_sees_everything(journal: Journal, journal_url: str) -> None:
    sid = seed(journal)
    with Journal.open(journal_url) as again:
        assert again.replay(sid) == SEED_REPLAY
        assert again.events(sid) == journal.events(sid)
        assert again.verify().ok


# -- search -----------------------------------------------------------------------------------


def searched(
    journal: Journal, search: str, *, status: str | None = None, limit: int = 50
) -> list[str]:
    return [s.session_id for s in journal.sessions(search=search, status=status, limit=limit)]


def test_sessions_search_matches_title_or_id_in_any_case(journal: Journal) -> None:
    refund = journal.create_session("Refund request", session_id="Chat-Alpha-1").session_id
    apples = journal.create_session("Äpfel bestellen").session_id
    anger = journal.create_session("ärger mit der Lieferung").session_id
    orders = journal.create_session("订单客服").session_id
    other = journal.create_session("Something else").session_id
    assert searched(journal, "REFUND") == [refund]
    assert searched(journal, "chat-alpha") == [refund]  # the id, not the title
    assert searched(journal, "CHAT-ALPHA-1") == [refund]
    assert searched(journal, "äpfel") == [apples]  # non-ASCII letters fold too, both ways
    assert searched(journal, "ÄRGER") == [anger]
    assert searched(journal, "Ä") == [anger, apples]  # activity order, newest first
    assert searched(journal, "客服") == [orders]
    assert searched(journal, "单客") == [orders]
    assert searched(journal, orders[-8:].upper()) == [orders]
    assert searched(journal, "no such words") == []
    # Matched as given: LIKE's wildcards are plain characters, spaces are not trimmed.
    assert searched(journal, "%") == []
    assert searched(journal, "_") == [other, orders, anger, apples]  # "sess_…" ids, not refund's
    assert searched(journal, " else") == [other]
    assert searched(journal, "else ") == []
    # An empty search filters nothing.
    assert searched(journal, "") == [s.session_id for s in journal.sessions()]


def test_sessions_search_pages_with_the_cursor(journal: Journal) -> None:
    needles = []
    for number in range(7):
        needles.append(journal.create_session(f"needle {number}").session_id)
        journal.create_session(f"hay {number}")
    journal.append(needles[2], "user_message", {"content": "bump"})
    wanted = [needles[2], *reversed(needles[3:]), needles[1], needles[0]]
    assert searched(journal, "NEEDLE", limit=100) == wanted
    for size in (1, 2, 3, 7):
        seen: list[str] = []
        cursor = None
        while page := journal.sessions(search="needle", limit=size, cursor=cursor):
            assert len(page) <= size
            seen += [s.session_id for s in page]
            cursor = page[-1].last_position
        assert seen == wanted


def test_sessions_search_combines_with_status_and_tenant(journal: Journal) -> None:
    active = journal.create_session("invoice active").session_id
    archived = journal.create_session("invoice archived").session_id
    deleted = journal.create_session("invoice deleted").session_id
    journal.update_session(archived, status="archived")
    journal.delete_session(deleted)
    journal.create_session("unrelated")
    other = journal.for_tenant("other-tenant")
    theirs = other.create_session("invoice elsewhere").session_id
    assert searched(journal, "invoice") == [archived, active]
    assert searched(journal, "invoice", status="active") == [active]
    assert searched(journal, "invoice", status="deleted") == [deleted]
    assert searched(journal, "invoice", status="all") == [deleted, archived, active]
    # Another tenant's session never matches, not even by its id.
    assert searched(journal, "elsewhere", status="all") == []
    assert searched(journal, theirs, status="all") == []
    assert searched(other, "invoice") == [theirs]


@pytest.mark.parametrize(
    "search",
    [
        b"invoice",
        7,
        ["invoice"],
        "x" * 201,
        "in\x00voice",
        "in\ud800voice",
    ],
    ids=["bytes", "int", "list", "too-long", "nul", "lone-surrogate"],
)
def test_sessions_search_rejects_bad_input(journal: Journal, search: object) -> None:
    journal.create_session("invoice")
    rejected(journal, InvalidArgument, lambda: journal.sessions(search=search))  # type: ignore[arg-type]


def test_sessions_search_takes_up_to_200_characters(journal: Journal) -> None:
    title = "订" * 200
    session = journal.create_session(title).session_id
    assert searched(journal, title) == [session]
    assert searched(journal, "订" * 199 + "x") == []
