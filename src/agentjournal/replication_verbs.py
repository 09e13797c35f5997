"""The replication verbs of `Journal` (docs/replication.md): what a replicator reads of a source
(its id, its purges), what it writes into a target (a batch with its position), and what an
operator reads of a target (how far each source is, what became of each session). `Journal`
inherits them; `agentjournal.replicate` drives them."""

from __future__ import annotations

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
    """source_id, purges, replication_status, replicated_sessions, apply_replication_batch:
    the replication verbs `Journal` inherits."""

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
