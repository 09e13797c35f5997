"""PydanticAI messages as journal events: pure, no framework, no I/O.

The functions here take and give messages as `ModelMessagesTypeAdapter` dumps them in JSON mode
(`integrations.pydantic_ai` does the conversion), so every part kind, those added by later
versions included, is kept whatever it holds.

A message becomes one event per part, in order. The first event of a message also carries the
message without its parts under `model_message`; a message without parts is one
`pydantic_ai.message` event. Each part travels under `part`, and the part kinds the journal has a
type for become that type, so the transcript, the tool-call table, replay, search, the CLI and
the inspector read a PydanticAI conversation like any other:

- `user-prompt`: `user_message`, `content` being its text (the text items of a multimodal
  prompt joined; images and files are kept in `part` as the references or bytes they are);
- `system-prompt`: `system_message`;
- `text`: `assistant_message` (the first of a response also carries the response's `usage`);
- `tool-call`: `tool_call` (`call_id`, `name`, `arguments`: the arguments as JSON text);
- `tool-return` answering a call stored as `tool_call` and still open: `tool_result`
  (`content` its text, `is_error` for the outcomes PydanticAI counts as errors: `failed`,
  `retried`);
- every other part (thinking, retries without a call, native tool calls and returns, files,
  compaction, instructions, kinds added later): `pydantic_ai.part`, which replay ignores.

A text the event carries as `content` or `arguments` is not kept twice: it is left out of `part`
and put back when the message is read. As for the OpenAI Agents SDK's items, a tool call whose
id the session has used already, or a return whose call is not open, is kept as
`pydantic_ai.part` (PydanticAI's `TestModel` names every call of a tool the same way, for one).
"""

from __future__ import annotations

import json
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from agentjournal.events import MAX_TOKEN_COUNT, Event, NewEvent
from agentjournal.replay import Tokenizer, fit_context, visible

__all__ = [
    "DELETED",
    "DETAILS",
    "MESSAGE",
    "PART",
    "RECORD",
    "StoredMessage",
    "call_ids",
    "fit_start",
    "message_events",
    "stored_messages",
]

PART: Final = "pydantic_ai.part"  # {part[, model_message]}: a part the core types have no place for
MESSAGE: Final = "pydantic_ai.message"  # {model_message}: a message without parts
# What `pydantic_ai_store.JournalConversationStore` adds (its module tells the whole story).
RECORD: Final = "pydantic_ai.record"  # {record, where}: a ConversationRecord as saved
DETAILS: Final = "pydantic_ai.details"  # {title?, metadata?}: an update of the record's
DELETED: Final = "pydantic_ai.deleted"  # {revision}: the conversation was deleted

_MIRRORED: Final = {
    "user-prompt": "user_message",
    "system-prompt": "system_message",
    "text": "assistant_message",
}
# The outcomes PydanticAI counts as errors (`pydantic_ai.messages.ERROR_OUTCOMES`).
_ERROR_OUTCOMES: Final = ("failed", "retried")


@dataclass(frozen=True, slots=True)
class StoredMessage:
    """A message read back: its JSON (as `ModelMessagesTypeAdapter` reads it), the seqs of its
    first and last events, and what its first event carries under `entry` (None if nothing)."""

    message: dict[str, Any]
    first_seq: int
    last_seq: int
    entry: dict[str, Any] | None


def call_ids(messages: Iterable[Mapping[str, Any]]) -> set[str]:
    """The tool call ids the messages' parts name (to look up which the session has already)."""
    return {
        part["tool_call_id"]
        for message in messages
        for part in message.get("parts", ())
        if isinstance(part, Mapping) and isinstance(part.get("tool_call_id"), str)
    }


def message_events(
    messages: Sequence[Mapping[str, Any]],
    *,
    used_calls: Collection[str] = (),
    open_calls: Collection[str] = (),
    entries: Sequence[Mapping[str, Any] | None] | None = None,
) -> list[NewEvent]:
    """The events of `messages` (JSON dumps), in order. `used_calls` are the session's call ids
    stored as `tool_call` already, `open_calls` those of them still without a result. `entries`
    (one per message, or None) is carried under `entry` by each message's first event."""
    used, waiting = set(used_calls), set(open_calls)
    events: list[NewEvent] = []
    for index, message in enumerate(messages):
        envelope = {key: value for key, value in message.items() if key != "parts"}
        head: dict[str, Any] = {"model_message": envelope}
        entry = entries[index] if entries is not None else None
        if entry is not None:
            head["entry"] = dict(entry)
        parts = message.get("parts") or []
        if not parts:
            events.append(NewEvent(MESSAGE, head))
            continue
        usage = _usage(message)
        for position, part in enumerate(parts):
            event = _part_event(dict(part), used, waiting)
            payload = dict(event.payload)
            if position == 0:
                payload.update(head)
            if usage is not None and event.type == "assistant_message":
                payload["usage"], usage = usage, None
            events.append(NewEvent(event.type, payload))
    return events


