"""`JournalCore`, what the session verbs (`Journal`) and the task verbs (`TaskVerbs`) both stand
on: the storage, the tenant, and appending under the rules, alone or inside another verb's write
transaction."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from agentjournal.appends import AppendOutcome, AppendRequest, append_group
from agentjournal.arguments import check_id, check_int, now_ms
from agentjournal.backends import Storage, WriteTx
from agentjournal.errors import JournalError
from agentjournal.events import DEFAULT_MAX_PAYLOAD_BYTES, Event, PreparedEvent, prepare
from agentjournal.rules import SessionState

__all__ = ["JournalCore"]


class JournalCore:
    """One tenant's view of a storage, and the private helpers every verb appends through."""

    def __init__(
        self,
        storage: Storage,
        *,
        tenant: str = "default",
        max_payload_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES,
    ) -> None:
        self.storage = storage
        self.tenant = check_id(tenant, "tenant")
        self.max_payload_bytes = check_int(max_payload_bytes, "max_payload_bytes", 1)

    def _in_tenant(self, tenant: str) -> JournalCore:
        """The same rules over another tenant of this storage, for a verb that spans tenants."""
        if tenant == self.tenant:
            return self
        return JournalCore(self.storage, tenant=tenant, max_payload_bytes=self.max_payload_bytes)

    def _prepare(
        self, type_: Any, payload: Any, key: Any = None, *, reserved: bool = False
    ) -> PreparedEvent:
        return prepare(
            type_,
            payload,
            key,
            max_payload_bytes=self.max_payload_bytes,
            allow_reserved=reserved,
        )

    def _append(
        self,
        session_id: str,
        batch: Sequence[PreparedEvent],
        expected_seq: int | None,
    ) -> tuple[list[Event], bool]:
        check_id(session_id, "session_id")
        if expected_seq is not None:
            check_int(expected_seq, "expected_seq", 0)
        request = AppendRequest(self.tenant, session_id, batch, expected_seq, now_ms())
        outcome: AppendOutcome = self.storage.write_grouped(append_group, request)
        return outcome

    def _append_tx(
        self,
        tx: WriteTx,
        session_id: str,
        events: Sequence[PreparedEvent | tuple[str, dict[str, Any]]],
    ) -> list[Event]:
        """Append inside a write transaction another verb opened, under the same rules as
        `append` (tuples are the journal's own reserved events, prepared here)."""
        batch = [
            e if isinstance(e, PreparedEvent) else self._prepare(*e, reserved=True) for e in events
        ]
        if not batch:
            return []
        request = AppendRequest(self.tenant, session_id, batch, None, now_ms())
        outcome = append_group(tx, [request])[0]
        if isinstance(outcome, JournalError):
            raise outcome
        return outcome[0]

    def _state(self, tx: WriteTx, session_id: str) -> SessionState | None:
        """The session's state if it exists in this journal's tenant."""
        key = (self.tenant, session_id)
        return tx.session_states([key]).get(key)
