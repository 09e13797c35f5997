"""Numbering and reading events: seq, event ids, positions, paging a session and the feed."""

from __future__ import annotations

from typing import Any

import pytest

from agentjournal import Event, InvalidArgument, Journal, SessionNotFound
from agentjournal.transfer import committed_events
from expected import settled_feed
from helpers.contract import PROMPT, SEED, msg, seed


def test_seq_starts_at_session_created_and_has_no_gaps(journal: Journal, backend: str) -> None:
    sid = seed(journal)
    other = seed(journal, "other")
    journal.append_many(sid, [msg("user_message", "a"), msg("assistant_message", "b")])
    journal.append(other, "myapp.note", {})
    journal.update_session(sid, title="renamed")
    events = journal.events(sid)
    assert [e.seq for e in events] == list(range(1, 11))
    assert events[0].type == "session_created"
    assert events[0].payload == {"title": "订单客服", "model": "scripted", "system_prompt": PROMPT}
    assert [e.type for e in events[1:7]] == [e.type for e in SEED]
    assert [e.payload for e in events[1:7]] == [e.payload for e in SEED]
    assert {e.session_id for e in events} == {sid}
    everything = settled_feed(journal)
    ids = [e.event_id for e in everything]
    assert ids == sorted(ids)
    assert len(set(ids)) == len(ids) == 18
    assert len({e.position for e in everything}) == 18
    assert all(isinstance(e.created_at, int) for e in everything)
    if backend == "sqlite":
        assert [e.position for e in everything] == [str(i) for i in ids]
    assert journal.get_session(sid).last_seq == 10
    assert journal.get_session(sid).event_count == 10


def test_a_large_batch_returns_the_ids_it_was_stored_under(journal: Journal) -> None:
    # More rows than one INSERT statement carries on SQLite, with projection rows in between.
    sid = seed(journal)
    batch = [msg("user_message" if n % 2 else "assistant_message", f"m{n}") for n in range(150)]
    returned = journal.append_many(sid, batch)
    stored = journal.events(sid, after=returned[0].seq - 1, limit=1_000)
    assert returned == stored
    assert len({e.event_id for e in returned}) == 150
    assert [m.content for m in journal.messages(sid)[-150:]] == [f"m{n}" for n in range(150)]


def test_events_pages_by_seq(journal: Journal) -> None:
    sid = seed(journal)
    journal.append_many(sid, [msg("user_message", str(i)) for i in range(13)])
    everything = journal.events(sid, limit=1000)
    assert [e.seq for e in everything] == list(range(1, 21))
    seen, after = [], 0
    while page := journal.events(sid, after=after, limit=3):
        assert len(page) <= 3
        seen += page
        after = page[-1].seq
    assert seen == everything
    assert journal.events(sid, after=4, limit=2) == everything[4:6]
    assert journal.events(sid, after=20) == []
    assert journal.events(sid, after=99) == []
    for bad in ({"after": -1}, {"limit": 0}, {"limit": 10**9}, {"after": "3"}, {"before": 0}):
        with pytest.raises(InvalidArgument):
            journal.events(sid, **bad)


def test_events_read_backwards_from_the_end_with_before(journal: Journal) -> None:
    sid = seed(journal)
    journal.append_many(sid, [msg("user_message", str(i)) for i in range(13)])
    everything = journal.events(sid, limit=1000)
    assert journal.events(sid, before=21, limit=3) == everything[-3:], "the newest, oldest first"
    seen: list[Event] = []
    before = journal.get_session(sid).last_seq + 1
    while page := journal.events(sid, before=before, limit=4):
        seen = page + seen
        before = page[0].seq
    assert seen == everything
    assert journal.events(sid, after=5, before=9) == everything[5:8]
    assert journal.events(sid, before=1) == []


def test_events_all_pages_in_commit_order_within_the_tenant(journal: Journal) -> None:
    one = journal.create_session("one").session_id
    b = journal.for_tenant("b")
    theirs = b.create_session("theirs").session_id
    two = journal.create_session("two").session_id
    order = [(one, 1), (two, 1)]
    for i in range(5):
        sid = one if i % 2 else two
        journal.append(sid, "user_message", {"content": str(i)})
        b.append(theirs, "user_message", {"content": str(i)})
        order.append((sid, journal.get_session(sid).last_seq))
    journal.append_many(one, [msg("user_message", "x"), msg("assistant_message", "y")])
    order += [(one, 4), (one, 5)]
    feed = settled_feed(journal)
    assert [(e.session_id, e.seq) for e in feed] == order
    for size in (1, 2, 3, 100):
        seen: list[Any] = []
        after = None
        while page := journal.events_all(after=after, limit=size):
            assert len(page) <= size
            seen += page
            after = page[-1].position
        assert seen == feed
    for index, event in enumerate(feed):
        assert journal.events_all(after=event.position, limit=1000) == feed[index + 1 :]
    assert {e.session_id for e in settled_feed(b)} == {theirs}
    assert len(b.events_all()) == 6
    with pytest.raises(InvalidArgument):
        journal.events_all(after="not a position")
    with pytest.raises(InvalidArgument):
        journal.events_all(limit=0)


