"""What the OpenAI and Anthropic models share about their official clients: both are generated
from the same template, so their errors have the same names and meanings, their streams are read
the same way, and an async client belongs to the event loop that opened its connections."""

from __future__ import annotations

import asyncio
import os
import weakref
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any, ClassVar, Generic, Protocol, TypeVar

from agentjournal.errors import InvalidArgument, ModelError
from agentjournal.runtime.shapes import ModelReply, Tool
from agentjournal.runtime.streaming import Completed, ModelChunk

__all__ = ["Assembler", "ClientModel", "PerLoop", "import_sdk", "model_error", "settings"]

Client = TypeVar("Client")


def import_sdk(name: str, model: str) -> Any:
    """The client package `name`, or InvalidArgument naming the extra that brings it."""
    try:
        return __import__(name)
    except ImportError as exc:
        raise InvalidArgument(
            f"{model} needs the {name} client: pip install 'agentjournal[{name}]' ({exc})"
        ) from exc


def settings(
    model: str | None,
    model_env: str,
    base_url: str | None,
    url_env: str,
    default_url: str,
    *,
    timeout: float,
    retries: int,
) -> tuple[str, str]:
    """The model name (the argument, else `AGENTJOURNAL_MODEL`, else `model_env`) and the base
    URL without a trailing slash (the argument, else `url_env`, else `default_url`), once
    `timeout` and `retries` are checked: InvalidArgument for anything missing or out of range."""
    env = os.environ
    name = model or env.get("AGENTJOURNAL_MODEL") or env.get(model_env) or ""
    if not name:
        raise InvalidArgument(
            f"no model name: pass model=... or set AGENTJOURNAL_MODEL (or {model_env})"
        )
    if timeout <= 0:
        raise InvalidArgument(f"timeout must be positive, not {timeout!r}")
    if retries < 0:
        raise InvalidArgument(f"retries must be 0 or more, not {retries!r}")
    return name, (base_url or env.get(url_env) or default_url).rstrip("/")


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


class Assembler(Protocol):
    """Reads one answer's stream: each item in, the deltas it carries out; the reply at the end."""

    received: int  # items read so far (0: the answer had not started)

    def feed(self, item: Any) -> list[ModelChunk]: ...

    def reply(self) -> ModelReply:
        """The whole reply; ModelError if the stream ended before the answer did."""
        ...

    def not_understood(self, exc: Exception) -> ModelError:
        """The error for an item this assembler could not read."""
        ...


class ClientModel:
    """A model on an official client, streamed both ways: `stream()` (async, for streamed turns)
    yields the deltas as they arrive and `complete()` (sync, for `Agent.run_turn`) reads the same
    stream to its end, through one assembler, so a turn answers the same whichever way it asks.
    A subclass names its clients, builds the request (`_request`), opens the stream (`_open`)
    and reads it (`_assembler`); `_connect` sets up the clients once its settings are checked."""

    SYNC_CLIENT: ClassVar[str]  # the package's client class names
    ASYNC_CLIENT: ClassVar[str]
    timeout: float

    @property
    def url(self) -> str:
        """Where the requests go (errors name it)."""
        raise NotImplementedError

    def _connect(self, sdk: Any, options: dict[str, Any]) -> None:
        self._sdk = sdk
        self._client_options = options
        self._sync: Any = None
        self._async: PerLoop[Any] = PerLoop(lambda: getattr(sdk, self.ASYNC_CLIENT)(**options))

    def _request(self, messages: list[dict[str, Any]], tools: Sequence[Tool]) -> dict[str, Any]:
        raise NotImplementedError

    def _open(self, client: Any, request: dict[str, Any]) -> Any:
        """The client's streamed answer to `request` (awaitable on an async client)."""
        raise NotImplementedError

    def _assembler(self) -> Assembler:
        raise NotImplementedError

    def close(self) -> None:
        """Close the sync client's connections (async ones: `aclose()` on their loop)."""
        if self._sync is not None:
            self._sync.close()
            self._sync = None

    async def aclose(self) -> None:
        """Close the connections this event loop's client holds, and the sync client's."""
        client = self._async.pop()
        if client is not None:
            await client.close()
        self.close()

    def complete(self, messages: list[dict[str, Any]], tools: Sequence[Tool]) -> ModelReply:
        if self._sync is None:
            self._sync = getattr(self._sdk, self.SYNC_CLIENT)(**self._client_options)
        assembler = self._assembler()
        try:
            with self._open(self._sync, self._request(messages, tools)) as items:
                for item in items:
                    assembler.feed(item)
        except self._sdk.APIError as exc:
            raise self._model_error(exc, assembler) from exc
        except (ValueError, TypeError, AttributeError) as exc:
            raise assembler.not_understood(exc) from exc
        return assembler.reply()

    async def stream(
        self, messages: list[dict[str, Any]], tools: Sequence[Tool]
    ) -> AsyncIterator[ModelChunk]:
        client = self._async.get()
        assembler = self._assembler()
        try:
            items = await self._open(client, self._request(messages, tools))
        except self._sdk.APIError as exc:
            raise self._model_error(exc, assembler) from exc
        try:
            async for item in items:
                for piece in assembler.feed(item):
                    yield piece
        except self._sdk.APIError as exc:
            raise self._model_error(exc, assembler) from exc
        except (ValueError, TypeError, AttributeError) as exc:
            raise assembler.not_understood(exc) from exc
        finally:
            # Also on aclose() or cancellation: closing the response hangs up on the server,
            # which stops generating.
            await items.close()
        yield Completed(assembler.reply())

    def _model_error(self, exc: Exception, assembler: Assembler) -> ModelError:
        return model_error(self._sdk, exc, self.url, assembler.received, self.timeout)
