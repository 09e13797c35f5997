"""verify(): corrupted projection rows are reported exactly, and rebuild repairs them."""

from __future__ import annotations

from agentjournal import Difference, Journal
from expected import settled_feed
from helpers.contract import SEED_REPLAY, SUMMARY, seed
from helpers.raw_sql import RawSQL
from helpers.task_contract import LEASE, claim, new_session


def test_verify_a_clean_journal(journal: Journal) -> None:
    sid = seed(journal)
    journal.append(sid, "user_message", {"content": "您好", "supersedes": 2})
    fork = journal.fork(sid, 6).session_id
    journal.delete_session(fork)
    journal.compact(sid, 7, SUMMARY)
    journal.for_tenant("b").create_session("b")
    report = journal.verify()
    assert report.ok
    assert (report.differences, report.journal_errors, report.integrity) == ([], [], [])
    assert report.sessions_checked == 2
    assert report.events_checked == len(settled_feed(journal)) == 9 + 8
    assert report.rebuilt == []


def test_verify_reports_exactly_the_corrupted_rows_and_rebuild_repairs(
    journal: Journal, raw: RawSQL
) -> None:
    sid = seed(journal)
    other = seed(journal, "untouched")
    theirs = journal.for_tenant("b")
    theirs.create_session("b")
    before = (journal.get_session(sid), journal.messages(sid), journal.tool_calls(sid))
    raw.execute("UPDATE messages SET tokens = 1 WHERE session_id = ? AND seq = 2", (sid,))
    raw.execute("DELETE FROM tool_calls WHERE session_id = ? AND call_id = 'call_1'", (sid,))
    # A row for a message the journal never had (SQLite's rows name the event holding their
    # text, role and time, here none; PostgreSQL's hold them).
    bogus: dict[str, object] = {"session_id": sid, "tenant": "default", "seq": 99, "tokens": 7}
    if raw.backend == "postgres":
        bogus |= {"content": "bogus", "role": "user", "created_at": 0}
    else:
        bogus["content_id"] = 10**9
    raw.execute(
        f"INSERT INTO messages ({', '.join(bogus)}) VALUES ({', '.join('?' for _ in bogus)})",
        tuple(bogus.values()),
    )
    raw.execute("UPDATE sessions SET last_seq = 3, title = 'renamed' WHERE session_id = ?", (sid,))
    expected = {
        ("messages", f"{sid}/2", "tokens"),
        ("tool_calls", f"{sid}/call_1", "*"),
        ("messages", f"{sid}/99", "*"),
        ("sessions", sid, "last_seq"),
        ("sessions", sid, "title"),
    }
    report = journal.verify()
    assert not report.ok
    found = [(d.table, d.key, d.field) for d in report.differences]
    assert sorted(found) == sorted(expected)
    values = {(d.table, d.key, d.field): (d.stored, d.expected) for d in report.differences}
    tokens = next(m.tokens for m in before[1] if m.seq == 2)
    assert values[("messages", f"{sid}/2", "tokens")] == (1, tokens)
    assert values[("sessions", sid, "last_seq")] == (3, 7)
    assert values[("sessions", sid, "title")] == ("renamed", "订单客服")
    assert (report.journal_errors, report.integrity) == ([], [])
    assert report.rebuilt == []
    # Verify only reads; the corruption is still there.
    assert journal.get_session(sid).title == "renamed"
    # Tenant b's verify does not see tenant A's sessions.
    assert theirs.verify().ok
    repaired = journal.verify(rebuild=True)
    assert sorted((d.table, d.key, d.field) for d in repaired.differences) == sorted(expected)
    assert repaired.rebuilt == [sid]
    assert journal.verify().ok
    assert (journal.get_session(sid), journal.messages(sid), journal.tool_calls(sid)) == before
    assert journal.replay(other) == SEED_REPLAY


def test_verify_catches_a_wrong_counter_and_status(journal: Journal, raw: RawSQL) -> None:
    sid = seed(journal)
    raw.execute(
        "UPDATE sessions SET event_count = 99, prompt_tokens = 0, status = 'archived'"
        " WHERE session_id = ?",
        (sid,),
    )
    raw.execute(
        "UPDATE tool_calls SET status = 'error' WHERE session_id = ? AND call_id = 'call_1'",
        (sid,),
    )
    found = {(d.table, d.key, d.field) for d in journal.verify().differences}
    assert found == {
        ("sessions", sid, "event_count"),
        ("sessions", sid, "prompt_tokens"),
        ("sessions", sid, "status"),
        ("tool_calls", f"{sid}/call_1", "status"),
    }
    journal.verify(rebuild=True)
    assert journal.verify().ok
    assert journal.get_session(sid).status == "active"


def test_verify_finds_a_corrupted_task_row_and_rebuild_repairs_it(
    journal: Journal, raw: RawSQL
) -> None:
    sid = new_session(journal)
    task = journal.create_task(sid, "job")
    journal.create_task(new_session(journal, "untouched"), "job")
    assert journal.verify().ok
    raw.execute("UPDATE tasks SET progress = 0.3 WHERE task_id = ?", (task.task_id,))
    report = journal.verify()
    assert not report.ok
    assert report.differences == [Difference("tasks", task.task_id, "progress", 0.3, 0.0)]
    assert report.rebuilt == []
    assert journal.get_task(task.task_id).progress == 0.3  # verify alone repairs nothing
    repaired = journal.verify(rebuild=True)
    assert repaired.differences == report.differences
    assert repaired.rebuilt == [sid]
    assert journal.get_task(task.task_id) == task
    assert journal.verify().ok


def test_verify_finds_a_missing_and_an_extra_task_row(journal: Journal, raw: RawSQL) -> None:
    sid = new_session(journal)
    task = journal.create_task(sid, "job", {"x": 1})
    claimed = claim(journal, lease_seconds=LEASE)
    raw.execute("DELETE FROM tasks WHERE task_id = ?", (task.task_id,))
    report = journal.verify()
    assert report.differences == [Difference("tasks", task.task_id, "*", None, "row")]
    journal.verify(rebuild=True)
    assert journal.get_task(task.task_id) == claimed
    assert journal.verify().ok


def test_verify_reports_its_progress_session_by_session(journal: Journal) -> None:
    for title in ("one", "two", "three"):
        journal.create_session(title)
    journal.for_tenant("b").create_session("not this tenant's")
    calls: list[tuple[int, int]] = []
    report = journal.verify(progress=lambda done, total: calls.append((done, total)))
    assert report.ok
    assert calls == [(0, 3), (1, 3), (2, 3), (3, 3)]
