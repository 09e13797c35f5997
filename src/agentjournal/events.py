"""The event model: what an event is, which types exist, and the shape of each payload.

Pure code, standard library only. Every backend and every face (library, HTTP, CLI) validates
through `prepare()`, so a rule about an event's shape is written here and nowhere else.
"""

from __future__ import annotations

import json
import math
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final, NamedTuple

from agentjournal.errors import InvalidEvent, PayloadTooLarge

__all__ = [
    "CLEARED",
    "CORE_TYPES",
    "DEFAULT_MAX_PAYLOAD_BYTES",
    "ITEM",
    "ITEM_REMOVED",
    "LANGGRAPH_BLOB",
    "LANGGRAPH_CHECKPOINT",
    "LANGGRAPH_MESSAGE",
    "LANGGRAPH_PRUNED",
    "LANGGRAPH_TYPES",
    "LANGGRAPH_WRITES",
    "MAX_TOKEN_COUNT",
    "MESSAGE_ROLES",
    "RESERVED_TYPES",
    "Event",
    "NewEvent",
    "PreparedEvent",
    "canonical_json",
    "loads_strict",
    "prepare",
]

DEFAULT_MAX_PAYLOAD_BYTES: Final = 1024 * 1024

MESSAGE_ROLES: Final = {
    "user_message": "user",
    "assistant_message": "assistant",
    "system_message": "system",
}
SESSION_TYPES: Final = frozenset({"session_created", "session_updated", "session_forked"})
TASK_TYPES: Final = frozenset(
    {
        "task_created",
        "task_started",
        "task_progress",
        "task_completed",
        "task_failed",
        "task_cancelled",
    }
)
# Written only by the journal's own verbs (create_session, fork, create_task, ...), never by append.
RESERVED_TYPES: Final = SESSION_TYPES | TASK_TYPES
CORE_TYPES: Final = (
    RESERVED_TYPES | frozenset(MESSAGE_ROLES) | {"tool_call", "tool_result", "context_compacted"}
)
SESSION_STATUSES: Final = ("active", "archived", "deleted")
# Namespaced types with a meaning of their own (replay.py): hiding history from every replay
# without deleting it, and keeping a Responses input item the core types have no shape for.
ITEM_REMOVED: Final = "replay.item_removed"  # {seq}: that event is left out of replays
CLEARED: Final = "replay.cleared"  # {}: every earlier event is left out of replays
ITEM: Final = "responses.item"  # {item}: a Responses API input item, kept verbatim
# A LangGraph thread's checkpoints (integrations/langgraph_events.py has the whole story).
# Replay ignores them; the messages a graph adds are also stored as the core message types.
LANGGRAPH_CHECKPOINT: Final = "langgraph.checkpoint"  # {ns, checkpoint_id, checkpoint, ...}
LANGGRAPH_BLOB: Final = "langgraph.blob"  # {ns, channel, version, value[, base, depth]}
LANGGRAPH_WRITES: Final = "langgraph.writes"  # {ns, checkpoint_id, task_id, task_path, writes}
LANGGRAPH_MESSAGE: Final = "langgraph.message"  # {message}: one the core types have no place for
LANGGRAPH_PRUNED: Final = "langgraph.pruned"  # {keep}: earlier checkpoints but these are gone
LANGGRAPH_TYPES: Final = frozenset(
    {LANGGRAPH_CHECKPOINT, LANGGRAPH_BLOB, LANGGRAPH_WRITES, LANGGRAPH_MESSAGE, LANGGRAPH_PRUNED}
)
TASK_STATUSES: Final = ("pending", "running", "completed", "failed", "cancelled")
MAX_TASK_RETRIES: Final = 100
# The most one assistant_message may report as `usage.prompt_tokens` or `completion_tokens`:
# far past any model's context, and small enough that a session's totals, which saturate at
# 2**63 - 1 (projection.py), would need over four billion such replies to reach that.
MAX_TOKEN_COUNT: Final = 2**31 - 1

