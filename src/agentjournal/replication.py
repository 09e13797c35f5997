"""Replication: one journal's tenant applied, event by event and exactly once, to another
journal (docs/replication.md). The main case is a fleet of SQLite journals feeding one central
PostgreSQL journal; any pair of backends works with the same code.

A replicator reads the source's global feed after the position the *target* says it applied,
and applies a page of it to the target in one write transaction, together with the new
position (`WriteTx.save_replication_progress`). The position lives only in the target and moves
only with the events it counts, so a replicator killed at any instant resumes with neither a
gap nor a duplicate. Inside the transaction the stored position is read again (locked, on
PostgreSQL) and must be the one the page was read after; if another replicator moved it
meanwhile, this page is dropped and the next round reads on from the new position.

Events go through the same rules and projections as appends (`appends.append_group`; a
session's first event as `create_session` writes it), keeping each event's session id, seq,
time and idempotency key. Per session, the target records a fate (`ReplicatedSession`):
ok; conflict when the id is already another session's in the target (skipped, never merged);
stopped when the target refused one of its events (skipped from then on, with the error);
purged when the source purged it (purged here too, and never created again).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Final, NamedTuple

from agentjournal.arguments import MAX_PAGE, check_id, check_int
from agentjournal.backends import PurgeRecord, ReplicationProgress
from agentjournal.errors import (
    InvalidArgument,
    JournalError,
    SessionNotFound,
    SourceDiverged,
    StorageError,
)
from agentjournal.events import Event, PreparedEvent, prepare
from agentjournal.journal import Journal
from agentjournal.replication_apply import BatchReport, Moved, ReplicationBatch

__all__ = ["BatchReport", "ReplicationReport", "replicate"]

DEFAULT_BATCH: Final = 500
MAX_BATCH: Final = MAX_PAGE
# Catching up, a batch doubles after each full one whose transaction took under CATCH_UP_SECONDS
# (halves after one that took longer), up to MAX_BATCH events; a short page (caught up) brings it
# back to `batch_size`. Fewer, larger commits while behind; small batches, so low lag, when live.
CATCH_UP_SECONDS: Final = 0.5
HELD_BACK_WAIT: Final = 30.0  # seconds catch-up waits for a PostgreSQL feed held back
BACKOFF_FIRST: Final = 0.1  # seconds before the first retry after a failed round
BACKOFF_MAX: Final = 30.0
CATCH_UP_ATTEMPTS: Final = 6  # failed rounds in a row before catch-up gives up
HELD_BACK: Final = (
    "the source's feed is held back by a long transaction: events or purges are committed that"
    " it does not show yet; end it and run again"
)


@dataclass
class ReplicationReport:
    """What a `replicate` call did, summed over its batches."""

    source_id: str
    source_tenant: str
    tenant: str
    batches: int = 0
    events_read: int = 0
    appended: int = 0
    skipped: int = 0
    purges_followed: int = 0
    conflicts: list[str] = field(default_factory=list)
    stopped: dict[str, str] = field(default_factory=dict)
    purged: list[str] = field(default_factory=list)
    position: str = ""
    lag_ms: int = 0

    def add(self, batch: BatchReport) -> None:
        self.batches += 1
        self.events_read += batch.events_read
        self.appended += batch.appended
        self.skipped += batch.skipped
        self.purges_followed += batch.purges_followed
        self.conflicts += batch.conflicts
        self.stopped.update(batch.stopped)
        self.purged += batch.purged
        self.position = batch.position
        self.lag_ms = batch.lag_ms


def replicate(
    source: Journal | str | Path,
    target: Journal | str | Path,
    *,
    tenant: str | None = None,
    source_tenant: str = "default",
    batch_size: int = DEFAULT_BATCH,
    follow: bool = False,
    stop: threading.Event | None = None,
    on_batch: Callable[[BatchReport], None] | None = None,
    on_error: Callable[[BaseException, float], None] | None = None,
    poll_interval: float = 0.1,
) -> ReplicationReport:
    """Apply the source tenant's events to the target, from where the target says this source
    stopped, each exactly once; return what was done.

    `source`/`target`: a `Journal` (its tenant is used) or a URL (`source_tenant` names the
    tenant to read; the source must exist). `tenant`: the target tenant (default: the target
    journal's own, or for a target URL the source tenant's name).
    Without `follow`, returns once caught up (every event committed before the call is applied).
    With `follow`, keeps going, woken by new commits (polling other processes' every
    `poll_interval` seconds), until `stop` is set; a failed round (the target or source
    unreachable) is retried after a bounded exponential backoff. `on_batch` gets each batch's
    report after it committed; `on_error` each failed round's error and the pause before the
    next."""
    check_int(batch_size, "batch_size", 1, MAX_BATCH)
    if isinstance(poll_interval, bool) or not isinstance(poll_interval, int | float):
        raise InvalidArgument(f"poll_interval must be a number of seconds, got {poll_interval!r}")
    if not 0 < poll_interval <= 60:
        raise InvalidArgument(f"poll_interval must be above 0 and at most 60, got {poll_interval}")
    opened: list[Journal] = []
    try:
        if not isinstance(source, Journal):
            opened.append(Journal.open(source, tenant=source_tenant, create=False))
            source = opened[-1]
        if tenant is not None:
            check_id(tenant, "tenant")
        if not isinstance(target, Journal):
            opened.append(Journal.open(target, tenant=tenant or source.tenant))
            target = opened[-1]
        elif tenant is not None and tenant != target.tenant:
            target = target.for_tenant(tenant)
        replicator = _Replicator(source, target, batch_size)
        return replicator.run(follow, stop or threading.Event(), on_batch, on_error, poll_interval)
    finally:
        for journal in opened:
            journal.close()


class _Replicator:
    def __init__(self, source: Journal, target: Journal, batch_size: int) -> None:
        self.source = source
        self.target = target
        self.batch_size = batch_size
        self.source_id = source.source_id()
        if self.source_id == target.source_id():
            # Task ids are unique across a database's tenants, so a copy there would clash.
            raise InvalidArgument(
                f"the source and the target are the same database (source id {self.source_id});"
                " replicate between two databases"
            )
        self.report = ReplicationReport(self.source_id, source.tenant, target.tenant)
        self.size = batch_size  # the next batch's events: grows while catching up
        self.ahead: Future[_Read] | None = None  # the next page, read while one is applied
        self.reader: ThreadPoolExecutor | None = None
        # While a batch the database refused is narrowed down: "left", the events still to
        # read one at a time; "culprit", the refusal of the single event read last.
        self.narrowing: dict[str, Any] = {}

    def progress(self) -> ReplicationProgress:
        for found in self.target.replication_status():
            if found.source_id == self.source_id and found.source_tenant == self.source.tenant:
                return found
        return ReplicationProgress(
            self.source_id, self.source.tenant, self.target.tenant, "", "", 0, 0
        )

    def run(
        self,
        follow: bool,
        stop: threading.Event,
        on_batch: Callable[[BatchReport], None] | None,
        on_error: Callable[[BaseException, float], None] | None,
        poll_interval: float,
    ) -> ReplicationReport:
        try:
            return self.rounds(follow, stop, on_batch, on_error, poll_interval)
        finally:
            self.drop_ahead()
            if self.reader is not None:
                self.reader.shutdown()

    def rounds(
        self,
        follow: bool,
        stop: threading.Event,
        on_batch: Callable[[BatchReport], None] | None,
        on_error: Callable[[BaseException, float], None] | None,
        poll_interval: float,
    ) -> ReplicationReport:
        signal = self.source.commit_signal
        expected = self.progress()
        self.check_history(expected)
        self.report.position = expected.position
        # Catch-up ends once it has applied everything committed before it began (or the
        # feed holds nothing more): not at the first short page, which on PostgreSQL may only
        # mean that an older transaction, anywhere in the database, holds the feed back.
        # The same for purges: one committed before the call is followed before it returns.
        goals = [self.source.feed_head(), self.source.purge_head()]
        failures = 0
        held_back_since: float | None = None
        while not stop.is_set():
            seen = signal.version  # before the read: a commit after it ends the wait below
            try:
                batch, more = self.round()
            except Moved:
                # Another replicator applied a batch: read on from where it stopped.
                self.narrowing.clear()
                continue
            except (StorageError, OSError) as exc:
                # The source or the target unreachable (or refusing for a while): nothing of
                # the round was written; the next one starts again from the target's position.
                self.narrowing.clear()
                self.size = self.batch_size
                failures += 1
                if not follow and failures >= CATCH_UP_ATTEMPTS:
                    raise
                pause = min(BACKOFF_MAX, BACKOFF_FIRST * 2 ** (failures - 1))
                if on_error is not None:
                    on_error(exc, pause)
                stop.wait(pause)
                continue
            except JournalError as exc:
                # The database refused the whole batch (not one of the journal's rules: those
                # stop their session inside it; a task id another tenant of the target holds,
                # say). Read on one event at a time until the one it refuses is found, which
                # then stops its session as a rule would.
                if self.narrowing.get("culprit") is not None:
                    raise  # even stopping the session was refused: nothing more to narrow
                if self.narrowing.get("left"):
                    self.narrowing["culprit"] = exc
                else:
                    self.narrowing.update(left=self.size, culprit=None)
                    self.size = self.batch_size
                continue
            failures = 0
            if batch is not None:
                held_back_since = None
                self.report.add(batch)
                if on_batch is not None:
                    on_batch(batch)
                if not batch.caught_up:
                    continue
            if not follow and (self.reached(goals) or not more):
                break
            if more:
                if batch is None:
                    # Nothing shown, yet more is committed: PostgreSQL shows an event in the
                    # feed once every older transaction has ended.
                    now = time.monotonic()
                    held_back_since = held_back_since or now
                    if not follow and now - held_back_since > HELD_BACK_WAIT:
                        raise StorageError(HELD_BACK)
                    stop.wait(0.02)
                continue
            signal.wait(seen, poll_interval)
        return self.report

    def reached(self, goals: list[str | None]) -> bool:
        """Whether the target applied the feed up to `goals[0]` and purges up to `goals[1]`."""
        progress = self.progress()
        key = self.source.position_key
        return all(
            goal is None or (done != "" and key(done) >= key(goal))
            for goal, done in zip(goals, (progress.position, progress.purge_position), strict=True)
        )

    def check_history(self, expected: ReplicationProgress) -> None:
        """Refuse a source whose history is not what the target applied of it: every session of
        the target that still takes this source's events must hold, at the last seq both have,
        the same event as the source; and if the source's feed ends before the position the
        target applied, none of them may be longer in the target or missing at the source
        (other than by a purge still to follow). Run once, before the first round: a few reads
        per such session, never the sessions' events."""
        if not expected.position:
            return
        # Sessions still taking this source's events (a stopped one may end in the target's
        # own writes, which is why it stopped).
        taking = self.target.replicated_sessions(source_id=self.source_id, state="ok")
        if not taking:
            return
        purge_after = expected.purge_position or None
        pending: set[str] | None = None
        head = self.source.feed_head()
        applied = self.source.position_key(expected.position)
        behind = head is None or self.source.position_key(head) < applied
        for fate in taking:
            sid = fate.session_id
            try:
                session = self.target.get_session(sid)
            except SessionNotFound:
                continue  # purged in the target since: nothing of it to compare
            try:
                theirs = self.source.get_session(sid)
            except SessionNotFound:
                # Purged at the source and not followed yet (read again: it may be a purge
                # committed since), or, with a feed ending early, lost with an old backup.
                if pending is None or sid not in pending:
                    pending = self.purged_since(purge_after)
                if sid in pending or not behind:
                    continue
                missing = f"session {sid} is in the target but not in the source"
                raise self.diverged(missing) from None
            seq = min(session.last_seq, theirs.last_seq)
            source_event = _event_at(self.source, sid, seq)
            # Only an event the target has applied (its position is not past the target's)
            # must be there the same: a later one may meet the target's own write at that seq.
            if source_event[0] and self.source.position_key(source_event[0]) > applied:
                continue
            if _event_at(self.target, sid, seq)[1:] != source_event[1:]:
                raise self.diverged(f"session {sid} holds a different event at seq {seq}")
            if behind and theirs.last_seq < session.last_seq:
                raise self.diverged(
                    f"session {sid} ends at seq {theirs.last_seq} in the source but at seq"
                    f" {session.last_seq} in the target, and the source's feed ends before the"
                    " position the target applied"
                )

    def purged_since(self, after: str | None) -> set[str]:
        """The sessions the source purged after the purge position `after`, once it shows every
        purge committed by now (PostgreSQL holds one back while an older transaction runs)."""
        goal = self.source.purge_head(after=after)
        key = self.source.position_key
        deadline = time.monotonic() + HELD_BACK_WAIT
        while True:
            shown: list[str] = []
            cursor = after
            while page := self.source.purges(after=cursor, limit=MAX_BATCH):
                shown += [p.session_id for p in page]
                cursor = page[-1].position
            if goal is None or (cursor and key(cursor) >= key(goal)):
                return set(shown)
            if time.monotonic() > deadline:
                raise StorageError(HELD_BACK)
            time.sleep(0.02)

    def diverged(self, what: str) -> SourceDiverged:
        return SourceDiverged(
            f"source {self.source_id} (tenant {self.source.tenant!r}) is not the history target"
            f" tenant {self.target.tenant!r} applied: {what}. Is it a copy of the source, or"
            " restored from an older backup? Replicate it into a target tenant of its own."
        )

    def round(self) -> tuple[BatchReport | None, bool]:
        """Read one page (and the purges since the last round) and apply it: its report (None
        if there was nothing to read), and after a short page whether the source holds more
        already (committed meanwhile, or held back from its feed by an older transaction on
        PostgreSQL). Catching up, the next page is read while this one is applied."""
        ahead, self.ahead = self.ahead, None
        if ahead is not None:
            read = ahead.result()
            # Resized since it was read (at the largest size the batch could grow to).
            read = read._replace(page=read.page[: self.size], prepared=read.prepared[: self.size])
            read = read._replace(size=self.size)
        else:
            expected = self.progress()
            size = 1 if self.narrowing.get("left") else self.size
            read = self.read(expected, size)
        expected, size, page, purges, prepared = read
        if not page and not purges:
            return None, self.holds_more(expected.position, expected.purge_position)
        culprit = self.narrowing.get("culprit")
        if culprit is not None and page:
            prepared = [culprit, *prepared[1:]]  # refused alone too: its session stops here
        batch = ReplicationBatch(
            self.source_id, self.source.tenant, expected, page, prepared, purges, size
        )
        purge_position = purges[-1].position if purges else expected.purge_position
        if len(page) == size and not self.narrowing.get("left"):
            # Behind: read on from where this batch will leave the target, while it is applied
            # (a read of the source and an apply to the target mostly wait on different I/O).
            # The page is used only if this batch commits: the next one's transaction checks
            # the position as every batch's does.
            after = replace(expected, position=page[-1].position, purge_position=purge_position)
            self.ahead = self.pool().submit(self.read, after, min(MAX_BATCH, size * 2))
        try:
            started = time.monotonic()
            report = self.target.apply_replication_batch(batch)
        except BaseException:
            self.drop_ahead()
            raise
        if self.narrowing.get("left"):
            left = 0 if culprit is not None else self.narrowing["left"] - len(page)
            self.narrowing.update(left=left, culprit=None)
        else:
            self.resize(report, size, time.monotonic() - started)
        more = not report.caught_up or self.holds_more(report.position, purge_position)
        return report, more

    def read(self, expected: ReplicationProgress, size: int) -> _Read:
        """A page of `size` events of the source after `expected`, then its purges after it."""
        page = self.source.events_all(after=expected.position or None, limit=size)
        # Purges read after the page: one that took events the page holds is in this list (or
        # the next round's), and is applied after them.
        purges = self.source.purges(after=expected.purge_position or None, limit=MAX_BATCH)
        return _Read(expected, size, page, purges, [self.prepare(event) for event in page])

    def pool(self) -> ThreadPoolExecutor:
        if self.reader is None:
            self.reader = ThreadPoolExecutor(1, thread_name_prefix="agentjournal-replicate")
        return self.reader

    def drop_ahead(self) -> None:
        """Forget the page read ahead (once its read has ended: the source stays unused after
        a run)."""
        ahead, self.ahead = self.ahead, None
        if ahead is not None:
            wait([ahead])

    def resize(self, report: BatchReport, size: int, seconds: float) -> None:
        """The next batch's size after one of `size` events whose transaction took `seconds`."""
        if report.caught_up:
            self.size = self.batch_size
        elif seconds < CATCH_UP_SECONDS:
            self.size = min(MAX_BATCH, size * 2)
        elif seconds > CATCH_UP_SECONDS * 1.5:
            self.size = max(self.batch_size, size // 2)

    def holds_more(self, position: str, purge_position: str) -> bool:
        """Whether the source committed events or purges after these positions (shown yet or,
        on PostgreSQL, held back by an older transaction)."""
        return (
            self.source.feed_head(after=position or None) is not None
            or self.source.purge_head(after=purge_position or None) is not None
        )

    def prepare(self, event: Event) -> PreparedEvent | JournalError:
        try:
            return prepare(
                event.type,
                event.payload,
                event.idempotency_key,
                max_payload_bytes=self.target.max_payload_bytes,
                allow_reserved=True,
            )
        except JournalError as exc:
            return exc


class _Read(NamedTuple):
    """A page of the source read after `expected` (`size` asked for), its purges and its
    events prepared for the target."""

    expected: ReplicationProgress
    size: int
    page: Sequence[Event]
    purges: Sequence[PurgeRecord]
    prepared: Sequence[PreparedEvent | JournalError]


def _event_at(journal: Journal, session_id: str, seq: int) -> tuple[Any, ...]:
    """A session's event as replication copies it, after its position: type, payload, time
    and key (all None if the session has no such event)."""
    found = journal.events(session_id, after=seq - 1, limit=1)
    if not found or found[0].seq != seq:
        return ("", None, None, None, None)
    event = found[0]
    return (event.position, event.type, event.payload, event.created_at, event.idempotency_key)
