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

import os
import random
import threading
import time
import weakref
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from agents.items import TResponseInputItem
from agents.memory import SessionSettings
from agents.memory.session import _CompactionSnapshot
from agents.memory.session_settings import coerce_session_settings, resolve_session_limit

from agentjournal.aio import AsyncJournal
from agentjournal.errors import Conflict, InvalidArgument, SessionNotFound, UnknownToolCall
from agentjournal.events import CLEARED, ITEM_REMOVED, MESSAGE_ROLES, Event, NewEvent
from agentjournal.integrations.known_state import KnownState
from agentjournal.integrations.responses import call_ids, item_events
from agentjournal.integrations.worker import in_worker, journals
from agentjournal.journal import Durability, Journal
from agentjournal.replay import responses_items

__all__ = ["JournalSession"]

T = TypeVar("T")
_PAGE = 200  # events read per step when reading a session backwards
_ATTEMPTS = 100  # add/pop rounds lost to other processes' writers before giving up
_VERBS = ("get_items", "add_items", "pop_item", "clear_session")


class _Shared:
    """One per journal session in this process (weakly kept: it lives while a `JournalSession`
    for that session does): the lock its writers take turns under, and what the last of them
    left known of the session."""

    __slots__ = ("__weakref__", "known", "lock")

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.known = KnownState()


_shared: weakref.WeakValueDictionary[tuple[int, str, str], _Shared] = weakref.WeakValueDictionary()
_shared_guard = threading.Lock()


# The worker threads of every `JournalSession.open` session of this process (by pid: a forked
# child gets its own; the parent's threads do not exist in it). A session's calls run on them, as
# a shared `AsyncJournal`'s do: so many conversations' appends are in flight at once and meet in
# one group commit of their (shared) storage. `asyncio.to_thread`'s default pool, min(32, cores
# + 4) threads, would cap that at 6 appends a commit on 2 cores.
_OPENED_THREADS = 32
_opened_pool: tuple[int, ThreadPoolExecutor] | None = None


def _opened_executor() -> ThreadPoolExecutor:
    global _opened_pool
    with _shared_guard:
        if _opened_pool is None or _opened_pool[0] != os.getpid():
            pool = ThreadPoolExecutor(_OPENED_THREADS, thread_name_prefix="agentjournal-session")
            _opened_pool = (os.getpid(), pool)
        return _opened_pool[1]


def _shared_for(journal: Journal, session_id: str) -> _Shared:
    # The database's number cannot be reused while the entry lives: its sessions keep it open.
    key = (journal.database, journal.tenant, session_id)
    with _shared_guard:
        found = _shared.get(key)
        if found is None:
            found = _shared[key] = _Shared()
        return found


