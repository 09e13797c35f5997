"""The journal's contract (DESIGN.md, "The journal") through the public `Journal` API.

Every test takes the `journal` fixture, so every backend runs the same suite. A rejected call must
write nothing: `rejected()` compares everything the public API can see, for two tenants, before
and after. Raw SQL against the database (append-only triggers, purge, corrupting projections for
verify) lives in the tests that take the `raw` fixture; it runs on both backends too.
"""

from __future__ import annotations

import random
import sqlite3
import threading
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import psycopg
import pytest
from psycopg import sql

from agentjournal import (
    Conflict,
    ContextTooLarge,
    Event,
    InvalidArgument,
    InvalidEvent,
    Journal,
    JournalError,
    NewEvent,
    PayloadTooLarge,
    SessionClosed,
    SessionNotFound,
    StorageError,
    UnknownToolCall,
)
from agentjournal.events import RESERVED_TYPES
from agentjournal.replay import estimate_tokens
from expected import SEED_MESSAGES, a, settled_feed, t, u
from postgres_fixtures import ADMIN_URL, HOST, ROLE, fresh_schema, require_postgres, url_for
from test_events import VALID

PROMPT = "你是订单客服助手。"
USAGE = {"prompt_tokens": 120, "completion_tokens": 12}

# The seed's order conversation: seq 2-7 after session_created, each with its own key.
SEED = [
    NewEvent("user_message", {"content": "你好"}, "k2"),
    NewEvent(
        "assistant_message", {"content": "你好！我是订单客服助手，可以帮你查询订单数量。"}, "k3"
    ),
    NewEvent("user_message", {"content": "帮我查一下订单数量"}, "k4"),
    NewEvent(
        "tool_call", {"call_id": "call_1", "name": "query_order_count", "arguments": "{}"}, "k5"
    ),
    NewEvent("tool_result", {"call_id": "call_1", "content": "42"}, "k6"),
    NewEvent("assistant_message", {"content": "你当前有 42 个订单。", "usage": USAGE}, "k7"),
]


def sys_(text: str) -> dict[str, Any]:
    return {"role": "system", "content": text}


SEED_REPLAY = [sys_(PROMPT), *SEED_MESSAGES]


def seed(journal: Journal, title: str = "订单客服") -> str:
    """A session holding the seed's conversation at seq 1-7, appended one event at a time."""
    sid = journal.create_session(title, model="scripted", system_prompt=PROMPT).session_id
    for event in SEED:
        journal.append(sid, event.type, event.payload, idempotency_key=event.idempotency_key)
    return sid


def msg(type_: str, content: str, key: str | None = None, **extra: Any) -> dict[str, Any]:
    event: dict[str, Any] = {"type": type_, "payload": {"content": content, **extra}}
    if key is not None:
        event["idempotency_key"] = key
    return event


def call(call_id: str, name: str = "query_order_count", arguments: str = "{}") -> dict[str, Any]:
    return {
        "type": "tool_call",
        "payload": {"call_id": call_id, "name": name, "arguments": arguments},
    }


def result(call_id: str, content: str, **extra: Any) -> dict[str, Any]:
    return {"type": "tool_result", "payload": {"call_id": call_id, "content": content, **extra}}


def state(journal: Journal) -> dict[str, Any]:
    """Everything the public API shows, for the journal's tenant and for tenant "b"."""
    seen: dict[str, Any] = {}
    for tenant in ("default", "b"):
        view = journal.for_tenant(tenant)
        seen[tenant] = (
            settled_feed(view),
            [
                (
                    s,
                    view.events(s.session_id, limit=10_000),
                    view.messages(s.session_id),
                    view.tool_calls(s.session_id),
                )
                for s in view.sessions(status="all", limit=10_000)
            ],
        )
    return seen


def rejected(
    journal: Journal, error: type[Exception], action: Callable[[], object], match: str | None = None
) -> Any:
    """Run `action`, expect `error`, and check that nothing at all was written."""
    before = state(journal)
    with pytest.raises(error, match=match) as caught:
        action()
    assert state(journal) == before
    return caught.value


class RawSQL:
    """Plain SQL on a journal's database, as any other program could send it: a sqlite3
    connection to the SQLite file, or a PostgreSQL superuser's connection to the journal's schema
    (a superuser bypasses row-level security, which suits corrupting rows; triggers still fire).
    Statements mark their parameters with `?` on both."""

    def __init__(self, backend: str, url: str) -> None:
        self.backend = backend
        self.IntegrityError: type[Exception]  # as sqlite3 connections name it
        self._conn: Any
        if backend == "sqlite":
            self._conn = sqlite3.connect(url, isolation_level=None)
            self._conn.execute("PRAGMA busy_timeout = 10000")
            self.IntegrityError = sqlite3.IntegrityError
        else:
            schema = parse_qs(urlsplit(url).query)["schema"][0]
            self._conn = psycopg.connect(ADMIN_URL, autocommit=True)
            self._conn.execute(sql.SQL("SET search_path TO {}").format(sql.Identifier(schema)))
            self.IntegrityError = psycopg.IntegrityError

    def execute(self, statement: str, params: Sequence[Any] = ()) -> Any:
        """Run one statement (in a transaction of its own unless `begin()` opened one)."""
        if self.backend == "sqlite":
            return self._conn.execute(statement, params)
        return self._conn.execute(statement.replace("?", "%s"), params or None)

    def begin(self) -> None:
        self.execute("BEGIN IMMEDIATE" if self.backend == "sqlite" else "BEGIN")

    def commit(self) -> None:
        self.execute("COMMIT")

    def rollback(self) -> None:
        """End the open transaction, if a failed COMMIT left one (SQLite does; PostgreSQL not)."""
        if self.backend == "sqlite":
            open_ = self._conn.in_transaction
        else:
            open_ = self._conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE
        if open_:
            self.execute("ROLLBACK")

    def columns(self, table: str) -> list[str]:
        if self.backend == "sqlite":
            return [row[1] for row in self.execute(f"PRAGMA table_info({table})")]
        rows = self.execute(
            "SELECT column_name FROM information_schema.columns"
            " WHERE table_schema = current_schema() AND table_name = ? ORDER BY ordinal_position",
            (table,),
        )
        return [row[0] for row in rows]

    def close(self) -> None:
        self._conn.close()


@pytest.fixture
def raw(backend: str, journal: Journal, journal_url: str) -> Iterator[RawSQL]:
    """Plain SQL on the database of the `journal` fixture."""
    conn = RawSQL(backend, journal_url)
    yield conn
    conn.close()


# === errors: SessionNotFound ======================================================================

VERBS: dict[str, Callable[[Journal, str], object]] = {
    "get_session": lambda j, s: j.get_session(s),
    "update_session": lambda j, s: j.update_session(s, title="x"),
    "archive": lambda j, s: j.update_session(s, status="archived"),
    "undelete": lambda j, s: j.update_session(s, status="active"),
    "delete_session": lambda j, s: j.delete_session(s),
    "purge_session": lambda j, s: j.purge_session(s),
    "append": lambda j, s: j.append(s, "user_message", {"content": "hi"}),
    "append_retry": lambda j, s: j.append(
        s, "user_message", {"content": "你好"}, idempotency_key="k2"
    ),
    "append_expected_seq": lambda j, s: j.append(
        s, "user_message", {"content": "hi"}, expected_seq=7
    ),
    "append_many": lambda j, s: j.append_many(s, [msg("user_message", "hi")]),
    "append_custom": lambda j, s: j.append(s, "myapp.note", {"x": 1}),
    "tool_result": lambda j, s: j.append(s, "tool_result", {"call_id": "call_1", "content": "x"}),
    "compact": lambda j, s: j.compact(s, 6, "summary"),
    "fork": lambda j, s: j.fork(s, 4),
    "fork_whole": lambda j, s: j.fork(s),
    "events": lambda j, s: j.events(s),
    "events_page": lambda j, s: j.events(s, after=2, limit=2),
    "messages": lambda j, s: j.messages(s),
    "messages_last": lambda j, s: j.messages(s, last=2),
    "tool_calls": lambda j, s: j.tool_calls(s),
    "replay": lambda j, s: j.replay(s),
    "replay_until": lambda j, s: j.replay(s, until=4),
    "replay_anthropic": lambda j, s: j.replay(s, format="anthropic"),
    "context": lambda j, s: j.context(s, max_tokens=100_000),
    "subscribe": lambda j, s: next(j.subscribe(s)),
}


@pytest.mark.parametrize("verb", sorted(VERBS))
def test_unknown_session_is_session_not_found(journal: Journal, verb: str) -> None:
    seed(journal)
    error = rejected(journal, SessionNotFound, lambda: VERBS[verb](journal, "sess_missing"))
    assert isinstance(error, LookupError)
    assert isinstance(error, JournalError)
    assert error.session_id == "sess_missing"


@pytest.mark.parametrize("verb", sorted(VERBS))
def test_another_tenants_session_looks_exactly_like_a_missing_one(
    journal: Journal, verb: str
) -> None:
    sid = seed(journal)
    other = journal.for_tenant("b")
    with pytest.raises(SessionNotFound) as missing:
        VERBS[verb](other, "sess_missing")
    error = rejected(journal, SessionNotFound, lambda: VERBS[verb](other, sid))
    assert type(error) is type(missing.value)
    assert str(error) == str(missing.value).replace("sess_missing", sid)
    # Tenant A's session is whole afterwards.
    assert journal.replay(sid) == SEED_REPLAY