_CUSTOM_TYPE = re.compile(r"^[a-z][a-z0-9_]*(\.[a-z][a-z0-9_]*)+$")
_MAX_TYPE_LEN: Final = 64
_MAX_KEY_LEN: Final = 255
_MAX_ID_LEN: Final = 255
_MAX_DEPTH: Final = 64  # levels of nesting in a payload


class Event(NamedTuple):
    """One stored event. `seq` orders it in its session; `position` in the tenant's global feed.

    A named tuple rather than a dataclass: reads build one per row, and a tuple is built in a
    quarter of the time (replay of 4,000 events is held to 1.5x a raw SELECT + json.loads).
    """

    event_id: int
    session_id: str
    seq: int
    type: str
    payload: dict[str, Any]
    created_at: int
    idempotency_key: str | None = None
    position: str = ""

    @property
    def ends_session_stream(self) -> bool:
        """A session's live stream ends after the event that deletes the session."""
        return self.type == "session_updated" and self.payload.get("status") == "deleted"

    def to_dict(self) -> dict[str, Any]:
        """The event as the HTTP API and exports show it."""
        return {
            "event_id": self.event_id,
            "session_id": self.session_id,
            "seq": self.seq,
            "position": self.position,
            "type": self.type,
            "payload": self.payload,
            "idempotency_key": self.idempotency_key,
            "created_at": self.created_at,
        }


@dataclass(frozen=True, slots=True)
class NewEvent:
    """An event a caller wants appended (the journal assigns id, seq and time)."""

    type: str
    payload: Mapping[str, Any] = field(default_factory=dict)
    idempotency_key: str | None = None


@dataclass(frozen=True, slots=True)
class PreparedEvent:
    """A validated event: its payload is a plain dict and `payload_json` its canonical text."""

    type: str
    payload: dict[str, Any]
    payload_json: str
    idempotency_key: str | None


# Made once: json.dumps with arguments builds a new encoder on every call (an eighth of the time
# to prepare an event). Encoders keep no state between calls, so threads can share them.
_CANONICAL: Final = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), sort_keys=True)
_PLAIN: Final = json.JSONEncoder(
    ensure_ascii=False, separators=(",", ":"), sort_keys=True, allow_nan=False
)
# Our own text has no surrounding whitespace: the decoder's entry point, without json.loads'.
_decode = json.JSONDecoder().raw_decode


def canonical_json(payload: Mapping[str, Any]) -> str:
    """Compact JSON with sorted keys: equal payloads give equal text (idempotency compares it)."""
    return _CANONICAL.encode(payload)


def _reject_constant(name: str) -> Any:
    raise InvalidEvent(f"JSON must not contain {name} (RFC 8259 has no such number)")


def _pairs_without_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result = dict(pairs)  # in C; only a shorter dict means a key came twice
    if len(result) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise InvalidEvent(f"JSON object has the key {key!r} twice")
            seen.add(key)
    return result


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        # RFC 8259 lets an implementation limit the range of numbers; Python reads this one as
        # infinity, which JSON cannot write back.
        raise InvalidEvent(f"the number {text[:40]} is out of range (past a 64-bit float)")
    return value


# Made once: `json.loads` with hooks builds a decoder (and its scanner) on every call, and every
# request body of the service passes here.
_STRICT = json.JSONDecoder(
    parse_constant=_reject_constant,
    parse_float=_finite_float,
    object_pairs_hook=_pairs_without_duplicates,
)


def loads_strict(text: str | bytes) -> Any:
    """Parse RFC 8259 JSON, rejecting NaN, Infinity, numbers out of range and duplicate keys
    with `InvalidEvent`: whatever the text, no other exception comes out."""
    try:
        if isinstance(text, bytes):
            text = text.decode("utf-8")  # RFC 8259: JSON exchanged between systems is UTF-8
        if text.startswith("\ufeff"):  # as json.loads words it
            raise json.JSONDecodeError("Unexpected UTF-8 BOM (decode using utf-8-sig)", text, 0)
        return _STRICT.decode(text)
    except InvalidEvent:
        raise
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise InvalidEvent(f"not valid JSON: {exc}") from exc
    except RecursionError as exc:
        raise InvalidEvent("JSON nests too deep (the limit for a payload is 64 levels)") from exc
    except ValueError as exc:
        # Python refuses to convert an integer literal of more than sys.get_int_max_str_digits()
        # digits (4,300 by default; it guards against quadratic-time conversion).
        raise InvalidEvent(
            f"not valid JSON: a number has more than {sys.get_int_max_str_digits()} digits"
        ) from exc


