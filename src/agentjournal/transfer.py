"""Export and import of a tenant's journal as JSON Lines, one event a line, as the HTTP API
shows it (`Event.to_dict()`).

Both stream: export reads the feed a page at a time, import reads and stores a chunk of lines at a
time, so memory stays flat whatever the size. Import keeps each event's session, seq, time and
idempotency key (the ids and positions it gets are the target's own) and runs every line through
the same checks as an append (`prepare`, then `appends.append_group`'s rules), all inside one
write transaction: a corrupt line anywhere rejects the whole file with its line number, and
nothing of it is written.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from itertools import islice
from typing import Any, Final, Protocol

from agentjournal.appends import AppendRequest, append_group
from agentjournal.arguments import MAX_INT, check_id
from agentjournal.backends import EventRow, WriteTx
from agentjournal.errors import CorruptLine, JournalError, StorageError
from agentjournal.events import Event, PreparedEvent, loads_strict, prepare

__all__ = ["ImportReport", "committed_events", "export_lines", "import_lines", "import_work"]

PAGE: Final = 1000
CHUNK: Final = 500  # lines stored per round of look-ups; bounds the import's memory
HELD_BACK_WAIT: Final = 30.0  # seconds a read waits for the feed to show what was committed

OpenLines = Callable[[], Iterable[str | bytes]]


class Journal(Protocol):
    """What export and import use of `agentjournal.Journal` (which imports this module for its
    `import_lines` verb, so this one names only the verbs it calls)."""

    def get_session(self, session_id: str) -> Any: ...
    def events(self, session_id: str, *, after: int = 0, limit: int = ...) -> list[Event]: ...
    def events_all(self, *, after: str | None = None, limit: int = 100) -> list[Event]: ...
    def feed_head(self, *, after: str | None = None) -> str | None: ...
    def import_lines(
        self, open_lines: OpenLines, *, progress: Callable[[int], None] | None = None
    ) -> ImportReport: ...


def export_lines(journal: Journal, session_ids: Sequence[str] | None = None) -> Iterator[str]:
    """The tenant's events (or only those of `session_ids`, in that order) as JSON lines without
    the newline: the whole tenant in feed order, each session's in seq order."""
    if session_ids is None:
        yield from (_line(event.to_dict()) for event in committed_events(journal))
        return
    for session_id in session_ids:
        journal.get_session(session_id)  # SessionNotFound before any line of it
        seq = 0
        while page := journal.events(session_id, after=seq, limit=PAGE):
            yield from (_line(event.to_dict()) for event in page)
            seq = page[-1].seq


def committed_events(
    journal: Journal, after: str | None = None, *, wait_seconds: float = HELD_BACK_WAIT
) -> Iterator[Event]:
    """The tenant's events after `after`, in feed order, up to (at least) every event committed
    before the call. The feed may stop short of them: on PostgreSQL it shows an event only once
    every older transaction has ended, and one may be running anywhere in the database. So a
    page that comes back empty before the newest committed event is waited on, not taken for the
    end; `StorageError` if the feed still holds it back after `wait_seconds`."""
    head = journal.feed_head(after=after)
    waited, pause = 0.0, 0.01
    while head is not None:
        page = journal.events_all(after=after, limit=PAGE)
        for event in page:
            yield event
            if event.position == head:
                return
        if page:
            after, waited, pause = page[-1].position, 0.0, 0.01
            continue
        head = journal.feed_head(after=after)  # None: the rest was purged meanwhile
        if head is not None:
            if waited >= wait_seconds:
                raise StorageError(
                    f"the feed is held back at position {after!r}: events up to {head!r} are"
                    " committed, but a transaction that began before them has run for over"
                    f" {wait_seconds:g} s (PostgreSQL shows an event in the feed only once every"
                    " older transaction has ended); end it and try again"
                )
            time.sleep(pause)
            waited += pause
            pause = min(pause * 2, 0.5)


def _line(event: dict[str, Any]) -> str:
    return json.dumps(event, ensure_ascii=False, separators=(",", ":"))


@dataclass(frozen=True, slots=True)
class ImportReport:
    events: int
    sessions_created: int
    sessions_extended: int  # existing sessions whose seq the file continued


@dataclass(frozen=True, slots=True)
class _Line:
    number: int
    session_id: str
    seq: int
    created_at: int
    event: PreparedEvent


def import_lines(
    journal: Journal, open_lines: OpenLines, *, progress: Callable[[int], None] | None = None
) -> ImportReport:
    """`journal.import_lines(open_lines, progress=progress)`."""
    return journal.import_lines(open_lines, progress=progress)


