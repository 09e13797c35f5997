"""A worker's reports: failures and retries, progress, completion, and reports out of turn."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import pytest

from agentjournal import Conflict, InvalidArgument, InvalidEvent, Journal, TaskNotFound
from helpers.task_contract import (
    LEASE,
    NO_SUCH_TASK,
    claim,
    new_session,
    now_ms,
    rejected,
    task_events,
    wait_for,
)


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
