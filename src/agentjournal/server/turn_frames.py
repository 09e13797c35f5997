"""The frames of each streamed turn, kept so that a client can reconnect and get exactly the rest.

A turn's frames (its deltas, its journaled events, an `error` if it failed) are numbered 1, 2, ...
within one *run*: an attempt at the turn by this process. A frame's SSE id is
`{turn}:{run}:{n}`, where `turn` is the seq of the turn's `user_message`. A reconnect naming the
current run gets the frames after `n`; one naming another run (the server restarted, or resume
ran the turn again after its model failed) gets a `reset` frame and the current run from its
start.

Writers are the turn's thread and the model loop; readers are request tasks on the server's
loop, woken through `call_soon_threadsafe`. A turn's frames stay for `keep_seconds` after it
ended, and at most `keep_ended` ended turns are kept; a running turn is never dropped.
"""

from __future__ import annotations

import asyncio
import json
import secrets
import threading
import time
from collections import OrderedDict
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from agentjournal.events import Event
from agentjournal.runtime import TextDelta, ToolCallDelta, TurnControl
from agentjournal.server.fanout import render

__all__ = ["FrameId", "TurnFrame", "TurnFrames", "TurnLog"]

TurnKey = tuple[str, str, int]  # tenant, session id, turn (seq of its user_message)


@dataclass(frozen=True, slots=True)
class TurnFrame:
    id: str
    event: str
    data: str


@dataclass(frozen=True, slots=True)
class FrameId:
    turn: int
    run: str
    n: int

    @classmethod
    def parse(cls, text: str) -> FrameId | None:
        """The id `{turn}:{run}:{n}`, or None if `text` is not one."""
        parts = text.strip().split(":")
        if len(parts) != 3 or not parts[1]:
            return None
        turn, run, n = parts
        if not (turn.isdigit() and n.isdigit()) or len(turn) > 19 or len(n) > 19:
            return None
        return cls(int(turn), run, int(n))


@dataclass
class _Waiter:
    loop: asyncio.AbstractEventLoop
    event: asyncio.Event

    def wake(self) -> None:
        self.loop.call_soon_threadsafe(self.event.set)


@dataclass
class TurnLog:
    """One turn's frames in its current run."""

    key: TurnKey
    run: str
    control: TurnControl | None = None
    frames: list[TurnFrame] = field(default_factory=list)
    ended: bool = False
    ended_at: float | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _waiters: list[_Waiter] = field(default_factory=list)

    @property
    def turn(self) -> int:
        return self.key[2]

    # -- writing (any thread) -------------------------------------------------------------

    def event(self, event: Event) -> None:
        self._add(event.type, render(event, event.seq).data)

    def delta(self, delta: TextDelta | ToolCallDelta) -> None:
        if isinstance(delta, TextDelta):
            self._add("text_delta", _json({"turn": self.turn, "text": delta.text}))
            return
        body = {
            "turn": self.turn,
            "index": delta.index,
            "call_id": delta.call_id,
            "name": delta.name,
            "arguments": delta.arguments,
        }
        self._add("tool_call_delta", _json(body))

    def error(self, problem: dict[str, Any]) -> None:
        self._add("error", _json(problem))

    def end(self) -> None:
        with self._lock:
            self.ended, self.ended_at = True, time.monotonic()
            waiters, self._waiters = self._waiters, []
        for waiter in waiters:
            waiter.wake()

    def restart(self, run: str, control: TurnControl | None) -> None:
        """A new attempt at the turn: its frames start over (readers get a `reset`)."""
        with self._lock:
            self.run, self.control, self.frames = run, control, []
            self.ended, self.ended_at = False, None
            waiters, self._waiters = self._waiters, []
        for waiter in waiters:
            waiter.wake()

    def _add(self, name: str, data: str) -> None:
        with self._lock:
            if self.ended:  # nothing is added to an ended run (a late delta after a cancel)
                return
            n = len(self.frames) + 1
            self.frames.append(TurnFrame(f"{self.turn}:{self.run}:{n}", name, data))
            waiters, self._waiters = self._waiters, []
        for waiter in waiters:
            waiter.wake()

    # -- reading (on a loop) --------------------------------------------------------------

    async def wait_ended(self) -> None:
        while True:
            waiter = _Waiter(asyncio.get_running_loop(), asyncio.Event())
            with self._lock:
                if self.ended:
                    return
                self._waiters.append(waiter)
            await waiter.event.wait()

    async def follow(self, after: FrameId | None, live: bool = True) -> AsyncIterator[TurnFrame]:
        """The frames after `after` (all of them when None; a `reset` first when it names
        another run), then, with `live`, each new one until the run ends."""
        run = self.run
        sent = 0
        if after is not None:
            if after.run == run:
                sent = after.n
            else:
                yield self._reset(run)
        while True:
            waiter = _Waiter(asyncio.get_running_loop(), asyncio.Event())
            with self._lock:
                if self.run != run:  # a new attempt began: start it over
                    run, sent, fresh, restarted = self.run, 0, [], True
                else:
                    fresh, restarted = self.frames[sent:], False
                    sent += len(fresh)
                ended = self.ended and not restarted
                if not ended and not fresh and not restarted and live:
                    self._waiters.append(waiter)
            if restarted:
                yield self._reset(run)
                continue
            for frame in fresh:
                yield frame
            if ended or (not live and not fresh):
                return
            if fresh:
                continue
            await waiter.event.wait()

    def _reset(self, run: str) -> TurnFrame:
        body = {"turn": self.turn, "run": run, "detail": "discard the draft: the turn restarts"}
        return TurnFrame(f"{self.turn}:{run}:0", "reset", _json(body))


class TurnFrames:
    """Every streamed turn this process holds, by (tenant, session id, turn)."""

    def __init__(self, keep_seconds: float = 300.0, keep_ended: int = 256) -> None:
        self.keep_seconds = keep_seconds
        self.keep_ended = keep_ended
        self.process = secrets.token_hex(4)  # tells this process' runs from an earlier one's
        self._runs = 0
        self._logs: OrderedDict[TurnKey, TurnLog] = OrderedDict()
        self._lock = threading.Lock()

    def begin(self, key: TurnKey, control: TurnControl | None) -> TurnLog:
        """A new run of the turn `key` (its earlier run's frames, if held, are replaced)."""
        with self._lock:
            self._prune()
            self._runs += 1
            run = f"{self.process}-{self._runs}"
            log = self._logs.get(key)
            if log is None:
                log = self._logs[key] = TurnLog(key, run, control)
                return log
            self._logs.move_to_end(key)
        log.restart(run, control)
        return log

    def get(self, key: TurnKey) -> TurnLog | None:
        with self._lock:
            self._prune()
            return self._logs.get(key)

    def running(self) -> list[TurnLog]:
        with self._lock:
            return [log for log in self._logs.values() if not log.ended]

    def _prune(self) -> None:
        now = time.monotonic()
        ended = [k for k, log in self._logs.items() if log.ended and log.ended_at is not None]
        expired = {k for k in ended if now - (self._logs[k].ended_at or now) > self.keep_seconds}
        by_end = sorted(ended, key=lambda k: self._logs[k].ended_at or 0.0)
        expired |= set(by_end[: max(0, len(by_end) - self.keep_ended)])
        for key in expired:
            del self._logs[key]


def _json(body: dict[str, Any]) -> str:
    return json.dumps(body, ensure_ascii=False, separators=(",", ":"))
