"""A reference journal for the model-based test (`test_model.py`), written from the docs alone.

It imports nothing from agentjournal (an independent reading of the docs): every rule below is
written again from the document, in the plainest form (lists scanned from the start, no indexes),
so that a shared mistake would have to be made twice. Where the docs are silent the reference does
what the library does; each such choice is marked "docs are silent". Limits the document does not
state (nesting depth, id lengths, at most 100 retries) are not modelled, and the test does not
generate them.

Errors are `Rejected("ClassName")`; the test compares that name with the class of what the real
journal raised.
"""

from __future__ import annotations

import copy
import json
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

ROLES = {"user_message": "user", "assistant_message": "assistant", "system_message": "system"}
SESSION_TYPES = {"session_created", "session_updated", "session_forked"}
TASK_TYPES = {
    "task_created",
    "task_started",
    "task_progress",
    "task_completed",
    "task_failed",
    "task_cancelled",
}
RESERVED = SESSION_TYPES | TASK_TYPES
CORE = RESERVED | set(ROLES) | {"tool_call", "tool_result", "context_compacted"}
CUSTOM_TYPE = re.compile(r"^[a-z][a-z0-9_]*(\.[a-z][a-z0-9_]*)+$")
SESSION_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$")
STATUSES = ("active", "archived", "deleted")
OPEN = ("pending", "running")  # a task that has not ended
# What opens a turn (a user message, a tool call, a tool result) and what ends it (an assistant
# message); corrections do neither.
TURN_OPENERS = ("user_message", "tool_call", "tool_result")


class Rejected(Exception):
    """The reference refuses the request; `kind` names the error class the docs give it."""

    def __init__(self, kind: str, why: str = "") -> None:
        super().__init__(f"{kind}: {why}")
        self.kind = kind


@dataclass(frozen=True)
class Ev:
    seq: int
    type: str
    payload: dict[str, Any]
    key: str | None = None


@dataclass
class RefSession:
    session_id: str
    events: list[Ev] = field(default_factory=list)
    activity: int = 0  # the journal-wide write counter at this session's newest event

    @property
    def last_seq(self) -> int:
        return len(self.events)

    def _fields(self) -> dict[str, Any]:
        values: dict[str, Any] = {"status": "active", "forked_from": None, "forked_at_seq": None}
        for event in self.events:
            p = event.payload
            if event.type == "session_created":
                values.update(
                    title=p["title"], model=p.get("model"), system_prompt=p.get("system_prompt")
                )
            elif event.type == "session_updated":
                values.update({k: p[k] for k in ("title", "status") if k in p})
            elif event.type == "session_forked":
                values.update(forked_from=p["from_session_id"], forked_at_seq=p["at_seq"])
        return values

    @property
    def status(self) -> str:
        return str(self._fields()["status"])

    def row(self) -> dict[str, Any]:
        """The `sessions` projection fields the test compares."""
        values = self._fields()
        prompt = completion = 0
        for event in self.events:
            usage = event.payload.get("usage")
            if event.type == "assistant_message" and isinstance(usage, dict):
                prompt += usage.get("prompt_tokens", 0)
                completion += usage.get("completion_tokens", 0)
        values.update(
            last_seq=self.last_seq,
            event_count=len(self.events),
            prompt_tokens=prompt,
            completion_tokens=completion,
            turn_open=self.turn_open,
        )
        return values

    @property
    def turn_open(self) -> bool:
        """The newest user message, tool call or tool result came after the newest assistant
        message (corrections excluded): a turn is running, or a crash cut it."""
        opened = closed = 0
        for event in self.events:
            if "supersedes" in event.payload:
                continue
            if event.type in TURN_OPENERS:
                opened = event.seq
            elif event.type == "assistant_message":
                closed = event.seq
        return opened > closed


