"""Concurrent writers on one database: threads of one process (meeting in group commit) and
separate processes or `Journal`s (meeting at SQLite's write lock, or in PostgreSQL at the rows they
touch). Nothing is lost or stored twice, seqs stay gapless and `verify()` is clean; an
`expected_seq` race has exactly one winner; and a rejected append that shares a commit with others
fails alone. Every test runs on every backend, but those about SQLite's file lock."""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from agentjournal import (
    Conflict,
    Event,
    Journal,
    SessionClosed,
    SessionNotFound,
    UnknownToolCall,
)
from agentjournal.backends.postgres_rows import decode_position
from expected import settled_feed
from helpers.private import private_journal
from postgres_fixtures import fresh_schema, owner_url_for

WAIT = 60.0  # seconds: the most any wait may take before the test fails instead of hanging
WRITER = Path(__file__).parent / "helpers" / "writer.py"


def run_together(count: int, body: Callable[[int], None]) -> list[str]:
    """Run body(0..count-1) on `count` threads released at once; return what they raised."""
    barrier = threading.Barrier(count)
    errors: list[str] = []

    def run(index: int) -> None:
        try:
            barrier.wait(WAIT)
            body(index)
        except Exception as exc:
            errors.append(f"thread {index}: {type(exc).__name__}: {exc}")

    threads = [threading.Thread(target=run, args=(i,), daemon=True) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(WAIT)
    assert not any(thread.is_alive() for thread in threads), "a writer thread hung"
    return errors


def check_journal(journal: Journal, acknowledged: list[Event]) -> list[Event]:
    """Every acknowledged event is stored exactly as returned, exactly once; nothing else carries
    a tag; every session's seqs are 1..n; the projections agree with the journal."""
    events = settled_feed(journal)
    by_id = {event.event_id: event for event in events}
    assert len(by_id) == len(events)
    acked_ids = [event.event_id for event in acknowledged]
    assert len(acked_ids) == len(set(acked_ids)), "one event_id was handed out twice"
    for event in acknowledged:
        assert by_id.get(event.event_id) == event, f"acknowledged {event} is not stored as such"

    tags = Counter(event.payload["tag"] for event in events if "tag" in event.payload)
    assert [tag for tag, n in tags.items() if n > 1] == [], "events stored twice"
    assert set(tags) == {event.payload["tag"] for event in acknowledged if "tag" in event.payload}

    seqs: dict[str, list[int]] = defaultdict(list)
    for event in events:
        seqs[event.session_id].append(event.seq)
    for session_id, found in seqs.items():
        assert sorted(found) == list(range(1, len(found) + 1)), f"seq gap in {session_id}"
        session = journal.get_session(session_id)
        assert (session.last_seq, session.event_count) == (len(found), len(found))

    report = journal.verify()
    assert report.ok, report.to_dict()
    assert report.events_checked == len(events)
    return events


def batch(tag: str) -> list[dict[str, Any]]:
    """A model response with one tool call and its result, each event tagged."""
    return [
        {"type": "assistant_message", "payload": {"content": tag, "tag": f"{tag}/0"}},
        {
            "type": "tool_call",
            "payload": {"call_id": tag, "name": "lookup", "arguments": "{}", "tag": f"{tag}/1"},
        },
        {"type": "tool_result", "payload": {"call_id": tag, "content": "42", "tag": f"{tag}/2"}},
    ]


# -- threads of one process ---------------------------------------------------------------------


@pytest.fixture(params=["one journal", "a journal per thread"])
def journals(request: pytest.FixtureRequest, journal_url: str) -> Iterator[list[Journal]]:
    """16 handles on one database: the same Journal (group commit) or 16 separate ones (each
    with a storage of its own, so they meet at SQLite's lock, or at PostgreSQL's row locks,
    like processes do; `Journal.open` would hand them all one storage)."""
    if request.param == "one journal":
        with Journal.open(journal_url) as journal:
            yield [journal] * 16
        return
    opened = [private_journal(journal_url) for _ in range(16)]
    try:
        yield opened
    finally:
        for journal in opened:
            journal.close()


def test_sixteen_threads_lose_and_double_nothing(journals: list[Journal]) -> None:
    shared = [journals[0].create_session(f"shared {n}").session_id for n in range(3)]
    acknowledged: dict[int, list[Event]] = defaultdict(list)

    def write(thread: int) -> None:
        journal = journals[thread]
        own = journal.create_session(f"thread {thread}")
        acknowledged[thread] += journal.events(own.session_id)
        for op in range(30):
            sid = own.session_id if op % 2 else shared[op % 3]
            tag = f"{thread}/{op}"
            if op % 4 == 0:
                stored = journal.append_many(sid, batch(tag))
                assert [e.seq for e in stored] == list(range(stored[0].seq, stored[0].seq + 3))
            else:
                stored = [journal.append(sid, "user_message", {"content": tag, "tag": tag})]
            assert {e.session_id for e in stored} == {sid}
            acknowledged[thread] += stored

    assert run_together(16, write) == []
    mine = [event for events in acknowledged.values() for event in events]
    assert len(mine) == 16 * (1 + 22 + 8 * 3)
    events = check_journal(journals[0], mine)
    assert len(events) == len(mine) + len(shared)


def test_expected_seq_race_has_exactly_one_winner(journal: Journal) -> None:
    """16 threads send the same expected_seq: one appends, 15 get Conflict, nothing else is
    written. Repeated, with single events and batches mixed."""
    sid = journal.create_session("race").session_id
    for round_ in range(8):
        last = journal.get_session(sid).last_seq
        won, conflicts = expected_seq_race(journal, sid, last, f"{round_}")
        assert (len(won), len(conflicts)) == (1, 15), f"round {round_}"
        assert journal.events(sid, after=last) == won[0]
        assert won[0][0].seq == last + 1
    check_journal(journal, journal.events(sid, limit=1000))


def expected_seq_race(
    journal: Journal, sid: str, last: int, round_: str
) -> tuple[list[list[Event]], list[int]]:
    won: list[list[Event]] = []
    conflicts: list[int] = []

    def race(thread: int) -> None:
        tag = f"{round_}/{thread}"
        try:
            if thread % 2:
                won.append(journal.append_many(sid, batch(tag), expected_seq=last))
            else:
                payload = {"content": tag, "tag": tag}
                won.append([journal.append(sid, "user_message", payload, expected_seq=last)])
        except Conflict:
            conflicts.append(thread)

    assert run_together(16, race) == []
    return won, conflicts


def test_same_idempotency_key_from_sixteen_threads_writes_once(journals: list[Journal]) -> None:
    """16 retries of one create and one append at once, through one `Journal` or one each (as
    16 processes would send them): every one gets the same session and the same event back."""
    journal = journals[0]
    created: list[str] = []
    appended: list[Event] = []

    def retry(thread: int) -> None:
        mine = journals[thread]
        session = mine.create_session("once", idempotency_key="create-once")
        created.append(session.session_id)
        appended.append(
            mine.append(
                session.session_id, "user_message", {"content": "hi"}, idempotency_key="say-once"
            )
        )

    assert run_together(16, retry) == []
    assert len(set(created)) == 1
    assert all(event == appended[0] for event in appended)
    assert [s.session_id for s in journal.sessions()] == created[:1]
    assert [e.seq for e in journal.events(created[0])] == [1, 2]
    assert journal.verify().ok


def test_a_rejected_append_in_a_shared_commit_fails_alone(backend: str, journal: Journal) -> None:
    """Valid and invalid appends land in one group commit (a held transaction makes them queue
    up behind it): each invalid one raises its own error and writes nothing, every valid one is
    stored, and contended pairs (same call_id, same session_id) have exactly one winner. (On
    PostgreSQL only appends share transactions: the creates here commit alone, concurrently.)"""
    for round_ in range(3):
        shared_commit_round(backend, journal, f"r{round_}")


def shared_commit_round(backend: str, journal: Journal, r: str) -> None:
    a = journal.create_session("a").session_id
    b = journal.create_session("b").session_id
    gone = journal.create_session("gone").session_id
    journal.delete_session(gone)
    journal.append(a, "tool_call", {"call_id": "open", "name": "f", "arguments": "{}"})
    journal.append(a, "tool_call", {"call_id": "done", "name": "f", "arguments": "{}"})
    journal.append(a, "tool_result", {"call_id": "done", "content": "1"})
    journal.append(a, "user_message", {"content": "hello"}, idempotency_key="k")
    before = settled_feed(journal)

    def msg(tag: str) -> dict[str, Any]:
        return {"content": tag, "tag": tag}

    requests: dict[str, tuple[Callable[[], Any], type[Exception] | None]] = {
        "ok-a": (lambda: journal.append(a, "user_message", msg(f"{r}ok-a")), None),
        "ok-b": (lambda: journal.append(b, "user_message", msg(f"{r}ok-b")), None),
        "ok-batch": (lambda: journal.append_many(b, batch(f"{r}ok-batch")), None),
        "ok-custom": (lambda: journal.append(a, "test.note", {"tag": f"{r}ok-custom"}), None),
        "ok-result": (
            lambda: journal.append(
                a, "tool_result", {"call_id": "open", "content": "2", "tag": f"{r}ok-result"}
            ),
            None,
        ),
        "ok-retry": (
            lambda: journal.append(a, "user_message", {"content": "hello"}, idempotency_key="k"),
            None,
        ),
        "ok-create": (lambda: journal.create_session(f"{r}ok-create"), None),
        "bad-seq": (
            lambda: journal.append(a, "user_message", msg(f"{r}bad-seq"), expected_seq=999),
            Conflict,
        ),
        "bad-result": (
            lambda: journal.append(
                b, "tool_result", {"call_id": "ghost", "content": "", "tag": f"{r}bad-result"}
            ),
            UnknownToolCall,
        ),
        "bad-reused-call": (
            lambda: journal.append(
                a,
                "tool_call",
                {"call_id": "done", "name": "f", "arguments": "", "tag": f"{r}bad-reused"},
            ),
            Conflict,
        ),
        "bad-second-result": (
            lambda: journal.append(
                a, "tool_result", {"call_id": "done", "content": "", "tag": f"{r}bad-second"}
            ),
            Conflict,
        ),
        "bad-deleted": (
            lambda: journal.append(gone, "user_message", msg(f"{r}bad-deleted")),
            SessionClosed,
        ),
        "bad-missing": (
            lambda: journal.append("sess_missing", "user_message", msg(f"{r}bad-missing")),
            SessionNotFound,
        ),
        "bad-batch": (
            lambda: journal.append_many(
                a,
                [
                    {"type": "user_message", "payload": msg(f"{r}bad-batch/0")},
                    {
                        "type": "tool_result",
                        "payload": {"call_id": "ghost", "content": "", "tag": f"{r}bad-b/1"},
                    },
                ],
            ),
            UnknownToolCall,
        ),
        "bad-key": (
            lambda: journal.append(a, "user_message", msg(f"{r}bad-key"), idempotency_key="k"),
            Conflict,
        ),
        "bad-session-id": (lambda: journal.create_session("x", session_id=a), Conflict),
    }
    race_call = {"call_id": "race", "name": "f", "arguments": "{}"}
    contended: dict[str, Callable[[], Any]] = {
        "call-1": lambda: journal.append(b, "tool_call", {**race_call, "tag": f"{r}call-1"}),
        "call-2": lambda: journal.append(b, "tool_call", {**race_call, "tag": f"{r}call-2"}),
        "id-1": lambda: journal.create_session("id-1", session_id=f"sess-race-{r}"),
        "id-2": lambda: journal.create_session("id-2", session_id=f"sess-race-{r}"),
    }
    names = [*requests, *contended]
    outcomes: dict[str, Any] = {}

    held = threading.Event()
    release = threading.Event()

    def hold(tx: Any, items: list[None]) -> list[None]:
        held.set()
        release.wait(WAIT)
        return [None for _ in items]

    holder = threading.Thread(target=journal.storage.write_grouped, args=(hold, None), daemon=True)
    holder.start()
    assert held.wait(WAIT)
    commits_before = journal.storage.signal.version

    def call(index: int) -> None:
        name = names[index]
        fn = requests[name][0] if name in requests else contended[name]
        try:
            outcomes[name] = fn()
        except Exception as exc:
            outcomes[name] = exc

    callers = threading.Thread(target=run_together, args=(len(names), call), daemon=True)
    callers.start()
    time.sleep(0.3)  # let every caller queue behind the held transaction
    release.set()
    callers.join(WAIT)
    holder.join(WAIT)
    assert not callers.is_alive()
    assert not holder.is_alive()
    commits = journal.storage.signal.version - commits_before

    for name, (_, error) in requests.items():
        if error is None:
            assert not isinstance(outcomes[name], Exception), (name, outcomes[name])
        else:
            assert type(outcomes[name]) is error, (name, outcomes[name])
    for pair in ("call", "id"):
        results = [outcomes[f"{pair}-1"], outcomes[f"{pair}-2"]]
        failures = [x for x in results if isinstance(x, Exception)]
        assert len(failures) == 1, (pair, results)
        assert type(failures[0]) is Conflict

    # The successful requests shared commits: this round did test one commit serving many.
    successes = [x for x in outcomes.values() if not isinstance(x, Exception)]
    if backend == "sqlite":
        assert commits < len(successes), f"{commits} commits for {len(successes)} appends"
    else:
        # Each commit also comes back through LISTEN, so count transactions by the id each new
        # event's position carries instead (ok-retry returned an old event: not counted).
        appends = [
            [x] if isinstance(x, Event) else x
            for name, x in outcomes.items()
            if isinstance(x, Event | list) and name != "ok-retry"
        ]
        txs = {decode_position(e.position)[0] for events in appends for e in events}
        assert len(txs) < len(appends), f"{len(txs)} transactions for {len(appends)} appends"

    retry = outcomes["ok-retry"]
    assert retry == next(e for e in before if e.idempotency_key == "k" and e.session_id == a)
    assert journal.get_session(a).last_seq == 5 + 3  # ok-a, ok-custom, ok-result
    assert journal.get_session(b).last_seq == 1 + 1 + 3 + 1  # ok-b, ok-batch, one race call
    assert journal.get_session(gone).last_seq == 2
    assert [c.status for c in journal.tool_calls(a)] == ["ok", "ok"]

    stored: list[Event] = []
    for value in successes:
        if isinstance(value, Event):
            stored.append(value)
        elif isinstance(value, list):
            stored += value
        else:  # a Session
            stored += journal.events(value.session_id)
    check_journal(journal, [e for e in before if "tag" in e.payload] + stored)


# -- separate processes -------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("pace", [0.0, 0.002])
def test_processes_and_threads_share_one_database(journal_url: str, pace: float) -> None:
    """Three processes, each with its own Journal and four threads, plus four threads here, append
    to the same database, to shared sessions and their own: no error ("database is locked",
    deadlock or other), every event stored exactly once, gapless seqs, verify clean. Back to back
    (pace 0), on SQLite a process tends to keep the lock while the others wait in its busy
    handler; paced, they interleave.
    """
    with Journal.open(journal_url) as journal:
        shared = [journal.create_session(f"shared {n}").session_id for n in range(2)]
        children = [
            subprocess.Popen(
                [
                    sys.executable,
                    str(WRITER),
                    journal_url,
                    f"p{n}",
                    "--shared",
                    ",".join(shared),
                    "--threads",
                    "4",
                    "--ops",
                    "30",
                    "--delay",
                    str(pace),
                    "--wait",
                ],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for n in range(3)
        ]
        outputs: list[tuple[str, str]] = []
        try:
            for child in children:
                assert child.stdout is not None
                assert child.stdout.readline() == "ready\n"
            acknowledged: list[Event] = []

            def write(thread: int) -> None:
                for op in range(30):
                    sid = shared[op % 2]
                    tag = f"parent/{thread}/{op}"
                    acknowledged.append(
                        journal.append(sid, "user_message", {"content": tag, "tag": tag})
                    )
                    time.sleep(pace)

            for child in children:  # go
                assert child.stdin is not None
                child.stdin.write("go\n")
                child.stdin.flush()
            assert run_together(4, write) == []
            for child in children:
                outputs.append(child.communicate(timeout=WAIT))
        finally:
            for child in children:
                if child.poll() is None:
                    child.kill()
                    child.communicate()

        for child, (out, err) in zip(children, outputs, strict=True):
            assert child.returncode == 0, err
            result = json.loads(out)
            assert result["errors"] == []
            for event_id, session_id, seq, type_, tag, _ in result["acks"]:
                stored = journal.events(session_id, after=seq - 1, limit=1)[0]
                assert (stored.event_id, stored.type, stored.payload.get("tag")) == (
                    event_id,
                    type_,
                    tag,
                )
                acknowledged.append(stored)
        assert len(acknowledged) == 4 * 30 + 3 * 4 * (1 + 20 + 10 * 3)
        events = check_journal(journal, acknowledged)
        assert len(events) == len(acknowledged) + len(shared)

        # The writers really ran at the same time: the shared sessions interleave them.
        for sid in shared if pace else []:
            writers = [e.payload["tag"].split("/")[0] for e in events[2:] if e.session_id == sid]
            assert set(writers) == {"parent", "p0", "p1", "p2"}
            switches = sum(a != b for a, b in itertools.pairwise(writers))
            assert switches > 2 * 4, f"the writers barely overlapped: {writers}"


HOLD_WRITE_LOCK = """
import sqlite3, sys, time
conn = sqlite3.connect(sys.argv[1], isolation_level=None)
conn.execute("BEGIN IMMEDIATE")
print("locked", flush=True)
time.sleep(float(sys.argv[2]))
conn.execute("COMMIT")
conn.close()
"""


@pytest.mark.slow
@pytest.mark.parametrize("file", ["fresh", "existing journal"])
def test_open_waits_while_another_process_writes(backend: str, db_path: Path, file: str) -> None:
    """Another process holds the write lock (on a fresh file: as when two processes open the file
    for the first time together, and the other is switching it to WAL). Opening waits for it, as
    appending does, instead of failing with "database is locked"."""
    if backend != "sqlite":
        pytest.skip("SQLite's file write lock (PostgreSQL: test_first_opens_race_on_one_database)")
    if file == "existing journal":
        with Journal.open(db_path) as journal:
            journal.create_session("before")
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD_WRITE_LOCK, str(db_path), "0.5"],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None
        assert holder.stdout.readline() == "locked\n"
        with Journal.open(db_path) as journal:
            sid = journal.create_session("after").session_id
            journal.append(sid, "user_message", {"content": "hi"})
            assert [e.seq for e in journal.events(sid)] == [1, 2]
            assert journal.verify().ok
    finally:
        holder.communicate(timeout=WAIT)
    assert holder.returncode == 0


@pytest.fixture
def unopened_url(backend: str, db_path: Path) -> Iterator[str]:
    """A database nobody has opened: a SQLite file not created yet, or a PostgreSQL schema not
    created yet, given as its owner's URL (the application role may create nothing)."""
    if backend == "sqlite":
        yield str(db_path)
        return
    with fresh_schema(migrated=False) as schema:
        yield owner_url_for(schema)


@pytest.mark.slow
def test_first_opens_race_on_one_database(unopened_url: str) -> None:
    """Eight first opens at once, each with its own connections as eight processes would have, on
    a database nobody has opened (on SQLite a fresh file; on PostgreSQL a schema that does not
    exist yet, opened by its owner): one creates the journal, the others wait for it, and every
    one then writes. (`Journal.open` would hand the eight one storage: each opens its own.)"""
    sessions: list[str] = []

    def open_and_write(index: int) -> None:
        with private_journal(unopened_url) as journal:
            sid = journal.create_session(f"opener {index}").session_id
            journal.append(sid, "user_message", {"content": f"{index}", "tag": f"{index}"})
            sessions.append(sid)

    assert run_together(8, open_and_write) == []
    with Journal.open(unopened_url) as journal:
        assert sorted(journal.get_session(sid).last_seq for sid in sessions) == [2] * 8
        assert len(journal.sessions(limit=100)) == 8
        assert journal.verify().ok
