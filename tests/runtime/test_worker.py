"""`Worker`: claims a task, keeps its lease alive while the handler runs, and records how the
attempt ended (completed, retried, failed, or nothing at all when the attempt lost its lease).
A real journal on every backend; the "other worker" opens the same database through a second
`Journal` (on PostgreSQL: another instance on the same schema)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from agentjournal import Conflict, InvalidArgument, Journal
from agentjournal.demo import order_agent
from agentjournal.journal import now_ms
from agentjournal.projection import Task
from agentjournal.runtime import PermanentFailure, TaskRun, Worker

WAIT = 30.0  # seconds any wait may take before the test fails instead of hanging


@pytest.fixture
def session_id(journal: Journal) -> str:
    return journal.create_session("work").session_id


@pytest.fixture
def other(journal_url: str, journal: Journal) -> Iterator[Journal]:
    """A second `Journal` on the same database: another worker's view."""
    with Journal.open(journal_url) as opened:
        yield opened


def task_events(journal: Journal, session_id: str, task_id: str) -> list[tuple[str, Any]]:
    return [
        (e.type, e.payload)
        for e in journal.events(session_id, limit=1000)
        if e.payload.get("task_id") == task_id
    ]


def test_run_once_completes_the_task_with_the_handlers_output(
    journal: Journal, session_id: str
) -> None:
    task = journal.create_task(session_id, "echo", {"text": "hi"})
    seen: list[Task] = []

    def echo(run: TaskRun) -> Any:
        seen.append(run.task)
        return {"echo": run.task.input["text"], "attempt": run.attempt}

    worker = Worker(journal, {"echo": echo}, name="w1")
    done = worker.run_once()

    assert done is not None
    assert done.task_id == task.task_id
    assert (done.status, done.output, done.attempt) == (
        "completed",
        {"echo": "hi", "attempt": 1},
        1,
    )
    assert journal.get_task(task.task_id) == done
    [running] = seen
    assert (running.status, running.lease_owner, running.attempt) == ("running", "w1", 1)
    assert [kind for kind, _ in task_events(journal, session_id, task.task_id)] == [
        "task_created",
        "task_started",
        "task_completed",
    ]
    assert worker.run_once() is None  # nothing left
    assert journal.verify().ok


def test_a_worker_claims_only_its_own_task_types(journal: Journal, session_id: str) -> None:
    theirs = journal.create_task(session_id, "theirs")
    ran: list[str] = []
    worker = Worker(journal, {"mine": lambda run: ran.append(run.task.task_id)})

    assert worker.run_once() is None
    assert ran == []
    assert journal.get_task(theirs.task_id).status == "pending"
    with pytest.raises(InvalidArgument):
        Worker(journal, {})


def test_the_heartbeat_keeps_a_task_longer_than_its_lease(
    journal: Journal, other: Journal, session_id: str
) -> None:
    """The handler runs until two leases' time has passed, reporting once in the middle;
    meanwhile another worker tries to claim the task at every step and never gets it. The
    heartbeats repeat the last progress reported: an earlier attempt's, then the handler's."""
    task = journal.create_task(session_id, "slow")

    def crashes(run: TaskRun) -> None:
        run.progress(0.3, "step 3")
        raise RuntimeError("crashed")

    Worker(journal, {"slow": crashes}).run_once()
    # The other worker sees the task, pending and claimable: only the lease keeps it away.
    assert other.get_task(task.task_id) == journal.get_task(task.task_id)
    assert other.get_task(task.task_id).status == "pending"
    claims: list[Task | None] = []

    def beats() -> list[tuple[float, str]]:
        return [
            (p["progress"], p["message"])
            for kind, p in task_events(journal, session_id, task.task_id)
            if kind == "task_progress" and p["attempt"] == 2
        ]

    def wait_until(done: Callable[[], bool]) -> None:
        give_up = time.monotonic() + WAIT
        while not done():
            time.sleep(0.05)
            claims.append(other.claim_task("other-worker", ["slow"], lease_seconds=0.3))
            assert claims[-1] is None, "another worker took the task over"
            assert time.monotonic() < give_up, "no heartbeat"

    def slow(run: TaskRun) -> str:
        assert (run.task.progress, run.task.message, run.attempt) == (0.3, "step 3", 2)
        first_expiry = run.task.lease_expires_at
        assert first_expiry is not None
        wait_until(lambda: len(beats()) >= 2)
        run.progress(0.5, "half")
        reported = len(beats())
        wait_until(lambda: now_ms() > first_expiry + 600 and len(beats()) >= reported + 2)
        return "slept"

    done = Worker(journal, {"slow": slow}, name="w1", lease_seconds=0.3).run_once()

    assert done is not None
    assert (done.status, done.output, done.attempt, done.retry_count) == (
        "completed",
        "slept",
        2,
        1,
    )
    assert len(claims) >= 6  # 0.6 s past the first lease, one claim every 0.05 s
    assert claims == [None] * len(claims)
    reports = beats()
    half = reports.index((0.5, "half"))
    assert half >= 2
    assert reports == [(0.3, "step 3")] * half + [(0.5, "half")] * (len(reports) - half)
    assert len(reports) - half >= 3
    assert task_events(journal, session_id, task.task_id)[-1][0] == "task_completed"
    assert journal.verify().ok