@dataclass
class RefTask:
    """A task as the docs' "Tasks" (concepts.md) describes it. `task_id` is the reference's
    own id ("t1", "t2"... in creation order); the test maps the journal's ids onto these."""

    task_id: str
    number: int  # creation counter: the queue's order
    session_id: str
    type: str
    input: Any
    parent: str | None
    max_retries: int
    status: str = "pending"
    progress: float = 0.0
    message: str | None = None
    output: Any = None
    error: str | None = None
    attempt: int = 0
    retry_count: int = 0
    lease_owner: str | None = None

    def row(self) -> dict[str, Any]:
        """The `tasks` projection fields the test compares (`leased`: a lease expiry is set)."""
        return {
            "task_id": self.task_id,
            "session_id": self.session_id,
            "type": self.type,
            "input": self.input,
            "parent": self.parent,
            "max_retries": self.max_retries,
            "status": self.status,
            "progress": self.progress,
            "message": self.message,
            "output": self.output,
            "error": self.error,
            "attempt": self.attempt,
            "retry_count": self.retry_count,
            "lease_owner": self.lease_owner,
            "leased": self.status == "running",
        }


# -- shapes ---------------------------------------------------------------------------------------


def _json_value_ok(value: Any) -> bool:
    if value is None or isinstance(value, bool | int):
        return True
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, str):
        return "\x00" not in value
    if isinstance(value, dict):
        return all(
            isinstance(k, str) and "\x00" not in k and _json_value_ok(v) for k, v in value.items()
        )
    if isinstance(value, list):
        return all(_json_value_ok(v) for v in value)
    return False


def _is_seq(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


def _is_count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _check_arg(ok: bool, what: str) -> None:
    if not ok:
        raise Rejected("InvalidArgument", f"bad {what}")


def _name_ok(value: Any) -> bool:
    return isinstance(value, str) and value != ""


def _shape_ok(type_: str, p: dict[str, Any]) -> bool:
    if type_ in ROLES:
        if not isinstance(p.get("content"), str):
            return False
        if "supersedes" in p and not _is_seq(p["supersedes"]):
            return False
        if "usage" in p and p["usage"] is not None:
            usage = p["usage"]
            return (
                type_ == "assistant_message"
                and isinstance(usage, dict)
                and all(
                    _is_count(usage.get(k, 0)) and usage.get(k, 0) <= 2**31 - 1
                    for k in ("prompt_tokens", "completion_tokens")
                )
            )
        return True
    if type_ == "tool_call":
        return (
            _name_ok(p.get("call_id"))
            and _name_ok(p.get("name"))
            and isinstance(p.get("arguments"), str)
        )
    if type_ == "tool_result":
        return (
            _name_ok(p.get("call_id"))
            and isinstance(p.get("content"), str)
            and isinstance(p.get("is_error", False), bool)
        )
    if type_ == "context_compacted":
        return isinstance(p.get("summary"), str) and _is_seq(p.get("until_seq"))
    if type_ == "session_created":
        return isinstance(p.get("title"), str)
    if type_ == "session_updated":
        return (
            bool({"title", "metadata", "status"} & p.keys())
            and p.get("status", "active") in STATUSES
        )
    return True


def check_key(key: Any) -> None:
    if key is not None and not (isinstance(key, str) and key != "" and "\x00" not in key):
        raise Rejected("InvalidEvent", f"bad idempotency key {key!r}")


def check_event(type_: Any, payload: Any, key: Any, *, limit: int, verb: bool = False) -> Ev:
    """The stateless checks: type, payload (an RFC 8259 object), shape, key, size."""
    if not isinstance(type_, str) or (
        type_ not in CORE and (len(type_) > 64 or not CUSTOM_TYPE.match(type_))
    ):
        raise Rejected("InvalidEvent", f"unknown type {type_!r}")
    if type_ in RESERVED and not verb:
        raise Rejected("InvalidEvent", f"{type_} is written by the verbs only")
    if not isinstance(payload, dict) or not _json_value_ok(payload):
        raise Rejected("InvalidEvent", "payload is not a JSON object")
    if not _shape_ok(type_, payload):
        raise Rejected("InvalidEvent", f"wrong shape for {type_}")
    check_key(key)
    size = len(json.dumps(payload, ensure_ascii=False, separators=(",", ":")).encode("utf-8"))
    if size > limit:
        raise Rejected("PayloadTooLarge", f"{size} > {limit}")
    return Ev(0, type_, copy.deepcopy(payload), key)


def same_json(a: Any, b: Any) -> bool:
    return json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)


# -- history rules --------------------------------------------------------------------------------


def _find(history: Sequence[Ev], seq: int) -> Ev | None:
    return history[seq - 1] if 1 <= seq <= len(history) else None


def _call_and_result(history: Sequence[Ev], call_id: str) -> tuple[Ev | None, Ev | None]:
    call = result = None
    for event in history:
        if event.payload.get("call_id") == call_id:
            if event.type == "tool_call":
                call = event
            elif event.type == "tool_result":
                result = event
    return call, result


