"""`CommitSignal`, the wake-up live readers wait on: a coroutine that waits is woken by a commit,
and a cancelled one stays cancelled even when a commit woke it in the same instant."""

from __future__ import annotations

import asyncio

import pytest

from agentjournal.backends.group_commit import CommitSignal


def test_a_commit_wakes_a_waiting_coroutine() -> None:
    async def main() -> int:
        signal = CommitSignal()
        waiting = asyncio.create_task(signal.wait_async(signal.version, timeout=60))
        await asyncio.sleep(0)  # the task now waits
        signal.notify()
        return await asyncio.wait_for(waiting, 10)

    assert asyncio.run(main()) == 1


def test_a_cancel_that_meets_a_wake_up_is_not_lost() -> None:
    # A reader whose last client left is cancelled; if a commit woke it in the same turn of the
    # loop, swallowing the cancel would keep it running and its stream's clean-up waiting forever
    # (asyncio.wait_for on Python 3.11 returns the result instead of raising in that case).
    async def main() -> None:
        signal = CommitSignal()
        waiting = asyncio.create_task(signal.wait_async(signal.version, timeout=60))
        await asyncio.sleep(0)
        signal.notify()  # schedules the wake-up ...
        waiting.cancel()  # ... and the cancel lands in the same turn of the loop
        with pytest.raises(asyncio.CancelledError):
            await waiting

    asyncio.run(main())
