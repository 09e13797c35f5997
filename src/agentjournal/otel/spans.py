"""Turns and tasks as span data under OpenTelemetry's GenAI semantic conventions, as the
installed `opentelemetry-semantic-conventions` names them. No I/O: the exporter hands the
result to the SDK.

A turn is an `invoke_agent` span (its user message to its reply); each model response under it a
`chat` span (from the event the model answered to the response), with the model and the token
usage the journal recorded; each tool call an `execute_tool` span from the call to its result,
with error status when the result is an error. A task is a span of its own, under the turn that
created it. Message content is added only with `capture_content`, as the conventions require.

Ids come from the journal, not from chance: a turn's trace id hashes (tenant, session, the
turn's first seq), each span id hashes that and the seq of the event the span starts at. A
second export of the same turn, after a crash, sends the same ids.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from opentelemetry.semconv._incubating.attributes import gen_ai_attributes as gen_ai
from opentelemetry.semconv.attributes import error_attributes
from opentelemetry.semconv.version import __version__ as SEMCONV_VERSION

from agentjournal.events import Event
from agentjournal.otel.turns import FinishedTask, ModelStep, ToolStep, Turn, steps_of

__all__ = [
    "SEMCONV_VERSION",
    "SessionInfo",
    "SpanRecord",
    "span_id",
    "task_span",
    "trace_id",
    "turn_spans",
]

AttributeValue = str | bool | int | float | tuple[str, ...]
_NS: Final = 1_000_000  # journal timestamps are milliseconds


@dataclass(frozen=True, slots=True)
class SessionInfo:
    """What the spans of a session say about it, from its `session_created` and metadata."""

    tenant: str
    session_id: str
    model: str | None = None
    agent: str | None = None
    system_prompt: str | None = None
    provider: str | None = None

    @classmethod
    def of(
        cls,
        tenant: str,
        session_id: str,
        model: str | None,
        system_prompt: str | None,
        metadata: Mapping[str, Any],
    ) -> SessionInfo:
        agent, provider = metadata.get("agent"), metadata.get("provider")
        return cls(
            tenant,
            session_id,
            model,
            agent if isinstance(agent, str) else None,
            system_prompt,
            provider if isinstance(provider, str) else None,
        )


@dataclass(frozen=True, slots=True)
class SpanRecord:
    """One span, ready for an OTLP exporter: ids as integers, times in unix nanoseconds."""

    name: str
    trace_id: int
    span_id: int
    parent_id: int | None
    kind: str  # "internal" or "client"
    start_ns: int
    end_ns: int
    attributes: dict[str, AttributeValue]
    status: str = "unset"  # "unset", "ok" or "error"
    description: str | None = None


def _digest(*parts: object) -> bytes:
    # Ids (check_id) hold no NUL, so the joined text names its parts unambiguously.
    text = "\x00".join(str(p) for p in parts)
    return hashlib.sha256(text.encode("utf-8")).digest()


def _nonzero(value: int) -> int:
    return value or 1  # an all-zero id is invalid in OTLP (one in 2**64 hashes)


def trace_id(tenant: str, session_id: str, root: str | int) -> int:
    """The trace id of a turn (`root`: its first seq) or of a task without a turn."""
    return _nonzero(int.from_bytes(_digest("trace", tenant, session_id, root)[:16], "big"))


def span_id(tenant: str, session_id: str, kind: str, seq: int) -> int:
    """The id of the span of `kind` that starts at the session's event `seq`."""
    return _nonzero(int.from_bytes(_digest("span", tenant, session_id, kind, seq)[:8], "big"))


def _ns(event: Event) -> int:
    return event.created_at * _NS


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _text(event: Event) -> str:
    content = event.payload.get("content")
    return content if isinstance(content, str) else ""


def _message(event: Event) -> dict[str, Any]:
    """An event as a message of the conventions' JSON shape (`gen_ai.input.messages`)."""
    if event.type == "tool_call":
        p = event.payload
        part = {
            "type": "tool_call",
            "id": p.get("call_id"),
            "name": p.get("name"),
            "arguments": p.get("arguments"),
        }
        return {"role": "assistant", "parts": [part]}
    if event.type == "tool_result":
        part = {
            "type": "tool_call_response",
            "id": event.payload.get("call_id"),
            "response": _text(event),
        }
        return {"role": "tool", "parts": [part]}
    role = {"user_message": "user", "assistant_message": "assistant"}.get(event.type, "system")
    return {"role": role, "parts": [{"type": "text", "content": _text(event)}]}


def _output(step: ModelStep) -> dict[str, Any]:
    parts: list[dict[str, Any]] = []
    if step.message is not None:
        parts.append({"type": "text", "content": _text(step.message)})
    for tool in step.calls:
        parts.extend(_message(tool.call)["parts"])
    finish = "tool_call" if step.calls else "stop"
    return {"role": "assistant", "parts": parts, "finish_reason": finish}


