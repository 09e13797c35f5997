"""agentjournal as the OpenAI Agents SDK's `Session` (`pip install 'agentjournal[openai-agents]'`).

```python
from agents import Agent, Runner
from agentjournal.integrations.openai_agents import JournalSession

async with JournalSession.open("agent.db", "user-42") as session:  # or postgresql://...
    result = await Runner.run(agent, "帮我查一下订单数量", session=session)
```

The SDK session `user-42` is the journal session `user-42`, created on first use. Every
`add_items` is one atomic `append_many`; items become journal events as
`agentjournal.integrations.responses` says (a user message a `user_message`, a function call a
`tool_call`, ...), each carrying the item itself, so `get_items` returns exactly what was added
and `replay(format="responses")` the same. `pop_item` appends `replay.item_removed` and
`clear_session` appends `replay.cleared`: both hide items from `get_items` and every replay, and
delete nothing (the inspector and `replay(until=)` still show what was there; `purge_session` is
the only erasure). docs/integrations.md has the whole story.
"""

from __future__ import annotations

import asyncio
import random
import threading
import time
import weakref
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

from agents.items import TResponseInputItem
from agents.memory import SessionSettings
from agents.memory.session_settings import resolve_session_limit

from agentjournal.aio import AsyncJournal
from agentjournal.errors import Conflict, InvalidArgument, SessionNotFound
from agentjournal.events import CLEARED, ITEM_REMOVED, MESSAGE_ROLES, Event, NewEvent
from agentjournal.integrations.responses import call_ids, item_events
from agentjournal.journal import Durability, Journal
from agentjournal.replay import responses_items

__all__ = ["JournalSession"]

T = TypeVar("T")
_PAGE = 200  # events read per step when reading a session backwards
_ATTEMPTS = 100  # add/pop rounds lost to other processes' writers before giving up


class _SessionLock:
    """One lock per journal session in this process (weakly kept: it lives while a
    `JournalSession` for that session does)."""

    __slots__ = ("__weakref__", "lock")

    def __init__(self) -> None:
        self.lock = threading.Lock()


_locks: weakref.WeakValueDictionary[tuple[int, str, str], _SessionLock] = (
    weakref.WeakValueDictionary()
)
_locks_guard = threading.Lock()


def _session_lock(journal: Journal, session_id: str) -> _SessionLock:
    key = (id(journal.storage), journal.tenant, session_id)
    with _locks_guard:
        found = _locks.get(key)
        if found is None:
            found = _locks[key] = _SessionLock()
        return found


