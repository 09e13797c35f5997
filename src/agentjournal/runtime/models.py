"""Models the agent loop can call: a scripted one (offline, deterministic) here, and
`OpenAIChatModel` (any server that speaks OpenAI's chat completions, in `openai_model`)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from agentjournal.errors import InvalidArgument
from agentjournal.runtime.agent import ERROR_PREFIX, ModelReply, RequestedCall, Tool
from agentjournal.runtime.openai_model import OpenAIChatModel
from agentjournal.runtime.streaming import Completed, ModelChunk, TextDelta, ToolCallDelta

__all__ = ["ChunkHook", "OpenAIChatModel", "Script", "ScriptedModel"]

# Awaited before each chunk `ScriptedModel.stream` yields (its index counts from 0): a test's
# delay, a stall until it says go, or a failure mid-stream (raise `ModelError`).
ChunkHook = Callable[[int, ModelChunk], Awaitable[None]]


@dataclass(frozen=True, slots=True)
class Script:
    """How `ScriptedModel` answers one user message: optionally call `tool` first, then reply.
    `{result}` in `reply` (or in `on_error`, used when the tool's result is an error) is replaced
    by the tool's result."""

    reply: str
    tool: str | None = None
    arguments: Mapping[str, Any] = field(default_factory=dict)
    on_error: str | None = None


class ScriptedModel:
    """A model that follows a script keyed by the user's message: no network, same answer every
    time. Call ids are `call_1`, `call_2`, ... counted over the calls in the context it is given."""

    def __init__(
        self,
        scripts: Mapping[str, Script],
        fallback: str,
        *,
        chunk_chars: int = 2,
        on_chunk: ChunkHook | None = None,
    ) -> None:
        if chunk_chars < 1:
            raise InvalidArgument("chunk_chars must be at least 1")
        self.scripts = dict(scripts)
        self.fallback = Script(fallback)
        self.chunk_chars = chunk_chars
        self.on_chunk = on_chunk

    async def stream(
        self, messages: list[dict[str, Any]], tools: Sequence[Tool]
    ) -> AsyncIterator[ModelChunk]:
        """The reply `complete` gives, as deltas of `chunk_chars` characters (text first, then
        each call's name with its first argument fragment, then the rest of its arguments),
        then `Completed`. `on_chunk` is awaited before each chunk is yielded."""
        reply = self.complete(messages, tools)
        chunks: list[ModelChunk] = [TextDelta(piece) for piece in self._pieces(reply.content)]
        for index, call in enumerate(reply.tool_calls):
            fragments = self._pieces(call.arguments) or [""]
            chunks.append(ToolCallDelta(index, call.call_id, call.name, fragments[0]))
            chunks += [ToolCallDelta(index, None, None, part) for part in fragments[1:]]
        chunks.append(Completed(reply))
        for number, chunk in enumerate(chunks):
            if self.on_chunk is not None:
                await self.on_chunk(number, chunk)
            yield chunk

    def _pieces(self, text: str | None) -> list[str]:
        size = self.chunk_chars
        return [text[i : i + size] for i in range(0, len(text or ""), size)] if text else []

    def complete(self, messages: list[dict[str, Any]], tools: Sequence[Tool]) -> ModelReply:
        users = [i for i, m in enumerate(messages) if m["role"] == "user"]
        if not users:
            return ModelReply(self.fallback.reply)
        text = messages[users[-1]]["content"]
        script = self.scripts.get(text.strip(), self.fallback)
        results = [m["content"] for m in messages[users[-1] + 1 :] if m["role"] == "tool"]
        if script.tool is None or results:
            result = results[-1] if results else ""
            failed = result.startswith(ERROR_PREFIX) and script.on_error is not None
            template = script.on_error if failed and script.on_error else script.reply
            return ModelReply(template.replace("{result}", result))
        count = sum(len(m.get("tool_calls") or ()) for m in messages)
        arguments = json.dumps(dict(script.arguments), ensure_ascii=False, separators=(",", ":"))
        return ModelReply(tool_calls=(RequestedCall(f"call_{count + 1}", script.tool, arguments),))
