"""Tasks (DESIGN.md, "Tasks (durable work)") through the public `Journal` API, on real SQLite files.

Every rejected call must write nothing: `rejected()` compares everything the public API shows (the
global feeds, sessions and tasks of two tenants) before and after. Leases expire for real: a test
claims with a tiny lease and polls the clock until the lease is over; no test asserts a duration.
Races run on real threads and real processes sharing one file.
"""

from __future__ import annotations

import asyncio
import json
import math
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from agentjournal import (
    AsyncJournal,
    Conflict,
    Difference,
    InvalidArgument,
    InvalidEvent,
    Journal,
    SessionClosed,
    SessionNotFound,
    Task,
    TaskNotFound,
)
from agentjournal.tasks import new_task_id
from expected import settled_feed
from helpers.raw_sql import RawSQL

WAIT = 30.0  # bound on every wait; never an expected duration
LEASE = 600.0  # a lease that cannot expire while a test runs
TINY = 0.05  # a lease that expires almost at once
OTHER = "other"  # the second tenant of every isolation check
NO_SUCH_TASK = "task_000000000000000000000000"


# === helpers ======================================================================================


def now_ms() -> int:
    """The journal's clock (wall time in milliseconds)."""
    return time.time_ns() // 1_000_000


def wait_for(condition: Callable[[], bool], what: str) -> None:
    """Poll `condition` until it holds; fail (not hang) if it never does within WAIT."""
    deadline = time.monotonic() + WAIT
    while not condition():
        assert time.monotonic() < deadline, f"gave up waiting for {what}"
        time.sleep(0.005)


def wait_expired(task: Task) -> None:
    """Return once the lease of `task` (as claimed) is over by the journal's clock."""
    expires = task.lease_expires_at
    assert expires is not None
    wait_for(lambda: now_ms() > expires, f"the lease of {task.task_id} to expire")


def next_millisecond() -> None:
    """Return once the clock has moved to a later millisecond."""
    start = now_ms()
    wait_for(lambda: now_ms() > start, "the clock to tick")


def snapshot(journal: Journal) -> dict[str, Any]:
    """Everything the public API shows of the file, for the default tenant and for OTHER."""
    seen: dict[str, Any] = {}
    for tenant in ("default", OTHER):
        view = journal.for_tenant(tenant)
        seen[tenant] = (
            settled_feed(view),
            view.sessions(status="all", limit=10_000),
            view.tasks(limit=10_000),
        )
    return seen


def rejected(
    journal: Journal, error: type[Exception], action: Callable[[], object], match: str | None = None
) -> Exception:
    """Run `action`, expect `error`, and check that nothing at all was written."""
    before = snapshot(journal)
    with pytest.raises(error, match=match) as caught:
        action()
    assert snapshot(journal) == before
    return caught.value


def new_session(journal: Journal, title: str = "work") -> str:
    return journal.create_session(title).session_id


def claim(journal: Journal, worker: str = "w1", **kwargs: Any) -> Task:
    task = journal.claim_task(worker, **kwargs)
    assert task is not None, "expected a task to claim"
    return task


def claim_one(journal: Journal, task_id: str, worker: str = "w1", lease: float = LEASE) -> Task:
    """Claim exactly `task_id` (the test holds no other pending task of its type)."""
    task = journal.get_task(task_id)
    claimed = claim(journal, worker, types=[task.type], lease_seconds=lease)
    assert claimed.task_id == task_id
    return claimed


def task_events(journal: Journal, session_id: str) -> list[tuple[str, dict[str, Any]]]:
    return [
        (e.type, e.payload)
        for e in journal.events(session_id, limit=10_000)
        if e.type.startswith("task_")
    ]


@pytest.fixture
def raw(backend: str, journal: Journal, journal_url: str) -> Iterator[RawSQL]:
    """Plain SQL on the journal's database, as any other program could send it."""
    conn = RawSQL(backend, journal_url)
    yield conn
    conn.close()


# === create_task ==================================================================================


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


# === claim_task ===================================================================================


