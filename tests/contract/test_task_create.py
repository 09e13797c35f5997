"""create_task: the task and its event, inputs, sub-tasks, idempotency, what it refuses."""

from __future__ import annotations

import math
from typing import Any

import pytest

from agentjournal import (
    Conflict,
    InvalidArgument,
    InvalidEvent,
    Journal,
    SessionClosed,
    SessionNotFound,
    Task,
    TaskNotFound,
)
from agentjournal.tasks import new_task_id
from helpers.task_contract import (
    LEASE,
    NO_SUCH_TASK,
    OTHER,
    claim,
    new_session,
    next_millisecond,
    now_ms,
    rejected,
    snapshot,
)


def test_create_task_fields_and_event(journal: Journal) -> None:
    sid = new_session(journal)
    journal.append(sid, "user_message", {"content": "帮我生成月报"})
    before = now_ms()
    task, created = journal.create_task_ex(
        sid, "report.build", {"month": "2026-11", "tags": ["订单", 42], "draft": None}
    )
    after = now_ms()
    assert created is True
    session = journal.get_session(sid)
    event = journal.events(sid, after=2)[0]
    assert (event.seq, event.type) == (3, "task_created") == (session.last_seq, event.type)
    assert event.payload == {
        "task_id": task.task_id,
        "type": "report.build",
        "input": {"month": "2026-11", "tags": ["订单", 42], "draft": None},
        "max_retries": 3,
    }
    assert task == Task(
        task_id=task.task_id,
        session_id=sid,
        tenant="default",
        type="report.build",
        input={"month": "2026-11", "tags": ["订单", 42], "draft": None},
        parent_task_id=None,
        status="pending",
        progress=0.0,
        message=None,
        output=None,
        error=None,
        attempt=0,
        retry_count=0,
        max_retries=3,
        lease_owner=None,
        lease_seconds=None,
        lease_expires_at=None,
        created_seq=3,
        created_at=event.created_at,
        updated_at=event.created_at,
    )
    assert before <= task.created_at <= after
    assert task.task_id.startswith("task_")
    assert journal.get_task(task.task_id) == task
    assert journal.tasks() == [task]
    assert journal.verify().ok


@pytest.mark.parametrize(
    "value", [None, "纯文本", 0, -1.5, True, [], {}, [1, [2, [3]]], {"a": {"b": [None, "ü"]}}]
)
def test_input_is_any_json_value(journal: Journal, value: Any) -> None:
    sid = new_session(journal)
    task = journal.create_task(sid, "echo", value)
    assert task.input == value
    assert journal.get_task(task.task_id).input == value
    assert journal.verify().ok


@pytest.mark.parametrize("max_retries", [0, 1, 100])
def test_max_retries_bounds_are_accepted(journal: Journal, max_retries: int) -> None:
    task = journal.create_task(new_session(journal), "t", max_retries=max_retries)
    assert task.max_retries == max_retries


def test_queue_order_is_creation_order(journal: Journal) -> None:
    """Ids sort by creation, tasks() lists oldest first and claims take the oldest first,
    whatever the sessions (each task here is created in a later millisecond than the last)."""
    sessions = [new_session(journal, "a"), new_session(journal, "b")]
    created = []
    for n in range(6):
        next_millisecond()
        created.append(journal.create_task(sessions[n % 2], "job", {"n": n}).task_id)
    assert sorted(created) == created
    assert [t.task_id for t in journal.tasks()] == created
    claimed = [claim(journal, lease_seconds=LEASE).task_id for _ in created]
    assert claimed == created
    assert journal.claim_task("w1") is None


def test_task_ids_sort_by_creation_within_one_millisecond() -> None:
    ids = [new_task_id(1_764_000_000_000) for _ in range(20)]
    assert sorted(ids) == ids


def test_sub_tasks_live_in_their_parents_session(journal: Journal) -> None:
    sid, elsewhere = new_session(journal), new_session(journal, "elsewhere")
    parent = journal.create_task(sid, "plan")
    child = journal.create_task(sid, "step", {"n": 1}, parent_task_id=parent.task_id)
    grandchild = journal.create_task(sid, "substep", parent_task_id=child.task_id)
    assert child.parent_task_id == parent.task_id
    assert grandchild.parent_task_id == child.task_id
    assert journal.events(sid)[-1].payload["parent_task_id"] == child.task_id
    # A parent in another session, an unknown parent, and another tenant's task as parent.
    error = rejected(
        journal,
        InvalidArgument,
        lambda: journal.create_task(elsewhere, "step", parent_task_id=parent.task_id),
    )
    assert parent.task_id in str(error)
    rejected(
        journal,
        TaskNotFound,
        lambda: journal.create_task(sid, "step", parent_task_id=NO_SUCH_TASK),
    )
    other = journal.for_tenant(OTHER)
    theirs = new_session(other)
    rejected(
        journal,
        TaskNotFound,
        lambda: other.create_task(theirs, "step", parent_task_id=parent.task_id),
    )
    assert journal.verify().ok


