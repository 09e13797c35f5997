"""Live streams: `subscribe` and `subscribe_all` yield the backlog after a cursor, then every new
event as it commits, in order, with no gap and no duplicate, also when another process wrote it.

Each subscriber runs on a thread until a sentinel event (`test.stop`) arrives, so a stream that
repeated or added anything at the end would show it; every wait is bounded by WAIT. In-process
tests subscribe with a poll interval longer than WAIT: they pass only if a commit wakes the
subscriber, as the docs promise, instead of the next poll finding it. On PostgreSQL the same
holds for commits made through another instance or process (LISTEN/NOTIFY); on SQLite those are
found by polling.
"""

from __future__ import annotations

import json
import secrets
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import psycopg
import pytest

from agentjournal import Event, InvalidArgument, Journal, SessionNotFound
from agentjournal.live import PAGE_SIZE, follow_feed, follow_session
from postgres_fixtures import ADMIN_URL

WAIT = 30.0
NO_POLL = 2 * WAIT  # seconds between polls: longer than any test may wait
NOTIFIED = 10.0  # seconds a notified subscriber may take, far below its poll interval
LONG_POLL = 3 * NOTIFIED  # a poll this rare never comes within NOTIFIED: only a wake-up can
STOP = "test.stop"
WRITER = Path(__file__).parent / "helpers" / "writer.py"


class Collector:
    """Consumes a subscription on its own thread, until `until(events)` or the stream ends."""

    def __init__(
        self,
        stream: Iterator[Event],
        until: Callable[[list[Event]], bool] = lambda events: events[-1].type == STOP,
    ) -> None:
        self.stream = stream
        self.until = until
        self.events: list[Event] = []
        self.error: Exception | None = None
        self.ended = False
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            for event in self.stream:
                self.events.append(event)
                if self.until(self.events):
                    return
            self.ended = True
        except Exception as exc:
            self.error = exc
        finally:
            self.done.set()

    def wait_for(self, count: int, within: float = WAIT) -> None:
        """Wait until at least `count` events arrived."""
        deadline = time.monotonic() + within
        while len(self.events) < count and not self.done.is_set():
            assert time.monotonic() < deadline, f"stalled at {len(self.events)} of {count} events"
            time.sleep(0.005)

    def result(self) -> list[Event]:
        assert self.done.wait(WAIT), f"subscriber stalled after {len(self.events)} events"
        if self.error is not None:
            raise self.error
        return self.events


def stop(journal: Journal, session_id: str) -> Event:
    return journal.append(session_id, STOP, {})


def write(journal: Journal, session_id: str, count: int, label: str) -> list[Event]:
    """`count` appends of one event or a batch of two, every event tagged."""
    stored: list[Event] = []
    for n in range(count):
        tag = f"{label}/{n}"
        if n % 3 == 2:
            stored += journal.append_many(
                session_id,
                [
                    {"type": "user_message", "payload": {"content": tag, "tag": f"{tag}/0"}},
                    {"type": "test.note", "payload": {"tag": f"{tag}/1"}},
                ],
            )
        else:
            stored.append(journal.append(session_id, "user_message", {"content": tag, "tag": tag}))
    return stored


def in_thread(body: Callable[[], object]) -> threading.Thread:
    thread = threading.Thread(target=body, daemon=True)
    thread.start()
    return thread


def check_stream(events: list[Event]) -> None:
    ids = [event.event_id for event in events]
    assert len(ids) == len(set(ids)), "an event was yielded twice"


# -- one session ---------------------------------------------------------------------------------


def test_backlog_then_live_events_in_order(journal: Journal) -> None:
    sid = journal.create_session("live").session_id
    write(journal, sid, 5, "backlog")
    backlog = journal.get_session(sid).last_seq
    collector = Collector(journal.subscribe(sid, after=0, poll_interval=NO_POLL))
    collector.wait_for(backlog)
    assert [e.seq for e in collector.events] == list(range(1, backlog + 1))

    writer = in_thread(lambda: write(journal, sid, 30, "live"))
    writer.join(WAIT)
    stop(journal, sid)
    events = collector.result()
    check_stream(events)
    assert events == journal.events(sid, limit=1000)
    assert [e.seq for e in events] == list(range(1, len(events) + 1))


