"""What a process knows of a session from its own last write: pure, no I/O.

An SDK session is written by one process far more often than by several. Each `add_items` needs
the session's last seq, its newest items (to recognise a retried batch) and the state of the
calls it names (the journal's tool-call rules), and reading them costs more than the write. So a
writer keeps them from its own last write and appends with `expected_seq` set to the last seq it
knows. The journal checks every assumption in the append's transaction: `expected_seq` that no
one else wrote since, the tool-call rules that a call id is unused and a result's call still
open. If any of them fails, nothing is written, the writer forgets what it knew (`forget`) and
reads the session again.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from agentjournal.events import Event, NewEvent
from agentjournal.integrations.responses import call_ids, item_events

__all__ = ["KnownState"]

TAIL = 64  # newest items kept to recognise a retried batch
CALLS = 4096  # call states kept; an older call is read from the journal when a batch names it


class KnownState:
    """The session as this process left it: `last_seq` (None: not known, read the session),
    the newest visible items as (seq, item) pairs, whether those are all of them, and the state
    of the calls it wrote or read (call id → still waiting for its result)."""

    __slots__ = ("calls", "complete", "last_seq", "tail")

    def __init__(self) -> None:
        self.last_seq: int | None = None
        self.tail: list[tuple[int, Any]] = []
        self.complete = False
        self.calls: dict[str, bool] = {}

    def forget(self) -> None:
        """Someone else may have written: the next write reads the session first. Call states
        are kept: they only ever move from waiting to done, and the journal checks them."""
        self.last_seq, self.tail, self.complete = None, [], False

    def is_retry(self, items: Sequence[Any]) -> bool | None:
        """Whether `items` repeat the newest visible items and hold an item with an id (what a
        retry after a timeout sends); None if what is known cannot tell."""
        if not any(_has_id(item) for item in items):
            return False
        newest = [item for _, item in self.tail]
        if len(newest) >= len(items):
            return newest[len(newest) - len(items) :] == list(items)
        if self.complete:
            return False  # fewer visible items than the batch
        if newest and list(items[len(items) - len(newest) :]) != newest:
            return False
        return None

    def events_for(self, items: Sequence[Any]) -> list[NewEvent] | None:
        """The batch's events as the known call states make them; None if an output names a
        call whose state is not known (a new call id is taken as unused: the journal checks)."""
        called: set[str] = set()
        for item in items:
            if not isinstance(item, Mapping):
                break  # item_events says which item is bad
            kind, call_id = item.get("type"), item.get("call_id")
            if kind == "function_call" and isinstance(call_id, str):
                called.add(call_id)
            elif (
                kind == "function_call_output"
                and isinstance(call_id, str)
                and call_id not in called
                and call_id not in self.calls
            ):
                return None
        used = {call_id for call_id in call_ids(items) if call_id in self.calls}
        return item_events(
            items, used_calls=used, open_calls={call_id for call_id in used if self.calls[call_id]}
        )

    def read(self, last_seq: int, newest: Sequence[tuple[int, Any]], complete: bool) -> None:
        """What a read of the session found: its last seq and newest visible items (`complete`:
        all of them)."""
        self.last_seq, self.tail, self.complete = last_seq, list(newest), complete

    def read_calls(self, states: Mapping[str, bool]) -> None:
        self._remember(states.items())

    def wrote(self, appended: Sequence[Event], items: Iterable[tuple[int, Any]]) -> None:
        """After appending `appended` (the items among them as (seq, item) pairs) on top of
        `last_seq`, nothing written by anyone else in between."""
        self.last_seq = appended[-1].seq
        self.tail.extend(items)
        if len(self.tail) > TAIL:
            del self.tail[: len(self.tail) - TAIL]
            self.complete = False
        self._remember(
            (event.payload["call_id"], event.type == "tool_call")
            for event in appended
            if event.type in ("tool_call", "tool_result")
        )

    def removed(self, seq: int, last_seq: int) -> None:
        """After appending, at `last_seq`, the removal of the item at `seq`."""
        self.last_seq = last_seq
        self.tail = [(s, item) for s, item in self.tail if s != seq]

    def cleared(self, last_seq: int) -> None:
        self.last_seq, self.tail, self.complete = last_seq, [], True

    def _remember(self, states: Iterable[tuple[str, bool]]) -> None:
        for call_id, waiting in states:
            self.calls.pop(call_id, None)  # re-inserted as the newest
            self.calls[call_id] = waiting
        while len(self.calls) > CALLS:
            del self.calls[next(iter(self.calls))]


def _has_id(item: Any) -> bool:
    return isinstance(item, Mapping) and bool(item.get("id") or item.get("call_id"))