def calls_open_at(history: Sequence[Ev], seq: int) -> list[str]:
    """Calls made at or before `seq` whose result is not at or before `seq`."""
    answered = {e.payload["call_id"] for e in history[:seq] if e.type == "tool_result"}
    return [
        e.payload["call_id"]
        for e in history[:seq]
        if e.type == "tool_call" and e.payload["call_id"] not in answered
    ]


def _check_against(history: list[Ev], status: str, event: Ev) -> str:
    """Raise if `event` (already numbered) may not follow `history`; return the new status."""
    p = event.payload
    if status == "deleted" and not (
        event.type == "session_updated" and p.get("status") == "active"
    ):
        raise Rejected("SessionClosed", "the session is deleted")
    if event.type == "session_updated" and "status" in p:
        status = p["status"]
    if event.type in ROLES and "supersedes" in p:
        target = _find(history, p["supersedes"])
        if target is None or target.type != event.type or "supersedes" in target.payload:
            raise Rejected("InvalidEvent", "supersedes must name an earlier original message")
    elif event.type == "tool_call":
        call, _ = _call_and_result(history, p["call_id"])
        if call is not None:
            raise Rejected("Conflict", "call_id reused")
    elif event.type == "tool_result":
        call, result = _call_and_result(history, p["call_id"])
        if call is None:
            raise Rejected("UnknownToolCall", "no such call")
        if result is not None:
            raise Rejected("Conflict", "second result")
    elif event.type == "context_compacted":
        until = p["until_seq"]
        floors = [e.payload["until_seq"] for e in history if e.type == "context_compacted"]
        if not (floors[-1] if floors else 0) <= until < event.seq:
            raise Rejected("InvalidEvent", "until_seq out of range")
        if calls_open_at(history, until):
            raise Rejected("InvalidEvent", "compaction would separate a call from its result")
    return status


# -- the journal ----------------------------------------------------------------------------------


