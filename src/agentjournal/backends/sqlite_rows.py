"""Rows of the SQLite schema as Python values, for the storage's reads and its write transaction."""

from __future__ import annotations

import json
import re
from typing import Any, Final

from agentjournal.backends.projection_rows import TASK_COLUMN_NAMES
from agentjournal.errors import InvalidArgument
from agentjournal.events import MESSAGE_ROLES, Event
from agentjournal.projection import Message, Session, ToolCall

EVENT_COLUMNS: Final = "event_id, session_id, seq, type, payload, idempotency_key, created_at"
SESSION_COLUMNS: Final = (
    "session_id, tenant, title, status, model, system_prompt, metadata, forked_from, "
    "forked_at_seq, last_seq, last_event_id, event_count, prompt_tokens, completion_tokens, "
    "created_at, updated_at, turn_open"
)
# A `messages` row `m` or a `tool_calls` row `t` as a Message or a ToolCall: the text comes from
# the events the row names (`e` the message's shown version, `c` the call, `r` its result).
# LEFT JOINs: a row naming no event still reads (its text None), so verify() reports it.
MESSAGE_SELECT: Final = (
    "SELECT m.session_id, m.seq, e.type, e.payload, m.tokens,"
    " m.edited_seq, coalesce(m.created_at, e.created_at) FROM messages AS m"
    " LEFT JOIN events AS e"
    " ON e.event_id = m.content_id AND e.session_id = m.session_id AND e.tenant = m.tenant"
)
TOOL_CALL_SELECT: Final = (
    "SELECT t.session_id, t.call_id, c.payload, t.call_seq,"
    " t.status, json_extract(r.payload, '$.content'), t.result_seq FROM tool_calls AS t"
    " LEFT JOIN events AS c"
    " ON c.session_id = t.session_id AND c.tenant = t.tenant AND c.seq = t.call_seq"
    " LEFT JOIN events AS r"
    " ON r.session_id = t.session_id AND r.tenant = t.tenant AND r.seq = t.result_seq"
)

TASK_COLUMNS: Final = ", ".join(TASK_COLUMN_NAMES)


# Payloads are our own canonical JSON (no surrounding whitespace), so the decoder's own entry
# point does: json.loads adds a wrapper and two regex scans per call, on every row read.
_decode = json.JSONDecoder().raw_decode


def event_from_row(row: tuple[Any, ...]) -> Event:
    event_id, session_id, seq, type_, payload, key, created_at = row
    return Event(
        event_id, session_id, seq, type_, _decode(payload)[0], created_at, key, str(event_id)
    )


# Our canonical JSON sorts keys and has no spaces, so a message's text (`content`) and a call's
# `arguments` are usually their payload's first field. If the text holds no backslash (no
# escape), it ends at the next quote and a slice reads it: decoding the whole payload per row
# cost a third of `messages()`.
_HEADS: Final = {key: f'{{"{key}":"' for key in ("content", "arguments")}


def first_text(payload: str, key: str) -> str | None:
    """The string `key` of an event's stored payload (`content` or `arguments`); None if it has
    none (a row naming the wrong event, which verify() must report rather than fail on)."""
    head = _HEADS[key]
    if payload.startswith(head):
        end = payload.find('"', len(head))
        text = payload[len(head) : end]
        if end > 0 and "\\" not in text:
            return text
    found = _decode(payload)[0].get(key)
    return found if isinstance(found, str) else None


_CONTENT_HEAD: Final = _HEADS["content"]
_CONTENT_AT: Final = len(_CONTENT_HEAD)
_ROLE_OF: Final = MESSAGE_ROLES.get


# A row whose event is missing (which verify() must report) reads with its text None.
def message_from_row(row: tuple[Any, ...]) -> Message:
    session_id, seq, type_, payload, tokens, edited_seq, created_at = row
    # `first_text`'s slice, inlined for the common case: the call per row cost more than the
    # role's look-up below (measured with callgrind, bench/README.md "Bytes per turn").
    if payload is not None and payload.startswith(_CONTENT_HEAD):
        end = payload.find('"', _CONTENT_AT)
        text = payload[_CONTENT_AT:end]
        if end < 0 or "\\" in text:
            text = first_text(payload, "content")
    else:
        text = None if payload is None else first_text(payload, "content")
    # A correction has its original's type, so the shown event's type is the message's role.
    return Message(session_id, seq, _ROLE_OF(type_), text, tokens, edited_seq, created_at)  # type: ignore[arg-type]


# A tool_call payload with nothing escaped and no other field, matched whole: canonical JSON
# (sorted keys, no spaces) fixes its shape, so its arguments and name are read without
# decoding it. Anything else (escapes, other fields) takes the decoder.
_PLAIN_CALL: Final = re.compile(
    r'\{"arguments":"([^"\\]*)","call_id":"[^"\\]*","name":"([^"\\]*)"\}'
)


def call_texts(payload: str) -> tuple[str | None, str | None]:
    """A tool_call event's `name` and `arguments` from its stored payload (None where it has no
    such string: a row naming the wrong event, which verify() must report)."""
    plain = _PLAIN_CALL.fullmatch(payload)
    if plain is not None:
        return plain[2], plain[1]
    found = _decode(payload)[0]
    name, arguments = found.get("name"), found.get("arguments")
    return (
        name if isinstance(name, str) else None,
        arguments if isinstance(arguments, str) else None,
    )


def tool_call_from_row(row: tuple[Any, ...]) -> ToolCall:
    session_id, call_id, payload, call_seq, status, result, result_seq = row
    name, arguments = (None, None) if payload is None else call_texts(payload)
    return ToolCall(session_id, call_id, name, arguments, call_seq, status, result, result_seq)  # type: ignore[arg-type]


def session_from_row(row: tuple[Any, ...]) -> Session:
    values = list(row)
    values[6] = json.loads(values[6])
    values[10] = str(values[10])
    values[16] = bool(values[16])
    return Session(*values)


def position_number(value: str | None) -> int:
    if value is None or value == "":
        return 0
    if not (isinstance(value, str) and value.isascii() and value.isdigit() and len(value) < 20):
        raise InvalidArgument(f"position {value!r:.40} is not a position of this journal")
    number = int(value)
    if number >= 2**63:
        raise InvalidArgument(f"position {value!r} is past any position of this journal")
    return number
