"""agentjournal: durable memory for AI agents.

Each session is an append-only journal of events in SQLite or PostgreSQL; every other table is a
projection written in the same transaction. Open one with `Journal.open("agent.db")` (or
`AsyncJournal`).
"""

from agentjournal.aio import AsyncJournal
from agentjournal.errors import (
    Conflict,
    ContextTooLarge,
    CorruptLine,
    InvalidArgument,
    InvalidEvent,
    JournalError,
    MigrationRequired,
    ModelError,
    PayloadTooLarge,
    SearchUnavailable,
    SessionClosed,
    SessionNotFound,
    SourceDiverged,
    StorageError,
    TaskNotFound,
    TurnAbandoned,
    UnknownToolCall,
)
from agentjournal.events import Event, NewEvent
from agentjournal.journal import Journal
from agentjournal.projection import Message, Session, Task, ToolCall
from agentjournal.replication import ReplicationReport, replicate
from agentjournal.search import SearchHit, SearchPage
from agentjournal.tasks import Recovery
from agentjournal.verify import Difference, VerifyReport

__all__ = [
    "AsyncJournal",
    "Conflict",
    "ContextTooLarge",
    "CorruptLine",
    "Difference",
    "Event",
    "InvalidArgument",
    "InvalidEvent",
    "Journal",
    "JournalError",
    "Message",
    "MigrationRequired",
    "ModelError",
    "NewEvent",
    "PayloadTooLarge",
    "Recovery",
    "ReplicationReport",
    "SearchHit",
    "SearchPage",
    "SearchUnavailable",
    "Session",
    "SessionClosed",
    "SessionNotFound",
    "SourceDiverged",
    "StorageError",
    "Task",
    "TaskNotFound",
    "ToolCall",
    "TurnAbandoned",
    "UnknownToolCall",
    "VerifyReport",
    "replicate",
]
__version__ = "0.1.0"
