"""`AsyncJournal`: the same verbs as `Journal`, awaitable.

Each verb runs the sync verb on a worker thread, so there is one implementation of every rule and
concurrent coroutines meet in the same group commit as threads do. Waiting for live events does not
hold a thread: `subscribe` sleeps on the commit signal in the event loop.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import AsyncIterator, Callable, Collection, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import TracebackType
from typing import Any, ParamSpec, Self, TypeVar

from agentjournal.events import DEFAULT_MAX_PAYLOAD_BYTES, Event
from agentjournal.journal import Durability, EventLike, Journal
from agentjournal.projection import Message, Session, Task, ToolCall
from agentjournal.replay import ContextFit, Format, ReplayFormat, Tokenizer
from agentjournal.tasks import DEFAULT_LEASE_SECONDS, Recovery
from agentjournal.verify import VerifyReport

__all__ = ["AsyncJournal"]

P = ParamSpec("P")
T = TypeVar("T")


class AsyncJournal:
    """`Journal` for asyncio. `await AsyncJournal.open("agent.db")`, then the same verbs."""

    def __init__(
        self,
        journal: Journal,
        *,
        max_threads: int = 32,
        executor: ThreadPoolExecutor | None = None,
    ) -> None:
        self.journal = journal
        self._owns_pool = executor is None
        self._pool = executor or ThreadPoolExecutor(max_threads, thread_name_prefix="agentjournal")

    def for_tenant(self, tenant: str) -> AsyncJournal:
        """The same database and worker threads, scoped to another tenant."""
        return AsyncJournal(self.journal.for_tenant(tenant), executor=self._pool)

    @classmethod
    async def open(
        cls,
        url: str | Path,
        *,
        tenant: str = "default",
        durability: Durability = "full",
        max_payload_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES,
    ) -> AsyncJournal:
        journal = await asyncio.to_thread(
            Journal.open,
            url,
            tenant=tenant,
            durability=durability,
            max_payload_bytes=max_payload_bytes,
        )
        return cls(journal)

    @property
    def tenant(self) -> str:
        return self.journal.tenant

    async def _run(self, fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._pool, functools.partial(fn, *args, **kwargs))

    async def close(self) -> None:
        await self._run(self.journal.close)
        if self._owns_pool:
            self._pool.shutdown(wait=False)

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    async def create_session(
        self,
        title: str = "",
        *,
        model: str | None = None,
        system_prompt: str | None = None,
        metadata: Mapping[str, Any] | None = None,
        session_id: str | None = None,
        idempotency_key: str | None = None,
    ) -> Session:
        return await self._run(
            self.journal.create_session,
            title,
            model=model,
            system_prompt=system_prompt,
            metadata=metadata,
            session_id=session_id,
            idempotency_key=idempotency_key,
        )

    async def get_session(self, session_id: str) -> Session:
        return await self._run(self.journal.get_session, session_id)

    async def update_session(
        self,
        session_id: str,
        *,
        title: str | None = None,
        metadata: Mapping[str, Any] | None = None,
        status: str | None = None,
        idempotency_key: str | None = None,
    ) -> Session:
        return await self._run(
            self.journal.update_session,
            session_id,
            title=title,
            metadata=metadata,
            status=status,
            idempotency_key=idempotency_key,
        )

    async def delete_session(self, session_id: str) -> Session:
        return await self._run(self.journal.delete_session, session_id)

    async def purge_session(self, session_id: str, *, actor: str = "library") -> int:
        return await self._run(self.journal.purge_session, session_id, actor=actor)

    async def sessions(
        self, *, status: str | None = None, limit: int = 50, cursor: str | None = None
    ) -> list[Session]:
        return await self._run(self.journal.sessions, status=status, limit=limit, cursor=cursor)

    async def append(
        self,
        session_id: str,
        type: str,
        payload: Mapping[str, Any] | None = None,
        *,
        idempotency_key: str | None = None,
        expected_seq: int | None = None,
    ) -> Event:
        return await self._run(
            self.journal.append,
            session_id,
            type,
            payload,
            idempotency_key=idempotency_key,
            expected_seq=expected_seq,
        )

    async def append_many(
        self, session_id: str, events: Sequence[EventLike], *, expected_seq: int | None = None
    ) -> list[Event]:
        return await self._run(
            self.journal.append_many, session_id, events, expected_seq=expected_seq
        )

    async def create_session_ex(
        self,
        title: str = "",
        *,
        model: str | None = None,
        system_prompt: str | None = None,
        metadata: Mapping[str, Any] | None = None,
        session_id: str | None = None,
        idempotency_key: str | None = None,
    ) -> tuple[Session, bool]:
        return await self._run(
            self.journal.create_session_ex,
            title,
            model=model,
            system_prompt=system_prompt,
            metadata=metadata,
            session_id=session_id,
            idempotency_key=idempotency_key,
        )

    async def append_many_ex(
        self, session_id: str, events: Sequence[EventLike], *, expected_seq: int | None = None
    ) -> tuple[list[Event], bool]:
        return await self._run(
            self.journal.append_many_ex, session_id, events, expected_seq=expected_seq
        )

    async def compact(
        self, session_id: str, until_seq: int, summary: str, *, idempotency_key: str | None = None
    ) -> Event:
        return await self._run(
            self.journal.compact, session_id, until_seq, summary, idempotency_key=idempotency_key
        )

    async def fork(
        self,
        session_id: str,
        at_seq: int | None = None,
        *,
        title: str | None = None,
        idempotency_key: str | None = None,
    ) -> Session:
        return await self._run(
            self.journal.fork, session_id, at_seq, title=title, idempotency_key=idempotency_key
        )

    async def fork_ex(
        self,
        session_id: str,
        at_seq: int | None = None,
        *,
        title: str | None = None,
        idempotency_key: str | None = None,
    ) -> tuple[Session, bool]:
        return await self._run(
            self.journal.fork_ex, session_id, at_seq, title=title, idempotency_key=idempotency_key
        )

    async def events(
        self, session_id: str, *, after: int = 0, before: int | None = None, limit: int = 100
    ) -> list[Event]:
        return await self._run(
            self.journal.events, session_id, after=after, before=before, limit=limit
        )

    async def events_all(self, *, after: str | None = None, limit: int = 100) -> list[Event]:
        return await self._run(self.journal.events_all, after=after, limit=limit)

    async def messages(self, session_id: str, *, last: int | None = None) -> list[Message]:
        return await self._run(self.journal.messages, session_id, last=last)

    async def tool_calls(
        self,
        session_id: str,
        *,
        call_ids: Collection[str] | None = None,
        open_only: bool = False,
    ) -> list[ToolCall]:
        return await self._run(
            self.journal.tool_calls, session_id, call_ids=call_ids, open_only=open_only
        )

    async def replay(
        self, session_id: str, *, until: int | None = None, format: ReplayFormat = "openai"
    ) -> list[dict[str, Any]] | dict[str, Any]:
        return await self._run(self.journal.replay, session_id, until=until, format=format)

    async def context(
        self,
        session_id: str,
        *,
        max_tokens: int,
        tokenizer: Tokenizer | None = None,
        format: Format = "openai",
    ) -> list[dict[str, Any]] | dict[str, Any]:
        return await self._run(
            self.journal.context,
            session_id,
            max_tokens=max_tokens,
            tokenizer=tokenizer,
            format=format,
        )

    async def context_fit(
        self,
        session_id: str,
        *,
        max_tokens: int,
        tokenizer: Tokenizer | None = None,
        format: Format = "openai",
    ) -> ContextFit:
        return await self._run(
            self.journal.context_fit,
            session_id,
            max_tokens=max_tokens,
            tokenizer=tokenizer,
            format=format,
        )

    async def verify(self, *, rebuild: bool = False) -> VerifyReport:
        return await self._run(self.journal.verify, rebuild=rebuild)

    # -- tasks ------------------------------------------------------------------------------

    async def create_task(
        self,
        session_id: str,
        type: str,
        input: Any = None,
        *,
        parent_task_id: str | None = None,
        max_retries: int = 3,
        idempotency_key: str | None = None,
    ) -> Task:
        return await self._run(
            self.journal.create_task,
            session_id,
            type,
            input,
            parent_task_id=parent_task_id,
            max_retries=max_retries,
            idempotency_key=idempotency_key,
        )

    async def create_task_ex(
        self,
        session_id: str,
        type: str,
        input: Any = None,
        *,
        parent_task_id: str | None = None,
        max_retries: int = 3,
        idempotency_key: str | None = None,
    ) -> tuple[Task, bool]:
        return await self._run(
            self.journal.create_task_ex,
            session_id,
            type,
            input,
            parent_task_id=parent_task_id,
            max_retries=max_retries,
            idempotency_key=idempotency_key,
        )

    async def get_task(self, task_id: str) -> Task:
        return await self._run(self.journal.get_task, task_id)

    async def tasks(
        self,
        *,
        status: str | None = None,
        type: str | None = None,
        session_id: str | None = None,
        limit: int = 100,
        after: str | None = None,
    ) -> list[Task]:
        return await self._run(
            self.journal.tasks,
            status=status,
            type=type,
            session_id=session_id,
            limit=limit,
            after=after,
        )

    async def claim_task(
        self,
        worker: str,
        types: Sequence[str] | None = None,
        lease_seconds: float = DEFAULT_LEASE_SECONDS,
    ) -> Task | None:
        return await self._run(self.journal.claim_task, worker, types, lease_seconds)

    async def task_progress(
        self, task_id: str, progress: float, *, attempt: int, message: str | None = None
    ) -> Task:
        return await self._run(
            self.journal.task_progress, task_id, progress, attempt=attempt, message=message
        )

    async def complete_task(self, task_id: str, *, attempt: int, output: Any = None) -> Task:
        return await self._run(self.journal.complete_task, task_id, attempt=attempt, output=output)

    async def fail_task(
        self, task_id: str, *, attempt: int, error: str, retryable: bool = True
    ) -> Task:
        return await self._run(
            self.journal.fail_task, task_id, attempt=attempt, error=error, retryable=retryable
        )

    async def cancel_task(self, task_id: str, *, reason: str | None = None) -> Task:
        return await self._run(self.journal.cancel_task, task_id, reason=reason)

    async def recover(self, *, all_tenants: bool = False) -> Recovery:
        return await self._run(self.journal.recover, all_tenants=all_tenants)

    async def open_turns(self, *, all_tenants: bool = False) -> list[Session]:
        return await self._run(self.journal.open_turns, all_tenants=all_tenants)

    async def subscribe(
        self, session_id: str, *, after: int = 0, poll_interval: float = 0.2
    ) -> AsyncIterator[Event]:
        """As `Journal.subscribe`; waits in the event loop, not on a thread."""
        deleted = (await self.get_session(session_id)).status == "deleted"
        signal = self.journal.storage.signal
        cursor = after
        while True:
            seen = signal.version
            page = await self.events(session_id, after=cursor, limit=500)
            for event in page:
                yield event
                cursor = event.seq
                if event.ends_session_stream:
                    return
            if len(page) < 500:
                if deleted:
                    return
                await signal.wait_async(seen, poll_interval)

    async def subscribe_all(
        self, *, after: str | None = None, poll_interval: float = 0.2
    ) -> AsyncIterator[Event]:
        """As `Journal.subscribe_all`."""
        signal = self.journal.storage.signal
        cursor = after
        while True:
            seen = signal.version
            page = await self.events_all(after=cursor, limit=500)
            for event in page:
                yield event
                cursor = event.position
            if len(page) < 500:
                await signal.wait_async(seen, poll_interval)
