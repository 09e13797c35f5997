"""A session's events folded into turns, model steps and tool calls: what the exporter makes
spans of. Pure code, standard library only.

A turn starts at a user message (or at any turn event that comes while no turn is open: a reply
that speaks first, a call appended after the reply) and ends at an assistant message that no tool
call follows in the same commit. The feed does not mark commits, so the fold cannot tell that a
reply ends its turn until it sees the next event of the session, or until its caller knows that
the reply's commit has been read whole (`settle`): the runtime writes a reply's text and its
tool calls in one `append_many`, so a reply with nothing after it in a whole commit is the last
word.

A model step (one model response) is an assistant message with the tool calls that follow it,
or a run of tool calls alone: what `replay` folds into one assistant message. Tasks are followed
from `task_created` to the event that ends them (completed, cancelled, or failed for good).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from agentjournal.events import Event

__all__ = [
    "TURN_TYPES",
    "FinishedTask",
    "ModelStep",
    "OpenTask",
    "SessionFold",
    "ToolStep",
    "Turn",
    "steps_of",
]

# The events a turn is made of (corrections, which carry `supersedes`, are not).
TURN_TYPES: Final = frozenset({"user_message", "assistant_message", "tool_call", "tool_result"})
_TASK_ENDS: Final = frozenset({"task_completed", "task_cancelled", "task_failed"})


def _in_turn(event: Event) -> bool:
    return event.type in TURN_TYPES and "supersedes" not in event.payload


@dataclass(frozen=True, slots=True)
class ToolStep:
    """A tool call and its result (None: the turn ended without one)."""

    call: Event
    result: Event | None


@dataclass(frozen=True, slots=True)
class ModelStep:
    """One model response: its text (`message`, if it had any) and the calls it asked for.
    `after` is the event the model answered (the user message or the last tool result before
    it): the response's span runs from that event to the response."""

    after: Event | None
    message: Event | None
    calls: tuple[ToolStep, ...]

    @property
    def first(self) -> Event:
        return self.message if self.message is not None else self.calls[0].call

    @property
    def last(self) -> Event:
        return self.calls[-1].call if self.calls else self.first


@dataclass(frozen=True, slots=True)
class Turn:
    """One turn of one session: its events in seq order (the turn events only); `ended` by a
    final reply, or not (a new user message came first, or the session was deleted)."""

    session_id: str
    events: tuple[Event, ...]
    ended: bool

    @property
    def start_seq(self) -> int:
        return self.events[0].seq

    @property
    def user(self) -> Event | None:
        first = self.events[0]
        return first if first.type == "user_message" else None

    @property
    def reply(self) -> Event | None:
        last = self.events[-1]
        return last if self.ended and last.type == "assistant_message" else None


def steps_of(turn: Turn) -> list[ModelStep]:
    """The turn's model steps, in order, each call with its result (from anywhere in the turn)."""
    results = {e.payload.get("call_id"): e for e in turn.events if e.type == "tool_result"}
    steps: list[ModelStep] = []
    for index, event in enumerate(turn.events):
        before = turn.events[index - 1] if index else None
        if event.type == "assistant_message":
            steps.append(ModelStep(before, event, ()))
        elif event.type == "tool_call":
            call = ToolStep(event, results.get(event.payload.get("call_id")))
            if steps and before is not None and before.seq == steps[-1].last.seq:
                step = steps[-1]  # a call of the same response as the event before it
                steps[-1] = ModelStep(step.after, step.message, (*step.calls, call))
            else:
                steps.append(ModelStep(before, None, (call,)))
    return steps


@dataclass(frozen=True, slots=True)
class OpenTask:
    """A task seen created and not ended yet, and where its span belongs: `trace_root` names
    its trace (the first seq of the turn that was open when it was created, that of its parent
    task's trace, or `task:<its created seq>`), `parent` the span it hangs under (`invoke_agent`
    or `task`, and the seq that span starts at), if any."""

    session_id: str
    task_id: str
    type: str
    created_seq: int
    created_at: int
    trace_root: str
    parent_kind: str | None = None
    parent_seq: int | None = None

    def to_list(self) -> list[Any]:
        return [
            self.session_id,
            self.task_id,
            self.type,
            self.created_seq,
            self.created_at,
            self.trace_root,
            self.parent_kind,
            self.parent_seq,
        ]

    @classmethod
    def from_list(cls, values: Sequence[Any]) -> OpenTask:
        sid, task_id, type_, seq, at, root, kind, parent_seq = values
        return cls(
            str(sid), str(task_id), str(type_), int(seq), int(at), str(root), kind, parent_seq
        )


@dataclass(frozen=True, slots=True)
class FinishedTask:
    """A task that ended, with the event that ended it."""

    task: OpenTask
    end: Event


Finished = Turn | FinishedTask


@dataclass
class SessionFold:
    """One session's open turn and open tasks, fed its events in seq order. `add` and `settle`
    return what they finished."""

    session_id: str
    turn: list[Event] = field(default_factory=list)
    tasks: dict[str, OpenTask] = field(default_factory=dict)

    def add(self, event: Event) -> list[Finished]:
        done: list[Finished] = []
        closable = bool(self.turn) and self.turn[-1].type == "assistant_message"
        if closable and event.type != "tool_call":
            # Only a call of the same response may follow a reply within its turn.
            done.append(Turn(self.session_id, tuple(self.turn), ended=True))
            self.turn = []
        if _in_turn(event):
            if event.type == "user_message" and self.turn:
                done.append(Turn(self.session_id, tuple(self.turn), ended=False))
                self.turn = []
            self.turn.append(event)
        elif event.type == "task_created":
            self._created(event)
        elif event.type in _TASK_ENDS:
            task = self.tasks.get(str(event.payload.get("task_id")))
            final = event.type != "task_failed" or not event.payload.get("retry")
            if task is not None and final:
                del self.tasks[task.task_id]
                done.append(FinishedTask(task, event))
        elif event.ends_session_stream and self.turn:
            done.append(Turn(self.session_id, tuple(self.turn), ended=False))
            self.turn = []
        return done

    def _created(self, event: Event) -> None:
        payload, seq = event.payload, event.seq
        parent = self.tasks.get(str(payload.get("parent_task_id")))
        root, kind, parent_seq = f"task:{seq}", None, None
        if self.turn:
            root, kind, parent_seq = str(self.turn[0].seq), "invoke_agent", self.turn[0].seq
        elif parent is not None:
            root, kind, parent_seq = parent.trace_root, "task", parent.created_seq
        task_id = str(payload.get("task_id"))
        self.tasks[task_id] = OpenTask(
            self.session_id,
            task_id,
            str(payload.get("type")),
            seq,
            event.created_at,
            root,
            kind,
            parent_seq,
        )

    def settle(self, whole: Callable[[Event], bool] = lambda event: True) -> list[Turn]:
        """Everything committed up to some point has been read: a turn whose last event is a
        reply of a commit known to be `whole` has ended."""
        if self.turn and self.turn[-1].type == "assistant_message" and whole(self.turn[-1]):
            turn = Turn(self.session_id, tuple(self.turn), ended=True)
            self.turn = []
            return [turn]
        return []

    def restore_turn(self, events: Iterable[Event]) -> None:
        """Take back the events of the turn that was open at a checkpoint (the session's turn
        events from its start seq up to the checkpoint's position)."""
        self.turn = [e for e in events if _in_turn(e)]

    @property
    def idle(self) -> bool:
        return not self.turn and not self.tasks
