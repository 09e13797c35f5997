"""Where an exporter stands, kept in the journal it exports: one `otel.checkpoint` event per
advance, in a session of its own, `otel-export.<name>`.

A checkpoint names the last feed position the exporter has dealt with, and what was still open
there: the turns not ended yet (session and first seq; their events are read again from the
session on resume) and the tasks not ended yet (with where their spans belong). It is written
only after the receiver has confirmed every span finished before that position, so a crash
between the two sends those spans again (the same ids) and never loses one.

Each write expects the seq the exporter last read: two exporters of one name cannot both
advance it (`Conflict`).

A few open turns and tasks are named in the checkpoint itself. Many (turns that never end pile
up when their agent crashed and nothing resumed it; a queue's backlog is many tasks not taken yet)
are written once as a base, `otel.open_turns` events each under half the payload limit, in the
same commit as the checkpoint that names it; the checkpoints after it name that base and only
what opened or closed since, until the changes written since outweigh the base (or half the
payload limit), when a new base is written. So a checkpoint stays small, the lists never outgrow
the payload limit, and what the checkpoints write stays within about twice what is open.
"""

from __future__ import annotations

import json
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
OPEN_TURNS_TYPE: Final = "otel.open_turns"  # a part of a base of open turns and tasks
INLINE_ITEMS: Final = 64  # open turns and tasks a checkpoint names itself, without a base

Item = tuple[Any, ...]  # ("turn", session id, first seq) or ("task", *OpenTask.to_list())
Items = frozenset[Item]


def _items(turns: Iterable[Any], tasks: Iterable[Any]) -> Items:
    """Open turns ([session id, first seq]) and tasks (OpenTask.to_list()) as one set."""
    pairs = [("turn", str(sid), int(seq)) for sid, seq in turns]
    return frozenset(pairs + [("task", *OpenTask.from_list(t).to_list()) for t in tasks])


def _lists(items: Iterable[Item]) -> tuple[list[list[Any]], list[list[Any]]]:
    """The turns and the tasks of `items`, as a payload lists them (in a stable order)."""
    turns = sorted(list(i[1:]) for i in items if i[0] == "turn")
    tasks = sorted((list(i[1:]) for i in items if i[0] == "task"), key=lambda t: (t[0], t[3]))
    return turns, tasks


def _size(items: Iterable[Item]) -> int:
    """The bytes of `items` in a payload's compact JSON, and a comma each."""
    return sum(len(json.dumps(list(i[1:]), ensure_ascii=False).encode()) + 1 for i in items)


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
        self._base: tuple[int, int, Items, int] | None = None  # (first, last seq, items, size)
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
                base, spent = known, self._spent  # this store's: no need to read it again
            else:
                items = self._read_base(first, end)
                base, spent = (first, end, items, _size(items)), None
            closed = _items(payload.get("closed", ()), payload.get("closed_tasks", ()))
            opened = _items(checkpoint.turns, (t.to_list() for t in checkpoint.tasks))
            now = (base[2] - closed) | opened
        except (TypeError, ValueError) as exc:
            raise InvalidArgument(f"not an exporter checkpoint: {exc}") from exc
        self._base = base
        self._spent = _size(base[2] ^ now) if spent is None else spent
        turns, tasks = _lists(now)
        return Checkpoint.from_payload(
            {"position": checkpoint.position, "turns": turns, "tasks": tasks}
        )

    def _read_base(self, first: int, end: int) -> Items:
        parts: list[Any] = []  # the journal's events
        while len(parts) < end - first + 1:
            after = first - 1 + len(parts)
            page = self.journal.events(self.session_id, after=after, limit=end - after)
            if not page:
                break
            parts += page
        if len(parts) != end - first + 1 or any(e.type != OPEN_TURNS_TYPE for e in parts):
            raise ValueError(f"seqs {first}..{end} are not a base of open turns")
        return frozenset().union(
            *(_items(e.payload.get("turns", ()), e.payload.get("tasks", ())) for e in parts)
        )

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
        now = _items(payload["turns"], payload["tasks"])
        budget = self.journal.max_payload_bytes // 2
        spent = 0
        if len(now) <= INLINE_ITEMS and _size(now) <= budget:
            base = None
        elif base is None or self._spent + _size(now ^ base[2]) > min(base[3], budget):
            # A new base once the changes written since the last one outweigh it: what goes to
            # the journal stays within twice what the open turns and tasks themselves take.
            parts = self._parts(now)
            events = [{"type": OPEN_TURNS_TYPE, "payload": part} for part in parts]
            base = (self._seq + 1, self._seq + len(events), now, _size(now))
        else:
            spent = self._spent + _size(now ^ base[2])
        if base is not None:
            payload["base"] = [base[0], base[1]]
            payload["turns"], payload["tasks"] = _lists(now - base[2])
            payload["closed"], payload["closed_tasks"] = _lists(base[2] - now)
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

    def _parts(self, items: Items) -> list[dict[str, list[list[Any]]]]:
        """A base's turns and tasks, in parts of under half the journal's payload limit each."""
        budget = self.journal.max_payload_bytes // 2
        chunks: list[list[Item]] = [[]]
        size = 0
        for item in sorted(items, key=repr):
            weight = _size([item])
            if chunks[-1] and size + weight > budget:
                chunks.append([])
                size = 0
            chunks[-1].append(item)
            size += weight
        parts = []
        for chunk in chunks:
            turns, tasks = _lists(chunk)
            parts.append({"turns": turns, "tasks": tasks})
        return parts
