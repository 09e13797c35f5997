"""`JournalSessionService` against ADK's own `DatabaseSessionService` on SQLite: the same random
sequence of verbs (create, get with and without a window, list, delete, append with state of
every scope, append through a stale session, read user state) gives equal results from both:
the same sessions, events, state, update times, order and errors.

Event times rise with every append, as they do in a run: `DatabaseSessionService` orders events
by their timestamp, the journal by when they were appended (docs/integrations.md)."""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("google.adk")
pytest.importorskip("aiosqlite")

from google.adk.errors import StaleSessionError
from google.adk.errors.already_exists_error import AlreadyExistsError
from google.adk.errors.session_not_found_error import SessionNotFoundError
from google.adk.events import Event, EventActions
from google.adk.sessions import BaseSessionService, DatabaseSessionService, Session
from google.adk.sessions.base_session_service import GetSessionConfig
from google.genai import types
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentjournal import Journal
from agentjournal.integrations.adk import JournalSessionService

# Both stores commit with fsync; in memory-backed files an example costs its logic, not disks.
SCRATCH = "/dev/shm" if Path("/dev/shm").is_dir() else None
APPS = st.sampled_from(["shop", "blog"])
USERS = st.sampled_from(["ann", "bob"])
IDS = st.sampled_from(["s1", "s2", "s3"])
KEYS = st.sampled_from(["k", "n", "app:theme", "app:n", "user:lang", "user:n", "temp:t"])
STATE = st.dictionaries(KEYS, st.integers(-3, 3) | st.text(max_size=3), max_size=3)
WINDOW = st.one_of(
    st.none(),
    st.builds(GetSessionConfig, num_recent_events=st.integers(0, 4)),
    st.builds(GetSessionConfig, after_timestamp=st.integers(0, 12).map(lambda i: 4e9 + i / 4)),
    st.builds(
        GetSessionConfig,
        num_recent_events=st.integers(0, 4),
        after_timestamp=st.integers(0, 12).map(lambda i: 4e9 + i / 4),
    ),
)
NAMES = st.tuples(APPS, USERS, IDS)
VERBS = st.lists(
    st.one_of(
        st.tuples(st.just("create"), NAMES, STATE),
        st.tuples(st.just("create_unnamed"), st.tuples(APPS, USERS), STATE),
        st.tuples(st.just("get"), NAMES, WINDOW),
        st.tuples(st.just("list"), st.tuples(APPS, st.none() | USERS)),
        st.tuples(st.just("delete"), NAMES),
        st.tuples(st.just("append"), NAMES, STATE, st.sampled_from(["user", "agent", "call"])),
        st.tuples(st.just("stale"), NAMES, STATE),
        st.tuples(st.just("user_state"), st.tuples(APPS, USERS)),
    ),
    max_size=25,
)


def seen(session: Session | None) -> Any:
    """What a session says, for comparing: everything but the time a creation drew."""
    if session is None:
        return None
    return (
        session.id,
        session.app_name,
        session.user_id,
        session.state,
        [event.model_dump(mode="json", exclude_none=True) for event in session.events],
        session.last_update_time if session.events else "created",
    )


class Clock:
    def __init__(self) -> None:
        self.ticks = 0

    def next(self) -> float:
        # Quarter seconds: exact in binary and in a database's microseconds.
        self.ticks += 1
        return 4e9 + self.ticks / 4


def event_for(kind: str, delta: dict[str, Any], at: float, n: int) -> Event:
    if kind == "call":
        call = types.FunctionCall(id=f"c{n}", name="lookup", args={"n": n})
        content = types.Content(role="model", parts=[types.Part(function_call=call)])
    else:
        role = "user" if kind == "user" else "model"
        content = types.Content(role=role, parts=[types.Part(text=f"text {n}")])
    return Event(
        id=f"e{n}",
        invocation_id=f"inv{n}",
        author="user" if kind == "user" else "agent",
        timestamp=at,
        content=content,
        actions=EventActions(state_delta=dict(delta)),
    )