def _part_event(part: dict[str, Any], used: set[str], waiting: set[str]) -> NewEvent:
    kind = part.get("part_kind")
    if kind in _MIRRORED:
        content = part.get("content")
        if isinstance(content, str):
            del part["content"]  # put back from the event's own content when read
            return NewEvent(_MIRRORED[kind], {"content": content, "part": part})
        if kind == "user-prompt" and isinstance(content, list):
            text = "".join(item for item in content if isinstance(item, str))
            return NewEvent("user_message", {"content": text, "part": part})
    elif kind == "tool-call":
        call_id, name, args = part.get("tool_call_id"), part.get("tool_name"), part.get("args")
        if isinstance(call_id, str) and call_id and _nonempty(name) and call_id not in used:
            used.add(call_id)
            waiting.add(call_id)
            if isinstance(args, str):
                del part["args"]
                arguments = args
            else:
                arguments = json.dumps({} if args is None else args, ensure_ascii=False)
            payload = {"call_id": call_id, "name": name, "arguments": arguments, "part": part}
            return NewEvent("tool_call", payload)
    elif kind == "tool-return" and part.get("tool_call_id") in waiting:
        call_id = part["tool_call_id"]
        waiting.discard(call_id)
        content = part.get("content")
        if isinstance(content, str):
            del part["content"]
            text = content
        else:
            text = json.dumps(content, ensure_ascii=False)
        payload = {"call_id": call_id, "content": text, "part": part}
        if part.get("outcome") in _ERROR_OUTCOMES:
            payload["is_error"] = True
        return NewEvent("tool_result", payload)
    return NewEvent(PART, {"part": part})


def _nonempty(value: Any) -> bool:
    return isinstance(value, str) and bool(value)


def _usage(message: Mapping[str, Any]) -> dict[str, int] | None:
    """A response's usage as the journal counts tokens (None if it reports none it can take)."""
    usage = message.get("usage")
    if message.get("kind") != "response" or not isinstance(usage, Mapping):
        return None
    counts = {
        "prompt_tokens": usage.get("input_tokens"),
        "completion_tokens": usage.get("output_tokens"),
    }
    taken: dict[str, int] = {}
    for name, count in counts.items():
        if (
            not isinstance(count, int)
            or isinstance(count, bool)
            or not 0 <= count <= MAX_TOKEN_COUNT
        ):
            return None
        taken[name] = count
    return taken


def _part_of(event: Event) -> dict[str, Any]:
    payload = event.payload
    part = dict(payload["part"])
    if event.type == "tool_call":
        if "args" not in part:
            part["args"] = payload["arguments"]
    elif event.type != PART and "content" not in part:
        part["content"] = payload["content"]
    return part


def stored_messages(events: Iterable[Event], *, hidden: bool = False) -> list[StoredMessage]:
    """The messages the events (ascending seq) hold, as JSON for `ModelMessagesTypeAdapter`,
    leaving out every other event and, unless `hidden`, what `replay.item_removed` or
    `replay.cleared` hide (a part whose message's first event is hidden goes with it)."""
    found: list[StoredMessage] = []
    current: dict[str, Any] | None = None
    for event in events if hidden else visible(events):
        payload = event.payload
        if not _is_ours(event):
            current = None
            continue
        envelope = payload.get("model_message")
        if isinstance(envelope, dict):
            current = {**envelope, "parts": []}
            entry = payload.get("entry")
            found.append(
                StoredMessage(
                    current, event.seq, event.seq, entry if isinstance(entry, dict) else None
                )
            )
        if current is not None and "part" in payload:
            current["parts"].append(_part_of(event))
            last = found[-1]
            found[-1] = StoredMessage(last.message, last.first_seq, event.seq, last.entry)
    return found


_OURS: Final = {PART, *_MIRRORED.values(), "tool_call", "tool_result"}


def _is_ours(event: Event) -> bool:
    """Whether this module made the event (a message's envelope, or one of its parts)."""
    if event.type == MESSAGE:
        return isinstance(event.payload.get("model_message"), dict)
    return event.type in _OURS and isinstance(event.payload.get("part"), dict)


def fit_start(
    messages: Sequence[Mapping[str, Any]],
    *,
    max_tokens: int,
    tokenizer: Tokenizer | None = None,
) -> int:
    """Where the longest suffix of `messages` (JSON dumps) that fits `max_tokens` starts, as the
    journal's `context` picks it: cut only before a user prompt, the system prompts always kept
    and counted, tokens estimated as the journal estimates them (or by `tokenizer`).
    `ContextTooLarge` if not even the newest user turn fits."""
    events = message_events(messages)
    prompt_parts = [
        part.get("content")
        for message in messages
        for part in message.get("parts") or ()
        if isinstance(part, Mapping) and part.get("part_kind") == "system-prompt"
    ]
    system = "\n\n".join(text for text in prompt_parts if isinstance(text, str)) or None
    owner: list[int] = []  # the index of the message each event belongs to
    for index, message in enumerate(messages):
        owner.extend([index] * max(1, len(message.get("parts") or ())))
    stored = [
        Event(0, "", seq, event.type, dict(event.payload), 0)
        for seq, event in enumerate(events, start=1)
        if event.type != "system_message"  # counted once, as the system prompt
    ]
    fit = fit_context(
        stored, max_tokens=max_tokens, complete=True, system_prompt=system, tokenizer=tokenizer
    )
    return 0 if fit.cut_seq is None else owner[fit.cut_seq - 1]
