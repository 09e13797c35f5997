"""`OpenAIChatModel`: any server that speaks OpenAI's chat completions (OpenAI itself, vLLM,
Ollama, LM Studio, a local proxy), through the official `openai` client
(`pip install 'agentjournal[openai]'`).

Both ways of asking stream the answer: `stream()` (async, for `Agent.stream_turn` and the HTTP
service) yields the deltas as they arrive, and `complete()` (sync, for `Agent.run_turn`) reads the
same stream to its end. One assembler turns chunks into the reply for both, so a turn answers the
same whichever way it was asked.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from typing import Any

from agentjournal.errors import ModelError
from agentjournal.runtime.agent import ModelReply, RequestedCall, Tool
from agentjournal.runtime.sdk_clients import ClientModel, import_sdk, settings
from agentjournal.runtime.streaming import ModelChunk, TextDelta, ToolCallDelta

__all__ = ["OpenAIChatModel"]

# The client refuses to run without a key; servers that need none (a local vLLM or Ollama) get
# this placeholder at construction and no Authorization header on the wire.
_NO_KEY = "no-key-configured"


class OpenAIChatModel(ClientModel):
    """Chat completions with the context and the tools' schemas, streamed.

    Defaults come from the environment: `OPENAI_BASE_URL` (else https://api.openai.com/v1),
    `OPENAI_API_KEY` (none: no Authorization header), and `AGENTJOURNAL_MODEL` or `OPENAI_MODEL`.
    `timeout` bounds connecting and each wait for the next chunk; the client retries connection
    failures, timeouts before the answer starts, 408/409/429 and 5xx answers `retries` times.
    Anything else — a refusal, a stream that breaks off or reports an error, a reply that is not a
    chat completion — is a `ModelError`, which leaves the turn resumable.
    """

    SYNC_CLIENT = "OpenAI"
    ASYNC_CLIENT = "AsyncOpenAI"

    def __init__(
        self,
        model: str | None = None,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        timeout: float = 60.0,
        retries: int = 2,
    ) -> None:
        self.model, self.base_url = settings(
            model,
            "OPENAI_MODEL",
            base_url,
            "OPENAI_BASE_URL",
            "https://api.openai.com/v1",
            timeout=timeout,
            retries=retries,
        )
        key = api_key if api_key is not None else os.environ.get("OPENAI_API_KEY", "")
        sdk = import_sdk("openai", "OpenAIChatModel")
        self._headers: dict[str, Any] = {} if key else {"Authorization": sdk.Omit()}
        self.timeout = timeout
        options = {"base_url": self.base_url, "api_key": key or _NO_KEY}
        self._connect(sdk, {**options, "timeout": timeout, "max_retries": retries})

    @property
    def url(self) -> str:
        return f"{self.base_url}/chat/completions"

    def _request(self, messages: list[dict[str, Any]], tools: Sequence[Tool]) -> dict[str, Any]:
        request: dict[str, Any] = {
            "model": self.model,
            "messages": messages,
            "stream": True,
            "stream_options": {"include_usage": True},
            "extra_headers": self._headers,
        }
        if tools:
            request["tools"] = [tool.schema() for tool in tools]
        return request

    def _open(self, client: Any, request: dict[str, Any]) -> Any:
        return client.chat.completions.create(**request)

    def _assembler(self) -> _Assembler:
        return _Assembler(self.url)


class _Assembler:
    """Chat-completion chunks in, deltas out; the whole reply once the stream has ended."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.received = 0
        self.text: list[str] = []
        self.calls: dict[int, list[Any]] = {}  # index -> [call id, name, argument fragments]
        self.finished = False
        self.usage: dict[str, int] | None = None

    def not_understood(self, exc: Exception) -> ModelError:
        return ModelError(f"{self.url} sent a chunk that is not a chat completion chunk: {exc}")

    def feed(self, chunk: Any) -> list[ModelChunk]:
        self.received += 1
        out: list[ModelChunk] = []
        usage = getattr(chunk, "usage", None)
        if usage is not None:
            counts = {
                key: value
                for key in ("prompt_tokens", "completion_tokens")
                if isinstance(value := getattr(usage, key, None), int) and value >= 0
            }
            self.usage = counts or None
        for choice in chunk.choices or ():
            if choice.index != 0:  # n > 1 is never asked for
                continue
            delta = choice.delta
            content = getattr(delta, "content", None)
            if content is not None and not isinstance(content, str):
                raise ModelError(f"{self.url} sent content that is not text: {content!r}"[:300])
            if content:
                self.text.append(content)
                out.append(TextDelta(content))
            for call in getattr(delta, "tool_calls", None) or ():
                out.append(self._call_delta(call))
            if choice.finish_reason:
                self.finished = True
        return out

    def _call_delta(self, call: Any) -> ToolCallDelta:
        index = int(call.index)
        function = call.function
        name = getattr(function, "name", None) if function is not None else None
        fragment = getattr(function, "arguments", None) if function is not None else None
        if fragment is not None and not isinstance(fragment, str):
            fragment = json.dumps(fragment, ensure_ascii=False)  # the journal keeps JSON text
        fragment = fragment or ""
        entry = self.calls.get(index)
        if entry is None:
            self.calls[index] = [call.id, name, [fragment]]
            return ToolCallDelta(index, call.id, name, fragment)
        entry[0] = entry[0] or call.id
        entry[1] = entry[1] or name
        entry[2].append(fragment)
        return ToolCallDelta(index, None, None, fragment)

    def reply(self) -> ModelReply:
        if not self.finished:
            raise ModelError(
                f"{self.url} ended the stream before finishing the reply"
                f" ({self.received} chunks, no finish_reason)"
            )
        calls = []
        for index in sorted(self.calls):
            call_id, name, fragments = self.calls[index]
            if not name:
                raise ModelError(f"{self.url} streamed tool call {index} without a name")
            arguments = "".join(fragments) or "{}"
            calls.append(RequestedCall(str(call_id or f"call_{index}"), str(name), arguments))
        content = "".join(self.text) if self.text else None
        return ModelReply(content, tuple(calls), self.usage)
