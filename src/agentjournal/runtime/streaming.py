"""What a streaming model yields while it answers.

A model that streams is an async iterator of chunks: any number of `TextDelta`s and
`ToolCallDelta`s in the order the model produced them, then exactly one `Completed` holding the
whole reply (the same `ModelReply` a non-streaming call returns, with usage). A model that fails,
before or in the middle of its answer, raises `ModelError` from the iterator; nothing it yielded
so far is a reply. Closing the iterator early (`aclose()`, or cancelling the task that drives it)
stops the model call.

Deltas are for people watching; the journal records only what `Completed` holds.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from agentjournal.runtime.shapes import ModelReply, Tool

__all__ = ["Completed", "ModelChunk", "StreamingModel", "TextDelta", "ToolCallDelta"]


@dataclass(frozen=True, slots=True)
class TextDelta:
    """The next piece of the reply's text."""

    text: str


@dataclass(frozen=True, slots=True)
class ToolCallDelta:
    """The next piece of one tool call the reply makes. `index` tells the reply's calls apart
    (0, 1, ... in the order the model started them); `call_id` and `name` arrive with a call's
    first delta and are None after it; `arguments` is the next fragment of its JSON text."""

    index: int
    call_id: str | None
    name: str | None
    arguments: str


@dataclass(frozen=True, slots=True)
class Completed:
    """The whole reply, once the model has finished it."""

    reply: ModelReply


ModelChunk = TextDelta | ToolCallDelta | Completed


@runtime_checkable
class StreamingModel(Protocol):
    def stream(
        self, messages: list[dict[str, Any]], tools: Sequence[Tool]
    ) -> AsyncIterator[ModelChunk]:
        """Answer an OpenAI-shape message list chunk by chunk, ending with one `Completed`;
        raise `ModelError` when it cannot."""