def test_resume_after_event_4_returns_exactly_what_follows(journal: Journal) -> None:
    """The seed's scenario: resuming after the second user message (seq 4) yields the tool call,
    its result and the final reply, then what comes next, and nothing before."""
    sid = journal.create_session("订单客服", system_prompt="你是订单客服助手。").session_id
    journal.append(sid, "user_message", {"content": "你好"})
    journal.append(sid, "assistant_message", {"content": "你好，有什么可以帮你？"})
    journal.append(sid, "user_message", {"content": "帮我查一下订单数量"})
    journal.append(
        sid, "tool_call", {"call_id": "c1", "name": "query_order_count", "arguments": "{}"}
    )
    journal.append(sid, "tool_result", {"call_id": "c1", "content": "42"})
    journal.append(sid, "assistant_message", {"content": "你当前有 42 个订单。"})

    collector = Collector(journal.subscribe(sid, after=4, poll_interval=NO_POLL))
    collector.wait_for(3)
    stop(journal, sid)
    events = collector.result()
    assert [(e.seq, e.type) for e in events] == [
        (5, "tool_call"),
        (6, "tool_result"),
        (7, "assistant_message"),
        (8, STOP),
    ]
    assert events == journal.events(sid, after=4)


def test_after_the_last_seq_yields_only_new_events(journal: Journal) -> None:
    sid = journal.create_session("tail").session_id
    write(journal, sid, 4, "old")
    last = journal.get_session(sid).last_seq
    collector = Collector(journal.subscribe(sid, after=last, poll_interval=NO_POLL))
    new = write(journal, sid, 4, "new")
    sentinel = stop(journal, sid)
    assert collector.result() == [*new, sentinel]


def test_backlog_longer_than_a_page(journal: Journal) -> None:
    sid = journal.create_session("long").session_id
    for n in range(6):
        journal.append_many(
            sid, [{"type": "test.note", "payload": {"tag": f"{n}/{i}"}} for i in range(130)]
        )
    stop(journal, sid)
    stored = journal.events(sid, limit=1000)
    assert len(stored) == 1 + 6 * 130 + 1
    assert len(stored) - 123 > PAGE_SIZE  # both streams read more than one page
    from_start = Collector(journal.subscribe(sid, poll_interval=NO_POLL))
    from_middle = Collector(journal.subscribe(sid, after=123, poll_interval=NO_POLL))
    assert from_start.result() == stored
    assert from_middle.result() == stored[123:]


def test_stream_ends_after_delete_session(journal: Journal) -> None:
    sid = journal.create_session("ending").session_id
    write(journal, sid, 3, "before")
    live = Collector(journal.subscribe(sid, poll_interval=NO_POLL), until=lambda events: False)
    live.wait_for(journal.get_session(sid).last_seq)
    journal.delete_session(sid)
    events = live.result()
    assert live.ended
    assert events == journal.events(sid)
    assert (events[-1].type, events[-1].payload) == ("session_updated", {"status": "deleted"})

    # A stream opened on a deleted session yields the history and ends too.
    late = Collector(journal.subscribe(sid, after=2, poll_interval=NO_POLL), lambda events: False)
    assert late.result() == events[2:]
    assert late.ended

    # A client that reconnects after the deleting event is told the stream is over at once.
    deleted_at = events[-1].seq
    resumed = Collector(
        journal.subscribe(sid, after=deleted_at, poll_interval=NO_POLL), lambda events: False
    )
    assert resumed.result() == []
    assert resumed.ended