def test_tenants_see_nothing_of_each_other(journal: Journal) -> None:
    sid = seed(journal)
    other = journal.for_tenant("b")
    assert other.sessions(status="all") == []
    assert other.events_all() == []
    report = other.verify()
    assert report.ok
    assert (report.sessions_checked, report.events_checked) == (0, 0)
    mine = other.create_session("b's", idempotency_key="same-key")
    theirs = journal.create_session("a's", idempotency_key="same-key")
    assert mine.session_id != theirs.session_id
    assert mine.tenant == "b"
    assert [s.session_id for s in other.sessions()] == [mine.session_id]
    assert {e.session_id for e in settled_feed(other)} == {mine.session_id}
    assert {e.session_id for e in settled_feed(journal)} == {sid, theirs.session_id}
    assert sid not in {s.session_id for s in other.sessions(status="all")}


# === errors: InvalidEvent =========================================================================

BAD_EVENTS: list[tuple[Any, Any]] = [
    ("unknown", {"x": 1}),
    ("memory_saved", {}),  # not namespaced
    ("MyApp.saved", {}),
    ("a." + "b" * 63, {}),  # 65 characters
    (None, {}),
    ("user_message", ["content", "hi"]),
    ("user_message", "hi"),
    ("user_message", None),
    ("myapp.metric", {"value": float("nan")}),
    ("myapp.metric", {"value": float("inf")}),
    ("myapp.metric", {"value": [float("-inf")]}),
    ("user_message", {"content": "nul\x00here"}),
    ("myapp.note", {"bad\x00key": 1}),
    ("myapp.note", {"nested": {"k": "v\x00"}}),
    ("myapp.note", {1: "x"}),
    ("myapp.note", {"nested": {(1, 2): "x"}}),
    ("user_message", {}),
    ("user_message", {"content": 5}),
    ("tool_call", {"name": "lookup", "arguments": "{}"}),  # no call_id
    ("tool_call", {"call_id": "c9", "name": "lookup", "arguments": {"id": 1}}),
    ("tool_call", {"call_id": "c9", "name": "lookup"}),
    ("tool_result", {"call_id": "call_1", "content": "x", "is_error": "no"}),
    ("tool_result", {"call_id": "call_1", "content": "x", "is_error": 0}),
    ("tool_result", {"call_id": "call_1"}),
    ("user_message", {"content": "x", "usage": {"prompt_tokens": 1, "completion_tokens": 1}}),
    ("system_message", {"content": "x", "usage": {"prompt_tokens": 1}}),
    ("assistant_message", {"content": "x", "usage": {"prompt_tokens": -1}}),
    ("context_compacted", {"summary": "s"}),
    ("context_compacted", {"summary": "s", "until_seq": 0}),
]


@pytest.mark.parametrize(("type_", "payload"), BAD_EVENTS)
def test_wrong_type_or_shape_is_invalid_event(journal: Journal, type_: Any, payload: Any) -> None:
    sid = seed(journal)
    error = rejected(journal, InvalidEvent, lambda: journal.append(sid, type_, payload))
    assert isinstance(error, ValueError)
    assert isinstance(error, InvalidArgument)
    assert isinstance(error, JournalError)
    rejected(
        journal,
        InvalidEvent,
        lambda: journal.append_many(sid, [msg("user_message", "ok"), NewEvent(type_, payload)]),
        match=r"events\[1\]",
    )


def test_type_of_exactly_64_characters_is_accepted(journal: Journal) -> None:
    sid = journal.create_session().session_id
    name = "a." + "b" * 62
    assert journal.append(sid, name, {"x": 1}).type == name


RESERVED_PAYLOADS = {
    "session_created": {"title": "x"},
    "session_updated": {"status": "active"},
    "session_forked": {"from_session_id": "sess_x", "at_seq": 1},
}


@pytest.mark.parametrize("type_", sorted(RESERVED_TYPES))
def test_session_and_task_events_cannot_be_appended(journal: Journal, type_: str) -> None:
    sid = seed(journal)
    payload = RESERVED_PAYLOADS.get(type_) or VALID[type_][0]
    rejected(journal, InvalidEvent, lambda: journal.append(sid, type_, payload), match=type_)
    rejected(journal, InvalidEvent, lambda: journal.append_many(sid, [NewEvent(type_, payload)]))


@pytest.fixture
def corrected(journal: Journal) -> str:
    """The seed plus a correction of the user message at seq 2, at seq 8."""
    sid = seed(journal)
    fix = journal.append(sid, "user_message", {"content": "您好", "supersedes": 2})
    assert fix.seq == 8
    return sid


@pytest.mark.parametrize(
    ("type_", "target"),
    [
        ("user_message", 99),  # no such seq
        ("user_message", 3),  # an assistant_message
        ("assistant_message", 2),  # a user_message
        ("user_message", 8),  # a correction, not an original
        ("user_message", 5),  # a tool_call
        ("user_message", 1),  # session_created
        ("user_message", 9),  # itself: the event would be seq 9
        ("user_message", 10),  # the future
    ],
)
def test_supersedes_must_name_an_earlier_original_of_the_same_type(
    journal: Journal, corrected: str, type_: str, target: int
) -> None:
    payload = {"content": "again", "supersedes": target}
    rejected(journal, InvalidEvent, lambda: journal.append(corrected, type_, payload))


def test_supersedes_may_name_an_original_earlier_in_the_same_batch(
    journal: Journal, corrected: str
) -> None:
    events = journal.append_many(
        corrected, [msg("user_message", "typo"), msg("user_message", "fixed", supersedes=9)]
    )
    assert [e.seq for e in events] == [9, 10]
    assert journal.messages(corrected)[-1].content == "fixed"
    # ... but not a correction in the same batch, nor a later event of the batch.
    rejected(
        journal,
        InvalidEvent,
        lambda: journal.append_many(
            corrected,
            [
                msg("user_message", "x"),
                msg("user_message", "y", supersedes=11),
                msg("user_message", "z", supersedes=12),
            ],
        ),
    )
    rejected(
        journal,
        InvalidEvent,
        lambda: journal.append_many(
            corrected, [msg("user_message", "y", supersedes=12), msg("user_message", "x")]
        ),
    )


def test_duplicate_idempotency_keys_within_a_batch_are_invalid(journal: Journal) -> None:
    sid = seed(journal)
    rejected(
        journal,
        InvalidEvent,
        lambda: journal.append_many(
            sid, [msg("user_message", "a", "dup"), msg("assistant_message", "b", "dup")]
        ),
    )
    rejected(
        journal,
        InvalidEvent,
        lambda: journal.append_many(
            sid, [msg("user_message", "a", "dup"), msg("user_message", "a", "dup")]
        ),
    )


def test_update_session_shapes_are_checked(journal: Journal) -> None:
    sid = seed(journal)
    rejected(journal, InvalidEvent, lambda: journal.update_session(sid))
    rejected(journal, InvalidEvent, lambda: journal.update_session(sid, status="gone"))


# === errors: PayloadTooLarge ======================================================================


def test_payload_over_a_custom_limit_is_too_large(journal: Journal) -> None:
    small = Journal(journal.storage, max_payload_bytes=64)
    sid = small.create_session("t").session_id
    overhead = len('{"content":""}')
    assert small.append(sid, "user_message", {"content": "x" * (64 - overhead)}).seq == 2
    error = rejected(
        journal,
        PayloadTooLarge,
        lambda: small.append(sid, "user_message", {"content": "x" * (65 - overhead)}),
    )
    assert (error.size, error.limit) == (65, 64)
    assert isinstance(error, ValueError)
    assert isinstance(error, JournalError)
    rejected(
        journal,
        PayloadTooLarge,
        lambda: small.append_many(sid, [msg("user_message", "ok"), msg("user_message", "é" * 30)]),
    )
    rejected(journal, PayloadTooLarge, lambda: small.create_session("t" * 100))
    rejected(journal, PayloadTooLarge, lambda: small.update_session(sid, title="t" * 100))
    # The same events fit the default limit.
    assert journal.append(sid, "user_message", {"content": "é" * 30}).seq == 3


def test_open_takes_max_payload_bytes(journal: Journal, journal_url: str) -> None:
    sid = journal.create_session().session_id
    with Journal.open(journal_url, max_payload_bytes=20) as small:
        assert small.append(sid, "user_message", {"content": "x" * 6}).seq == 2
        rejected(
            journal,
            PayloadTooLarge,
            lambda: small.append(sid, "user_message", {"content": "x" * 7}),
        )
    with pytest.raises(InvalidArgument):
        Journal(journal.storage, max_payload_bytes=0)


# === errors: UnknownToolCall ======================================================================


def test_result_without_a_call_is_unknown_tool_call(journal: Journal) -> None:
    sid = seed(journal)
    other = seed(journal, "other")
    journal.append(other, "tool_call", {"call_id": "only_there", "name": "n", "arguments": ""})
    for call_id in ("nope", "only_there"):
        error = rejected(
            journal,
            UnknownToolCall,
            lambda call_id=call_id: journal.append(
                sid, "tool_result", {"call_id": call_id, "content": "x"}
            ),
            match=call_id,
        )
        assert isinstance(error, LookupError)
        assert isinstance(error, JournalError)
    # A result before its call in one batch is no better.
    rejected(
        journal,
        UnknownToolCall,
        lambda: journal.append_many(sid, [result("c9", "x"), call("c9")]),
    )


# === errors: Conflict =============================================================================


