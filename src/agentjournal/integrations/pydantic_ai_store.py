"""agentjournal as PydanticAI's `ConversationStore` (`pip install 'agentjournal[pydantic-ai]'`).

```python
from pydantic_ai.conversation import Conversation
from agentjournal.integrations.pydantic_ai_store import JournalConversationStore

async with JournalConversationStore.open("agent.db") as store:  # or postgresql://...
    conversation = await store.load("user-42") or Conversation(conversation_id="user-42")
    result = await agent.run("帮我查一下订单数量", conversation=conversation)
    await store.save(result)
```

PydanticAI's `ConversationStore` works out which messages are new, where a history branches and
what a fork keeps; a backend implements five primitives over records and entries. Here:

- A conversation is the journal session of the same id (of the journal's tenant), created on
  its first save with `{"integration": "pydantic-ai"}` (and its `scope`) as metadata.
- An entry is one message, stored as `JournalHistory` stores messages (one event per part, with
  the journal's own message and tool-call mirrors), its first event carrying `entry: {id,
  parent}`. A conversation's entries all live in its own session, so the CLI, the inspector,
  replay and search show it like any other conversation.
- A record is a `pydantic_ai.record` event appended in the same `append_many` as the entries it
  adds: a save is all there or not at all. Its `revision` is checked against the newest record
  inside that append, which carries the `expected_seq` of the session as it was read: two writers
  that loaded the same revision cannot both save (the journal's optimistic concurrency), and a
  loser learns it as PydanticAI's `ConversationConflict`.
- `update` (title, metadata) appends `pydantic_ai.details`, checked the same way; the session's
  title follows the conversation's.
- A fork is a new session holding copies of the history it keeps (the same entries, ids
  included), then its record: it replays whole on its own. A branch moves the record's head
  within the session; the history it leaves stays there.
- `delete` appends `pydantic_ai.deleted` and deletes the journal session (a soft delete: the
  events stay, as they always do in the journal; `purge_session` erases). Saving the id again
  undeletes the session and starts a new conversation there, under a new revision.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import pydantic
from pydantic_ai.conversation_store import (
    ConversationConflict,
    ConversationDetails,
    ConversationEntry,
    ConversationRecord,
    ConversationStore,
)

from agentjournal.aio import AsyncJournal
from agentjournal.errors import Conflict, InvalidArgument, SessionNotFound
from agentjournal.events import Event, NewEvent
from agentjournal.integrations.pydantic_ai import dump_messages
from agentjournal.integrations.pydantic_ai_events import (
    DELETED,
    DETAILS,
    RECORD,
    StoredMessage,
    call_ids,
    message_events,
    stored_messages,
)
from agentjournal.integrations.pydantic_ai_records import (
    INTEGRATION,
    check_order,
    entries_of,
    is_conversation,
    record_from_payload,
    record_payload,
    walk_back,
)
from agentjournal.integrations.worker import in_worker, journals
from agentjournal.journal import Durability, Journal
from agentjournal.projection import Session

__all__ = ["JournalConversationStore"]

T = TypeVar("T")
_ATTEMPTS = 100  # writes lost to other writers of the same session before giving up
_MAX_PAGE = 10_000
_DETAIL_KEYS = ("title", "metadata")
_SESSIONS_KEPT = 64
_DETAILS: pydantic.TypeAdapter[ConversationDetails] = pydantic.TypeAdapter(ConversationDetails)


@dataclasses.dataclass(frozen=True, slots=True)
class _Read:
    """A session's messages as read: its last event then (seq and id), and the messages."""

    seq: int
    event_id: int
    messages: list[StoredMessage]


@dataclasses.dataclass(frozen=True, slots=True)
class _State:
    """A conversation's session as read: its last seq, and its record (None if it has none)."""

    session: Session | None
    record: ConversationRecord | None
    where: dict[str, list[int]]  # the record's entries: id -> [first seq, last seq]