def test_a_deleted_session_of_whole_pages_ends_at_its_deletion(journal: Journal) -> None:
    # The deletion is the last event of a full page: the stream ends on it, not on a short page.
    sid = journal.create_session("pages").session_id
    remaining = 2 * PAGE_SIZE - 2  # between session_created and the deletion
    while remaining:
        batch = min(remaining, 100)
        journal.append_many(sid, [{"type": "test.note"} for _ in range(batch)])
        remaining -= batch
    journal.delete_session(sid)
    stored = journal.events(sid, limit=2 * PAGE_SIZE + 1)
    assert len(stored) == 2 * PAGE_SIZE
    assert stored[-1].ends_session_stream
    for after in (0, PAGE_SIZE, 2 * PAGE_SIZE - 1):
        stream = Collector(
            journal.subscribe(sid, after=after, poll_interval=NO_POLL), lambda _: False
        )
        assert stream.result() == stored[after:]
        assert stream.ended


def note(seq: int, type: str = "test.note", payload: dict[str, str] | None = None) -> Event:
    return Event(seq, "sess_pages", seq, type, payload or {}, 0, position=str(seq))


def test_a_stream_reads_on_after_a_full_page_and_waits_after_a_short_one() -> None:
    stream = follow_session(0, deleted=False)
    full = [note(seq) for seq in range(1, PAGE_SIZE + 1)]
    assert stream.take(full) == full
    assert (stream.cursor, stream.waits, stream.ended) == (PAGE_SIZE, False, False)
    assert stream.take([note(PAGE_SIZE + 1)]) == [note(PAGE_SIZE + 1)]
    assert (stream.cursor, stream.waits, stream.ended) == (PAGE_SIZE + 1, True, False)
    assert stream.take([]) == []
    assert (stream.cursor, stream.waits, stream.ended) == (PAGE_SIZE + 1, True, False)

    feed = follow_feed(None)
    assert feed.take(full[:3]) == full[:3]
    assert (feed.cursor, feed.waits, feed.ended) == ("3", True, False)


def test_a_session_stream_ends_at_the_deletion_or_once_caught_up_with_a_deleted_session() -> None:
    deletion = note(3, "session_updated", {"status": "deleted"})
    page = [note(1), note(2), deletion, note(4)]
    stream = follow_session(0, deleted=False)
    assert stream.take(page) == page[:3]
    assert (stream.cursor, stream.ended, stream.waits) == (3, True, False)

    # Deleted before the stream began: a full page reads on, the short page after it ends.
    deleted = follow_session(0, deleted=True)
    full = [note(seq) for seq in range(1, PAGE_SIZE + 1)]
    assert deleted.take(full) == full
    assert not deleted.ended
    assert deleted.take([]) == []
    assert (deleted.cursor, deleted.ended, deleted.waits) == (PAGE_SIZE, True, False)

    # The feed of a tenant goes on past any session's deletion.
    feed = follow_feed(None)
    assert feed.take(page) == page
    assert (feed.cursor, feed.ended, feed.waits) == ("4", False, True)


def test_subscribe_rejects_what_it_cannot_follow(journal: Journal) -> None:
    sid = journal.create_session("mine").session_id
    other = journal.for_tenant("other")
    with pytest.raises(SessionNotFound):
        next(journal.subscribe("sess_missing"))
    with pytest.raises(SessionNotFound):
        next(other.subscribe(sid))
    with pytest.raises(InvalidArgument):
        next(journal.subscribe(sid, after=-1))
    with pytest.raises(InvalidArgument):
        next(journal.subscribe_all(after="not a position"))


# -- the global feed ------------------------------------------------------------------------------