def test_a_call_takes_one_result_and_a_call_id_is_used_once(journal: Journal) -> None:
    sid = seed(journal)
    rejected(
        journal,
        Conflict,
        lambda: journal.append(sid, "tool_result", {"call_id": "call_1", "content": "43"}),
    )
    rejected(
        journal,
        Conflict,
        lambda: journal.append(
            sid, "tool_call", {"call_id": "call_1", "name": "query_order_count", "arguments": ""}
        ),
    )
    # Within one batch.
    rejected(journal, Conflict, lambda: journal.append_many(sid, [call("c2"), call("c2")]))
    rejected(
        journal,
        Conflict,
        lambda: journal.append_many(sid, [call("c3"), result("c3", "a"), result("c3", "b")]),
    )
    # The same call_id in another session is fine: ids are per session.
    other = journal.create_session().session_id
    journal.append_many(other, [call("call_1"), result("call_1", "1")])
    assert [c.status for c in journal.tool_calls(other)] == ["ok"]


def test_expected_seq_must_be_the_last_seq(journal: Journal) -> None:
    sid = seed(journal)
    for stale in (0, 3, 6, 8, 100):
        rejected(
            journal,
            Conflict,
            lambda stale=stale: journal.append(
                sid, "user_message", {"content": "x"}, expected_seq=stale
            ),
        )
        rejected(
            journal,
            Conflict,
            lambda stale=stale: journal.append_many(
                sid, [msg("user_message", "x")], expected_seq=stale
            ),
        )
    assert journal.append(sid, "user_message", {"content": "x"}, expected_seq=7).seq == 8
    events = journal.append_many(
        sid, [msg("user_message", "y"), msg("assistant_message", "z")], expected_seq=8
    )
    assert [e.seq for e in events] == [9, 10]
    rejected(journal, InvalidArgument, lambda: journal.append(sid, "myapp.x", {}, expected_seq=-1))


def test_idempotency_key_reused_for_another_event_is_a_conflict(journal: Journal) -> None:
    sid = seed(journal)
    for type_, payload in [
        ("user_message", {"content": "你好!"}),  # other payload
        ("system_message", {"content": "你好"}),  # other type
        ("user_message", {"content": "你好", "extra": 1}),
    ]:
        rejected(
            journal,
            Conflict,
            lambda type_=type_, payload=payload: journal.append(
                sid, type_, payload, idempotency_key="k2"
            ),
        )


def test_a_partial_batch_key_match_writes_nothing(journal: Journal) -> None:
    sid = seed(journal)
    original = msg("user_message", "你好", "k2")
    for batch in (
        [original, msg("user_message", "new", "fresh")],
        [original, msg("user_message", "new")],
        [msg("user_message", "new", "fresh"), original],
        [
            original,
            msg("assistant_message", "你好！我是订单客服助手，可以帮你查询订单数量。", "kX"),
        ],
    ):
        rejected(journal, Conflict, lambda batch=batch: journal.append_many(sid, batch))


def test_explicit_session_id_already_taken_is_a_conflict(journal: Journal) -> None:
    session = journal.create_session("first", session_id="order-chat-1")
    assert session.session_id == "order-chat-1"
    rejected(journal, Conflict, lambda: journal.create_session("again", session_id="order-chat-1"))
    rejected(journal, InvalidArgument, lambda: journal.create_session(session_id="has space"))


# === errors: SessionClosed ========================================================================


def test_deleted_session_accepts_only_undelete(journal: Journal) -> None:
    sid = seed(journal)
    deleted = journal.delete_session(sid)
    assert deleted.status == "deleted"
    assert journal.events(sid)[-1].payload == {"status": "deleted"}
    for action in (
        lambda: journal.append(sid, "user_message", {"content": "x"}),
        lambda: journal.append(sid, "myapp.note", {}),
        lambda: journal.append_many(sid, [msg("user_message", "x")]),
        lambda: journal.compact(sid, 6, "s"),
        lambda: journal.update_session(sid, title="renamed"),
        lambda: journal.update_session(sid, status="archived"),
        lambda: journal.delete_session(sid),
    ):
        error = rejected(journal, SessionClosed, action)
        assert isinstance(error, JournalError)
    # Still readable.
    assert journal.replay(sid) == SEED_REPLAY
    assert len(journal.messages(sid)) == 4
    # Undelete, then appends work again.
    assert journal.update_session(sid, status="active").status == "active"
    assert journal.append(sid, "user_message", {"content": "back"}).seq == 10
    assert journal.get_session(sid).last_seq == 10


def test_error_tree() -> None:
    assert issubclass(SessionNotFound, LookupError)
    assert issubclass(UnknownToolCall, LookupError)
    assert issubclass(InvalidArgument, ValueError)
    assert issubclass(InvalidEvent, InvalidArgument)
    assert issubclass(PayloadTooLarge, ValueError)
    assert issubclass(ContextTooLarge, ValueError)
    assert issubclass(StorageError, OSError)
    for error in (
        SessionNotFound,
        InvalidArgument,
        InvalidEvent,
        PayloadTooLarge,
        Conflict,
        UnknownToolCall,
        SessionClosed,
        ContextTooLarge,
        StorageError,
    ):
        assert issubclass(error, JournalError)


# === atomic batches ===============================================================================

BAD_THIRD: list[tuple[dict[str, Any], type[Exception]]] = [
    ({"type": "nope", "payload": {}}, InvalidEvent),
    (msg("user_message", "x", usage=USAGE), InvalidEvent),
    (result("nobody", "x"), UnknownToolCall),
    (result("call_1", "again"), Conflict),
    (call("call_1"), Conflict),
    (msg("user_message", "x", supersedes=3), InvalidEvent),
    ({"type": "context_compacted", "payload": {"summary": "s", "until_seq": 5}}, InvalidEvent),
    (msg("user_message", "x" * 2_000_000), PayloadTooLarge),
    ({"type": "session_updated", "payload": {"title": "x"}}, InvalidEvent),
]


@pytest.mark.parametrize(("third", "error"), BAD_THIRD)
def test_a_batch_with_a_bad_third_event_writes_none(
    journal: Journal, third: dict[str, Any], error: type[Exception]
) -> None:
    sid = seed(journal)
    batch = [msg("user_message", "first", "b1"), call("c_batch"), third]
    rejected(journal, error, lambda: journal.append_many(sid, batch))
    # The first two alone are fine, and their keys were not burnt.
    events = journal.append_many(sid, batch[:2])
    assert [e.seq for e in events] == [8, 9]


def test_append_many_takes_a_non_empty_list(journal: Journal) -> None:
    sid = seed(journal)
    for bad in ([], msg("user_message", "x"), "user_message", [{"type": "myapp.x", "extra": 1}]):
        rejected(journal, InvalidEvent, lambda bad=bad: journal.append_many(sid, bad))


# === idempotency ==================================================================================


def test_retry_with_the_same_key_returns_the_original(journal: Journal) -> None:
    sid = seed(journal)
    first = journal.append(sid, "myapp.note", {"b": 1, "a": [1, 2]}, idempotency_key="note-1")
    journal.append(sid, "user_message", {"content": "later"})
    before = state(journal)
    again = journal.append(sid, "myapp.note", {"a": [1, 2], "b": 1}, idempotency_key="note-1")
    assert again == first
    assert (again.event_id, again.seq, again.position) == (first.event_id, 8, first.position)
    assert state(journal) == before
    # The seed's own keys work the same way.
    first_seed = SEED[0]
    retried = journal.append(sid, first_seed.type, first_seed.payload, idempotency_key="k2")
    assert retried == journal.events(sid)[1]
    assert state(journal) == before


def test_retry_of_a_whole_batch_returns_the_original_batch(journal: Journal) -> None:
    sid = seed(journal)
    batch = [
        msg("user_message", "再查一次", "t2-u"),
        {**call("call_2"), "idempotency_key": "t2-c"},
        {**result("call_2", "43"), "idempotency_key": "t2-r"},
    ]
    first = journal.append_many(sid, batch, expected_seq=7)
    assert [e.seq for e in first] == [8, 9, 10]
    journal.append(sid, "assistant_message", {"content": "43"})
    before = state(journal)
    # Keys are checked before expected_seq: a retry with the now stale expected_seq is a retry.
    assert journal.append_many(sid, batch, expected_seq=7) == first
    assert journal.append_many(sid, batch) == first
    assert journal.append(sid, **{**batch[0], "expected_seq": 7}) == first[0]
    assert state(journal) == before


def test_a_retry_must_repeat_the_batch_as_it_was(journal: Journal) -> None:
    sid = seed(journal)
    one = msg("user_message", "first", "k-one")
    two = msg("user_message", "second", "k-two")
    three = msg("user_message", "third", "k-three")
    journal.append_many(sid, [one, two])
    journal.append(sid, "assistant_message", {"content": "between"})
    journal.append_many(sid, [three])
    # Same keys, same payloads, but not one run of events in this order: not a retry.
    rejected(journal, Conflict, lambda: journal.append_many(sid, [two, one]), "appended together")
    rejected(journal, Conflict, lambda: journal.append_many(sid, [two, three]), "appended together")


def test_keys_are_per_session(journal: Journal) -> None:
    one = seed(journal)
    two = journal.create_session().session_id
    event = journal.append(two, "user_message", {"content": "你好"}, idempotency_key="k2")
    assert (event.session_id, event.seq) == (two, 2)
    assert journal.events(one)[1].idempotency_key == "k2"


def test_create_session_with_an_idempotency_key(journal: Journal) -> None:
    kwargs: dict[str, Any] = {"model": "m", "system_prompt": PROMPT, "metadata": {"agent": "o"}}
    first, created = journal.create_session_ex("订单客服", idempotency_key="c1", **kwargs)
    assert created
    before = state(journal)
    again, created = journal.create_session_ex("订单客服", idempotency_key="c1", **kwargs)
    assert not created
    assert again == first
    assert journal.create_session("订单客服", idempotency_key="c1", **kwargs) == first
    assert state(journal) == before
    rejected(journal, Conflict, lambda: journal.create_session("另一个", idempotency_key="c1"))
    rejected(
        journal,
        Conflict,
        lambda: journal.create_session(
            "订单客服", idempotency_key="c1", **{**kwargs, "system_prompt": "other"}
        ),
    )
    assert journal.events(first.session_id)[0].idempotency_key == "c1"