def _check_json_value(value: Any, path: str, depth: int = 0) -> None:
    """Walk a payload: only JSON types, finite numbers, string keys, no U+0000, valid Unicode."""
    if depth > _MAX_DEPTH:
        raise InvalidEvent(f"{path} nests deeper than {_MAX_DEPTH} levels")
    if value is None or isinstance(value, bool | int):
        return
    if isinstance(value, float):
        if not math.isfinite(value):
            raise InvalidEvent(f"{path} is {value}; JSON has no NaN or Infinity")
        return
    if isinstance(value, str):
        _check_text(value, path)
        return
    if isinstance(value, Mapping):
        for key, item in value.items():
            if not isinstance(key, str):
                raise InvalidEvent(f"{path} has a key {key!r} that is not a string")
            _check_text(key, f"{path} key")
            _check_json_value(item, f"{path}.{key}", depth + 1)
        return
    if isinstance(value, list | tuple):
        for index, item in enumerate(value):
            _check_json_value(item, f"{path}[{index}]", depth + 1)
        return
    raise InvalidEvent(f"{path} is a {type(value).__name__}, which JSON cannot hold")


def _check_text(text: str, path: str) -> None:
    if "\x00" in text:
        raise InvalidEvent(f"{path} contains U+0000, which the journal does not store")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidEvent(f"{path} is not valid Unicode (lone surrogate?)") from exc


def _require_str(payload: Mapping[str, Any], key: str, type_: str, *, nonempty: bool) -> None:
    value = payload.get(key)
    if not isinstance(value, str):
        raise InvalidEvent(f"{type_} needs {key!r} as a string, got {_describe(value)}")
    if nonempty and not value:
        raise InvalidEvent(f"{type_} needs a non-empty {key!r}")
    if nonempty and len(value) > _MAX_ID_LEN:
        raise InvalidEvent(f"{type_}.{key} is longer than {_MAX_ID_LEN} characters")


def _optional(
    payload: Mapping[str, Any], key: str, kind: type | tuple[type, ...], type_: str
) -> None:
    if key in payload and payload[key] is not None and not isinstance(payload[key], kind):
        raise InvalidEvent(f"{type_}.{key} has the wrong type: {_describe(payload[key])}")


def _is_count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _require_seq(payload: Mapping[str, Any], key: str, type_: str) -> None:
    value = payload.get(key)
    if not (isinstance(value, int) and not isinstance(value, bool) and 1 <= value < 2**63):
        raise InvalidEvent(
            f"{type_} needs {key!r} as a seq (an integer from 1 to 2**63 - 1),"
            f" got {_describe(value)}"
        )


def _describe(value: Any) -> str:
    if value is None:
        return "nothing"
    return f"{type(value).__name__} {value!r}"[:80]


def _check_message(type_: str, payload: Mapping[str, Any]) -> None:
    _require_str(payload, "content", type_, nonempty=False)
    if "supersedes" in payload:
        _require_seq(payload, "supersedes", type_)
    if "interrupted" in payload and (
        type_ != "assistant_message" or not isinstance(payload["interrupted"], bool)
    ):
        # A reply cut short by a cancel: the text the user saw, marked so.
        raise InvalidEvent("'interrupted' is a boolean that only an assistant_message carries")
    usage = payload.get("usage")
    if usage is not None:
        if type_ != "assistant_message":
            raise InvalidEvent(f"only assistant_message may carry 'usage', not {type_}")
        if not isinstance(usage, Mapping) or not all(
            _is_count(count) and count <= MAX_TOKEN_COUNT
            for count in (usage.get("prompt_tokens", 0), usage.get("completion_tokens", 0))
        ):
            raise InvalidEvent(
                "assistant_message.usage must be an object whose 'prompt_tokens' and "
                f"'completion_tokens' are integers from 0 to {MAX_TOKEN_COUNT}"
            )


