"""Reading a streaming model's answer to its end in a test, on a fresh event loop."""

from __future__ import annotations

import asyncio
from typing import Any

from agentjournal import ModelError
from agentjournal.runtime import Tool
from agentjournal.runtime.sdk_clients import ClientModel
from agentjournal.runtime.streaming import ModelChunk


def collect(
    model: ClientModel, messages: list[dict[str, Any]], tools: list[Tool] | None = None
) -> tuple[list[ModelChunk], ModelError | None]:
    """Every chunk `stream()` yielded, and the ModelError that ended it (None: it finished)."""

    async def run() -> tuple[list[ModelChunk], ModelError | None]:
        got: list[ModelChunk] = []
        try:
            async for chunk in model.stream(messages, tools or []):
                got.append(chunk)
        except ModelError as exc:
            return got, exc
        finally:
            await model.aclose()
        return got, None

    return asyncio.run(run())
