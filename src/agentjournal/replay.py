"""The pure fold from a session's events to model-ready messages (docs/concepts.md, "Replay").

One fold (`_fold`) turns events into internal messages, each with an anchor (the seq of the event
that opened it); `replay` renders them in the OpenAI or Anthropic shape and `fit_context` picks the
longest suffix that fits a token budget. `responses_items` folds the same events into OpenAI
Responses API input items. No I/O: the journal reads the events and calls in here.

Two namespaced event types hide history from every replay without deleting it (an SDK's
`pop_item` and `clear_session`): `replay.item_removed {seq}` hides the event at that seq, and
`replay.cleared {}` hides everything before it. An event whose payload carries `item` (a JSON
object) was made from that Responses input item, which the `responses` format returns verbatim.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from agentjournal.errors import ContextTooLarge, InvalidArgument
from agentjournal.events import CLEARED, ITEM_REMOVED, MESSAGE_ROLES, Event

__all__ = [
    "REPLAY_FORMATS",
    "ContextFit",
    "Format",
    "ReplayFormat",
    "Tokenizer",
    "anthropic_messages",
    "estimate_tokens",
    "fit_context",
    "replay",
    "responses_items",
    "visible",
]

Tokenizer = Callable[[dict[str, Any]], int]
Format = Literal["openai", "anthropic"]
ReplayFormat = Literal["openai", "anthropic", "responses"]
_FORMATS: tuple[str, ...] = ("openai", "anthropic")
REPLAY_FORMATS: tuple[str, ...] = ("openai", "anthropic", "responses")


@dataclass(frozen=True, slots=True)
class _Call:
    call_id: str
    name: str
    arguments: str


@dataclass(slots=True)
class _Msg:
    anchor: int
    role: str  # system | user | assistant | tool
    content: str | None
    calls: list[_Call] = field(default_factory=list)
    call_id: str = ""  # tool messages only
    is_error: bool = False


@dataclass(frozen=True, slots=True)
class _Fold:
    system_prompt: str | None
    summary: str | None
    messages: list[_Msg]


def estimate_tokens(message: dict[str, Any]) -> int:
    """ceil(UTF-8 bytes / 3) + 4 for one OpenAI-shape message: the one place tokens are estimated.

    The bytes are the message's `content` if it is a string, plus the function name and arguments
    of each of its tool calls.
    """
    size = 0
    content = message.get("content")
    if isinstance(content, str):
        size += len(content.encode("utf-8"))
    for call in message.get("tool_calls") or ():
        function = call["function"]
        size += len(function["name"].encode("utf-8")) + len(function["arguments"].encode("utf-8"))
    return -(-size // 3) + 4


def visible(events: Iterable[Event], until: int | None = None) -> list[Event]:
    """`events` (ascending seq, up to `until`) without those a later `replay.item_removed` or
    `replay.cleared` hides, and without those two kinds themselves. A window that starts after
    the newest `replay.cleared` is folded as it is: nothing in it is hidden by an older one."""
    kept = [e for e in events if until is None or e.seq <= until]
    removed = {e.payload.get("seq") for e in kept if e.type == ITEM_REMOVED}
    floor = max((e.seq for e in kept if e.type == CLEARED), default=0)
    return [
        e
        for e in kept
        if e.seq > floor and e.seq not in removed and e.type not in (ITEM_REMOVED, CLEARED)
    ]


def _fold(events: Iterable[Event], until: int | None, system_prompt: str | None) -> _Fold:
    everything = [e for e in events if until is None or e.seq <= until]
    prompt: str | None = None
    compaction: Event | None = None
    for event in everything:  # a cleared history keeps its system prompt
        if event.type == "session_created":
            prompt = event.payload.get("system_prompt")
    kept = visible(everything)
    for event in kept:
        if event.type == "context_compacted":
            compaction = event  # events ascend, so the last one seen is the newest
    if system_prompt is not None:
        prompt = system_prompt
    floor = compaction.payload["until_seq"] if compaction else 0
    summary = compaction.payload["summary"] if compaction else None

    messages: list[_Msg] = []
    originals: dict[int, _Msg] = {}
    results: dict[str, tuple[str, bool]] = {}
    # What the previous shown event was, to find one model response: its text, then its calls.
    previous = ""
    for event in kept:
        kind, payload = event.type, event.payload
        if event.seq <= floor:
            continue
        if kind in MESSAGE_ROLES:
            target = payload.get("supersedes")
            if target is None:
                message = _Msg(event.seq, MESSAGE_ROLES[kind], payload["content"])
                messages.append(message)
                originals[event.seq] = message
            elif (original := originals.get(target)) is not None:
                original.content = payload["content"]
            previous = "text" if kind == "assistant_message" and target is None else kind
        elif kind == "tool_call":
            call = _Call(payload["call_id"], payload["name"], payload["arguments"])
            if previous in ("text", "tool_call"):
                messages[-1].calls.append(call)
            else:
                messages.append(_Msg(event.seq, "assistant", None, [call]))
            previous = kind
        elif kind == "tool_result":
            results.setdefault(
                payload["call_id"], (payload["content"], bool(payload.get("is_error")))
            )
            previous = kind

    shown: list[_Msg] = []
    for message in messages:
        if not message.calls:
            shown.append(message)
            continue
        # A call without a result is left out, so the output is always valid model input.
        message.calls = [call for call in message.calls if call.call_id in results]
        if message.calls or message.content is not None:
            shown.append(message)
        for call in message.calls:
            content, is_error = results[call.call_id]
            shown.append(
                _Msg(message.anchor, "tool", content, call_id=call.call_id, is_error=is_error)
            )
    return _Fold(prompt or None, summary or None, shown)


def _header(fold: _Fold) -> list[dict[str, Any]]:
    texts = (fold.system_prompt, fold.summary)
    return [{"role": "system", "content": text} for text in texts if text]


def _openai(message: _Msg) -> dict[str, Any]:
    if message.role == "tool":
        return {"role": "tool", "tool_call_id": message.call_id, "content": message.content}
    if not message.calls:
        return {"role": message.role, "content": message.content}
    calls = [
        {
            "id": c.call_id,
            "type": "function",
            "function": {"name": c.name, "arguments": c.arguments},
        }
        for c in message.calls
    ]
    return {"role": "assistant", "content": message.content, "tool_calls": calls}


def _tool_input(arguments: str) -> dict[str, Any]:
    try:
        parsed = json.loads(arguments, parse_constant=_reject_constant)
    except (ValueError, RecursionError):
        parsed = None
    return parsed if isinstance(parsed, dict) else {"arguments": arguments}


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _anthropic_one(message: _Msg) -> dict[str, Any]:
    if message.role == "tool":
        block: dict[str, Any] = {
            "type": "tool_result",
            "tool_use_id": message.call_id,
            "content": message.content,
        }
        if message.is_error:
            block["is_error"] = True
        return {"role": "user", "content": [block]}
    if not message.calls:
        return {"role": message.role, "content": message.content}
    blocks: list[dict[str, Any]] = []
    if message.content:
        blocks.append({"type": "text", "text": message.content})
    blocks.extend(
        {"type": "tool_use", "id": c.call_id, "name": c.name, "input": _tool_input(c.arguments)}
        for c in message.calls
    )
    return {"role": "assistant", "content": blocks}


def _blocks(content: str | list[dict[str, Any]]) -> list[dict[str, Any]]:
    if isinstance(content, list):
        return content
    return [{"type": "text", "text": content}] if content else []


def _anthropic(fold: _Fold, messages: Sequence[_Msg]) -> dict[str, Any]:
    texts = [fold.system_prompt, fold.summary]
    texts.extend(m.content for m in messages if m.role == "system")
    system = "\n\n".join(text for text in texts if text)
    out: list[dict[str, Any]] = []
    for message in messages:
        if message.role == "system":
            continue
        rendered = _anthropic_one(message)
        if out and out[-1]["role"] == rendered["role"]:
            # Anthropic requires the roles to alternate, so same-role neighbours become one message.
            merged = _blocks(out[-1]["content"]) + _blocks(rendered["content"])
            out[-1] = {"role": rendered["role"], "content": merged or ""}
        else:
            out.append(rendered)
    return {"system": system or None, "messages": out}


def anthropic_messages(messages: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """OpenAI Chat Completions messages (what `replay` returns and an agent sends) in Anthropic's
    shape, `{"system": str | None, "messages": [...]}`, rendered exactly as
    `replay(format="anthropic")` renders the same history. A tool message may carry
    `"is_error": true` (not part of OpenAI's shape) to mark its result as an error."""
    folded: list[_Msg] = []
    for anchor, message in enumerate(messages):
        try:
            role = message["role"]
            content = message.get("content")
            if role == "tool":
                folded.append(
                    _Msg(
                        anchor,
                        "tool",
                        content,
                        call_id=message["tool_call_id"],
                        is_error=bool(message.get("is_error")),
                    )
                )
                continue
            calls = [
                _Call(c["id"], c["function"]["name"], c["function"]["arguments"])
                for c in message.get("tool_calls") or ()
            ]
        except (KeyError, TypeError, AttributeError) as exc:
            raise InvalidArgument(f"message {anchor} is not a chat message: {exc!r}") from exc
        if role not in ("system", "user", "assistant") or not (
            content is None or isinstance(content, str)
        ):
            raise InvalidArgument(f"message {anchor} has role {role!r} or non-text content")
        folded.append(_Msg(anchor, role, content, calls))
    return _anthropic(_Fold(None, None, folded), folded)


def _render(
    fold: _Fold, messages: Sequence[_Msg], format: Format
) -> list[dict[str, Any]] | dict[str, Any]:
    if format == "anthropic":
        return _anthropic(fold, messages)
    return _header(fold) + [_openai(m) for m in messages]


def _check_format(format: str) -> None:
    if format not in _FORMATS:
        raise ValueError(f"format must be one of {', '.join(_FORMATS)}, got {format!r}")


def replay(
    events: Iterable[Event],
    *,
    until: int | None = None,
    format: ReplayFormat = "openai",
    system_prompt: str | None = None,
) -> list[dict[str, Any]] | dict[str, Any]:
    """Fold one session's events (ascending seq) into messages the model accepts as they are.

    `until` ignores events after that seq (time travel). `system_prompt`, when not None, replaces
    the one in `session_created` (for folding a suffix that lacks seq 1). Returns a list of OpenAI
    Chat Completions messages, for `format="anthropic"` `{"system": str | None, "messages": []}`,
    and for `format="responses"` a list of Responses API input items (`responses_items`).
    """
    if format == "responses":
        events = list(events)  # read twice: for the header, then for the items
        fold = _fold(events, until, system_prompt)
        return _header(fold) + responses_items(events, until=until)
    _check_format(format)
    fold = _fold(events, until, system_prompt)
    return _render(fold, fold.messages, format)


def responses_items(events: Iterable[Event], *, until: int | None = None) -> list[dict[str, Any]]:
    """The visible events (see `visible`) as OpenAI Responses API input items, in seq order.

    An event made from an item (its payload carries `item`) gives that item back verbatim, so a
    session written through an SDK's session protocol returns exactly what was added. Other
    messages, tool calls and results become the equivalent items (a correction's content shows at
    its original's place); a tool call whose result is not stored yet is left out, as in the
    other formats. Everything before the newest compaction is left out (`replay` puts the summary
    in front). No system prompt: that is `replay`'s header.
    """
    kept = visible(events, until)
    floor = max((e.payload["until_seq"] for e in kept if e.type == "context_compacted"), default=0)
    answered = {
        e.payload["call_id"] for e in kept if e.type == "tool_result" and "item" not in e.payload
    }
    corrected: dict[int, str] = {}
    for event in kept:
        target = event.payload.get("supersedes") if event.type in MESSAGE_ROLES else None
        if isinstance(target, int):
            corrected[target] = event.payload["content"]
    items: list[dict[str, Any]] = []
    calls: set[str] = set()  # the calls given so far: a result follows its call or is left out
    for event in kept:
        kind, payload = event.type, event.payload
        if event.seq <= floor:
            continue
        item = payload.get("item")
        if isinstance(item, dict):
            items.append(item)
            if kind == "tool_call":
                calls.add(payload["call_id"])
        elif kind in MESSAGE_ROLES and "supersedes" not in payload:
            text = corrected.get(event.seq, payload["content"])
            items.append({"role": MESSAGE_ROLES[kind], "content": text})
        elif kind == "tool_call" and payload["call_id"] in answered:
            calls.add(payload["call_id"])
            items.append(
                {
                    "type": "function_call",
                    "call_id": payload["call_id"],
                    "name": payload["name"],
                    "arguments": payload["arguments"],
                }
            )
        elif kind == "tool_result" and payload["call_id"] in calls:
            items.append(
                {
                    "type": "function_call_output",
                    "call_id": payload["call_id"],
                    "output": payload["content"],
                }
            )
    return items


@dataclass(frozen=True)
class ContextFit:
    """The suffix of the replay that `fit_context` chose."""

    messages: list[dict[str, Any]] | dict[str, Any]  # the same shape as replay() for the format
    cut_seq: int | None  # seq of the user message the suffix starts at; None = nothing was cut
    tokens: int  # total estimated tokens, system prompt and summary included


def fit_context(
    events: Sequence[Event],
    *,
    max_tokens: int,
    complete: bool,
    system_prompt: str | None = None,
    tokenizer: Tokenizer | None = None,
    format: Format = "openai",
) -> ContextFit:
    """The longest suffix of the replay within `max_tokens`, cut only before a user message.

    The system prompt and any compaction summary are always kept and counted. Each OpenAI-shape
    message costs `tokenizer(message)`, or `estimate_tokens(message)` without a tokenizer, whatever
    the output format. A cut at user seq s keeps every message anchored at s or later (a tool result
    anchors at its call), so no result is separated from its call.

    `events` (ascending seq) is either the whole history, from seq 1 or from the newest
    `context_compacted` on (`complete=True`; the start of the replay is then a candidate and
    `cut_seq` is None when everything fits), or a window of the newest events, possibly preceded by
    the newest compaction (`complete=False`). A window must hold at least one user message after
    the compaction, else `ValueError`. Contract for the caller reading backwards: when `complete`
    is False and `cut_seq` is the earliest user message of the window, an older turn might fit
    too, so read further back and call again; any other result, and `ContextTooLarge`, are final.

    Raises `ContextTooLarge` (giving the smallest candidate's tokens and the budget) if not even
    the newest user turn fits, and `ValueError` if `max_tokens` < 1.
    """
    if max_tokens < 1:
        raise ValueError(f"max_tokens must be at least 1, got {max_tokens}")
    _check_format(format)
    count = tokenizer or estimate_tokens
    fold = _fold(events, None, system_prompt)
    fixed = sum(count(m) for m in _header(fold))
    costs = [count(_openai(m)) for m in fold.messages]
    # Longest first: (index the suffix starts at, cut_seq).
    candidates: list[tuple[int, int | None]] = [(0, None)] if complete else []
    candidates += [(i, m.anchor) for i, m in enumerate(fold.messages) if m.role == "user"]
    if not candidates:
        raise ValueError(
            "a window (complete=False) must hold a user message after the newest compaction; "
            "read further back"
        )
    remaining = sum(costs)
    position = 0
    for start, cut_seq in candidates:
        remaining -= sum(costs[position:start])
        position = start
        if fixed + remaining <= max_tokens:
            kept = fold.messages[start:]
            return ContextFit(_render(fold, kept, format), cut_seq, fixed + remaining)
    where = f"from the user message at seq {cut_seq}" if cut_seq is not None else "the whole replay"
    raise ContextTooLarge(
        f"the smallest context ({where}, with the system prompt and summary) is "
        f"{fixed + remaining} tokens; the budget is {max_tokens}"
    )