class JournalConversationStore(ConversationStore):
    """PydanticAI's `ConversationStore` over a `Journal` or an `AsyncJournal` (the module's
    docstring tells how conversations are kept)."""

    def __init__(self, journal: Journal | AsyncJournal) -> None:
        self.journal, self._async = journals(journal)
        self._owned = False
        # Where entries are: id -> (session, first seq, last seq). Facts that never change (the
        # journal is append-only), learnt from every record and entry read or written.
        self._where: dict[str, tuple[str, int, int]] = {}
        # The messages of the sessions whose whole history was read last (at most
        # _SESSIONS_KEPT), so that the next load reads only what was appended since.
        self._known: OrderedDict[str, _Read] = OrderedDict()
        self._lock = threading.Lock()

    @classmethod
    def open(
        cls, url: str, *, tenant: str = "default", durability: Durability = "full"
    ) -> JournalConversationStore:
        """A store over a journal of its own at `url` (a SQLite path or `postgresql://…`),
        closed by `close()` or by leaving `async with`."""
        store = cls(Journal.open(url, tenant=tenant, durability=durability))
        store._owned = True
        return store

    def close(self) -> None:
        """Close the journal if `open` opened it (a journal handed in stays open)."""
        if self._owned:
            self.journal.close()

    async def __aenter__(self) -> JournalConversationStore:
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.close()

    # -- the primitives -----------------------------------------------------------------------

    async def read_record(self, conversation_id: str) -> ConversationRecord | None:
        return (await self._call(self._state, conversation_id)).record

    async def read_records(
        self, *, scope: str | None = None, limit: int | None = None
    ) -> Sequence[ConversationRecord]:
        return await self._call(self._list_records, scope, limit)

    async def write_record(
        self,
        record: ConversationRecord,
        *,
        new_entries: Sequence[ConversationEntry] = (),
        expected_revision: str | None,
    ) -> None:
        await self._call(self._write_record, record, list(new_entries), expected_revision)

    async def write_details(
        self,
        conversation_id: str,
        details: ConversationDetails,
        *,
        expected_revision: str,
        expected: ConversationDetails | None = None,
    ) -> ConversationRecord:
        return await self._call(
            self._write_details, conversation_id, details, expected_revision, expected or {}
        )

    async def delete_record(self, conversation_id: str, *, expected_revision: str) -> None:
        await self._call(self._delete_record, conversation_id, expected_revision)

    async def read_entry(self, entry_id: str) -> ConversationEntry:
        return await self._call(self._read_entry, entry_id)

    async def read_history(
        self, head_id: str | None, *, limit: int | None = None
    ) -> list[ConversationEntry]:
        """The history up to `head_id`, read from its session in a few range reads (not one
        read per entry)."""
        if head_id is None or limit == 0:
            return []
        return await self._call(self._history, head_id, limit)

    # -- the work, in a worker thread ---------------------------------------------------------

    async def _call(self, fn: Callable[..., T], *args: Any) -> T:
        return await in_worker(self._async, fn, *args)

    def _state(self, conversation_id: str) -> _State:
        """The conversation's session and its newest record, with the updates made since."""
        try:
            session = self.journal.get_session(conversation_id)
        except SessionNotFound:
            return _State(None, None, {})
        if not is_conversation(session):
            return _State(session, None, {})
        # Its events say whether the conversation is deleted (its newest `pydantic_ai.deleted`
        # or record), not the session's status: that follows them, a write later.
        details: dict[str, Any] = {}
        before, size = session.last_seq + 1, 8
        while before > 1:
            page = self.journal.events(conversation_id, before=before, last=size)
            if not page:
                break
            for event in reversed(page):
                if event.type == DETAILS:
                    for key in _DETAIL_KEYS:
                        if key in event.payload:
                            details.setdefault(key, event.payload[key])
                elif event.type == DELETED:
                    return _State(session, None, {})
                elif event.type == RECORD:
                    record = record_from_payload(event.payload, details)
                    where = event.payload["where"]
                    for entry_id, (first, last) in where.items():
                        self._where[entry_id] = (conversation_id, first, last)
                    return _State(session, record, where)
            before, size = page[0].seq, min(size * 4, _MAX_PAGE)
        return _State(session, None, {})

    def _list_records(self, scope: str | None, limit: int | None) -> list[ConversationRecord]:
        records: list[ConversationRecord] = []
        cursor: str | None = None
        while True:
            page = self.journal.sessions(limit=200, cursor=cursor)
            for session in page:
                if not is_conversation(session) or (
                    scope is not None and session.metadata.get("scope") != scope
                ):
                    continue
                record = self._state(session.session_id).record
                if record is not None and (scope is None or record.scope == scope):
                    records.append(record)
            if len(page) < 200:
                break
            cursor = page[-1].last_position
        records.sort(key=lambda record: record.updated_at, reverse=True)
        return records[:limit]

    def _write_record(
        self,
        record: ConversationRecord,
        new_entries: list[ConversationEntry],
        expected_revision: str | None,
    ) -> None:
        conversation_id = record.conversation_id
        check_order(new_entries)
        for _ in range(_ATTEMPTS):
            state = self._state(conversation_id)
            current = state.record
            if (current.revision if current is not None else None) != expected_revision:
                raise ConversationConflict(conversation_id)
            if state.session is not None and not is_conversation(state.session):
                raise ConversationConflict(
                    conversation_id,
                    message=f"Journal session {conversation_id!r} exists and is not a "
                    "PydanticAI conversation.",
                )
            if current is not None:  # an update since the record was read stays
                record = dataclasses.replace(record, title=current.title, metadata=current.metadata)
            entries = self._copied(record, state) + new_entries
            dumped = dump_messages([entry.message for entry in entries])
            opened = state.session is not None and state.session.status != "deleted"
            named = call_ids(dumped) if opened else set()
            calls = self.journal.tool_calls(conversation_id, call_ids=named) if named else []
            events = message_events(
                dumped,
                used_calls={c.call_id for c in calls},
                open_calls={c.call_id for c in calls if c.status == "pending"},
                entries=[{"id": entry.id, "parent": entry.parent_id} for entry in entries],
            )
            if not opened:
                # Bad input is refused before the session is created (or undeleted).
                self.journal.prepare_batch([*events, NewEvent(RECORD, record_payload(record))])
                self._open_session(conversation_id, state.session, record.scope)
                continue  # read it again, as it is now
            assert state.session is not None
            last_seq = state.session.last_seq
            placed: dict[str, tuple[int, int]] = {}
            seq = last_seq
            for entry, message in zip(entries, dumped, strict=True):
                count = max(1, len(message.get("parts") or ()))
                placed[entry.id] = (seq + 1, seq + count)
                seq += count
            where = self._record_where(record, placed, state)
            events.append(NewEvent(RECORD, record_payload(record, where)))
            try:
                self.journal.append_many(conversation_id, events, expected_seq=last_seq)
            except Conflict:
                if self.journal.get_session(conversation_id).last_seq == last_seq:
                    raise
                continue  # another writer appended meanwhile: check the revision again
            for entry_id, (first, last) in placed.items():
                self._where[entry_id] = (conversation_id, first, last)
            return
        raise ConversationConflict(conversation_id)

    def _copied(self, record: ConversationRecord, state: _State) -> list[ConversationEntry]:
        """The history a fork keeps, to copy into its own session (nothing otherwise)."""
        head = record.head_id
        if head is None or state.record is not None:
            return []
        where = self._where.get(head)
        if where is None or where[0] == record.conversation_id:
            return []
        try:
            return self._history(head, None)
        except LookupError:  # its conversation was purged meanwhile
            raise ConversationConflict(record.conversation_id) from None

    def _record_where(
        self, record: ConversationRecord, placed: dict[str, tuple[int, int]], state: _State
    ) -> dict[str, list[int]]:
        """Where the record's head and branch tips are in its session."""
        found: dict[str, list[int]] = {}
        missing = []
        for entry_id in [record.head_id, *record.branches]:
            if entry_id is None:
                continue
            if entry_id in placed:
                found[entry_id] = list(placed[entry_id])
            elif entry_id in state.where:
                found[entry_id] = state.where[entry_id]
            elif (known := self._where.get(entry_id)) and known[0] == record.conversation_id:
                found[entry_id] = [known[1], known[2]]
            else:
                missing.append(entry_id)
        if missing:
            located = self._locate(record.conversation_id, set(missing))
            if set(located) != set(missing):
                # An entry neither the store nor the new entries have (PydanticAI's contract).
                raise ConversationConflict(record.conversation_id)
            found.update(located)
        return found

    def _locate(self, conversation_id: str, ids: set[str]) -> dict[str, list[int]]:
        """Where the entries `ids` are in the session, reading all of it (a rare path: the
        store learns where entries are from what it reads and writes)."""
        events: list[Event] = []
        try:
            while True:
                after = events[-1].seq if events else 0
                page = self.journal.events(conversation_id, after=after, limit=_MAX_PAGE)
                events += page
                if len(page) < _MAX_PAGE:
                    break
        except SessionNotFound:
            return {}
        return {
            stored.entry["id"]: [stored.first_seq, stored.last_seq]
            for stored in stored_messages(events, hidden=True)
            if stored.entry is not None and stored.entry.get("id") in ids
        }

    def _open_session(
        self, conversation_id: str, session: Session | None, scope: str | None
    ) -> None:
        """Create the session, or undelete it."""
        metadata: dict[str, Any] = {"integration": INTEGRATION}
        if scope is not None:
            metadata["scope"] = scope
        if session is None:
            with contextlib.suppress(Conflict):  # created by another writer meanwhile
                self.journal.create_session(
                    conversation_id, session_id=conversation_id, metadata=metadata
                )
        else:
            self.journal.update_session(conversation_id, status="active", metadata=metadata)

    def _write_details(
        self,
        conversation_id: str,
        details: ConversationDetails,
        expected_revision: str,
        expected: ConversationDetails,
    ) -> ConversationRecord:
        unknown = (set(details) | set(expected)) - set(_DETAIL_KEYS)
        if unknown:
            raise NotImplementedError(f"{type(self).__name__} stores no {sorted(unknown)}")
        # Checked before anything is written: a title or metadata of another type stored in
        # `pydantic_ai.details` would make every later read of the record fail.
        try:
            _DETAILS.validate_python(details, strict=True)
        except pydantic.ValidationError as exc:
            raise InvalidArgument(f"conversation details: {exc}") from None
        for _ in range(_ATTEMPTS):
            state = self._state(conversation_id)
            record = state.record
            if record is None or record.revision != expected_revision:
                raise ConversationConflict(conversation_id)
            if any(getattr(record, key) != value for key, value in expected.items()):
                raise ConversationConflict(conversation_id)
            assert state.session is not None
            try:
                self.journal.append(
                    conversation_id,
                    DETAILS,
                    dict(details),
                    expected_seq=state.session.last_seq,
                )
            except Conflict:
                if self.journal.get_session(conversation_id).last_seq == state.session.last_seq:
                    raise
                continue
            if "title" in details:  # what the CLI and the inspector list it by
                title = details["title"]
                self.journal.update_session(
                    conversation_id, title=conversation_id if title is None else title
                )
            return dataclasses.replace(record, **copy.deepcopy(details))
        raise ConversationConflict(conversation_id)

    def _delete_record(self, conversation_id: str, expected_revision: str) -> None:
        for _ in range(_ATTEMPTS):
            state = self._state(conversation_id)
            record = state.record
            if record is None or record.revision != expected_revision:
                raise ConversationConflict(conversation_id)
            assert state.session is not None
            try:
                deleted = self.journal.append(
                    conversation_id,
                    DELETED,
                    {"revision": record.revision},
                    expected_seq=state.session.last_seq,
                )
            except Conflict:
                if self.journal.get_session(conversation_id).last_seq == state.session.last_seq:
                    raise
                continue
            # The conversation is deleted (the event says so); the session's soft delete
            # follows. A new conversation of this id saved in between is kept: its session is
            # made active again.
            self.journal.delete_session(conversation_id)
            since = self.journal.events(conversation_id, after=deleted.seq, limit=_MAX_PAGE)
            if any(event.type == RECORD for event in since):
                self.journal.update_session(conversation_id, status="active")
            return
        raise ConversationConflict(conversation_id)

    def _read_entry(self, entry_id: str) -> ConversationEntry:
        where = self._where.get(entry_id) or self._find(entry_id)
        if where is None:
            raise KeyError(entry_id)
        session_id, first, last = where
        events = self.journal.events(session_id, after=first - 1, limit=last - first + 1)
        stored = stored_messages(events, hidden=True)
        if not stored or stored[0].entry is None or stored[0].entry.get("id") != entry_id:
            raise KeyError(entry_id)
        return entries_of(stored[:1])[0]

    def _messages(self, session_id: str) -> list[StoredMessage]:
        """The session's messages, reading only the events this store has not read before: the
        journal is append-only, and the same last event still there (event ids are never reused,
        so a session purged and made again is read anew) says the rest is too."""
        with self._lock:
            known = self._known.get(session_id)
        stored: list[StoredMessage] | None = None
        if known is not None:
            newer = self._session_events(session_id, after=known.seq - 1)
            if newer and newer[0].event_id == known.event_id:
                stored = known.messages + stored_messages(newer[1:], hidden=True)
                known = _Read(newer[-1].seq, newer[-1].event_id, stored)
        if stored is None:
            events = self._session_events(session_id, after=0)
            if not events:
                raise KeyError(session_id)
            stored = stored_messages(events, hidden=True)
            known = _Read(events[-1].seq, events[-1].event_id, stored)
        assert known is not None
        with self._lock:
            self._known[session_id] = known
            self._known.move_to_end(session_id)
            while len(self._known) > _SESSIONS_KEPT:
                self._known.popitem(last=False)
        return stored

    def _session_events(self, session_id: str, *, after: int) -> list[Event]:
        events: list[Event] = []
        while True:
            start = events[-1].seq if events else after
            try:
                page = self.journal.events(session_id, after=start, limit=_MAX_PAGE)
            except SessionNotFound:
                return []
            events += page
            if len(page) < _MAX_PAGE:
                return events

    def _find(self, entry_id: str) -> tuple[str, int, int] | None:
        """Where an entry this store has not met is: every conversation of the tenant is read
        until it is found (PydanticAI's own flows never need this; a caller that kept an entry
        id from another process may)."""
        cursor: str | None = None
        while True:
            page = self.journal.sessions(limit=200, cursor=cursor)
            for session in page:
                if is_conversation(session):
                    located = self._locate(session.session_id, {entry_id})
                    if entry_id in located:
                        first, last = located[entry_id]
                        self._where[entry_id] = (session.session_id, first, last)
                        return self._where[entry_id]
            if len(page) < 200:
                return None
            cursor = page[-1].last_position

    def _history(self, head_id: str, limit: int | None) -> list[ConversationEntry]:
        where = self._where.get(head_id)
        if where is None:
            raise KeyError(head_id)
        session_id, _, last = where
        if limit is None:  # the whole history: from what this store read of the session before
            chain, complete = walk_back(self._messages(session_id), head_id, None)
        else:  # the newest `limit`: read backwards, a page at a time
            events: list[Event] = []
            upper, size = last, max(64, 8 * limit)
            while True:
                try:
                    page = self.journal.events(session_id, before=upper + 1, last=size)
                except SessionNotFound:
                    raise KeyError(head_id) from None
                events[:0] = page
                chain, complete = walk_back(stored_messages(events, hidden=True), head_id, limit)
                if complete or not page or page[0].seq == 1:
                    break
                upper, size = page[0].seq - 1, min(size * 4, _MAX_PAGE)
        if not complete:
            raise KeyError(head_id)
        for stored in chain:
            assert stored.entry is not None
            self._where[stored.entry["id"]] = (session_id, stored.first_seq, stored.last_seq)
        return entries_of(chain)
