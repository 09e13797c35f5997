"""Where an exporter stands, kept in the journal it exports: one `otel.checkpoint` event per
advance, in a session of its own, `otel-export.<name>`.

A checkpoint names the last feed position the exporter has dealt with, and what was still open
there: the turns not ended yet (session and first seq; their events are read again from the
session on resume) and the tasks not ended yet (with where their spans belong). It is written
only after the receiver has confirmed every span finished before that position, so a crash
between the two sends those spans again (the same ids) and never loses one.

Each write expects the seq the exporter last read: two exporters of one name cannot both
advance it (`Conflict`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Final

from agentjournal.arguments import check_id
from agentjournal.errors import Conflict, InvalidArgument, SessionNotFound
from agentjournal.journal import Journal
from agentjournal.otel.turns import OpenTask

__all__ = ["CHECKPOINT_TYPE", "SESSION_PREFIX", "Checkpoint", "CheckpointStore"]

SESSION_PREFIX: Final = "otel-export."
CHECKPOINT_TYPE: Final = "otel.checkpoint"


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """`position`: resume the feed after it (None: from the beginning). `turns`: (session id,
    first seq) of each turn open there. `tasks`: the tasks open there."""

    position: str | None = None
    turns: tuple[tuple[str, int], ...] = ()
    tasks: tuple[OpenTask, ...] = ()

    def to_payload(self) -> dict[str, Any]:
        return {
            "position": self.position,
            "turns": [list(t) for t in self.turns],
            "tasks": [t.to_list() for t in self.tasks],
        }

    @classmethod
    def from_payload(cls, payload: dict[str, Any]) -> Checkpoint:
        try:
            position = payload.get("position")
            return cls(
                None if position is None else str(position),
                tuple((str(sid), int(seq)) for sid, seq in payload.get("turns", ())),
                tuple(OpenTask.from_list(t) for t in payload.get("tasks", ())),
            )
        except (TypeError, ValueError) as exc:
            raise InvalidArgument(f"not an exporter checkpoint: {exc}") from exc


class CheckpointStore:
    """The checkpoint of the exporter called `name`, in `journal` (its tenant's)."""

    def __init__(self, journal: Journal, name: str) -> None:
        self.journal = journal
        self.name = check_id(name, "exporter name")
        self.session_id = check_id(SESSION_PREFIX + name, "exporter name")
        self._seq: int | None = None
        self._checked = False  # the session was seen to be this exporter's

    @property
    def seq(self) -> int | None:
        """The seq of the checkpoint last read or written here (None before `load`)."""
        return self._seq

    def load(self) -> Checkpoint:
        """The last checkpoint written (creating the session on first use). A session of that
        id that is not this exporter's (session ids are the caller's to choose) is refused,
        `InvalidArgument`, and nothing is written to it."""
        try:
            if not self._checked:
                metadata = self.journal.get_session(self.session_id).metadata
                if metadata.get("otel_exporter") != self.name:
                    raise InvalidArgument(
                        f"session {self.session_id!r} is not the checkpoint of the exporter"
                        f" {self.name!r}: name the exporter otherwise (--name)"
                    )
                self._checked = True
            last = self.journal.events(self.session_id, last=1)
        except SessionNotFound:
            # Created with a key: two exporters starting at once both get the one session.
            self.journal.create_session(
                f"OpenTelemetry export {self.name}",
                metadata={"otel_exporter": self.name},
                session_id=self.session_id,
                idempotency_key=self.session_id,
            )
            last = self.journal.events(self.session_id, last=1)
            self._checked = True
        self._seq = last[-1].seq
        if not last or last[-1].type != CHECKPOINT_TYPE:
            return Checkpoint()
        return Checkpoint.from_payload(last[-1].payload)

    def save(
        self, position: str | None, turns: Iterable[tuple[str, int]], tasks: Sequence[OpenTask]
    ) -> Checkpoint:
        """Write a checkpoint after everything up to `position` was confirmed exported."""
        if self._seq is None:
            self.load()
        checkpoint = Checkpoint(position, tuple(sorted(turns)), tuple(tasks))
        try:
            event = self.journal.append(
                self.session_id,
                CHECKPOINT_TYPE,
                checkpoint.to_payload(),
                expected_seq=self._seq,
            )
        except Conflict as exc:
            raise Conflict(
                f"another exporter named {self.name!r} advanced the checkpoint: run one"
                " exporter per name (--name)"
            ) from exc
        self._seq = event.seq
        return checkpoint
