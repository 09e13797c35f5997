"""`JournalSessionService` as ADK's `BaseSessionService` defines it, on both backends: sessions,
events kept exactly, state by its scopes (`app:` and `user:` shared, `temp:` never stored),
`get_session`'s window read from the end, `list_sessions` reading one user's sessions only,
deletion, ADK's staleness rule under concurrent appends, and what the journal makes of an ADK
conversation (its own message and tool events, replayable)."""

from __future__ import annotations

import asyncio
import random
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("google.adk")

from google.adk.errors import StaleSessionError
from google.adk.errors.already_exists_error import AlreadyExistsError
from google.adk.errors.session_not_found_error import SessionNotFoundError
from google.adk.events import Event, EventActions
from google.adk.sessions import BaseSessionService, Session
from google.adk.sessions.base_session_service import GetSessionConfig
from google.genai import types

from agentjournal import AsyncJournal, InvalidArgument, InvalidEvent, Journal, PayloadTooLarge
from agentjournal.integrations.adk import JournalSessionService, from_uri
from agentjournal.integrations.adk_events import journal_id, session_metadata
from postgres_fixtures import POOL_RANDOM

pytestmark = POOL_RANDOM  # see postgres_fixtures.POOL_RANDOM

APP, USER = "shop", "user-42"


@pytest.fixture
def service(journal: Journal) -> JournalSessionService:
    return JournalSessionService(journal)


def text_event(author: str, text: str, *, at: float, **delta: Any) -> Event:
    role = "user" if author == "user" else "model"
    return Event(
        author=author,
        invocation_id="inv-1",
        timestamp=at,
        content=types.Content(role=role, parts=[types.Part(text=text)]),
        actions=EventActions(state_delta=dict(delta)),
    )


def call_event(call_id: str, name: str, args: dict[str, Any], *, at: float) -> Event:
    call = types.FunctionCall(id=call_id, name=name, args=args)
    return Event(
        author="shop_agent",
        invocation_id="inv-1",
        timestamp=at,
        content=types.Content(role="model", parts=[types.Part(function_call=call)]),
    )


def response_event(call_id: str, name: str, response: dict[str, Any], *, at: float) -> Event:
    part = types.FunctionResponse(id=call_id, name=name, response=response)
    return Event(
        author="shop_agent",
        invocation_id="inv-1",
        timestamp=at,
        content=types.Content(role="user", parts=[types.Part(function_response=part)]),
    )


def run(coro: Any) -> Any:
    return asyncio.run(coro)


async def fill(service: JournalSessionService, session: Session, count: int) -> list[Event]:
    events = [text_event("user", f"message {i}", at=1000.0 + i) for i in range(count)]
    for event in events:
        await service.append_event(session, event)
    return events


# -- sessions ---------------------------------------------------------------------------------


def test_it_is_adks_session_service_and_a_new_session_reads_back(
    service: JournalSessionService,
) -> None:
    assert isinstance(service, BaseSessionService)

    async def go() -> None:
        created = await service.create_session(
            app_name=APP, user_id=USER, session_id="s1", state={"cart": [1, 2]}
        )
        assert (created.id, created.app_name, created.user_id) == ("s1", APP, USER)
        assert created.state == {"cart": [1, 2]}
        assert created.events == []
        got = await service.get_session(app_name=APP, user_id=USER, session_id="s1")
        assert got is not None
        assert got.state == {"cart": [1, 2]}
        assert got.last_update_time == created.last_update_time
        generated = await service.create_session(app_name=APP, user_id=USER)
        assert generated.id
        assert generated.id != "s1"

    run(go())


def test_a_taken_id_is_already_exists_and_changes_no_state(service: JournalSessionService) -> None:
    async def go() -> None:
        await service.create_session(app_name=APP, user_id=USER, session_id="s1")
        with pytest.raises(AlreadyExistsError):
            await service.create_session(
                app_name=APP, user_id=USER, session_id="s1", state={"app:x": 1, "user:y": 2}
            )
        got = await service.get_session(app_name=APP, user_id=USER, session_id="s1")
        assert got is not None
        assert got.state == {}
        # The same id under another user or app is another session, as in ADK.
        await service.create_session(app_name=APP, user_id="other", session_id="s1")
        await service.create_session(app_name="other", user_id=USER, session_id="s1")

    run(go())


