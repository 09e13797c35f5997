"""Request and response bodies of the HTTP API, as the OpenAPI spec describes them."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from agentjournal.events import Event
from agentjournal.projection import Message, Session, Task

__all__ = [
    "AppendBatch",
    "AppendOne",
    "CancelRequest",
    "ClaimRequest",
    "CompactRequest",
    "CompleteRequest",
    "CreateSession",
    "CreateTask",
    "EventIn",
    "EventList",
    "EventOut",
    "EventPage",
    "FailRequest",
    "ForkRequest",
    "Health",
    "MessageList",
    "MessageOut",
    "ProgressRequest",
    "Purged",
    "ReplayOut",
    "SessionOut",
    "SessionPage",
    "TaskOut",
    "TaskPage",
    "TurnCancelled",
    "TurnOut",
    "TurnRequest",
    "UpdateSession",
]


class _In(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class EventIn(_In):
    type: str = Field(
        description="a core type, or a namespaced one like 'myapp.memory_saved'",
        max_length=64,
        pattern=r"^[a-z][a-z0-9_]*(\.[a-z][a-z0-9_]*)*$",
    )
    payload: dict[str, Any] = Field(default_factory=dict)
    idempotency_key: str | None = Field(default=None, min_length=1, max_length=255)


class AppendOne(EventIn):
    expected_seq: int | None = Field(default=None, ge=0)


class AppendBatch(_In):
    events: list[EventIn] = Field(min_length=1)
    expected_seq: int | None = Field(default=None, ge=0)


class CreateSession(_In):
    title: str = ""
    model: str | None = None
    system_prompt: str | None = None
    metadata: dict[str, Any] | None = None


class UpdateSession(_In):
    title: str | None = None
    metadata: dict[str, Any] | None = None
    status: Literal["active", "archived", "deleted"] | None = None


class ForkRequest(_In):
    at_seq: int | None = Field(default=None, ge=1)
    title: str | None = None


class CompactRequest(_In):
    until_seq: int = Field(ge=1)
    summary: str


class EventOut(BaseModel):
    event_id: int
    session_id: str
    seq: int
    position: str
    type: str
    payload: dict[str, Any]
    idempotency_key: str | None
    created_at: int

    @classmethod
    def of(cls, event: Event) -> EventOut:
        return cls.model_construct(**event.to_dict())


class EventList(BaseModel):
    events: list[EventOut]


class EventPage(BaseModel):
    events: list[EventOut]
    next_after: int | str | None = Field(
        description="pass as ?after= for the next page; null when this page was the last"
    )
    next_before: int | None = Field(
        description="reading backwards or around: pass as ?before= for the older page; null "
        "when the page starts at the first event",
    )


class FeedHead(BaseModel):
    position: str | None = Field(
        description="the newest committed event's position; null while the tenant has none"
    )


class SessionOut(BaseModel):
    session_id: str
    tenant: str
    title: str
    status: str
    model: str | None
    system_prompt: str | None
    metadata: dict[str, Any]
    forked_from: str | None
    forked_at_seq: int | None
    last_seq: int
    last_position: str
    event_count: int
    prompt_tokens: int
    completion_tokens: int
    created_at: int
    updated_at: int
    turn_open: bool = Field(
        description="the last turn has not ended: a user message, tool call or tool result came"
        " after the newest assistant message"
    )
    source_id: str | None = Field(
        description="the id of the journal this session was replicated from; null if it was"
        " written here",
    )

    @classmethod
    def of(cls, session: Session, source_id: str | None = None) -> SessionOut:
        return cls.model_construct(**session.to_dict(), source_id=source_id)


class SessionPage(BaseModel):
    sessions: list[SessionOut]
    next_cursor: str | None = Field(description="pass as ?cursor= for the next page")


class MessageOut(BaseModel):
    session_id: str
    seq: int
    role: str
    content: str
    tokens: int
    edited_seq: int | None
    created_at: int

    @classmethod
    def of(cls, message: Message) -> MessageOut:
        return cls.model_construct(**message.to_dict())


class MessageList(BaseModel):
    messages: list[MessageOut]


class ReplayOut(BaseModel):
    format: Literal["openai", "anthropic", "responses"]
    system: str | None = Field(description="anthropic: all system text; otherwise always null")
    messages: list[dict[str, Any]]


class Purged(BaseModel):
    session_id: str
    events_deleted: int


class Health(BaseModel):
    status: Literal["ok"]


_TASK_TYPE = Field(
    description="letters, digits and _.:- (1-128, starting with a letter or digit)",
    pattern=r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$",
)


class CreateTask(_In):
    type: str = _TASK_TYPE
    input: Any = Field(default=None, description="any JSON value")
    parent_task_id: str | None = Field(default=None, min_length=1, max_length=128)
    max_retries: int = Field(default=3, ge=0, le=100)


class ClaimRequest(_In):
    worker: str = Field(min_length=1, max_length=255, description="who holds the lease")
    types: list[Annotated[str, _TASK_TYPE]] | None = Field(
        default=None, min_length=1, description="task types to take; all if absent"
    )
    lease_seconds: float = Field(default=30.0, ge=0.001, le=7 * 24 * 3600)


class ProgressRequest(_In):
    attempt: int = Field(ge=1, le=2**63 - 1, description="the attempt the claim returned")
    progress: float = Field(ge=0, le=1)
    message: str | None = None


class CompleteRequest(_In):
    attempt: int = Field(ge=1, le=2**63 - 1)
    output: Any = Field(default=None, description="any JSON value")


class FailRequest(_In):
    attempt: int = Field(ge=1, le=2**63 - 1)
    error: str
    retryable: bool = True


class CancelRequest(_In):
    reason: str | None = None


class TaskOut(BaseModel):
    task_id: str
    session_id: str
    tenant: str
    type: str
    input: Any
    parent_task_id: str | None
    status: Literal["pending", "running", "completed", "failed", "cancelled"]
    progress: float
    message: str | None
    output: Any
    error: str | None
    attempt: int
    retry_count: int
    max_retries: int
    lease_owner: str | None
    lease_seconds: float | None
    lease_expires_at: int | None
    created_seq: int
    created_at: int
    updated_at: int

    @classmethod
    def of(cls, task: Task) -> TaskOut:
        return cls.model_construct(**task.to_dict())


class TaskPage(BaseModel):
    tasks: list[TaskOut]
    next_after: str | None = Field(description="pass as ?after= for the next page")


class TurnRequest(_In):
    content: str = Field(description="the user's message")


class TurnCancelled(BaseModel):
    session_id: str
    turn: int = Field(description="the seq of the turn's user_message")
    interrupted: bool = Field(
        description="true if the cancel cut the reply short; false if the turn had already"
        " reached its end (or failed) when the cancel took effect"
    )
    event: EventOut | None = Field(
        description="the turn's final assistant_message (null if the turn failed instead)"
    )


class TurnOut(BaseModel):
    session_id: str
    reply: str = Field(description="the assistant's answer, durable before it was sent")
    events: list[EventOut] = Field(description="every event the turn wrote, in order")
