"""Models the agent loop can call: a scripted one (offline, deterministic) here, and
`OpenAIChatModel` (any server that speaks OpenAI's chat completions, in `openai_model`)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from agentjournal.runtime.agent import ERROR_PREFIX, ModelReply, RequestedCall, Tool
from agentjournal.runtime.openai_model import OpenAIChatModel

__all__ = ["OpenAIChatModel", "Script", "ScriptedModel"]


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

    def __init__(self, scripts: Mapping[str, Script], fallback: str) -> None:
        self.scripts = dict(scripts)
        self.fallback = Script(fallback)

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