class JournalSession:
    """The SDK's `agents.memory.Session` protocol over a `Journal` or an `AsyncJournal`.

    `session_settings` (a `SessionSettings`, or a dict of its fields: checked as the SDK's own
    sessions check it, an unknown key a `TypeError`) gives the default `limit` of `get_items`.
    `title`, `metadata`, `system_prompt` and `model` are used when the journal session is created
    (on the first call that needs it); an existing session is used as it is.
    """

    session_settings: SessionSettings | None = None

    def __init__(
        self,
        session_id: str,
        journal: Journal | AsyncJournal,
        *,
        session_settings: SessionSettings | dict[str, Any] | None = None,
        title: str | None = None,
        metadata: Mapping[str, Any] | None = None,
        system_prompt: str | None = None,
        model: str | None = None,
    ) -> None:
        self.journal, self._async = journals(journal)
        if not isinstance(session_id, str) or not session_id:
            raise InvalidArgument("session_id must be a non-empty string")
        self.session_id = session_id
        # As SQLiteSession does: the Runner reads `session_settings` as a SessionSettings.
        self.session_settings = (
            SessionSettings()
            if session_settings is None
            else coerce_session_settings(session_settings)
        )
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
        self._shared = _shared_for(self.journal, session_id)

    @classmethod
    def open(
        cls,
        url: str,
        session_id: str,
        *,
        tenant: str = "default",
        durability: Durability = "full",
        session_settings: SessionSettings | dict[str, Any] | None = None,
        **session_fields: Any,
    ) -> JournalSession:
        """A session over a journal of its own at `url` (a SQLite path or `postgresql://…`),
        closed by `close()` or by leaving `async with`. `session_fields`: title, metadata,
        system_prompt, model, used when the journal session is created.

        Every open of one database in a process shares its storage (one writer, one group
        commit), and every session opened here runs its calls on one pool of worker threads of
        the process, so a session per conversation costs what one shared `AsyncJournal` costs."""
        journal = Journal.open(url, tenant=tenant, durability=durability)
        try:
            session = cls(
                session_id,
                AsyncJournal(journal, executor=_opened_executor()),
                session_settings=session_settings,
                **session_fields,
            )
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

    async def _atomic_replace_items(self, items: list[TResponseInputItem]) -> bool:
        """The SDK's hook for replacing the whole history (`OpenAIResponsesCompactionSession`
        calls it to store a compacted history): `replay.cleared` and the items in one
        `append_many`, so a crash leaves the old items or the new ones, never neither. The
        history before stays in the journal. Without this hook the SDK clears, then adds: it
        does so (False here) for a subclass that changes how items are read or written."""
        if self._verbs_changed():
            return False
        if isinstance(items, (str, bytes, Mapping)) or not isinstance(items, Sequence):
            raise InvalidArgument("items must be a list of Responses input items")
        await self._call(self._add_items, list(items), True)
        return True

    async def _get_compaction_snapshot(
        self, limit: int, *, prune_prefix: Callable[[TResponseInputItem], bool] | None = None
    ) -> _CompactionSnapshot | None:
        """The SDK's hook for compacting part of the history (`OpenAIResponsesCompactionSession`
        looks for it, as on its own SQLite and SQLAlchemy sessions): the newest `limit` items,
        whether they are all of them, and a `replace_suffix(start, output)` that hides the items
        from `start` on and appends `output` in one `append_many`, if the newest items are still
        those (else it writes nothing and answers False). `prune_prefix` (the SDK's encrypted
        session gives it) hides, in the same append, the oldest items it says have expired.
        None, so that the SDK takes its whole-history path, for a session its own runtime wrote
        (events that are not SDK items) and for a subclass that changes how items are read or
        written."""
        if self._verbs_changed():
            return None
        newest, complete = await self._call(self._snapshot, limit)
        if any("item" not in event.payload for event in newest):
            return None
        items = _items(newest)

        async def replace_suffix(start: int, output: list[TResponseInputItem]) -> bool:
            expected = [event.seq for event in newest[start:]]
            if not expected:
                return False
            return await self._call(self._replace_suffix, expected, list(output), prune_prefix)

        return _CompactionSnapshot(items, complete, replace_suffix)

    def _verbs_changed(self) -> bool:
        """Whether a subclass overrides a verb: the SDK's replacement hooks would bypass it."""
        return any(
            getattr(type(self), name) is not getattr(JournalSession, name) for name in _VERBS
        )

    # -- the work, in a worker thread -------------------------------------------------------

    async def _call(self, fn: Callable[..., T], *args: Any) -> T:
        return await in_worker(self._async, fn, *args)

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

    def _add_items(self, items: list[TResponseInputItem], replace: bool = False) -> None:
        """Append `items`; with `replace`, after a `replay.cleared` in the same append."""
        with self._shared.lock:
            if not replace and self._add_as_known(items):
                return
            for attempt in range(_ATTEMPTS):
                last_seq = self._ensure()
                known = self._shared.known
                if replace:
                    known.read(last_seq, [], complete=False)
                elif last_seq == 0:
                    known.read(0, [], complete=True)
                elif any(_has_id(item) for item in items):
                    newest = self._newest(last_seq, len(items))
                    if _items(newest) == items:
                        return  # a retry of the batch that added them
                    pairs = _pairs(newest)
                    if len(pairs) < len(newest):  # the runtime's events: items of their own
                        known.read(last_seq, [], complete=False)
                    else:
                        known.read(last_seq, pairs, complete=len(newest) < len(items))
                else:
                    known.read(last_seq, [], complete=False)
                events = self._events_for(items)
                appended = self._append(
                    [NewEvent(CLEARED, {}), *events] if replace else events, last_seq
                )
                if appended is not None:
                    if replace:
                        known.cleared(appended[0].seq)
                        appended = appended[1:]
                    if appended:
                        known.wrote(appended, _pairs(appended))
                    return
                known.forget()
                _back_off(attempt)
        raise Conflict(f"session {self.session_id}: other writers kept appending; try again")

    def _add_as_known(self, items: list[TResponseInputItem]) -> bool:
        """Append on what this process knows of the session, without reading it; False if that
        is not enough or the journal found it out of date (nothing written: read and retry)."""
        known = self._shared.known
        if known.last_seq is None or known.is_retry(items) is not False:
            return False  # a retry is confirmed against the session as it is
        events = known.events_for(items)
        if events is None:
            return False
        try:
            appended = self.journal.append_many(
                self.session_id, events, expected_seq=known.last_seq
            )
        except (Conflict, UnknownToolCall):
            known.forget()
            return False
        except BaseException:
            known.forget()
            raise
        known.wrote(appended, _pairs(appended))
        return True

    def _events_for(self, items: list[TResponseInputItem]) -> list[NewEvent]:
        named = call_ids(items)
        calls = self.journal.tool_calls(self.session_id, call_ids=named) if named else []
        self._shared.known.read_calls({c.call_id: c.status == "pending" for c in calls})
        return item_events(
            items,
            used_calls={c.call_id for c in calls},
            open_calls={c.call_id for c in calls if c.status == "pending"},
        )

    def _append(self, events: list[NewEvent], last_seq: int) -> list[Event] | None:
        """Append at `last_seq`; None if another writer appended first (read again)."""
        try:
            return self.journal.append_many(self.session_id, events, expected_seq=last_seq)
        except Conflict:
            if self.journal.get_session(self.session_id).last_seq != last_seq:
                return None
            raise

    def _snapshot(self, limit: int) -> tuple[list[Event], bool]:
        """The newest `limit` item events and whether they are all of the visible ones."""
        try:
            last_seq = self.journal.get_session(self.session_id).last_seq
        except SessionNotFound:
            return [], True
        newest = self._newest(last_seq, limit + 1)
        return newest[-limit:] if limit > 0 else [], len(newest) <= limit

    def _replace_suffix(
        self,
        expected: list[int],
        output: list[TResponseInputItem],
        prune_prefix: Callable[[TResponseInputItem], bool] | None,
    ) -> bool:
        """Hide the newest items if they are the items at `expected` (and the expired ones
        before them), then append `output`: one `append_many`; False, writing nothing, if the
        newest items are no longer those."""
        with self._shared.lock:
            for attempt in range(_ATTEMPTS):
                try:
                    last_seq = self.journal.get_session(self.session_id).last_seq
                except SessionNotFound:
                    return False
                # One item more tells whether any is left before the suffix; hiding an expired
                # prefix needs them all.
                newest = self._newest(last_seq, None if prune_prefix else len(expected) + 1)
                if [event.seq for event in newest[-len(expected) :]] != expected:
                    return False
                before = newest[: -len(expected)]
                hidden = list(expected)
                if prune_prefix is not None:
                    for event in before:
                        if "item" not in event.payload or not prune_prefix(event.payload["item"]):
                            break
                        hidden.append(event.seq)
                if len(hidden) == len(newest):  # everything visible goes: one clear says it
                    removals = [NewEvent(CLEARED, {})]
                else:
                    removals = [NewEvent(ITEM_REMOVED, {"seq": seq}) for seq in sorted(hidden)]
                appended = self._append([*removals, *self._events_for(output)], last_seq)
                # What this process knew of the session no longer holds: the next write reads.
                self._shared.known.forget()
                if appended is not None:
                    return True
                _back_off(attempt)
        raise Conflict(f"session {self.session_id}: other writers kept appending; try again")

    def _pop_item(self) -> TResponseInputItem | None:
        with self._shared.lock:
            known = self._shared.known
            for attempt in range(_ATTEMPTS):
                try:
                    last_seq = self.journal.get_session(self.session_id).last_seq
                except SessionNotFound:
                    return None
                newest = self._newest(last_seq, 1)
                if not newest:
                    return None
                removal = NewEvent(ITEM_REMOVED, {"seq": newest[0].seq})
                appended = self._append([removal], last_seq)
                if appended is not None:
                    if known.last_seq == last_seq:
                        known.removed(newest[0].seq, appended[0].seq)
                    else:
                        known.forget()
                    popped = _items(newest)
                    # Only a call written by the journal's own runtime and still without its
                    # result gives no item in a replay; popped alone, it is given as one.
                    return popped[0] if popped else _call_item(newest[0])
                known.forget()
                _back_off(attempt)
        raise Conflict(f"session {self.session_id}: other writers kept appending; try again")

    def _clear(self) -> None:
        with self._shared.lock:
            try:
                self.journal.get_session(self.session_id)
            except SessionNotFound:
                return
            known = self._shared.known
            try:
                cleared = self.journal.append(self.session_id, CLEARED, {})
            except BaseException:
                known.forget()
                raise
            if known.last_seq == cleared.seq - 1:
                known.cleared(cleared.seq)
            else:
                known.forget()

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


def _pairs(events: list[Event]) -> list[tuple[int, Any]]:
    """The events' (seq, item) pairs, as `KnownState` keeps them."""
    return [(event.seq, event.payload["item"]) for event in events if "item" in event.payload]


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
