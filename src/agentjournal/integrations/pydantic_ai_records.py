"""The pure half of the PydanticAI conversation store (pydantic_ai_store.py): how a record is
kept in its `pydantic_ai.record` event, which journal sessions are conversations, and how a
history is walked from its head through the entries' parents and made back into
`ConversationEntry`s. Nothing here reads or writes the journal."""

from __future__ import annotations

from typing import Any

import pydantic
from pydantic_ai.conversation_store import ConversationEntry, ConversationRecord

from agentjournal.errors import InvalidArgument
from agentjournal.integrations.pydantic_ai import load_messages
from agentjournal.integrations.pydantic_ai_events import StoredMessage
from agentjournal.projection import Session

__all__ = [
    "INTEGRATION",
    "check_order",
    "entries_of",
    "is_conversation",
    "record_from_payload",
    "record_payload",
    "walk_back",
]

INTEGRATION = "pydantic-ai"
_RECORDS: pydantic.TypeAdapter[ConversationRecord] = pydantic.TypeAdapter(ConversationRecord)


def record_from_payload(payload: dict[str, Any], details: dict[str, Any]) -> ConversationRecord:
    """The record a `pydantic_ai.record` event keeps, with the details updated since."""
    return _RECORDS.validate_python({**payload["record"], **details})


def record_payload(
    record: ConversationRecord, where: dict[str, list[int]] | None = None
) -> dict[str, Any]:
    return {"record": _RECORDS.dump_python(record, mode="json"), "where": where or {}}


def is_conversation(session: Session) -> bool:
    return session.metadata.get("integration") == INTEGRATION


def check_order(entries: list[ConversationEntry]) -> None:
    """New entries come in order, each after the one it points at (PydanticAI's contract): one
    pointing at itself or at a later one, or an id given twice, would make a circle that every
    load of the history walked for ever."""
    later = {entry.id for entry in entries}
    if len(later) != len(entries):
        raise InvalidArgument("new entries must have distinct ids")
    for entry in entries:
        later.discard(entry.id)
        if entry.parent_id == entry.id or entry.parent_id in later:
            raise InvalidArgument(
                f"new entries come in order, each after its parent: {entry.id!r} points at"
                f" {entry.parent_id!r}"
            )


def walk_back(
    stored: list[StoredMessage], head_id: str, limit: int | None
) -> tuple[list[StoredMessage], bool]:
    """The entries from `head_id` back through their parents (at most `limit`), oldest first,
    and whether that is all of them (the first entry reached, or `limit`). A parent met twice
    (entries of one id saved twice made a circle) ends it, incomplete."""
    by_id = {s.entry["id"]: s for s in stored if s.entry is not None and "id" in s.entry}
    chain: list[StoredMessage] = []
    seen: set[str] = set()
    entry_id: str | None = head_id
    while entry_id is not None and (limit is None or len(chain) < limit):
        found = by_id.get(entry_id)
        if found is None or entry_id in seen:
            return chain[::-1], False
        seen.add(entry_id)
        chain.append(found)
        assert found.entry is not None
        entry_id = found.entry.get("parent")
    return chain[::-1], True


def entries_of(stored: list[StoredMessage]) -> list[ConversationEntry]:
    messages = load_messages([s.message for s in stored])
    entries = []
    for s, message in zip(stored, messages, strict=True):
        assert s.entry is not None
        entries.append(
            ConversationEntry(id=s.entry["id"], parent_id=s.entry.get("parent"), message=message)
        )
    return entries