def test_subscribe_all_follows_commit_order_within_the_tenant(journal: Journal) -> None:
    other = journal.for_tenant("other")
    a = journal.create_session("a").session_id
    b = journal.create_session("b").session_id
    c = other.create_session("c").session_id
    write(journal, a, 3, "a-old")
    write(other, c, 3, "c-old")
    write(journal, b, 3, "b-old")
    cursor = journal.get_session(a).last_position  # b's events and c's come after it

    mine = Collector(journal.subscribe_all(after=cursor, poll_interval=NO_POLL))
    theirs = Collector(other.subscribe_all(poll_interval=NO_POLL))
    writers = [
        in_thread(lambda: write(journal, a, 25, "a")),
        in_thread(lambda: write(journal, b, 25, "b")),
        in_thread(lambda: write(other, c, 25, "c")),
    ]
    for writer in writers:
        writer.join(WAIT)
    stop(other, c)
    stop(journal, a)

    events = mine.result()
    check_stream(events)
    assert events == journal.events_all(after=cursor, limit=1000)
    assert {e.session_id for e in events} == {a, b}

    their_events = theirs.result()
    assert their_events == other.events_all(limit=1000)
    assert {e.session_id for e in their_events} == {c}


@pytest.mark.parametrize("feed", ["subscribe", "subscribe_all"])
def test_subscriber_from_zero_while_four_threads_append(journal: Journal, feed: str) -> None:
    """A subscriber that starts with the writers gets everything exactly once."""
    sessions = [journal.create_session(f"s{n}").session_id for n in range(4)]
    if feed == "subscribe":
        sessions = [sessions[0]] * 4
        stream = journal.subscribe(sessions[0], after=0, poll_interval=NO_POLL)
    else:
        stream = journal.subscribe_all(after=None, poll_interval=NO_POLL)
    barrier = threading.Barrier(5)

    def run(n: int) -> None:
        barrier.wait(WAIT)
        write(journal, sessions[n], 60, f"w{n}")

    writers = [in_thread(lambda n=n: run(n)) for n in range(4)]
    barrier.wait(WAIT)
    collector = Collector(stream)
    for writer in writers:
        writer.join(WAIT)
    stop(journal, sessions[0])
    events = collector.result()
    check_stream(events)
    if feed == "subscribe":
        assert events == journal.events(sessions[0], limit=1000)
        assert [e.seq for e in events] == list(range(1, len(events) + 1))
    else:
        assert events == journal.events_all(limit=10_000)
    assert len([e for e in events if "tag" in e.payload]) == 4 * (40 + 20 * 2)


# -- across processes -----------------------------------------------------------------------------


@pytest.mark.slow
def test_subscribers_see_commits_of_another_process(backend: str, journal_url: str) -> None:
    """Another process's commits reach both streams without gap or duplicate, before this
    process writes anything. On SQLite they cannot wake us: polling finds them. On PostgreSQL
    the child's NOTIFYs wake us: the poll interval is longer than any wait here."""
    poll = 0.02 if backend == "sqlite" else NO_POLL
    with Journal.open(journal_url) as journal:
        sid = journal.create_session("shared").session_id
        cursor = journal.get_session(sid).last_position
        session_stream = Collector(journal.subscribe(sid, poll_interval=poll))
        global_stream = Collector(journal.subscribe_all(after=cursor, poll_interval=poll))
        child = subprocess.run(
            [
                sys.executable,
                str(WRITER),
                journal_url,
                "child",
                "--shared",
                sid,
                "--threads",
                "2",
                "--ops",
                "20",
                "--delay",
                "0.003",
            ],
            capture_output=True,
            text=True,
            timeout=WAIT,
            check=False,
        )
        assert child.returncode == 0, child.stderr
        result = json.loads(child.stdout)
        assert result["errors"] == []
        acks = result["acks"]
        on_sid = [ack for ack in acks if ack[1] == sid]
        assert len(on_sid) == 2 * (6 * 1 + 4 * 3)  # even ops: 6 single events, 4 batches of 3

        session_stream.wait_for(1 + len(on_sid))
        global_stream.wait_for(len(acks))
        stop(journal, sid)
        events = session_stream.result()
        feed = global_stream.result()
        stored_feed = journal.events_all(after=cursor, limit=1000)

    check_stream(events)
    assert events == journal_events(journal_url, sid)
    assert [e.seq for e in events] == list(range(1, len(on_sid) + 3))
    assert sorted([e.event_id, e.seq, e.type] for e in events[1:-1]) == sorted(
        ack[:1] + ack[2:4] for ack in on_sid
    )
    check_stream(feed)
    assert sorted(e.event_id for e in feed[:-1]) == sorted(ack[0] for ack in acks)
    assert feed == stored_feed  # in the feed's (commit) order
    for session_id in {e.session_id for e in feed}:
        seqs = [e.seq for e in feed if e.session_id == session_id]
        assert seqs == sorted(seqs), f"{session_id} out of seq order in the feed"
    if backend == "sqlite":  # there the position is the event_id
        assert [e.event_id for e in feed] == sorted(e.event_id for e in feed)


