"""Checking stored projections against the fold of the journal. Pure comparison code: the journal
reads, this module decides what differs."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from agentjournal.events import MESSAGE_ROLES, Event
from agentjournal.projection import Message, Projection, Session, Task, ToolCall
from agentjournal.search_text import event_text

__all__ = [
    "Difference",
    "VerifyReport",
    "compare_search_index",
    "compare_session",
    "journal_errors",
]


@dataclass(frozen=True, slots=True)
class Difference:
    """One projection value that is not what the journal says it should be."""

    table: str
    key: str
    field: str
    stored: Any
    expected: Any


@dataclass
class VerifyReport:
    """What `Journal.verify()` found. `ok` is true when nothing at all was found."""

    events_checked: int = 0
    sessions_checked: int = 0
    differences: list[Difference] = field(default_factory=list)
    journal_errors: list[str] = field(default_factory=list)
    integrity: list[str] = field(default_factory=list)
    rebuilt: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not (self.differences or self.journal_errors or self.integrity)

    def to_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "events_checked": self.events_checked,
            "sessions_checked": self.sessions_checked,
            "differences": [_as_dict(d) for d in self.differences],
            "journal_errors": list(self.journal_errors),
            "integrity": list(self.integrity),
            "rebuilt": list(self.rebuilt),
        }


def _as_dict(difference: Difference) -> dict[str, Any]:
    return {name: getattr(difference, name) for name in Difference.__slots__}


def journal_errors(session_id: str, events: Sequence[Event]) -> list[str]:
    """Seq gaps and corrections that name no original message."""
    errors = []
    originals: dict[int, str] = {}
    for expected_seq, event in enumerate(events, start=1):
        if event.seq != expected_seq:
            errors.append(f"{session_id}: seq {event.seq} found where {expected_seq} was expected")
            break
        if event.type in MESSAGE_ROLES:
            target = event.payload.get("supersedes")
            if target is None:
                originals[event.seq] = event.type
            elif originals.get(target) != event.type:
                errors.append(f"{session_id}: seq {event.seq} supersedes {target}, not an original")
    if events and events[0].type != "session_created":
        errors.append(f"{session_id}: seq 1 is {events[0].type}, not session_created")
    return errors


def _compare_rows(
    table: str,
    stored: Mapping[str, Any],
    expected: Mapping[str, Any],
    fields: Iterable[str],
) -> list[Difference]:
    found = []
    for key in sorted(stored.keys() | expected.keys()):
        have, want = stored.get(key), expected.get(key)
        if have is None or want is None:
            found.append(Difference(table, key, "*", _summary(have), _summary(want)))
            continue
        for name in fields:
            if getattr(have, name) != getattr(want, name):
                found.append(Difference(table, key, name, getattr(have, name), getattr(want, name)))
    return found


def _summary(row: Any) -> str | None:
    return None if row is None else "row"


def compare_session(
    expected: Projection,
    stored_session: Session,
    stored_messages: Sequence[Message],
    stored_tool_calls: Sequence[ToolCall],
    stored_tasks: Sequence[Task] = (),
) -> list[Difference]:
    """Every field of the session's projection rows that differs from the fold."""
    sid = expected.session.session_id
    session_fields = [f for f in Session.__slots__ if f not in {"session_id", "tenant"}]
    differences = _compare_rows(
        "sessions", {sid: stored_session}, {sid: expected.session}, session_fields
    )
    differences += _compare_rows(
        "messages",
        {f"{sid}/{m.seq}": m for m in stored_messages},
        {f"{sid}/{m.seq}": m for m in expected.messages.values()},
        [f for f in Message._fields if f not in {"session_id", "seq"}],
    )
    differences += _compare_rows(
        "tool_calls",
        {f"{sid}/{t.call_id}": t for t in stored_tool_calls},
        {f"{sid}/{t.call_id}": t for t in expected.tool_calls.values()},
        [f for f in ToolCall._fields if f not in {"session_id", "call_id"}],
    )
    differences += _compare_rows(
        "tasks",
        {t.task_id: t for t in stored_tasks},
        {t.task_id: t for t in expected.tasks.values()},
        [f for f in Task.__slots__ if f not in {"task_id", "session_id"}],
    )
    return differences


def compare_search_index(
    session_id: str, events: Sequence[Event], indexed: set[int], complete_upto: int
) -> list[Difference]:
    """The session's events missing from the search index (those up to `complete_upto` that
    have text to search) and index rows of its events that should not be there."""
    expected = {
        e.event_id for e in events if e.event_id <= complete_upto and event_text(e.type, e.payload)
    }
    seqs = {e.event_id: e.seq for e in events}
    return [
        Difference(
            "search_index",
            f"{session_id}/{seqs[event_id]}",
            "*",
            _summary(True if event_id in indexed else None),
            _summary(True if event_id in expected else None),
        )
        for event_id in sorted(expected ^ indexed)
        if event_id in seqs
    ]