def test_claim_sets_attempt_and_lease(journal: Journal) -> None:
    sid = new_session(journal)
    task = journal.create_task(sid, "job", {"n": 1})
    before = now_ms()
    claimed = claim(journal, "工人-1 (pid 7)", lease_seconds=12.5)
    after = now_ms()
    assert claimed.task_id == task.task_id
    assert claimed.status == "running"
    assert (claimed.attempt, claimed.retry_count) == (1, 0)
    assert claimed.lease_owner == "工人-1 (pid 7)"
    assert claimed.lease_seconds == 12.5
    assert claimed.lease_expires_at is not None
    assert before + 12_500 <= claimed.lease_expires_at <= after + 12_500
    assert claimed.updated_at >= task.updated_at
    assert (claimed.input, claimed.progress, claimed.error) == ({"n": 1}, 0.0, None)
    assert task_events(journal, sid)[-1] == (
        "task_started",
        {
            "task_id": task.task_id,
            "attempt": 1,
            "worker": "工人-1 (pid 7)",
            "lease_seconds": 12.5,
            "lease_expires_at": claimed.lease_expires_at,
        },
    )
    assert journal.get_task(task.task_id) == claimed
    assert journal.verify().ok


def test_claim_default_lease_is_thirty_seconds(journal: Journal) -> None:
    journal.create_task(new_session(journal), "job")
    claimed = claim(journal)
    assert claimed.lease_seconds == 30.0


def test_claim_filters_by_type(journal: Journal) -> None:
    sid = new_session(journal)
    a = journal.create_task(sid, "a")
    b = journal.create_task(sid, "b")
    c = journal.create_task(sid, "c")
    assert claim(journal, types=["b"], lease_seconds=LEASE).task_id == b.task_id
    assert claim(journal, types=("c", "a"), lease_seconds=LEASE).task_id in {a.task_id, c.task_id}
    remaining = journal.tasks(status="pending")
    assert len(remaining) == 1
    before = snapshot(journal)
    assert journal.claim_task("w1", types=["b"]) is None
    assert journal.claim_task("w1", types=["nope"]) is None
    assert snapshot(journal) == before
    assert claim(journal, lease_seconds=LEASE).task_id == remaining[0].task_id


def test_claim_with_nothing_to_do_returns_none_and_writes_nothing(journal: Journal) -> None:
    before = snapshot(journal)
    assert journal.claim_task("w1") is None
    sid = new_session(journal)
    task = journal.create_task(sid, "job")
    claim(journal, lease_seconds=LEASE)
    journal.complete_task(task.task_id, attempt=1)
    before = snapshot(journal)
    assert journal.claim_task("w1") is None
    assert journal.claim_task("w2", types=["job"]) is None
    assert snapshot(journal) == before


BAD_CLAIMS: dict[str, dict[str, Any]] = {
    "worker empty": {"worker": ""},
    "worker not str": {"worker": 5},
    "worker None": {"worker": None},
    "worker newline": {"worker": "w\n1"},
    "worker too long": {"worker": "w" * 256},
    "types str": {"types": "job"},
    "types empty": {"types": []},
    "types bad name": {"types": ["bad type"]},
    "types not str": {"types": [5]},
    "types one bad": {"types": ["job", ""]},
    "types set": {"types": {"job"}},
    "lease zero": {"lease_seconds": 0},
    "lease negative": {"lease_seconds": -1.0},
    "lease too small": {"lease_seconds": 0.0009},
    "lease too long": {"lease_seconds": 7 * 24 * 3600 + 1},
    "lease bool": {"lease_seconds": True},
    "lease str": {"lease_seconds": "30"},
    "lease NaN": {"lease_seconds": math.nan},
    "lease infinity": {"lease_seconds": math.inf},
}


@pytest.mark.parametrize("case", list(BAD_CLAIMS))
def test_claim_rejects_bad_arguments_writing_nothing(journal: Journal, case: str) -> None:
    journal.create_task(new_session(journal), "job")
    kwargs = {"worker": "w1"} | BAD_CLAIMS[case]
    rejected(journal, InvalidArgument, lambda: journal.claim_task(**kwargs))
    assert journal.tasks(status="pending") != []


# === leases: expiry, take-over, stale reports =====================================================


