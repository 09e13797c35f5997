"""The inspector shows a reply being written: on a server running an agent whose model stalls
after five characters, the open session's turn shows exactly those five characters live below
the timeline; a cancel journals them as the interrupted reply, which takes the draft's place."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from browsing import Browsing, BrowsingFactory
from playwright.sync_api import expect

from agentjournal.demo.order_agent import SCRIPTS
from server.conftest import RunningServer, launch

GREETING = SCRIPTS["你好"].reply
SERVER_TESTS = Path(__file__).parent.parent / "server"  # agents_for_tests lives there


@pytest.fixture(scope="module")
def agent_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    path = os.pathsep.join(p for p in (str(SERVER_TESTS), os.environ.get("PYTHONPATH", "")) if p)
    running = launch(
        tmp_path_factory.mktemp("inspector-draft") / "journal.db",
        "--agent",
        "agents_for_tests:scripted",
        env={"PYTHONPATH": path, "AGENTJOURNAL_TEST_STALL_AT": "5"},
    )
    yield running
    running.stop()


def test_the_reply_being_written_shows_live_and_gives_way_to_the_journaled_one(
    browsing_factory: BrowsingFactory, agent_server: RunningServer
) -> None:
    inspector: Browsing = browsing_factory(agent_server)
    with httpx.Client(base_url=agent_server.base_url, timeout=10.0) as http:
        created = http.post("/v1/sessions", json={"title": "draft", "metadata": {"agent": "demo"}})
        session_id = created.json()["session_id"]
        page = inspector.open(session_id)
        expect(page.locator("#live-state")).to_have_text("Live")

        # The turn runs on a thread of ours: its request answers when the turn ends.
        answered: list[Any] = []
        turn = threading.Thread(
            target=lambda: answered.append(
                http.post(f"/v1/sessions/{session_id}/turns", json={"content": "你好"})
            )
        )
        turn.start()
        draft = page.get_by_role("status", name="The reply being written")
        expect(draft).to_have_text(GREETING[:5])  # the model stalls after five characters
        expect(page.locator("#timeline")).not_to_contain_text(GREETING[:5])

        cancelled = http.post(f"/v1/sessions/{session_id}/turns/2/cancel")
        assert cancelled.status_code == 200, cancelled.text
        assert cancelled.json()["event"]["payload"] == {
            "content": GREETING[:5],
            "interrupted": True,
        }
        turn.join()
        assert answered[0].status_code == 201
        # The journaled reply is in the timeline; the draft is gone.
        expect(page.locator("#timeline")).to_contain_text(GREETING[:5])
        expect(page.locator("#draft")).to_be_hidden()


def test_a_turn_running_when_the_session_opens_shows_its_reply_so_far(
    browsing_factory: BrowsingFactory, agent_server: RunningServer
) -> None:
    inspector: Browsing = browsing_factory(agent_server)
    with httpx.Client(base_url=agent_server.base_url, timeout=10.0) as http:
        body = {"title": "running", "metadata": {"agent": "demo"}}
        session_id = http.post("/v1/sessions", json=body).json()["session_id"]
        answered: list[Any] = []
        turn = threading.Thread(
            target=lambda: answered.append(
                http.post(f"/v1/sessions/{session_id}/turns", json={"content": "你好"})
            )
        )
        turn.start()
        # The page opens after the turn started (its user_message is journaled, the model
        # stalls after five characters): the draft starts from the turn's first frame.
        for _ in range(200):  # bounded: until the turn's user_message is journaled
            if http.get(f"/v1/sessions/{session_id}").json()["turn_open"]:
                break
            time.sleep(0.05)
        page = inspector.open(session_id)
        draft = page.get_by_role("status", name="The reply being written")
        expect(draft).to_have_text(GREETING[:5])
        cancelled = http.post(f"/v1/sessions/{session_id}/turns/2/cancel")
        assert cancelled.status_code == 200, cancelled.text
        turn.join()
        assert answered[0].status_code == 201
        expect(page.locator("#timeline")).to_contain_text(GREETING[:5])
        expect(page.locator("#draft")).to_be_hidden()
