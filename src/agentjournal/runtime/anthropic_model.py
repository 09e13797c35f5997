"""`AnthropicModel`: Claude through Anthropic's official `anthropic` client
(`pip install 'agentjournal[anthropic]'`), streamed like `OpenAIChatModel`.

The agent hands every model OpenAI-shape messages; they become Anthropic's messages through the
same rendering `replay(format="anthropic")` uses (`anthropic_messages`), so a history reads the
same to Claude whether it came from a turn or from a replay.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from typing import Any

from agentjournal.errors import InvalidArgument, ModelError
from agentjournal.replay import anthropic_messages
from agentjournal.runtime.agent import ERROR_PREFIX, ModelReply, RequestedCall, Tool
from agentjournal.runtime.sdk_clients import ClientModel, import_sdk, settings
from agentjournal.runtime.streaming import ModelChunk, TextDelta, ToolCallDelta

__all__ = ["AnthropicModel"]


class AnthropicModel(ClientModel):
    """Anthropic's messages API with the context and the tools' schemas, streamed.

    Defaults come from the environment: `ANTHROPIC_API_KEY`, `ANTHROPIC_BASE_URL` (else
    https://api.anthropic.com), and `AGENTJOURNAL_MODEL` or `ANTHROPIC_MODEL`. `max_tokens`
    bounds each answer (Anthropic requires one). Timeouts, retries and failures behave as in
    `OpenAIChatModel`: what cannot be retried is a `ModelError`, which leaves the turn resumable.
    """

    SYNC_CLIENT = "Anthropic"
    ASYNC_CLIENT = "AsyncAnthropic"

    def __init__(
        self,
        model: str | None = None,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        max_tokens: int = 4096,
        timeout: float = 60.0,
        retries: int = 2,
    ) -> None:
        self.model, self.base_url = settings(
            model,
            "ANTHROPIC_MODEL",
            base_url,
            "ANTHROPIC_BASE_URL",
            "https://api.anthropic.com",
            timeout=timeout,
            retries=retries,
        )
        if max_tokens < 1:
            raise InvalidArgument(f"max_tokens must be 1 or more, not {max_tokens!r}")
        key = api_key if api_key is not None else os.environ.get("ANTHROPIC_API_KEY", "")
        if not key:
            raise InvalidArgument("no API key: pass api_key=... or set ANTHROPIC_API_KEY")
        self.max_tokens = max_tokens
        self.timeout = timeout
        options = {"base_url": self.base_url, "api_key": key}
        sdk = import_sdk("anthropic", "AnthropicModel")
        self._connect(sdk, {**options, "timeout": timeout, "max_retries": retries})

    @property
    def url(self) -> str:
        return f"{self.base_url}/v1/messages"

    def _request(self, messages: list[dict[str, Any]], tools: Sequence[Tool]) -> dict[str, Any]:
        marked = [
            {**m, "is_error": True}
            if m.get("role") == "tool" and str(m.get("content") or "").startswith(ERROR_PREFIX)
            else m
            for m in messages
        ]
        converted = anthropic_messages(marked)
        request: dict[str, Any] = {
            "model": self.model,
            "max_tokens": self.max_tokens,
            "messages": converted["messages"],
            "stream": True,
        }
        if converted["system"]:
            request["system"] = converted["system"]
        if tools:
            request["tools"] = [
                {
                    "name": tool.name,
                    "description": tool.description,
                    "input_schema": dict(tool.parameters),
                }
                for tool in tools
            ]
        return request

    def _open(self, client: Any, request: dict[str, Any]) -> Any:
        return client.messages.create(**request)

    def _assembler(self) -> _Assembler:
        return _Assembler(self.url)


class _Assembler:
    """Anthropic's stream events in, deltas out; the whole reply once `message_stop` came."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.received = 0
        self.text: list[str] = []
        self.calls: dict[int, list[Any]] = {}  # block index -> [id, name, fragments, input]
        self.input_tokens: int | None = None
        self.output_tokens: int | None = None
        self.finished = False

    def not_understood(self, exc: Exception) -> ModelError:
        return ModelError(f"{self.url} sent an event that is not a message stream event: {exc}")

    def feed(self, event: Any) -> list[ModelChunk]:
        self.received += 1
        kind = event.type
        if kind == "message_start":
            self._count(event.message.usage)
        elif kind == "content_block_start":
            block = event.content_block
            if block.type == "tool_use":
                first = json.dumps(block.input, ensure_ascii=False) if block.input else ""
                self.calls[event.index] = [block.id, block.name, [], first]
                number = len(self.calls) - 1
                return [ToolCallDelta(number, block.id, block.name, "")]
            if block.type == "text" and block.text:
                self.text.append(block.text)
                return [TextDelta(block.text)]
        elif kind == "content_block_delta":
            delta = event.delta
            if delta.type == "text_delta":
                if not isinstance(delta.text, str):
                    raise ModelError(f"{self.url} sent text that is not text: {delta.text!r}")
                self.text.append(delta.text)
                return [TextDelta(delta.text)] if delta.text else []
            if delta.type == "input_json_delta":
                call = self.calls.get(event.index)
                if call is None:
                    raise ModelError(f"{self.url} sent tool input for no tool_use block")
                call[2].append(delta.partial_json)
                number = list(self.calls).index(event.index)
                return [ToolCallDelta(number, None, None, delta.partial_json)]
        elif kind == "message_delta":
            self._count(event.usage)
        elif kind == "message_stop":
            self.finished = True
        return []

    def _count(self, usage: Any) -> None:
        if usage is None:
            return
        prompt = getattr(usage, "input_tokens", None)
        completion = getattr(usage, "output_tokens", None)
        if isinstance(prompt, int) and prompt >= 0:
            self.input_tokens = prompt
        if isinstance(completion, int) and completion >= 0:
            self.output_tokens = completion

    def reply(self) -> ModelReply:
        if not self.finished:
            raise ModelError(
                f"{self.url} ended the stream before finishing the reply"
                f" ({self.received} events, no message_stop)"
            )
        calls = tuple(
            RequestedCall(str(call_id), str(name), "".join(fragments) or first or "{}")
            for call_id, name, fragments, first in self.calls.values()
        )
        usage = {}
        if self.input_tokens is not None:
            usage["prompt_tokens"] = self.input_tokens
        if self.output_tokens is not None:
            usage["completion_tokens"] = self.output_tokens
        return ModelReply("".join(self.text) if self.text else None, calls, usage or None)