def test_unknown_sessions_read_as_none_and_delete_as_nothing(
    service: JournalSessionService,
) -> None:
    async def go() -> None:
        assert await service.get_session(app_name=APP, user_id=USER, session_id="nope") is None
        await service.delete_session(app_name=APP, user_id=USER, session_id="nope")
        assert (await service.list_sessions(app_name=APP, user_id=USER)).sessions == []
        assert (await service.list_sessions(app_name=APP)).sessions == []
        ghost = Session(id="nope", app_name=APP, user_id=USER)
        with pytest.raises(SessionNotFoundError):
            await service.append_event(ghost, text_event("user", "hi", at=1.0))

    run(go())


def test_bad_arguments_are_typed_errors_with_nothing_written(
    service: JournalSessionService, journal: Journal
) -> None:
    async def go() -> None:
        with pytest.raises(InvalidArgument):
            await service.create_session(app_name=APP, user_id=None)  # type: ignore[arg-type]
        with pytest.raises(InvalidArgument):
            await service.create_session(app_name=1, user_id=USER)  # type: ignore[arg-type]
        with pytest.raises(InvalidArgument):
            await service.create_session(app_name=APP, user_id=USER, state=[1])  # type: ignore[arg-type]
        with pytest.raises(InvalidArgument):
            await service.get_session(app_name=APP, user_id=USER, session_id=None)  # type: ignore[arg-type]
        with pytest.raises(InvalidArgument):
            await service.append_event("s", "e")  # type: ignore[arg-type]
        with pytest.raises(InvalidArgument):
            JournalSessionService("agent.db")  # type: ignore[arg-type]

    run(go())
    assert journal.sessions() == []


# -- events -----------------------------------------------------------------------------------


def test_events_read_back_exactly_as_appended(service: JournalSessionService) -> None:
    async def go() -> None:
        session = await service.create_session(app_name=APP, user_id=USER, session_id="s")
        blob = types.Part(inline_data=types.Blob(mime_type="image/png", data=b"\x89PNG\x00\x01"))
        rich = Event(
            author="user",
            invocation_id="inv-9",
            timestamp=12.5,
            content=types.Content(role="user", parts=[types.Part(text="看这张图"), blob]),
            actions=EventActions(state_delta={"seen": True}, artifact_delta={"a.png": 1}),
            custom_metadata={"k": [1, {"x": None}]},
        )
        thought = Event(
            author="shop_agent",
            invocation_id="inv-9",
            timestamp=13.0,
            content=types.Content(role="model", parts=[types.Part(text="thinking", thought=True)]),
        )
        appended = [
            rich,
            thought,
            call_event("c1", "count_orders", {"status": "open"}, at=14.0),
            response_event("c1", "count_orders", {"count": 42}, at=15.0),
            text_event("shop_agent", "You have 42 orders.", at=16.0),
        ]
        for event in appended:
            returned = await service.append_event(session, event)
            assert returned is event
        assert session.events == appended
        got = await service.get_session(app_name=APP, user_id=USER, session_id="s")
        assert got is not None
        assert got.events == appended
        assert got.last_update_time == 16.0 == session.last_update_time
        assert got.state == {"seen": True}

    run(go())


def test_partial_events_are_not_stored(service: JournalSessionService) -> None:
    async def go() -> None:
        session = await service.create_session(app_name=APP, user_id=USER, session_id="s")
        partial = text_event("shop_agent", "You h", at=1.0)
        partial.partial = True
        assert await service.append_event(session, partial) is partial
        got = await service.get_session(app_name=APP, user_id=USER, session_id="s")
        assert got is not None
        assert got.events == []
        assert session.events == []

    run(go())