def test_feed_head_is_the_newest_committed_position_and_the_feed_reads_up_to_it(
    journal: Journal,
) -> None:
    assert journal.feed_head() is None
    assert list(committed_events(journal)) == []
    one = journal.create_session("one").session_id
    journal.append_many(one, [msg("user_message", "a"), msg("assistant_message", "b")])
    journal.for_tenant("b").create_session("theirs")
    feed = settled_feed(journal)
    assert len(feed) == 3
    assert journal.feed_head() == feed[-1].position
    assert journal.feed_head(after=feed[0].position) == feed[-1].position
    assert journal.feed_head(after=feed[-1].position) is None
    assert list(committed_events(journal)) == feed
    assert list(committed_events(journal, feed[0].position)) == feed[1:]
    assert list(committed_events(journal, feed[-1].position)) == []
    assert journal.for_tenant("c").feed_head() is None
    for bad in (5, "not a position"):
        with pytest.raises(InvalidArgument):
            journal.feed_head(after=bad)  # type: ignore[arg-type]


def test_position_keys_order_as_the_feed_does_and_refuse_what_is_no_position(
    journal: Journal, backend: str
) -> None:
    one = journal.create_session("one").session_id
    two = journal.create_session("two").session_id
    for i in range(4):
        # Single appends and batches: on PostgreSQL a batch shares one transaction id, so keys
        # must order events within a transaction as well as across transactions.
        journal.append(one if i % 2 else two, "user_message", {"content": str(i)})
        journal.append_many(one, [msg("user_message", "x"), msg("assistant_message", "y")])
    feed = settled_feed(journal)
    keys = [journal.position_key(e.position) for e in feed]
    assert keys == sorted(set(keys)), "keys do not ascend strictly in feed order"
    assert journal.position_key("") < keys[0]
    for index, event in enumerate(feed):
        # The feed after a position is exactly the events whose key is above its key.
        after = journal.events_all(after=event.position, limit=1000)
        assert after == [e for e, key in zip(feed, keys, strict=True) if key > keys[index]]
    if backend == "postgres":
        # One writer's transaction ids and event ids ascend together, so the feed above cannot
        # tell (tx, event_id) order from (event_id, tx) order; concurrent writers can, as
        # positions of the backend's own encoding show.
        from agentjournal.backends.postgres_rows import encode_position

        ordered = [encode_position(1, 2**64 - 1), encode_position(2, 0), encode_position(2, 1)]
        assert [journal.position_key(p) for p in ordered] == sorted(
            journal.position_key(p) for p in ordered
        )
    not_positions = ["not a position", "-1", "1.5", " 1", "1 ", "+1", "\u0663", "1" * 40]
    for bad in [*not_positions, str(2**127)]:
        with pytest.raises(InvalidArgument):
            journal.position_key(bad)
        with pytest.raises(InvalidArgument):
            journal.events_all(after=bad)
    for bad_type in (None, 5):
        with pytest.raises(InvalidArgument):
            journal.position_key(bad_type)  # type: ignore[arg-type]
    # Where the backends' ranges differ (past SQLite's 64-bit ids), the key refuses exactly
    # what the feed refuses: a key exists for every `after` the journal accepts.
    edge = str(2**63)
    try:
        journal.events_all(after=edge)
    except InvalidArgument:
        with pytest.raises(InvalidArgument):
            journal.position_key(edge)
    else:
        assert journal.position_key(edge) >= 0


def test_events_last_reads_the_newest_and_before_pages_back(journal: Journal) -> None:
    sid = seed(journal)
    journal.append_many(sid, [msg("user_message", str(i)) for i in range(13)])
    everything = journal.events(sid, limit=1000)
    assert journal.events(sid, last=3) == everything[-3:], "the newest, oldest first"
    assert journal.events(sid, last=1000) == everything
    assert journal.events(sid, before=10, last=4) == everything[5:9]
    assert journal.events(sid, after=15, last=50) == everything[15:]
    seen: list[Event] = []
    page = journal.events(sid, last=6)
    while page:
        seen = page + seen
        page = journal.events(sid, before=page[0].seq, last=6)
    assert seen == everything


def test_events_around_centres_the_page_on_a_seq(journal: Journal) -> None:
    sid = seed(journal)
    journal.append_many(sid, [msg("user_message", str(i)) for i in range(13)])
    everything = journal.events(sid, limit=1000)
    assert [e.seq for e in journal.events(sid, around=10, limit=5)] == [8, 9, 10, 11, 12]
    assert [e.seq for e in journal.events(sid, around=10, limit=4)] == [8, 9, 10, 11]
    assert [e.seq for e in journal.events(sid, around=10, limit=1)] == [10]
    # Where one side runs out, the other fills the page.
    assert [e.seq for e in journal.events(sid, around=2, limit=5)] == [1, 2, 3, 4, 5]
    assert [e.seq for e in journal.events(sid, around=20, limit=5)] == [16, 17, 18, 19, 20]
    assert journal.events(sid, around=99, limit=3) == everything[-3:]
    assert journal.events(sid, around=1, limit=1000) == everything


def test_events_refuses_nonsense_cursors(journal: Journal) -> None:
    sid = seed(journal)
    for bad in (
        {"before": 5, "after": 5},
        {"before": 3, "after": 7},
        {"before": -1},
        {"before": 2.5},
        {"before": True},
        {"last": 0},
        {"last": -3},
        {"last": "7"},
        {"last": 10**9},
        {"last": 3, "limit": 3},
        {"around": 0},
        {"around": "4"},
        {"around": 4, "before": 6},
        {"around": 4, "after": 1},
        {"around": 4, "last": 2},
    ):
        with pytest.raises(InvalidArgument):
            journal.events(sid, **bad)
    with pytest.raises(SessionNotFound):
        journal.events("sess_missing", last=5)
    with pytest.raises(SessionNotFound):
        journal.events("sess_missing", around=5)
