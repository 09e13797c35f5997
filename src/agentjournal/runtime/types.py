"""The runtime's vocabulary: tools and their invocations, what a model answers, and a finished
turn. The agent loop, the models and the streaming machinery all speak it; it imports nothing of
the runtime, so none of them has to import another to name these."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from agentjournal.events import Event

__all__ = [
    "ERROR_PREFIX",
    "DeltaHook",
    "EventHook",
    "Invocation",
    "Model",
    "ModelReply",
    "RequestedCall",
    "Tool",
    "TurnResult",
]

# Tool results that are errors start with this: the OpenAI message shape has no is_error flag,
# so the text must say it (the journal's `is_error` says it too).
ERROR_PREFIX = "error: "
EventHook = Callable[[Event], None]
# Called with each TextDelta / ToolCallDelta a streaming model produces (on the model loop's
# thread, as it arrives): asking for them is what makes a turn stream.
DeltaHook = Callable[[Any], None]


@dataclass(frozen=True, slots=True)
class Invocation:
    """One run of a tool. `key` is stable across retries of the same call: hand it to the API the
    tool calls (as its idempotency key) and the tool may safely be declared idempotent."""

    session_id: str
    call_id: str

    @property
    def key(self) -> str:
        return f"{self.session_id}:{self.call_id}"


@dataclass(frozen=True, slots=True)
class Tool:
    """A function the model may call. `function(arguments, invocation)` returns the result text
    (anything else is sent as JSON); an exception becomes an error result."""

    name: str
    function: Callable[[dict[str, Any], Invocation], Any]
    idempotent: bool
    description: str = ""
    parameters: Mapping[str, Any] = field(
        default_factory=lambda: {"type": "object", "properties": {}}
    )

    def schema(self) -> dict[str, Any]:
        """The tool as the OpenAI chat-completions `tools` list declares it."""
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": dict(self.parameters),
            },
        }


@dataclass(frozen=True, slots=True)
class RequestedCall:
    call_id: str
    name: str
    arguments: str  # JSON text, as the model produced it


@dataclass(frozen=True, slots=True)
class ModelReply:
    """What the model answered: text, tool calls to run, or both; and the tokens it counted."""

    content: str | None = None
    tool_calls: tuple[RequestedCall, ...] = ()
    usage: Mapping[str, int] | None = None


class Model(Protocol):
    def complete(self, messages: list[dict[str, Any]], tools: Sequence[Tool]) -> ModelReply:
        """Answer an OpenAI-shape message list; raise `ModelError` when it cannot."""


@dataclass
class TurnResult:
    """A finished turn: the reply the user sees and every event the turn wrote (by this call)."""

    session_id: str
    reply: str
    events: list[Event] = field(default_factory=list)
    created: bool = True  # False: an idempotent repeat of a finished turn, nothing ran
