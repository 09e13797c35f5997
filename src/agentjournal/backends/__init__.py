"""The storage protocol: the few verbs a database must offer to hold a journal.

A backend stores and fetches; it decides nothing. The journal (`agentjournal.journal`) runs the
rules (`agentjournal.rules`) inside `Storage.write`, against the look-ups `WriteTx` answers, and
tells the backend which rows to write. Positions (the global feed's cursor) are opaque strings
whose meaning each backend chooses; everything else is plain Python values.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Protocol, TypeVar

from agentjournal.backends.group_commit import CommitSignal
from agentjournal.events import Event, PreparedEvent
from agentjournal.projection import Message, Projection, Session, Task, ToolCall
from agentjournal.rules import SessionKey, SessionState
from agentjournal.search_text import SearchFilter, SearchQuery

__all__ = [
    "ApiKeyRow",
    "EventRow",
    "PurgeRecord",
    "ReplicatedSession",
    "ReplicationProgress",
    "Storage",
    "WriteTx",
]

T = TypeVar("T")
I = TypeVar("I")  # noqa: E741


@dataclass(frozen=True, slots=True)
class EventRow:
    """An event the rules accepted, with the place they gave it."""

    tenant: str
    session_id: str
    seq: int
    event: PreparedEvent
    created_at: int


@dataclass(frozen=True, slots=True)
class ApiKeyRow:
    """A stored API key: its public id, its tenant, and a hash of its secret (never the secret)."""

    key_id: str
    tenant: str
    secret_hash: str
    label: str
    created_at: int
    revoked_at: int | None = None


@dataclass(frozen=True, slots=True)
class PurgeRecord:
    """A purge's audit row, as a replicator follows it: `position` orders purges as they
    committed (opaque, like the feed's; '' is before every purge)."""

    position: str
    session_id: str
    purged_by: str
    purged_at: int
    event_count: int


@dataclass(frozen=True, slots=True)
class ReplicationProgress:
    """On a target: how far one source's tenant has been applied into `tenant` here. `position`
    is the source feed's last position applied ('' before the first), `purge_position` the
    source's last purge followed."""

    source_id: str
    source_tenant: str
    tenant: str
    position: str
    purge_position: str
    events: int
    updated_at: int


@dataclass(frozen=True, slots=True)
class ReplicatedSession:
    """On a target: a session a source brought, and its fate: ok, conflict (the id is another
    session's here), stopped (the target refused one of its events) or purged."""

    session_id: str
    tenant: str
    source_id: str
    state: str
    error: str | None
    updated_at: int


class WriteTx(Protocol):
    """What work running inside `Storage.write` may read and write. Everything it writes
    commits with the transaction or not at all."""

    def session_states(self, keys: Collection[SessionKey]) -> dict[SessionKey, SessionState]:
        """The sessions of these (tenant, session_id) keys that exist. Where the database needs
        it (PostgreSQL), the rows are locked for the transaction."""

    def session_by_key(self, tenant: str, idempotency_key: str) -> str | None:
        """The session that `create_session`/`fork` made with this key, if any."""

    def events_by_keys(
        self, keys: Collection[tuple[str, str, str]]
    ) -> dict[tuple[str, str, str], Event]:
        """Stored events by (tenant, session_id, idempotency_key)."""

    def tool_call_statuses(
        self, keys: Collection[tuple[str, str, str]]
    ) -> dict[tuple[str, str, str], str]:
        """pending / ok / error by (tenant, session_id, call_id), for the calls that exist."""

    def message_kinds(
        self, keys: Collection[tuple[str, str, int]]
    ) -> dict[tuple[str, str, int], tuple[str, bool]]:
        """(type, is_correction) of message events by (tenant, session_id, seq)."""

    def compaction_floor(self, session: SessionKey) -> int:
        """The newest `context_compacted` event's until_seq, 0 if none."""

    def calls_open_at(self, session: SessionKey, seq: int) -> list[tuple[str, int]]:
        """(call_id, result_seq or 0) of calls made at or before `seq` whose result is not."""

    def task(self, task_id: str) -> Task | None:
        """The task, whatever its tenant (the caller checks it); locked where the database
        needs it (PostgreSQL)."""

    def next_task(self, tenant: str, types: Sequence[str] | None) -> Task | None:
        """The oldest pending task of the tenant (of one of `types`, if given), claimable: on
        PostgreSQL locked with SKIP LOCKED, so concurrent claimers get different tasks."""

    def expired_tasks(self, tenant: str | None, now: int, limit: int) -> list[Task]:
        """Running tasks whose lease ended before `now` (of one tenant, or of all), oldest
        lease first."""

    def session_tasks(self, session: SessionKey) -> list[Task]:
        """Every task of the session, in creation order."""

    def insert_session(
        self, tenant: str, session_id: str, created_at: int, idempotency_key: str | None
    ) -> None:
        """A bare session row; its first event's projection fills it in."""

    def insert_events(self, rows: Sequence[EventRow]) -> list[Event]:
        """Store the events (of any sessions, each session's in seq order) and apply their
        projections, including the sessions' counters. Returns them stored, in order."""

    def copy_events(self, tenant: str, source_id: str, target_id: str, until_seq: int) -> int:
        """Copy events 1..until_seq of source into target (same seq and time, new ids, no keys),
        with their projections. Returns how many were copied."""

    def replace_projection(self, tenant: str, projection: Projection) -> None:
        """Overwrite one session's projection rows (verify --rebuild)."""

    def purge(self, tenant: str, session_id: str, actor: str, at: int) -> int:
        """Delete the session and everything of it, leaving an audit row. Returns events deleted."""

    def insert_api_key(self, key: ApiKeyRow) -> None: ...

    def replication_progress(
        self, source_id: str, source_tenant: str, tenant: str
    ) -> ReplicationProgress | None:
        """The target's record of how far this source's tenant was applied; locked for the
        transaction where the database needs it (PostgreSQL)."""

    def save_replication_progress(self, progress: ReplicationProgress) -> None:
        """Insert or overwrite the record (committed with the batch it counts)."""

    def replicated_sessions(
        self, tenant: str, source_id: str, session_ids: Collection[str]
    ) -> dict[str, ReplicatedSession]:
        """This source's records of these sessions, where it has one."""

    def mark_replicated_sessions(self, rows: Sequence[ReplicatedSession]) -> None:
        """Insert or overwrite these records."""

    def revoke_api_key(self, key_id: str, at: int) -> bool:
        """Mark the key revoked; False if there is no such key or it was revoked already."""


class Storage(Protocol):
    """A database holding journals for any number of tenants."""

    def write(self, work: Callable[[WriteTx], T]) -> T:
        """Run `work` in a write transaction and return after it committed (group commit may
        share the transaction with other callers; a failure of `work` rolls back only its own
        writes)."""

    def write_grouped(
        self, work: Callable[[WriteTx, Sequence[I]], Sequence[T | BaseException]], item: I
    ) -> T:
        """Like `write`, but every item for the same `work` that meets in one commit is served
        by one call; `work` returns an outcome per item (a result or the exception it failed
        with, having written nothing for it)."""

    def session(self, tenant: str, session_id: str) -> Session | None: ...

    def sessions(
        self,
        tenant: str,
        statuses: Sequence[str],
        limit: int,
        before: str | None,
        search: str | None = None,
    ) -> list[Session]:
        """Newest activity first: ordered by last position, descending, below `before`; with
        `search`, only those whose title or id holds it, compared lowercased."""

    def session_ids(self, tenant: str) -> list[str]: ...

    def tenants(self) -> list[str]:
        """Every tenant that has a session (operations across tenants: verify, backup checks)."""

    def events(
        self,
        tenant: str,
        session_id: str,
        *,
        after: int = 0,
        until: int | None = None,
        limit: int | None = None,
        newest_first: bool = False,
    ) -> list[Event]: ...

    def events_all(self, tenant: str, after: str | None, limit: int) -> list[Event]: ...

    def feed_head(self, tenant: str, after: str | None) -> str | None:
        """The position of the tenant's newest committed event, shown by `events_all` or not
        yet; None if it has none after `after`."""

    def position_key(self, position: str) -> int:
        """A sort key from the backend's own decoding: positions compare as their keys do, ''
        (before every event, as `after`) included. InvalidArgument for any string `events_all`
        would refuse as `after`. No I/O: the server calls it for every event it streams."""

    def newest_compaction(
        self, tenant: str, session_id: str, until: int | None
    ) -> Event | None: ...

    def messages(self, tenant: str, session_id: str, last: int | None) -> list[Message]: ...

    def tool_calls(
        self,
        tenant: str,
        session_id: str,
        *,
        call_ids: Collection[str] | None = None,
        open_only: bool = False,
    ) -> list[ToolCall]:
        """In call order; only `call_ids` if given; only calls without a result if `open_only`
        (each read through an index, whatever the session's length)."""

    def task(self, tenant: str, task_id: str) -> Task | None: ...

    def tasks(
        self,
        tenant: str,
        *,
        statuses: Sequence[str] | None = None,
        type: str | None = None,
        session_id: str | None = None,
        after: str | None = None,
        limit: int = 100,
    ) -> list[Task]:
        """Tasks in queue order (by task_id), after the task id `after`."""

    def open_turns(self, tenant: str | None) -> list[Session]:
        """Sessions (not deleted) whose last turn has not ended, of one tenant or of all."""

    def search(
        self,
        tenant: str,
        query: SearchQuery,
        where: SearchFilter,
        below: int | None,
        size: int,
    ) -> list[int]:
        """The event_ids of the newest `size` events of the tenant that match every term of
        `query` and pass `where`, with event_id at most `below`; newest first. Every committed
        event is searchable. SearchUnavailable if the database cannot search."""

    def events_by_id(self, tenant: str, event_ids: Sequence[int]) -> list[Event]:
        """The tenant's events of these ids (any order; ids of none are left out)."""

    def search_index_ids(self, tenant: str, session_id: str) -> tuple[set[int], int]:
        """The session's event ids the search index holds, and the event_id up to which every
        searchable event must be in it (verify)."""

    def reindex(self, progress: Callable[[int], None] | None = None) -> int:
        """Rebuild the search index from the journal; the number of events read (`progress`
        gets it so far after each batch)."""

    def api_key(self, key_id: str) -> ApiKeyRow | None: ...

    def api_keys(self, tenant: str | None) -> list[ApiKeyRow]:
        """Every key (of one tenant, or of all), revoked ones included, oldest first."""

    def source_id(self) -> str:
        """This database's stable id as a replication source (made once, by its migration)."""

    def purges(self, tenant: str, after: str | None, limit: int) -> list[PurgeRecord]:
        """The tenant's purges after the purge position `after`, in commit order: like
        `events_all`, every committed purge once, none skipped by one that commits late."""

    def purge_head(self, tenant: str, after: str | None) -> str | None:
        """The position of the tenant's newest committed purge, shown by `purges` or not yet
        (as `feed_head` for events); None if it has none after `after`."""

    def replication_status(self, tenant: str | None) -> list[ReplicationProgress]:
        """The progress records of every source replicating into `tenant` (None: every
        tenant), by source id."""

    def replicated_session_rows(
        self, tenant: str, source_id: str | None, states: Sequence[str] | None
    ) -> list[ReplicatedSession]:
        """The records of sessions sources brought into `tenant` (of one source, in some
        states, if given), by session id."""

    def session_origins(self, tenant: str, session_ids: Sequence[str]) -> dict[str, str]:
        """Of these sessions of `tenant`, the ones a source brought and that live here (ok or
        stopped), with that source's id: one lookup for a page of sessions."""

    def integrity_errors(self) -> list[str]:
        """What the database's own consistency checks report (empty when sound)."""

    @property
    def signal(self) -> CommitSignal:
        """Bumped after each commit this process makes (other processes are found by polling)."""

    def hold_turn(self, tenant: str, session_id: str) -> AbstractContextManager[bool]:
        """Mark the session's turn as running here while the block runs: True if this caller
        got it, False if a turn of it runs elsewhere (another thread; on PostgreSQL another
        instance too). See `turn_holds`."""

    def checkpoint(self) -> None:
        """Make deleted data unrecoverable from logs (after a purge); may be a no-op."""

    def close(self) -> None: ...
