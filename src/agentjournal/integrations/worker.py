"""What the integrations that take a `Journal` or an `AsyncJournal` share: the journal their
blocking work runs on, and the thread it runs in from async code (the async journal's own
workers, or asyncio's when handed a `Journal`)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, TypeVar

from agentjournal.aio import AsyncJournal
from agentjournal.errors import InvalidArgument
from agentjournal.journal import Journal

__all__ = ["in_worker", "journals"]

T = TypeVar("T")


def journals(journal: Journal | AsyncJournal) -> tuple[Journal, AsyncJournal | None]:
    """The `Journal` to work on, and the `AsyncJournal` it came in as (None if it did not)."""
    if isinstance(journal, AsyncJournal):
        return journal.journal, journal
    if isinstance(journal, Journal):
        return journal, None
    raise InvalidArgument("journal must be a Journal or an AsyncJournal")


async def in_worker(async_journal: AsyncJournal | None, fn: Callable[..., T], *args: Any) -> T:
    """`fn(*args)` in a worker thread: the async journal's, if there is one."""
    if async_journal is not None:
        return await async_journal._run(fn, *args)
    return await asyncio.to_thread(fn, *args)
