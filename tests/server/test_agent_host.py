"""`AgentHost.stop`: a turn whose model stalls cannot hold a server's shutdown. After the grace
period the turn is abandoned (its model call stops, nothing half-written is journaled) and stays
open, and the next start finishes it, as after a crash."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from agentjournal import Journal, TurnAbandoned
from agentjournal.demo.order_agent import FALLBACK, SCRIPTS, build
from agentjournal.runtime import Agent, ScriptedModel
from agentjournal.runtime.streaming import ModelChunk
from agentjournal.server.agent_host import AgentHost
from agentjournal.server.turn_frames import TurnLog

GREETING = SCRIPTS["你好"].reply


def demo_agent(model: ScriptedModel) -> Agent:
    return Agent(model, list(build().tools.values()), name="demo")


def test_stop_abandons_a_stalled_turn_and_the_next_start_finishes_it(tmp_path: Path) -> None:
    async def stall_at_fourth(number: int, chunk: ModelChunk) -> None:
        if number == 3:
            await asyncio.Event().wait()  # never set: only stopping ends this call

    path = tmp_path / "host.db"
    stalling = demo_agent(ScriptedModel(SCRIPTS, FALLBACK, on_chunk=stall_at_fourth))
    with Journal.open(path) as journal:
        session_id = stalling.create_session(journal, "s").session_id
        host = AgentHost(stalling, journal)
        host.start()

        async def run() -> None:
            began: asyncio.Future[TurnLog] = asyncio.get_running_loop().create_future()
            loop = asyncio.get_running_loop()
            turn = host.run_turn(
                journal,
                session_id,
                "你好",
                None,
                started=lambda log: loop.call_soon_threadsafe(began.set_result, log),
            )
            log = await began
            while len(log.frames) < 4:  # the user message and three deltas, then the stall
                await asyncio.sleep(0.01)
            await asyncio.to_thread(host.stop, 0.1)  # returns: the turn no longer holds it
            with pytest.raises(TurnAbandoned):
                await turn
            assert log.ended
            assert log.frames[-1].event == "error"
            assert '"status":503' in log.frames[-1].data

        asyncio.run(run())
        assert [e.type for e in journal.events(session_id, after=1)] == ["user_message"]
        assert journal.get_session(session_id).turn_open is True

    with Journal.open(path) as journal:  # the next start resumes the open turn
        host = AgentHost(demo_agent(ScriptedModel(SCRIPTS, FALLBACK)), journal)
        host.start()
        host.stop()
        assert journal.events(session_id, after=2)[-1].payload == {"content": GREETING}
        assert journal.get_session(session_id).turn_open is False
