"""An agent process SIGKILLed between an MCP tool's call and its result, on every backend.

A child process runs one turn whose tool is on the ledger server (mcp_ledger_server.py, started
by the child over stdio). The server syncs its side effect (a ledger line), then SIGKILLs the
child before it answers: the `tool_call` is journaled, the effect done, the result never
arrives. The parent then builds the same agent (same server, without the kill) and resumes:
the turn finishes, a tool that is not idempotent is not run again (the model reads that it was
interrupted; the ledger has one line), one declared idempotent runs again to a real result.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from agentjournal import Journal
from agentjournal.runtime import Agent, MCPServer, Script, ScriptedModel, resume_incomplete
from agentjournal.runtime.agent import INTERRUPTED

LEDGER_SERVER = Path(__file__).with_name("mcp_ledger_server.py")
WAIT = 120.0  # seconds the child may take before the test fails instead of hanging
ARGUMENTS = {"place_order": {"item": "book"}, "count_visit": {"page": "home"}}

CHILD = """
import sys
sys.path.insert(0, sys.argv[1])
from test_mcp_kill import build
from agentjournal import Journal

url, ledger, tool, kill = sys.argv[2:6]
agent = build(ledger, tool, kill=kill == "kill")
with Journal.open(url) as journal:
    sid = agent.create_session(journal).session_id
    print(sid, flush=True)
    agent.run_turn(journal, sid, "go")
print("the turn ended: the server did not kill this process", flush=True)
"""


def build(ledger: str, tool: str, *, kill: bool) -> Agent:
    env = {"LEDGER": ledger, **({"KILL_PARENT": tool} if kill else {})}
    server = MCPServer(
        "ledger",
        command=sys.executable,
        args=[str(LEDGER_SERVER)],
        env=env,
        idempotent={"count_visit"},
    )
    script = Script("done: {result}", tool=f"ledger__{tool}", arguments=ARGUMENTS[tool])
    return Agent(ScriptedModel({"go": script}, "?"), name="shop", mcp_servers=[server])


@pytest.mark.slow
@pytest.mark.parametrize("tool", ["place_order", "count_visit"])
def test_a_turn_killed_between_an_mcp_call_and_its_result_resumes(
    journal_url: str, tmp_path: Path, tool: str
) -> None:
    ledger = tmp_path / "ledger"
    here = str(Path(__file__).parent)
    child = subprocess.run(
        [sys.executable, "-c", CHILD, here, journal_url, str(ledger), tool, "kill"],
        capture_output=True,
        text=True,
        timeout=WAIT,
        env=os.environ.copy(),
        check=False,
    )
    assert child.returncode == -signal.SIGKILL, child.stdout + child.stderr
    sid = child.stdout.split()[0]
    assert len(ledger.read_text().splitlines()) == 1  # the effect happened, once

    agent = build(str(ledger), tool, kill=False)
    with Journal.open(journal_url) as journal:
        [cut] = journal.tool_calls(sid, open_only=True)
        assert (cut.name, cut.status) == (f"ledger__{tool}", "pending")
        try:
            report = resume_incomplete(journal, [agent])
        finally:
            agent.close()
        assert report.failed == []
        [finished] = report.finished
        assert journal.tool_calls(sid, open_only=True) == []
        assert journal.verify().ok
    effects = ledger.read_text().splitlines()
    if tool == "place_order":
        assert finished.reply == f"done: {INTERRUPTED}"
        assert effects == ["order book x1"]  # not ordered twice
    else:
        assert finished.reply == "done: visit #2 of home"  # run again, as declared
        assert effects == ["visit home", "visit home"]
