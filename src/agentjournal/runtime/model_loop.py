"""Where a synchronous turn meets an async streaming model: one event loop, on a thread of its
own, runs every model call of the process; the turn's thread waits for each reply there.

Why one loop: a turn is synchronous (the `Journal` is), but streaming clients (`openai`,
`anthropic`, httpx) are async and their connection pools belong to the loop that opened them.
Running every call on one long-lived loop keeps a client's connections valid across turns and
threads, costs one thread for the whole process, and lets a cancel stop a call from any thread
(`TurnControl.cancel`). Deltas are handed out from that loop as they arrive.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import CancelledError as FutureCancelled
from typing import Any

from agentjournal.errors import ModelError
from agentjournal.runtime.shapes import ModelReply, Tool
from agentjournal.runtime.streaming import Completed, TextDelta, ToolCallDelta

__all__ = ["TurnCancelled", "TurnControl", "close_model", "model_loop", "stream_reply"]

Delta = TextDelta | ToolCallDelta
DeltaHook = Callable[[Delta], None]

_loop: asyncio.AbstractEventLoop | None = None
_loop_lock = threading.Lock()


def model_loop() -> asyncio.AbstractEventLoop:
    """The process' model loop, started on first use (a daemon thread)."""
    global _loop
    with _loop_lock:
        if _loop is None or _loop.is_closed():
            loop = asyncio.new_event_loop()
            thread = threading.Thread(
                target=loop.run_forever, name="agentjournal-models", daemon=True
            )
            thread.start()
            _loop = loop
        return _loop


def close_model(model: Any) -> None:
    """Close the connections `model` holds: those its streaming calls opened on the model loop
    (`aclose()`, run there), else its own (`close()`)."""
    with _loop_lock:
        loop = _loop if _loop is not None and not _loop.is_closed() else None
    close = getattr(model, "aclose", None)
    if close is not None and loop is not None:
        asyncio.run_coroutine_threadsafe(close(), loop).result()
    elif callable(getattr(model, "close", None)):
        model.close()


class TurnCancelled(Exception):
    """The turn was cancelled; `seen` is the text the stream had handed out by then."""

    def __init__(self, seen: str) -> None:
        super().__init__("the turn was cancelled")
        self.seen = seen


class TurnControl:
    """Cancels a running turn from any thread: the model call in flight stops (its stream is
    closed), a tool already running finishes, and the turn ends with the text handed out so far
    journaled as an `assistant_message` marked `"interrupted": true`."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._cancelled = False
        self._abandoned = False
        self._task: asyncio.Task[Any] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    @property
    def cancelled(self) -> bool:
        return self._cancelled

    @property
    def abandoned(self) -> bool:
        return self._abandoned

    def cancel(self) -> None:
        with self._lock:
            self._cancelled = True
            task, loop = self._task, self._loop
        if task is not None and loop is not None:
            loop.call_soon_threadsafe(task.cancel)

    def abandon(self) -> None:
        """Stop the turn without ending it (a server shutting down): the model call in flight
        stops as on `cancel`, but nothing more is journaled and the turn stays open, as after a
        crash, for `finish_turn` to finish; the turn raises `TurnAbandoned`."""
        with self._lock:
            self._abandoned = True
        self.cancel()

    def _attach(self, task: asyncio.Task[Any], loop: asyncio.AbstractEventLoop) -> bool:
        """Called on the model loop when a call starts; False if the turn is already cancelled."""
        with self._lock:
            if self._cancelled:
                return False
            self._task, self._loop = task, loop
            return True

    def _detach(self) -> None:
        with self._lock:
            self._task = self._loop = None


def stream_reply(
    model: Any,
    messages: list[dict[str, Any]],
    tools: Sequence[Tool],
    on_delta: DeltaHook | None,
    control: TurnControl | None,
) -> ModelReply:
    """Run `model.stream(...)` on the model loop, handing each delta to `on_delta` (on that
    loop, as it arrives), and return the reply of its `Completed`. `TurnCancelled` if `control`
    cancels the turn; `ModelError` if the model fails or its stream ends without a reply."""
    loop = model_loop()
    seen: list[str] = []

    async def pump() -> ModelReply:
        task = asyncio.current_task()
        assert task is not None
        if control is not None and not control._attach(task, loop):
            raise asyncio.CancelledError
        stream = model.stream(messages, tools)
        try:
            async for chunk in stream:
                if isinstance(chunk, Completed):
                    return chunk.reply
                if isinstance(chunk, TextDelta):
                    seen.append(chunk.text)
                if on_delta is not None and isinstance(chunk, (TextDelta, ToolCallDelta)):
                    on_delta(chunk)
            raise ModelError("the model's stream ended without its reply")
        finally:
            if control is not None:
                control._detach()
            close = getattr(stream, "aclose", None)
            if close is not None:  # stops the model call if it is still running
                await close()

    # The future completes only once `pump` has ended (a cancel goes to its task, not to this
    # future), so `seen` is final when it is read below.
    future = asyncio.run_coroutine_threadsafe(pump(), loop)
    try:
        reply = future.result()
    except (FutureCancelled, asyncio.CancelledError):
        raise TurnCancelled("".join(seen)) from None
    except ModelError:
        raise
    except Exception as exc:  # a model adapter's own failure: the turn stays resumable
        raise ModelError(f"the model failed: {type(exc).__name__}: {exc}") from exc
    if not isinstance(reply, ModelReply):
        raise ModelError(f"the model's stream completed with {type(reply).__name__}")
    return reply