def test_a_handler_exception_retries_the_task(journal: Journal, session_id: str) -> None:
    task = journal.create_task(session_id, "flaky", max_retries=1)

    def flaky(run: TaskRun) -> None:
        raise RuntimeError(f"attempt {run.attempt} broke")

    worker = Worker(journal, {"flaky": flaky})
    retried = worker.run_once()

    assert retried is not None
    assert (retried.status, retried.retry_count, retried.attempt) == ("pending", 1, 1)
    assert retried.error == "RuntimeError: attempt 1 broke"
    assert (retried.lease_owner, retried.lease_expires_at) == (None, None)
    assert journal.get_task(task.task_id) == retried

    spent = worker.run_once()  # retries used up: failed for good
    assert spent is not None
    assert (spent.status, spent.retry_count, spent.attempt) == ("failed", 1, 2)
    assert spent.error == "RuntimeError: attempt 2 broke"
    assert worker.run_once() is None


def test_permanent_failure_fails_the_task_without_retry(journal: Journal, session_id: str) -> None:
    task = journal.create_task(session_id, "strict", {"n": -1})

    def strict(run: TaskRun) -> None:
        raise PermanentFailure(f"n must be positive, got {run.task.input['n']}")

    failed = Worker(journal, {"strict": strict}).run_once()

    assert failed is not None
    assert (failed.status, failed.retry_count) == ("failed", 0)
    assert failed.error == "PermanentFailure: n must be positive, got -1"
    assert journal.get_task(task.task_id).status == "failed"


def test_a_lost_lease_stops_the_handler_and_records_nothing_more(
    journal: Journal, session_id: str
) -> None:
    """The task is cancelled from outside while its handler runs: the handler's next progress
    raises Conflict, and the worker records neither progress nor an outcome for it."""
    task = journal.create_task(session_id, "long")
    started, cancelled = threading.Event(), threading.Event()
    raised: list[Conflict] = []
    returned: list[Task | None] = []

    def long(run: TaskRun) -> str:
        run.progress(0.2, "first step")
        started.set()
        assert cancelled.wait(WAIT)
        try:
            run.progress(0.5, "second step")
        except Conflict as exc:
            raised.append(exc)
            raise
        return "finished anyway"

    worker = Worker(journal, {"long": long})
    thread = threading.Thread(target=lambda: returned.append(worker.run_once()))
    thread.start()
    assert started.wait(WAIT)
    journal.cancel_task(task.task_id, reason="the user gave up")
    cut_at = journal.get_session(session_id).last_seq
    cancelled.set()
    thread.join(WAIT)
    assert not thread.is_alive()

    assert len(raised) == 1
    [ended] = returned
    assert ended is not None
    assert (ended.status, ended.error, ended.progress) == ("cancelled", "the user gave up", 0.2)
    assert journal.get_session(session_id).last_seq == cut_at  # nothing after the cancel
    assert [kind for kind, _ in task_events(journal, session_id, task.task_id)][-2:] == [
        "task_progress",
        "task_cancelled",
    ]
    assert journal.verify().ok


def test_a_new_attempt_continues_from_the_progress_of_the_last(
    journal: Journal, session_id: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`report.orders` dies after four of its ten steps; the next attempt starts at step 5."""
    monkeypatch.setenv("AGENTJOURNAL_REPORT_STEP", "0")
    report_orders = order_agent.build().task_handlers["report.orders"]
    task = journal.create_task(session_id, "report.orders")

    def dies_after_four_steps(run: TaskRun) -> Any:
        report = run.progress

        def progress(value: float, message: str | None = None) -> None:
            report(value, message)
            if value >= 0.4:
                raise RuntimeError("the worker's process died")

        run.progress = progress  # type: ignore[method-assign]
        return report_orders(run)

    first = Worker(journal, {"report.orders": dies_after_four_steps}, name="first").run_once()
    assert first is not None
    assert (first.status, first.progress, first.message) == ("pending", 0.4, "step 4/10")

    resumed_from: list[float] = []

    def continues(run: TaskRun) -> Any:
        resumed_from.append(run.task.progress)
        return report_orders(run)

    second = Worker(journal, {"report.orders": continues}, name="second").run_once()

    assert second is not None
    assert resumed_from == [0.4]
    assert (second.status, second.attempt) == ("completed", 2)
    assert second.output == {"orders": 42, "resumed_from": 4}
    steps = [
        (p["attempt"], p["message"])
        for kind, p in task_events(journal, session_id, task.task_id)
        if kind == "task_progress"
    ]
    assert steps == [(1, f"step {n}/10") for n in range(1, 5)] + [
        (2, f"step {n}/10") for n in range(5, 11)
    ]


def test_run_processes_tasks_until_stopped(journal: Journal, session_id: str) -> None:
    stop = threading.Event()
    ran: list[int] = []
    progressed = threading.Condition()

    def job(run: TaskRun) -> int:
        n = int(run.task.input)
        if n == 5:
            stop.set()  # stop while a task is in hand: it is still finished
        with progressed:
            ran.append(n)
            progressed.notify_all()
        return n * 10

    def wait_for(count: int) -> None:
        with progressed:
            assert progressed.wait_for(lambda: len(ran) >= count, WAIT), ran

    tasks = [journal.create_task(session_id, "job", n) for n in (1, 2, 3)]
    worker = Worker(journal, {"job": job}, poll_interval=0.02)
    thread = threading.Thread(target=worker.run, args=(stop,))
    thread.start()
    try:
        wait_for(3)
        tasks.append(journal.create_task(session_id, "job", 4))  # found by polling
        wait_for(4)
        tasks.append(journal.create_task(session_id, "job", 5))
        thread.join(WAIT)
        assert not thread.is_alive()
    finally:
        stop.set()
        thread.join(WAIT)

    left = journal.create_task(session_id, "job", 6)
    assert ran == [1, 2, 3, 4, 5]
    assert [(t.status, t.output) for t in (journal.get_task(t.task_id) for t in tasks)] == [
        ("completed", n * 10) for n in (1, 2, 3, 4, 5)
    ]
    assert journal.get_task(left.task_id).status == "pending"
