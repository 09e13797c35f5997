"""Tasks and their session: delete cancels, purge removes, fork copies events but no tasks."""

from __future__ import annotations

import pytest

from agentjournal import Conflict, InvalidArgument, Journal, TaskNotFound
from expected import settled_feed
from helpers.task_contract import LEASE, claim, claim_one, new_session, rejected


def test_delete_session_cancels_its_open_tasks_first(journal: Journal) -> None:
    sid, keep = new_session(journal, "doomed"), new_session(journal, "kept")
    pending = journal.create_task(sid, "p")
    running = journal.create_task(sid, "r")
    done = journal.create_task(sid, "d")
    survivor = journal.create_task(keep, "s")
    claim_one(journal, done.task_id)
    journal.complete_task(done.task_id, attempt=1, output="ok")
    claim_one(journal, running.task_id, "w7")
    last_before = journal.get_session(sid).last_seq

    deleted = journal.delete_session(sid)
    assert deleted.status == "deleted"
    tail = [(e.type, e.payload) for e in journal.events(sid, after=last_before)]
    assert len(tail) == 3
    assert sorted(tail[:2], key=lambda e: e[1]["task_id"]) == [
        ("task_cancelled", {"task_id": t, "reason": "session deleted"})
        for t in sorted([pending.task_id, running.task_id])
    ]
    assert tail[2] == ("session_updated", {"status": "deleted"})
    # Consecutive in the global feed too: one transaction, nothing committed between them.
    feed = settled_feed(journal)
    assert [(e.type, e.payload) for e in feed[-3:]] == tail
    for task_id in (pending.task_id, running.task_id):
        task = journal.get_task(task_id)
        assert (task.status, task.error) == ("cancelled", "session deleted")
        assert (task.lease_owner, task.lease_expires_at) == (None, None)
    assert journal.get_task(done.task_id).status == "completed"
    rejected(
        journal, Conflict, lambda: journal.complete_task(running.task_id, attempt=1, output="x")
    )
    # Only the kept session's task is left to claim.
    assert claim(journal, lease_seconds=LEASE).task_id == survivor.task_id
    assert journal.claim_task("w1") is None
    # Undeleting does not revive the cancelled tasks; new work can be queued again.
    journal.update_session(sid, status="active")
    assert journal.get_task(pending.task_id).status == "cancelled"
    fresh = journal.create_task(sid, "job")
    assert claim(journal, lease_seconds=LEASE).task_id == fresh.task_id
    assert journal.verify().ok


def test_claim_never_returns_tasks_of_a_deleted_session(journal: Journal) -> None:
    doomed = new_session(journal, "doomed")
    for n in range(5):
        journal.create_task(doomed, "job", {"n": n})
    journal.delete_session(doomed)
    assert journal.claim_task("w1") is None
    assert journal.tasks(status="open") == []
    assert len(journal.tasks(status="cancelled")) == 5


def test_delete_of_a_session_without_open_tasks_writes_only_the_deletion(journal: Journal) -> None:
    sid = new_session(journal)
    task = journal.create_task(sid, "job")
    journal.cancel_task(task.task_id)
    last = journal.get_session(sid).last_seq
    journal.delete_session(sid)
    assert [e.type for e in journal.events(sid, after=last)] == ["session_updated"]


def test_purge_session_removes_its_tasks(journal: Journal) -> None:
    sid = new_session(journal)
    root = journal.create_task(sid, "plan")
    child = journal.create_task(sid, "step", parent_task_id=root.task_id)
    claim_one(journal, child.task_id)
    kept = journal.create_task(new_session(journal, "kept"), "plan")
    journal.purge_session(sid)
    for task_id in (root.task_id, child.task_id):
        with pytest.raises(TaskNotFound):
            journal.get_task(task_id)
    assert journal.tasks() == [journal.get_task(kept.task_id)]
    assert journal.verify().ok


def test_fork_copies_task_events_but_creates_no_tasks(journal: Journal) -> None:
    sid = new_session(journal)
    journal.append(sid, "user_message", {"content": "生成月报"})
    done = journal.create_task(sid, "done")
    claim_one(journal, done.task_id)
    journal.task_progress(done.task_id, 0.5, attempt=1, message="half")
    journal.complete_task(done.task_id, attempt=1, output="ok")
    pending = journal.create_task(sid, "todo")
    journal.append(sid, "assistant_message", {"content": "已排队"})
    tasks_before = journal.tasks()

    fork = journal.fork(sid)
    source_types = [e.type for e in journal.events(sid)]
    fork_types = [e.type for e in journal.events(fork.session_id)]
    assert fork_types == [*source_types, "session_forked"]
    assert fork_types.count("task_created") == 2
    assert journal.tasks() == tasks_before
    assert journal.tasks(session_id=fork.session_id) == []
    assert journal.verify().ok
    # Forking mid-way (after the first task was created and started) creates none either.
    started_at = next(e.seq for e in journal.events(sid) if e.type == "task_started")
    partial = journal.fork(sid, started_at)
    assert journal.tasks(session_id=partial.session_id) == []
    assert journal.tasks() == tasks_before
    # The copies are not work: claims take the original's pending task, once.
    assert claim(journal, lease_seconds=LEASE).task_id == pending.task_id
    assert journal.claim_task("w2") is None
    # A task of the source is not a parent in the fork.
    rejected(
        journal,
        InvalidArgument,
        lambda: journal.create_task(fork.session_id, "step", parent_task_id=pending.task_id),
    )
    # Work queued in the fork is the fork's own.
    own = journal.create_task(fork.session_id, "todo")
    assert journal.tasks(session_id=fork.session_id) == [own]
    assert journal.verify().ok


def test_a_retried_delete_after_an_undelete_cancels_nothing(journal: Journal) -> None:
    """A delete repeated with its idempotency key is a retry: it returns the original and writes
    nothing, even after an undelete left new open tasks (found by the model-based test)."""
    sid = journal.create_session("x").session_id
    journal.update_session(sid, status="deleted", idempotency_key="del-1")
    journal.update_session(sid, status="active")
    task = journal.create_task(sid, "job")
    before = journal.events(sid)
    journal.update_session(sid, status="deleted", idempotency_key="del-1")
    assert journal.events(sid) == before
    assert journal.get_session(sid).status == "active"
    assert journal.get_task(task.task_id).status == "pending"