def test_fork_with_an_idempotency_key(journal: Journal) -> None:
    sid = seed(journal)
    other = seed(journal, "other")
    fork = journal.fork(sid, 4, idempotency_key="f1")
    before = state(journal)
    assert journal.fork(sid, 4, idempotency_key="f1") == fork
    assert state(journal) == before
    rejected(journal, Conflict, lambda: journal.fork(sid, 6, idempotency_key="f1"))
    rejected(journal, Conflict, lambda: journal.fork(other, 4, idempotency_key="f1"))
    rejected(journal, Conflict, lambda: journal.create_session("x", idempotency_key="f1"))


def test_fork_with_a_key_used_by_create_session_is_a_conflict(journal: Journal) -> None:
    sid = seed(journal)
    journal.create_session("made", idempotency_key="c1")
    rejected(journal, Conflict, lambda: journal.fork(sid, 4, idempotency_key="c1"))


# === seq, event_id, position ======================================================================


def test_seq_starts_at_session_created_and_has_no_gaps(journal: Journal, backend: str) -> None:
    sid = seed(journal)
    other = seed(journal, "other")
    journal.append_many(sid, [msg("user_message", "a"), msg("assistant_message", "b")])
    journal.append(other, "myapp.note", {})
    journal.update_session(sid, title="renamed")
    events = journal.events(sid)
    assert [e.seq for e in events] == list(range(1, 11))
    assert events[0].type == "session_created"
    assert events[0].payload == {"title": "订单客服", "model": "scripted", "system_prompt": PROMPT}
    assert [e.type for e in events[1:7]] == [e.type for e in SEED]
    assert [e.payload for e in events[1:7]] == [e.payload for e in SEED]
    assert {e.session_id for e in events} == {sid}
    everything = settled_feed(journal)
    ids = [e.event_id for e in everything]
    assert ids == sorted(ids)
    assert len(set(ids)) == len(ids) == 18
    assert len({e.position for e in everything}) == 18
    assert all(isinstance(e.created_at, int) for e in everything)
    if backend == "sqlite":
        assert [e.position for e in everything] == [str(i) for i in ids]
    assert journal.get_session(sid).last_seq == 10
    assert journal.get_session(sid).event_count == 10


def test_events_pages_by_seq(journal: Journal) -> None:
    sid = seed(journal)
    journal.append_many(sid, [msg("user_message", str(i)) for i in range(13)])
    everything = journal.events(sid, limit=1000)
    assert [e.seq for e in everything] == list(range(1, 21))
    seen, after = [], 0
    while page := journal.events(sid, after=after, limit=3):
        assert len(page) <= 3
        seen += page
        after = page[-1].seq
    assert seen == everything
    assert journal.events(sid, after=4, limit=2) == everything[4:6]
    assert journal.events(sid, after=20) == []
    assert journal.events(sid, after=99) == []
    for bad in ({"after": -1}, {"limit": 0}, {"limit": 10**9}, {"after": "3"}, {"before": 0}):
        with pytest.raises(InvalidArgument):
            journal.events(sid, **bad)


def test_events_read_backwards_from_the_end_with_before(journal: Journal) -> None:
    sid = seed(journal)
    journal.append_many(sid, [msg("user_message", str(i)) for i in range(13)])
    everything = journal.events(sid, limit=1000)
    assert journal.events(sid, before=21, limit=3) == everything[-3:], "the newest, oldest first"
    seen: list[Event] = []
    before = journal.get_session(sid).last_seq + 1
    while page := journal.events(sid, before=before, limit=4):
        seen = page + seen
        before = page[0].seq
    assert seen == everything
    assert journal.events(sid, after=5, before=9) == everything[5:8]
    assert journal.events(sid, before=1) == []


def test_events_all_pages_in_commit_order_within_the_tenant(journal: Journal) -> None:
    one = journal.create_session("one").session_id
    b = journal.for_tenant("b")
    theirs = b.create_session("theirs").session_id
    two = journal.create_session("two").session_id
    order = [(one, 1), (two, 1)]
    for i in range(5):
        sid = one if i % 2 else two
        journal.append(sid, "user_message", {"content": str(i)})
        b.append(theirs, "user_message", {"content": str(i)})
        order.append((sid, journal.get_session(sid).last_seq))
    journal.append_many(one, [msg("user_message", "x"), msg("assistant_message", "y")])
    order += [(one, 4), (one, 5)]
    feed = settled_feed(journal)
    assert [(e.session_id, e.seq) for e in feed] == order
    for size in (1, 2, 3, 100):
        seen: list[Any] = []
        after = None
        while page := journal.events_all(after=after, limit=size):
            assert len(page) <= size
            seen += page
            after = page[-1].position
        assert seen == feed
    for index, event in enumerate(feed):
        assert journal.events_all(after=event.position, limit=1000) == feed[index + 1 :]
    assert {e.session_id for e in settled_feed(b)} == {theirs}
    assert len(b.events_all()) == 6
    with pytest.raises(InvalidArgument):
        journal.events_all(after="not a position")
    with pytest.raises(InvalidArgument):
        journal.events_all(limit=0)


# === sessions =====================================================================================


def test_create_session_fields(journal: Journal) -> None:
    session = journal.create_session(
        "订单客服", model="gpt-x", system_prompt=PROMPT, metadata={"agent": "order", "n": [1]}
    )
    assert session.session_id.startswith("sess_")
    assert session.tenant == "default"
    assert (session.title, session.model, session.system_prompt) == ("订单客服", "gpt-x", PROMPT)
    assert session.metadata == {"agent": "order", "n": [1]}
    assert (session.status, session.forked_from, session.forked_at_seq) == ("active", None, None)
    assert (session.last_seq, session.event_count) == (1, 1)
    assert (session.prompt_tokens, session.completion_tokens) == (0, 0)
    assert session.last_position == journal.events(session.session_id)[0].position
    assert (
        session.created_at == session.updated_at == journal.events(session.session_id)[0].created_at
    )
    assert journal.get_session(session.session_id) == session
    plain = journal.create_session()
    assert (plain.title, plain.model, plain.system_prompt, plain.metadata) == ("", None, None, {})
    assert journal.replay(plain.session_id) == []


def test_update_session(journal: Journal) -> None:
    sid = seed(journal)
    updated = journal.update_session(sid, title="新标题", metadata={"k": "v"})
    assert (updated.title, updated.metadata, updated.status) == ("新标题", {"k": "v"}, "active")
    assert journal.events(sid)[-1].type == "session_updated"
    assert journal.events(sid)[-1].payload == {"title": "新标题", "metadata": {"k": "v"}}
    archived = journal.update_session(sid, status="archived")
    assert (archived.status, archived.title, archived.last_seq) == ("archived", "新标题", 9)
    # Archived sessions still take appends.
    assert journal.append(sid, "user_message", {"content": "x"}).seq == 10
    assert journal.update_session(sid, metadata={}).metadata == {}


def test_sessions_lists_by_most_recent_activity(journal: Journal) -> None:
    first = journal.create_session("1").session_id
    second = journal.create_session("2").session_id
    third = journal.create_session("3").session_id
    assert [s.session_id for s in journal.sessions()] == [third, second, first]
    journal.append(first, "user_message", {"content": "bump"})
    assert [s.session_id for s in journal.sessions()] == [first, third, second]
    journal.update_session(second, title="renamed")
    assert [s.session_id for s in journal.sessions()] == [second, first, third]
    assert [s.session_id for s in journal.sessions(limit=2)] == [second, first]


def test_sessions_status_filters(journal: Journal) -> None:
    active = journal.create_session("active").session_id
    archived = journal.create_session("archived").session_id
    deleted = journal.create_session("deleted").session_id
    journal.update_session(archived, status="archived")
    journal.delete_session(deleted)

    def ids(status: str | None) -> set[str]:
        return {s.session_id for s in journal.sessions(status=status)}

    assert ids(None) == {active, archived}
    assert ids("active") == {active}
    assert ids("archived") == {archived}
    assert ids("deleted") == {deleted}
    assert ids("all") == {active, archived, deleted}
    with pytest.raises(InvalidArgument):
        journal.sessions(status="gone")
    with pytest.raises(InvalidArgument):
        journal.sessions(limit=0)
    # Deleted but readable.
    assert journal.get_session(deleted).status == "deleted"
    journal.update_session(deleted, status="active")
    assert ids(None) == {active, archived, deleted}


def test_sessions_cursor_visits_each_session_once(journal: Journal) -> None:
    made = [journal.create_session(str(i)).session_id for i in range(8)]
    journal.append(made[2], "user_message", {"content": "bump"})
    journal.delete_session(made[5])
    for status, expected in ((None, 7), ("all", 8)):
        everything = journal.sessions(status=status, limit=100)
        assert len(everything) == expected
        for size in (1, 3, 7, 8):
            seen: list[str] = []
            cursor = None
            while page := journal.sessions(status=status, limit=size, cursor=cursor):
                assert len(page) <= size
                seen += [s.session_id for s in page]
                cursor = page[-1].last_position
            assert seen == [s.session_id for s in everything]
    assert journal.sessions(limit=100)[0].session_id == made[2]