class Reference:
    """One tenant's journal, as the docs state it, in memory."""

    def __init__(self, *, limit: int) -> None:
        self.limit = limit
        self.sessions: dict[str, RefSession] = {}
        self.session_keys: dict[str, str] = {}  # create / fork idempotency key -> session id
        self.writes = 0
        self.tasks: dict[str, RefTask] = {}  # the tenant's tasks, in creation order

    def session(self, session_id: str) -> RefSession:
        if session_id not in self.sessions:
            raise Rejected("SessionNotFound", session_id)
        return self.sessions[session_id]

    def _touch(self, session: RefSession) -> None:
        self.writes += 1
        session.activity = self.writes

    def create_session(
        self,
        session_id: str,
        title: str,
        *,
        model: str | None = None,
        system_prompt: str | None = None,
        key: str | None = None,
    ) -> tuple[str, bool]:
        payload: dict[str, Any] = {"title": title}
        if model is not None:
            payload["model"] = model
        if system_prompt is not None:
            payload["system_prompt"] = system_prompt
        event = check_event("session_created", payload, key, limit=self.limit, verb=True)
        if not SESSION_ID.match(session_id):
            raise Rejected("InvalidArgument", "bad session id")
        if key is not None and key in self.session_keys:
            # The docs are silent on the requested session_id of a retry: only the payload counts.
            existing = self.sessions[self.session_keys[key]]
            original = next(e for e in existing.events if e.key == key)
            if original.type != event.type or not same_json(original.payload, payload):
                raise Rejected("Conflict", "create key reused for another request")
            return existing.session_id, False
        if session_id in self.sessions:
            raise Rejected("Conflict", "session id taken")
        session = RefSession(session_id, [Ev(1, "session_created", event.payload, key)])
        self.sessions[session_id] = session
        if key is not None:
            self.session_keys[key] = session_id
        self._touch(session)
        return session_id, True

    def append_many(
        self,
        session_id: str,
        batch: Sequence[tuple[Any, Any, Any]],
        expected_seq: Any = None,
        *,
        verb: bool = False,
    ) -> tuple[list[Ev], bool]:
        """(type, payload, key) triples -> (the events, created). Retries return originals."""
        if not batch:
            raise Rejected("InvalidEvent", "empty batch")
        prepared = [check_event(t, p, k, limit=self.limit, verb=verb) for t, p, k in batch]
        if expected_seq is not None and not _is_count(expected_seq):
            raise Rejected("InvalidArgument", "expected_seq")
        session = self.session(session_id)
        keys = [e.key for e in prepared if e.key is not None]
        # Keys first (docs: "checked before expected_seq"), and before the deleted status: a
        # retry writes nothing, so a deleted session still answers it (docs are silent).
        found = {e.key: e for e in session.events if e.key is not None and e.key in keys}
        if found:
            # Docs: "A batch whose keys all match one earlier batch returns that batch; a partial
            # match writes nothing". Docs are silent on a batch whose keys all exist but come from
            # several earlier appends, or from part of one: like the library, the originals must be
            # one run of consecutive events in the order asked (a contiguous part of one append, or
            # appends that followed each other, is accepted).
            if len(found) != len(prepared) or any(e.key is None for e in prepared):
                raise Rejected("Conflict", "partial match of idempotency keys")
            originals = []
            for event in prepared:
                original = found[event.key]
                if original.type != event.type or not same_json(original.payload, event.payload):
                    raise Rejected("Conflict", "key reused with another payload")
                originals.append(original)
            # A retry repeats what it retries as it was: one run of consecutive events, in order.
            first = originals[0].seq
            if [e.seq for e in originals] != list(range(first, first + len(originals))):
                raise Rejected("Conflict", "keys of events that were not appended together")
            return originals, False
        if expected_seq is not None and expected_seq != session.last_seq:
            raise Rejected("Conflict", "expected_seq")
        if len(keys) != len(set(keys)):
            raise Rejected("InvalidEvent", "one key twice in a batch")
        history = list(session.events)
        status = session.status
        for event in prepared:
            numbered = Ev(len(history) + 1, event.type, event.payload, event.key)
            status = _check_against(history, status, numbered)
            history.append(numbered)
        new = history[session.last_seq :]
        session.events = history
        self._touch(session)
        return new, True

    def update_session(
        self,
        session_id: str,
        *,
        title: str | None = None,
        status: str | None = None,
        key: str | None = None,
    ) -> tuple[list[Ev], bool]:
        payload = {k: v for k, v in (("title", title), ("status", status)) if v is not None}
        check_event("session_updated", payload, key, limit=self.limit, verb=True)
        if not SESSION_ID.match(session_id):
            raise Rejected("InvalidArgument", "bad session id")
        update = [("session_updated", payload, key)]
        session = self.session(session_id)
        seen = key is not None and any(e.key == key for e in session.events)
        if status != "deleted" or seen or session.status == "deleted":
            # A key seen before makes a retry (the original returned) or a Conflict: either way
            # nothing is written, whatever the request asks for. Deleting a deleted session is
            # SessionClosed.
            return self.append_many(session_id, update, verb=True)
        # Docs: delete_session "cancels the session's open tasks in the same transaction". The
        # cancellations come first, in creation order, each with the reason "session deleted"
        # (docs are silent on both; the library's choice).
        doomed = [t for t in self.tasks.values() if t.session_id == session_id and t.status in OPEN]
        cancels = [
            ("task_cancelled", {"task_id": t.task_id, "reason": "session deleted"}, None)
            for t in doomed
        ]
        events = self.append_many(session_id, [*cancels, *update], verb=True)
        for task in doomed:
            self._end(task, "cancelled", error="session deleted")
        return events

    def fork(
        self,
        session_id: str,
        at_seq: int | None,
        new_id: str,
        *,
        title: str | None = None,
        key: str | None = None,
    ) -> tuple[str, bool]:
        """Fork into `new_id` (the id the real journal chose; a fork's id is not the caller's)."""
        if at_seq is not None and not _is_seq(at_seq):
            raise Rejected("InvalidArgument", "at_seq")
        check_key(key)
        if key is not None and key in self.session_keys:
            existing = self.sessions[self.session_keys[key]]
            original = next(e for e in existing.events if e.key == key)
            if (
                original.type != "session_forked"
                or original.payload["from_session_id"] != session_id
                or (at_seq is not None and original.payload["at_seq"] != at_seq)
            ):
                raise Rejected("Conflict", "fork key reused for another request")
            return existing.session_id, False
        parent = self.session(session_id)
        at = parent.last_seq if at_seq is None else at_seq
        if at > parent.last_seq:
            raise Rejected("InvalidArgument", "at_seq past the end")
        if calls_open_at(parent.events, at):
            raise Rejected("Conflict", "fork would leave a call without its result")
        # Copies: same seq, no idempotency keys. (Fork of a deleted session: docs are silent;
        # the copies carry the deletion, so the fork is deleted too, as in the library.)
        events = [Ev(e.seq, e.type, e.payload) for e in parent.events[:at]]
        events.append(
            Ev(at + 1, "session_forked", {"from_session_id": session_id, "at_seq": at}, key)
        )
        if title is not None:
            events.append(Ev(at + 2, "session_updated", {"title": title}))
        assert new_id not in self.sessions, new_id
        session = RefSession(new_id, events)
        self.sessions[new_id] = session
        if key is not None:
            self.session_keys[key] = new_id
        self._touch(session)
        return new_id, True

    # -- tasks (docs/concepts.md, "Tasks") ---------------------------------------------------------
    # The docs give no error for a bad argument; like the rest of the reference, a bad id, number or
    # flag is `InvalidArgument`, checked before anything is read (the library's order).

    def task(self, task_id: str) -> RefTask:
        _check_arg(SESSION_ID.match(task_id) is not None, "task_id")
        if task_id not in self.tasks:  # also another tenant's task: it is not this journal's
            raise Rejected("TaskNotFound", task_id)
        return self.tasks[task_id]

    def _write(self, task: RefTask, type_: str, fields: dict[str, Any]) -> None:
        """Append the event `type_` for `task` to its session (the task is not changed yet)."""
        payload = {"task_id": task.task_id, **fields}
        self.append_many(task.session_id, [(type_, payload, None)], verb=True)

    def _end(self, task: RefTask, status: str, *, error: str | None) -> None:
        task.status, task.error, task.lease_owner = status, error, None

    def create_task(
        self,
        session_id: str,
        type_: str,
        input_: Any,
        *,
        parent: str | None = None,
        max_retries: Any = 3,
        key: str | None = None,
    ) -> tuple[str, bool]:
        """-> (task id, created). A retry (same key, same request) returns the task it made."""
        _check_arg(SESSION_ID.match(session_id) is not None, "session_id")
        _check_arg(SESSION_ID.match(type_) is not None, "type")
        _check_arg(parent is None or SESSION_ID.match(parent) is not None, "parent_task_id")
        _check_arg(_is_count(max_retries), "max_retries")
        request: dict[str, Any] = {"type": type_, "input": input_, "max_retries": max_retries}
        if parent is not None:
            request["parent_task_id"] = parent
        # The payload's size counts the task id too; the test's inputs are small or far over the
        # limit, so the id's length never decides.
        check_event("task_created", {"task_id": "t0", **request}, key, limit=self.limit, verb=True)
        session = self.session(session_id)
        original = next((e for e in session.events if key is not None and e.key == key), None)
        if original is not None:
            # Checked before the parent and before the deleted status (docs are silent; as for
            # appends, a retry writes nothing so a deleted session still answers it).
            asked = {k: v for k, v in original.payload.items() if k != "task_id"}
            if original.type != "task_created" or not same_json(asked, request):
                raise Rejected("Conflict", "key reused for another request")
            return original.payload["task_id"], False
        if parent is not None and self.task(parent).session_id != session_id:
            raise Rejected("InvalidArgument", "a sub-task lives in its parent's session")
        number = len(self.tasks) + 1
        task_id = f"t{number}"
        payload = {"task_id": task_id, **request}
        self.append_many(session_id, [("task_created", payload, key)], verb=True)
        self.tasks[task_id] = RefTask(
            task_id, number, session_id, type_, copy.deepcopy(input_), parent, max_retries
        )
        return task_id, True

    def claim_task(self, worker: Any, types: Any, lease_seconds: Any) -> str | None:
        """The oldest pending task (of `types`) starts its next attempt under `worker`'s lease."""
        _check_arg(isinstance(worker, str) and worker != "" and worker.isprintable(), "worker")
        _check_arg(
            types is None
            or (
                isinstance(types, list)
                and types != []
                and all(isinstance(t, str) and SESSION_ID.match(t) for t in types)
            ),
            "types",
        )
        _check_arg(
            isinstance(lease_seconds, int | float)
            and not isinstance(lease_seconds, bool)
            and lease_seconds > 0,
            "lease_seconds",
        )
        pending = [
            t
            for t in self.tasks.values()
            if t.status == "pending" and (types is None or t.type in types)
        ]
        if not pending:
            return None
        task = min(pending, key=lambda t: t.number)
        attempt = task.attempt + 1
        fields = {"attempt": attempt, "worker": worker, "lease_seconds": float(lease_seconds)}
        self._write(task, "task_started", fields)
        task.status, task.attempt, task.lease_owner = "running", attempt, worker
        return task.task_id

    def _running(self, task_id: str, attempt: Any) -> RefTask:
        """A report names its attempt; only the running attempt may report (else Conflict)."""
        _check_arg(SESSION_ID.match(task_id) is not None, "task_id")
        _check_arg(_is_seq(attempt), "attempt")
        task = self.task(task_id)
        if task.status != "running":
            raise Rejected("Conflict", f"the task is {task.status}")
        if attempt != task.attempt:
            raise Rejected("Conflict", "a stale attempt")
        return task

    def task_progress(self, task_id: str, progress: Any, attempt: Any, message: Any) -> None:
        _check_arg(
            isinstance(progress, int | float)
            and not isinstance(progress, bool)
            and 0 <= progress <= 1,
            "progress",
        )
        _check_arg(message is None or isinstance(message, str), "message")
        task = self._running(task_id, attempt)
        fields: dict[str, Any] = {"attempt": attempt, "progress": float(progress)}
        if message is not None:
            fields["message"] = message
        self._write(task, "task_progress", fields)
        # The message is the latest report's: a report without one clears it (docs are silent).
        task.progress, task.message = float(progress), message

    def complete_task(self, task_id: str, attempt: Any, output: Any) -> None:
        # The output is checked as a payload after the task's state (docs are silent on the
        # order of Conflict and InvalidEvent; the library's).
        task = self._running(task_id, attempt)
        self._write(task, "task_completed", {"attempt": attempt, "output": output})
        # Completed means all done: progress 1.0. An earlier attempt's error stays (docs are
        # silent; the library's choice).
        self._end(task, "completed", error=task.error)
        task.output, task.progress = copy.deepcopy(output), 1.0

    def fail_task(self, task_id: str, attempt: Any, error: Any, retryable: Any) -> None:
        """Back to pending (one more retry counted) while the failure is retryable and
        `retry_count < max_retries`; otherwise failed for good, the count unchanged."""
        _check_arg(isinstance(error, str), "error")
        _check_arg(isinstance(retryable, bool), "retryable")
        task = self._running(task_id, attempt)
        retry = retryable and task.retry_count < task.max_retries
        count = task.retry_count + 1 if retry else task.retry_count
        fields = {"attempt": attempt, "error": error, "retry": retry, "retry_count": count}
        self._write(task, "task_failed", fields)
        self._end(task, "pending" if retry else "failed", error=error)
        task.retry_count = count

    def cancel_task(self, task_id: str, reason: Any) -> None:
        """The task and its open descendants (also below descendants that ended) are cancelled;
        a task that ended is a Conflict."""
        _check_arg(reason is None or isinstance(reason, str), "reason")
        task = self.task(task_id)
        if task.status not in OPEN:
            raise Rejected("Conflict", f"the task is {task.status}")

        def depth(t: RefTask) -> int | None:
            """How many parent links lead from `t` up to `task` (None: not below it)."""
            steps = 0
            while t.task_id != task.task_id:
                if t.parent is None:
                    return None
                t, steps = self.tasks[t.parent], steps + 1
            return steps

        below = [(depth(t), t) for t in self.tasks.values() if t.status in OPEN]
        # The docs are silent on the order of the cancellations: like the library, the deepest
        # first, and the newest first among tasks as deep.
        ranked = sorted((-d, -t.number, t.task_id) for d, t in below if d is not None)
        doomed = [self.tasks[ranked_id] for _, _, ranked_id in ranked]
        extra = {} if reason is None else {"reason": reason}
        batch = [("task_cancelled", {"task_id": t.task_id, **extra}, None) for t in doomed]
        self.append_many(task.session_id, batch, verb=True)
        for doomed_task in doomed:
            # The reason becomes the task's error, None without one (docs are silent).
            self._end(doomed_task, "cancelled", error=reason)

    def listed(self, status: str | None) -> list[str]:
        """`sessions(status=...)`: newest activity first; deleted ones only when asked for."""
        wanted = {None: ("active", "archived"), "deleted": ("deleted",), "all": STATUSES}[status]
        chosen = [s for s in self.sessions.values() if s.status in wanted]
        return [s.session_id for s in sorted(chosen, key=lambda s: -s.activity)]


