"""The rules an append must satisfy against the session's history, checked inside the write
transaction. Pure code: the history arrives through `HistoryView`, which each backend answers with
a few indexed look-ups, so the rules themselves are written once, here.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from agentjournal.errors import Conflict, InvalidEvent, SessionClosed, UnknownToolCall
from agentjournal.events import MESSAGE_ROLES, Event, PreparedEvent, canonical_json

__all__ = ["HistoryView", "SessionKey", "SessionRules", "SessionState", "resolve_retry"]

# A session's identity: (tenant, session_id). Ids are chosen per tenant, so two tenants may
# both have a session "user-42"; every look-up names both.
SessionKey = tuple[str, str]


@dataclass(frozen=True, slots=True)
class SessionState:
    """What the rules need of the session row, read under the write lock."""

    session_id: str
    tenant: str
    status: str
    last_seq: int


class HistoryView(Protocol):
    """Look-ups into one session's history, answered inside the write transaction."""

    def tool_call_status(self, session: SessionKey, call_id: str) -> str | None:
        """`None` if the call_id was never used, else pending / ok / error."""

    def message_at(self, session: SessionKey, seq: int) -> tuple[str, bool] | None:
        """(type, is_correction) of the message event at `seq`, or None if none is there."""

    def compaction_floor(self, session: SessionKey) -> int:
        """The newest `context_compacted` event's until_seq, 0 if none."""

    def calls_open_at(self, session: SessionKey, seq: int) -> list[tuple[str, int]]:
        """(call_id, result_seq or 0) of calls made at or before `seq` whose result is not."""


def resolve_retry(batch: Sequence[PreparedEvent], found: dict[str, Event]) -> list[Event] | None:
    """Decide what a batch whose idempotency keys were seen before means.

    None: no key was seen, append as usual. A list: every event is a retry of the same event,
    return the originals. Anything in between is a `Conflict` and writes nothing.
    """
    if not found:
        return None
    if len(found) != len(batch) or any(event.idempotency_key is None for event in batch):
        raise Conflict(
            f"{len(found)} of the {len(batch)} events reuse idempotency keys already in the"
            " session; a retry must repeat the whole earlier batch, or use fresh keys"
        )
    originals = []
    for event in batch:
        assert event.idempotency_key is not None
        original = found[event.idempotency_key]
        if original.type != event.type or canonical_json(original.payload) != event.payload_json:
            raise Conflict(
                f"idempotency key {event.idempotency_key!r} was used for a different event "
                f"(seq {original.seq}, {original.type}); use a new key for a new event"
            )
        originals.append(original)
    # A retry repeats what it retries as it was: one run of consecutive events, in the same order.
    first = originals[0].seq
    if [original.seq for original in originals] != list(range(first, first + len(originals))):
        raise Conflict(
            "these idempotency keys belong to events that were not appended together in this order;"
            " a retry must repeat the earlier batch as it was"
        )
    return originals


class SessionRules:
    """The rules for one session inside one write transaction.

    `append(batch)` checks each event against the stored history (through `view`) plus every
    batch this object accepted before, then remembers the batch; a rejected batch leaves no trace.
    So group commit can check many callers' batches for one session before writing any of them.
    """

    def __init__(self, state: SessionState, view: HistoryView) -> None:
        self.session_id = state.session_id
        self.key: SessionKey = (state.tenant, state.session_id)
        self.status = state.status
        self.last_seq = state.last_seq
        self.view = view
        self.calls: dict[str, int] = {}  # call_id -> seq of its result, 0 while it has none
        self.call_seqs: dict[str, int] = {}
        self.messages: dict[int, tuple[str, bool]] = {}
        self.floor: int | None = None

    def append(self, batch: Sequence[PreparedEvent]) -> None:
        keys = [event.idempotency_key for event in batch if event.idempotency_key is not None]
        if len(keys) != len(set(keys)):
            raise InvalidEvent("a batch must not use one idempotency key twice")
        saved = (self.status, dict(self.calls), dict(self.call_seqs), self.floor)
        try:
            for offset, event in enumerate(batch, start=1):
                self._check_event(self.last_seq + offset, event)
        except BaseException:
            self.status, self.calls, self.call_seqs, self.floor = saved
            last = self.last_seq
            self.messages = {seq: kind for seq, kind in self.messages.items() if seq <= last}
            raise
        self.last_seq += len(batch)

    def _check_event(self, seq: int, event: PreparedEvent) -> None:
        payload = event.payload
        if self.status == "deleted" and not (
            event.type == "session_updated" and payload.get("status") == "active"
        ):
            raise SessionClosed(
                f"session {self.session_id!r} is deleted; undelete it (status='active') "
                "before appending"
            )
        if event.type == "session_updated" and "status" in payload:
            self.status = payload["status"]
        if event.type in MESSAGE_ROLES:
            self._check_message(seq, event)
        elif event.type == "tool_call":
            self._check_call(seq, payload["call_id"])
        elif event.type == "tool_result":
            self._check_result(seq, payload["call_id"])
        elif event.type == "context_compacted":
            self._check_compaction(seq, payload["until_seq"])

    def _check_message(self, seq: int, event: PreparedEvent) -> None:
        target_seq = event.payload.get("supersedes")
        if target_seq is None:
            self.messages[seq] = (event.type, False)
            return
        target = self.messages.get(target_seq) or self.view.message_at(self.key, target_seq)
        if target is None or target[1] or target[0] != event.type or target_seq >= seq:
            raise InvalidEvent(
                f"supersedes={target_seq} must name an earlier, original {event.type} of this "
                "session (corrections name the original, not another correction)"
            )
        self.messages[seq] = (event.type, True)

    def _check_call(self, seq: int, call_id: str) -> None:
        if call_id in self.calls or self.view.tool_call_status(self.key, call_id):
            raise Conflict(f"call_id {call_id!r} is already used in this session")
        self.calls[call_id] = 0
        self.call_seqs[call_id] = seq

    def _check_result(self, seq: int, call_id: str) -> None:
        status: str | None = "pending"
        if call_id in self.calls:
            status = "pending" if self.calls[call_id] == 0 else "ok"
        else:
            status = self.view.tool_call_status(self.key, call_id)
            if status is None:
                raise UnknownToolCall(
                    f"tool_result names call_id {call_id!r}, but the session has no tool_call "
                    "with that id; append the tool_call first"
                )
        if status != "pending":
            raise Conflict(f"tool call {call_id!r} already has a result")
        self.calls[call_id] = seq

    def _check_compaction(self, seq: int, until_seq: int) -> None:
        floor = self.floor if self.floor is not None else self.view.compaction_floor(self.key)
        if not floor <= until_seq < seq:
            raise InvalidEvent(
                f"context_compacted.until_seq={until_seq} must be below its own seq ({seq}) and "
                f"not below the previous compaction's until_seq ({floor})"
            )
        open_calls = [
            call_id
            for call_id, result_seq in self.view.calls_open_at(self.key, until_seq)
            if not 0 < self.calls.get(call_id, 0) <= until_seq
        ]
        open_calls += [
            call_id
            for call_id, call_seq in self.call_seqs.items()
            if call_seq <= until_seq and not 0 < self.calls[call_id] <= until_seq
        ]
        if open_calls:
            raise InvalidEvent(
                f"until_seq={until_seq} would separate tool call {open_calls[0]!r} from its "
                "result; compact up to a point where every call has its result"
            )
        self.floor = until_seq
