"""`Agent.stream_turn` / `Agent.astream_turn`: a turn as an iterator of the model's deltas and the
journaled events, in the order they happened.

The turn runs on a thread of its own (the journal is synchronous) and its model calls on the
model loop (runtime/model_loop.py); both hand what they produce to one queue the iterator reads.
The iterator does not own the turn: leaving it early does not stop the turn (it runs to its end
and is journaled, as a dropped HTTP client's turn does); `cancel()` does.
"""

from __future__ import annotations

import asyncio
import queue
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from typing import Any, Protocol

from agentjournal.errors import InvalidArgument
from agentjournal.events import Event
from agentjournal.journal import Journal
from agentjournal.runtime.model_loop import TurnControl
from agentjournal.runtime.shapes import TurnResult
from agentjournal.runtime.streaming import TextDelta, ToolCallDelta

__all__ = ["AsyncTurnStream", "TurnItem", "TurnStream"]

TurnItem = TextDelta | ToolCallDelta | Event


@dataclass(frozen=True, slots=True)
class _End:
    result: TurnResult | None
    error: BaseException | None


class _RunsTurns(Protocol):  # `Agent` (which imports this module)
    def run_turn(
        self,
        journal: Journal,
        session_id: str,
        text: str,
        *,
        idempotency_key: str | None = None,
        on_event: Callable[[Event], None] | None = None,
        on_delta: Callable[[Any], None] | None = None,
        control: TurnControl | None = None,
    ) -> TurnResult: ...


class _Turn:
    """One streamed turn on its own thread, handing every item to `deliver`."""

    def __init__(
        self,
        agent: _RunsTurns,
        journal: Journal,
        session_id: str,
        text: str,
        idempotency_key: str | None,
    ) -> None:
        if not isinstance(text, str):
            raise InvalidArgument("a turn's text must be a string")
        self.agent, self.journal, self.session_id = agent, journal, session_id
        self.text, self.idempotency_key = text, idempotency_key
        self.control = TurnControl()
        self.result: TurnResult | None = None

    def start(self, deliver: Callable[[Any], None]) -> None:
        # Not a daemon: a process that leaves while a turn streams still journals its end.
        thread = threading.Thread(
            target=self._run, args=(deliver,), name="agentjournal-stream-turn"
        )
        thread.start()

    def _run(self, deliver: Callable[[Any], None]) -> None:
        try:
            result = self.agent.run_turn(
                self.journal,
                self.session_id,
                self.text,
                idempotency_key=self.idempotency_key,
                on_event=deliver,
                on_delta=deliver,
                control=self.control,
            )
        except BaseException as exc:  # handed to the reader, raised there
            deliver(_End(None, exc))
            return
        if not result.created:  # an idempotent repeat: the original turn's events
            for event in result.events:
                deliver(event)
        deliver(_End(result, None))


class TurnStream:
    """A sync iterator of `TextDelta`, `ToolCallDelta` and `Event` items; it ends with the turn
    (raising the turn's error, if it failed). `result` is the `TurnResult` once it ended."""

    def __init__(self, turn: _Turn) -> None:
        self._turn = turn
        self._items: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._ended = False
        turn.start(self._items.put)

    @property
    def result(self) -> TurnResult | None:
        return self._turn.result

    def cancel(self) -> None:
        """Stop the model call; the turn ends with the text yielded so far journaled as an
        interrupted `assistant_message` (which this iterator still yields)."""
        self._turn.control.cancel()

    def __iter__(self) -> Iterator[TurnItem]:
        return self

    def __next__(self) -> TurnItem:
        if self._ended:
            raise StopIteration
        item = self._items.get()
        if isinstance(item, _End):
            self._ended = True
            self._turn.result = item.result
            if item.error is not None:
                raise item.error
            raise StopIteration
        return item  # type: ignore[no-any-return]


class AsyncTurnStream:
    """`TurnStream` as an async iterator; the turn starts at the first `__anext__`."""

    def __init__(self, turn: _Turn) -> None:
        self._turn = turn
        self._items: asyncio.Queue[Any] | None = None
        self._ended = False

    @property
    def result(self) -> TurnResult | None:
        return self._turn.result

    def cancel(self) -> None:
        """As `TurnStream.cancel`."""
        self._turn.control.cancel()

    def __aiter__(self) -> AsyncIterator[TurnItem]:
        return self

    async def __anext__(self) -> TurnItem:
        if self._ended:
            raise StopAsyncIteration
        if self._items is None:
            loop = asyncio.get_running_loop()
            items: asyncio.Queue[Any] = asyncio.Queue()
            self._items = items

            def deliver(item: Any) -> None:  # on the turn's thread, or the model loop's
                loop.call_soon_threadsafe(items.put_nowait, item)

            self._turn.start(deliver)
        item = await self._items.get()
        if isinstance(item, _End):
            self._ended = True
            self._turn.result = item.result
            if item.error is not None:
                raise item.error
            raise StopAsyncIteration
        return item  # type: ignore[no-any-return]