class JournalSession:
    """The SDK's `agents.memory.Session` protocol over a `Journal` or an `AsyncJournal`.

    `session_settings.limit` is the default `limit` of `get_items`, as in the SDK's own sessions.
    `title`, `metadata`, `system_prompt` and `model` are used when the journal session is created
    (on the first call that needs it); an existing session is used as it is.
    """

    session_settings: SessionSettings | None = None

    def __init__(
        self,
        session_id: str,
        journal: Journal | AsyncJournal,
        *,
        session_settings: SessionSettings | None = None,
        title: str | None = None,
        metadata: Mapping[str, Any] | None = None,
        system_prompt: str | None = None,
        model: str | None = None,
    ) -> None:
        if isinstance(journal, AsyncJournal):
            self.journal = journal.journal
            self._async: AsyncJournal | None = journal
        elif isinstance(journal, Journal):
            self.journal, self._async = journal, None
        else:
            raise InvalidArgument("journal must be a Journal or an AsyncJournal")
        if not isinstance(session_id, str) or not session_id:
            raise InvalidArgument("session_id must be a non-empty string")
        self.session_id = session_id
        self.session_settings = session_settings
        self._fields: dict[str, Any] = {
            "title": session_id if title is None else title,
            "metadata": {"integration": "openai-agents", **(metadata or {})},
            "system_prompt": system_prompt,
            "model": model,
        }
        self._exists = False
        self._owned = False
        # Writers of one session in this process take turns reading and appending (else each
        # group commit lets one of them win); other processes are met by expected_seq.
        self._lock = _session_lock(self.journal, session_id)

    @classmethod
    def open(
        cls,
        url: str,
        session_id: str,
        *,
        tenant: str = "default",
        durability: Durability = "full",
        session_settings: SessionSettings | None = None,
        **session_fields: Any,
    ) -> JournalSession:
        """A session over a journal of its own at `url` (a SQLite path or `postgresql://…`),
        closed by `close()` or by leaving `async with`. `session_fields`: title, metadata,
        system_prompt, model, used when the journal session is created."""
        journal = Journal.open(url, tenant=tenant, durability=durability)
        try:
            session = cls(session_id, journal, session_settings=session_settings, **session_fields)
        except BaseException:
            journal.close()
            raise
        session._owned = True
        return session

    def close(self) -> None:
        """Close the journal if `open` opened it (a journal handed in stays open)."""
        if self._owned:
            self.journal.close()

    async def __aenter__(self) -> JournalSession:
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.close()

    # -- the Session protocol ---------------------------------------------------------------

    async def get_items(self, limit: int | None = None) -> list[TResponseInputItem]:
        """The latest `limit` visible items (all with None), oldest first; `limit=0` gives []."""
        resolved = resolve_session_limit(limit, self.session_settings)
        if resolved is not None and (isinstance(resolved, bool) or not isinstance(resolved, int)):
            raise InvalidArgument("limit must be an integer or None")
        return await self._call(self._get_items, resolved)

    async def add_items(self, items: list[TResponseInputItem]) -> None:
        """Append `items` in one atomic `append_many`. A batch that repeats the newest items
        and holds an item with an id (what a retry after a timeout sends) is not added again."""
        if isinstance(items, (str, bytes, Mapping)) or not isinstance(items, Sequence):
            raise InvalidArgument("items must be a list of Responses input items")
        if items:
            await self._call(self._add_items, list(items))

    async def pop_item(self) -> TResponseInputItem | None:
        """Hide the newest visible item and return it; None if there is none."""
        return await self._call(self._pop_item)

    async def clear_session(self) -> None:
        """Hide every item: `get_items` and every replay start empty. Nothing is deleted."""
        await self._call(self._clear)

    # -- the work, in a worker thread -------------------------------------------------------

    async def _call(self, fn: Callable[..., T], *args: Any) -> T:
        if self._async is not None:
            return await self._async._run(fn, *args)
        return await asyncio.to_thread(fn, *args)

    def _ensure(self) -> int:
        """The session's last seq, creating the session first if it does not exist."""
        try:
            return self.journal.get_session(self.session_id).last_seq
        except SessionNotFound:
            if self._exists:
                raise  # purged under us: never recreated silently
        try:
            session = self.journal.create_session(
                session_id=self.session_id,
                idempotency_key=f"openai-agents:{self.session_id}",
                **{k: v for k, v in self._fields.items() if v is not None},
            )
        except Conflict:  # created by someone else meanwhile (or under other fields)
            session = self.journal.get_session(self.session_id)
        self._exists = True
        return session.last_seq

    def _get_items(self, limit: int | None) -> list[TResponseInputItem]:
        if limit == 0:
            return []
        try:
            last_seq = self.journal.get_session(self.session_id).last_seq
        except SessionNotFound:
            return []
        newest = self._newest(last_seq, None if limit is None or limit < 0 else limit)
        return _items(newest)

    def _add_items(self, items: list[TResponseInputItem]) -> None:
        with self._lock.lock:
            for attempt in range(_ATTEMPTS):
                last_seq = self._ensure()
                if any(_has_id(item) for item in items):
                    tail = _items(self._newest(last_seq, len(items)))
                    if tail == items:
                        return  # a retry of the batch that added them
                events = self._events_for(items)
                if self._append(events, last_seq):
                    return
                _back_off(attempt)
        raise Conflict(f"session {self.session_id}: other writers kept appending; try again")

    def _events_for(self, items: list[TResponseInputItem]) -> list[NewEvent]:
        named = call_ids(items)
        calls = self.journal.tool_calls(self.session_id, call_ids=named) if named else []
        return item_events(
            items,
            used_calls={c.call_id for c in calls},
            open_calls={c.call_id for c in calls if c.status == "pending"},
        )

    def _append(self, events: list[NewEvent], last_seq: int) -> bool:
        """Append at `last_seq`; False if another writer appended first (read again)."""
        try:
            self.journal.append_many(self.session_id, events, expected_seq=last_seq)
        except Conflict:
            if self.journal.get_session(self.session_id).last_seq != last_seq:
                return False
            raise
        return True

    def _pop_item(self) -> TResponseInputItem | None:
        with self._lock.lock:
            for attempt in range(_ATTEMPTS):
                try:
                    last_seq = self.journal.get_session(self.session_id).last_seq
                except SessionNotFound:
                    return None
                newest = self._newest(last_seq, 1)
                if not newest:
                    return None
                removal = NewEvent(ITEM_REMOVED, {"seq": newest[0].seq})
                if self._append([removal], last_seq):
                    popped = _items(newest)
                    # Only a call written by the journal's own runtime and still without its
                    # result gives no item in a replay; popped alone, it is given as one.
                    return popped[0] if popped else _call_item(newest[0])
                _back_off(attempt)
        raise Conflict(f"session {self.session_id}: other writers kept appending; try again")

    def _clear(self) -> None:
        try:
            self.journal.get_session(self.session_id)
        except SessionNotFound:
            return
        self.journal.append(self.session_id, CLEARED, {})

    def _newest(self, last_seq: int, count: int | None) -> list[Event]:
        """The newest `count` visible item events (all with None), oldest first: read backwards
        from `last_seq`, through removals, down to the newest clear or compaction."""
        found: list[Event] = []
        removed: set[int] = set()
        floor = 0
        before = last_seq + 1
        # A page the size of the request (and a few for removals), doubling if that was short:
        # the latest 20 items cost about 20 events' reading, whatever the session's length.
        size = _PAGE if count is None else min(_PAGE, count + 4)
        while before > floor + 1:
            page = self.journal.events(self.session_id, before=before, limit=size)
            size = min(_PAGE, size * 2)
            if not page:
                break
            for event in reversed(page):
                if event.seq <= floor or event.type == CLEARED:
                    return found[::-1]
                if event.type == ITEM_REMOVED:
                    removed.add(event.payload["seq"])
                elif event.type == "context_compacted":
                    floor = event.payload["until_seq"]
                elif event.seq not in removed and _is_item(event):
                    found.append(event)
                    if count is not None and len(found) >= count:
                        return found[::-1]
            before = page[0].seq
        return found[::-1]


def _back_off(attempt: int) -> None:
    """After losing a round to another process: wait a random while, longer each time (at most
    50 ms), so that contending writers stop meeting at the same moment."""
    time.sleep(random.uniform(0, min(0.05, 0.001 * 2**attempt)))


def _is_item(event: Event) -> bool:
    """Whether `responses_items` makes an item of the event."""
    if "item" in event.payload:
        return True
    if event.type in MESSAGE_ROLES:
        return "supersedes" not in event.payload
    return event.type in ("tool_call", "tool_result")


def _items(events: list[Event]) -> list[TResponseInputItem]:
    return responses_items(events)  # type: ignore[return-value]


def _call_item(event: Event) -> TResponseInputItem:
    payload = event.payload
    return {
        "type": "function_call",
        "call_id": payload["call_id"],
        "name": payload["name"],
        "arguments": payload["arguments"],
    }


def _has_id(item: Any) -> bool:
    return isinstance(item, Mapping) and bool(item.get("id") or item.get("call_id"))