def test_usage_and_event_count(journal: Journal) -> None:
    sid = seed(journal)
    session = journal.get_session(sid)
    assert (session.prompt_tokens, session.completion_tokens) == (120, 12)
    journal.append_many(
        sid,
        [
            msg("user_message", "再查一次"),
            msg("assistant_message", "好", usage={"prompt_tokens": 200, "completion_tokens": 30}),
            msg("assistant_message", "嗯", usage={"prompt_tokens": 5}),
            msg("assistant_message", "无"),
        ],
    )
    session = journal.get_session(sid)
    assert (session.prompt_tokens, session.completion_tokens) == (325, 42)
    assert session.event_count == len(journal.events(sid)) == 11


def test_delete_session_leaves_it_readable(journal: Journal) -> None:
    sid = seed(journal)
    messages, calls = journal.messages(sid), journal.tool_calls(sid)
    journal.delete_session(sid)
    assert sid not in {s.session_id for s in journal.sessions()}
    assert journal.messages(sid) == messages
    assert journal.tool_calls(sid) == calls
    assert journal.replay(sid) == SEED_REPLAY
    assert [e.seq for e in journal.events(sid)] == list(range(1, 9))
    # A subscriber's stream ends after the deleting event.
    assert [e.seq for e in journal.subscribe(sid)] == list(range(1, 9))


# === messages, corrections, tool_calls ============================================================


def test_messages_last_returns_the_latest_oldest_first(journal: Journal) -> None:
    sid = journal.create_session(system_prompt="not a message").session_id
    journal.append_many(sid, [msg("user_message", f"m{i}") for i in range(10)])
    journal.append(sid, "myapp.note", {})
    everything = journal.messages(sid)
    assert [m.content for m in everything] == [f"m{i}" for i in range(10)]
    assert [m.seq for m in everything] == list(range(2, 12))
    assert journal.messages(sid, last=3) == everything[-3:]
    assert journal.messages(sid, last=1) == everything[-1:]
    assert journal.messages(sid, last=100) == everything
    with pytest.raises(InvalidArgument):
        journal.messages(sid, last=0)
    assert journal.messages(journal.create_session().session_id) == []


def test_message_rows(journal: Journal) -> None:
    sid = seed(journal)
    journal.append(sid, "system_message", {"content": "be brief"})
    rows = journal.messages(sid)
    assert [(m.seq, m.role) for m in rows] == [
        (2, "user"),
        (3, "assistant"),
        (4, "user"),
        (7, "assistant"),
        (8, "system"),
    ]
    events = {e.seq: e for e in journal.events(sid)}
    for row in rows:
        assert row.session_id == sid
        assert row.content == events[row.seq].payload["content"]
        assert row.tokens == estimate_tokens({"role": row.role, "content": row.content})
        assert row.edited_seq is None
        assert row.created_at == events[row.seq].created_at


def test_corrections_show_the_newest_content_at_the_originals_place(journal: Journal) -> None:
    sid = seed(journal)
    journal.append(sid, "user_message", {"content": "帮我查一下订单总数", "supersedes": 4})
    journal.append(sid, "assistant_message", {"content": "共 42 个订单。", "supersedes": 7})
    journal.append(sid, "user_message", {"content": "帮我查一下所有订单", "supersedes": 4})
    rows = journal.messages(sid)
    assert [(m.seq, m.content, m.edited_seq) for m in rows] == [
        (2, "你好", None),
        (3, "你好！我是订单客服助手，可以帮你查询订单数量。", None),
        (4, "帮我查一下所有订单", 10),
        (7, "共 42 个订单。", 9),
    ]
    assert rows[2].tokens == estimate_tokens(u("帮我查一下所有订单"))
    corrected = [*SEED_REPLAY[:3], u("帮我查一下所有订单"), *SEED_REPLAY[4:6], a("共 42 个订单。")]
    assert journal.replay(sid) == corrected
    assert journal.replay(sid, until=7) == SEED_REPLAY
    assert journal.replay(sid, until=8) == [
        *SEED_REPLAY[:3],
        u("帮我查一下订单总数"),
        *SEED_REPLAY[4:],
    ]
    assert journal.replay(sid, until=9)[-1] == a("共 42 个订单。")
    # The journal keeps every version.
    assert [e.payload.get("supersedes") for e in journal.events(sid)[7:]] == [4, 7, 4]


def test_tool_calls_projection(journal: Journal) -> None:
    sid = seed(journal)
    journal.append_many(
        sid,
        [
            msg("user_message", "再查两次"),
            call("call_2", "lookup", '{"id": 2}'),
            call("call_3", "lookup", '{"id": 3}'),
            result("call_3", "boom", is_error=True),
        ],
    )
    rows = journal.tool_calls(sid)
    assert [
        (c.call_id, c.name, c.arguments, c.status, c.result, c.call_seq, c.result_seq) for c in rows
    ] == [
        ("call_1", "query_order_count", "{}", "ok", "42", 5, 6),
        ("call_2", "lookup", '{"id": 2}', "pending", None, 9, None),
        ("call_3", "lookup", '{"id": 3}', "error", "boom", 10, 11),
    ]
    assert {c.session_id for c in rows} == {sid}
    journal.append(sid, "tool_result", {"call_id": "call_2", "content": "fine", "is_error": False})
    row = journal.tool_calls(sid)[1]
    assert (row.status, row.result, row.result_seq) == ("ok", "fine", 12)
    # The pending call was left out of the replay; with its result it is in, in call order.
    assert journal.replay(sid)[-3:] == [
        a(None, ("call_2", "lookup", '{"id": 2}'), ("call_3", "lookup", '{"id": 3}')),
        t("call_2", "fine"),
        t("call_3", "boom"),
    ]
    assert journal.replay(sid, until=11)[-2:] == [
        a(None, ("call_3", "lookup", '{"id": 3}')),
        t("call_3", "boom"),
    ]


def test_custom_events_are_stored_numbered_and_ignored_by_replay(journal: Journal) -> None:
    sid = seed(journal)
    event = journal.append(sid, "myapp.memory_saved", {"memory": "likes tea", "n": [1, 2.5]})
    assert (event.seq, event.type) == (8, "myapp.memory_saved")
    assert journal.events(sid, after=7) == [event]
    assert journal.replay(sid) == SEED_REPLAY
    assert len(journal.messages(sid)) == 4


# === compaction ===================================================================================


@pytest.fixture
def long_seed(journal: Journal) -> str:
    """The seed plus a second turn with a tool call: seq 8-11."""
    sid = seed(journal)
    journal.append_many(
        sid,
        [
            msg("user_message", "再查一次"),
            call("call_2"),
            result("call_2", "43"),
            msg("assistant_message", "现在有 43 个。"),
        ],
    )
    return sid


SUMMARY = "用户查询了订单数量：42。"


def test_compaction_replays_prompt_summary_and_what_follows(
    journal: Journal, long_seed: str
) -> None:
    sid = long_seed
    messages = journal.messages(sid)
    full = journal.replay(sid)
    event = journal.compact(sid, 7, SUMMARY)
    assert (event.seq, event.type, event.payload) == (
        12,
        "context_compacted",
        {"summary": SUMMARY, "until_seq": 7},
    )
    after = [
        u("再查一次"),
        a(None, ("call_2", "query_order_count", "{}")),
        t("call_2", "43"),
        a("现在有 43 个。"),
    ]
    assert journal.replay(sid) == [sys_(PROMPT), sys_(SUMMARY), *after]
    assert journal.replay(sid, until=11) == full
    # The transcript is never compacted.
    assert journal.messages(sid) == messages
    # Anthropic: all system text in `system`.
    shaped = journal.replay(sid, format="anthropic")
    assert isinstance(shaped, dict)
    assert shaped["system"] == f"{PROMPT}\n\n{SUMMARY}"
    assert shaped["messages"][0] == u("再查一次")
    # A later compaction replaces the earlier one.
    journal.compact(sid, 10, "second summary")
    assert journal.replay(sid) == [sys_(PROMPT), sys_("second summary"), a("现在有 43 个。")]
    assert journal.replay(sid, until=12) == [sys_(PROMPT), sys_(SUMMARY), *after]


def test_compaction_rules(journal: Journal, long_seed: str) -> None:
    sid = long_seed
    for until in (12, 13, 100):  # the event would be seq 12
        rejected(journal, InvalidEvent, lambda until=until: journal.compact(sid, until, "s"))
    for until in (5, 9):  # call_1 at 5 / result 6; call_2 at 9 / result 10
        rejected(journal, InvalidEvent, lambda until=until: journal.compact(sid, until, "s"))
    rejected(journal, InvalidEvent, lambda: journal.compact(sid, 0, "s"))
    journal.compact(sid, 7, SUMMARY)
    rejected(journal, InvalidEvent, lambda: journal.compact(sid, 6, "below the previous"))
    assert journal.compact(sid, 7, "same point again").seq == 13
    # A call with no result yet cannot be compacted away.
    journal.append(sid, "tool_call", {"call_id": "call_3", "name": "n", "arguments": ""})
    rejected(journal, InvalidEvent, lambda: journal.compact(sid, 14, "s"))
    assert journal.compact(sid, 11, "before the pending call").seq == 15
    # Within a batch: the call and the compaction together.
    rejected(
        journal,
        InvalidEvent,
        lambda: journal.append_many(
            sid,
            [
                result("call_3", "done"),
                call("call_4"),
                {"type": "context_compacted", "payload": {"summary": "s", "until_seq": 17}},
            ],
        ),
    )
    events = journal.append_many(
        sid,
        [
            result("call_3", "done"),
            {"type": "context_compacted", "payload": {"summary": "s", "until_seq": 16}},
        ],
    )
    assert [e.seq for e in events] == [16, 17]
    rejected(
        journal,
        InvalidEvent,
        lambda: journal.append_many(
            sid,
            [
                {"type": "context_compacted", "payload": {"summary": "a", "until_seq": 17}},
                {"type": "context_compacted", "payload": {"summary": "b", "until_seq": 16}},
            ],
        ),
    )