# -- projections and the fold ---------------------------------------------------------------------


def tokens(content: str) -> int:
    return -(-len(content.encode("utf-8")) // 3) + 4


def messages(events: Sequence[Ev]) -> list[tuple[int, str, str, int]]:
    """The transcript: (seq, role, content, tokens) of each original, newest correction applied."""
    rows: dict[int, tuple[str, str]] = {}
    for event in events:
        if event.type not in ROLES:
            continue
        target = event.payload.get("supersedes")
        if target is None:
            rows[event.seq] = (ROLES[event.type], event.payload["content"])
        elif target in rows:
            rows[target] = (rows[target][0], event.payload["content"])
    return [(seq, role, text, tokens(text)) for seq, (role, text) in sorted(rows.items())]


def tool_calls(events: Sequence[Ev]) -> list[tuple[Any, ...]]:
    """(call_id, name, arguments, call_seq, status, result, result_seq) in call order."""
    rows = []
    for event in events:
        if event.type != "tool_call":
            continue
        p = event.payload
        _, result = _call_and_result(events, p["call_id"])
        if result is None:
            rows.append((p["call_id"], p["name"], p["arguments"], event.seq, "pending", None, None))
        else:
            status = "error" if result.payload.get("is_error") else "ok"
            rows.append(
                (
                    p["call_id"],
                    p["name"],
                    p["arguments"],
                    event.seq,
                    status,
                    result.payload["content"],
                    result.seq,
                )
            )
    return rows


def replay(
    events: Sequence[Ev], system_prompt: str | None, until: int | None = None
) -> list[dict[str, Any]]:
    """Replay in the OpenAI shape (docs/concepts.md)."""
    seen = [e for e in events if until is None or e.seq <= until]
    compactions = [e for e in seen if e.type == "context_compacted"]
    floor = compactions[-1].payload["until_seq"] if compactions else 0
    summary = compactions[-1].payload["summary"] if compactions else None
    visible = [e for e in seen if e.seq > floor]

    newest: dict[int, str] = {}
    results: dict[str, str] = {}
    for event in visible:
        if event.type in ROLES and "supersedes" in event.payload:
            newest[event.payload["supersedes"]] = event.payload["content"]
        elif event.type == "tool_result":
            results[event.payload["call_id"]] = event.payload["content"]

    # Turns: [role, content, calls]; calls are (call_id, name, arguments).
    turns: list[list[Any]] = []
    # What the last event replay shows was: an original assistant text, a call, or other. Types
    # replay ignores (custom, session_*, context_compacted) sit between without separating (docs
    # is silent; the runtime writes text and calls in one batch, so nothing comes between there).
    last = "other"
    for event in visible:
        p = event.payload
        if event.type in ROLES:
            if "supersedes" in p:
                last = "other"
                continue
            turns.append([ROLES[event.type], newest.get(event.seq, p["content"]), []])
            last = "text" if event.type == "assistant_message" else "other"
        elif event.type == "tool_call":
            call = (p["call_id"], p["name"], p["arguments"])
            if last in ("text", "call"):
                turns[-1][2].append(call)
            else:
                turns.append(["assistant", None, [call]])
            last = "call"
        elif event.type == "tool_result":
            last = "other"

    out: list[dict[str, Any]] = []
    # An empty system prompt or summary gives no message (docs are silent).
    if system_prompt:
        out.append({"role": "system", "content": system_prompt})
    if summary:
        out.append({"role": "system", "content": summary})
    for role, content, calls in turns:
        answered = [c for c in calls if c[0] in results]
        if not calls or (not answered and content is not None):
            out.append({"role": role, "content": content})
        elif answered:
            out.append(
                {
                    "role": "assistant",
                    "content": content,
                    "tool_calls": [
                        {"id": i, "type": "function", "function": {"name": n, "arguments": a}}
                        for i, n, a in answered
                    ],
                }
            )
        out.extend(
            {"role": "tool", "tool_call_id": c[0], "content": results[c[0]]} for c in answered
        )
    return out
