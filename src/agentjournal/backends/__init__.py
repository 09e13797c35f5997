"""The storage protocol: the few verbs a database must offer to hold a journal.

A backend stores and fetches; it decides nothing. The journal (`agentjournal.journal`) runs the
rules (`agentjournal.rules`) inside `Storage.write`, against the look-ups `WriteTx` answers, and
tells the backend which rows to write. Positions (the global feed's cursor) are opaque strings
whose meaning each backend chooses; everything else is plain Python values.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol, TypeVar

from agentjournal.backends.group_commit import CommitSignal
from agentjournal.events import Event, PreparedEvent
from agentjournal.projection import Message, Projection, Session, ToolCall
from agentjournal.rules import HistoryView, SessionState

__all__ = ["Storage", "WriteTx"]

T = TypeVar("T")


class WriteTx(HistoryView, Protocol):
    """One caller's share of a write transaction. Everything it writes commits or none of it."""

    def session_state(self, tenant: str, session_id: str) -> SessionState | None: ...

    def reserve_seqs(
        self, tenant: str, session_id: str, count: int, updated_at: int
    ) -> SessionState | None:
        """Lock the session row and take the next `count` seqs (event_count and updated_at move
        with them). Returns the state before, or None if there is no such session. The
        reservation is undone with the transaction if the append fails."""

    def session_by_key(self, tenant: str, idempotency_key: str) -> str | None:
        """The session that `create_session`/`fork` made with this key, if any."""

    def events_by_keys(
        self, tenant: str, session_id: str, keys: Sequence[str]
    ) -> dict[str, Event]: ...

    def insert_session(
        self, tenant: str, session_id: str, created_at: int, idempotency_key: str | None
    ) -> None:
        """A bare session row; its first event's projection fills it in."""

    def insert_events(
        self,
        tenant: str,
        session_id: str,
        first_seq: int,
        events: Sequence[PreparedEvent],
        created_at: int,
    ) -> list[Event]:
        """Store events at first_seq, first_seq + 1, ... (reserved before) and apply their
        projections."""

    def copy_events(self, tenant: str, source_id: str, target_id: str, until_seq: int) -> int:
        """Copy events 1..until_seq of source into target (same seq and time, new ids, no keys),
        with their projections; the seqs were reserved before. Returns how many were copied."""

    def replace_projection(self, tenant: str, projection: Projection) -> None:
        """Overwrite one session's projection rows (verify --rebuild)."""

    def purge(self, tenant: str, session_id: str, actor: str, at: int) -> int:
        """Delete the session and everything of it, leaving an audit row. Returns events deleted."""


class Storage(Protocol):
    """A database holding journals for any number of tenants."""

    def write(self, work: Callable[[WriteTx], T]) -> T:
        """Run `work` in a write transaction and return after it committed (group commit may
        share the transaction with other callers; a failure of `work` rolls back only its own
        writes)."""

    def session(self, tenant: str, session_id: str) -> Session | None: ...

    def sessions(
        self, tenant: str, statuses: Sequence[str], limit: int, before: str | None
    ) -> list[Session]:
        """Newest activity first: ordered by last position, descending, below `before`."""

    def session_ids(self, tenant: str) -> list[str]: ...

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

    def newest_compaction(
        self, tenant: str, session_id: str, until: int | None
    ) -> Event | None: ...

    def messages(self, tenant: str, session_id: str, last: int | None) -> list[Message]: ...

    def tool_calls(self, tenant: str, session_id: str) -> list[ToolCall]: ...

    def integrity_errors(self) -> list[str]:
        """What the database's own consistency checks report (empty when sound)."""

    @property
    def signal(self) -> CommitSignal:
        """Bumped after each commit this process makes (other processes are found by polling)."""

    def checkpoint(self) -> None:
        """Make deleted data unrecoverable from logs (after a purge); may be a no-op."""

    def close(self) -> None: ...