def test_the_journal_shows_an_adk_conversation_as_its_own_events(
    service: JournalSessionService, journal: Journal
) -> None:
    async def go() -> None:
        session = await service.create_session(app_name=APP, user_id=USER, session_id="s")
        for event in (
            text_event("user", "How many orders?", at=1.0),
            call_event("c1", "count_orders", {"status": "open"}, at=2.0),
            response_event("c1", "count_orders", {"count": 42}, at=3.0),
            text_event("shop_agent", "You have 42 orders.", at=4.0),
            # A call id used before is kept in the ADK event but not mirrored (the journal's
            # tool-call rules hold), and so is a response whose call is not open.
            call_event("c1", "count_orders", {}, at=5.0),
            response_event("zz", "count_orders", {}, at=6.0),
        ):
            await service.append_event(session, event)

    run(go())
    jid = journal_id("session", APP, USER, "s")
    stored = journal.get_session(jid)
    assert stored.title == "s"
    assert stored.metadata["app_name"] == APP
    assert stored.metadata["user_id"] == USER
    assert journal.replay(jid) == [
        {"role": "user", "content": "How many orders?"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "c1",
                    "type": "function",
                    "function": {"name": "count_orders", "arguments": '{"status": "open"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": '{"count": 42}'},
        {"role": "assistant", "content": "You have 42 orders."},
    ]
    assert [c.status for c in journal.tool_calls(jid)] == ["ok"]
    assert journal.verify().ok


# -- get_session's window ---------------------------------------------------------------------


class CountingJournal:
    """The journal, counting the events its reads return (what a read costs)."""

    def __init__(self, journal: Journal) -> None:
        self._journal = journal
        self.read = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._journal, name)

    def events(self, *args: Any, **kwargs: Any) -> Any:
        found = self._journal.events(*args, **kwargs)
        self.read += len(found)
        return found


def test_num_recent_events_and_after_timestamp_as_adk_defines_them(
    service: JournalSessionService,
) -> None:
    async def go() -> None:
        session = await service.create_session(app_name=APP, user_id=USER, session_id="s")
        events = await fill(service, session, 30)

        async def window(**config: Any) -> list[Event]:
            got = await service.get_session(
                app_name=APP, user_id=USER, session_id="s", config=GetSessionConfig(**config)
            )
            assert got is not None
            return got.events

        assert await window(num_recent_events=5) == events[-5:]
        assert await window(num_recent_events=0) == []
        assert await window(num_recent_events=100) == events
        assert await window(after_timestamp=1025.0) == events[25:]
        assert await window(after_timestamp=1025.0, num_recent_events=2) == events[-2:]
        assert await window(after_timestamp=1025.0, num_recent_events=9) == events[25:]
        assert await window(after_timestamp=5000.0) == []
        assert await window() == events

    run(go())


def test_get_session_reads_what_it_returns_not_the_whole_session(journal: Journal) -> None:
    counting = CountingJournal(journal)
    service = JournalSessionService(journal)
    service.journal = counting  # type: ignore[assignment]

    async def go() -> None:
        session = await service.create_session(app_name=APP, user_id=USER, session_id="s")
        await fill(service, session, 1000)
        for config in (
            GetSessionConfig(num_recent_events=20),
            GetSessionConfig(after_timestamp=1000.0 + 990),
            GetSessionConfig(num_recent_events=0),
        ):
            counting.read = 0
            got = await service.get_session(
                app_name=APP, user_id=USER, session_id="s", config=config
            )
            assert got is not None
            assert len(got.events) <= 20
            assert counting.read <= 2 * 20 + 10, (config, counting.read)

    run(go())


# -- state ------------------------------------------------------------------------------------


def test_state_scopes_as_adk_defines_them(service: JournalSessionService) -> None:
    async def go() -> None:
        one = await service.create_session(
            app_name=APP,
            user_id=USER,
            session_id="one",
            state={"k": 1, "app:theme": "dark", "user:name": "Ann", "temp:scratch": 0},
        )
        assert one.state == {"k": 1, "app:theme": "dark", "user:name": "Ann"}
        await service.append_event(
            one,
            text_event("user", "hi", at=1.0, k=2, **{"user:lang": "zh", "temp:step": 3}),
        )
        # temp: state reaches the session object for the rest of the invocation, never storage.
        assert one.state["temp:step"] == 3
        assert "temp:step" not in (one.events[-1].actions.state_delta or {})
        two = await service.create_session(app_name=APP, user_id=USER, session_id="two")
        assert two.state == {"app:theme": "dark", "user:name": "Ann", "user:lang": "zh"}
        other_user = await service.create_session(app_name=APP, user_id="bob", session_id="3")
        assert other_user.state == {"app:theme": "dark"}
        other_app = await service.create_session(app_name="blog", user_id=USER, session_id="4")
        assert other_app.state == {}
        again = await service.get_session(app_name=APP, user_id=USER, session_id="one")
        assert again is not None
        assert again.state == {"k": 2, "app:theme": "dark", "user:name": "Ann", "user:lang": "zh"}
        assert await service.get_user_state(app_name=APP, user_id=USER) == {
            "name": "Ann",
            "lang": "zh",
        }
        assert await service.get_user_state(app_name=APP, user_id="nobody") == {}
        await service.append_event(two, text_event("user", "x", at=2.0, **{"app:theme": "light"}))
        got = await service.get_session(app_name=APP, user_id="bob", session_id="3")
        assert got is not None
        assert got.state == {"app:theme": "light"}

    run(go())


def test_session_state_survives_a_window_that_leaves_out_the_event_that_set_it(
    service: JournalSessionService,
) -> None:
    async def go() -> None:
        session = await service.create_session(
            app_name=APP, user_id=USER, session_id="s", state={"a": 0}
        )
        await service.append_event(session, text_event("user", "x", at=1.0, a=1, b=2))
        await fill(service, session, 40)
        got = await service.get_session(
            app_name=APP,
            user_id=USER,
            session_id="s",
            config=GetSessionConfig(num_recent_events=1),
        )
        assert got is not None
        assert got.state == {"a": 1, "b": 2}

    run(go())


# -- listing and deleting ---------------------------------------------------------------------


def test_list_sessions_of_a_user_and_of_an_app(service: JournalSessionService) -> None:
    async def go() -> None:
        a = await service.create_session(
            app_name=APP, user_id=USER, session_id="a", state={"x": 1, "user:u": 1}
        )
        b = await service.create_session(app_name=APP, user_id="bob", session_id="b")
        await service.create_session(app_name="blog", user_id=USER, session_id="c")
        await service.append_event(a, text_event("user", "hi", at=9e9))
        mine = (await service.list_sessions(app_name=APP, user_id=USER)).sessions
        assert [(s.id, s.events, s.state) for s in mine] == [("a", [], {"x": 1, "user:u": 1})]
        assert mine[0].last_update_time == 9e9
        everyone = (await service.list_sessions(app_name=APP)).sessions
        # Oldest update first, as ADK orders them.
        assert [(s.user_id, s.id) for s in everyone] == [("bob", "b"), (USER, "a")]
        assert everyone[0].last_update_time == b.last_update_time

    run(go())


def test_listing_one_user_reads_only_that_users_sessions(journal: Journal) -> None:
    counting = CountingJournal(journal)
    service = JournalSessionService(journal)

    async def go() -> None:
        for user in range(60):
            for n in range(3):
                await service.create_session(app_name=APP, user_id=f"u{user}", session_id=f"{n}")
        service.journal = counting  # type: ignore[assignment]
        found = (await service.list_sessions(app_name=APP, user_id="u7")).sessions
        assert [s.id for s in found] == ["0", "1", "2"]
        assert counting.read <= 20, counting.read

    run(go())


def test_delete_removes_the_session_and_its_id_can_be_used_again(
    service: JournalSessionService, journal: Journal
) -> None:
    async def go() -> None:
        session = await service.create_session(app_name=APP, user_id=USER, session_id="s")
        await fill(service, session, 3)
        await service.delete_session(app_name=APP, user_id=USER, session_id="s")
        assert await service.get_session(app_name=APP, user_id=USER, session_id="s") is None
        assert (await service.list_sessions(app_name=APP, user_id=USER)).sessions == []
        with pytest.raises(SessionNotFoundError):
            await service.append_event(session, text_event("user", "late", at=5.0))
        again = await service.create_session(app_name=APP, user_id=USER, session_id="s")
        assert again.events == []
        listed = (await service.list_sessions(app_name=APP, user_id=USER)).sessions
        assert [s.id for s in listed] == ["s"]

    run(go())
    assert journal.verify().ok


# -- concurrency and staleness ----------------------------------------------------------------


def test_a_session_changed_since_it_was_read_is_stale_and_nothing_is_written(
    service: JournalSessionService,
) -> None:
    async def go() -> None:
        await service.create_session(app_name=APP, user_id=USER, session_id="s")
        first = await service.get_session(app_name=APP, user_id=USER, session_id="s")
        second = await service.get_session(app_name=APP, user_id=USER, session_id="s")
        assert first is not None
        assert second is not None
        await service.append_event(first, text_event("user", "one", at=1.0))
        with pytest.raises(StaleSessionError):
            await service.append_event(second, text_event("user", "two", at=2.0, x=1))
        fresh = await service.get_session(app_name=APP, user_id=USER, session_id="s")
        assert fresh is not None
        assert [e.content.parts[0].text for e in fresh.events] == ["one"]  # type: ignore[union-attr, index]
        assert fresh.state == {}
        await service.append_event(fresh, text_event("user", "two", at=2.0))
        with pytest.raises(StaleSessionError):
            await service.append_event(first, text_event("user", "three", at=3.0))

    run(go())


def test_concurrent_appends_through_one_session_keep_every_event_in_order(
    service: JournalSessionService,
) -> None:
    async def go() -> None:
        session = await service.create_session(app_name=APP, user_id=USER, session_id="s")
        events = [text_event("user", f"m{i}", at=float(i), n=i) for i in range(40)]
        # Two runners sharing the session object, as parallel agents of one invocation do.
        await asyncio.gather(*(service.append_event(session, e) for e in events))
        got = await service.get_session(app_name=APP, user_id=USER, session_id="s")
        assert got is not None
        assert got.events == session.events
        assert sorted(e.id for e in got.events) == sorted(e.id for e in events)
        assert got.state == {"n": session.state["n"]}

    run(go())


def test_two_services_on_one_database_meet_adks_staleness_rule(journal_url: str) -> None:
    async def go() -> None:
        async with (
            JournalSessionService.open(journal_url) as one,
            JournalSessionService.open(journal_url) as two,
        ):
            await one.create_session(app_name=APP, user_id=USER, session_id="s")
            kept: list[str] = []

            async def runner(service: JournalSessionService, name: str) -> None:
                for i in range(15):
                    while True:
                        session = await service.get_session(
                            app_name=APP, user_id=USER, session_id="s"
                        )
                        assert session is not None
                        text = f"{name}{i}"
                        try:
                            await service.append_event(session, text_event("user", text, at=i))
                        except StaleSessionError:
                            continue  # reload, as ADK asks
                        kept.append(text)
                        break

            await asyncio.gather(runner(one, "a"), runner(two, "b"))
            got = await one.get_session(app_name=APP, user_id=USER, session_id="s")
            assert got is not None
            texts = [e.content.parts[0].text for e in got.events]  # type: ignore[union-attr, index]
            assert sorted(texts) == sorted(kept)
            assert len(texts) == 30
            assert [t for t in texts if t[0] == "a"] == [f"a{i}" for i in range(15)]

    run(go())


def test_a_session_object_from_elsewhere_is_current_if_its_newest_event_is(
    service: JournalSessionService,
) -> None:
    async def go() -> None:
        await service.create_session(app_name=APP, user_id=USER, session_id="s")
        loaded = await service.get_session(app_name=APP, user_id=USER, session_id="s")
        assert loaded is not None
        await service.append_event(loaded, text_event("user", "one", at=1.0))
        by_hand = Session(id="s", app_name=APP, user_id=USER, events=list(loaded.events))
        await service.append_event(by_hand, text_event("user", "two", at=2.0))
        behind = Session(id="s", app_name=APP, user_id=USER, events=list(loaded.events))
        with pytest.raises(StaleSessionError):
            await service.append_event(behind, text_event("user", "three", at=3.0))

    run(go())


def test_over_an_async_journal(tmp_path: Path) -> None:
    async def go() -> None:
        journal = await AsyncJournal.open(str(tmp_path / "agent.db"))
        try:
            service = JournalSessionService(journal)
            session = await service.create_session(app_name=APP, user_id=USER, session_id="s")
            events = await fill(service, session, 3)
            got = await service.get_session(app_name=APP, user_id=USER, session_id="s")
            assert got is not None
            assert got.events == events
        finally:
            await journal.close()

    run(go())


@pytest.fixture
def reopened(tmp_path: Path) -> str:
    return str(tmp_path / "agent.db")


def test_sessions_survive_reopening(reopened: str) -> None:
    async def go() -> list[Event]:
        async with JournalSessionService.open(reopened) as service:
            session = await service.create_session(
                app_name=APP, user_id=USER, session_id="s", state={"user:x": 1}
            )
            return await fill(service, session, 5)

    events = run(go())

    async def again() -> None:
        async with JournalSessionService.open(reopened) as service:
            got = await service.get_session(app_name=APP, user_id=USER, session_id="s")
            assert got is not None
            assert got.events == events
            assert got.state == {"user:x": 1}

    run(again())


def test_adks_cli_opens_it_from_an_agentjournal_uri(tmp_path: Path) -> None:
    from google.adk.cli.service_registry import load_services_module
    from google.adk.cli.utils.service_factory import create_session_service_from_options

    agents = tmp_path / "agents"
    agents.mkdir()
    # What a user puts beside their agents for `adk web --session_service_uri agentjournal:…`.
    (agents / "services.py").write_text(
        "from agentjournal.integrations.adk import register\nregister()\n", encoding="utf-8"
    )
    load_services_module(str(agents))
    service = create_session_service_from_options(
        base_dir=agents, session_service_uri=f"agentjournal:{tmp_path / 'agent.db'}"
    )
    assert isinstance(service, JournalSessionService)

    async def go() -> None:
        async with service:
            await service.create_session(app_name=APP, user_id=USER, session_id="s")
            assert await service.get_session(app_name=APP, user_id=USER, session_id="s")

    run(go())
    for bad in ("agentjournal:", "sqlite:agent.db"):
        with pytest.raises(InvalidArgument):
            from_uri(bad)
    with pytest.raises(InvalidArgument):  # SQLAlchemy's engine options mean nothing here
        from_uri(f"agentjournal:{tmp_path / 'x.db'}", pool_size=5)


def test_a_session_deleted_and_created_again_is_another_revision(
    service: JournalSessionService,
) -> None:
    async def go() -> None:
        old = await service.create_session(app_name=APP, user_id=USER, session_id="s")
        await fill(service, old, 2)
        await service.delete_session(app_name=APP, user_id=USER, session_id="s")
        new = await service.create_session(app_name=APP, user_id=USER, session_id="s")
        await fill(service, new, 2)  # as long as the old one was
        with pytest.raises(StaleSessionError):
            await service.append_event(old, text_event("user", "late", at=9.0))
        got = await service.get_session(app_name=APP, user_id=USER, session_id="s")
        assert got is not None
        assert got.events == new.events

    run(go())


def test_an_event_the_journal_cannot_hold_is_refused_with_nothing_written(
    service: JournalSessionService,
) -> None:
    async def go() -> None:
        session = await service.create_session(app_name=APP, user_id=USER, session_id="s")
        with pytest.raises(InvalidEvent):
            await service.append_event(session, text_event("user", "nul \x00 byte", at=1.0, k=1))
        assert session.events == []
        got = await service.get_session(app_name=APP, user_id=USER, session_id="s")
        assert got is not None
        assert (got.events, got.state) == ([], {})
        # The session object is still current: nothing was written.
        await service.append_event(session, text_event("user", "fine", at=2.0))

    run(go())


def all_events(journal: Journal) -> list[Any]:
    """Every event of the journal's tenant, read session by session (on PostgreSQL the feed,
    `events_all`, shows an event only once every older transaction on the server has ended)."""
    sessions = journal.sessions(limit=1000)
    return [e for s in sessions for e in journal.events(s.session_id, limit=10_000)]


@pytest.mark.parametrize(
    ("session_id", "state"),
    [
        ("s\x00", {"app:x": 1, "user:y": 2}),
        ("\ud800", {"app:x": 1}),
        ("s" * 1_100_000, {"app:x": 1}),
        ("s", {"app:x": 1, "k": float("nan")}),
        ("s", {"user:y": 2, "k": "nul \x00"}),
        ("s", {"app:x": 1, "k": "x" * 1_100_000}),
    ],
    ids=["nul-id", "surrogate-id", "huge-id", "nan-state", "nul-state", "huge-state"],
)
def test_a_session_the_journal_cannot_hold_is_refused_with_nothing_written(
    service: JournalSessionService, journal: Journal, session_id: str, state: dict[str, Any]
) -> None:
    # A session id or a session state the journal refuses must not leave the app's or the
    # user's state changed, nor a name in the directories: the create writes nothing.
    async def go() -> None:
        with pytest.raises((InvalidEvent, PayloadTooLarge)):
            await service.create_session(
                app_name=APP, user_id=USER, session_id=session_id, state=state
            )
        assert await service.get_user_state(app_name=APP, user_id=USER) == {}
        assert (await service.list_sessions(app_name=APP)).sessions == []

    run(go())
    assert all_events(journal) == []


def test_state_keys_must_be_strings(service: JournalSessionService, journal: Journal) -> None:
    async def go() -> None:
        with pytest.raises(InvalidArgument):
            await service.create_session(app_name=APP, user_id=USER, state={1: "one"})  # type: ignore[dict-item]

    run(go())
    assert all_events(journal) == []


def test_a_creation_cut_short_after_its_first_write_is_no_session_until_created_again(
    service: JournalSessionService, journal: Journal
) -> None:
    # `create_session` writes the session, pending, then in one transaction its opening, its
    # listing and the `app:` and `user:` state it sets. The first write alone (a crash in
    # between) is no session and changes no state; creating it again finishes it, once.
    state = {"k": 1, "app:a": 2, "user:u": 3}
    jid = journal_id("session", APP, USER, "s")
    metadata = session_metadata(APP, USER, "s", 1.0, {"k": 1})
    journal.create_session("s", session_id=jid, metadata=metadata)  # the first write only

    async def go() -> None:
        assert await service.get_session(app_name=APP, user_id=USER, session_id="s") is None
        assert (await service.list_sessions(app_name=APP)).sessions == []
        assert await service.get_user_state(app_name=APP, user_id=USER) == {}
        stray = Session(id="s", app_name=APP, user_id=USER)
        with pytest.raises(SessionNotFoundError):
            await service.append_event(stray, text_event("user", "hi", at=2.0))
        with pytest.raises(AlreadyExistsError):  # another creation's, as far as it can tell
            await service.create_session(app_name=APP, user_id=USER, session_id="s", state={"k": 2})
        made = await service.create_session(app_name=APP, user_id=USER, session_id="s", state=state)
        assert made.state == state
        with pytest.raises(AlreadyExistsError):
            await service.create_session(app_name=APP, user_id=USER, session_id="s", state=state)
        got = await service.get_session(app_name=APP, user_id=USER, session_id="s")
        assert got is not None
        assert (got.state, got.events) == (state, [])
        assert [s.id for s in (await service.list_sessions(app_name=APP)).sessions] == ["s"]
        await service.append_event(made, text_event("user", "hi", at=2.0))

    run(go())


def test_a_creation_whose_shared_state_is_refused_leaves_nothing(journal_url: str) -> None:
    # The second write refused (the app's state grown past the payload limit): no session, no
    # listing, no state; the first write is taken back.
    with Journal.open(journal_url, max_payload_bytes=4096) as journal:
        service = JournalSessionService(journal)

        async def go() -> None:
            await service.create_session(
                app_name=APP, user_id=USER, session_id="a", state={"app:big": "x" * 3000}
            )
            with pytest.raises(PayloadTooLarge):
                await service.create_session(
                    app_name=APP, user_id=USER, session_id="b", state={"app:more": "y" * 3000}
                )
            assert await service.get_session(app_name=APP, user_id=USER, session_id="b") is None
            assert [s.id for s in (await service.list_sessions(app_name=APP)).sessions] == ["a"]
            got = await service.get_session(app_name=APP, user_id=USER, session_id="a")
            assert got is not None
            assert got.state == {"app:big": "x" * 3000}
            # The id is free: created with a state the journal holds, it is a session.
            await service.create_session(app_name=APP, user_id=USER, session_id="b")

        run(go())


def test_a_session_created_while_a_delete_finishes_stays_listed(
    journal: Journal, monkeypatch: pytest.MonkeyPatch
) -> None:
    # `delete_session` purges, then takes the name off its user's directory. A session of the
    # same id created in between (another client, say) must be found by `list_sessions` too.
    deleter, creator = JournalSessionService(journal), JournalSessionService(journal)
    purge = journal.purge_session

    def purge_then_create(session_id: str, **kwargs: Any) -> int:
        purged = purge(session_id, **kwargs)
        asyncio.run(creator.create_session(app_name=APP, user_id=USER, session_id="s"))
        return purged

    async def go() -> None:
        await deleter.create_session(app_name=APP, user_id=USER, session_id="s")
        monkeypatch.setattr(journal, "purge_session", purge_then_create)
        await deleter.delete_session(app_name=APP, user_id=USER, session_id="s")
        monkeypatch.undo()
        assert await deleter.get_session(app_name=APP, user_id=USER, session_id="s") is not None
        assert [s.id for s in (await deleter.list_sessions(app_name=APP)).sessions] == ["s"]
        assert [
            s.id for s in (await deleter.list_sessions(app_name=APP, user_id=USER)).sessions
        ] == ["s"]

    run(go())


def test_concurrent_creates_deletes_and_appends_keep_the_lists_true(journal_url: str) -> None:
    # Services over three journals of one database create, delete, read and append to two
    # sessions at once. Whatever the interleaving, every call ends in a result or ADK's own
    # error, and afterwards the sessions listed are exactly those that exist.
    outcomes: set[str] = set()

    async def worker(service: JournalSessionService, seed: int) -> None:
        rng = random.Random(seed)
        for turn in range(30):
            sid = rng.choice(["s1", "s2"])
            verb = rng.choice(["create", "create", "append", "append", "delete"])
            try:
                if verb == "create":
                    await service.create_session(
                        app_name=APP, user_id=USER, session_id=sid, state={"app:by": seed}
                    )
                elif verb == "delete":
                    await service.delete_session(app_name=APP, user_id=USER, session_id=sid)
                else:
                    got = await service.get_session(app_name=APP, user_id=USER, session_id=sid)
                    if got is not None:
                        event = text_event("user", f"{seed}.{turn}", at=float(turn), k=turn)
                        await service.append_event(got, event)
                outcomes.add(f"{verb} ok")
            except (AlreadyExistsError, SessionNotFoundError, StaleSessionError) as exc:
                outcomes.add(f"{verb} {type(exc).__name__}")

    journals = [Journal.open(journal_url) for _ in range(3)]
    try:
        services = [JournalSessionService(j) for j in journals]

        async def go() -> None:
            await asyncio.gather(*(worker(services[i % 3], i) for i in range(6)))
            service = services[0]
            listed = {s.id for s in (await service.list_sessions(app_name=APP)).sessions}
            there = {
                sid
                for sid in ("s1", "s2")
                if await service.get_session(app_name=APP, user_id=USER, session_id=sid)
            }
            assert listed == there

        run(go())
        assert journals[0].verify().ok
    finally:
        for j in journals:
            j.close()
    assert "create ok" in outcomes
    assert "delete ok" in outcomes


def test_a_delete_before_a_users_first_session_leaves_the_user_listed(journal_url: str) -> None:
    # A creation refused after its user's (empty) directory was made, then a delete of that id:
    # the user's first session made afterwards must still list the user in the app.
    with Journal.open(journal_url, max_payload_bytes=4096) as journal:
        service = JournalSessionService(journal)

        async def go() -> None:
            with pytest.raises(PayloadTooLarge):
                await service.create_session(
                    app_name=APP, user_id=USER, session_id="s", state={"app:x": "x" * 4100}
                )
            await service.delete_session(app_name=APP, user_id=USER, session_id="s")
            await service.create_session(app_name=APP, user_id=USER, session_id="t")
            assert [s.id for s in (await service.list_sessions(app_name=APP)).sessions] == ["t"]

        run(go())