def journal_events(url: str, session_id: str) -> list[Event]:
    with Journal.open(url) as journal:
        return journal.events(session_id, limit=1000)


def test_a_waiting_subscriber_holds_no_read_transaction(backend: str, db_path: Path) -> None:
    """While subscribers wait, a checkpoint can move the whole WAL into the file and truncate it:
    no read transaction is held open across the wait."""
    if backend != "sqlite":
        pytest.skip("WAL checkpoint of the SQLite file (PostgreSQL: the test after this one)")
    with Journal.open(db_path) as journal:
        sid = journal.create_session("idle").session_id
        write(journal, sid, 20, "old")
        last = journal.get_session(sid)
        session_stream = Collector(journal.subscribe(sid, poll_interval=NO_POLL))
        global_stream = Collector(journal.subscribe_all(poll_interval=NO_POLL))
        session_stream.wait_for(last.last_seq)
        global_stream.wait_for(last.last_seq)

        raw = sqlite3.connect(db_path, timeout=1.0)
        try:
            busy, _, _ = raw.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
        finally:
            raw.close()
        assert busy == 0, "a subscriber holds a read transaction open while it waits"
        assert db_path.with_name(db_path.name + "-wal").stat().st_size == 0

        stop(journal, sid)
        assert len(session_stream.result()) == last.last_seq + 1
        assert len(global_stream.result()) == last.last_seq + 1


def test_a_waiting_subscriber_holds_no_transaction_on_postgres(
    backend: str, journal_url: str
) -> None:
    """PostgreSQL's side of the promise above: while subscribers wait, none of the instance's
    connections (pool and LISTEN) is inside a transaction, so none holds back vacuum or the
    global feed of other instances."""
    if backend != "postgres":
        pytest.skip("server sessions of PostgreSQL (SQLite: the test before this one)")
    name = f"aj-idle-{secrets.token_hex(6)}"  # tells this instance's connections from others'
    with Journal.open(f"{journal_url}&application_name={name}") as journal:
        sid = journal.create_session("idle").session_id
        write(journal, sid, 20, "old")
        last = journal.get_session(sid)
        # Polling too (every 0.2 s, the default): neither waiting nor polling holds a transaction.
        session_stream = Collector(journal.subscribe(sid))
        global_stream = Collector(journal.subscribe_all())
        session_stream.wait_for(last.last_seq)
        global_stream.wait_for(last.last_seq)

        with psycopg.connect(ADMIN_URL, autocommit=True) as admin:
            for _ in range(20):  # a transaction held across the wait would show in every look
                states = [
                    row[0]
                    for row in admin.execute(
                        "SELECT state FROM pg_stat_activity WHERE application_name = %s", (name,)
                    )
                ]
                assert states, "no connection of the journal found"
                assert not [s for s in states if s.startswith("idle in transaction")], states
                time.sleep(0.02)

        stop(journal, sid)
        assert len(session_stream.result()) == last.last_seq + 1
        assert len(global_stream.result()) == last.last_seq + 1


# -- another instance on the same PostgreSQL schema -----------------------------------------------


def only_postgres(backend: str) -> None:
    if backend != "postgres":
        pytest.skip(
            "SQLite has no wake-up across connections: other processes' commits are found by"
            " polling (test_subscribers_see_commits_of_another_process)"
        )


