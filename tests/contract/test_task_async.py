"""The task API through AsyncJournal: one round trip over every verb."""

from __future__ import annotations

import asyncio

import pytest

from agentjournal import AsyncJournal, Conflict, Journal, TaskNotFound
from expected import settled_feed
from helpers.task_contract import LEASE, OTHER, WAIT


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
