"""Appends, many at a time: the rules applied to every caller's batch that meets in one commit.

`append_group` is the group function the journal gives group commit. It reads what the rules need
for all the batches at once (session rows, idempotency keys, call ids, correction targets), runs
the rules batch by batch in memory (`rules.SessionRules` remembers what earlier batches of the same
session did), and stores every accepted event with a few statements in all. A rejected batch gets
its error as its outcome and writes nothing; the others are unaffected.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from agentjournal.backends import EventRow, WriteTx
from agentjournal.errors import Conflict, JournalError, SessionNotFound
from agentjournal.events import MESSAGE_ROLES, Event, PreparedEvent
from agentjournal.rules import SessionKey, SessionRules, resolve_retry

__all__ = ["AppendOutcome", "AppendRequest", "append_group"]

# (the events, True if they were written now / False if this was an idempotent retry)
AppendOutcome = tuple[list[Event], bool]


@dataclass(frozen=True, slots=True)
class AppendRequest:
    """One caller's `append`/`append_many`, validated and waiting for its commit."""

    tenant: str
    session_id: str
    events: Sequence[PreparedEvent]
    expected_seq: int | None
    created_at: int


class _GroupView:
    """`rules.HistoryView` over look-ups made once for the whole group."""

    def __init__(self, tx: WriteTx, requests: Sequence[AppendRequest]) -> None:
        self.tx = tx
        call_ids: set[tuple[str, str, str]] = set()
        targets: set[tuple[str, str, int]] = set()
        for request in requests:
            tenant, sid = request.tenant, request.session_id
            for event in request.events:
                if event.type in ("tool_call", "tool_result"):
                    call_ids.add((tenant, sid, event.payload["call_id"]))
                elif event.type in MESSAGE_ROLES and "supersedes" in event.payload:
                    targets.add((tenant, sid, event.payload["supersedes"]))
        self.statuses = tx.tool_call_statuses(call_ids) if call_ids else {}
        self.kinds = tx.message_kinds(targets) if targets else {}

    def tool_call_status(self, session: SessionKey, call_id: str) -> str | None:
        return self.statuses.get((*session, call_id))

    def message_at(self, session: SessionKey, seq: int) -> tuple[str, bool] | None:
        return self.kinds.get((*session, seq))

    def compaction_floor(self, session: SessionKey) -> int:
        return self.tx.compaction_floor(session)

    def calls_open_at(self, session: SessionKey, seq: int) -> list[tuple[str, int]]:
        return self.tx.calls_open_at(session, seq)


def append_group(
    tx: WriteTx, requests: Sequence[AppendRequest]
) -> list[AppendOutcome | JournalError]:
    """Check and store `requests` in order; one outcome per request."""
    states = tx.session_states({(request.tenant, request.session_id) for request in requests})
    keyed = {
        (request.tenant, request.session_id, event.idempotency_key)
        for request in requests
        for event in request.events
        if event.idempotency_key is not None
    }
    known_keys: dict[tuple[str, str, str], Event] = tx.events_by_keys(keyed) if keyed else {}
    view = _GroupView(tx, requests)
    rules: dict[SessionKey, SessionRules] = {}
    rows: list[EventRow] = []
    # Events accepted in this group are stand-ins (event_id 0) until stored; a retry of them
    # within the same group returns the stand-ins, replaced below by what was stored.
    stand_ins: dict[int, int] = {}
    planned: list[tuple[int, int] | list[Event] | JournalError] = []
    for request in requests:
        session_id = request.session_id
        session_key = (request.tenant, session_id)
        try:
            state = states.get(session_key)
            if state is None:
                raise SessionNotFound(session_id)
            keys = [e.idempotency_key for e in request.events if e.idempotency_key is not None]
            if keys:
                found = {
                    k: known_keys[(*session_key, k)]
                    for k in keys
                    if (*session_key, k) in known_keys
                }
                originals = resolve_retry(request.events, found)
                if originals is not None:
                    planned.append(originals)
                    continue
            session = rules.get(session_key) or rules.setdefault(
                session_key, SessionRules(state, view)
            )
            if request.expected_seq is not None and request.expected_seq != session.last_seq:
                raise Conflict(
                    f"expected_seq={request.expected_seq} but the session's last seq is "
                    f"{session.last_seq}: someone else appended first; read the new events and"
                    " retry"
                )
            first_seq = session.last_seq + 1
            session.append(request.events)
        except JournalError as exc:
            planned.append(exc)
            continue
        start = len(rows)
        for seq, event in enumerate(request.events, start=first_seq):
            rows.append(EventRow(request.tenant, session_id, seq, event, request.created_at))
            if event.idempotency_key is not None:
                stand_in = Event(
                    0,
                    session_id,
                    seq,
                    event.type,
                    event.payload,
                    request.created_at,
                    event.idempotency_key,
                )
                known_keys[(*session_key, event.idempotency_key)] = stand_in
                stand_ins[id(stand_in)] = len(rows) - 1
        planned.append((start, len(rows)))

    stored = tx.insert_events(rows) if rows else []
    outcomes: list[AppendOutcome | JournalError] = []
    for plan in planned:
        if isinstance(plan, JournalError):
            outcomes.append(plan)
        elif isinstance(plan, tuple):
            outcomes.append((stored[plan[0] : plan[1]], True))
        else:
            outcomes.append(([_stored(e, stored, stand_ins) for e in plan], False))
    return outcomes


def _stored(event: Event, stored: list[Event], stand_ins: dict[int, int]) -> Event:
    index = stand_ins.get(id(event))
    return event if index is None else stored[index]
