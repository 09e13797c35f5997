"""Reading a streaming model's answer to its end in a test, on a fresh event loop."""

from __future__ import annotations

import asyncio
from typing import Any

from agentjournal import ModelError
from agentjournal.runtime import Tool
from agentjournal.runtime.sdk_clients import ClientModel
from agentjournal.runtime.streaming import ModelChunk

# Model timeouts for the tests of faults. Only a stall needs a short one, and it must still
# outlast a fake server's first bytes on a busy machine: with 0.5 s for every case, a mid-stream
# error was once reported as a timeout before answering (a CI run under load).
STALL_TIMEOUT = 2.0
NO_TIMEOUT = 30.0


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