def _check_session_event(type_: str, payload: Mapping[str, Any]) -> None:
    if type_ == "session_created":
        _require_str(payload, "title", type_, nonempty=False)
        for key in ("model", "system_prompt"):
            _optional(payload, key, str, type_)
        _optional(payload, "metadata", Mapping, type_)
    elif type_ == "session_updated":
        fields = {"title", "metadata", "status"} & payload.keys()
        if not fields:
            raise InvalidEvent("session_updated needs at least one of title, metadata, status")
        _optional(payload, "title", str, type_)
        _optional(payload, "metadata", Mapping, type_)
        if "status" in payload and payload["status"] not in SESSION_STATUSES:
            raise InvalidEvent(f"session status must be one of {', '.join(SESSION_STATUSES)}")
    else:  # session_forked
        _require_str(payload, "from_session_id", type_, nonempty=True)
        _require_seq(payload, "at_seq", type_)


def _require_count(payload: Mapping[str, Any], key: str, type_: str, low: int = 0) -> None:
    value = payload.get(key)
    if not (isinstance(value, int) and not isinstance(value, bool) and low <= value < 2**63):
        raise InvalidEvent(f"{type_} needs {key!r} as an integer >= {low}, got {_describe(value)}")


def _check_task_event(type_: str, payload: Mapping[str, Any]) -> None:
    """The task events' payloads: each says what the task became, so the fold just applies it."""
    _require_str(payload, "task_id", type_, nonempty=True)
    if type_ == "task_created":
        _require_str(payload, "type", type_, nonempty=True)
        if "input" not in payload:
            raise InvalidEvent("task_created needs 'input' (any JSON value, null included)")
        _optional(payload, "parent_task_id", str, type_)
        _require_count(payload, "max_retries", type_)
        if payload["max_retries"] > MAX_TASK_RETRIES:
            raise InvalidEvent(f"task_created.max_retries must be at most {MAX_TASK_RETRIES}")
        return
    if type_ == "task_cancelled":
        _optional(payload, "reason", str, type_)
        return
    _require_count(payload, "attempt", type_, low=1)
    if type_ == "task_started":
        _require_str(payload, "worker", type_, nonempty=True)
        _require_count(payload, "lease_expires_at", type_)
        lease = payload.get("lease_seconds")
        if not (isinstance(lease, int | float) and not isinstance(lease, bool) and lease > 0):
            raise InvalidEvent("task_started needs 'lease_seconds' as a positive number")
    elif type_ == "task_progress":
        progress = payload.get("progress")
        if not (
            isinstance(progress, int | float)
            and not isinstance(progress, bool)
            and 0 <= progress <= 1
        ):
            raise InvalidEvent(f"task_progress.progress must be from 0.0 to 1.0, got {progress!r}")
        _optional(payload, "message", str, type_)
        _require_count(payload, "lease_expires_at", type_)
    elif type_ == "task_completed":
        if "output" not in payload:
            raise InvalidEvent("task_completed needs 'output' (any JSON value, null included)")
    else:  # task_failed
        _require_str(payload, "error", type_, nonempty=False)
        _require_count(payload, "retry_count", type_)
        if not isinstance(payload.get("retry"), bool):
            raise InvalidEvent("task_failed needs 'retry' as a boolean")


# The types that may carry the LangChain message they were made from, under `message`.
_CARRY_MESSAGE: Final = {*MESSAGE_ROLES, "tool_call", "tool_result", LANGGRAPH_MESSAGE}