def _usage(event: Event) -> dict[str, int]:
    """Token counts a response reports on its first event: the runtime's `usage`
    {prompt_tokens, completion_tokens}, or a LangChain message's `usage_metadata`
    {input_tokens, output_tokens} (on its text, or on its first call when it had no text)."""
    usage = event.payload.get("usage")
    found: dict[str, int] = {}
    if isinstance(usage, Mapping):
        for key, name in (("prompt_tokens", "input"), ("completion_tokens", "output")):
            if isinstance(usage.get(key), int):
                found[name] = usage[key]
    message = event.payload.get("message")
    data = message.get("data", message) if isinstance(message, Mapping) else None
    meta = data.get("usage_metadata") if isinstance(data, Mapping) else None
    if isinstance(meta, Mapping) and not found:
        for key, name in (("input_tokens", "input"), ("output_tokens", "output")):
            if isinstance(meta.get(key), int):
                found[name] = meta[key]
    return found


def _response_model(event: Event) -> str | None:
    model = event.payload.get("model")
    if isinstance(model, str):
        return model
    message = event.payload.get("message")
    data = message.get("data", message) if isinstance(message, Mapping) else None
    meta = data.get("response_metadata") if isinstance(data, Mapping) else None
    name = meta.get("model_name") if isinstance(meta, Mapping) else None
    return name if isinstance(name, str) else None


def _common(info: SessionInfo, seq: int) -> dict[str, AttributeValue]:
    attributes: dict[str, AttributeValue] = {
        gen_ai.GEN_AI_CONVERSATION_ID: info.session_id,
        "agentjournal.tenant": info.tenant,
        "agentjournal.seq": seq,
    }
    if info.provider is not None:
        attributes[gen_ai.GEN_AI_PROVIDER_NAME] = info.provider
    return attributes


def turn_spans(turn: Turn, info: SessionInfo, *, capture_content: bool = False) -> list[SpanRecord]:
    """The spans of one finished turn: its `invoke_agent` span first, then each model
    response's `chat` span and each tool call's `execute_tool` span, in seq order."""
    tenant, sid, root = info.tenant, info.session_id, turn.start_seq
    trace = trace_id(tenant, sid, root)
    agent_id = span_id(tenant, sid, "invoke_agent", root)
    first, last = turn.events[0], turn.events[-1]
    steps = steps_of(turn)
    totals = {"input": 0, "output": 0}
    children: list[SpanRecord] = []
    for step in steps:
        usage = _usage(step.first)
        for key, value in usage.items():
            totals[key] += value
        children.append(_chat(step, turn, info, trace, agent_id, usage, capture_content))
        children += [
            _tool(call, last, info, trace, agent_id, capture_content) for call in step.calls
        ]
    attributes = _common(info, root)
    attributes[gen_ai.GEN_AI_OPERATION_NAME] = "invoke_agent"
    if info.agent is not None:
        attributes[gen_ai.GEN_AI_AGENT_NAME] = info.agent
    if info.model is not None:
        attributes[gen_ai.GEN_AI_REQUEST_MODEL] = info.model
    if any(_usage(s.first) for s in steps):
        attributes[gen_ai.GEN_AI_USAGE_INPUT_TOKENS] = totals["input"]
        attributes[gen_ai.GEN_AI_USAGE_OUTPUT_TOKENS] = totals["output"]
    attributes["agentjournal.turn.last_seq"] = last.seq
    if capture_content:
        if info.system_prompt:
            attributes[gen_ai.GEN_AI_SYSTEM_INSTRUCTIONS] = _json(
                [{"type": "text", "content": info.system_prompt}]
            )
        if turn.user is not None:
            attributes[gen_ai.GEN_AI_INPUT_MESSAGES] = _json([_message(turn.user)])
        if turn.reply is not None:
            reply = _message(turn.reply) | {"finish_reason": "stop"}
            attributes[gen_ai.GEN_AI_OUTPUT_MESSAGES] = _json([reply])
    status, description = "unset", None
    if not turn.ended:
        status, description = "error", "the turn ended without a reply"
        attributes[error_attributes.ERROR_TYPE] = "turn_cut"
    elif turn.reply is not None and turn.reply.payload.get("interrupted"):
        attributes["agentjournal.turn.interrupted"] = True
    name = "invoke_agent" if info.agent is None else f"invoke_agent {info.agent}"
    agent = SpanRecord(
        name,
        trace,
        agent_id,
        None,
        "internal",
        _ns(first),
        _ns(last),
        attributes,
        status,
        description,
    )
    return [agent, *children]


