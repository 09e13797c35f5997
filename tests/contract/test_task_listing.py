"""Listing tasks with filters and pages; tenants never see each other's tasks."""

from __future__ import annotations

from typing import Any

import pytest

from agentjournal import InvalidArgument, Journal, Task, TaskNotFound
from helpers.task_contract import LEASE, OTHER, claim, claim_one, new_session, rejected, snapshot


def test_tasks_filters_and_pages(journal: Journal) -> None:
    s1, s2 = new_session(journal, "one"), new_session(journal, "two")
    by_status: dict[str, str] = {}
    by_status["completed"] = journal.create_task(s1, "a").task_id
    claim_one(journal, by_status["completed"])
    journal.complete_task(by_status["completed"], attempt=1)
    by_status["failed"] = journal.create_task(s1, "b", max_retries=0).task_id
    claim_one(journal, by_status["failed"])
    journal.fail_task(by_status["failed"], attempt=1, error="x")
    by_status["cancelled"] = journal.create_task(s1, "a").task_id
    journal.cancel_task(by_status["cancelled"])
    by_status["running"] = journal.create_task(s1, "b").task_id
    claim_one(journal, by_status["running"])
    by_status["pending"] = journal.create_task(s1, "a").task_id
    extra = [journal.create_task(s2, "c", {"n": n}).task_id for n in range(5)]

    everything = journal.tasks()
    assert [t.task_id for t in everything] == sorted(t.task_id for t in everything)
    assert len(everything) == 10
    for status, task_id in by_status.items():
        expected = [task_id] + (extra if status == "pending" else [])
        assert [t.task_id for t in journal.tasks(status=status)] == sorted(expected)
        assert all(t.status == status for t in journal.tasks(status=status))
    open_ids = {t.task_id for t in journal.tasks(status="open")}
    assert open_ids == {by_status["pending"], by_status["running"], *extra}
    assert {t.task_id for t in journal.tasks(type="a")} == {
        by_status["completed"],
        by_status["cancelled"],
        by_status["pending"],
    }
    assert [t.task_id for t in journal.tasks(session_id=s2)] == sorted(extra)
    assert [t.task_id for t in journal.tasks(session_id=s1, status="open", type="b")] == [
        by_status["running"]
    ]
    assert journal.tasks(session_id=s2, type="a") == []
    assert journal.tasks(session_id="sess_nosuchsession") == []
    # Pages of 3 with after= give everything once, in order.
    paged: list[Task] = []
    cursor = None
    while page := journal.tasks(limit=3, after=cursor):
        assert len(page) <= 3
        paged += page
        cursor = page[-1].task_id
    assert paged == everything
    assert journal.tasks(status="open", limit=2) == journal.tasks(status="open")[:2]


@pytest.mark.parametrize(
    "kwargs",
    [
        {"status": "bogus"},
        {"status": "Open"},
        {"status": ""},
        {"limit": 0},
        {"limit": 10_001},
        {"limit": True},
        {"type": "bad type"},
        {"session_id": "bad id"},
        {"after": "bad cursor!"},
    ],
)
def test_tasks_rejects_bad_filters(journal: Journal, kwargs: dict[str, Any]) -> None:
    journal.create_task(new_session(journal), "job")
    rejected(journal, InvalidArgument, lambda: journal.tasks(**kwargs))


def test_tenants_never_see_each_others_tasks(journal: Journal) -> None:
    other = journal.for_tenant(OTHER)
    ours = journal.create_task(new_session(journal), "job")
    rejected(journal, TaskNotFound, lambda: other.get_task(ours.task_id))
    assert other.tasks() == []
    before = snapshot(journal)
    assert other.claim_task("their-worker") is None
    assert snapshot(journal) == before
    for verb in (
        lambda: other.task_progress(ours.task_id, 0.1, attempt=1),
        lambda: other.complete_task(ours.task_id, attempt=1),
        lambda: other.fail_task(ours.task_id, attempt=1, error="x"),
        lambda: other.cancel_task(ours.task_id),
    ):
        rejected(journal, TaskNotFound, verb)
    theirs = other.create_task(new_session(other), "job")
    assert [t.task_id for t in other.tasks()] == [theirs.task_id]
    assert [t.task_id for t in journal.tasks()] == [ours.task_id]
    ours_claim = claim(journal, lease_seconds=LEASE)
    assert ours_claim.task_id == ours.task_id
    assert journal.claim_task("w2") is None  # theirs is still pending, but not ours to take
    # Their worker reports on its own attempt; ours is refused theirs (not found) and vice versa.
    rejected(journal, TaskNotFound, lambda: journal.complete_task(theirs.task_id, attempt=1))
    assert claim(other, "their-worker", lease_seconds=LEASE).task_id == theirs.task_id
    assert other.complete_task(theirs.task_id, attempt=1).status == "completed"
    assert journal.get_task(ours.task_id) == ours_claim
