"""Task transitions: which task event each verb appends, decided from the task as it stands.

Pure code. The journal reads the task inside its write transaction, asks here what the verb means
(or why it is refused), and appends the payload returned; `projection` folds the payloads into the
`tasks` rows. Every payload states what the task became (status, attempt, retry count, lease), so
the fold never has to decide anything again.
"""

from __future__ import annotations

import itertools
import math
import secrets
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from agentjournal.errors import Conflict
from agentjournal.projection import Session, Task

__all__ = [
    "DEFAULT_LEASE_SECONDS",
    "MAX_LEASE_SECONDS",
    "OPEN_STATUSES",
    "Recovery",
    "cancelled",
    "completed",
    "created",
    "expired",
    "failed",
    "new_task_id",
    "progressed",
    "started",
]

OPEN_STATUSES: Final = ("pending", "running")
DEFAULT_LEASE_SECONDS: Final = 30.0
MAX_LEASE_SECONDS: Final = 7 * 24 * 3600.0


@dataclass
class Recovery:
    """What `Journal.recover()` did and found: tasks whose lease had expired, put back to
    pending (`requeued`) or failed because their retries were spent (`failed`), and the sessions
    whose last agent turn a crash cut (`open_turns`, for `resume_incomplete`)."""

    requeued: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    open_turns: list[Session] = field(default_factory=list)


_created = itertools.count()  # next() is atomic under the GIL: no two threads get one number


def new_task_id(now_ms: int) -> str:
    """Time, then a per-process counter, then randomness: ids sort in creation order (also within
    one millisecond of one process), which is the queue's order."""
    return f"task_{now_ms:012x}{next(_created) % 0x1000000:06x}{secrets.token_hex(3)}"


def created(
    task_id: str, type_: str, input_: Any, parent_task_id: str | None, max_retries: int
) -> dict[str, Any]:
    payload = {"task_id": task_id, "type": type_, "input": input_, "max_retries": max_retries}
    if parent_task_id is not None:
        payload["parent_task_id"] = parent_task_id
    return payload


def _lease_end(now_ms: int, lease_seconds: float) -> int:
    return now_ms + math.ceil(lease_seconds * 1000)


def started(task: Task, worker: str, lease_seconds: float, now_ms: int) -> dict[str, Any]:
    """`claim_task`: a pending task starts its next attempt under `worker`'s lease."""
    assert task.status == "pending", task.status
    return {
        "task_id": task.task_id,
        "attempt": task.attempt + 1,
        "worker": worker,
        "lease_seconds": lease_seconds,
        "lease_expires_at": _lease_end(now_ms, lease_seconds),
    }


def _check_current(task: Task, attempt: int, verb: str) -> None:
    """Reports belong to the running attempt; a worker whose lease was taken over gets
    `Conflict` and changes nothing."""
    if task.status != "running":
        raise Conflict(
            f"task {task.task_id!r} is {task.status}, not running: attempt {attempt} can no "
            f"longer {verb} it"
        )
    if attempt != task.attempt:
        raise Conflict(
            f"attempt {attempt} of task {task.task_id!r} is over (the task is on attempt "
            f"{task.attempt}; its lease expired and was taken over): stop working on it"
        )


def progressed(
    task: Task, attempt: int, progress: float, message: str | None, now_ms: int
) -> dict[str, Any]:
    """`task_progress`: record how far the attempt got and renew its lease for as long again."""
    _check_current(task, attempt, "report progress on")
    assert task.lease_seconds is not None
    payload: dict[str, Any] = {
        "task_id": task.task_id,
        "attempt": attempt,
        "progress": progress,
        "lease_expires_at": _lease_end(now_ms, task.lease_seconds),
    }
    if message is not None:
        payload["message"] = message
    return payload


def completed(task: Task, attempt: int, output: Any) -> dict[str, Any]:
    _check_current(task, attempt, "complete")
    return {"task_id": task.task_id, "attempt": attempt, "output": output}


def failed(task: Task, attempt: int, error: str, retryable: bool) -> dict[str, Any]:
    """Back to pending while retries remain (and the failure is retryable), else failed."""
    _check_current(task, attempt, "fail")
    retry = retryable and task.retry_count < task.max_retries
    return {
        "task_id": task.task_id,
        "attempt": attempt,
        "error": error,
        "retry": retry,
        "retry_count": task.retry_count + retry,
    }


def expired(task: Task) -> dict[str, Any]:
    """An expired lease counts as a failed attempt, so a task that kills its worker cannot loop
    forever."""
    return failed(
        task,
        task.attempt,
        f"lease expired: worker {task.lease_owner!r} stopped reporting during attempt "
        f"{task.attempt}",
        retryable=True,
    )


def cancelled(task: Task, family: Sequence[Task], reason: str | None) -> list[dict[str, Any]]:
    """`cancel_task`: the task and its open descendants (found in `family`, the session's
    tasks, also below children that already ended), the deepest first."""
    if task.status not in OPEN_STATUSES:
        raise Conflict(
            f"task {task.task_id!r} is {task.status}; only pending or running tasks can be "
            "cancelled"
        )
    descendants, frontier = [task], {task.task_id}
    while frontier:
        children = [t for t in family if t.parent_task_id in frontier]
        descendants += children
        frontier = {t.task_id for t in children}
    extra = {} if reason is None else {"reason": reason}
    doomed = [t for t in reversed(descendants) if t.status in OPEN_STATUSES]
    return [{"task_id": t.task_id} | extra for t in doomed]