# === fork =========================================================================================


def test_fork_copies_the_parent_up_to_at_seq(journal: Journal) -> None:
    sid = seed(journal)
    parent_events = journal.events(sid)
    fork = journal.fork(sid, 4)
    assert fork.session_id != sid
    assert (fork.forked_from, fork.forked_at_seq, fork.tenant) == (sid, 4, "default")
    assert (fork.title, fork.model, fork.system_prompt) == ("订单客服", "scripted", PROMPT)
    assert (fork.last_seq, fork.event_count, fork.status) == (5, 5, "active")
    events = journal.events(fork.session_id)
    assert [e.seq for e in events] == [1, 2, 3, 4, 5]
    for copy, original in zip(events[:4], parent_events[:4], strict=True):
        assert (copy.seq, copy.type, copy.payload, copy.created_at) == (
            original.seq,
            original.type,
            original.payload,
            original.created_at,
        )
        assert copy.session_id == fork.session_id
        assert copy.idempotency_key is None
    parent_ids = {e.event_id for e in parent_events}
    assert not parent_ids & {e.event_id for e in events}
    assert [e.event_id for e in events] == sorted(e.event_id for e in events)
    assert (events[4].type, events[4].payload) == (
        "session_forked",
        {"from_session_id": sid, "at_seq": 4},
    )
    assert journal.replay(fork.session_id) == journal.replay(sid, until=4) == SEED_REPLAY[:4]
    assert [(m.seq, m.role, m.content) for m in journal.messages(fork.session_id)] == [
        (m.seq, m.role, m.content) for m in journal.messages(sid)[:3]
    ]
    assert journal.tool_calls(fork.session_id) == []
    assert journal.events(sid) == parent_events
    assert journal.verify().ok


def test_fork_and_parent_are_independent(journal: Journal) -> None:
    sid = seed(journal)
    fork = journal.fork(sid, 6).session_id
    assert [(c.call_id, c.status, c.result) for c in journal.tool_calls(fork)] == [
        ("call_1", "ok", "42")
    ]
    parent_events = journal.events(sid)
    # The fork's copies carry no keys: the parent's key is a fresh key in the fork.
    journal.append(fork, "user_message", {"content": "换个问题"}, idempotency_key="k2")
    journal.append(fork, "assistant_message", {"content": "好的"})
    assert journal.events(sid) == parent_events
    assert journal.replay(fork) == [*journal.replay(sid, until=6), u("换个问题"), a("好的")]
    journal.append(sid, "user_message", {"content": "parent only"})
    assert journal.replay(fork)[-1] == a("好的")
    assert u("parent only") not in journal.replay(fork)


def test_fork_defaults_to_the_whole_session_and_takes_a_title(journal: Journal) -> None:
    sid = seed(journal)
    whole = journal.fork(sid)
    assert (whole.forked_at_seq, whole.last_seq) == (7, 8)
    assert journal.replay(whole.session_id) == SEED_REPLAY
    titled = journal.fork(sid, 4, title="分支")
    assert (titled.title, titled.last_seq) == ("分支", 6)
    assert [e.type for e in journal.events(titled.session_id, after=4)] == [
        "session_forked",
        "session_updated",
    ]
    # A fork of a fork.
    grandchild = journal.fork(whole.session_id, 8)
    assert grandchild.forked_from == whole.session_id
    assert journal.replay(grandchild.session_id) == SEED_REPLAY


def test_fork_shows_the_original_before_a_later_correction(journal: Journal) -> None:
    sid = seed(journal)
    journal.append(sid, "user_message", {"content": "您好", "supersedes": 2})
    before = journal.fork(sid, 7)
    after = journal.fork(sid, 8)
    assert journal.replay(before.session_id) == SEED_REPLAY
    assert journal.replay(after.session_id)[1] == u("您好")
    assert journal.messages(after.session_id)[0].content == "您好"


def test_fork_may_not_split_a_call_from_its_result(journal: Journal) -> None:
    sid = seed(journal)
    rejected(journal, Conflict, lambda: journal.fork(sid, 5))
    journal.append(sid, "tool_call", {"call_id": "pending", "name": "n", "arguments": ""})
    rejected(journal, Conflict, lambda: journal.fork(sid))
    rejected(journal, Conflict, lambda: journal.fork(sid, 8))
    assert journal.fork(sid, 7).last_seq == 8


def test_fork_at_seq_must_exist(journal: Journal) -> None:
    sid = seed(journal)
    rejected(journal, InvalidArgument, lambda: journal.fork(sid, 8))
    rejected(journal, InvalidArgument, lambda: journal.fork(sid, 0))
    rejected(journal, InvalidArgument, lambda: journal.fork(sid, -1))


@pytest.mark.parametrize("purge", ["parent", "fork"])
def test_purging_one_side_of_a_fork_leaves_the_other_whole(journal: Journal, purge: str) -> None:
    sid = seed(journal)
    fork = journal.fork(sid, 6).session_id
    journal.append(fork, "assistant_message", {"content": "fork reply"})
    keep, gone = (fork, sid) if purge == "parent" else (sid, fork)
    kept = (journal.get_session(keep), journal.events(keep), journal.replay(keep))
    kept_rows = (journal.messages(keep), journal.tool_calls(keep))
    journal.purge_session(gone)
    assert (journal.get_session(keep), journal.events(keep), journal.replay(keep)) == kept
    assert (journal.messages(keep), journal.tool_calls(keep)) == kept_rows
    with pytest.raises(SessionNotFound):
        journal.get_session(gone)
    assert journal.verify().ok


# === append-only, enforced by the database ========================================================


def test_update_and_delete_of_events_fail_in_the_database(journal: Journal, raw: RawSQL) -> None:
    sid = seed(journal)
    before = state(journal)
    for statement in (
        "UPDATE events SET payload = '{}' WHERE session_id = ?",
        "UPDATE events SET seq = seq + 100 WHERE session_id = ?",
        "DELETE FROM events WHERE session_id = ?",
    ):
        with pytest.raises(raw.IntegrityError, match="append-only"):
            raw.execute(statement, (sid,))
    with pytest.raises(raw.IntegrityError, match="append-only"):
        raw.execute("DELETE FROM events")
    if raw.backend == "postgres":
        with pytest.raises(raw.IntegrityError, match="append-only"):
            raw.execute("TRUNCATE events CASCADE")
    assert state(journal) == before


def purge_row(session_id: str) -> tuple[Any, ...]:
    return ("default", session_id, "intruder", 1, 7)


PENDING_PURGE = (
    "INSERT INTO purge_audit (tenant, session_id, purged_by, purged_at, event_count, pending)"
    " VALUES (?, ?, ?, ?, ?, 1)"
)


def test_a_pending_purge_row_cannot_be_committed(journal: Journal, raw: RawSQL) -> None:
    sid = seed(journal)
    before = state(journal)
    if raw.backend == "sqlite":
        raw.execute("PRAGMA foreign_keys = ON")
    # Delete inside the transaction that opened the purge, but without closing it: COMMIT fails.
    raw.begin()
    raw.execute(PENDING_PURGE, purge_row(sid))
    raw.execute("DELETE FROM events WHERE session_id = ?", (sid,))
    with pytest.raises(raw.IntegrityError, match=r"(?i)foreign key"):
        raw.commit()
    raw.rollback()
    # A pending row alone cannot be committed either, so a later DELETE finds none.
    raw.begin()
    raw.execute(PENDING_PURGE, purge_row(sid))
    with pytest.raises(raw.IntegrityError, match=r"(?i)foreign key"):
        raw.commit()
    raw.rollback()
    with pytest.raises(raw.IntegrityError, match="append-only"):
        raw.execute("DELETE FROM events WHERE session_id = ?", (sid,))
    assert raw.execute("SELECT count(*) FROM purge_audit").fetchone() == (0,)
    assert state(journal) == before


def test_a_connection_without_foreign_keys_cannot_open_a_purge_either(
    journal: Journal, raw: RawSQL
) -> None:
    """sqlite3 connections start with foreign_keys off; the guard must not depend on the caller
    turning it on ("There is no flag that bypasses it")."""
    if raw.backend != "sqlite":
        pytest.skip("SQLite's foreign_keys PRAGMA; PostgreSQL always checks foreign keys")
    sid = seed(journal)
    before = state(journal)
    assert raw.execute("PRAGMA foreign_keys").fetchone() == (0,)
    try:
        raw.begin()
        raw.execute(PENDING_PURGE, purge_row(sid))
        raw.commit()
    except sqlite3.DatabaseError:
        raw.rollback()
    with pytest.raises(sqlite3.DatabaseError):
        raw.execute("DELETE FROM events WHERE session_id = ?", (sid,))
    assert state(journal) == before


def test_purge_audit_rows_are_permanent(journal: Journal, raw: RawSQL) -> None:
    sid = seed(journal)
    journal.purge_session(sid)
    with pytest.raises(raw.IntegrityError, match="permanent"):
        raw.execute("DELETE FROM purge_audit")
    with pytest.raises(raw.IntegrityError, match="permanent"):
        raw.execute("UPDATE purge_audit SET event_count = 0")
    with pytest.raises(raw.IntegrityError, match="permanent"):
        raw.execute("UPDATE purge_audit SET pending = 1")
    if raw.backend == "postgres":
        with pytest.raises(raw.IntegrityError, match="permanent"):
            raw.execute("TRUNCATE purge_audit")
    assert raw.execute("SELECT count(*) FROM purge_audit").fetchone() == (1,)


