"""Projections: what each event changes in the `sessions`, `messages` and `tool_calls` tables.

`effects(event)` is the one statement of those rules. Backends apply the effects in SQL inside the
append's transaction; `fold()` applies the same effects to plain objects, which is how `verify()`
rebuilds every projection from the journal and how tests get an expected value.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import Any, NamedTuple

from agentjournal.events import MESSAGE_ROLES, Event
from agentjournal.replay import estimate_tokens

__all__ = [
    "Effect",
    "Message",
    "MessageAdded",
    "MessageCorrected",
    "Projection",
    "Session",
    "SessionChanged",
    "ToolCall",
    "ToolCallClosed",
    "ToolCallOpened",
    "UsageAdded",
    "effects",
    "fold",
]


@dataclass(frozen=True, slots=True)
class Session:
    """A row of the `sessions` projection."""

    session_id: str
    tenant: str
    title: str = ""
    status: str = "active"
    model: str | None = None
    system_prompt: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
    forked_from: str | None = None
    forked_at_seq: int | None = None
    last_seq: int = 0
    last_position: str = ""
    event_count: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    created_at: int = 0
    updated_at: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in self.__dataclass_fields__}


class Message(NamedTuple):
    """A row of the `messages` projection: the transcript a UI shows (never compacted).

    Named tuples for the rows read in bulk (like `Event`): cheaper to build per row.
    """

    session_id: str
    seq: int
    role: str
    content: str
    tokens: int
    edited_seq: int | None = None
    created_at: int = 0

    def to_dict(self) -> dict[str, Any]:
        return self._asdict()


class ToolCall(NamedTuple):
    """A row of the `tool_calls` projection: a call and, once it arrived, its result."""

    session_id: str
    call_id: str
    name: str
    arguments: str
    call_seq: int
    status: str = "pending"  # pending | ok | error
    result: str | None = None
    result_seq: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return self._asdict()


@dataclass(frozen=True, slots=True)
class SessionChanged:
    fields: dict[str, Any]  # title, model, system_prompt, metadata, status, forked_*, created_at


@dataclass(frozen=True, slots=True)
class MessageAdded:
    seq: int
    role: str
    content: str
    tokens: int
    created_at: int


@dataclass(frozen=True, slots=True)
class MessageCorrected:
    seq: int  # the original's seq
    content: str
    tokens: int
    edited_seq: int


@dataclass(frozen=True, slots=True)
class ToolCallOpened:
    call_id: str
    name: str
    arguments: str
    call_seq: int


@dataclass(frozen=True, slots=True)
class ToolCallClosed:
    call_id: str
    result: str
    status: str
    result_seq: int


@dataclass(frozen=True, slots=True)
class UsageAdded:
    prompt_tokens: int
    completion_tokens: int


Effect = (
    SessionChanged | MessageAdded | MessageCorrected | ToolCallOpened | ToolCallClosed | UsageAdded
)


def message_tokens(role: str, content: str) -> int:
    return estimate_tokens({"role": role, "content": content})


def effects(event: Event) -> list[Effect]:
    """What `event` changes in the projections, besides touching its session's counters."""
    payload = event.payload
    kind = event.type
    if kind in MESSAGE_ROLES:
        role = MESSAGE_ROLES[kind]
        content = payload["content"]
        tokens = message_tokens(role, content)
        found: list[Effect] = []
        if "supersedes" in payload:
            found.append(MessageCorrected(payload["supersedes"], content, tokens, event.seq))
        else:
            found.append(MessageAdded(event.seq, role, content, tokens, event.created_at))
        usage = payload.get("usage")
        if usage:
            found.append(
                UsageAdded(usage.get("prompt_tokens", 0), usage.get("completion_tokens", 0))
            )
        return found
    if kind == "tool_call":
        return [
            ToolCallOpened(payload["call_id"], payload["name"], payload["arguments"], event.seq)
        ]
    if kind == "tool_result":
        status = "error" if payload.get("is_error") else "ok"
        return [ToolCallClosed(payload["call_id"], payload["content"], status, event.seq)]
    if kind == "session_created":
        return [
            SessionChanged(
                {
                    "title": payload["title"],
                    "model": payload.get("model"),
                    "system_prompt": payload.get("system_prompt"),
                    "metadata": payload.get("metadata") or {},
                    "created_at": event.created_at,
                }
            )
        ]
    if kind == "session_updated":
        keys = ("title", "metadata", "status")
        return [SessionChanged({k: payload[k] for k in keys if k in payload})]
    if kind == "session_forked":
        changed = {
            "forked_from": payload["from_session_id"],
            "forked_at_seq": payload["at_seq"],
            "created_at": event.created_at,  # a fork is born when it is forked
        }
        return [SessionChanged(changed)]
    return []


@dataclass
class Projection:
    """Every projection row of one session, as the fold of its events gives them."""

    session: Session
    messages: dict[int, Message] = field(default_factory=dict)
    tool_calls: dict[str, ToolCall] = field(default_factory=dict)

    def apply(self, event: Event) -> None:
        for effect in effects(event):
            self._apply_effect(event, effect)
        self.session = replace(
            self.session,
            last_seq=event.seq,
            last_position=event.position,
            event_count=self.session.event_count + 1,
            updated_at=event.created_at,
        )

    def _apply_effect(self, event: Event, effect: Effect) -> None:
        sid = event.session_id
        match effect:
            case SessionChanged(fields):
                self.session = replace(self.session, **fields)
            case MessageAdded(seq, role, content, tokens, created_at):
                self.messages[seq] = Message(sid, seq, role, content, tokens, None, created_at)
            case MessageCorrected(seq, content, tokens, edited_seq):
                if seq in self.messages:
                    self.messages[seq] = self.messages[seq]._replace(
                        content=content, tokens=tokens, edited_seq=edited_seq
                    )
            case ToolCallOpened(call_id, name, arguments, call_seq):
                self.tool_calls[call_id] = ToolCall(sid, call_id, name, arguments, call_seq)
            case ToolCallClosed(call_id, result, status, result_seq):
                if call_id in self.tool_calls:
                    self.tool_calls[call_id] = self.tool_calls[call_id]._replace(
                        result=result,
                        status=status,
                        result_seq=result_seq,
                    )
            case UsageAdded(prompt, completion):
                self.session = replace(
                    self.session,
                    prompt_tokens=self.session.prompt_tokens + prompt,
                    completion_tokens=self.session.completion_tokens + completion,
                )


def fold(session_id: str, tenant: str, events: Iterable[Event]) -> Projection:
    """Rebuild one session's projections from its events (in seq order)."""
    projection = Projection(Session(session_id, tenant))
    for event in events:
        projection.apply(event)
    return projection