def test_expired_lease_is_taken_over_and_the_old_worker_is_refused(journal: Journal) -> None:
    sid = new_session(journal)
    task = journal.create_task(sid, "job", max_retries=3)
    first = claim(journal, "w1", lease_seconds=TINY)
    assert first.attempt == 1
    wait_expired(first)
    second = claim(journal, "w2", lease_seconds=LEASE)
    assert second.task_id == task.task_id
    assert (second.status, second.attempt, second.retry_count) == ("running", 2, 1)
    assert second.lease_owner == "w2"
    assert second.error is not None
    assert "lease expired" in second.error
    assert task_events(journal, sid)[-2:] == [
        (
            "task_failed",
            {
                "task_id": task.task_id,
                "attempt": 1,
                "error": second.error,
                "retry": True,
                "retry_count": 1,
            },
        ),
        (
            "task_started",
            {
                "task_id": task.task_id,
                "attempt": 2,
                "worker": "w2",
                "lease_seconds": LEASE,
                "lease_expires_at": second.lease_expires_at,
            },
        ),
    ]
    # The first worker's reports name attempt 1: refused, nothing written.
    for stale in (
        lambda: journal.task_progress(task.task_id, 0.5, attempt=1, message="still here"),
        lambda: journal.complete_task(task.task_id, attempt=1, output="late"),
        lambda: journal.fail_task(task.task_id, attempt=1, error="late"),
        lambda: journal.fail_task(task.task_id, attempt=1, error="late", retryable=False),
    ):
        rejected(journal, Conflict, stale, match="attempt 1")
    # An attempt that never started is refused as well.
    rejected(journal, Conflict, lambda: journal.complete_task(task.task_id, attempt=3))
    # The new worker carries on.
    assert journal.task_progress(task.task_id, 0.5, attempt=2).progress == 0.5
    done = journal.complete_task(task.task_id, attempt=2, output={"ok": True})
    assert (done.status, done.attempt, done.retry_count, done.output) == (
        "completed",
        2,
        1,
        {"ok": True},
    )
    assert journal.verify().ok


def test_a_live_lease_is_not_taken_over(journal: Journal) -> None:
    journal.create_task(new_session(journal), "job")
    held = claim(journal, "w1", lease_seconds=LEASE)
    before = snapshot(journal)
    assert journal.claim_task("w2") is None
    assert snapshot(journal) == before
    assert journal.get_task(held.task_id) == held


# === failures and retries =========================================================================


def test_retryable_failures_go_back_to_pending_until_retries_are_spent(journal: Journal) -> None:
    sid = new_session(journal)
    task = journal.create_task(sid, "job", max_retries=1)
    claim(journal, lease_seconds=LEASE)
    retried = journal.fail_task(task.task_id, attempt=1, error="timeout talking to ERP")
    assert (retried.status, retried.attempt, retried.retry_count) == ("pending", 1, 1)
    assert retried.error == "timeout talking to ERP"
    assert (retried.lease_owner, retried.lease_expires_at) == (None, None)
    second = claim(journal, "w2", lease_seconds=LEASE)
    assert (second.task_id, second.attempt, second.retry_count) == (task.task_id, 2, 1)
    failed = journal.fail_task(task.task_id, attempt=2, error="timeout again")
    assert (failed.status, failed.attempt, failed.retry_count) == ("failed", 2, 1)
    assert failed.error == "timeout again"
    assert (failed.lease_owner, failed.lease_expires_at) == (None, None)
    assert [p["retry"] for t, p in task_events(journal, sid) if t == "task_failed"] == [True, False]
    assert journal.claim_task("w3") is None
    for late in (
        lambda: journal.complete_task(task.task_id, attempt=2),
        lambda: journal.fail_task(task.task_id, attempt=2, error="x"),
        lambda: journal.task_progress(task.task_id, 0.1, attempt=2),
        lambda: journal.cancel_task(task.task_id),
    ):
        rejected(journal, Conflict, late)
    assert journal.verify().ok


def test_zero_retries_fails_on_the_first_failure(journal: Journal) -> None:
    task = journal.create_task(new_session(journal), "job", max_retries=0)
    claim(journal, lease_seconds=LEASE)
    failed = journal.fail_task(task.task_id, attempt=1, error="boom")
    assert (failed.status, failed.retry_count) == ("failed", 0)


