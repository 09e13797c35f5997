"""LangGraph checkpoints as journal events: pure, no framework, no I/O.

A LangGraph thread is one journal session. `JournalSaver.put` appends one batch:

- `langgraph.blob {ns, channel, version, value}` for each channel in `new_versions`: the value as
  LangGraph's serde typed it (`{"type", "data"}`, the bytes in base64). When the new value of a
  list channel (a `messages` list, say) starts with a value already stored, only the added
  items are stored, with `base` (the seq of that value's blob) and `depth` (how many such steps
  lead back to a whole value): so a step that appends one message stores one message. A whole
  list too large for one event is a chain in the same batch: a first blob with its first items,
  then blobs extending it (`base`, `depth` as above); the checkpoint names the last.
- for the root graph's `messages` channel, the messages that step added as the journal's own
  events (`user_message`, `assistant_message`, `tool_call`, `tool_result`, `system_message`),
  each carrying the original under `message`, or `langgraph.message` for one the journal's
  tool-call rules have no place for;
- `langgraph.checkpoint {ns, checkpoint_id, parent_id, checkpoint, metadata, blobs}` last:
  `blobs` names, per channel, the blob event holding its value (a negative number counts back
  from the checkpoint's own seq, for a blob in the same batch).

`put_writes` appends `langgraph.writes {ns, checkpoint_id, task_id, task_path, writes}`; which
of them count is decided when they are read (`pending_writes`), by LangGraph's rules. A task's
writes can reach the journal before their checkpoint (LangGraph puts checkpoints on a worker
thread while the step's tasks run): the checkpoint then lists their seqs in `early_writes`.
`prune(strategy="keep_latest")` appends `langgraph.pruned {keep}`.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Collection, Iterable, Mapping, Sequence
from typing import Any

from agentjournal.errors import InvalidArgument
from agentjournal.events import (
    LANGGRAPH_CHECKPOINT,
    LANGGRAPH_MESSAGE,
    LANGGRAPH_WRITES,
    Event,
    NewEvent,
)

__all__ = [
    "MAX_DEPTH",
    "blob_payload",
    "blob_ref",
    "call_ids",
    "checkpoint_payload",
    "decode",
    "encode",
    "is_checkpoint",
    "is_message_list",
    "is_writes",
    "message_events",
    "new_messages",
    "pending_writes",
    "writes_payload",
]

# A list value is stored whole again after this many stored extensions of it, so reading one
# value follows at most MAX_DEPTH blobs back; unless the whole list is too large for one event
# (a quarter of the payload limit), then it goes on being extended.
MAX_DEPTH = 64


def encode(typed: tuple[str, bytes]) -> dict[str, str]:
    """A serde's `(type, bytes)` as JSON: the bytes in base64, the type as it is."""
    kind, data = typed
    return {"type": kind, "data": base64.b64encode(data).decode("ascii")}


def decode(blob: Mapping[str, Any]) -> tuple[str, bytes]:
    return blob["type"], base64.b64decode(blob["data"])


def blob_payload(
    ns: str,
    channel: str,
    version: Any,
    value: tuple[str, bytes],
    *,
    base: int | None = None,
    depth: int = 0,
) -> dict[str, Any]:
    payload: dict[str, Any] = {
        "ns": ns,
        "channel": channel,
        "version": version,
        "value": encode(value),
    }
    if base is not None:
        payload["base"], payload["depth"] = base, depth
    return payload


def checkpoint_payload(
    ns: str,
    checkpoint_id: str,
    parent_id: str | None,
    checkpoint: tuple[str, bytes],
    metadata: tuple[str, bytes],
    blobs: Mapping[str, int],
) -> dict[str, Any]:
    payload: dict[str, Any] = {
        "ns": ns,
        "checkpoint_id": checkpoint_id,
        "checkpoint": encode(checkpoint),
        "metadata": encode(metadata),
        "blobs": dict(blobs),
    }
    if parent_id is not None:
        payload["parent_id"] = parent_id
    return payload


def blob_ref(checkpoint: Event, channel: str) -> int | None:
    """The seq of the blob event holding `channel`'s value at this checkpoint."""
    ref = checkpoint.payload["blobs"].get(channel)
    if ref is None:
        return None
    return int(checkpoint.seq + ref if ref < 0 else ref)


def writes_payload(
    ns: str,
    checkpoint_id: str,
    task_id: str,
    task_path: str,
    writes: Sequence[tuple[int, str, tuple[str, bytes]]],
) -> dict[str, Any]:
    return {
        "ns": ns,
        "checkpoint_id": checkpoint_id,
        "task_id": task_id,
        "task_path": task_path,
        "writes": [[idx, channel, encode(value)] for idx, channel, value in writes],
    }


def pending_writes(events: Iterable[Event]) -> list[tuple[str, str, tuple[str, bytes]]]:
    """The pending writes that `langgraph.writes` events (in seq order, all of one checkpoint)
    leave, as LangGraph's own savers keep them: per (task, idx) the first write wins, except at
    a negative idx (errors, interrupts, resume, scheduled), where the last one does. In
    (task_path, task_id, idx) order, as `writes_sort_key` sorts them."""
    kept: dict[tuple[str, int], tuple[str, str, dict[str, Any], str]] = {}
    for event in events:
        payload = event.payload
        task_id, task_path = payload["task_id"], payload["task_path"]
        for idx, channel, value in payload["writes"]:
            key = (task_id, idx)
            if idx >= 0 and key in kept:
                continue
            kept[key] = (task_id, channel, value, task_path)
    order = sorted(kept, key=lambda k: (kept[k][3], k[0], k[1]))
    return [(kept[k][0], kept[k][1], decode(kept[k][2])) for k in order]


