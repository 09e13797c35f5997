"""The model-based test: random histories, applied to a real journal and to a reference.

Each step sends one request (an append, a batch, a retry, a compaction, a fork, a delete...) to a
`Journal` on a fresh SQLite file and to `reference_journal.Reference`, which is written from
DESIGN.md and imports nothing from agentjournal. Both must answer alike: the same error class, or
the same events. After every step the session's events, transcript, tool calls, session row and
replay (whole, and as of a seq) must agree, and the session list must be in the same order.

`CI=1` runs 500 examples; otherwise 100.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import hypothesis
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from agentjournal import Journal, NewEvent
from reference_journal import (
    ROLES,
    Ev,
    Reference,
    Rejected,
    calls_open_at,
    check_event,
    messages,
    replay,
    tool_calls,
)

T = TypeVar("T")

LIMIT = 512  # max_payload_bytes of the journal under test, so PayloadTooLarge is reachable
EVERYTHING = 10_000

TEXT = st.text(alphabet="ab 你\n", max_size=4)
# None twice: most events carry no key.
KEYS = st.one_of(st.none(), st.none(), st.sampled_from(["k1", "k2", "k3", "k4", "k5", "k6"]))
SESSION_KEYS = st.one_of(st.none(), st.sampled_from(["sk1", "sk2", "sk3"]))
PROMPTS = st.sampled_from([None, "", "You are terse."])
CALL_IDS = [f"c{i}" for i in range(1, 10)]

_FITS = LIMIT - len('{"content":""}')
BAD_EVENTS: list[tuple[Any, Any]] = [
    ("user_message", {}),
    ("user_message", {"content": 5}),
    ("assistant_message", {"content": None}),
    ("user_message", {"content": "x", "usage": {"prompt_tokens": 1}}),
    ("assistant_message", {"content": "x", "usage": {"prompt_tokens": -1}}),
    ("assistant_message", {"content": "x", "usage": "lots"}),
    ("user_message", {"content": "x", "supersedes": 0}),
    ("user_message", {"content": "x", "supersedes": True}),
    ("system_message", {"content": "x", "supersedes": "2"}),
    ("tool_call", {"call_id": "", "name": "f", "arguments": "{}"}),
    ("tool_call", {"call_id": "c1", "arguments": "{}"}),
    ("tool_call", {"call_id": "c1", "name": "f", "arguments": {"id": 1}}),
    ("tool_result", {"call_id": "c1"}),
    ("tool_result", {"call_id": "c1", "content": "r", "is_error": "yes"}),
    ("context_compacted", {"summary": "s", "until_seq": 0}),
    ("context_compacted", {"until_seq": 1}),
    ("user_message", {"content": "a\x00b"}),
    ("user_message", {"content\x00": "a"}),
    ("myapp.note", {"x": float("nan")}),
    ("myapp.note", {"x": [float("inf")]}),
    ("myapp.note", {1: "a key that is not a string"}),
    ("Bad.Type", {}),
    ("note", {}),
    ("myapp", {}),
    ("a." + "b" * 63, {}),
    (None, {}),
    ("session_created", {"title": "x"}),
    ("session_updated", {"status": "active"}),
    ("session_forked", {"from_session_id": "s0", "at_seq": 1}),
    ("task_created", {"task_id": "t1"}),
    ("task_completed", {"task_id": "t1"}),
    ("user_message", ["content"]),
    ("user_message", "text"),
    ("user_message", {"content": "x" * (_FITS + 1)}),  # one byte over: PayloadTooLarge
    ("myapp.blob", {"blob": "你" * LIMIT}),
]
EDGE_EVENTS: list[tuple[str, dict[str, Any]]] = [
    ("user_message", {"content": "x" * _FITS}),  # exactly at the limit: accepted
    ("user_message", {"content": "hi", "extra": {"nested": [1, 2.5, None, True]}}),
    ("myapp.note", {"n": 1, "l": [1, 2.5, None, True, "你"]}),
    ("a.b_c.d", {}),
    ("assistant_message", {"content": "", "usage": {}}),
]


def run_real(call: Callable[[], T]) -> tuple[T | None, str | None]:
    try:
        return call(), None
    except Exception as exc:  # compared by class name with the reference's verdict
        return None, type(exc).__name__


def run_ref(call: Callable[[], T]) -> tuple[T | None, str | None]:
    try:
        return call(), None
    except Rejected as exc:
        return None, exc.kind


def view(event: Any) -> tuple[int, str, dict[str, Any], str | None]:
    if isinstance(event, Ev):
        return (event.seq, event.type, event.payload, event.key)
    return (event.seq, event.type, event.payload, event.idempotency_key)


class JournalMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.tmp = tempfile.mkdtemp(prefix="agentjournal-model-")
        self.journal = Journal.open(Path(self.tmp) / "journal.db", max_payload_bytes=LIMIT)
        self.ref = Reference(limit=LIMIT)
        self.ids: list[str] = []
        self.sent: list[tuple[str, list[tuple[Any, Any, Any]], Any]] = []  # keyed requests
        self.event_ids: dict[tuple[str, int], int] = {}
        self.created_at: dict[tuple[str, int], int] = {}
        self.newest_id = 0
        self.step = 0

    def teardown(self) -> None:
        self.journal.close()
        shutil.rmtree(self.tmp, ignore_errors=True)

    # -- helpers ----------------------------------------------------------------------------

    def agree(
        self, real: Callable[[], T], ref: Callable[[], Any], what: str, *, label: str = ""
    ) -> tuple[T | None, Any]:
        """Run both; they must fail with the same error class or both succeed."""
        counts = {sid: s.last_seq for sid, s in self.ref.sessions.items()}
        sessions = len(self.ref.sessions)
        real_result, real_error = run_real(real)
        ref_result, ref_error = run_ref(ref)
        assert real_error == ref_error, f"{what}: journal raised {real_error}, DESIGN {ref_error}"
        hypothesis.event(f"{label or what}: {real_error or 'ok'}")  # --hypothesis-show-statistics
        if real_error is not None:
            # A rejected request writes nothing.
            assert len(self.journal.sessions(status="all", limit=EVERYTHING)) == sessions, what
            for sid, count in counts.items():
                assert self.journal.get_session(sid).last_seq == count, what
        return real_result, ref_result

    def observe(self, events: list[Any], created: bool) -> None:
        """Record ids of events the journal returned: new ones are new, retries are the same."""
        for event in events:
            where = (event.session_id, event.seq)
            assert event.position == str(event.event_id)
            if created:
                assert event.event_id > self.newest_id, "event ids grow in commit order"
                self.newest_id = event.event_id
                self.event_ids[where] = event.event_id
                self.created_at[where] = event.created_at
            else:
                assert self.event_ids[where] == event.event_id, "a retry returns the original"

    def learn_session(self, session_id: str) -> None:
        """Record the ids of a session the journal created without returning its events."""
        for event in self.journal.events(session_id, limit=EVERYTHING):
            self.observe([event], created=True)

    def expected_seq(self, data: st.DataObject, last: int) -> int | None:
        choice = data.draw(st.sampled_from(["none", "none", "last", "other"]), "expected_seq")
        if choice == "none":
            return None
        if choice == "last":
            return last
        return data.draw(st.integers(-1, last + 2), "expected_seq value")

    def pick(self, data: st.DataObject) -> str:
        return data.draw(st.sampled_from(self.ids), "session")

    def draw_event(self, data: st.DataObject, history: list[Ev]) -> tuple[Any, Any]:
        kind = data.draw(
            st.sampled_from(
                ["user"] * 3
                + ["assistant"] * 3
                + ["system", "custom", "compact", "edge"]
                + ["call"] * 3
                + ["result"] * 3
                + ["correction"] * 2
                + ["bad"] * 2
            ),
            "kind",
        )
        text = data.draw(TEXT, "text")
        if kind == "user":
            return "user_message", {"content": text}
        if kind == "assistant":
            payload: dict[str, Any] = {"content": text}
            if data.draw(st.booleans(), "with usage"):
                payload["usage"] = {
                    "prompt_tokens": data.draw(st.integers(0, 50)),
                    "completion_tokens": data.draw(st.integers(0, 50)),
                }
            return "assistant_message", payload
        if kind == "system":
            return "system_message", {"content": text}
        if kind == "custom":
            return "myapp.note", {"text": text}
        if kind == "edge":
            return data.draw(st.sampled_from(EDGE_EVENTS), "edge event")
        if kind == "bad":
            return data.draw(st.sampled_from(BAD_EVENTS), "bad event")
        if kind == "call":
            used = {e.payload["call_id"] for e in history if e.type == "tool_call"}
            fresh = [c for c in CALL_IDS if c not in used]
            reuse = used and (not fresh or data.draw(st.integers(0, 6), "reuse") == 0)
            call_id = data.draw(st.sampled_from(sorted(used) if reuse else fresh), "call_id")
            name = data.draw(st.sampled_from(["lookup", "query_order_count"]))
            arguments = data.draw(st.sampled_from(["{}", '{"id": 7}', ""]))
            return "tool_call", {"call_id": call_id, "name": name, "arguments": arguments}
        if kind == "result":
            calls = [e.payload["call_id"] for e in history if e.type == "tool_call"]
            open_ = calls_open_at(history, len(history))
            choices = open_ * 4 + calls + ["c-unknown"]
            payload = {
                "call_id": data.draw(st.sampled_from(choices), "result for"),
                "content": text,
            }
            is_error = data.draw(st.sampled_from([None, False, True]), "is_error")
            if is_error is not None:
                payload["is_error"] = is_error
            return "tool_result", payload
        if kind == "correction":
            type_ = data.draw(st.sampled_from(sorted(ROLES)), "corrected type")
            originals = [
                e.seq for e in history if e.type == type_ and "supersedes" not in e.payload
            ]
            if originals and data.draw(st.integers(0, 3), "valid target") > 0:
                target = data.draw(st.sampled_from(originals), "supersedes")
            else:
                target = data.draw(st.integers(1, len(history) + 2), "supersedes")
            return type_, {"content": text, "supersedes": target}
        # compact, via append
        return "context_compacted", {
            "summary": text,
            "until_seq": self.draw_until(data, history),
        }

    def draw_until(self, data: st.DataObject, history: list[Ev]) -> int:
        floors = [e.payload["until_seq"] for e in history if e.type == "context_compacted"]
        low = floors[-1] if floors else 0
        valid = [s for s in range(max(low, 1), len(history) + 1) if not calls_open_at(history, s)]
        if valid and data.draw(st.booleans(), "valid until"):
            return data.draw(st.sampled_from(valid), "until_seq")
        return data.draw(st.integers(-1, len(history) + 1), "until_seq")

    def draw_batch(self, data: st.DataObject, session_id: str, size: int) -> list[Any]:
        history = list(self.ref.sessions[session_id].events)
        batch = []
        for _ in range(size):
            type_, payload = self.draw_event(data, history)
            key = data.draw(KEYS, "key")
            batch.append((type_, payload, key))
            try:  # later events of the batch may build on this one (a result for its call)
                event = check_event(type_, payload, key, limit=LIMIT)
                history.append(Ev(len(history) + 1, event.type, event.payload, key))
            except Rejected:
                pass
        return batch

    def send(
        self,
        data: st.DataObject,
        session_id: str,
        batch: list[tuple[Any, Any, Any]],
        expected_seq: Any,
        what: str,
    ) -> None:
        """Append `batch` (one event through `append`, or any through `append_many`)."""
        if len(batch) == 1 and data.draw(st.booleans(), "through append"):
            type_, payload, key = batch[0]

            def real() -> tuple[list[Any], bool]:
                event = self.journal.append(
                    session_id, type_, payload, idempotency_key=key, expected_seq=expected_seq
                )
                return [event], event.event_id not in self.event_ids.values()

        else:
            form = data.draw(st.sampled_from(["NewEvent", "dict"]), "batch form")
            items: list[Any] = [
                NewEvent(t, p, k)
                if form == "NewEvent"
                else {"type": t, "payload": p, "idempotency_key": k}
                for t, p, k in batch
            ]

            def real() -> tuple[list[Any], bool]:
                events = self.journal.append_many(session_id, items, expected_seq=expected_seq)
                known = set(self.event_ids.values())
                return events, not any(e.event_id in known for e in events)

        got, want = self.agree(
            real,
            lambda: self.ref.append_many(session_id, batch, expected_seq),
            f"{what} {batch!r} expected_seq={expected_seq}",
            label=what,
        )
        if any(k is not None for _, _, k in batch):
            self.sent.append((session_id, batch, expected_seq))
        if got is None:
            return
        real_events, real_created = got
        ref_events, ref_created = want
        assert [view(e) for e in real_events] == [view(e) for e in ref_events]
        assert real_created == ref_created, "a retry must return the originals, not new events"
        self.observe(real_events, real_created)

    # -- rules ------------------------------------------------------------------------------

    @initialize(prompt=PROMPTS, title=TEXT)
    def first_session(self, prompt: str | None, title: str) -> None:
        self.create("s0", title, prompt, None, None)

    def create(
        self, session_id: str, title: str, prompt: str | None, model: str | None, key: str | None
    ) -> None:
        got, want = self.agree(
            lambda: self.journal.create_session_ex(
                title, model=model, system_prompt=prompt, session_id=session_id, idempotency_key=key
            ),
            lambda: self.ref.create_session(
                session_id, title, model=model, system_prompt=prompt, key=key
            ),
            f"create_session({session_id!r}, key={key!r})",
            label="create_session",
        )
        if got is None:
            return
        session, created = got
        assert (session.session_id, created) == want
        if created:
            self.ids.append(session.session_id)
            self.learn_session(session.session_id)

    @rule(
        data=st.data(),
        title=TEXT,
        prompt=PROMPTS,
        model=st.sampled_from([None, "m1"]),
        key=SESSION_KEYS,
    )
    def create_session(
        self, data: st.DataObject, title: str, prompt: str | None, model: str | None, key: Any
    ) -> None:
        fresh = f"s{len(self.ids)}"
        session_id = data.draw(st.sampled_from([fresh, fresh, "bad id!", *self.ids]), "id")
        self.create(session_id, title, prompt, model, key)

    @rule(data=st.data())
    def append_one(self, data: st.DataObject) -> None:
        session_id = self.pick(data)
        batch = self.draw_batch(data, session_id, 1)
        last = self.ref.sessions[session_id].last_seq
        self.send(data, session_id, batch, self.expected_seq(data, last), "append")

    @rule(data=st.data(), size=st.integers(0, 4))
    def append_batch(self, data: st.DataObject, size: int) -> None:
        session_id = self.pick(data)
        batch = self.draw_batch(data, session_id, size)
        last = self.ref.sessions[session_id].last_seq
        self.send(data, session_id, batch, self.expected_seq(data, last), "append_many")

    @precondition(lambda self: self.sent)
    @rule(
        data=st.data(),
        variant=st.sampled_from(
            [
                "same",
                "same",
                "no expected_seq",
                "current expected_seq",
                "other payload",
                "other type",
                "fewer",
                "one more keyed",
                "one more unkeyed",
                "reversed",
                "other session",
            ]
        ),
    )
    def retry(self, data: st.DataObject, variant: str) -> None:
        session_id, batch, expected_seq = data.draw(st.sampled_from(self.sent), "earlier request")
        batch = list(batch)
        if variant == "no expected_seq":
            expected_seq = None
        elif variant == "current expected_seq":
            expected_seq = self.ref.sessions[session_id].last_seq
        elif variant == "other payload":
            index = data.draw(st.integers(0, len(batch) - 1))
            type_, payload, key = batch[index]
            changed = {**payload, "retry": 1} if isinstance(payload, dict) else {"retry": 1}
            batch[index] = (type_, changed, key)
        elif variant == "other type":
            index = data.draw(st.integers(0, len(batch) - 1))
            _, payload, key = batch[index]
            batch[index] = ("myapp.note", payload, key)
        elif variant == "fewer" and len(batch) > 1:
            batch = batch[:-1]
        elif variant == "one more keyed":
            batch.append(("user_message", {"content": "more"}, f"fresh{self.step}"))
        elif variant == "one more unkeyed":
            batch.append(("user_message", {"content": "more"}, None))
        elif variant == "reversed":
            batch.reverse()
        elif variant == "other session":
            session_id = self.pick(data)
        self.send(data, session_id, batch, expected_seq, f"retry ({variant})")

    @rule(data=st.data())
    def compact(self, data: st.DataObject) -> None:
        session_id = self.pick(data)
        history = self.ref.sessions[session_id].events
        until = self.draw_until(data, history)
        summary = data.draw(TEXT, "summary")
        key = data.draw(KEYS, "key")
        got, want = self.agree(
            lambda: self.journal.compact(session_id, until, summary, idempotency_key=key),
            lambda: self.ref.append_many(
                session_id, [("context_compacted", {"summary": summary, "until_seq": until}, key)]
            ),
            f"compact({session_id!r}, until_seq={until})",
            label="compact",
        )
        if key is not None:
            payload = {"summary": summary, "until_seq": until}
            self.sent.append((session_id, [("context_compacted", payload, key)], None))
        if got is not None:
            events, created = want
            assert [view(got)] == [view(e) for e in events]
            self.observe([got], created)

    @rule(
        data=st.data(),
        action=st.sampled_from(
            ["delete", "delete", "undelete", "undelete", "archive", "rename", "nothing", "bogus"]
        ),
        title=TEXT,
    )
    def update(self, data: st.DataObject, action: str, title: str) -> None:
        session_id = self.pick(data)
        key = data.draw(KEYS, "key")
        status = {"delete": "deleted", "undelete": "active", "archive": "archived"}.get(action)
        status = "closed" if action == "bogus" else status
        new_title = title if action == "rename" else None

        def real() -> Any:
            if action == "delete" and key is None:
                return self.journal.delete_session(session_id)
            return self.journal.update_session(
                session_id, title=new_title, status=status, idempotency_key=key
            )

        self.agree(
            real,
            lambda: self.ref.update_session(session_id, title=new_title, status=status, key=key),
            f"update_session({session_id!r}, {action}, key={key!r})",
            label=f"update ({action})",
        )
        self.learn_new(session_id)

    def learn_new(self, session_id: str) -> None:
        known = self.event_ids.keys()
        for event in self.journal.events(session_id, limit=EVERYTHING):
            if (session_id, event.seq) not in known:
                self.observe([event], created=True)

    @rule(
        data=st.data(),
        title=st.one_of(st.none(), TEXT),
        key=SESSION_KEYS,
    )
    def fork(self, data: st.DataObject, title: str | None, key: str | None) -> None:
        parent = self.pick(data)
        history = self.ref.sessions[parent].events
        closed = [s for s in range(1, len(history) + 1) if not calls_open_at(history, s)]
        at_seq = data.draw(
            st.one_of(
                st.none(),
                st.sampled_from(closed),
                st.integers(0, len(history) + 1),
            ),
            "at_seq",
        )
        got, real_error = run_real(
            lambda: self.journal.fork(parent, at_seq, title=title, idempotency_key=key)
        )
        new_id = got.session_id if got is not None else "not-created"
        fresh = new_id not in self.ref.sessions
        want, ref_error = run_ref(
            lambda: self.ref.fork(
                parent, at_seq, new_id if fresh else "not-created", title=title, key=key
            )
        )
        what = f"fork({parent!r}, at_seq={at_seq}, key={key!r})"
        assert real_error == ref_error, f"{what}: journal raised {real_error}, DESIGN {ref_error}"
        hypothesis.event(f"fork: {real_error or 'ok'}")
        if got is None:
            assert len(self.journal.sessions(status="all", limit=EVERYTHING)) == len(self.ids)
            return
        assert (new_id, fresh) == want, f"{what}: a retry returns the fork it made"
        if not fresh:
            return
        self.ids.append(new_id)
        at = self.ref.sessions[new_id].row()["forked_at_seq"]
        copies = self.journal.events(new_id, limit=EVERYTHING)
        for copy in copies[:at]:
            original = (parent, copy.seq)
            assert copy.created_at == self.created_at[original], "a copy keeps its created_at"
            assert copy.idempotency_key is None
        self.observe(copies, created=True)
        assert self.journal.replay(new_id, until=at) == self.journal.replay(parent, until=at)

    @rule(
        verb=st.sampled_from(
            [
                "append",
                "append_many",
                "events",
                "messages",
                "tool_calls",
                "replay",
                "fork",
                "update",
            ]
        )
    )
    def missing_session(self, verb: str) -> None:
        calls: dict[str, Callable[[], Any]] = {
            "append": lambda: self.journal.append("nobody", "user_message", {"content": "x"}),
            "append_many": lambda: self.journal.append_many(
                "nobody", [NewEvent("user_message", {"content": "x"})]
            ),
            "events": lambda: self.journal.events("nobody"),
            "messages": lambda: self.journal.messages("nobody"),
            "tool_calls": lambda: self.journal.tool_calls("nobody"),
            "replay": lambda: self.journal.replay("nobody"),
            "fork": lambda: self.journal.fork("nobody"),
            "update": lambda: self.journal.update_session("nobody", title="x"),
        }
        self.agree(
            calls[verb], lambda: self.ref.session("nobody"), f"{verb} of nobody", label="missing"
        )

    @rule(
        data=st.data(),
        events=st.sampled_from(
            [
                [{"type": "user_message", "payload": {"content": "x"}, "extra": 1}],
                ["user_message"],
                {"type": "user_message", "payload": {"content": "x"}},
                "user_message",
            ]
        ),
    )
    def malformed_batch(self, data: st.DataObject, events: Any) -> None:
        session_id = self.pick(data)

        def wrong_shape() -> None:
            raise Rejected("InvalidEvent", "append_many takes a list of event objects")

        self.agree(
            lambda: self.journal.append_many(session_id, events),
            wrong_shape,
            f"{events!r}",
            label="malformed",
        )

    # -- what must hold after every step -----------------------------------------------------

    @invariant()
    def journal_matches_reference(self) -> None:
        self.step += 1
        for session_id in self.ids:
            self.check_session(session_id)
        for status in (None, "deleted", "all"):
            listed = self.journal.sessions(status=status, limit=EVERYTHING)
            assert [s.session_id for s in listed] == self.ref.listed(status), status
        if self.step % 5 == 0:
            feed = self.journal.events_all(limit=EVERYTHING)
            assert len(feed) == sum(s.last_seq for s in self.ref.sessions.values())
            ids = [e.event_id for e in feed]
            assert ids == sorted(set(ids)), "the global feed is in commit order, no repeats"

    def check_session(self, session_id: str) -> None:
        ref = self.ref.sessions[session_id]
        events = self.journal.events(session_id, limit=EVERYTHING)
        assert [view(e) for e in events] == [view(e) for e in ref.events]
        for event in events:
            assert self.event_ids[(session_id, event.seq)] == event.event_id, "events never change"

        expected_messages = messages(ref.events)
        got = [(m.seq, m.role, m.content, m.tokens) for m in self.journal.messages(session_id)]
        assert got == expected_messages
        last = 1 + self.step % 4
        tail = self.journal.messages(session_id, last=last)
        assert [(m.seq, m.role, m.content, m.tokens) for m in tail] == expected_messages[-last:]

        calls = [
            (c.call_id, c.name, c.arguments, c.call_seq, c.status, c.result, c.result_seq)
            for c in self.journal.tool_calls(session_id)
        ]
        assert calls == tool_calls(ref.events)

        row = self.journal.get_session(session_id)
        expected_row = ref.row()
        assert {k: getattr(row, k) for k in expected_row} == expected_row

        prompt = expected_row["system_prompt"]
        assert self.journal.replay(session_id) == replay(ref.events, prompt)
        until = 1 + (self.step * 7) % (ref.last_seq + 1)
        assert self.journal.replay(session_id, until=until) == replay(ref.events, prompt, until)

        after, limit = (self.step * 3) % (ref.last_seq + 1), 1 + self.step % 5
        page = self.journal.events(session_id, after=after, limit=limit)
        assert [view(e) for e in page] == [view(e) for e in ref.events[after : after + limit]]


JournalMachine.TestCase.settings = settings(
    max_examples=500 if os.environ.get("CI") else 100,
    stateful_step_count=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestJournalModel = JournalMachine.TestCase
