"""Projection effects as rows: what every backend writes after storing events.

`agentjournal.projection.effects` says what an event changes; this module groups those changes
into batches of plain rows, so a backend only chooses its SQL. Both backends use it: the rule for
which effect lands where lives here once.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Final

from agentjournal.events import Event, canonical_json
from agentjournal.projection import (
    MessageAdded,
    MessageCorrected,
    SessionChanged,
    Task,
    TaskChanged,
    TaskCreated,
    ToolCallClosed,
    ToolCallOpened,
    UsageAdded,
    add_tokens,
    effects,
    turn_opens,
)

__all__ = [
    "SESSION_FIELDS",
    "TASK_COLUMN_NAMES",
    "TASK_JSON_FIELDS",
    "ProjectionRows",
    "SessionAdvance",
    "by_tenant",
    "events_by_key",
    "projection_rows",
    "task_from_row",
    "task_values",
]

TASK_COLUMN_NAMES: Final = (
    "task_id",
    "session_id",
    "tenant",
    "type",
    "input",
    "parent_task_id",
    "status",
    "progress",
    "message",
    "output",
    "error",
    "attempt",
    "retry_count",
    "max_retries",
    "lease_owner",
    "lease_seconds",
    "lease_expires_at",
    "created_seq",
    "created_at",
    "updated_at",
)
TASK_JSON_FIELDS: Final = frozenset({"input", "output"})
# The session columns a projection may set (the counters follow each event inside the database).
SESSION_FIELDS: Final = frozenset(
    {
        "title",
        "status",
        "model",
        "system_prompt",
        "metadata",
        "forked_from",
        "forked_at_seq",
        "created_at",
        "turn_open",
    }
)
_TASK_FIELDS: Final = frozenset(TASK_COLUMN_NAMES) - {"task_id", "session_id", "tenant"}


# Our own canonical JSON (no surrounding whitespace): the decoder's entry point does, without
# json.loads' wrapper and its two regex scans per call.
_decode = json.JSONDecoder().raw_decode


def task_from_row(row: tuple[Any, ...]) -> Task:
    """A tasks row, in TASK_COLUMN_NAMES order, as a Task (its JSON fields decoded)."""
    values = list(row)
    values[4] = _decode(values[4])[0]
    values[9] = _decode(values[9])[0]
    return Task(*values)


def task_values(task: Task) -> tuple[Any, ...]:
    """The task as a row, in TASK_COLUMN_NAMES order, its JSON fields encoded."""
    return tuple(
        canonical_json(getattr(task, name)) if name in TASK_JSON_FIELDS else getattr(task, name)
        for name in TASK_COLUMN_NAMES
    )


@dataclass(slots=True)
class SessionAdvance:
    """Where a run of events leaves its session's counters (a backend without a trigger for
    them sets these once per session, not once per event)."""

    last_seq: int
    last_event_id: int
    added: int
    updated_at: int
    turn_open: bool | None  # None: no event of the run opened or closed a turn


@dataclass
class ProjectionRows:
    """The projection changes of a run of events of one tenant (so a session id names one
    session here), in the order a backend must apply them:
    session and task changes in event order (a task may be created and changed in one group),
    then inserts before updates (a result or correction may follow its original in one group).
    A call whose result is in the same run is inserted closed: its row is written once, and
    never enters the index of open calls."""

    tenant: str
    # (session_id, seq, role, content, tokens, created_at)
    messages_added: list[tuple[str, int, str, str, int, int]] = field(default_factory=list)
    # (session_id, call_id, name, arguments, call_seq, status, result, result_seq)
    calls_opened: list[tuple[str, str, str, str, int, str, str | None, int | None]] = field(
        default_factory=list
    )
    # (content, tokens, edited_seq, session_id, seq)
    messages_corrected: list[tuple[str, int, int, str, int]] = field(default_factory=list)
    # (result, status, result_seq, session_id, call_id)
    calls_closed: list[tuple[str, str, int, str, str]] = field(default_factory=list)
    # (session_id, {column: value}) with metadata already JSON
    session_changes: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    # session_id -> [prompt tokens, completion tokens]
    usage: dict[str, list[int]] = field(default_factory=dict)
    # a new task, or (task_id, {column: value}) with JSON fields encoded
    task_changes: list[Task | tuple[str, dict[str, Any]]] = field(default_factory=list)
    # session_id -> its counters after the run
    advanced: dict[str, SessionAdvance] = field(default_factory=dict)


def projection_rows(
    events: Sequence[Event], tenant: str, *, copies: bool = False
) -> ProjectionRows:
    """The rows `events`, all of sessions of `tenant`, change. `copies`: a fork's copies, whose
    task events create no tasks (the tasks stay the parent's)."""
    rows = ProjectionRows(tenant)
    tasks = not copies
    opened: dict[tuple[str, str], int] = {}  # calls opened in this run -> index in calls_opened
    for event in events:
        sid = event.session_id
        _advance(rows.advanced, event)
        for effect in effects(event):
            match effect:
                case MessageAdded(seq, role, content, tokens, created_at):
                    rows.messages_added.append((sid, seq, role, content, tokens, created_at))
                case MessageCorrected(seq, content, tokens, edited_seq):
                    rows.messages_corrected.append((content, tokens, edited_seq, sid, seq))
                case ToolCallOpened(call_id, name, arguments, call_seq):
                    opened[(sid, call_id)] = len(rows.calls_opened)
                    rows.calls_opened.append(
                        (sid, call_id, name, arguments, call_seq, "pending", None, None)
                    )
                case ToolCallClosed(call_id, result, status, result_seq):
                    index = opened.get((sid, call_id))
                    if index is None:
                        rows.calls_closed.append((result, status, result_seq, sid, call_id))
                    else:
                        call = rows.calls_opened[index]
                        rows.calls_opened[index] = (*call[:5], status, result, result_seq)
                case SessionChanged(changed):
                    assert changed.keys() <= SESSION_FIELDS, changed.keys()
                    rows.session_changes.append((sid, encode_session_fields(changed)))
                case UsageAdded(prompt, completion):
                    totals = rows.usage.setdefault(sid, [0, 0])
                    totals[0] = add_tokens(totals[0], prompt)
                    totals[1] = add_tokens(totals[1], completion)
                case TaskCreated(task) if tasks:
                    rows.task_changes.append(replace(task, tenant=tenant))
                case TaskChanged(task_id, changed) if tasks:
                    assert changed.keys() <= _TASK_FIELDS, changed.keys()
                    encoded = {
                        k: canonical_json(v) if k in TASK_JSON_FIELDS else v
                        for k, v in changed.items()
                    }
                    rows.task_changes.append((task_id, encoded))
    return rows


def by_tenant(tenants: Sequence[str], events: Sequence[Event]) -> list[tuple[str, Sequence[Event]]]:
    """`events` (the i-th of tenant `tenants[i]`) split by tenant, each part in its order: a
    session id names one session only within a tenant, so projections are made per tenant."""
    if not events:
        return []
    first = tenants[0]
    if all(tenant == first for tenant in tenants):  # the common case: one caller's tenant
        return [(first, events)]
    parts: dict[str, list[Event]] = {}
    for tenant, event in zip(tenants, events, strict=True):
        parts.setdefault(tenant, []).append(event)
    return list(parts.items())


def events_by_key(
    rows: Sequence[tuple[Any, ...]], decode: Callable[[tuple[Any, ...]], Event]
) -> dict[tuple[str, str, str], Event]:
    """Rows of (tenant, *an event row the backend `decode`s), each of an event that has an
    idempotency key, by (tenant, session_id, idempotency_key)."""
    found = {}
    for row in rows:
        event = decode(row[1:])
        assert event.idempotency_key is not None
        found[(row[0], event.session_id, event.idempotency_key)] = event
    return found


def _advance(advanced: dict[str, SessionAdvance], event: Event) -> None:
    opens = turn_opens(event)
    found = advanced.get(event.session_id)
    if found is None:
        advanced[event.session_id] = SessionAdvance(
            event.seq, event.event_id, 1, event.created_at, opens
        )
        return
    found.last_seq = event.seq
    found.last_event_id = event.event_id
    found.added += 1
    found.updated_at = event.created_at
    if opens is not None:
        found.turn_open = opens


def encode_session_fields(changed: Mapping[str, Any]) -> dict[str, Any]:
    return {k: canonical_json(v) if k == "metadata" else v for k, v in changed.items()}
