"""The target's side of replication (docs/replication.md): the write transaction that applies
one batch of a source's feed, its purges and the new position together, so that the position can
never be ahead of or behind the events it counts.

Everything is recomputed on every run of the transaction (PostgreSQL reruns one that a lost
connection rolled back): the stored position is read again, locked where the database needs it,
and must be the one the batch was read after; else `Moved`, and nothing is written.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from agentjournal.appends import AppendRequest, append_group
from agentjournal.arguments import now_ms
from agentjournal.backends import (
    EventRow,
    PurgeRecord,
    ReplicatedSession,
    ReplicationProgress,
    WriteTx,
)
from agentjournal.errors import Conflict, JournalError
from agentjournal.events import Event, PreparedEvent

__all__ = ["BatchReport", "Moved", "ReplicationBatch", "apply_work"]


class Moved(Conflict):
    """The target's stored position is not the one the batch was read after: another
    replicator applied something meanwhile. Nothing of the batch was written."""


@dataclass(frozen=True, slots=True)
class ReplicationBatch:
    """A page of a source's feed and the purges read after it, ready to apply. `prepared` has,
    for each event, the event checked against the target's limits, or why it failed them."""

    source_id: str
    source_tenant: str
    expected: ReplicationProgress  # what the target held when the page was read
    page: Sequence[Event]
    prepared: Sequence[PreparedEvent | JournalError]
    purges: Sequence[PurgeRecord]
    batch_size: int


@dataclass(frozen=True, slots=True)
class BatchReport:
    """One applied batch: what it read and what became of it."""

    events_read: int
    appended: int
    skipped: int  # events of sessions in conflict, stopped or purged
    purges_followed: int
    conflicts: list[str]  # sessions found in conflict by this batch
    stopped: dict[str, str]  # sessions stopped by this batch -> why
    purged: list[str]  # sessions purged in the target by this batch
    position: str  # the source position applied up to
    lag_ms: int  # now minus the time of the last event read (0 if none was)
    caught_up: bool  # the batch was short: the source had nothing more then


def apply_work(tenant: str, batch: ReplicationBatch) -> _Apply:
    """The write transaction's work of applying `batch` into `tenant`."""
    return _Apply(tenant, batch)


class _Apply:
    """The write transaction of one batch on the target."""

    def __init__(self, tenant: str, batch: ReplicationBatch) -> None:
        self.source_id = batch.source_id
        self.source_tenant = batch.source_tenant
        self.tenant = tenant
        self.expected = batch.expected
        self.page = batch.page
        self.prepared = batch.prepared
        self.purges = batch.purges
        self.batch_size = batch.batch_size

    def __call__(self, tx: WriteTx) -> BatchReport:
        # Everything below is recomputed on every run: PostgreSQL reruns a transaction that a
        # lost connection rolled back.
        stored = tx.replication_progress(self.source_id, self.source_tenant, self.tenant)
        position = stored.position if stored else ""
        purge_position = stored.purge_position if stored else ""
        if (position, purge_position) != (self.expected.position, self.expected.purge_position):
            raise Moved("another replicator applied a batch of this source first")
        now = now_ms()
        run = _Run(tx, self.tenant, self.source_id, now)
        sids = {e.session_id for e in self.page} | {p.session_id for p in self.purges}
        run.fates = tx.replicated_sessions(self.tenant, self.source_id, sids)
        run.present = {sid for _, sid in tx.session_states({(self.tenant, s) for s in sids})}
        for event, prepared in zip(self.page, self.prepared, strict=True):
            run.event(event, prepared)
        run.flush()
        for purge in self.purges:
            run.purge(purge)
        tx.mark_replicated_sessions(list(run.marks.values()))
        last = self.page[-1] if self.page else None
        tx.save_replication_progress(
            ReplicationProgress(
                self.source_id,
                self.source_tenant,
                self.tenant,
                last.position if last else position,
                self.purges[-1].position if self.purges else purge_position,
                (stored.events if stored else 0) + len(self.page),
                now,
            )
        )
        return BatchReport(
            events_read=len(self.page),
            appended=run.appended,
            skipped=run.skipped,
            purges_followed=len(self.purges),
            conflicts=run.conflicts,
            stopped=run.stopped,
            purged=run.purged,
            position=last.position if last else position,
            lag_ms=max(0, now - last.created_at) if last else 0,
            caught_up=len(self.page) < self.batch_size,
        )


