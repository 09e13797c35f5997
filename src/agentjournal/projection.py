"""Projections: what each event changes in the `sessions`, `messages`, `tool_calls` and `tasks`
tables.

`effects(event)` is the one statement of those rules. Backends apply the effects in SQL inside the
append's transaction; `fold()` applies the same effects to plain objects, which is how `verify()`
rebuilds every projection from the journal and how tests get an expected value.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import Any, Final, NamedTuple

from agentjournal.events import MESSAGE_ROLES, TASK_TYPES, Event
from agentjournal.replay import estimate_tokens

__all__ = [
    "MAX_TOKEN_TOTAL",
    "Effect",
    "Message",
    "MessageAdded",
    "MessageCorrected",
    "Projection",
    "Session",
    "SessionChanged",
    "Task",
    "TaskChanged",
    "TaskCreated",
    "ToolCall",
    "ToolCallClosed",
    "ToolCallOpened",
    "UsageAdded",
    "add_tokens",
    "effects",
    "fold",
    "turn_opens",
]

# A session's token totals stop here rather than overflow the databases' 64-bit integers. Each
# reply reports at most events.MAX_TOKEN_COUNT, so no real session comes near; but a session may
# hold up to 2**63 - 1 events, so only saturating makes overflow impossible, and the backends'
# SQL saturates the same way (a + min(b, MAX - a)), so verify() finds the fold and SQL agree.
MAX_TOKEN_TOTAL: Final = 2**63 - 1


def add_tokens(total: int, count: int) -> int:
    """`total + count`, saturating at `MAX_TOKEN_TOTAL`."""
    return min(total + count, MAX_TOKEN_TOTAL)


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
    # The last turn has not ended: its newest user message, tool call or tool result came after
    # its newest assistant message. What resume looks for, through a partial index.
    turn_open: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in self.__dataclass_fields__}


# The events that open (True) or close (False) a turn; corrections change neither.
TURN_EVENTS: dict[str, bool] = {
    "user_message": True,
    "tool_call": True,
    "tool_result": True,
    "assistant_message": False,
}


def turn_opens(event: Event) -> bool | None:
    """True if `event` leaves its session's turn open, False if it closes it, None if neither."""
    if event.type in TURN_EVENTS and "supersedes" not in event.payload:
        return TURN_EVENTS[event.type]
    return None


@dataclass(frozen=True, slots=True)
class Task:
    """A row of the `tasks` projection: durable work, its lease and its outcome."""

    task_id: str
    session_id: str
    tenant: str
    type: str
    input: Any = None
    parent_task_id: str | None = None
    status: str = "pending"  # pending | running | completed | failed | cancelled
    progress: float = 0.0
    message: str | None = None
    output: Any = None
    error: str | None = None
    attempt: int = 0
    retry_count: int = 0
    max_retries: int = 3
    lease_owner: str | None = None
    lease_seconds: float | None = None
    lease_expires_at: int | None = None
    created_seq: int = 0
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


@dataclass(frozen=True, slots=True)
class TaskCreated:
    task: Task


@dataclass(frozen=True, slots=True)
class TaskChanged:
    task_id: str
    fields: dict[str, Any]  # the Task fields the event sets, updated_at among them


Effect = (
    SessionChanged
    | MessageAdded
    | MessageCorrected
    | ToolCallOpened
    | ToolCallClosed
    | UsageAdded
    | TaskCreated
    | TaskChanged
)

_NO_LEASE: dict[str, Any] = {"lease_owner": None, "lease_expires_at": None}


def _task_effect(event: Event) -> Effect:
    """Each task event says what its task became; this reads it off (see events.py's shapes)."""
    payload, kind = event.payload, event.type
    if kind == "task_created":
        return TaskCreated(
            Task(
                payload["task_id"],
                event.session_id,
                "",  # the tenant is the session's; the backend and fold fill it in
                payload["type"],
                payload["input"],
                payload.get("parent_task_id"),
                max_retries=payload["max_retries"],
                created_seq=event.seq,
                created_at=event.created_at,
                updated_at=event.created_at,
            )
        )
    fields: dict[str, Any] = {"updated_at": event.created_at}
    if kind == "task_started":
        fields |= {
            "status": "running",
            "attempt": payload["attempt"],
            "lease_owner": payload["worker"],
            "lease_seconds": payload["lease_seconds"],
            "lease_expires_at": payload["lease_expires_at"],
        }
    elif kind == "task_progress":
        fields |= {
            "progress": float(payload["progress"]),
            "message": payload.get("message"),
            "lease_expires_at": payload["lease_expires_at"],
        }
    elif kind == "task_completed":
        fields |= {"status": "completed", "output": payload["output"], "progress": 1.0}
        fields |= _NO_LEASE
    elif kind == "task_failed":
        status = "pending" if payload["retry"] else "failed"
        fields |= {"status": status, "error": payload["error"]}
        fields |= {"retry_count": payload["retry_count"]} | _NO_LEASE
    else:  # task_cancelled
        fields |= {"status": "cancelled", "error": payload.get("reason")} | _NO_LEASE
    return TaskChanged(payload["task_id"], fields)


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
    if kind in TASK_TYPES:
        return [_task_effect(event)]
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
    tasks: dict[str, Task] = field(default_factory=dict)

    def apply(self, event: Event) -> None:
        if event.type == "session_forked":
            # A fork's copies of its parent's task events create no tasks (the parent has them).
            self.tasks.clear()
        for effect in effects(event):
            self._apply_effect(event, effect)
        opens = turn_opens(event)
        turn_open = self.session.turn_open if opens is None else opens
        self.session = replace(
            self.session,
            last_seq=event.seq,
            last_position=event.position,
            event_count=self.session.event_count + 1,
            updated_at=event.created_at,
            turn_open=turn_open,
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
            case TaskCreated(task):
                self.tasks[task.task_id] = replace(task, tenant=self.session.tenant)
            case TaskChanged(task_id, fields):
                if task_id in self.tasks:
                    self.tasks[task_id] = replace(self.tasks[task_id], **fields)
            case UsageAdded(prompt, completion):
                self.session = replace(
                    self.session,
                    prompt_tokens=add_tokens(self.session.prompt_tokens, prompt),
                    completion_tokens=add_tokens(self.session.completion_tokens, completion),
                )


def fold(session_id: str, tenant: str, events: Iterable[Event]) -> Projection:
    """Rebuild one session's projections from its events (in seq order)."""
    projection = Projection(Session(session_id, tenant))
    for event in events:
        projection.apply(event)
    return projection
