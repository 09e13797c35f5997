"""Models the agent loop can call: a scripted one (offline, deterministic) and any server that
speaks OpenAI's chat-completions JSON (OpenAI itself, vLLM, Ollama, LM Studio, a local proxy)."""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx

from agentjournal.errors import InvalidArgument, ModelError
from agentjournal.runtime.agent import ERROR_PREFIX, ModelReply, RequestedCall, Tool
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


class OpenAIChatModel:
    """`POST {base_url}/chat/completions` with the context and the tools' schemas.

    Defaults come from the environment: `OPENAI_BASE_URL` (else https://api.openai.com/v1),
    `OPENAI_API_KEY`, and `AGENTJOURNAL_MODEL` or `OPENAI_MODEL`. Connection failures are retried
    by httpx's transport; anything else the server refuses is a `ModelError`, which leaves the
    turn resumable.
    """

    def __init__(
        self,
        model: str | None = None,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        timeout: float = 60.0,
        retries: int = 2,
    ) -> None:
        env = os.environ
        self.model = model or env.get("AGENTJOURNAL_MODEL") or env.get("OPENAI_MODEL") or ""
        if not self.model:
            raise InvalidArgument(
                "no model name: pass model=... or set AGENTJOURNAL_MODEL (or OPENAI_MODEL)"
            )
        self.base_url = base_url or env.get("OPENAI_BASE_URL") or "https://api.openai.com/v1"
        self.base_url = self.base_url.rstrip("/")
        key = api_key if api_key is not None else env.get("OPENAI_API_KEY", "")
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        self._client = httpx.Client(
            transport=httpx.HTTPTransport(retries=retries), timeout=timeout, headers=headers
        )

    def close(self) -> None:
        self._client.close()

    def complete(self, messages: list[dict[str, Any]], tools: Sequence[Tool]) -> ModelReply:
        body: dict[str, Any] = {"model": self.model, "messages": messages}
        if tools:
            body["tools"] = [tool.schema() for tool in tools]
        url = f"{self.base_url}/chat/completions"
        try:
            response = self._client.post(url, json=body)
        except httpx.HTTPError as exc:
            raise ModelError(f"cannot reach {url}: {type(exc).__name__}: {exc}") from exc
        if response.status_code >= 400:
            raise ModelError(f"{url} answered {response.status_code}: {response.text[:300]}")
        try:
            return _reply_of(response.json())
        except (ValueError, KeyError, IndexError, TypeError) as exc:
            raise ModelError(f"{url} sent a reply that is not a chat completion: {exc}") from exc


def _reply_of(data: dict[str, Any]) -> ModelReply:
    message = data["choices"][0]["message"]
    content = message.get("content")
    if content is not None and not isinstance(content, str):
        raise TypeError("message.content is not a string")
    calls = []
    for call in message.get("tool_calls") or ():
        function = call["function"]
        arguments = function.get("arguments") or "{}"
        if not isinstance(arguments, str):  # some servers send an object; the journal keeps text
            arguments = json.dumps(arguments, ensure_ascii=False)
        calls.append(RequestedCall(str(call["id"]), str(function["name"]), arguments))
    usage = data.get("usage") or {}
    counts = {
        key: int(usage[key])
        for key in ("prompt_tokens", "completion_tokens")
        if isinstance(usage.get(key), int) and usage[key] >= 0
    }
    return ModelReply(content, tuple(calls), counts or None)
