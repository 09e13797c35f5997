"""claim_task: leases, expiry and take-over, and racing threads and processes claiming once."""

from __future__ import annotations

import json
import math
import subprocess
import sys
import threading
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from agentjournal import Conflict, InvalidArgument, Journal
from helpers.task_contract import (
    LEASE,
    TINY,
    WAIT,
    claim,
    new_session,
    now_ms,
    rejected,
    snapshot,
    task_events,
    wait_expired,
)


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