def _check_typed_value(value: Any, where: str) -> None:
    """A LangGraph serde's typed value: `{"type": str, "data": base64 str}` (data absent for
    `empty`, a channel that was cleared)."""
    if not isinstance(value, Mapping) or not isinstance(value.get("type"), str):
        raise InvalidEvent(f"{where} must be an object with a 'type' string and 'data'")
    if not isinstance(value.get("data", ""), str):
        raise InvalidEvent(f"{where}.data must be a base64 string")


def _check_langgraph(type_: str, payload: Mapping[str, Any]) -> None:
    if type_ == LANGGRAPH_MESSAGE:
        if "message" not in payload:
            raise InvalidEvent(f"{type_} needs 'message', the LangChain message it keeps")
        return
    if type_ == LANGGRAPH_PRUNED:
        keep = payload.get("keep")
        if not isinstance(keep, Mapping) or not all(isinstance(v, str) for v in keep.values()):
            raise InvalidEvent(f"{type_} needs 'keep': namespace -> the checkpoint id kept")
        return
    _require_str(payload, "ns", type_, nonempty=False)
    if type_ == LANGGRAPH_BLOB:
        _require_str(payload, "channel", type_, nonempty=True)
        version = payload.get("version")
        if not isinstance(version, str | int | float) or isinstance(version, bool):
            raise InvalidEvent(f"{type_} needs 'version' as a string or a number")
        _check_typed_value(payload.get("value"), f"{type_}.value")
        if "base" in payload:
            _require_seq(payload, "base", type_)
            _require_count(payload, "depth", type_, low=1)
        return
    _require_str(payload, "checkpoint_id", type_, nonempty=True)
    if type_ == LANGGRAPH_WRITES:
        _require_str(payload, "task_id", type_, nonempty=False)
        _require_str(payload, "task_path", type_, nonempty=False)
        writes = payload.get("writes")
        if not isinstance(writes, list | tuple):
            raise InvalidEvent(f"{type_} needs 'writes' as a list of [idx, channel, value]")
        for index, write in enumerate(writes):
            if not (
                isinstance(write, list | tuple)
                and len(write) == 3
                and isinstance(write[0], int)
                and not isinstance(write[0], bool)
                and isinstance(write[1], str)
            ):
                raise InvalidEvent(f"{type_}.writes[{index}] must be [idx, channel, value]")
            _check_typed_value(write[2], f"{type_}.writes[{index}]")
        return
    # langgraph.checkpoint
    _optional(payload, "parent_id", str, type_)
    _check_typed_value(payload.get("checkpoint"), f"{type_}.checkpoint")
    _check_typed_value(payload.get("metadata"), f"{type_}.metadata")
    blobs = payload.get("blobs")
    if not isinstance(blobs, Mapping) or not all(
        isinstance(v, int) and not isinstance(v, bool) and v != 0 for v in blobs.values()
    ):
        raise InvalidEvent(f"{type_} needs 'blobs': channel -> the seq of its blob event")
    early = payload.get("early_writes", [])
    if not isinstance(early, list | tuple) or not all(
        isinstance(seq, int) and not isinstance(seq, bool) and seq >= 1 for seq in early
    ):
        raise InvalidEvent(f"{type_}.early_writes must be a list of seqs")


def _check_shape(type_: str, payload: Mapping[str, Any]) -> None:
    if "item" in payload and not isinstance(payload["item"], Mapping):
        raise InvalidEvent(f"{type_}.item must be a JSON object (a Responses input item)")
    if type_ == ITEM_REMOVED:
        _require_seq(payload, "seq", type_)
    elif type_ == ITEM and "item" not in payload:
        raise InvalidEvent(f"{type_} needs 'item', the Responses input item it keeps")
    if (
        type_ in _CARRY_MESSAGE
        and "message" in payload
        and not isinstance(payload["message"], Mapping)
    ):
        raise InvalidEvent(f"{type_}.message must be a JSON object (a LangChain message)")
    if type_ in LANGGRAPH_TYPES:
        _check_langgraph(type_, payload)
    elif type_ in MESSAGE_ROLES:
        _check_message(type_, payload)
    elif type_ == "tool_call":
        _require_str(payload, "call_id", type_, nonempty=True)
        _require_str(payload, "name", type_, nonempty=True)
        _require_str(payload, "arguments", type_, nonempty=False)
    elif type_ == "tool_result":
        _require_str(payload, "call_id", type_, nonempty=True)
        _require_str(payload, "content", type_, nonempty=False)
        _optional(payload, "is_error", bool, type_)
    elif type_ == "context_compacted":
        _require_str(payload, "summary", type_, nonempty=False)
        _require_seq(payload, "until_seq", type_)
    elif type_ in SESSION_TYPES:
        _check_session_event(type_, payload)
    elif type_ in TASK_TYPES:
        _check_task_event(type_, payload)