def _chat(
    step: ModelStep,
    turn: Turn,
    info: SessionInfo,
    trace: int,
    parent: int,
    usage: dict[str, int],
    capture_content: bool,
) -> SpanRecord:
    first = step.first
    attributes = _common(info, first.seq)
    attributes[gen_ai.GEN_AI_OPERATION_NAME] = "chat"
    if info.model is not None:
        attributes[gen_ai.GEN_AI_REQUEST_MODEL] = info.model
    response_model = _response_model(step.first)
    if response_model is not None:
        attributes[gen_ai.GEN_AI_RESPONSE_MODEL] = response_model
    if "input" in usage:
        attributes[gen_ai.GEN_AI_USAGE_INPUT_TOKENS] = usage["input"]
    if "output" in usage:
        attributes[gen_ai.GEN_AI_USAGE_OUTPUT_TOKENS] = usage["output"]
    finish = "tool_call" if step.calls else "stop"
    attributes[gen_ai.GEN_AI_RESPONSE_FINISH_REASONS] = (finish,)  # a list: one per choice
    if capture_content:
        # The turn's own messages before this response (the model also saw the session's
        # earlier turns: replay() rebuilds that whole context from the journal).
        before = [_message(e) for e in turn.events if e.seq < first.seq]
        attributes[gen_ai.GEN_AI_INPUT_MESSAGES] = _json(before)
        attributes[gen_ai.GEN_AI_OUTPUT_MESSAGES] = _json([_output(step)])
    start = _ns(step.after) if step.after is not None else _ns(first)
    name = "chat" if info.model is None else f"chat {info.model}"
    tenant, sid = info.tenant, info.session_id
    return SpanRecord(
        name,
        trace,
        span_id(tenant, sid, "chat", first.seq),
        parent,
        "client",
        start,
        _ns(step.last),
        attributes,
    )


def _tool(
    tool: ToolStep, last: Event, info: SessionInfo, trace: int, parent: int, capture: bool
) -> SpanRecord:
    call, result = tool.call, tool.result
    name = str(call.payload.get("name"))
    attributes = _common(info, call.seq)
    attributes[gen_ai.GEN_AI_OPERATION_NAME] = "execute_tool"
    attributes[gen_ai.GEN_AI_TOOL_NAME] = name
    attributes[gen_ai.GEN_AI_TOOL_CALL_ID] = str(call.payload.get("call_id"))
    attributes[gen_ai.GEN_AI_TOOL_TYPE] = "function"
    if capture:
        arguments = call.payload.get("arguments")
        if isinstance(arguments, str):
            attributes[gen_ai.GEN_AI_TOOL_CALL_ARGUMENTS] = arguments
        if result is not None:
            attributes[gen_ai.GEN_AI_TOOL_CALL_RESULT] = _text(result)
    status, description = "unset", None
    if result is None:
        status, description = "error", "the turn ended without the call's result"
        attributes[error_attributes.ERROR_TYPE] = "no_result"
    elif result.payload.get("is_error"):
        status, description = "error", "the tool returned an error result"
        attributes[error_attributes.ERROR_TYPE] = "tool_error"
    if result is not None:
        attributes["agentjournal.result_seq"] = result.seq
    end = _ns(result if result is not None else last)
    tenant, sid = info.tenant, info.session_id
    return SpanRecord(
        f"execute_tool {name}",
        trace,
        span_id(tenant, sid, "execute_tool", call.seq),
        parent,
        "internal",
        _ns(call),
        end,
        attributes,
        status,
        description,
    )


def task_span(finished: FinishedTask, info: SessionInfo) -> SpanRecord:
    """A task's span: from `task_created` to the event that ended it, under the turn that was
    open when it was created (or under the task that created it), else a trace of its own."""
    task, end = finished.task, finished.end
    tenant, sid = info.tenant, info.session_id
    parent = None
    if task.parent_kind is not None and task.parent_seq is not None:
        parent = span_id(tenant, sid, task.parent_kind, task.parent_seq)
    attributes = _common(info, task.created_seq)
    attributes["agentjournal.task.id"] = task.task_id
    attributes["agentjournal.task.type"] = task.type
    attributes["agentjournal.task.status"] = end.type.removeprefix("task_")
    attempt = end.payload.get("attempt")
    if isinstance(attempt, int):
        attributes["agentjournal.task.attempt"] = attempt
    status, description = "unset", None
    if end.type == "task_failed":
        status, description = "error", "the task failed"
        attributes[error_attributes.ERROR_TYPE] = "task_failed"
    elif end.type == "task_completed":
        status = "ok"
    return SpanRecord(
        f"task {task.type}",
        trace_id(tenant, sid, task.trace_root),
        span_id(tenant, sid, "task", task.created_seq),
        parent,
        "internal",
        task.created_at * _NS,
        _ns(end),
        attributes,
        status,
        description,
    )