def test_purge_removes_every_row_and_leaves_one_audit_row(
    journal: Journal, raw: RawSQL, db_path: Path
) -> None:
    sid = seed(journal)
    journal.append(sid, "user_message", {"content": "secret-marker-7f3a"})
    keep = seed(journal, "keep")
    kept = (journal.events(keep), journal.messages(keep), journal.tool_calls(keep))
    largest = max(e.event_id for e in settled_feed(journal))
    assert journal.purge_session(sid, actor="admin@example") == 8
    for table in ("events", "messages", "tool_calls", "sessions"):
        count = raw.execute(f"SELECT count(*) FROM {table} WHERE session_id = ?", (sid,))
        assert count.fetchone() == (0,), table
    assert raw.columns("purge_audit") == [
        "purge_id",
        "tenant",
        "session_id",
        "purged_by",
        "purged_at",
        "event_count",
        "pending",
    ]
    rows = raw.execute(
        "SELECT tenant, session_id, purged_by, event_count, pending FROM purge_audit"
    ).fetchall()
    assert rows == [("default", sid, "admin@example", 8, None)]
    with pytest.raises(SessionNotFound):
        journal.events(sid)
    assert sid not in {e.session_id for e in journal.events_all(limit=1000)}
    assert sid not in {s.session_id for s in journal.sessions(status="all")}
    assert (journal.events(keep), journal.messages(keep), journal.tool_calls(keep)) == kept
    rejected(journal, SessionNotFound, lambda: journal.purge_session(sid))
    # Event ids are never reused.
    assert journal.append(keep, "user_message", {"content": "x"}).event_id > largest
    assert journal.verify().ok
    if raw.backend == "sqlite":
        # secure_delete and the checkpoint leave no copy of the content in the files.
        for path in db_path.parent.iterdir():
            if path.name.startswith(db_path.name):
                assert b"secret-marker-7f3a" not in path.read_bytes(), path.name


# === verify =======================================================================================


def test_verify_a_clean_journal(journal: Journal) -> None:
    sid = seed(journal)
    journal.append(sid, "user_message", {"content": "您好", "supersedes": 2})
    fork = journal.fork(sid, 6).session_id
    journal.delete_session(fork)
    journal.compact(sid, 7, SUMMARY)
    journal.for_tenant("b").create_session("b")
    report = journal.verify()
    assert report.ok
    assert (report.differences, report.journal_errors, report.integrity) == ([], [], [])
    assert report.sessions_checked == 2
    assert report.events_checked == len(settled_feed(journal)) == 9 + 8
    assert report.rebuilt == []


def test_verify_reports_exactly_the_corrupted_rows_and_rebuild_repairs(
    journal: Journal, raw: RawSQL
) -> None:
    sid = seed(journal)
    other = seed(journal, "untouched")
    theirs = journal.for_tenant("b")
    theirs.create_session("b")
    before = (journal.get_session(sid), journal.messages(sid), journal.tool_calls(sid))
    raw.execute("UPDATE messages SET tokens = 1 WHERE session_id = ? AND seq = 2", (sid,))
    raw.execute("DELETE FROM tool_calls WHERE session_id = ? AND call_id = 'call_1'", (sid,))
    # A row for a message the journal never had (SQLite's rows name the event holding their
    # text, here none; PostgreSQL's hold the text, and name their tenant for RLS).
    bogus: dict[str, object] = {"session_id": sid, "seq": 99, "role": "user", "tokens": 7}
    if raw.backend == "postgres":
        bogus |= {"tenant": "default", "content": "bogus"}
    else:
        bogus["content_id"] = 10**9
    raw.execute(
        f"INSERT INTO messages ({', '.join(bogus)}, created_at)"
        f" VALUES ({', '.join('?' for _ in bogus)}, 0)",
        tuple(bogus.values()),
    )
    raw.execute("UPDATE sessions SET last_seq = 3, title = 'renamed' WHERE session_id = ?", (sid,))
    expected = {
        ("messages", f"{sid}/2", "tokens"),
        ("tool_calls", f"{sid}/call_1", "*"),
        ("messages", f"{sid}/99", "*"),
        ("sessions", sid, "last_seq"),
        ("sessions", sid, "title"),
    }
    report = journal.verify()
    assert not report.ok
    found = [(d.table, d.key, d.field) for d in report.differences]
    assert sorted(found) == sorted(expected)
    values = {(d.table, d.key, d.field): (d.stored, d.expected) for d in report.differences}
    tokens = next(m.tokens for m in before[1] if m.seq == 2)
    assert values[("messages", f"{sid}/2", "tokens")] == (1, tokens)
    assert values[("sessions", sid, "last_seq")] == (3, 7)
    assert values[("sessions", sid, "title")] == ("renamed", "订单客服")
    assert (report.journal_errors, report.integrity) == ([], [])
    assert report.rebuilt == []
    # Verify only reads; the corruption is still there.
    assert journal.get_session(sid).title == "renamed"
    # Tenant b's verify does not see tenant A's sessions.
    assert theirs.verify().ok
    repaired = journal.verify(rebuild=True)
    assert sorted((d.table, d.key, d.field) for d in repaired.differences) == sorted(expected)
    assert repaired.rebuilt == [sid]
    assert journal.verify().ok
    assert (journal.get_session(sid), journal.messages(sid), journal.tool_calls(sid)) == before
    assert journal.replay(other) == SEED_REPLAY


def test_verify_catches_a_wrong_counter_and_status(journal: Journal, raw: RawSQL) -> None:
    sid = seed(journal)
    raw.execute(
        "UPDATE sessions SET event_count = 99, prompt_tokens = 0, status = 'archived'"
        " WHERE session_id = ?",
        (sid,),
    )
    raw.execute(
        "UPDATE tool_calls SET status = 'error' WHERE session_id = ? AND call_id = 'call_1'",
        (sid,),
    )
    found = {(d.table, d.key, d.field) for d in journal.verify().differences}
    assert found == {
        ("sessions", sid, "event_count"),
        ("sessions", sid, "prompt_tokens"),
        ("sessions", sid, "status"),
        ("tool_calls", f"{sid}/call_1", "status"),
    }
    journal.verify(rebuild=True)
    assert journal.verify().ok
    assert journal.get_session(sid).status == "active"


# === context ======================================================================================


def header_length(replayed: list[dict[str, Any]]) -> int:
    """Leading system messages: the prompt and the compaction summary (no system_message here)."""
    count = 0
    while count < len(replayed) and replayed[count]["role"] == "system":
        count += 1
    return count


def brute_context(replayed: list[dict[str, Any]], max_tokens: int) -> list[dict[str, Any]] | None:
    """The longest suffix of the replay that fits, cut only before a user message."""
    head = header_length(replayed)
    header, body = replayed[:head], replayed[head:]
    fixed = sum(estimate_tokens(m) for m in header)
    suffix = [0] * (len(body) + 1)
    for i in range(len(body) - 1, -1, -1):
        suffix[i] = suffix[i + 1] + estimate_tokens(body[i])
    for start in [0] + [i for i, m in enumerate(body) if m["role"] == "user"]:
        if fixed + suffix[start] <= max_tokens:
            return header + body[start:]
    return None


def check_context(journal: Journal, sid: str, budgets: list[int]) -> None:
    replayed = journal.replay(sid)
    assert isinstance(replayed, list)
    for budget in budgets:
        expected = brute_context(replayed, budget)
        if expected is None:
            with pytest.raises(ContextTooLarge):
                journal.context(sid, max_tokens=budget)
        else:
            got = journal.context(sid, max_tokens=budget)
            assert got == expected, budget
            body = got[header_length(got) :]
            assert body == replayed[len(replayed) - len(body) :]
            if len(body) < len(replayed) - header_length(replayed):
                assert body[0]["role"] == "user"


def total_tokens(journal: Journal, sid: str) -> int:
    return sum(estimate_tokens(m) for m in journal.replay(sid))


def test_context_cuts_only_before_user_messages(journal: Journal) -> None:
    sid = seed(journal)
    # A result appended after the next user message still stays with its call.
    journal.append_many(
        sid,
        [
            msg("user_message", "再查一次"),
            call("call_2"),
            msg("user_message", "快一点"),
            result("call_2", "43"),
            msg("assistant_message", "现在有 43 个。"),
        ],
    )
    total = total_tokens(journal, sid)
    check_context(journal, sid, list(range(1, total + 3)))
    assert journal.context(sid, max_tokens=total) == journal.replay(sid)
    fitted = journal.context(sid, max_tokens=total - 1)
    assert isinstance(fitted, list)
    assert fitted[0] == sys_(PROMPT)
    assert fitted[1]["role"] == "user"


def test_context_too_large_when_nothing_fits(journal: Journal) -> None:
    sid = seed(journal)
    before = state(journal)
    with pytest.raises(ContextTooLarge) as caught:
        journal.context(sid, max_tokens=1)
    assert isinstance(caught.value, ValueError)
    assert isinstance(caught.value, JournalError)
    smallest = estimate_tokens(sys_(PROMPT)) + sum(estimate_tokens(m) for m in SEED_REPLAY[3:])
    assert journal.context(sid, max_tokens=smallest) == [SEED_REPLAY[0], *SEED_REPLAY[3:]]
    with pytest.raises(ContextTooLarge):
        journal.context(sid, max_tokens=smallest - 1)
    assert state(journal) == before
    with pytest.raises(InvalidArgument):
        journal.context(sid, max_tokens=0)