def test_non_retryable_failure_fails_at_once(journal: Journal) -> None:
    task = journal.create_task(new_session(journal), "job", max_retries=5)
    claim(journal, lease_seconds=LEASE)
    failed = journal.fail_task(task.task_id, attempt=1, error="bad input", retryable=False)
    assert (failed.status, failed.retry_count, failed.error) == ("failed", 0, "bad input")
    assert journal.claim_task("w1") is None


@pytest.mark.parametrize(
    "kwargs",
    [
        {"error": None},
        {"error": 42},
        {"error": "x", "retryable": 1},
        {"error": "x", "retryable": "yes"},
        {"error": "x", "attempt": 0},
        {"error": "x", "attempt": True},
        {"error": "x", "attempt": "1"},
    ],
)
def test_fail_task_rejects_bad_arguments_writing_nothing(
    journal: Journal, kwargs: dict[str, Any]
) -> None:
    task = journal.create_task(new_session(journal), "job")
    claim(journal, lease_seconds=LEASE)
    args = {"attempt": 1} | kwargs
    rejected(journal, InvalidArgument, lambda: journal.fail_task(task.task_id, **args))


def test_expired_leases_are_settled_by_recover(journal: Journal) -> None:
    sid = new_session(journal)
    spent = journal.create_task(sid, "spent", max_retries=0)
    retry = journal.create_task(sid, "retry", max_retries=2)
    # The second claim would settle the first lease if it had run out already: the first lease
    # is long enough to outlive the next call, the second is tiny.
    retry_claim = claim(journal, "crashed-2", types=["retry"], lease_seconds=0.5)
    spent_claim = claim(journal, "crashed-1", types=["spent"], lease_seconds=TINY)
    wait_expired(spent_claim)
    wait_expired(retry_claim)
    recovery = journal.recover()
    assert recovery.failed == [spent.task_id]
    assert recovery.requeued == [retry.task_id]
    failed = journal.get_task(spent.task_id)
    assert (failed.status, failed.attempt, failed.retry_count) == ("failed", 1, 0)
    assert failed.error is not None
    assert "lease expired" in failed.error
    assert "crashed-1" in failed.error
    assert (failed.lease_owner, failed.lease_expires_at) == (None, None)
    requeued = journal.get_task(retry.task_id)
    assert (requeued.status, requeued.attempt, requeued.retry_count) == ("pending", 1, 1)
    assert requeued.error is not None
    assert "lease expired" in requeued.error
    # Settled once: a second recover finds nothing and writes nothing.
    before = snapshot(journal)
    again = journal.recover()
    assert (again.requeued, again.failed) == ([], [])
    assert snapshot(journal) == before
    assert claim(journal, "w3", lease_seconds=LEASE).attempt == 2
    assert journal.verify().ok


def test_claim_settles_expired_leases_whose_retries_are_spent(journal: Journal) -> None:
    task = journal.create_task(new_session(journal), "job", max_retries=0)
    wait_expired(claim(journal, "w1", lease_seconds=TINY))
    assert journal.claim_task("w2") is None
    failed = journal.get_task(task.task_id)
    assert failed.status == "failed"
    assert failed.error is not None
    assert "lease expired" in failed.error


def test_every_expiry_counts_as_an_attempt(journal: Journal) -> None:
    """A task that kills each worker it runs on ends failed instead of looping."""
    task = journal.create_task(new_session(journal), "poison", max_retries=2)
    attempts = []
    while (claimed := journal.claim_task("w", lease_seconds=TINY)) is not None:
        attempts.append(claimed.attempt)
        wait_expired(claimed)
    assert attempts == [1, 2, 3]
    final = journal.get_task(task.task_id)
    assert (final.status, final.attempt, final.retry_count) == ("failed", 3, 2)


# === progress =====================================================================================


