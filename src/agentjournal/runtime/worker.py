"""`Worker`: claims tasks, keeps their leases alive, runs a Python function for each.

A handler gets a `TaskRun`: the task as claimed (its `progress` is where an earlier attempt got
to, so a long job can continue from there) and `progress()` to report. What the handler returns
is the task's output; an exception fails the attempt (retried while retries remain, unless it is
`PermanentFailure`). While the handler runs, a heartbeat renews the lease; if the lease is lost
(it expired and someone took the task over, or the task was cancelled) the next `progress()`
raises `Conflict`, and nothing the old attempt reports is recorded.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
from collections.abc import Callable, Mapping
from typing import Any

from agentjournal.errors import Conflict, InvalidArgument
from agentjournal.journal import Journal
from agentjournal.projection import Task
from agentjournal.tasks import DEFAULT_LEASE_SECONDS

__all__ = ["Handler", "PermanentFailure", "TaskRun", "Worker"]

log = logging.getLogger("agentjournal.worker")


class PermanentFailure(Exception):
    """Raise from a handler to fail the task for good (no retry)."""


class TaskRun:
    """One attempt at a task, as a handler sees it."""

    def __init__(self, journal: Journal, task: Task) -> None:
        self.journal = journal
        self.task = task
        self._lock = threading.Lock()
        self._reported = (task.progress, task.message)

    @property
    def attempt(self) -> int:
        return self.task.attempt

    def progress(self, value: float, message: str | None = None) -> None:
        """Record how far this attempt got (0.0-1.0) and renew the lease. `Conflict` if the
        attempt is over: stop working."""
        with self._lock:
            self.task = self.journal.task_progress(
                self.task.task_id, value, attempt=self.attempt, message=message
            )
            self._reported = (value, message)

    def heartbeat(self) -> None:
        """Renew the lease with the last progress reported."""
        value, message = self._reported
        self.progress(value, message)


Handler = Callable[[TaskRun], Any]


class Worker:
    """Runs the handlers of some task types, one task at a time, until stopped."""

    def __init__(
        self,
        journal: Journal,
        handlers: Mapping[str, Handler],
        *,
        name: str | None = None,
        lease_seconds: float = DEFAULT_LEASE_SECONDS,
        poll_interval: float = 0.5,
    ) -> None:
        if not handlers:
            raise InvalidArgument("a worker needs at least one handler")
        self.journal = journal
        self.handlers = dict(handlers)
        self.name = name or f"{socket.gethostname()}:{os.getpid()}:{id(self):x}"
        self.lease_seconds = lease_seconds
        self.poll_interval = poll_interval

    def run_once(self) -> Task | None:
        """Claim one task and run it to its end; the task as it ended, or None if there was
        none to claim."""
        task = self.journal.claim_task(self.name, list(self.handlers), self.lease_seconds)
        if task is None:
            return None
        run = TaskRun(self.journal, task)
        stop = threading.Event()
        beat = threading.Thread(
            target=self._heartbeat, args=(run, stop), name=f"lease-{task.task_id}", daemon=True
        )
        beat.start()
        try:
            output = self.handlers[task.type](run)
        except Conflict as exc:
            log.info("task %s: attempt %d lost its lease: %s", task.task_id, run.attempt, exc)
            return self.journal.get_task(task.task_id)
        except Exception as exc:
            error = f"{type(exc).__name__}: {exc}"
            retryable = not isinstance(exc, PermanentFailure)
            return self._report(
                lambda: self.journal.fail_task(
                    task.task_id, attempt=run.attempt, error=error, retryable=retryable
                ),
                task,
            )
        finally:
            stop.set()
            beat.join()
        return self._report(
            lambda: self.journal.complete_task(task.task_id, attempt=run.attempt, output=output),
            task,
        )

    def run(self, stop: threading.Event) -> None:
        """Work until `stop` is set (finishing the task in hand)."""
        while not stop.is_set():
            try:
                if self.run_once() is None:
                    stop.wait(self.poll_interval)
            except Exception:  # the journal closing under us, a disk error: pause, then retry
                log.exception("worker %s: claiming failed", self.name)
                stop.wait(self.poll_interval)

    def _heartbeat(self, run: TaskRun, stop: threading.Event) -> None:
        while not stop.wait(self.lease_seconds / 3):
            try:
                run.heartbeat()
            except Conflict:
                return  # the attempt is over; the handler learns at its next progress()
            except Exception:  # a busy or failing disk: the next beat may still save the lease
                log.exception("task %s: heartbeat failed", run.task.task_id)

    def _report(self, report: Callable[[], Task], task: Task) -> Task:
        try:
            return report()
        except Conflict as exc:
            log.info("task %s: result of a lost attempt dropped: %s", task.task_id, exc)
            return self.journal.get_task(task.task_id)