def test_context_counts_the_compaction_summary(journal: Journal, long_seed: str) -> None:
    sid = long_seed
    journal.compact(sid, 7, SUMMARY * 5)
    replayed = journal.replay(sid)
    assert replayed[1] == sys_(SUMMARY * 5)
    total = total_tokens(journal, sid)
    assert journal.context(sid, max_tokens=total) == replayed
    with pytest.raises(ContextTooLarge):
        journal.context(sid, max_tokens=total - 1)  # the only user message is the first
    check_context(journal, sid, list(range(1, total + 2)))


def test_context_with_a_tokenizer(journal: Journal) -> None:
    sid = seed(journal)
    assert journal.context(sid, max_tokens=7, tokenizer=lambda m: 1) == SEED_REPLAY
    assert journal.context(sid, max_tokens=6, tokenizer=lambda m: 1) == [
        SEED_REPLAY[0],
        *SEED_REPLAY[3:],
    ]


def build_long_session(journal: Journal, turns: int, rng: random.Random) -> str:
    sid = journal.create_session("long", system_prompt=PROMPT).session_id
    batch: list[dict[str, Any]] = []
    for turn in range(turns):
        batch.append(msg("user_message", "问" * rng.randint(1, 40)))
        if rng.random() < 0.4:
            calls = [f"c{turn}_{i}" for i in range(rng.randint(1, 2))]
            batch += [call(c, "lookup", "x" * rng.randint(0, 30)) for c in calls]
            batch += [result(c, "r" * rng.randint(0, 60)) for c in calls]
        batch.append(msg("assistant_message", "答" * rng.randint(0, 80)))
        if len(batch) >= 200:
            journal.append_many(sid, batch)
            batch = []
    if batch:
        journal.append_many(sid, batch)
    return sid


def test_context_of_a_long_session_is_the_right_suffix(journal: Journal) -> None:
    rng = random.Random(20240601)
    sid = build_long_session(journal, 700, rng)
    assert journal.get_session(sid).last_seq >= 2000
    total = total_tokens(journal, sid)
    budgets = [1, 10, 30, 60, 100, 250, 1000, 4000, total // 3, total // 2, total - 1, total]
    budgets += [rng.randint(1, total) for _ in range(10)]
    check_context(journal, sid, budgets)
    # With a compaction in the middle, the summary leads and counts.
    events = journal.events(sid, limit=10_000)
    until = next(e.seq for e in events[1000:] if e.type == "user_message") - 1
    journal.compact(sid, until, "summary of the first thousand events")
    total = total_tokens(journal, sid)
    check_context(journal, sid, [1, 50, 500, 3000, total // 2, total - 1, total, total + 1])


# === open and settings ============================================================================


@pytest.mark.parametrize(
    "url",
    [
        ":memory:",
        "",
        "sqlite:///:memory:",
        "file::memory:?cache=shared",
    ],
)
def test_open_rejects_what_is_not_a_database_file(url: str) -> None:
    with pytest.raises(InvalidArgument):
        Journal.open(url)


def test_open_rejects_a_bad_durability(tmp_path: Path) -> None:
    with pytest.raises(InvalidArgument, match="durability"):
        Journal.open(tmp_path / "x.db", durability="fast")  # type: ignore[arg-type]


def test_open_rejects_a_bad_tenant(tmp_path: Path) -> None:
    with pytest.raises(InvalidArgument, match="tenant"):
        Journal.open(tmp_path / "x.db", tenant="has space")


def pragmas(conn: sqlite3.Connection) -> tuple[str, int, int]:
    return (
        conn.execute("PRAGMA journal_mode").fetchone()[0],
        conn.execute("PRAGMA synchronous").fetchone()[0],
        conn.execute("PRAGMA foreign_keys").fetchone()[0],
    )


@pytest.mark.parametrize(("durability", "synchronous"), [("full", 2), ("normal", 1)])
def test_settings_are_read_back_on_every_connection(
    tmp_path: Path, durability: Any, synchronous: int
) -> None:
    with Journal.open(f"sqlite:///{tmp_path / 'x.db'}", durability=durability) as journal:
        sid = seed(journal)
        assert journal.replay(sid) == SEED_REPLAY
        storage: Any = journal.storage
        assert storage.durability == durability
        assert pragmas(storage._writer) == ("wal", synchronous, 1)
        assert pragmas(storage._reader()) == ("wal", synchronous, 1)
    assert (tmp_path / "x.db").exists()


def test_the_fixture_journal_runs_at_full_durability(journal: Journal, backend: str) -> None:
    if backend != "sqlite":
        pytest.skip("SQLite PRAGMAs")
    storage: Any = journal.storage
    assert pragmas(storage._writer) == ("wal", 2, 1)


def test_a_reopened_journal_sees_everything(journal: Journal, journal_url: str) -> None:
    sid = seed(journal)
    with Journal.open(journal_url) as again:
        assert again.replay(sid) == SEED_REPLAY
        assert again.events(sid) == journal.events(sid)
        assert again.verify().ok


# === open: PostgreSQL =============================================================================


@pytest.mark.parametrize(
    "options",
    [
        {"schema": "Bad"},
        {"schema": "1st"},
        {"schema": "a-b"},
        {"schema": ""},
        {"schema": "aj_ok", "pooler": "x"},
        {"schema": "aj_ok", "pool_size": "0"},
        {"schema": "aj_ok", "pool_size": "1001"},
        {"schema": "aj_ok", "pool_size": "many"},
    ],
)
def test_open_rejects_bad_postgres_options(options: dict[str, str]) -> None:
    schema = options.pop("schema")
    with pytest.raises(InvalidArgument):
        Journal.open(url_for(schema, **options))


@pytest.mark.parametrize(
    ("url", "words"),
    [
        (f"postgresql://aj_no_such_role@{HOST}?schema=aj_never", 'role "aj_no_such_role"'),
        (f"postgresql://{ROLE}@{HOST.split('/')[0]}/aj_no_such_db", 'database "aj_no_such_db"'),
    ],
)
def test_open_reports_the_servers_refusal(url: str, words: str) -> None:
    require_postgres()
    with pytest.raises(StorageError, match=f"{words} does not exist"):
        Journal.open(url)


def test_open_reports_an_unreachable_server() -> None:
    with pytest.raises(StorageError, match="port 1 failed"):
        Journal.open(f"postgresql://{ROLE}@127.0.0.1:1/test?schema=aj_never")


def schema_versions(schema: str) -> list[tuple[Any, ...]]:
    with psycopg.connect(ADMIN_URL) as conn:
        query = sql.SQL("SELECT version FROM {}.agentjournal_schema ORDER BY version")
        return conn.execute(query.format(sql.Identifier(schema))).fetchall()


def test_reopening_a_migrated_schema_migrates_nothing() -> None:
    with fresh_schema() as schema:
        with Journal.open(url_for(schema)) as journal:
            sid = seed(journal)
        versions = schema_versions(schema)
        assert versions == [(n,) for n in range(1, len(versions) + 1)]
        with Journal.open(url_for(schema, pooler="transaction", pool_size="2")) as again:
            assert again.replay(sid) == SEED_REPLAY
            assert again.verify().ok
        assert schema_versions(schema) == versions


def test_instances_opening_a_new_schema_together_migrate_it_once() -> None:
    with fresh_schema() as schema:
        barrier = threading.Barrier(4)
        opened: list[Journal] = []
        errors: list[BaseException] = []

        def open_() -> None:
            try:
                barrier.wait(30)
                opened.append(Journal.open(url_for(schema)))
            except BaseException as exc:
                errors.append(exc)

        threads = [threading.Thread(target=open_) for _ in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
        try:
            assert errors == []
            assert len(opened) == 4
            sid = seed(opened[0])
            assert all(j.replay(sid) == SEED_REPLAY for j in opened)
        finally:
            for journal in opened:
                journal.close()
        versions = schema_versions(schema)
        assert versions == [(n,) for n in range(1, len(versions) + 1)]


def test_open_refuses_a_schema_newer_than_it_knows() -> None:
    with fresh_schema() as schema:
        Journal.open(url_for(schema)).close()
        known = len(schema_versions(schema))
        with psycopg.connect(ADMIN_URL) as conn:
            insert = sql.SQL("INSERT INTO {}.agentjournal_schema (version) VALUES (%s)")
            conn.execute(insert.format(sql.Identifier(schema)), (known + 1,))
        with pytest.raises(StorageError, match=f"schema version {known + 1}, newer"):
            Journal.open(url_for(schema))
        # The refusal changed nothing: the next open refuses alike.
        assert schema_versions(schema)[-1] == (known + 1,)
        with pytest.raises(StorageError, match="upgrade agentjournal"):
            Journal.open(url_for(schema))


def test_one_session_when_processes_race_to_create_it_with_one_key(journal_url: str) -> None:
    """Two processes (two journals) start the same conversation at once, with the same session
    id and idempotency key: each gets the same session, and exactly one of them created it.
    On PostgreSQL the loser once saw the winner's row half-way through its own checks and was
    told the id was taken."""

    def create(journal: Journal, name: str, start: threading.Barrier, out: list[Any]) -> None:
        start.wait()
        try:
            session, created = journal.create_session_ex(
                "same", session_id=name, idempotency_key=name
            )
        except JournalError as exc:
            out.append(exc)
        else:
            out.append((session.session_id, created))

    with Journal.open(journal_url) as first, Journal.open(journal_url) as second:
        for round_ in range(40):
            name, start, results = f"race-{round_}", threading.Barrier(4), []
            threads = [
                threading.Thread(target=create, args=(journal, name, start, results))
                for journal in (first, second) * 2
            ]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
            assert sorted(results, key=repr) == [(name, False)] * 3 + [(name, True)]
