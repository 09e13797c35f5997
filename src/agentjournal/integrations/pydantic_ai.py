"""agentjournal as PydanticAI's message history (`pip install 'agentjournal[pydantic-ai]'`).

```python
from pydantic_ai import Agent
from pydantic_ai.capabilities import ProcessHistory
from agentjournal.integrations.pydantic_ai import JournalHistory, context_window

agent = Agent(model, capabilities=[ProcessHistory(context_window(max_tokens=8_000))])
with JournalHistory.open("agent.db", "user-42") as history:  # or postgresql://...
    result = agent.run_sync("帮我查一下订单数量", message_history=history.load())
    history.save(result.new_messages())
```

The conversation `user-42` is the journal session `user-42`, created on the first save. Every
`save` is one atomic `append_many`; each message part becomes one event as
`agentjournal.integrations.pydantic_ai_events` says (a user prompt a `user_message`, a tool call a
`tool_call`, ...), carrying the part itself, so `load` returns messages equal to those saved and
replay, search, the CLI and the inspector show the conversation like any other.
`pydantic_ai_store.JournalConversationStore` is PydanticAI's `ConversationStore` on the same
events. docs/integrations.md has the whole story.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

from pydantic_ai.messages import (
    ModelMessage,
    ModelMessagesTypeAdapter,
    ModelRequest,
    ModelResponse,
    SystemPromptPart,
)

from agentjournal.aio import AsyncJournal
from agentjournal.errors import Conflict, InvalidArgument, SessionNotFound
from agentjournal.events import CLEARED, ITEM_REMOVED, Event
from agentjournal.integrations.pydantic_ai_events import (
    call_ids,
    fit_start,
    message_events,
    stored_messages,
)
from agentjournal.integrations.worker import in_worker, journals
from agentjournal.journal import Durability, Journal
from agentjournal.replay import Tokenizer

__all__ = ["JournalHistory", "context_window", "dump_messages", "load_messages"]

T = TypeVar("T")
_PAGE = 10_000  # events read per query when loading a whole session
_ATTEMPTS = 100  # saves lost to other writers before giving up


_HIDING = frozenset({CLEARED, ITEM_REMOVED})


@dataclasses.dataclass(frozen=True, slots=True)
class _Known:
    """What a `JournalHistory` read or saved of its session: the last event (its seq and id),
    the messages as JSON, and the tool calls stored as `tool_call` (call id: still open?)."""

    seq: int
    event_id: int
    messages: list[dict[str, Any]]
    calls: dict[str, bool]

    def extended(
        self, events: Sequence[Event], messages: list[dict[str, Any]] | None = None
    ) -> _Known:
        """With `events`, appended after the last one known (`messages`: theirs, if known)."""
        if not events:
            return self
        calls = dict(self.calls)
        for event in events:
            if event.type in ("tool_call", "tool_result"):
                calls[event.payload["call_id"]] = event.type == "tool_call"
        if messages is None:
            messages = [stored.message for stored in stored_messages(events)]
        return _Known(events[-1].seq, events[-1].event_id, self.messages + messages, calls)


_NOTHING = _Known(0, 0, [], {})


def dump_messages(messages: Sequence[ModelMessage]) -> list[dict[str, Any]]:
    """`messages` as JSON (what `ModelMessagesTypeAdapter` dumps); `InvalidArgument` for
    anything that is not a list of `ModelRequest` and `ModelResponse`."""
    if isinstance(messages, (str, bytes, Mapping)) or not isinstance(messages, Sequence):
        raise InvalidArgument("messages must be a list of PydanticAI ModelMessage")
    for index, message in enumerate(messages):
        if not isinstance(message, ModelRequest | ModelResponse):
            raise InvalidArgument(
                f"messages[{index}] must be a ModelRequest or a ModelResponse, "
                f"not {type(message).__name__}"
            )
    dumped: list[dict[str, Any]] = ModelMessagesTypeAdapter.dump_python(list(messages), mode="json")
    return dumped


def load_messages(dumped: Sequence[Mapping[str, Any]]) -> list[ModelMessage]:
    """The messages `dump_messages` gave (or the events held)."""
    return ModelMessagesTypeAdapter.validate_python(list(dumped))


class JournalHistory:
    """One journal session as a PydanticAI conversation's `message_history`.

    `load()` gives every message saved (as `message_history=` takes them), `save(messages)`
    appends messages (a run's `new_messages()`). `load_async` and `save_async` do the same from
    async code without blocking the event loop. `title`, `metadata`, `system_prompt` and
    `model` are used when the journal session is created (on the first save); an existing
    session is used as it is.
    """

    def __init__(
        self,
        session_id: str,
        journal: Journal | AsyncJournal,
        *,
        title: str | None = None,
        metadata: Mapping[str, Any] | None = None,
        system_prompt: str | None = None,
        model: str | None = None,
    ) -> None:
        self.journal, self._async = journals(journal)
        if not isinstance(session_id, str) or not session_id:
            raise InvalidArgument("session_id must be a non-empty string")
        self.session_id = session_id
        self._fields: dict[str, Any] = {
            "title": session_id if title is None else title,
            "metadata": {"integration": "pydantic-ai", **(metadata or {})},
            "system_prompt": system_prompt,
            "model": model,
        }
        self._owned = False
        self._known: _Known | None = None
        self.last_seq: int | None = None
        """The session's last seq as of this object's latest `load` or `save` (None before)."""

    @classmethod
    def open(
        cls,
        url: str,
        session_id: str,
        *,
        tenant: str = "default",
        durability: Durability = "full",
        **session_fields: Any,
    ) -> JournalHistory:
        """A history over a journal of its own at `url` (a SQLite path or `postgresql://…`),
        closed by `close()` or by leaving `with` / `async with`. `session_fields`: title,
        metadata, system_prompt, model, used when the journal session is created."""
        journal = Journal.open(url, tenant=tenant, durability=durability)
        try:
            history = cls(session_id, journal, **session_fields)
        except BaseException:
            journal.close()
            raise
        history._owned = True
        return history

    def close(self) -> None:
        """Close the journal if `open` opened it (a journal handed in stays open)."""
        if self._owned:
            self.journal.close()

    def __enter__(self) -> JournalHistory:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    async def __aenter__(self) -> JournalHistory:
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.close()

    # -- reading and writing ----------------------------------------------------------------

    def load(self) -> list[ModelMessage]:
        """Every message saved, oldest first (after the newest `clear`); [] for a session that
        does not exist yet. What this object read or saved before is not read again: only the
        events appended since (the journal is append-only)."""
        known = self._refreshed()
        if known is None:  # first read, a clear or a removal since, or a new session
            try:
                known = _NOTHING.extended(self._events())
            except SessionNotFound:
                self.last_seq = None
                return []
            self._known = known
        self.last_seq = known.seq
        return load_messages(known.messages)

    def save(
        self, messages: Sequence[ModelMessage], *, expected_seq: int | None = None
    ) -> list[Event]:
        """Append `messages` (a run's `new_messages()`) in one atomic `append_many` and return
        the events written. With `expected_seq`, only if the session's last seq is still that
        one (`Conflict` otherwise, nothing written): `history.last_seq` after a `load` says
        that no other writer saved in between."""
        dumped = dump_messages(messages)
        if not dumped:
            return []
        for _ in range(_ATTEMPTS):
            known = self._refreshed()
            last_seq: int | None
            if known is not None:  # what it read: the session's calls are known
                last_seq, calls = known.seq, known.calls
            else:
                try:
                    last_seq = self.journal.get_session(self.session_id).last_seq
                except SessionNotFound:
                    last_seq = None
                named = call_ids(dumped) if last_seq is not None else set()
                found = self.journal.tool_calls(self.session_id, call_ids=named) if named else []
                calls = {c.call_id: c.status == "pending" for c in found}
            if expected_seq is not None and expected_seq != (last_seq or 0):
                raise Conflict(
                    f"session {self.session_id}: expected_seq {expected_seq}, "
                    f"but its last seq is {last_seq or 0}"
                )
            events = message_events(
                dumped,
                used_calls=calls.keys(),
                open_calls={call_id for call_id, open_ in calls.items() if open_},
            )
            if last_seq is None:
                # Bad input is refused before the session is created: nothing is written.
                self.journal.prepare_batch(events)
                self._create()
                continue
            try:
                appended = self.journal.append_many(self.session_id, events, expected_seq=last_seq)
            except Conflict:
                if self.journal.get_session(self.session_id).last_seq == last_seq:
                    raise
                continue  # another writer appended meanwhile: read what it wrote
            if known is not None:
                self._known = known.extended(appended, dumped)
            self.last_seq = appended[-1].seq
            return appended
        raise Conflict(f"session {self.session_id}: other writers kept appending; try again")

    def _refreshed(self) -> _Known | None:
        """What this object knows, with what was appended since; None if it knows nothing or
        its knowledge no longer holds (a clear or a removal since: read everything again)."""
        known = self._known
        if known is None:
            return None
        try:
            # The last event it knows, then the newer ones: the same event still there says
            # the rest is too (event ids are never reused: a session purged and made again,
            # even to as many events, is read anew).
            newer = self._events(after=known.seq - 1)
        except SessionNotFound:
            newer = []
        fresh = newer[1:]
        if (
            not newer
            or newer[0].event_id != known.event_id
            or any(e.type in _HIDING for e in fresh)
        ):
            self._known = None
            return None
        self._known = known = known.extended(fresh)
        return known

    def clear(self) -> None:
        """Start the history empty: `load` (and every replay) gives nothing before this point.
        Nothing is deleted (`purge_session` erases)."""
        try:
            self.journal.get_session(self.session_id)
        except SessionNotFound:
            return
        self.last_seq = self.journal.append(self.session_id, CLEARED, {}).seq
        self._known = None

    async def load_async(self) -> list[ModelMessage]:
        """`load`, in a worker thread."""
        return await self._call(self.load)

    async def save_async(
        self, messages: Sequence[ModelMessage], *, expected_seq: int | None = None
    ) -> list[Event]:
        """`save`, in a worker thread."""
        return await self._call(lambda: self.save(messages, expected_seq=expected_seq))

    async def _call(self, fn: Callable[[], T]) -> T:
        return await in_worker(self._async, fn)

    def _events(self, after: int = 0) -> list[Event]:
        events: list[Event] = []
        while True:
            start = events[-1].seq if events else after
            page = self.journal.events(self.session_id, after=start, limit=_PAGE)
            events += page
            if len(page) < _PAGE:
                return events

    def _create(self) -> None:
        """Create the session (someone else may have meanwhile: then it is theirs)."""
        with contextlib.suppress(Conflict):
            self.journal.create_session(
                session_id=self.session_id,
                idempotency_key=f"pydantic-ai:{self.session_id}",
                **{k: v for k, v in self._fields.items() if v is not None},
            )


def context_window(
    max_tokens: int, *, tokenizer: Tokenizer | None = None
) -> Callable[[list[ModelMessage]], list[ModelMessage]]:
    """A PydanticAI history processor (`Agent(capabilities=[ProcessHistory(...)])`) that
    sends the model the longest suffix of the history within `max_tokens`, as the journal's
    `context` picks it: cut only before a user prompt, so no tool return is parted from its
    call, with the system prompts kept (moved onto the first request sent) and counted. Tokens
    are estimated as the journal estimates them, ceil(UTF-8 bytes / 3) + 4 a message, unless
    `tokenizer` (a callable taking an OpenAI-shape message) is given; parts the journal keeps
    as `pydantic_ai.part` (thinking, images) are not counted. `ContextTooLarge` if not even
    the newest user turn fits."""
    if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
        raise InvalidArgument(f"max_tokens must be a positive integer, got {max_tokens!r}")

    def keep(messages: list[ModelMessage]) -> list[ModelMessage]:
        start = fit_start(dump_messages(messages), max_tokens=max_tokens, tokenizer=tokenizer)
        if start == 0:
            return messages
        kept = list(messages[start:])
        prompts = [
            part
            for message in messages[:start]
            if isinstance(message, ModelRequest)
            for part in message.parts
            if isinstance(part, SystemPromptPart)
        ]
        first = kept[0]
        if prompts and isinstance(first, ModelRequest):
            kept[0] = dataclasses.replace(first, parts=[*prompts, *first.parts])
        return kept

    return keep