class _Run:
    """One run of a batch's transaction: the sessions' fates as they change, and the appends
    waiting to be stored together."""

    def __init__(self, tx: WriteTx, tenant: str, source: str, now: int) -> None:
        self.tx = tx
        self.tenant = tenant
        self.source = source
        self.now = now
        self.fates: dict[str, ReplicatedSession] = {}
        self.present: set[str] = set()
        self.marks: dict[str, ReplicatedSession] = {}
        self.pending: list[tuple[Event, AppendRequest]] = []
        self.appended = 0
        self.skipped = 0
        self.conflicts: list[str] = []
        self.stopped: dict[str, str] = {}
        self.purged: list[str] = []

    def mark(self, sid: str, state: str, error: str | None = None) -> None:
        fate = ReplicatedSession(sid, self.tenant, self.source, state, error, self.now)
        self.fates[sid] = self.marks[sid] = fate
        if state == "conflict":
            self.conflicts.append(sid)
        elif state == "stopped" and error is not None:
            self.stopped[sid] = error

    def event(self, event: Event, prepared: PreparedEvent | JournalError) -> None:
        sid = event.session_id
        fate = self.fates.get(sid)
        if fate is not None and fate.state != "ok":
            self.skipped += 1
            return
        if isinstance(prepared, JournalError):
            self.flush()
            self._stop(event, prepared)
            return
        if fate is None:
            self.flush()
            self._create(event, prepared)
            return
        if sid not in self.present:
            self.flush()
            self.skipped += 1
            self.mark(sid, "stopped", f"seq {event.seq}: the session is gone from the target")
            return
        request = AppendRequest(self.tenant, sid, [prepared], event.seq - 1, event.created_at)
        self.pending.append((event, request))

    def _create(self, event: Event, prepared: PreparedEvent) -> None:
        sid = event.session_id
        if sid in self.present:
            self.skipped += 1
            self.mark(sid, "conflict", "the session id is another session's in the target")
            return
        if event.seq != 1 or event.type != "session_created":
            self.skipped += 1
            self.mark(
                sid,
                "stopped",
                f"seq {event.seq}: the target has not seen this session's start (seq 1)",
            )
            return
        key = prepared.idempotency_key
        if key is not None and self.tx.session_by_key(self.tenant, key) is not None:
            self.skipped += 1
            self.mark(
                sid,
                "conflict",
                f"idempotency key {key!r} created another session in the target",
            )
            return
        self.tx.insert_session(self.tenant, sid, event.created_at, key)
        self.tx.insert_events([EventRow(self.tenant, sid, 1, prepared, event.created_at)])
        self.present.add(sid)
        self.appended += 1
        self.mark(sid, "ok")

    def _stop(self, event: Event, error: JournalError) -> None:
        self.skipped += 1
        self.mark(
            event.session_id,
            "stopped",
            f"seq {event.seq} ({event.type}): {type(error).__name__}: {error}",
        )

    def flush(self) -> None:
        if not self.pending:
            return
        pending, self.pending = self.pending, []
        outcomes = append_group(self.tx, [request for _, request in pending])
        for (event, _), outcome in zip(pending, outcomes, strict=True):
            fate = self.fates.get(event.session_id)
            if fate is not None and fate.state != "ok":
                self.skipped += 1  # stopped by an earlier event of this group
            elif isinstance(outcome, JournalError):
                self._stop(event, outcome)
            elif not outcome[1]:
                self._stop(
                    event,
                    JournalError(
                        f"idempotency key {event.idempotency_key!r} is already used in the"
                        " session (the target holds this event already)"
                    ),
                )
            else:
                self.appended += 1

    def purge(self, record: PurgeRecord) -> None:
        sid = record.session_id
        fate = self.fates.get(sid)
        ours = fate is not None and fate.state in ("ok", "stopped")
        if ours and self.tx.session_states([(self.tenant, sid)]):
            actor = f"replica of {self.source}: {record.purged_by}"
            self.tx.purge(self.tenant, sid, actor, self.now)
            self.purged.append(sid)
        if fate is None or fate.state != "purged":
            self.mark(sid, "purged", None)
