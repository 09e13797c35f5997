"""Where an exporter stands, kept in the journal it exports: one `otel.checkpoint` event per
advance, in a session of its own, `otel-export.<name>`.

A checkpoint names the last feed position the exporter has dealt with, and what was still open
there: the turns not ended yet (session and first seq; their events are read again from the
session on resume) and the tasks not ended yet (with where their spans belong). It is written
only after the receiver has confirmed every span finished before that position, so a crash
between the two sends those spans again (the same ids) and never loses one.

Each write expects the seq the exporter last read: two exporters of one name cannot both
advance it (`Conflict`).

A few open turns are named in the checkpoint itself. Many (turns that never end pile up: their
agent crashed and nothing resumed them) are written once as a base, `otel.open_turns` events
each under half the payload limit, in the same commit as the checkpoint that names them; the
checkpoints after it name that base and only the turns opened or closed since, until the changes
written since outweigh the base (or half the payload limit), when a new base is written. So a
checkpoint stays small, the list never outgrows the payload limit, and what the checkpoints
write stays within about twice what the open turns take.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Final

from agentjournal.arguments import check_id
from agentjournal.errors import Conflict, InvalidArgument, SessionNotFound
from agentjournal.journal import Journal
from agentjournal.otel.turns import OpenTask

__all__ = ["CHECKPOINT_TYPE", "OPEN_TURNS_TYPE", "SESSION_PREFIX", "Checkpoint", "CheckpointStore"]

SESSION_PREFIX: Final = "otel-export."
CHECKPOINT_TYPE: Final = "otel.checkpoint"
OPEN_TURNS_TYPE: Final = "otel.open_turns"  # a part of a base of open turns
INLINE_TURNS: Final = 64  # open turns a checkpoint names itself, without a base

Turns = frozenset[tuple[str, int]]


def _size(turns: Iterable[tuple[str, int]]) -> int:
    """About the bytes of `turns` as JSON, a little over (ids need no escaping)."""
    return sum(len(sid) + len(str(seq)) + 8 for sid, seq in turns)  # ["sid",seq],


def _pairs(values: Any) -> Turns:
    return frozenset((str(sid), int(seq)) for sid, seq in values)


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
        self._base: tuple[int, int, Turns] | None = None  # (first seq, last seq, its turns)
        self._spent = 0  # about the bytes of the changes written since that base

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
        unchanged = self._seq == last[-1].seq  # the last checkpoint read or written here
        self._seq = last[-1].seq
        known, self._base = self._base, None
        if not last or last[-1].type != CHECKPOINT_TYPE:
            return Checkpoint()
        payload = last[-1].payload
        checkpoint = Checkpoint.from_payload(payload)
        if "base" not in payload:
            return checkpoint
        try:
            first, end = (int(seq) for seq in payload["base"])
            if unchanged and known is not None and known[:2] == (first, end):
                base, spent = known[2], self._spent  # this store's: no need to read it again
            else:
                base, spent = self._read_base(first, end), None
            turns = (base - _pairs(payload.get("closed", ()))) | set(checkpoint.turns)
        except (TypeError, ValueError) as exc:
            raise InvalidArgument(f"not an exporter checkpoint: {exc}") from exc
        self._base = (first, end, base)
        self._spent = _size(base ^ turns) if spent is None else spent
        return Checkpoint(checkpoint.position, tuple(sorted(turns)), checkpoint.tasks)

    def _read_base(self, first: int, end: int) -> Turns:
        parts: list[Any] = []  # the journal's events
        while len(parts) < end - first + 1:
            after = first - 1 + len(parts)
            page = self.journal.events(self.session_id, after=after, limit=end - after)
            if not page:
                break
            parts += page
        if len(parts) != end - first + 1 or any(e.type != OPEN_TURNS_TYPE for e in parts):
            raise ValueError(f"seqs {first}..{end} are not a base of open turns")
        return frozenset().union(*(_pairs(e.payload["turns"]) for e in parts))

    def save(
        self, position: str | None, turns: Iterable[tuple[str, int]], tasks: Sequence[OpenTask]
    ) -> Checkpoint:
        """Write a checkpoint after everything up to `position` was confirmed exported."""
        if self._seq is None:
            self.load()
        assert self._seq is not None
        checkpoint = Checkpoint(position, tuple(sorted(turns)), tuple(tasks))
        payload = checkpoint.to_payload()
        events: list[dict[str, Any]] = []
        base = self._base
        now = frozenset(checkpoint.turns)
        budget = self.journal.max_payload_bytes // 2
        spent = 0
        if len(now) <= INLINE_TURNS and _size(now) <= budget:
            base = None
        elif base is None or self._spent + _size(now ^ base[2]) > min(_size(base[2]), budget):
            # A new base once the changes written since the last one outweigh it: what goes to
            # the journal stays within twice what the open turns themselves take.
            events = [{"type": OPEN_TURNS_TYPE, "payload": {"turns": p}} for p in self._parts(now)]
            base = (self._seq + 1, self._seq + len(events), now)
            spent = 0
        else:
            spent = self._spent + _size(now ^ base[2])
        if base is not None:
            payload["base"] = [base[0], base[1]]
            payload["turns"] = [list(t) for t in sorted(now - base[2])]
            payload["closed"] = [list(t) for t in sorted(base[2] - now)]
        events.append({"type": CHECKPOINT_TYPE, "payload": payload})
        try:
            written = self.journal.append_many(self.session_id, events, expected_seq=self._seq)
        except Conflict as exc:
            raise Conflict(
                f"another exporter named {self.name!r} advanced the checkpoint: run one"
                " exporter per name (--name)"
            ) from exc
        self._seq, self._base, self._spent = written[-1].seq, base, spent
        return checkpoint

    def _parts(self, turns: Turns) -> list[list[list[Any]]]:
        """The base's turns in parts of under half the journal's payload limit each."""
        budget = self.journal.max_payload_bytes // 2
        parts: list[list[list[Any]]] = [[]]
        size = 0
        for sid, seq in sorted(turns):
            item = _size([(sid, seq)])
            if parts[-1] and size + item > budget:
                parts.append([])
                size = 0
            parts[-1].append([sid, seq])
            size += item
        return parts