def check_type(type_: Any) -> str:
    """A core type, or a namespaced custom type such as `myapp.memory_saved`."""
    if not isinstance(type_, str):
        raise InvalidEvent(f"event type must be a string, got {_describe(type_)}")
    if type_ in CORE_TYPES:
        return type_
    if len(type_) > _MAX_TYPE_LEN or not _CUSTOM_TYPE.match(type_):
        raise InvalidEvent(
            f"unknown event type {type_!r}: use a core type or a namespaced one like "
            "'myapp.memory_saved' (lowercase, dotted, at most 64 characters)"
        )
    return type_


def check_idempotency_key(key: Any) -> str | None:
    if key is None:
        return None
    if not isinstance(key, str) or not key or len(key) > _MAX_KEY_LEN:
        raise InvalidEvent(f"idempotency_key must be a string of 1 to {_MAX_KEY_LEN} characters")
    _check_text(key, "idempotency_key")
    return key


def prepare(
    type_: Any,
    payload: Any,
    idempotency_key: Any = None,
    *,
    max_payload_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES,
    allow_reserved: bool = False,
) -> PreparedEvent:
    """Validate one event's shape and size; raise `InvalidEvent` or `PayloadTooLarge`.

    Rules that need the session's history (seq, call ids, supersedes targets) are checked later,
    inside the write transaction, by `agentjournal.rules`.
    """
    type_ = check_type(type_)
    if type_ in RESERVED_TYPES and not allow_reserved:
        raise InvalidEvent(
            f"{type_} events are written by the journal's verbs (create_session, update_session, "
            "fork, create_task, ...), not by append"
        )
    if not isinstance(payload, Mapping):
        raise InvalidEvent(f"payload must be a JSON object, got {_describe(payload)}")
    plain = _plain_json(payload)
    if plain is None:
        _check_json_value(payload, "payload")
    _check_shape(type_, payload)
    key = check_idempotency_key(idempotency_key)
    if plain is None:
        payload_json = canonical_json(payload)
        # Decoding the canonical text gives a private copy, with tuples as lists, as readers
        # see it.
        plain = payload_json, len(payload_json.encode("utf-8")), _decode(payload_json)[0]
    payload_json, size, copy = plain
    if size > max_payload_bytes:
        raise PayloadTooLarge(size, max_payload_bytes)
    return PreparedEvent(type_, copy, payload_json, key)


def _plain_json(payload: Mapping[str, Any]) -> tuple[str, int, dict[str, Any]] | None:
    """A payload's canonical text, its size in UTF-8 and a private copy, if the payload is
    plainly valid: checked by the C encoder and decoder, without walking it in Python (a third
    of an append's Python time). None if it may not be; then `_check_json_value` walks it and
    says what is wrong, or accepts it (a tuple, say)."""
    try:
        text = _PLAIN.encode(payload)
        size = len(text.encode("utf-8"))  # a lone surrogate fails here
    except (TypeError, ValueError, RecursionError):
        return None
    # U+0000 is always escaped in the text; fewer brackets than the depth limit bound the depth.
    if "\\u0000" in text or text.count("{") + text.count("[") > _MAX_DEPTH:
        return None
    copy = _decode(text)[0]
    # The encoder turns a number, bool or None key into a string and a tuple into a list; the
    # copy then differs from the payload.
    return (text, size, copy) if copy == payload else None