def import_work(
    tenant: str,
    max_payload_bytes: int,
    open_lines: OpenLines,
    progress: Callable[[int], None] | None,
) -> Callable[[WriteTx], ImportReport]:
    """The write transaction's work of `Journal.import_lines`, into `tenant`."""

    def work(tx: WriteTx) -> ImportReport:
        totals = _Totals()
        numbered = enumerate(open_lines(), start=1)
        while chunk := list(islice(numbered, CHUNK)):
            lines = [_parse(max_payload_bytes, n, text) for n, text in chunk if text.strip()]
            _store(tx, tenant, lines, totals)
            if progress is not None:
                progress(chunk[-1][0])
        return ImportReport(totals.events, len(totals.created), len(totals.extended))

    return work


class _Totals:
    def __init__(self) -> None:
        self.events = 0
        self.created: set[str] = set()
        self.extended: set[str] = set()


def _parse(max_payload_bytes: int, number: int, text: str | bytes) -> _Line:
    try:
        data = loads_strict(text)
        if not isinstance(data, dict):
            raise CorruptLine(number, "not a JSON object")
        missing = [k for k in ("session_id", "seq", "type", "payload") if k not in data]
        if missing:
            raise CorruptLine(number, f"missing {', '.join(missing)}")
        seq, created_at = data["seq"], data.get("created_at", 0)
        for name, value in (("seq", seq), ("created_at", created_at)):
            if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_INT:
                raise CorruptLine(
                    number, f"{name} must be an integer from 0 to 2**63 - 1, not {value!r}"[:200]
                )
        if seq < 1:
            raise CorruptLine(number, "seq starts at 1")
        event = prepare(
            data["type"],
            data["payload"],
            data.get("idempotency_key"),
            max_payload_bytes=max_payload_bytes,
            allow_reserved=True,
        )
        session_id = check_id(data["session_id"], "session_id")
    except CorruptLine:
        raise
    except (JournalError, ValueError) as exc:  # ValueError: not UTF-8, or not JSON
        raise CorruptLine(number, str(exc)) from exc
    return _Line(number, session_id, seq, created_at, event)


def _store(tx: WriteTx, tenant: str, lines: list[_Line], totals: _Totals) -> None:
    """Check and write one chunk: new sessions directly (as `create_session` does), the rest
    through `append_group`, one request per line so that each keeps its own time."""
    states = tx.session_states({(tenant, line.session_id) for line in lines})
    taken = {sid for _, sid in states}
    last_seq = {sid: state.last_seq for (_, sid), state in states.items()}
    pending: list[tuple[_Line, AppendRequest]] = []
    for line in lines:
        sid = line.session_id
        if line.event.type == "session_created" or line.seq == 1:
            if line.seq != 1 or line.event.type != "session_created":
                raise CorruptLine(line.number, "a session's seq 1, and only it, is session_created")
            if sid in taken:
                raise CorruptLine(line.number, f"session {sid!r} already exists here")
            _append(tx, pending, totals)
            key = line.event.idempotency_key
            if key is not None and tx.session_by_key(tenant, key) is not None:
                raise CorruptLine(line.number, f"a session was already created with key {key!r}")
            tx.insert_session(tenant, sid, line.created_at, key)
            tx.insert_events([EventRow(tenant, sid, 1, line.event, line.created_at)])
            taken.add(sid)
            last_seq[sid] = 1
            totals.created.add(sid)
            totals.events += 1
            continue
        expected = last_seq.get(sid)
        if expected is None:
            raise CorruptLine(
                line.number, f"session {sid!r} does not exist here and the file did not create it"
            )
        if line.seq != expected + 1:
            raise CorruptLine(
                line.number,
                f"seq {line.seq}, but session {sid!r} continues at seq {expected + 1}"
                " (each session's lines must run 1, 2, 3… in order)",
            )
        last_seq[sid] = line.seq
        if sid not in totals.created:
            totals.extended.add(sid)
        request = AppendRequest(tenant, sid, [line.event], line.seq - 1, line.created_at)
        pending.append((line, request))
    _append(tx, pending, totals)


def _append(tx: WriteTx, pending: list[tuple[_Line, AppendRequest]], totals: _Totals) -> None:
    if not pending:
        return
    outcomes = append_group(tx, [request for _, request in pending])
    for (line, _), outcome in zip(pending, outcomes, strict=True):
        if isinstance(outcome, JournalError):
            raise CorruptLine(line.number, f"{type(outcome).__name__}: {outcome}")
        if not outcome[1]:
            raise CorruptLine(
                line.number,
                f"idempotency key {line.event.idempotency_key!r} is already used in the session",
            )
    totals.events += len(pending)
    pending.clear()
