"""Every error agentjournal raises, under one root.

    JournalError
    ├── SessionNotFound      (LookupError)  no such session for this tenant         HTTP 404
    ├── TaskNotFound         (LookupError)  no such task for this tenant            HTTP 404
    ├── InvalidArgument      (ValueError)   a bad argument: limit, cursor, id, url  HTTP 422
    │   ├── InvalidEvent                    wrong event type or payload shape       HTTP 422
    │   └── CorruptLine                     an import line that cannot be a journal's
    ├── PayloadTooLarge      (ValueError)   payload over the configured limit       HTTP 413
    ├── Conflict                            expected_seq, idempotency, reused ids   HTTP 409
    │   └── SourceDiverged                  a replication source's history changed
    ├── UnknownToolCall      (LookupError)  tool_result for no open tool_call       HTTP 409
    ├── SessionClosed                       append to a deleted session             HTTP 409
    ├── ContextTooLarge      (ValueError)   not even the newest turn fits           HTTP 422
    ├── ModelError                          the agent's model failed or is down     HTTP 502
    ├── TurnAbandoned                       a turn left open by a shutting down     HTTP 503
    ├── SearchUnavailable                   this database cannot search (no FTS5)   HTTP 501
    └── StorageError         (OSError)      the database could not do what we asked HTTP 503
        └── MigrationRequired                   the schema needs its owner: run `migrate`

A rejected append writes nothing: every error above is raised before, or rolls back, the
transaction that would have written it.
"""

from __future__ import annotations

__all__ = [
    "Conflict",
    "ContextTooLarge",
    "CorruptLine",
    "InvalidArgument",
    "InvalidEvent",
    "JournalError",
    "MigrationRequired",
    "ModelError",
    "PayloadTooLarge",
    "SearchUnavailable",
    "SessionClosed",
    "SessionNotFound",
    "SourceDiverged",
    "StorageError",
    "TaskNotFound",
    "TurnAbandoned",
    "UnknownToolCall",
]


class JournalError(Exception):
    """Root of every agentjournal error."""


class SessionNotFound(JournalError, LookupError):
    """The session does not exist, or belongs to another tenant (the two are not told apart)."""

    def __init__(self, session_id: str) -> None:
        super().__init__(f"session {session_id!r} not found")
        self.session_id = session_id


class TaskNotFound(JournalError, LookupError):
    """The task does not exist, or belongs to another tenant (the two are not told apart)."""

    def __init__(self, task_id: str) -> None:
        super().__init__(f"task {task_id!r} not found")
        self.task_id = task_id


class InvalidArgument(JournalError, ValueError):
    """An argument the caller passed is out of range or malformed."""


class InvalidEvent(InvalidArgument):
    """An event's type or payload does not have its type's shape (events.py; docs/concepts.md)."""


class CorruptLine(InvalidArgument):
    """A line of a JSON Lines import is not valid JSON, not an event, or breaks its session's
    order or rules. The import it belongs to wrote nothing."""

    def __init__(self, line: int, detail: str) -> None:
        super().__init__(f"line {line}: {detail}")
        self.line = line
        self.detail = detail

    def __reduce__(self) -> tuple[type[CorruptLine], tuple[int, str]]:
        return (type(self), (self.line, self.detail))  # pickles across processes


class PayloadTooLarge(JournalError, ValueError):
    """A payload's compact JSON is larger than the journal's limit."""

    def __init__(self, size: int, limit: int) -> None:
        super().__init__(
            f"payload is {size} bytes of compact JSON; the limit is {limit} bytes "
            "(store large blobs elsewhere and journal a reference)"
        )
        self.size = size
        self.limit = limit


class Conflict(JournalError):
    """The append contradicts what the journal already holds (seq, key or id already taken)."""


class SourceDiverged(Conflict):
    """A replication source's history is not the one the target applied: a copy of the source
    that went its own way, or the source restored from an older backup (same source id,
    different or fewer events). Replicating on would skip events silently; nothing was
    written."""


class UnknownToolCall(JournalError, LookupError):
    """A tool_result names a call_id for which the session has no tool_call."""


class SessionClosed(JournalError):
    """The session is deleted; only undelete (status=active) may be appended to it."""


class ContextTooLarge(JournalError, ValueError):
    """Not even the smallest allowed suffix of the replay fits the token budget."""


class ModelError(JournalError):
    """The agent's model could not answer (unreachable, refused, or replied with nonsense).

    What the turn journaled so far stays; `resume_incomplete()` finishes the turn later."""


class TurnAbandoned(JournalError):
    """The turn was stopped without being ended (the server is shutting down): its model call
    stopped, nothing of the reply was journaled, and the turn stays open for `finish_turn`
    (resume, at the next start) to finish, as after a crash."""


class SearchUnavailable(JournalError):
    """Full-text search is not available here: the SQLite library this Python uses was built
    without FTS5. Appends and every other read keep working."""


class StorageError(JournalError, OSError):
    """The database refused or failed (settings that did not take, disk errors, corruption)."""


class MigrationRequired(StorageError):
    """The PostgreSQL schema is missing, older than this agentjournal, or not granted to the role
    connected, and that role may not change it (an application role owns nothing). The message
    says what to run: `agentjournal migrate` with the owner's URL (docs/postgres.md, "Roles")."""
