"""What the OpenAI and Anthropic models share about their official clients: both are generated
from the same template, so their errors have the same names and meanings, and an async client
belongs to the event loop that opened its connections."""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Callable
from typing import Any, Generic, TypeVar

from agentjournal.errors import InvalidArgument, ModelError

__all__ = ["PerLoop", "import_sdk", "model_error"]

Client = TypeVar("Client")


def import_sdk(name: str, model: str) -> Any:
    """The client package `name`, or InvalidArgument naming the extra that brings it."""
    try:
        return __import__(name)
    except ImportError as exc:
        raise InvalidArgument(
            f"{model} needs the {name} client: pip install 'agentjournal[{name}]' ({exc})"
        ) from exc


class PerLoop(Generic[Client]):
    """One async client per running event loop, made on first use there."""

    def __init__(self, make: Callable[[], Client]) -> None:
        self._make = make
        self._clients: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Client] = (
            weakref.WeakKeyDictionary()
        )

    def get(self) -> Client:
        loop = asyncio.get_running_loop()
        client = self._clients.get(loop)
        if client is None:
            client = self._clients[loop] = self._make()
        return client

    def pop(self) -> Client | None:
        return self._clients.pop(asyncio.get_running_loop(), None)


def model_error(sdk: Any, exc: Exception, url: str, chunks: int, timeout: float) -> ModelError:
    """The client's exception `exc` as a ModelError saying what happened; `chunks` is how many
    chunks of the answer had arrived (0: it had not started)."""
    if isinstance(exc, sdk.APITimeoutError):
        when = "mid-stream" if chunks else "before answering"
        return ModelError(f"{url} timed out {when} (timeout {timeout}s)")
    if isinstance(exc, sdk.APIConnectionError):
        cause = exc.__cause__ or exc
        if chunks:
            return ModelError(
                f"{url} broke off the stream after {chunks} chunks: {type(cause).__name__}: {cause}"
            )
        return ModelError(f"cannot reach {url}: {type(cause).__name__}: {cause}")
    if isinstance(exc, sdk.APIStatusError) and not chunks:
        return ModelError(f"{url} answered {exc.status_code}: {exc.message}"[:500])
    message = getattr(exc, "message", None) or str(exc)
    return ModelError(f"{url} reported an error mid-stream: {message}"[:500])