# -- the thread as a conversation ----------------------------------------------------------


def new_messages(old: Sequence[Any] | None, new: Sequence[Any]) -> list[Any]:
    """The messages of `new` that `old` did not hold: the added tail when `new` extends `old`,
    else those whose id `old` did not have (a message without an id counts as new)."""
    if old is None:
        return list(new)
    if len(new) >= len(old) and list(new[: len(old)]) == list(old):
        return list(new[len(old) :])
    seen = {getattr(m, "id", None) for m in old} - {None}
    return [m for m in new if getattr(m, "id", None) not in seen or getattr(m, "id", None) is None]


def is_message_list(value: Any) -> bool:
    """Whether a channel's value is a list of LangChain messages (the `add_messages` pattern)."""
    return isinstance(value, list) and all(
        isinstance(getattr(m, "type", None), str) and hasattr(m, "content") for m in value
    )


def message_events(
    messages: Sequence[Any],
    originals: Sequence[Mapping[str, Any]],
    *,
    used_calls: Collection[str],
    open_calls: Collection[str],
) -> list[NewEvent]:
    """The journal's own events for LangChain messages (`originals`: each as JSON, kept under
    `message`). `used_calls` are the session's call ids stored as `tool_call` already,
    `open_calls` those still without a result: a call id used before, or a tool message whose
    call is not open, becomes `langgraph.message`, kept but not in the tool-call table."""
    if len(messages) != len(originals):
        raise InvalidArgument("messages and originals must be the same length")
    used, waiting = set(used_calls), set(open_calls)
    events: list[NewEvent] = []
    for message, original in zip(messages, originals, strict=True):
        events += _events(message, dict(original), used, waiting)
    return events


_ROLES = {"human": "user_message", "system": "system_message"}


def _events(
    message: Any, original: dict[str, Any], used: set[str], waiting: set[str]
) -> list[NewEvent]:
    original = _storable(original)
    kind, text = message.type, _storable(_text(message.content))
    if kind in _ROLES and text is not None:
        return [NewEvent(_ROLES[kind], {"content": text, "message": original})]
    if kind == "ai" and text is not None:
        calls = [_call(c) for c in getattr(message, "tool_calls", None) or ()]
        if any(c is None or c["call_id"] in used for c in calls) or len(
            {c["call_id"] for c in calls if c}
        ) < len(calls):
            return [NewEvent(LANGGRAPH_MESSAGE, {"message": original})]
        events = []
        if text or not calls:
            events.append(NewEvent("assistant_message", {"content": text, "message": original}))
        for index, call in enumerate(calls):
            assert call is not None
            payload: dict[str, Any] = dict(call)
            if not events and index == 0:
                payload["message"] = original
            events.append(NewEvent("tool_call", payload))
            used.add(call["call_id"])
            waiting.add(call["call_id"])
        return events
    if kind == "tool" and text is not None:
        call_id = _storable(getattr(message, "tool_call_id", None))
        if isinstance(call_id, str) and call_id in waiting:
            waiting.discard(call_id)
            result: dict[str, Any] = {"call_id": call_id, "content": text, "message": original}
            if getattr(message, "status", None) == "error":
                result["is_error"] = True
            return [NewEvent("tool_result", result)]
    return [NewEvent(LANGGRAPH_MESSAGE, {"message": original})]


def _call(call: Any) -> dict[str, str] | None:
    if not isinstance(call, Mapping):
        return None
    call_id, name = _storable(call.get("id")), _storable(call.get("name"))
    if not (isinstance(call_id, str) and call_id and isinstance(name, str) and name):
        return None
    arguments = json.dumps(call.get("args", {}), ensure_ascii=False, sort_keys=True)
    return {"call_id": call_id, "name": name, "arguments": arguments}


def _storable(value: Any) -> Any:
    """`value` with the text the journal does not store (U+0000, lone surrogates) replaced by
    U+FFFD. These events show the conversation; the checkpoint's blobs keep the exact value, so
    a tool that returns binary junk still checkpoints as with LangGraph's own savers."""
    if isinstance(value, str):
        if value.isascii() and "\x00" not in value:
            return value
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            value = "".join("\ufffd" if "\ud800" <= c <= "\udfff" else c for c in value)
        return value.replace("\x00", "\ufffd")
    if isinstance(value, Mapping):
        return {_storable(key): _storable(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_storable(item) for item in value]
    return value


def _text(content: Any) -> str | None:
    """A message's text: a string as is, a list of parts as their text joined."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return None
    texts = []
    for part in content:
        if isinstance(part, str):
            texts.append(part)
        elif isinstance(part, Mapping) and part.get("type") == "text":
            text = part.get("text")
            if isinstance(text, str):
                texts.append(text)
    return "".join(texts)


def call_ids(messages: Iterable[Any]) -> set[str]:
    """The call ids the messages name (to look up which the session has already)."""
    found: set[str] = set()
    for message in messages:
        for call in getattr(message, "tool_calls", None) or ():
            if isinstance(call, Mapping) and isinstance(call.get("id"), str):
                found.add(call["id"])
        call_id = getattr(message, "tool_call_id", None)
        if isinstance(call_id, str):
            found.add(call_id)
    return found


def is_checkpoint(event: Event, ns: str | None = None) -> bool:
    return event.type == LANGGRAPH_CHECKPOINT and (ns is None or event.payload["ns"] == ns)


def is_writes(event: Event, ns: str, checkpoint_id: str) -> bool:
    return (
        event.type == LANGGRAPH_WRITES
        and event.payload["checkpoint_id"] == checkpoint_id
        and event.payload["ns"] == ns
    )
