"""The values the agent loop, its models and its streams exchange: tools and their invocations,
the model's reply, and a finished turn. Kept apart from the loop (runtime/agent.py) so that the
streaming parts can use them without depending on the loop."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from agentjournal.events import Event

__all__ = ["Invocation", "ModelReply", "RequestedCall", "Tool", "ToolFailed", "TurnResult"]


@dataclass(frozen=True, slots=True)
class Invocation:
    """One run of a tool. `key` is stable across retries of the same call: hand it to the API the
    tool calls (as its idempotency key) and the tool may safely be declared idempotent. A session
    is (tenant, id), so outside the default tenant the key names the tenant too
    (`<tenant>/<session id>:<call id>`; `/` is in no id): two tenants' sessions of one id never
    share a key."""

    session_id: str
    call_id: str
    tenant: str = "default"

    @property
    def key(self) -> str:
        call = f"{self.session_id}:{self.call_id}"
        return call if self.tenant == "default" else f"{self.tenant}/{call}"


@dataclass(frozen=True, slots=True)
class Tool:
    """A function the model may call. `function(arguments, invocation)` returns the result text
    (anything else is sent as JSON); an exception becomes an error result. `call_fields` are
    journaled in each of its `tool_call` events beside the call's id, name and arguments (an MCP
    server's tool names its server and its own name there)."""

    name: str
    function: Callable[[dict[str, Any], Invocation], Any]
    idempotent: bool
    description: str = ""
    parameters: Mapping[str, Any] = field(
        default_factory=lambda: {"type": "object", "properties": {}}
    )
    call_fields: Mapping[str, str] = field(default_factory=dict)

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


class ToolFailed(Exception):
    """Raised by a tool whose failure the model should read as it is: the error result is
    `error: <message>` (any other exception's also names its type)."""


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


@dataclass
class TurnResult:
    """A finished turn: the reply the user sees and every event the turn wrote (by this call)."""

    session_id: str
    reply: str
    events: list[Event] = field(default_factory=list)
    created: bool = True  # False: an idempotent repeat of a finished turn, nothing ran
