"""Rows of the PostgreSQL schema as Python values, and its positions.

A position names an event's place in the global feed, (tx, event_id) in that order (see
docs/postgres.md). It travels as one decimal integer, tx * 2**64 + event_id: opaque to clients,
ordered like the pair, and comparable as a number by the service like SQLite's positions.
"""

from __future__ import annotations

import json
from typing import Any, Final

from agentjournal.backends.projection_rows import TASK_COLUMN_NAMES
from agentjournal.errors import InvalidArgument
from agentjournal.events import Event
from agentjournal.projection import Session

# The xid8 columns travel as text (psycopg has no xid8 loader), under names of their own: an ORDER
# BY resolves a bare name to an output column before a table column, so `tx::text` left with its
# default name "tx" made `ORDER BY tx` sort positions as strings ('999' after '1000') and the feed
# gave events twice or out of order whenever its page straddled a power of ten.
EVENT_COLUMNS: Final = (
    "event_id, tx::text AS tx_text, session_id, seq, type, payload, idempotency_key, created_at"
)
SESSION_COLUMNS: Final = (
    "session_id, tenant, title, status, model, system_prompt, metadata, forked_from, "
    "forked_at_seq, last_seq, last_tx::text AS last_tx_text, last_event_id, event_count, "
    "prompt_tokens, completion_tokens, created_at, updated_at, turn_open"
)
MESSAGE_COLUMNS: Final = "session_id, seq, role, content, tokens, edited_seq, created_at"
TOOL_CALL_COLUMNS: Final = (
    "session_id, call_id, name, arguments, call_seq, status, result, result_seq"
)
TASK_COLUMNS: Final = ", ".join(TASK_COLUMN_NAMES)

_TX_SHIFT: Final = 64
_EVENT_MASK: Final = (1 << _TX_SHIFT) - 1
_MAX_POSITION: Final = 1 << 127

_decode = json.JSONDecoder().raw_decode


def encode_position(tx: int, event_id: int) -> str:
    return str(tx << _TX_SHIFT | event_id)


def decode_position(value: str | None) -> tuple[int, int]:
    """(tx, event_id) of a position; (0, 0), before every event, for None or ''."""
    if value is None or value == "":
        return 0, 0
    if not (isinstance(value, str) and value.isascii() and value.isdigit() and len(value) < 40):
        raise InvalidArgument(f"position {value!r:.40} is not a position of this journal")
    number = int(value)
    if number >= _MAX_POSITION:
        raise InvalidArgument(f"position {value!r} is past any position of this journal")
    return number >> _TX_SHIFT, number & _EVENT_MASK


def event_from_row(row: tuple[Any, ...]) -> Event:
    event_id, tx, session_id, seq, type_, payload, key, created_at = row
    return Event(
        event_id,
        session_id,
        seq,
        type_,
        _decode(payload)[0],
        created_at,
        key,
        encode_position(int(tx), event_id),
    )


def session_from_row(row: tuple[Any, ...]) -> Session:
    values = list(row)
    values[6] = json.loads(values[6])
    values[10:12] = [encode_position(int(values[10]), values[11])]
    return Session(*values)
