"""Live streams: `subscribe` and `subscribe_all` yield the backlog after a cursor, then every new
event as it commits, in order, with no gap and no duplicate, also when another process wrote it.

Each subscriber runs on a thread until a sentinel event (`test.stop`) arrives, so a stream that
repeated or added anything at the end would show it; every wait is bounded by WAIT. In-process
tests subscribe with a poll interval longer than WAIT: they pass only if a commit wakes the
subscriber, as DESIGN.md promises, instead of the next poll finding it.
"""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from agentjournal import Event, InvalidArgument, Journal, SessionNotFound

WAIT = 30.0
NO_POLL = 2 * WAIT  # seconds between polls: longer than any test may wait
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

    def wait_for(self, count: int) -> None:
        """Wait until at least `count` events arrived."""
        deadline = time.monotonic() + WAIT
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
    cursor = journal.events_all(limit=5)[-1].position

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
def test_subscribers_see_commits_of_another_process(db_path: Path) -> None:
    """Another process's commits cannot wake us: polling finds them, without gap or duplicate.
    Both streams must have everything the child wrote before this process writes anything."""
    with Journal.open(db_path) as journal:
        sid = journal.create_session("shared").session_id
        cursor = journal.get_session(sid).last_position
        session_stream = Collector(journal.subscribe(sid, poll_interval=0.02))
        global_stream = Collector(journal.subscribe_all(after=cursor, poll_interval=0.02))
        child = subprocess.run(
            [
                sys.executable,
                str(WRITER),
                str(db_path),
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

    check_stream(events)
    assert events == journal_events(db_path, sid)
    assert [e.seq for e in events] == list(range(1, len(on_sid) + 3))
    assert sorted([e.event_id, e.seq, e.type] for e in events[1:-1]) == sorted(
        ack[:1] + ack[2:4] for ack in on_sid
    )
    check_stream(feed)
    assert sorted(e.event_id for e in feed[:-1]) == sorted(ack[0] for ack in acks)
    assert [e.event_id for e in feed] == sorted(e.event_id for e in feed)


def journal_events(db_path: Path, session_id: str) -> list[Event]:
    with Journal.open(db_path) as journal:
        return journal.events(session_id, limit=1000)


def test_a_waiting_subscriber_holds_no_read_transaction(db_path: Path) -> None:
    """While subscribers wait, a checkpoint can move the whole WAL into the file and truncate it:
    no read transaction is held open across the wait."""
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
