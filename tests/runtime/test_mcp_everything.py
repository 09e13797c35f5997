"""The runtime against `@modelcontextprotocol/server-everything`, the MCP project's reference test
server (TypeScript, from npm, run with node over stdio): a turn of several steps through its
tools (text, a sum, an image, structured content, an embedded resource, a refused argument),
then an agent process SIGKILLed while one of its calls runs, and the turn finished after the
restart without running that call again."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from agentjournal import Journal
from agentjournal.runtime import (
    Agent,
    MCPServer,
    ModelReply,
    RequestedCall,
    Script,
    ScriptedModel,
    Tool,
    resume_incomplete,
)
from agentjournal.runtime.agent import ERROR_PREFIX, INTERRUPTED
from npm_packages import package_dir

WAIT = 120.0  # seconds before the test fails instead of hanging
# A call still running when the process is killed (its server, orphaned, ends when it does).
LONG = {"duration": 10, "steps": 2}

CHILD = """
import sys
sys.path[:0] = sys.argv[1:3]
from test_mcp_everything import build
from agentjournal import Journal

agent = build(sys.argv[3])
with Journal.open(sys.argv[4]) as journal:
    sid = agent.create_session(journal).session_id
    print(sid, flush=True)
    agent.run_turn(journal, sid, "run the long job")
"""


def everything(entry: str) -> MCPServer:
    return MCPServer("everything", command="node", args=[entry, "stdio"], timeout=60)


def entry_point() -> str:
    return str(package_dir("@modelcontextprotocol/server-everything") / "dist" / "index.js")


def build(entry: str) -> Agent:
    scripts = {
        "run the long job": Script(
            "job: {result}", tool="everything__trigger-long-running-operation", arguments=LONG
        ),
        "echo": Script("{result}", tool="everything__echo", arguments={"message": "still here"}),
    }
    return Agent(ScriptedModel(scripts, "?"), name="everything", mcp_servers=[everything(entry)])


class PlanModel:
    """Calls the planned tools one step at a time, then answers with the results it read."""

    def __init__(self, plan: Sequence[tuple[str, dict[str, Any]]]) -> None:
        self.plan = list(plan)

    def complete(self, messages: list[dict[str, Any]], tools: Sequence[Tool]) -> ModelReply:
        last_user = max(i for i, m in enumerate(messages) if m["role"] == "user")
        results = [m["content"] for m in messages[last_user:] if m["role"] == "tool"]
        if len(results) < len(self.plan):
            name, arguments = self.plan[len(results)]
            call = RequestedCall(f"step_{len(results) + 1}", name, json.dumps(arguments))
            return ModelReply(tool_calls=(call,))
        return ModelReply(json.dumps(results))


def test_a_turn_of_several_steps_through_the_everything_server(tmp_path: Path) -> None:
    plan = [
        ("everything__echo", {"message": "hello"}),
        ("everything__get-sum", {"a": 2, "b": 3}),
        ("everything__get-tiny-image", {}),
        ("everything__get-structured-content", {"location": "New York"}),
        ("everything__get-resource-reference", {"resourceType": "Text", "resourceId": 1}),
        ("everything__get-sum", {"a": "two"}),
    ]
    agent = Agent(PlanModel(plan), mcp_servers=[everything(entry_point())])
    try:
        with Journal.open(tmp_path / "journal.db") as journal:
            sid = agent.create_session(journal).session_id
            turn = agent.run_turn(journal, sid, "use them all")
            calls = journal.tool_calls(sid)
            assert journal.verify().ok
        offered = set(agent.offered_tools())
    finally:
        agent.close()
    echo, total, image, weather, resource, refused = json.loads(turn.reply)
    assert echo == "Echo: hello"
    assert total == "The sum of 2 and 3 is 5."
    assert "[image image/png, " in image
    assert json.loads(weather).keys() == {"temperature", "conditions", "humidity"}
    assert "Resource 1" in resource
    assert refused.startswith(ERROR_PREFIX)
    assert "expected number" in refused
    assert [c.status for c in calls] == ["ok"] * 5 + ["error"]
    assert {"everything__echo", "everything__trigger-long-running-operation"} <= offered


@pytest.mark.slow
def test_an_agent_killed_mid_call_finishes_the_turn_without_running_it_again(
    tmp_path: Path,
) -> None:
    entry = entry_point()
    db = tmp_path / "journal.db"
    here, tests = str(Path(__file__).parent), str(Path(__file__).parent.parent)
    with subprocess.Popen(
        [sys.executable, "-c", CHILD, here, tests, entry, str(db)],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env=os.environ.copy(),
    ) as child:
        assert child.stdout is not None
        sid = child.stdout.readline().strip()
        deadline = time.monotonic() + WAIT
        with Journal.open(db) as journal:
            while not journal.tool_calls(sid, open_only=True):  # the call is out, not answered
                assert child.poll() is None
                assert time.monotonic() < deadline
                time.sleep(0.05)
            child.send_signal(signal.SIGKILL)
            assert child.wait(WAIT) == -signal.SIGKILL
            [cut] = journal.tool_calls(sid, open_only=True)  # killed before the answer
            assert cut.name == "everything__trigger-long-running-operation"

            agent = build(entry)
            try:
                report = resume_incomplete(journal, [agent])
                [finished] = report.finished
                assert finished.reply == f"job: {INTERRUPTED}"
                assert journal.tool_calls(sid, open_only=True) == []
                # The server the new process started serves the session's next turn.
                assert agent.run_turn(journal, sid, "echo").reply == "Echo: still here"
            finally:
                agent.close()
            assert journal.verify().ok
