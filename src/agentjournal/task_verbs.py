"""The task verbs of `Journal` (docs/concepts.md): queue work in a session, claim it under a
lease, report on it, and settle expired leases at start-up. `Journal` inherits them; what each
verb appends is decided by the pure transitions in `agentjournal.tasks`."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from agentjournal import tasks as transitions
from agentjournal.arguments import (
    MAX_INT,
    MAX_PAGE,
    check_fraction,
    check_id,
    check_int,
    check_name,
    now_ms,
)
from agentjournal.backends import WriteTx
from agentjournal.errors import Conflict, InvalidArgument, SessionNotFound, TaskNotFound
from agentjournal.events import MAX_TASK_RETRIES, TASK_STATUSES
from agentjournal.projection import Task
from agentjournal.read_verbs import ReadVerbs
from agentjournal.tasks import Recovery

__all__ = ["TaskVerbs"]

_TASK_FILTERS: dict[str | None, tuple[str, ...] | None] = {
    None: None,
    "open": transitions.OPEN_STATUSES,
    **{status: (status,) for status in TASK_STATUSES},
}


class TaskVerbs(ReadVerbs):
    """create_task, get_task, tasks, claim_task, task_progress, complete_task, fail_task,
    cancel_task, recover: the task verbs `Journal` inherits."""

    def create_task(
        self,
        session_id: str,
        type: str,
        input: Any = None,
        *,
        parent_task_id: str | None = None,
        max_retries: int = 3,
        idempotency_key: str | None = None,
    ) -> Task:
        """Queue durable work in a session (`task_created`); workers take it with
        `claim_task`. A sub-task names its parent, which must be a task of the same session."""
        return self.create_task_ex(
            session_id,
            type,
            input,
            parent_task_id=parent_task_id,
            max_retries=max_retries,
            idempotency_key=idempotency_key,
        )[0]

    def create_task_ex(
        self,
        session_id: str,
        type: str,
        input: Any = None,
        *,
        parent_task_id: str | None = None,
        max_retries: int = 3,
        idempotency_key: str | None = None,
    ) -> tuple[Task, bool]:
        """`create_task`, also telling whether it created (False: an idempotent repeat)."""
        check_id(session_id, "session_id")
        check_id(type, "task type")
        if parent_task_id is not None:
            check_id(parent_task_id, "parent_task_id")
        check_int(max_retries, "max_retries", 0, MAX_TASK_RETRIES)
        task_id = transitions.new_task_id(now_ms())
        payload = transitions.created(task_id, type, input, parent_task_id, max_retries)
        event = self._prepare("task_created", payload, idempotency_key, reserved=True)
        key = event.idempotency_key

        def work(tx: WriteTx) -> tuple[str, bool]:
            if self._state(tx, session_id) is None:
                raise SessionNotFound(session_id)
            original = None
            if key:
                keyed = (self.tenant, session_id, key)
                original = tx.events_by_keys([keyed]).get(keyed)
            if original:
                same = (
                    original.type == "task_created"
                    and {
                        **original.payload,
                        "task_id": task_id,
                    }
                    == event.payload
                )
                if not same:
                    raise Conflict(f"idempotency key {key!r} was used for another request")
                return original.payload["task_id"], False
            if parent_task_id is not None:
                parent = tx.task(parent_task_id)
                if parent is None or parent.tenant != self.tenant:
                    raise TaskNotFound(parent_task_id)
                if parent.session_id != session_id:
                    raise InvalidArgument(
                        f"parent task {parent_task_id!r} belongs to session {parent.session_id!r};"
                        " a sub-task lives in its parent's session"
                    )
            self._append_tx(tx, session_id, [event])
            return task_id, True

        created_id, created = self.storage.write(work)
        return self.get_task(created_id), created

    def get_task(self, task_id: str) -> Task:
        task = self.storage.task(self.tenant, check_id(task_id, "task_id"))
        if task is None:
            raise TaskNotFound(task_id)
        return task

    def tasks(
        self,
        *,
        status: str | None = None,
        type: str | None = None,
        session_id: str | None = None,
        limit: int = 100,
        after: str | None = None,
    ) -> list[Task]:
        """Tasks in queue order (oldest first). `status`: one status, "open" (pending and
        running) or None (all). Next page: `after=page[-1].task_id`."""
        if status not in _TASK_FILTERS:
            raise InvalidArgument(f"status must be one of {', '.join(TASK_STATUSES)}, open or None")
        for value, what in ((type, "type"), (session_id, "session_id"), (after, "after")):
            if value is not None:
                check_id(value, what)
        check_int(limit, "limit", 1, MAX_PAGE)
        return self.storage.tasks(
            self.tenant,
            statuses=_TASK_FILTERS[status],
            type=type,
            session_id=session_id,
            after=after,
            limit=limit,
        )

    def claim_task(
        self,
        worker: str,
        types: Sequence[str] | None = None,
        lease_seconds: float = transitions.DEFAULT_LEASE_SECONDS,
    ) -> Task | None:
        """Move the oldest pending task (of `types`, if given) to running under `worker`'s
        lease, atomically: two workers never hold one task. None if there is nothing to do.

        Leases that expired are settled first (back to pending, or failed when retries are
        spent), so work whose worker died is picked up without waiting for a restart."""
        check_name(worker, "worker")
        if types is not None:
            if isinstance(types, str) or not isinstance(types, Sequence) or not types:
                raise InvalidArgument("types must be a non-empty list of task types, or None")
            types = [check_id(t, "task type") for t in types]
        lease = check_fraction(lease_seconds, "lease_seconds", 0.001, transitions.MAX_LEASE_SECONDS)

        def work(tx: WriteTx) -> str | None:
            now = now_ms()
            for task in tx.expired_tasks(self.tenant, now, 100):
                self._append_tx(tx, task.session_id, [("task_failed", transitions.expired(task))])
            claimed = tx.next_task(self.tenant, types)
            if claimed is None:
                return None
            payload = transitions.started(claimed, worker, lease, now)
            self._append_tx(tx, claimed.session_id, [("task_started", payload)])
            return claimed.task_id

        claimed = self.storage.write(work)
        return None if claimed is None else self.get_task(claimed)

    def task_progress(
        self, task_id: str, progress: float, *, attempt: int, message: str | None = None
    ) -> Task:
        """Report how far `attempt` got (0.0-1.0) and renew its lease. `Conflict` if the
        attempt is over (its lease was taken over, or the task was cancelled)."""
        value = check_fraction(progress, "progress", 0.0, 1.0)
        if message is not None and not isinstance(message, str):
            raise InvalidArgument("message must be a string")
        return self._change_task(
            task_id,
            attempt,
            lambda task, now: [
                ("task_progress", transitions.progressed(task, attempt, value, message, now))
            ],
        )

    def complete_task(self, task_id: str, *, attempt: int, output: Any = None) -> Task:
        """Record the attempt's result (any JSON value); the task is completed."""
        return self._change_task(
            task_id,
            attempt,
            lambda task, now: [("task_completed", transitions.completed(task, attempt, output))],
        )

    def fail_task(self, task_id: str, *, attempt: int, error: str, retryable: bool = True) -> Task:
        """Record a failed attempt: back to pending while `retryable` and retries remain
        (`retry_count` < `max_retries`), else failed for good."""
        if not isinstance(error, str):
            raise InvalidArgument("error must be a string")
        if not isinstance(retryable, bool):
            raise InvalidArgument("retryable must be a boolean")
        return self._change_task(
            task_id,
            attempt,
            lambda task, now: [
                ("task_failed", transitions.failed(task, attempt, error, retryable))
            ],
        )

    def cancel_task(self, task_id: str, *, reason: str | None = None) -> Task:
        """Cancel a pending or running task and its open sub-tasks; a worker still on it gets
        `Conflict` at its next report."""
        if reason is not None and not isinstance(reason, str):
            raise InvalidArgument("reason must be a string")
        check_id(task_id, "task_id")

        def work(tx: WriteTx) -> None:
            task = self._task_tx(tx, task_id)
            family = tx.session_tasks((self.tenant, task.session_id))
            cancels = transitions.cancelled(task, family, reason)
            self._append_tx(tx, task.session_id, [("task_cancelled", c) for c in cancels])

        self.storage.write(work)
        return self.get_task(task_id)

    def _task_tx(self, tx: WriteTx, task_id: str) -> Task:
        task = tx.task(task_id)
        if task is None or task.tenant != self.tenant:
            raise TaskNotFound(task_id)
        return task

    def _change_task(
        self,
        task_id: str,
        attempt: int,
        decide: Callable[[Task, int], list[tuple[str, dict[str, Any]]]],
    ) -> Task:
        check_id(task_id, "task_id")
        check_int(attempt, "attempt", 1)

        def work(tx: WriteTx) -> None:
            task = self._task_tx(tx, task_id)
            self._append_tx(tx, task.session_id, decide(task, now_ms()))

        self.storage.write(work)
        return self.get_task(task_id)

    def recover(self, *, all_tenants: bool = False) -> Recovery:
        """Run at start-up: settle every running task whose lease expired (back to pending, or
        failed with "lease expired" when its retries are spent) and list the sessions whose
        last turn was cut. Its cost follows the open work, not the history. `all_tenants` is
        for the process that serves them all (`agentjournal serve`)."""
        recovery = Recovery()

        def work(tx: WriteTx) -> None:
            now = now_ms()
            for task in tx.expired_tasks(None if all_tenants else self.tenant, now, MAX_INT):
                owner = self._in_tenant(task.tenant)
                payload = transitions.expired(task)
                owner._append_tx(tx, task.session_id, [("task_failed", payload)])
                (recovery.requeued if payload["retry"] else recovery.failed).append(task.task_id)

        self.storage.write(work)
        recovery.open_turns = self.storage.open_turns(None if all_tenants else self.tenant)
        return recovery
