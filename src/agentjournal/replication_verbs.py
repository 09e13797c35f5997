"""The replication verbs of `Journal` (docs/replication.md): what a replicator reads of a source
(its id, its purges), what it writes into a target (a batch with its position), and what an
operator reads of a target (how far each source is, what became of each session). `Journal`
inherits them; `agentjournal.replicate` drives them."""

from __future__ import annotations

from collections.abc import Sequence

from agentjournal import replication_apply
from agentjournal.arguments import MAX_PAGE, check_id, check_int
from agentjournal.backends import PurgeRecord, ReplicatedSession, ReplicationProgress
from agentjournal.backends.group_commit import CommitSignal
from agentjournal.errors import InvalidArgument
from agentjournal.replication_apply import BatchReport, ReplicationBatch
from agentjournal.task_verbs import TaskVerbs

__all__ = ["FATES", "ReplicationVerbs"]

FATES = ("ok", "conflict", "stopped", "purged")


class ReplicationVerbs(TaskVerbs):
    """source_id, purges, purge_head, replication_status, replicated_sessions,
    apply_replication_batch: the replication verbs `Journal` inherits."""

    def source_id(self) -> str:
        """This database's stable id as a replication source: made once, by the migration that
        created its tables, and the same for every tenant and every process that opens it."""
        return self.storage.source_id()

    def purges(self, *, after: str | None = None, limit: int = 100) -> list[PurgeRecord]:
        """A page of the tenant's purge audit after the purge position `after`, in commit order
        (who purged which session when, and how many events; never any content). Resuming after
        the last position seen gives every purge once."""
        check_int(limit, "limit", 1, MAX_PAGE)
        if after is not None and not isinstance(after, str):
            raise InvalidArgument(f"after must be a purge position, got {after!r:.40}")
        return self.storage.purges(self.tenant, after or None, limit)

    def purge_head(self, *, after: str | None = None) -> str | None:
        """The position of the tenant's newest committed purge after `after` (None if none):
        on PostgreSQL `purges` may not show it yet, as the feed holds back a commit until every
        older transaction ended."""
        if after is not None and not isinstance(after, str):
            raise InvalidArgument(f"after must be a purge position, got {after!r:.40}")
        return self.storage.purge_head(self.tenant, after or None)

    def replication_status(self) -> list[ReplicationProgress]:
        """How far every source replicating into this tenant has been applied: its position,
        its last purge followed, the events read so far and when it last applied a batch."""
        return self.storage.replication_status(self.tenant)

    def replicated_sessions(
        self, *, source_id: str | None = None, state: str | None = None
    ) -> list[ReplicatedSession]:
        """The sessions sources brought into this tenant, by session id, with their fate: ok,
        conflict (the id is another session's here), stopped (this journal refused one of its
        events: `error` says which and why) or purged. Only one source's, or one fate, if
        given."""
        if source_id is not None:
            check_id(source_id, "source_id")
        if state is not None and state not in FATES:
            raise InvalidArgument(f"state must be one of {', '.join(FATES)}, got {state!r:.40}")
        states = None if state is None else [state]
        return self.storage.replicated_session_rows(self.tenant, source_id, states)

    def session_sources(self, session_ids: Sequence[str]) -> dict[str, str]:
        """Which of these sessions of this tenant a source brought here (replicated, ok or
        stopped), and that source's id; sessions written here directly are left out. One
        lookup for a whole page of sessions."""
        if isinstance(session_ids, str) or not isinstance(session_ids, Sequence):
            raise InvalidArgument("session_ids must be a list of session ids")
        check_int(len(session_ids), "the number of session ids", 0, MAX_PAGE)
        for session_id in session_ids:
            check_id(session_id, "session_id")
        return self.storage.session_origins(self.tenant, list(session_ids))

    def apply_replication_batch(self, batch: ReplicationBatch) -> BatchReport:
        """Apply a page of a source's feed (and its purges) to this tenant with the source's new
        position, in one transaction; `replication_apply.Moved` if the position stored is not
        the one the page was read after. The replicator's verb: use `agentjournal.replicate`."""
        report = self.storage.write(replication_apply.apply_work(self.tenant, batch))
        if report.purged:
            self.storage.checkpoint()
        return report

    @property
    def commit_signal(self) -> CommitSignal:
        """Bumped after each commit this process makes to the database (a replicator following
        a source waits on it; other processes' commits are found by polling)."""
        return self.storage.signal
