"""What the task contract tests share: real clocks and leases, `rejected()`, claims."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest

from agentjournal import Journal, Task
from expected import settled_feed

WAIT = 30.0  # bound on every wait; never an expected duration
LEASE = 600.0  # a lease that cannot expire while a test runs
TINY = 0.05  # a lease that expires almost at once
OTHER = "other"  # the second tenant of every isolation check
NO_SUCH_TASK = "task_000000000000000000000000"


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
