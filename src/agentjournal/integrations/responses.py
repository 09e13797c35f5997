"""OpenAI Responses API input items as journal events: pure, no framework, no I/O.

An item the journal has a type for becomes that type, with the item itself under `item`, so that
`replay(format="responses")` gives it back verbatim while the transcript, the tool-call table,
the other replay formats, the inspector and the CLI read it like any conversation:

- a message of role `user`, `assistant`, `system` or `developer`: `user_message`,
  `assistant_message` or `system_message` (both system roles), `content` being its text;
- `function_call`: `tool_call` (`call_id`, `name`, `arguments`);
- `function_call_output`: `tool_result` (`call_id`, `content`: the output's text);
- anything else (reasoning, hosted tool calls, item references, compaction items, kinds added in
  later versions of the API): `responses.item`.

The journal's tool-call rules hold for the calls it stores as `tool_call`: a call id is used once
in a session, and a result needs that call, still open. An SDK run may break them in ways that are
valid for the SDK (an output whose call was popped or cleared, a call re-added after `pop_item`),
so an item that would break one is stored as `responses.item` instead: kept and returned exactly,
but not in the tool-call table. The rules are never bypassed; the item simply is not a call there.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Iterable, Mapping, Sequence
from typing import Any

from agentjournal.errors import InvalidEvent
from agentjournal.events import ITEM, NewEvent

__all__ = ["call_ids", "item_events", "item_text"]

_ROLES = {
    "user": "user_message",
    "assistant": "assistant_message",
    "system": "system_message",
    "developer": "system_message",
}
_TEXT_PARTS = ("input_text", "output_text", "text", "refusal")


def item_text(content: Any) -> str | None:
    """The text of a message's or an output's content: a string as is, a list of parts as the
    concatenation of their text (refusals included; images and files have none). None if it
    is neither."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return None
    texts = []
    for part in content:
        if not isinstance(part, Mapping):
            return None
        if part.get("type") in _TEXT_PARTS:
            text = part.get("text", part.get("refusal"))
            if isinstance(text, str):
                texts.append(text)
    return "".join(texts)


def item_events(
    items: Sequence[Any], *, used_calls: Collection[str], open_calls: Collection[str]
) -> list[NewEvent]:
    """One event per item, in order. `used_calls` are the session's call ids stored as
    `tool_call` already, `open_calls` those of them still without a result. `InvalidEvent` if an
    item is not a JSON object."""
    used, waiting = set(used_calls), set(open_calls)
    events: list[NewEvent] = []
    for index, item in enumerate(items):
        if not isinstance(item, Mapping):
            raise InvalidEvent(f"item {index} must be a JSON object, not {type(item).__name__}")
        events.append(_event(dict(item), used, waiting))
    return events


def _event(item: dict[str, Any], used: set[str], waiting: set[str]) -> NewEvent:
    kind, role = item.get("type"), item.get("role")
    if kind in (None, "message") and role in _ROLES:
        text = item_text(item.get("content"))
        if text is not None:
            return NewEvent(_ROLES[role], {"content": text, "item": item})
    elif kind == "function_call":
        call_id, name, arguments = item.get("call_id"), item.get("name"), item.get("arguments")
        if (
            isinstance(call_id, str)
            and _nonempty(call_id)
            and _nonempty(name)
            and isinstance(arguments, str)
            and call_id not in used
        ):
            used.add(call_id)
            waiting.add(call_id)
            payload = {"call_id": call_id, "name": name, "arguments": arguments, "item": item}
            return NewEvent("tool_call", payload)
    elif kind == "function_call_output":
        call_id = item.get("call_id")
        output = item.get("output")
        text = item_text(output) if not isinstance(output, str) else output
        if text is None and output is not None:
            text = json.dumps(output, ensure_ascii=False)
        if isinstance(call_id, str) and call_id in waiting and text is not None:
            waiting.discard(call_id)
            return NewEvent("tool_result", {"call_id": call_id, "content": text, "item": item})
    return NewEvent(ITEM, {"item": item})


def _nonempty(value: Any) -> bool:
    return isinstance(value, str) and bool(value)


def call_ids(items: Iterable[Any]) -> set[str]:
    """The call ids the items name (to look up which the session has already)."""
    return {
        item["call_id"]
        for item in items
        if isinstance(item, Mapping) and isinstance(item.get("call_id"), str) and item["call_id"]
    }
