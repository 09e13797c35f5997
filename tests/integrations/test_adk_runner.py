"""A real ADK `Runner` and `LlmAgent` with `JournalSessionService`, offline (tests/helpers/
adk_model.py): several turns with a function tool that writes `user:` and session state, the
same conversation as ADK's own `InMemorySessionService` gives, continued after the service is
reopened, and shown by the journal as a conversation of its own events. Both backends."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

pytest.importorskip("google.adk")

from google.adk.agents import LlmAgent
from google.adk.errors import StaleSessionError
from google.adk.runners import Runner
from google.adk.sessions import BaseSessionService, InMemorySessionService
from google.adk.tools.tool_context import ToolContext

from agentjournal import Journal
from agentjournal.integrations.adk import JournalSessionService
from agentjournal.integrations.adk_events import journal_id
from helpers.adk_model import ScriptedLlm, texts_of, user_text
from postgres_fixtures import POOL_RANDOM

pytestmark = POOL_RANDOM  # see postgres_fixtures.POOL_RANDOM

APP, USER = "shop", "user-42"
TURNS = [
    "hello",
    'use count_orders {"status": "open"}',
    'use count_orders {"status": "shipped"}',
    "thanks",
]


def count_orders(status: str, tool_context: ToolContext) -> dict[str, Any]:
    """Count the user's orders in a status."""
    tool_context.state["user:last_status"] = status
    tool_context.state["asked"] = tool_context.state.get("asked", 0) + 1
    tool_context.state["temp:scratch"] = status
    return {"status": status, "count": 42 if status == "open" else 7}


def agent(model: ScriptedLlm) -> LlmAgent:
    return LlmAgent(
        name="shop_agent",
        model=model,
        instruction="Answer questions about orders.",
        tools=[count_orders],
        output_key="last_reply",
    )


async def converse(service: BaseSessionService, turns: list[str]) -> list[Any]:
    runner = Runner(app_name=APP, agent=agent(ScriptedLlm()), session_service=service)
    seen: list[Any] = []
    for text in turns:
        async for event in runner.run_async(
            user_id=USER, session_id="s", new_message=user_text(text)
        ):
            seen.append(event)
    return seen


def shape(events: list[Any]) -> list[tuple[Any, ...]]:
    """What a conversation says, without the ids and times each run draws anew."""
    return [
        (
            event.author,
            event.content.model_dump(mode="json", exclude_none=True) if event.content else None,
            dict(event.actions.state_delta),
        )
        for event in events
    ]


def test_a_runner_over_several_turns_with_a_tool(journal: Journal, journal_url: str) -> None:
    async def go() -> None:
        service = JournalSessionService(journal)
        await service.create_session(app_name=APP, user_id=USER, session_id="s")
        yielded = await converse(service, TURNS)
        stored = await service.get_session(app_name=APP, user_id=USER, session_id="s")
        assert stored is not None
        # Everything the runner yielded is stored (the user's messages too), in order.
        ids = [event.id for event in stored.events]
        assert [event.id for event in yielded] == [i for i in ids if i in {e.id for e in yielded}]
        assert texts_of(stored.events) == [
            "hello",
            "#1: hello",
            'use count_orders {"status": "open"}',
            'count_orders says {"count": 42, "status": "open"}',
            'use count_orders {"status": "shipped"}',
            'count_orders says {"count": 7, "status": "shipped"}',
            "thanks",
            "#4: thanks",
        ]
        assert stored.state == {
            "user:last_status": "shipped",
            "asked": 2,
            "last_reply": "#4: thanks",
        }
        # The same conversation through ADK's own in-memory service.
        memory = InMemorySessionService()
        await memory.create_session(app_name=APP, user_id=USER, session_id="s")
        await converse(memory, TURNS)
        theirs = await memory.get_session(app_name=APP, user_id=USER, session_id="s")
        assert theirs is not None
        assert shape(stored.events) == shape(theirs.events)
        assert stored.state == theirs.state

        # Reopened, the conversation goes on with its history and state.
        async with JournalSessionService.open(journal_url) as again:
            await converse(again, ["and now?"])
            later = await again.get_session(app_name=APP, user_id=USER, session_id="s")
            assert later is not None
            assert texts_of(later.events)[-2:] == ["and now?", "#5: and now?"]
            assert later.events[: len(stored.events)] == stored.events
            assert await again.get_user_state(app_name=APP, user_id=USER) == {
                "last_status": "shipped"
            }

    asyncio.run(go())
    jid = journal_id("session", APP, USER, "s")
    replayed = journal.replay(jid)
    assert [m["role"] for m in replayed] == [
        *["user", "assistant"],
        *["user", "assistant", "tool", "assistant"],
        *["user", "assistant", "tool", "assistant"],
        *["user", "assistant"],
        *["user", "assistant"],
    ]
    assert replayed[3]["tool_calls"][0]["function"] == {
        "name": "count_orders",
        "arguments": '{"status": "open"}',
    }
    assert [c.status for c in journal.tool_calls(jid)] == ["ok", "ok"]
    assert journal.verify().ok


def test_two_runners_on_one_session_keep_every_event_in_order(journal: Journal) -> None:
    """Two runners of the same agent take turns on one session at the same time. ADK's rule
    is `DatabaseSessionService`'s: a runner whose session was appended to since it read it gets
    `StaleSessionError` and runs the turn again; every event a runner yielded is stored, in the
    order it yielded them."""

    async def go() -> None:
        service = JournalSessionService(journal)
        await service.create_session(app_name=APP, user_id=USER, session_id="s")
        yielded: dict[str, list[str]] = {"a": [], "b": []}

        async def runner(name: str) -> None:
            run = Runner(app_name=APP, agent=agent(ScriptedLlm()), session_service=service)
            for i, text in enumerate(TURNS):
                while True:
                    try:
                        async for event in run.run_async(
                            user_id=USER, session_id="s", new_message=user_text(f"{name}{i} {text}")
                        ):
                            yielded[name].append(event.id)
                    except StaleSessionError:
                        continue  # read the session again: a new run of the turn
                    break

        await asyncio.gather(runner("a"), runner("b"))
        stored = await service.get_session(app_name=APP, user_id=USER, session_id="s")
        assert stored is not None
        ids = [event.id for event in stored.events]
        for name in ("a", "b"):
            assert yielded[name], name
            assert [i for i in ids if i in set(yielded[name])] == yielded[name]
        said = texts_of(stored.events)
        for name in ("a", "b"):
            for i, text in enumerate(TURNS):
                assert f"{name}{i} {text}" in said

    asyncio.run(go())
    assert journal.verify().ok