def test_progress_is_stored_and_renews_the_lease(journal: Journal) -> None:
    sid = new_session(journal)
    task = journal.create_task(sid, "job")
    claimed = claim(journal, "w1", lease_seconds=20.0)
    assert claimed.lease_expires_at is not None
    wait_for(lambda: now_ms() > claimed.updated_at, "the clock to pass the claim")
    before = now_ms()
    reported = journal.task_progress(task.task_id, 0.25, attempt=1, message="读取订单 1/4")
    assert (reported.progress, reported.message) == (0.25, "读取订单 1/4")
    assert (reported.status, reported.attempt, reported.lease_owner) == ("running", 1, "w1")
    assert reported.lease_expires_at is not None
    assert before + 20_000 <= reported.lease_expires_at <= reported.updated_at + 20_000
    assert reported.lease_expires_at > claimed.lease_expires_at
    assert task_events(journal, sid)[-1] == (
        "task_progress",
        {
            "task_id": task.task_id,
            "attempt": 1,
            "progress": 0.25,
            "message": "读取订单 1/4",
            "lease_expires_at": reported.lease_expires_at,
        },
    )
    whole = journal.task_progress(task.task_id, 1, attempt=1)
    assert whole.progress == 1.0
    assert isinstance(whole.progress, float)
    assert journal.task_progress(task.task_id, 0, attempt=1).progress == 0.0
    assert journal.verify().ok


BAD_PROGRESS: dict[str, dict[str, Any]] = {
    "negative": {"progress": -0.01},
    "over one": {"progress": 1.01},
    "bool true": {"progress": True},
    "bool false": {"progress": False},
    "string": {"progress": "0.5"},
    "None": {"progress": None},
    "NaN": {"progress": math.nan},
    "message not str": {"message": 5},
    "attempt zero": {"attempt": 0},
    "attempt bool": {"attempt": True},
    "attempt float": {"attempt": 1.0},
}


@pytest.mark.parametrize("case", list(BAD_PROGRESS))
def test_progress_rejects_bad_arguments_writing_nothing(journal: Journal, case: str) -> None:
    task = journal.create_task(new_session(journal), "job")
    claim(journal, lease_seconds=LEASE)
    kwargs = {"progress": 0.5, "attempt": 1} | BAD_PROGRESS[case]
    rejected(journal, InvalidArgument, lambda: journal.task_progress(task.task_id, **kwargs))


def test_reports_on_a_pending_task_conflict(journal: Journal) -> None:
    task = journal.create_task(new_session(journal), "job")
    for report in (
        lambda: journal.task_progress(task.task_id, 0.1, attempt=1),
        lambda: journal.complete_task(task.task_id, attempt=1),
        lambda: journal.fail_task(task.task_id, attempt=1, error="x"),
    ):
        rejected(journal, Conflict, report, match="pending")


@pytest.mark.parametrize(
    "report",
    [
        lambda j: j.task_progress(NO_SUCH_TASK, 0.1, attempt=1),
        lambda j: j.complete_task(NO_SUCH_TASK, attempt=1),
        lambda j: j.fail_task(NO_SUCH_TASK, attempt=1, error="x"),
        lambda j: j.cancel_task(NO_SUCH_TASK),
        lambda j: j.get_task(NO_SUCH_TASK),
    ],
    ids=["progress", "complete", "fail", "cancel", "get"],
)
def test_unknown_task_is_not_found(journal: Journal, report: Callable[[Journal], object]) -> None:
    journal.create_task(new_session(journal), "job")
    rejected(journal, TaskNotFound, lambda: report(journal))
    rejected(journal, InvalidArgument, lambda: journal.get_task("not a task id"))


# === complete =====================================================================================


@pytest.mark.parametrize(
    "output",
    [{"rows": 42, "note": "你当前有 42 个订单。"}, [1, "二", None], "done", 3.5, 0, None, True],
)
def test_complete_stores_any_json_output(journal: Journal, output: Any) -> None:
    sid = new_session(journal)
    task = journal.create_task(sid, "job")
    claim(journal, lease_seconds=LEASE)
    journal.task_progress(task.task_id, 0.4, attempt=1, message="almost")
    done = journal.complete_task(task.task_id, attempt=1, output=output)
    assert done.status == "completed"
    assert done.output == output
    assert done.progress == 1.0
    assert (done.lease_owner, done.lease_expires_at, done.error) == (None, None, None)
    assert (done.attempt, done.retry_count) == (1, 0)
    assert task_events(journal, sid)[-1] == (
        "task_completed",
        {"task_id": task.task_id, "attempt": 1, "output": output},
    )
    assert journal.get_task(task.task_id) == done
    assert journal.verify().ok