def test_a_commit_through_another_instance_wakes_both_streams(
    backend: str, journal_url: str
) -> None:
    """Two `Journal`s on one schema, as two servers would be: each has its own pool and its own
    LISTEN connection. The subscribers poll every LONG_POLL seconds, so only the writer's NOTIFY
    can bring them each event within NOTIFIED. The reader itself never writes."""
    only_postgres(backend)
    with Journal.open(journal_url) as reader, Journal.open(journal_url) as writer:
        sid = writer.create_session("elsewhere").session_id
        start = reader.get_session(sid).last_position
        session_stream = Collector(reader.subscribe(sid, poll_interval=LONG_POLL))
        global_stream = Collector(reader.subscribe_all(after=start, poll_interval=LONG_POLL))
        session_stream.wait_for(1, within=NOTIFIED)  # the backlog: session_created
        sent: list[Event] = []
        for n in range(5):
            time.sleep(0.1)  # let both go back to waiting: the wake-up, not a read, must find it
            sent.append(writer.append(sid, "user_message", {"content": f"from afar {n}"}))
            session_stream.wait_for(2 + n, within=NOTIFIED)
            global_stream.wait_for(1 + n, within=NOTIFIED)
        sent.append(stop(writer, sid))
        assert session_stream.result()[1:] == sent
        assert global_stream.result() == sent


def test_without_listen_another_instances_commits_are_found_by_polling(
    backend: str, journal_url: str
) -> None:
    """Behind a transaction-mode pooler (`pooler=transaction`) an instance cannot LISTEN: its
    subscribers find other instances' commits by polling, still without gap or duplicate."""
    only_postgres(backend)
    with (
        Journal.open(f"{journal_url}&pooler=transaction") as reader,
        Journal.open(journal_url) as writer,
    ):
        sid = writer.create_session("polled").session_id
        start = reader.get_session(sid).last_position
        session_stream = Collector(reader.subscribe(sid, poll_interval=0.02))
        global_stream = Collector(reader.subscribe_all(after=start, poll_interval=0.02))
        writers = [in_thread(lambda n=n: write(writer, sid, 10, f"w{n}")) for n in range(2)]
        for thread in writers:
            thread.join(WAIT)
        sentinel = stop(writer, sid)
        events = session_stream.result()
        feed = global_stream.result()
        stored = writer.events(sid, limit=1000)
    check_stream(events)
    assert events == stored
    assert feed == stored[1:]
    assert feed[-1] == sentinel


def test_a_feed_held_back_by_an_older_transaction_wakes_when_it_ends(
    backend: str, journal_url: str
) -> None:
    """The global feed shows a commit only once every transaction older than it has ended
    (docs/postgres.md), anywhere in the cluster. A subscriber woken by the NOTIFY while such a
    transaction runs finds nothing yet; when it ends, the subscriber must see the event without
    waiting for its next poll. Session streams are not held back."""
    only_postgres(backend)
    with Journal.open(journal_url) as reader, Journal.open(journal_url) as writer:
        sid = writer.create_session("held back").session_id
        start = reader.get_session(sid).last_position
        session_stream = Collector(reader.subscribe(sid, poll_interval=LONG_POLL))
        global_stream = Collector(
            reader.subscribe_all(after=start, poll_interval=LONG_POLL), lambda events: True
        )
        session_stream.wait_for(1, within=NOTIFIED)
        with psycopg.connect(ADMIN_URL) as other:  # another application's write transaction
            other.execute("SELECT pg_current_xact_id()")
            sent = writer.append(sid, "user_message", {"content": "behind an older transaction"})
            session_stream.wait_for(2, within=NOTIFIED)
            time.sleep(0.3)  # the same wake-up reached the global stream: let it look, in vain
            assert global_stream.events == []
            other.rollback()
        global_stream.wait_for(1, within=NOTIFIED)
        assert global_stream.result() == [sent]
        sentinel = stop(writer, sid)
        assert session_stream.result()[1:] == [sent, sentinel]