async def outcome(call: Any) -> Any:
    try:
        return ("ok", await call)
    except (AlreadyExistsError, SessionNotFoundError, StaleSessionError) as exc:
        return ("raised", type(exc).__name__)


async def step(service: BaseSessionService, verb: tuple[Any, ...], at: float, n: int) -> Any:
    name = verb[0]
    if name == "create":
        (app, user, sid), state = verb[1], verb[2]
        created = await outcome(
            service.create_session(app_name=app, user_id=user, session_id=sid, state=state)
        )
        return (created[0], seen(created[1])) if created[0] == "ok" else created
    if name == "create_unnamed":
        (app, user), state = verb[1], verb[2]
        created = await service.create_session(app_name=app, user_id=user, state=state)
        # The generated id differs; the rest must not. Delete it so later verbs agree.
        summary = (created.app_name, created.user_id, created.state, created.events)
        await service.delete_session(app_name=app, user_id=user, session_id=created.id)
        return summary
    if name == "get":
        (app, user, sid), config = verb[1], verb[2]
        found = await service.get_session(app_name=app, user_id=user, session_id=sid, config=config)
        return seen(found)
    if name == "list":
        app, user = verb[1]
        listed = await service.list_sessions(app_name=app, user_id=user)
        return [seen(session) for session in listed.sessions]
    if name == "delete":
        app, user, sid = verb[1]
        return await service.delete_session(app_name=app, user_id=user, session_id=sid)
    if name == "user_state":
        app, user = verb[1]
        return await service.get_user_state(app_name=app, user_id=user)
    (app, user, sid), delta = verb[1], verb[2]
    session = await service.get_session(app_name=app, user_id=user, session_id=sid)
    if session is None:
        session = Session(id=sid, app_name=app, user_id=user)
    if name == "stale":
        # Another reader appends first: this session object is stale now.
        other = await service.get_session(app_name=app, user_id=user, session_id=sid)
        if other is not None:
            await service.append_event(other, event_for("user", {}, at, n))
        at, n = at + 1 / 8, n + 10_000
    event = event_for(verb[3] if name == "append" else "agent", delta, at, n)
    result = await outcome(service.append_event(session, event))
    return result[0] if result[0] == "ok" else result, session.state


async def compare(verbs: list[tuple[Any, ...]], folder: Path) -> None:
    theirs = DatabaseSessionService(f"sqlite+aiosqlite:///{folder / 'adk.db'}")
    journal = Journal.open(str(folder / "journal.db"))
    ours = JournalSessionService(journal)
    clock = Clock()
    try:
        for n, verb in enumerate(verbs):
            at = clock.next()
            expected = await step(theirs, verb, at, n)
            got = await step(ours, verb, at, n)
            assert got == expected, (n, verb)
    finally:
        await theirs.close()
        journal.close()


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(verbs=VERBS)
def test_the_same_verbs_give_the_same_results_as_database_session_service(
    verbs: list[tuple[Any, ...]],
) -> None:
    with tempfile.TemporaryDirectory(dir=SCRATCH) as folder:
        asyncio.run(compare(verbs, Path(folder)))


def test_a_long_fixed_sequence_agrees_too(tmp_path: Path) -> None:
    verbs: list[tuple[Any, ...]] = [("create", ("shop", "ann", "s1"), {"k": 1, "app:theme": 1})]
    for i in range(60):
        verbs.append(("append", ("shop", "ann", "s1"), {"n": i, "user:n": i}, "user"))
        if i % 7 == 0:
            verbs.append(("get", ("shop", "ann", "s1"), GetSessionConfig(num_recent_events=3)))
            verbs.append(("stale", ("shop", "ann", "s1"), {"k": i}))
    verbs += [("list", ("shop", None)), ("user_state", ("shop", "ann"))]
    asyncio.run(compare(verbs, tmp_path))