def test_complete_rejects_non_json_output_writing_nothing(journal: Journal) -> None:
    task = journal.create_task(new_session(journal), "job")
    claim(journal, lease_seconds=LEASE)
    for output in ({1, 2}, math.nan, object()):
        rejected(
            journal,
            InvalidEvent,
            lambda out=output: journal.complete_task(task.task_id, attempt=1, output=out),
        )
    assert journal.get_task(task.task_id).status == "running"


@pytest.mark.parametrize("end", ["completed", "cancelled", "failed"])
def test_reports_on_a_finished_task_conflict(journal: Journal, end: str) -> None:
    task = journal.create_task(new_session(journal), "job", max_retries=0)
    claim(journal, lease_seconds=LEASE)
    if end == "completed":
        journal.complete_task(task.task_id, attempt=1, output="ok")
    elif end == "cancelled":
        journal.cancel_task(task.task_id)
    else:
        journal.fail_task(task.task_id, attempt=1, error="boom")
    assert journal.get_task(task.task_id).status == end
    for report in (
        lambda: journal.task_progress(task.task_id, 0.9, attempt=1),
        lambda: journal.complete_task(task.task_id, attempt=1, output="again"),
        lambda: journal.fail_task(task.task_id, attempt=1, error="late"),
        lambda: journal.cancel_task(task.task_id),
    ):
        rejected(journal, Conflict, report, match=end)


# === cancel =======================================================================================


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


# === delete_session, purge_session, fork ==========================================================


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


# === verify =======================================================================================


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


# === concurrency ==================================================================================


