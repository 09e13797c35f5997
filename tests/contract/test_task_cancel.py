"""cancel_task: cancels a task and its open sub-tasks, deepest first, and nothing else."""

from __future__ import annotations

from agentjournal import Conflict, InvalidArgument, Journal
from helpers.task_contract import claim_one, new_session, rejected, task_events


def test_cancel_cascades_to_open_sub_tasks(journal: Journal) -> None:
    sid = new_session(journal)
    root = journal.create_task(sid, "plan")
    child = journal.create_task(sid, "step", parent_task_id=root.task_id)
    done_child = journal.create_task(sid, "done_step", parent_task_id=root.task_id)
    grandchild = journal.create_task(sid, "substep", parent_task_id=child.task_id)
    bystander = journal.create_task(sid, "unrelated")
    elsewhere = journal.create_task(new_session(journal, "elsewhere"), "plan")
    claim_one(journal, done_child.task_id)
    journal.complete_task(done_child.task_id, attempt=1, output="ok")
    running = claim_one(journal, grandchild.task_id, "w9")

    cancelled = journal.cancel_task(root.task_id, reason="user pressed stop")
    assert cancelled.status == "cancelled"
    assert cancelled.error == "user pressed stop"
    for task_id in (root.task_id, child.task_id, grandchild.task_id):
        task = journal.get_task(task_id)
        assert (task.status, task.error) == ("cancelled", "user pressed stop")
        assert (task.lease_owner, task.lease_expires_at) == (None, None)
    assert journal.get_task(done_child.task_id).status == "completed"
    assert journal.get_task(done_child.task_id).output == "ok"
    assert journal.get_task(bystander.task_id).status == "pending"
    assert journal.get_task(elsewhere.task_id).status == "pending"
    # One event each, the deepest first.
    assert task_events(journal, sid)[-3:] == [
        ("task_cancelled", {"task_id": t, "reason": "user pressed stop"})
        for t in (grandchild.task_id, child.task_id, root.task_id)
    ]
    # The worker on the grand-child learns at its next report, and writes nothing.
    rejected(
        journal,
        Conflict,
        lambda: journal.task_progress(running.task_id, 0.5, attempt=1),
        match="cancelled",
    )
    rejected(journal, Conflict, lambda: journal.cancel_task(root.task_id))
    assert {t.task_id for t in journal.tasks(status="pending")} == {
        bystander.task_id,
        elsewhere.task_id,
    }
    assert journal.verify().ok


def test_cancel_without_reason_and_cancel_of_a_child_alone(journal: Journal) -> None:
    sid = new_session(journal)
    root = journal.create_task(sid, "plan")
    child = journal.create_task(sid, "step", parent_task_id=root.task_id)
    cancelled = journal.cancel_task(child.task_id)
    assert (cancelled.status, cancelled.error) == ("cancelled", None)
    assert task_events(journal, sid)[-1] == ("task_cancelled", {"task_id": child.task_id})
    assert journal.get_task(root.task_id).status == "pending"


def test_cancel_reaches_open_descendants_of_completed_children(journal: Journal) -> None:
    sid = new_session(journal)
    root = journal.create_task(sid, "plan")
    child = journal.create_task(sid, "step", parent_task_id=root.task_id)
    grandchild = journal.create_task(sid, "substep", parent_task_id=child.task_id)
    claim_one(journal, child.task_id)
    journal.complete_task(child.task_id, attempt=1)
    journal.cancel_task(root.task_id)
    assert journal.get_task(grandchild.task_id).status == "cancelled"


def test_cancel_rejects_bad_arguments_writing_nothing(journal: Journal) -> None:
    task = journal.create_task(new_session(journal), "job")
    rejected(journal, InvalidArgument, lambda: journal.cancel_task(task.task_id, reason=5))
    rejected(journal, InvalidArgument, lambda: journal.cancel_task("bad id"))