def test_idempotent_create_returns_the_task_it_created(journal: Journal) -> None:
    sid, second = new_session(journal), new_session(journal, "second")
    first, created = journal.create_task_ex(sid, "job", {"n": 1}, idempotency_key="k1")
    assert created is True
    before = snapshot(journal)
    again, created = journal.create_task_ex(sid, "job", {"n": 1}, idempotency_key="k1")
    assert (again, created) == (first, False)
    assert journal.create_task(sid, "job", {"n": 1}, idempotency_key="k1") == first
    assert snapshot(journal) == before
    # A repeat after the task moved on returns the task as it is now, still creating nothing.
    running = claim(journal, lease_seconds=LEASE)
    assert running.task_id == first.task_id
    again, created = journal.create_task_ex(sid, "job", {"n": 1}, idempotency_key="k1")
    assert (again, created) == (running, False)
    # The key belongs to its session: another session's same key is another task.
    other, created = journal.create_task_ex(second, "job", {"n": 1}, idempotency_key="k1")
    assert created is True
    assert other.task_id != first.task_id
    assert len(journal.tasks()) == 2


@pytest.mark.parametrize(
    "change",
    [
        {"input": {"n": 2}},
        {"type": "other_job"},
        {"max_retries": 5},
        {"parent": True},
    ],
    ids=["input", "type", "max_retries", "parent"],
)
def test_idempotency_key_reused_for_another_request_conflicts(
    journal: Journal, change: dict[str, Any]
) -> None:
    sid = new_session(journal)
    parent = journal.create_task(sid, "plan")
    journal.create_task(sid, "job", {"n": 1}, idempotency_key="k1")
    kwargs: dict[str, Any] = {"input": {"n": 1}, "type": "job", "max_retries": 3}
    kwargs |= {k: v for k, v in change.items() if k != "parent"}
    if change.get("parent"):
        kwargs["parent_task_id"] = parent.task_id
    rejected(
        journal,
        Conflict,
        lambda: journal.create_task(sid, idempotency_key="k1", **kwargs),
        match="idempotency key",
    )


def test_idempotency_key_of_another_event_conflicts(journal: Journal) -> None:
    sid = new_session(journal)
    journal.append(sid, "user_message", {"content": "hi"}, idempotency_key="k1")
    rejected(journal, Conflict, lambda: journal.create_task(sid, "job", idempotency_key="k1"))


BAD_CREATES: dict[str, tuple[type[Exception], dict[str, Any]]] = {
    "type empty": (InvalidArgument, {"type": ""}),
    "type with space": (InvalidArgument, {"type": "build report"}),
    "type leading dash": (InvalidArgument, {"type": "-x"}),
    "type too long": (InvalidArgument, {"type": "t" * 129}),
    "type not str": (InvalidArgument, {"type": 7}),
    "type None": (InvalidArgument, {"type": None}),
    "max_retries negative": (InvalidArgument, {"max_retries": -1}),
    "max_retries too big": (InvalidArgument, {"max_retries": 101}),
    "max_retries bool": (InvalidArgument, {"max_retries": True}),
    "max_retries float": (InvalidArgument, {"max_retries": 1.0}),
    "max_retries str": (InvalidArgument, {"max_retries": "3"}),
    "input set": (InvalidEvent, {"input": {1, 2}}),
    "input NaN": (InvalidEvent, {"input": math.nan}),
    "input infinity": (InvalidEvent, {"input": {"x": [math.inf]}}),
    "input bytes": (InvalidEvent, {"input": b"raw"}),
    "input object": (InvalidEvent, {"input": object()}),
    "input int key": (InvalidEvent, {"input": {1: "a"}}),
    "input NUL": (InvalidEvent, {"input": "a\x00b"}),
    "parent malformed": (InvalidArgument, {"parent_task_id": "no spaces"}),
    "key empty": (InvalidEvent, {"idempotency_key": ""}),
    "key not str": (InvalidEvent, {"idempotency_key": 5}),
    "session malformed": (InvalidArgument, {"session_id": "bad id"}),
    "session unknown": (SessionNotFound, {"session_id": "sess_nosuchsession"}),
}


@pytest.mark.parametrize("case", list(BAD_CREATES))
def test_create_task_rejects_bad_arguments_writing_nothing(journal: Journal, case: str) -> None:
    error, change = BAD_CREATES[case]
    sid = new_session(journal)
    journal.create_task(sid, "existing")
    kwargs: dict[str, Any] = {"session_id": sid, "type": "job", "input": None} | change
    rejected(journal, error, lambda: journal.create_task(**kwargs))
    assert len(journal.tasks()) == 1


def test_create_task_in_another_tenants_session_is_not_found(journal: Journal) -> None:
    sid = new_session(journal)
    rejected(journal, SessionNotFound, lambda: journal.for_tenant(OTHER).create_task(sid, "job"))


def test_create_task_in_a_deleted_session_is_refused(journal: Journal) -> None:
    sid = new_session(journal)
    journal.delete_session(sid)
    rejected(journal, SessionClosed, lambda: journal.create_task(sid, "job"))