def test_threads_racing_never_claim_one_task_twice(journal: Journal) -> None:
    sessions = [new_session(journal, f"s{n}") for n in range(4)]
    created = {journal.create_task(sessions[n % 4], "job", {"n": n}).task_id for n in range(200)}
    barrier = threading.Barrier(8)
    claimed: list[list[str]] = [[] for _ in range(8)]
    errors: list[str] = []

    def work(index: int) -> None:
        try:
            barrier.wait(WAIT)
            while (task := journal.claim_task(f"t{index}", lease_seconds=LEASE)) is not None:
                claimed[index].append(task.task_id)
        except Exception as exc:
            errors.append(f"thread {index}: {type(exc).__name__}: {exc}")

    threads = [threading.Thread(target=work, args=(i,), daemon=True) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(WAIT)
    assert not any(thread.is_alive() for thread in threads), "a claiming thread hung"
    assert errors == []
    counts = Counter(task_id for ids in claimed for task_id in ids)
    assert set(counts) == created
    assert set(counts.values()) == {1}
    for index, ids in enumerate(claimed):
        assert ids == sorted(ids)  # each worker takes the queue's head, which only moves on
        for task_id in ids:
            task = journal.get_task(task_id)
            assert (task.status, task.attempt, task.lease_owner) == ("running", 1, f"t{index}")
    assert journal.verify().ok


CLAIMER = """
import json, sys
from agentjournal import Journal

url, worker = sys.argv[1], sys.argv[2]
with Journal.open(url) as journal:
    print("ready", flush=True)
    sys.stdin.readline()
    claimed = []
    while (task := journal.claim_task(worker, lease_seconds=600)) is not None:
        claimed.append(task.task_id)
    print(json.dumps(claimed), flush=True)
"""


def test_processes_racing_never_claim_one_task_twice(
    journal: Journal, journal_url: str, tmp_path: Path
) -> None:
    script = tmp_path / "claimer.py"
    script.write_text(CLAIMER, encoding="utf-8")
    sid = new_session(journal)
    created = {journal.create_task(sid, "job", {"n": n}).task_id for n in range(150)}
    children = [
        subprocess.Popen(
            [sys.executable, str(script), journal_url, f"proc{n}"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for n in range(3)
    ]
    try:
        for child in children:
            assert child.stdout is not None
            assert child.stdout.readline() == "ready\n"
        for child in children:  # go, all together
            assert child.stdin is not None
            child.stdin.write("go\n")
            child.stdin.flush()
        outputs = [child.communicate(timeout=WAIT) for child in children]
    finally:
        for child in children:
            if child.poll() is None:
                child.kill()
                child.wait()
    claimed: dict[str, list[str]] = {}
    for n, (child, (out, err)) in enumerate(zip(children, outputs, strict=True)):
        assert child.returncode == 0, err
        claimed[f"proc{n}"] = json.loads(out)
    every = [task_id for ids in claimed.values() for task_id in ids]
    assert len(every) == len(set(every)), "a task was claimed twice"
    assert set(every) == created
    for worker, ids in claimed.items():
        assert ids == sorted(ids)
        assert {journal.get_task(t).lease_owner for t in ids} <= {worker}
    assert journal.tasks(status="pending") == []
    assert journal.verify().ok


# === recover ======================================================================================


def test_recover_touches_only_expired_leases_of_its_tenant(journal: Journal) -> None:
    other = journal.for_tenant(OTHER)
    sid = new_session(journal)
    live = journal.create_task(sid, "live")
    claim(journal, "alive", types=["live"], lease_seconds=LEASE)
    pending = journal.create_task(sid, "pending")
    done = journal.create_task(sid, "done")
    claim_one(journal, done.task_id)
    journal.complete_task(done.task_id, attempt=1)
    # The tenant's last claim (a later claim of ours would settle this lease before recover).
    expired = journal.create_task(sid, "expired")
    expired_claim = claim(journal, "crashed", types=["expired"], lease_seconds=TINY)
    theirs_sid = new_session(other)
    theirs = other.create_task(theirs_sid, "expired")
    theirs_claim = claim(other, "their-crashed", lease_seconds=TINY)
    wait_expired(expired_claim)
    wait_expired(theirs_claim)
    untouched = {t: journal.get_task(t) for t in (live.task_id, pending.task_id, done.task_id)}
    others_before = snapshot(journal)[OTHER]

    recovery = journal.recover()
    assert (recovery.requeued, recovery.failed) == ([expired.task_id], [])
    assert journal.get_task(expired.task_id).status == "pending"
    assert {t: journal.get_task(t) for t in untouched} == untouched
    assert snapshot(journal)[OTHER] == others_before
    assert other.get_task(theirs.task_id) == theirs_claim
    default_feed = settled_feed(journal)

    everywhere = journal.recover(all_tenants=True)
    assert (everywhere.requeued, everywhere.failed) == ([theirs.task_id], [])
    settled = other.get_task(theirs.task_id)
    assert (settled.status, settled.retry_count) == ("pending", 1)
    assert settled_feed(journal) == default_feed
    last = settled_feed(other)[-1]
    assert (last.session_id, last.type, last.payload["task_id"]) == (
        theirs_sid,
        "task_failed",
        theirs.task_id,
    )
    assert journal.verify().ok
    assert other.verify().ok


def turn(journal: Journal, events: list[tuple[str, dict[str, Any]]], title: str) -> str:
    sid = new_session(journal, title)
    if events:
        journal.append_many(sid, [{"type": t, "payload": p} for t, p in events])
    return sid


USER = ("user_message", {"content": "帮我查一下订单数量"})
REPLY = ("assistant_message", {"content": "你当前有 42 个订单。"})
THINKING = ("assistant_message", {"content": "我查一下。"})
CALL = ("tool_call", {"call_id": "call_1", "name": "query_order_count", "arguments": "{}"})
RESULT = ("tool_result", {"call_id": "call_1", "content": "42"})


def test_recover_lists_sessions_whose_last_turn_was_cut(journal: Journal) -> None:
    only_user = turn(journal, [USER], "user message, no reply")
    cut = {
        only_user,
        turn(journal, [USER, THINKING, CALL], "tool call without result"),
        turn(journal, [USER, CALL, RESULT], "tool result, no reply yet"),
        turn(journal, [USER, REPLY, USER], "second turn cut"),
        turn(journal, [USER, REPLY, ("myapp.note", {"x": 1}), USER], "custom event between"),
    }
    whole = {
        turn(journal, [], "empty"),
        turn(journal, [USER, REPLY], "answered"),
        turn(journal, [USER, CALL, RESULT, REPLY], "tool turn answered"),
        turn(journal, [USER, REPLY, ("myapp.note", {"x": 1})], "custom event after"),
        turn(
            journal,
            [USER, REPLY, ("user_message", {"content": "改一下", "supersedes": 2})],
            "user message corrected after the reply",
        ),
    }
    deleted = turn(journal, [USER], "deleted while cut")
    journal.delete_session(deleted)
    other = journal.for_tenant(OTHER)
    theirs = turn(other, [USER], "their cut turn")

    recovery = journal.recover()
    assert {s.session_id for s in recovery.open_turns} == cut
    assert all(s.turn_open and s.tenant == "default" for s in recovery.open_turns)
    assert {s.session_id for s in recovery.open_turns} & (whole | {deleted, theirs}) == set()
    for sid in whole:
        assert journal.get_session(sid).turn_open is False
    assert journal.get_session(deleted).turn_open is True  # cut, but deleted: not resumed

    assert {s.session_id for s in journal.recover(all_tenants=True).open_turns} == cut | {theirs}
    assert {s.session_id for s in other.recover().open_turns} == {theirs}
    # Finishing the turn takes the session off the list.
    journal.append(only_user, *REPLY)
    assert len(journal.recover().open_turns) == len(cut) - 1
    assert journal.verify().ok


# === listing and tenants ==========================================================================


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


# === AsyncJournal =================================================================================


def test_async_task_round_trip(journal_url: str) -> None:
    async def body(aj: AsyncJournal) -> None:
        sid = (await aj.create_session("async")).session_id
        task, created = await aj.create_task_ex(sid, "job", {"n": 1}, idempotency_key="k")
        assert created is True
        assert await aj.create_task_ex(sid, "job", {"n": 1}, idempotency_key="k") == (task, False)
        child = await aj.create_task(sid, "step", parent_task_id=task.task_id)
        assert await aj.claim_task("aw", types=["nope"]) is None
        claimed = await aj.claim_task("aw", types=["job"], lease_seconds=LEASE)
        assert claimed is not None
        assert (claimed.task_id, claimed.attempt, claimed.lease_owner) == (task.task_id, 1, "aw")
        progressed = await aj.task_progress(task.task_id, 0.5, attempt=1, message="half")
        assert (progressed.progress, progressed.message) == (0.5, "half")
        with pytest.raises(Conflict):
            await aj.complete_task(task.task_id, attempt=2)
        done = await aj.complete_task(task.task_id, attempt=1, output=["ok"])
        assert (done.status, done.output, done.progress) == ("completed", ["ok"], 1.0)
        assert await aj.get_task(task.task_id) == done
        step = await aj.claim_task("aw", lease_seconds=LEASE)
        assert step is not None
        assert step.task_id == child.task_id
        retried = await aj.fail_task(child.task_id, attempt=1, error="flaky")
        assert (retried.status, retried.retry_count) == ("pending", 1)
        cancelled = await aj.cancel_task(child.task_id, reason="enough")
        assert (cancelled.status, cancelled.error) == ("cancelled", "enough")
        assert [t.task_id for t in await aj.tasks(session_id=sid)] == [task.task_id, child.task_id]
        assert [t.task_id for t in await aj.tasks(status="open")] == []
        with pytest.raises(TaskNotFound):
            await aj.for_tenant(OTHER).get_task(task.task_id)
        recovery = await aj.recover()
        assert (recovery.requeued, recovery.failed, recovery.open_turns) == ([], [], [])
        assert (await aj.verify()).ok

    async def main() -> None:
        async with await AsyncJournal.open(journal_url) as aj:
            await asyncio.wait_for(body(aj), WAIT)

    asyncio.run(main())
    with Journal.open(journal_url) as journal:
        assert [e.type for e in settled_feed(journal) if e.type.startswith("task_")] == [
            "task_created",
            "task_created",
            "task_started",
            "task_progress",
            "task_completed",
            "task_started",
            "task_failed",
            "task_cancelled",
        ]


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
